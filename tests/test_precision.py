"""Mixed precision on the CPU: every recipe trains in bf16-mixed and 16-mixed with gradient
clipping 1.0 and the fused AdamW, and clipping acts on the true (unscaled) gradients."""

from __future__ import annotations

import json
import math
import random
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.token_tagging import TokenClassification
from bertkit_plugins.token_tagging.conll import Sentence
from pytorch_lightning.plugins import MixedPrecision

from bertkit import BertModule, compose
from bertkit.data.collate import pad_batch
from bertkit.utils.precision import native_bf16
from tests.conftest import RECIPE, ROOT, run_bertkit
from tests.test_classification_train import write_smoke_data
from tests.test_qa_train import toy_squad

PRECISIONS = ["32-true", "bf16-mixed", "16-mixed"]
QUIET = {
    "trainer.max_steps": 2, "trainer.limit_val_batches": 1, "trainer.logger": False, "trainer.callbacks": [],
    "trainer.enable_checkpointing": False, "trainer.enable_progress_bar": False, "trainer.enable_model_summary": False,
}  # fmt: skip


def precision_args(precision: str) -> dict:
    """Trainer arguments for ``precision`` on this CPU. Lightning turns 16-mixed into bf16-mixed on
    a CPU; the plugin given explicitly keeps fp16 autocast and its GradScaler, as on a GPU."""
    if precision == "16-mixed":
        return {"plugins": [MixedPrecision("16-mixed", "cpu")]}
    return {"precision": precision}


