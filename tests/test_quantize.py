"""int8 inference (``bertkit.model.quantize``, ``Predictor.to_int8``): weights quantized per output
channel, inputs per call, every linear layer of the encoder replaced (BERT's joined q/k/v
projection and ModernBERT's included), answers within int8's error of float32, and the
combinations that cannot work refused with a message."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import TokenClassification
from torch import nn

from bertkit import BertModule
from bertkit.inference.predictor import Predictor
from bertkit.model.quantize import Int8Linear, quantize_linears
from tests.test_export import tiny
from tests.test_serve import TEXTS, _batch


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).detach().norm() / want.detach().norm())


@pytest.mark.parametrize("reduced", [False, True])
def test_int8_linear_is_within_int8_error_of_float(reduced: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both input ranges (7 bits on a CPU without VNNI, 8 with) stay within int8's error; the
    7-bit one is coarser. The 8-bit range runs only where the CPU has VNNI: without it FBGEMM's
    16-bit pair sums saturate (the error is then about 0.1), which is why bertkit uses 7 bits there."""
    if not reduced and not torch.cpu._is_vnni_supported():
        pytest.skip(
            "this CPU has no VNNI: the full 8-bit input range saturates FBGEMM's kernels, so bertkit never runs it"
        )
    monkeypatch.setattr("bertkit.model.quantize._needs_reduced_range", lambda: reduced)
    torch.manual_seed(0)
    linear = nn.Linear(64, 48)
    x = torch.randn(3, 20, 64)  # any leading shape
    with torch.no_grad():
        want = linear(x)
        got = Int8Linear(linear)(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    assert relative_error(got, want) < (0.03 if reduced else 0.015)


def test_int8_weights_have_a_scale_per_output_channel() -> None:
    """Rows of weights 1000x apart: one scale for the whole matrix would round the small rows to
    zero; a scale per row keeps every output column within int8's error."""
    torch.manual_seed(0)
    linear = nn.Linear(32, 8)
    with torch.no_grad():
        linear.weight[:4] *= 1e-3
        linear.bias.zero_()
    x = torch.randn(50, 32)
    with torch.no_grad():
        want, got = linear(x), Int8Linear(linear)(x)
    for column in range(8):
        assert relative_error(got[:, column], want[:, column]) < 0.02, column


def test_quantize_linears_replaces_every_linear_and_refuses_other_devices() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 2)))
    assert quantize_linears(model) == 2
    assert [type(m) for m in model.modules()].count(Int8Linear) == 2 and not list(model.parameters())
    with pytest.raises(ValueError, match=r"int8 runs on the CPU \(torch's quantized kernels\); the model is on meta"):
        quantize_linears(nn.Linear(4, 4, device="meta"))


@pytest.mark.parametrize(
    "head",
    [lambda: SequenceClassification(labels=["neg", "pos"]), lambda: TokenClassification(entity_types=["PER", "LOC"])],
    ids=["cls_only", "every_token"],
)
def test_an_int8_predictor_answers_as_float32_does(head) -> None:
    """Sequence classification reads [CLS] alone (the last block's queries apart from its keys),
    tagging every token: int8 answers within int8's error of fp32 in both, the head in fp32."""
    model = tiny(head())
    fp32 = Predictor.from_model(model, max_length=32)
    want, want_vectors = fp32.forward(_batch(fp32)), torch.tensor(fp32.embed(TEXTS))
    linears = sum(type(m) is nn.Linear for m in model.encoder.modules())
    predictor = Predictor.from_model(model, max_length=32).to_int8()
    assert predictor.info()["precision"] == "int8"
    assert sum(type(m) is Int8Linear for m in model.encoder.modules()) == linears
    assert not any(type(m) is nn.Linear for m in model.encoder.modules())
    assert any(type(m) is nn.Linear for m in model.head.modules())  # the head stays float
    got = predictor.forward(_batch(predictor))
    assert relative_error(got["logits"], want["logits"]) < 0.05
    vectors = torch.tensor(predictor.embed(TEXTS))
    assert torch.nn.functional.cosine_similarity(vectors, want_vectors).min() > 0.99
    assert len(predictor.predict(TEXTS)) == len(TEXTS)


def test_an_int8_modernbert_answers_as_float32_does(tmp_path: Path) -> None:
    """ModernBERT's joined Wqkv, MLP and head layers are plain ``nn.Linear``: all go int8."""
    from tests.test_modernbert import hf_directory

    model = BertModule(
        SequenceClassification(labels=["a", "b"]), pretrained=str(hf_directory(tmp_path / "modernbert"))
    ).eval()
    fp32 = Predictor.from_model(model, max_length=32)
    want = fp32.forward(_batch(fp32))
    predictor = Predictor.from_model(model, max_length=32).to_int8()
    assert not any(type(m) is nn.Linear for m in model.encoder.modules())
    assert relative_error(predictor.forward(_batch(predictor))["logits"], want["logits"]) < 0.05


def test_int8_refuses_what_it_cannot_convert() -> None:
    model = tiny(SequenceClassification(labels=["neg", "pos"]))
    with pytest.raises(ValueError, match=r"int8 converts the float32 model, and this predictor already runs bf16"):
        Predictor.from_model(model, max_length=32).to_bfloat16().to_int8()
    model = tiny(SequenceClassification(labels=["neg", "pos"]))
    with pytest.raises(ValueError, match=r"bf16 converts the float32 model, and this predictor already runs int8"):
        Predictor.from_model(model, max_length=32).to_int8().to_bfloat16()
    with pytest.raises(ValueError, match=r"int8 replaces the compiled layers: call to_int8 before compile"):
        Predictor.from_model(tiny(SequenceClassification(labels=["neg", "pos"])), max_length=32).compile().to_int8()


def test_the_int8_callback_refuses_fit_compile_and_adapters_and_names_the_old_setting() -> None:
    """``bertkit.Int8`` is for evaluation: fit stops before the first step, as do a compiled or
    adapted model; release 0.2.0.dev's ``model.int8 true`` says what to use instead."""
    import pytorch_lightning as pl
    from bertkit_plugins.token_tagging.task import SAMPLE_FILES

    from bertkit import BertDataModule, Int8
    from bertkit.model.adapters import Adapter

    def module(**kwargs) -> BertModule:
        return BertModule(
            TokenClassification(["PER", "LOC", "ORG", "MISC"]),
            pretrained=None,
            preset="tiny",
            vocab_file="all-MiniLM-L6-v2",
            **kwargs,
        )

    with pytest.raises(ValueError, match=r"model.int8 moved: pass --int8 true to bertkit validate, test or predict"):
        module(int8=True)
    assert "int8" not in module(int8=False).hparams  # what earlier checkpoints stored is read and dropped
    data = BertDataModule(train_file=str(SAMPLE_FILES["train"]), test_file=str(SAMPLE_FILES["test"]), batch_size=16)
    for model, stage, message in [
        (module(), "fit", r"--int8 true \(bertkit.Int8\) is for validate, test and predict"),
        (module(compile=True), "test", r"--int8 true and model.compile: choose one"),
        (module(adapter=Adapter()), "test", r"--int8 true with model.adapter: export the merged model"),
    ]:
        trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, callbacks=[Int8()])
        with pytest.raises(ValueError, match=message):
            getattr(trainer, stage)(model, datamodule=data)
        assert not any(isinstance(m, Int8Linear) for m in model.modules())
