"""The encoder's linear layers made faster for inference, as Lightning callbacks: ``Int8`` (int8
weights, ``bertkit validate|test|predict --int8 true``) and ``Prepacked`` (float32 weights blocked
for oneDNN, which ``bertkit predict`` and ``Composed.predict`` add). Each replaces layers of the
trained model after its checkpoint is loaded; neither takes part in ``fit``."""

from __future__ import annotations

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.utilities import rank_zero_info
from typing_extensions import override

from bertkit.model.prepacked import prepack_linears, unprepack_linears
from bertkit.model.quantize import Int8Linear, quantize_linears


def _quantized(module: pl.LightningModule) -> bool:
    return any(isinstance(m, Int8Linear) for m in module.encoder.modules())


class Int8(Callback):
    """Run the encoder's linear layers in int8 in ``validate``, ``test`` and ``predict``
    (``bertkit.model.quantize``, as ``Predictor.to_int8``: CPU only; embeddings, attention,
    LayerNorm and the head stay float32). ``bertkit test --int8 true`` adds it and measures the
    score int8 changes on your data; in Python, ``Trainer(callbacks=[bertkit.Int8()])``.

    Raises:
        ValueError: at ``setup``, in ``fit`` (int8 layers have no gradient), or for a model with
            ``model.compile`` or ``model.adapter``.
    """

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            raise ValueError(
                "--int8 true (bertkit.Int8) is for validate, test and predict (int8 layers have no gradient): "
                "leave it out to fit"
            )
        if pl_module.hparams.get("compile"):
            raise ValueError("--int8 true and model.compile: choose one (int8 replaces the layers compile would fuse)")
        if pl_module.hparams.get("adapter"):
            raise ValueError(
                "--int8 true with model.adapter: export the merged model (bertkit export) and run that in int8"
            )

    @staticmethod
    def _quantize(pl_module: pl.LightningModule) -> None:
        """Once, after the checkpoint's weights are loaded."""
        if not _quantized(pl_module):
            replaced = quantize_linears(pl_module.encoder)
            rank_zero_info(f"int8: {replaced} linear layers of the encoder run in int8")

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._quantize(pl_module)

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._quantize(pl_module)

    @override
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._quantize(pl_module)


class Prepacked(Callback):
    """In ``predict``, in float32 on the CPU, the encoder's linear layers pre-packed for oneDNN
    (``bertkit.model.prepacked``: the same values, faster products) until predict ends, when the
    module is as it was. Not with ``Int8`` (its layers are int8) nor another precision."""

    @override
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        int8 = _quantized(pl_module) or any(isinstance(c, Int8) for c in trainer.callbacks)  # in either order
        if not int8 and str(trainer.precision) in ("32-true", "32"):
            prepack_linears(pl_module.encoder)

    @override
    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        unprepack_linears(pl_module.encoder)
