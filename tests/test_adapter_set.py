"""Several adapter checkpoints over one base (``bertkit.inference.adapter_set``, ``bertkit serve
--adapters``): one encoder in memory answers every adapter's requests as each checkpoint served
alone answers them, in whatever order the adapters are asked for (an adapter never runs with
another's update left active); checkpoints that cannot share the base are refused."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import TokenClassification
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from bertkit import BertDataModule, BertModule
from bertkit.inference.adapter_set import load_adapters
from bertkit.inference.predictor import Predictor
from bertkit.model.adapters import Adapter

pytest.importorskip("peft", reason="the lora extra (peft) is not installed")

TEXTS = ["Peter Blackburn flew to Oslo on Tuesday .", "EU rejects German call to boycott British lamb ."]


def _checkpoint(path: Path, model: BertModule, seed: int) -> Path:
    """``model`` with every trainable weight moved (LoRA's B starts at 0), saved as ``bertkit fit``
    saves it (adapters and head only)."""
    model.configure_model()  # the adapters go on, as a trainer puts them
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.2)
    trainer = pl.Trainer(
        logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=path.parent
    )
    trainer.strategy.connect(model)
    trainer.save_checkpoint(path)
    stored = torch.load(path, weights_only=True)  # with the data settings fit records (max_length)
    stored["datamodule_hyper_parameters"] = dict(BertDataModule(max_length=64).hparams)
    torch.save(stored, path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> dict[str, Path]:
    """Three adapter checkpoints over MiniLM: NER (every linear layer; r 8), SST-2-like classification
    (query, key, value, dense; r 4) and a second NER adapter (r 2), and a whole model."""
    root = tmp_path_factory.mktemp("adapters")
    ner, sentiment = TokenClassification(["PER", "LOC", "ORG", "MISC"]), SequenceClassification(labels=["neg", "pos"])
    return {
        "ner": _checkpoint(root / "ner.ckpt", BertModule(ner, pretrained=str(minilm_dir), adapter=Adapter()), 1),
        "sentiment": _checkpoint(
            root / "sentiment.ckpt",
            BertModule(sentiment, pretrained=str(minilm_dir), adapter=Adapter(r=4, target_modules=["query", "key", "value", "dense"])),
            2,
        ),
        "ner_small": _checkpoint(
            root / "ner_small.ckpt",
            BertModule(TokenClassification(["PER", "LOC", "ORG", "MISC"]), pretrained=str(minilm_dir), adapter=Adapter(r=2)),
            3,
        ),
        "whole": _checkpoint(root / "whole.ckpt", BertModule(SequenceClassification(labels=["a", "b"]), pretrained=str(minilm_dir)), 4),
    }  # fmt: skip


@pytest.fixture(scope="module")
def served(checkpoints: dict[str, Path]) -> dict[str, Predictor]:
    return load_adapters({name: checkpoints[name] for name in ("ner", "sentiment", "ner_small")})


@pytest.fixture(scope="module")
def alone(checkpoints: dict[str, Path]) -> dict[str, list]:
    """Each checkpoint's records, served alone (``Predictor.load``: its own base model)."""
    return {name: Predictor.load(checkpoints[name]).predict(TEXTS) for name in ("ner", "sentiment", "ner_small")}


def test_one_encoder_holds_every_adapter(served: dict[str, Predictor]) -> None:
    encoders = {id(p.encoder.inner) for p in served.values()}
    assert len(encoders) == 1
    assert served["sentiment"].info()["adapter"] == "sentiment"
    assert served["ner"].info()["task"] == "TokenClassification"
    assert served["sentiment"].info()["task"] == "SequenceClassification"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.lists(st.sampled_from(["ner", "sentiment", "ner_small"]), min_size=1, max_size=6))
def test_each_adapter_answers_as_its_checkpoint_alone_in_any_order(served, alone, order) -> None:
    for name in order:
        assert served[name].predict(TEXTS) == alone[name], name


def test_the_adapters_differ(alone: dict[str, list]) -> None:
    """The check above could fail: the two NER adapters give different records."""
    assert alone["ner"] != alone["ner_small"]


