"""Linear layers pre-packed for oneDNN (``bertkit.model.prepacked``): the same float32 products as
``nn.Linear``, packed where bertkit owns the model (an export or checkpoint loaded for serving,
``bertkit predict``'s ``Prepacked`` callback) and unpacked to exactly the weights they came from before anything else
(bf16, int8, compile, training) touches the layers."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import TokenClassification
from bertkit_plugins.token_tagging.task import SAMPLE_FILES
from torch import nn

from bertkit import BertDataModule, BertModule, Prepacked
from bertkit.inference.predictor import Predictor
from bertkit.model.prepacked import PrepackedLinear, prepack_linears, prepacking_available, unprepack_linears
from bertkit.model.quantize import Int8Linear
from bertkit.training.trained import save_serving_config
from tests.test_export import tiny
from tests.test_serve import _batch

pytestmark = pytest.mark.skipif(not prepacking_available(), reason="this torch has no oneDNN")


def count(module: nn.Module, kind: type) -> int:
    return sum(type(m) is kind for m in module.modules())


def test_a_packed_linear_computes_what_the_linear_does_and_unpacks_to_it() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(48, 80)
    packed = PrepackedLinear(linear)
    assert not list(packed.parameters())
    for x in (torch.randn(5, 48), torch.randn(2, 7, 48), torch.randn(9, 48).t().contiguous().t()):
        want = linear(x)
        got = packed(x)
        assert got.shape == want.shape
        assert float((got - want).norm() / want.norm()) < 1e-6
    back = packed.unpacked()
    assert torch.equal(back.weight, linear.weight) and torch.equal(back.bias, linear.bias)


def test_packing_a_model_is_undone_exactly() -> None:
    model = tiny(SequenceClassification(labels=["neg", "pos"]))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    linears = count(model.encoder, nn.Linear)
    assert prepack_linears(model.encoder) == linears and count(model.encoder, nn.Linear) == 0
    assert unprepack_linears(model.encoder) == linears
    after = model.state_dict()
    assert after.keys() == state.keys() and all(torch.equal(after[k], v) for k, v in state.items())


def test_an_export_loads_packed_and_every_conversion_unpacks_first(tmp_path: Path) -> None:
    model = tiny(SequenceClassification(labels=["neg", "pos"]))
    model.save_pretrained(tmp_path)
    save_serving_config(model, tmp_path, 32)
    reference = Predictor.from_model(model, max_length=32)
    want = reference.forward(_batch(reference))["logits"].detach()
    linears = count(model.encoder, nn.Linear)

    packed = Predictor.load(tmp_path)
    assert count(packed.encoder, PrepackedLinear) == linears
    got = packed.forward(_batch(packed))["logits"]
    assert float((got - want).norm() / want.norm()) < 1e-5

    int8 = Predictor.load(tmp_path).to_int8()
    assert count(int8.encoder, Int8Linear) == linears and count(int8.encoder, PrepackedLinear) == 0
    bf16 = Predictor.load(tmp_path).to_bfloat16()
    assert count(bf16.encoder, PrepackedLinear) == 0
    assert {p.dtype for p in bf16.encoder.parameters()} == {torch.bfloat16}
    compiled = Predictor.load(tmp_path).compile()
    assert count(compiled.encoder, PrepackedLinear) == 0 and count(compiled.encoder, nn.Linear) == linears


def test_bertkit_predict_runs_packed_and_leaves_the_module_as_it_was() -> None:
    model = BertModule(
        TokenClassification(["PER", "LOC", "ORG", "MISC"]),
        pretrained=None,
        preset="tiny",
        vocab_file="all-MiniLM-L6-v2",
    )
    state = {k: v.clone() for k, v in model.state_dict().items()}
    batches, packed_layers = [], []

    class Watch(pl.Callback):
        def on_predict_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0) -> None:
            batches.append(batch)
            packed_layers.append(count(module.encoder, PrepackedLinear))

    trainer = pl.Trainer(logger=False, enable_progress_bar=False, callbacks=[Prepacked(), Watch()])
    data = BertDataModule(predict_file=str(SAMPLE_FILES["test"]), eval_batch_size=8)
    packed = [r for part in trainer.predict(model, datamodule=data) for r in part]
    assert packed_layers and min(packed_layers) == count(model.encoder, nn.Linear) > 0
    assert count(model.encoder, PrepackedLinear) == 0
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in state.items())
    with torch.inference_mode():
        plain = [r for i, batch in enumerate(batches) for r in model.eval().predict_step(batch, i)]
    assert packed == plain and len(packed) > 20


@pytest.mark.parametrize("int8_first", [True, False])
def test_with_int8_prediction_runs_int8_whatever_the_callbacks_order(int8_first: bool) -> None:
    """``Prepacked`` leaves layers that ``Int8`` quantizes alone, listed before it or after."""
    from bertkit import Int8

    model = BertModule(TokenClassification(["PER"]), pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2")
    linears, seen = count(model.encoder, nn.Linear), []

    class Watch(pl.Callback):
        def on_predict_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0) -> None:
            seen.append((count(module.encoder, Int8Linear), count(module.encoder, PrepackedLinear)))

    callbacks = [Int8(), Prepacked()] if int8_first else [Prepacked(), Int8()]
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, callbacks=[*callbacks, Watch()])
    trainer.predict(model, datamodule=BertDataModule(predict_file=str(SAMPLE_FILES["test"]), eval_batch_size=64))
    assert seen and set(seen) == {(linears, 0)}