class LossLog(pl.Callback):
    """Training losses, to check they are finite."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def _recipe_overrides(recipe: str, directory: Path) -> dict:
    if recipe == "sst2":
        write_smoke_data("sst2", directory)
        return {"data.data_dir": str(directory), "data.batch_size": 8}
    if recipe == "squad":
        rng = random.Random(0)
        for name in ("train-v1.1.json", "dev-v1.1.json"):
            (directory / name).write_text(json.dumps(toy_squad(8, rng)))
        return {"data.data_dir": str(directory), "data.batch_size": 4, "model.max_length": 64}
    if recipe == "pretrain_bert":
        return {"model.preset": "tiny", "trainer.val_check_interval": 2}
    return {"data.batch_size": 8}  # ner: the bundled sample


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["ner", "sst2", "squad", "pretrain_bert"])
def test_every_recipe_trains_in_bf16_with_clipping(recipe, tmp_path, monkeypatch):
    """(``--trainer.precision 16-mixed`` on a CPU is bf16-mixed in Lightning; fp16 with its scaler is
    tested below through the explicit plugin.)"""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    overrides = {**QUIET, **_recipe_overrides(recipe, tmp_path), "trainer.precision": "bf16-mixed"}
    run = compose(ROOT / "recipes" / f"{recipe}.yaml", overrides=overrides)
    assert run.trainer.gradient_clip_val == 1.0
    log = LossLog()
    run.trainer.callbacks.append(log)
    run.trainer.fit(run.model, datamodule=run.datamodule)
    assert run.trainer.global_step == 2 and len(log.losses) == 2
    assert all(math.isfinite(x) for x in log.losses), log.losses
    scores = run.trainer.validate(run.model, datamodule=run.datamodule, verbose=False)[0]
    assert scores and all(math.isfinite(v) for v in scores.values()), scores


@pytest.mark.slow
def test_bf16_from_the_command_line(tmp_path):
    """The crash the GPU issue reported: `--trainer.precision bf16-mixed` with clipping and fused AdamW."""
    run_bertkit(
        "fit", "--config", str(RECIPE), "--trainer.precision=bf16-mixed", "--trainer.max_steps=2",
        "--trainer.limit_val_batches=1", "--trainer.enable_progress_bar=false", "--data.batch_size=8", cwd=tmp_path,
    )  # fmt: skip
    assert (tmp_path / "runs" / "ner" / "checkpoints" / "last.ckpt").is_file()


class ClipRecorder(BertModule):
    """Records the gradient norm before and after ``configure_gradient_clipping``."""

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        scale = scaler.get_scale() if scaler is not None and optimizer.defaults.get("fused") else 1.0
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        self.norms_before.append(torch.nn.utils.get_total_norm([p.grad for p in params]).item() / scale)
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        self.norms_after.append(torch.nn.utils.get_total_norm([p.grad for p in params]).item())
        self.clipped.append(torch.cat([p.grad.flatten().float() for p in params]))


def _clip_run(precision: str, vocab: str) -> ClipRecorder:
    pl.seed_everything(0)
    model = ClipRecorder(
        TokenClassification(["PER"]), pretrained=None, preset="tiny", vocab_file=vocab, learning_rate=1e-3
    )
    model.norms_before, model.norms_after, model.clipped = [], [], []
    sentences = [Sentence(["Marta", "met", "Tomas", "today"], ["B-PER", "O", "B-PER", "O"], "mem:1", [1, 2, 3, 4])] * 4
    batch = pad_batch(model.task.featurize(sentences, model.tokenizer, 16), model.tokenizer.pad_token_id)
    loader = torch.utils.data.DataLoader([batch], batch_size=None)
    trainer = pl.Trainer(
        max_steps=1, gradient_clip_val=0.05, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, **precision_args(precision),
    )  # fmt: skip
    trainer.fit(model, train_dataloaders=loader)
    state = trainer.optimizers[0].state.values()
    model.first_moment = torch.nn.utils.get_total_norm([s["exp_avg"] for s in state]).item()
    return model


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_clipping_acts_on_true_gradients(precision, minilm_dir):
    """Under 16-mixed the loss is scaled (2^16); the fused AdamW would unscale inside its step.
    The gradients must be unscaled before clipping, so after it they have the clip norm and point
    the way the fp32 gradients do."""
    vocab = str(minilm_dir / "vocab.txt")
    reference, mixed = _clip_run("32-true", vocab), _clip_run(precision, vocab)
    assert (mixed.trainer.precision_plugin.scaler is not None) == (precision == "16-mixed")
    assert reference.norms_before[0] > 0.05 and mixed.norms_before[0] > 0.05  # clipping really acts
    assert mixed.norms_after[0] == pytest.approx(0.05, rel=1e-3)
    assert reference.norms_after[0] == pytest.approx(0.05, rel=1e-3)
    cosine = torch.nn.functional.cosine_similarity(reference.clipped[0], mixed.clipped[0], dim=0)
    assert cosine > 0.99, cosine
    # what the optimizer stepped with: Adam's first moment after one step is (1 - beta1) * gradient
    assert mixed.first_moment == pytest.approx(0.1 * 0.05, rel=1e-3)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_unpadded_and_padded_train_alike(precision, minilm_dir):
    """One optimizer step with clipping on either encoder path ends at the same parameters (up to
    the precision's rounding)."""
    vocab = str(minilm_dir / "vocab.txt")
    states = []
    for unpad in (True, False):
        pl.seed_everything(0)
        model = BertModule(TokenClassification(["PER"]), pretrained=None, preset="tiny", vocab_file=vocab, unpad=unpad)
        model.encoder.config.hidden_dropout_prob = 0.0
        for module in model.modules():  # no dropout: the two paths draw their masks differently
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        for block in model.encoder.encoder.layer:
            block.attention.self.dropout_p = 0.0
        sentences = [Sentence(["Ana", "met", "Bo", "in", "Rome"], ["B-PER", "O", "B-PER", "O", "O"], "m:1", [1] * 5),
                     Sentence(["Hi"], ["O"], "m:2", [2])]  # fmt: skip
        batch = pad_batch(model.task.featurize(sentences, model.tokenizer, 16), model.tokenizer.pad_token_id)
        trainer = pl.Trainer(
            max_steps=1, gradient_clip_val=1.0, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, **precision_args(precision),
        )  # fmt: skip
        trainer.fit(model, train_dataloaders=torch.utils.data.DataLoader([batch], batch_size=None))
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    tolerance = 1e-6 if precision == "32-true" else 1e-4
    assert max((states[0][k] - states[1][k]).abs().max().item() for k in states[0]) <= tolerance


@pytest.mark.slow
def test_gpu_overlay_composes_with_a_recipe(tmp_path, monkeypatch):
    """`--config recipes/gpu.yaml` after any recipe: bf16-mixed, workers; it trains here too."""
    monkeypatch.chdir(tmp_path)
    overrides = {**QUIET, "data.batch_size": 8}
    run = compose(ROOT / "recipes" / "ner.yaml", ROOT / "recipes" / "gpu.yaml", overrides=overrides)
    assert run.trainer.precision == "bf16-mixed" and run.datamodule.hparams.num_workers == 2
    assert run.model.hparams.unpad and run.trainer.gradient_clip_val == 1.0
    run.trainer.fit(run.model, datamodule=run.datamodule)
    assert run.trainer.global_step == 2


@pytest.mark.parametrize("native", [True, False])
def test_bf16_on_a_cpu_warns_only_where_it_is_emulated(native, minilm_dir, monkeypatch):
    """bf16-mixed is worth it on a CPU with native bf16 (AVX512-BF16, AMX) and slower than fp32 on
    one without: the warning says so only there."""
    monkeypatch.setattr("bertkit.training.module.native_bf16", lambda device: native)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _clip_run("bf16-mixed", str(minilm_dir / "vocab.txt"))
    emulated = [w for w in caught if "without native support" in str(w.message)]
    assert len(emulated) == (0 if native else 1), [str(w.message) for w in caught]


def test_native_bf16_is_false_where_torch_has_no_probe():
    assert native_bf16("meta") is False
    assert isinstance(native_bf16("cpu"), bool)