def test_embed_runs_with_its_own_adapter(served: dict[str, Predictor], checkpoints: dict[str, Path]) -> None:
    for name in ("sentiment", "ner"):
        expected = Predictor.load(checkpoints[name]).embed(TEXTS)
        torch.testing.assert_close(torch.tensor(served[name].embed(TEXTS)), torch.tensor(expected), atol=1e-5, rtol=0)


@pytest.mark.system
def test_checkpoints_that_cannot_share_a_base_are_refused(
    checkpoints: dict[str, Path], tmp_path: Path, minilm_dir: Path
) -> None:
    with pytest.raises(ValueError, match=r"whole\.ckpt: a whole model, not adapters"):
        load_adapters({"ner": checkpoints["ner"], "whole": checkpoints["whole"]})
    other = tmp_path / "other-base"
    shutil.copytree(minilm_dir, other)
    weights = load_file(other / "model.safetensors")
    weights["embeddings.LayerNorm.bias"] += 0.01
    save_file(weights, other / "model.safetensors")
    model = BertModule(SequenceClassification(labels=["a", "b"]), pretrained=str(other), adapter=Adapter())
    _checkpoint(tmp_path / "other.ckpt", model, 5)
    with pytest.raises(
        ValueError, match=r"other\.ckpt: its adapters were trained over other base weights .* one server"
    ):
        load_adapters({"ner": checkpoints["ner"], "other": tmp_path / "other.ckpt"})
    with pytest.raises(ValueError, match="no checkpoints"):
        load_adapters({})


def _labels(records: object) -> object:
    """Records without their scores (requests batched together differ in padding: the last float
    digits may too)."""
    if isinstance(records, dict):
        return {k: _labels(v) for k, v in records.items() if not isinstance(v, float)}
    if isinstance(records, list):
        return [_labels(r) for r in records]
    return records


@pytest.mark.slow
@pytest.mark.system
def test_serve_answers_each_request_with_the_adapter_it_names(
    checkpoints: dict[str, Path], alone: dict[str, list], tmp_path: Path
) -> None:
    """``bertkit serve`` with three adapters: requests for each, sent together (batched in one
    worker, up to 6 requests waiting 2 s), answered as each checkpoint alone answers; an unknown
    adapter gets a 422 naming the field and the served names, alone; /info lists the adapters."""
    from tests.test_serve import _call, _post, serving

    adapters = json.dumps({"sentiment": str(checkpoints["sentiment"]), "ner_small": str(checkpoints["ner_small"])})
    options = ("--adapters", adapters, "--embed", "false", "--max_batch_size", "6", "--batch_timeout", "2")
    names = ["sentiment", None, "ner_small", "nowhere", "sentiment", None]
    with serving(checkpoints["ner"], tmp_path, *options) as (port, _):
        with ThreadPoolExecutor(len(names)) as pool:
            bodies = [{"inputs": TEXTS, **({"adapter": n} if n else {})} for n in names]
            answers = [f.result() for f in [pool.submit(_post, port, "/predict", body) for body in bodies]]
        info = _call(port, "/info")[1]["model"]
    for name, (status, records) in zip(names, answers, strict=True):
        if name == "nowhere":
            assert status == 422 and records["detail"] == (
                "adapter: 'nowhere' is not served; expected one of ['default', 'ner_small', 'sentiment']"
            )
        else:
            assert status == 200 and _labels(records) == _labels(alone[name or "ner"]), name
    assert set(info["adapters"]) == {"default", "sentiment", "ner_small"}
    assert info["adapters"]["sentiment"]["task"] == "SequenceClassification"


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (("--adapters", '{"default": "x.ckpt"}'), "the name 'default' is --model's adapter"),
        (("--adapters", '{"b": "x.ckpt"}', "--bf16", "true"), "--adapters serves float32"),
        (("--adapters", '{"b": "x.ckpt"}', "--backend", "onnx", "--embed", "false"), "needs the torch backend"),
    ],
)
def test_adapters_the_server_cannot_serve_are_refused_before_loading(options, said, capsys) -> None:
    from bertkit.cli import main

    assert main(["serve", "nothing.ckpt", *options]) == 2
    assert said in capsys.readouterr().err
