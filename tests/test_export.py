"""Exports keep what was trained: each head's ``save_pretrained`` directory loads as the matching
``transformers`` task class with its labels, and gives the logits bertkit gives."""

from __future__ import annotations

import json
import logging
import re
import shutil
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
import transformers
from bertkit_plugins.question_answering import QuestionAnswering
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import TokenClassification
from safetensors import safe_open

from bertkit import BertModule
from tests.conftest import ROOT

TEXTS = ["Peter Blackburn flew to Oslo.", "EU rejects German call to boycott British lamb .", "Fine."]


def tiny(head, **settings: Any) -> BertModule:
    torch.manual_seed(0)
    model = BertModule(head, pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2", **settings).eval()
    with torch.no_grad():  # fresh heads start at zero bias: make every tensor count
        for p in model.head.parameters():
            p.normal_(0, 0.5)
    return model


def batch(model: BertModule) -> dict[str, torch.Tensor]:
    encoded = model.tokenizer.encode_batch(TEXTS, max_length=32)
    longest = max(len(e.input_ids) for e in encoded)
    ids = torch.tensor([e.input_ids + [0] * (longest - len(e.input_ids)) for e in encoded])
    return {
        "input_ids": ids,
        "token_type_ids": torch.zeros_like(ids),
        "attention_mask": torch.tensor([[1] * len(e.input_ids) + [0] * (longest - len(e.input_ids)) for e in encoded]),
    }


CASES = {
    "token": (TokenClassification(entity_types=["PER", "LOC"]), transformers.BertForTokenClassification),
    "sequence": (SequenceClassification(labels=["neg", "neu", "pos"]), transformers.BertForSequenceClassification),
    "multi_label": (
        SequenceClassification(problem_type="multi_label", labels=["a", "b"]),
        transformers.BertForSequenceClassification,
    ),
    "qa": (QuestionAnswering(), transformers.BertForQuestionAnswering),
}


@pytest.mark.parametrize("name", list(CASES))
def test_export_loads_as_the_task_class_with_identical_logits(name, tmp_path):
    head, cls = CASES[name]
    model = tiny(head)
    inputs = batch(model)
    with torch.no_grad():
        ours = model(inputs)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == [cls.__name__]
    hf, info = cls.from_pretrained(tmp_path, output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"], info
    with torch.no_grad():
        theirs = hf.eval()(**inputs)
    real = inputs["attention_mask"].bool()
    if name == "qa":
        for key in ("start_logits", "end_logits"):
            shown = ours[key] > -1e4  # bertkit masks padding (and nothing else of a plain batch)
            assert torch.equal(shown, real)
            torch.testing.assert_close(ours[key][real], theirs[key][real], atol=1e-5, rtol=1e-4)
        return
    if name == "token":
        assert hf.config.id2label == dict(enumerate(model.task.tags))
        torch.testing.assert_close(ours["logits"][real], theirs.logits[real], atol=1e-5, rtol=1e-4)
        return
    assert list(hf.config.id2label.values()) == model.task.hparams.labels
    assert hf.config.problem_type == f"{model.task.hparams.problem_type}_classification"
    torch.testing.assert_close(ours["logits"], theirs.logits, atol=1e-5, rtol=1e-4)


def test_mean_pooling_exports_the_encoder_with_a_warning(tmp_path):
    model = tiny(SequenceClassification(labels=["a", "b"], pooling="mean"))
    with pytest.warns(UserWarning, match="without the trained task layer"):
        model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertModel"]


def test_a_task_export_is_a_pretrained_encoder_for_another_recipe(tmp_path):
    model = tiny(TokenClassification(entity_types=["PER"]))
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as stored:  # as transformers saves the class: no pooler
        assert not [k for k in stored.keys() if ".pooler." in k]
    with pytest.warns(UserWarning, match=f"{tmp_path}.* has no pooler weights: .*Head reads them, so they start fresh"):
        again = BertModule(SequenceClassification(labels=["a", "b"]), pretrained=str(tmp_path))
    for key, value in model.encoder.state_dict().items():
        if not key.startswith("pooler."):  # a classifier starts its pooler fresh, as from transformers' export
            assert torch.equal(again.encoder.state_dict()[key], value), key
    with warnings.catch_warnings():  # a tagger never reads the pooler: nothing to say of it
        warnings.simplefilter("error")
        BertModule(TokenClassification(entity_types=["PER"]), pretrained=str(tmp_path))


def test_pretraining_head_has_no_onnx_export(tmp_path):
    from bertkit_plugins.pretraining import PreTraining

    from bertkit.inference.onnx import export_onnx

    with pytest.raises(ValueError, match="PreTrainingHeads has no logits to export"):
        export_onnx(tiny(PreTraining()), tmp_path / "model.onnx")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_export_command_on_a_trained_ner_checkpoint(tiny_run, tmp_path, capsys):
    import onnxruntime

    from bertkit.cli import main

    (best,) = [p for p in (tiny_run / "runs/ner/checkpoints").glob("*.ckpt") if p.name != "last.ckpt"]
    assert main(["export", str(best), str(tmp_path / "out"), "--int8", "true"]) == 0
    assert "onnxruntime vs bertkit" in capsys.readouterr().out
    # the graph holds the weights: the folder is self-contained, so it still runs after a move
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")) == []
    weights = (tmp_path / "out/model.safetensors").stat().st_size
    assert (tmp_path / "out/model.onnx").stat().st_size > 0.9 * weights
    shutil.move(tmp_path / "out", tmp_path / "moved")
    hf = transformers.BertForTokenClassification.from_pretrained(tmp_path / "moved").eval()
    layers = hf.config.num_hidden_layers
    assert not [k for k in hf.state_dict() if "pooler" in k]  # the export has exactly the class's keys
    tokenizer = transformers.BertTokenizerFast.from_pretrained(tmp_path / "moved")
    inputs = tokenizer(TEXTS, padding=True, return_tensors="pt")
    session = onnxruntime.InferenceSession(str(tmp_path / "moved/model.onnx"))
    (onnx_logits,) = session.run(["logits"], {k: v.numpy() for k, v in inputs.items()})
    with torch.no_grad():
        logits = hf(**inputs).logits
    real = inputs["attention_mask"].bool()
    torch.testing.assert_close(torch.from_numpy(onnx_logits)[real], logits[real], atol=1e-4, rtol=1e-4)
    assert hf.config.id2label[1].startswith(("B-", "I-"))
    # int8: at most 40 % of the size, self-contained, its logits following the fp32 ones (this
    # barely trained model's logits are small; accuracy on trained models: benchmarks/onnx_int8.py)
    assert (tmp_path / "moved/model.int8.onnx").stat().st_size < 0.4 * (tmp_path / "moved/model.onnx").stat().st_size
    (int8_logits,) = onnxruntime.InferenceSession(str(tmp_path / "moved/model.int8.onnx")).run(
        ["logits"], {k: v.numpy() for k, v in inputs.items()}
    )
    pair = torch.stack([torch.from_numpy(int8_logits)[real].flatten(), logits[real].flatten()])
    assert not torch.equal(pair[0], pair[1]) and torch.corrcoef(pair)[0, 1] > 0.95
    # every weight product is int8, the query/key/value one (concatenated in the graph) included:
    # 4 per block (QKV, attention output, MLP in and out); float MatMuls are attention's 2 per block
    import onnx

    graph = onnx.load(tmp_path / "moved/model.int8.onnx").graph
    ops = Counter(node.op_type for node in graph.node)
    assert ops["MatMulInteger"] >= 4 * layers and ops["MatMul"] == 2 * layers


def test_export_without_the_onnx_extra_writes_the_transformers_folder_and_says_how(
    sample_run, tmp_path, monkeypatch, capsys
):
    import bertkit.commands.export
    from bertkit.cli import main

    monkeypatch.setattr(bertkit.commands.export, "find_spec", lambda name: None if name == "onnxruntime" else object())
    assert main(["export", str(sample_run / "runs/ner/checkpoints/last.ckpt"), str(tmp_path / "out")]) == 0
    assert "pip install 'bertkit[onnx]'" in capsys.readouterr().out
    assert (tmp_path / "out/model.safetensors").is_file() and not (tmp_path / "out/model.onnx").exists()


@pytest.mark.slow
def test_export_writes_a_model_card_the_hub_reads(sample_run, tmp_path, caplog):
    from huggingface_hub import ModelCard

    from bertkit.cli import main

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(sample_run / "runs/ner/checkpoints/last.ckpt", run / "checkpoints/last.ckpt")
    scores = {"test/f1": 0.5, "test/loss": 1.25, "test/crf_loss": 1.0, "test/f1_PER": 0.25, "test/precision": 0.75}
    record = {"command": "test", "checkpoint": str(run / "checkpoints/best.ckpt"), "recipes": [], "scores": scores}
    record["data_sources"] = {"": "sample"}
    (run / "test_scores.json").write_text(json.dumps(record))
    assert main(["export", str(run / "checkpoints/last.ckpt"), str(tmp_path / "out"), "--onnx", "false"]) == 0
    card = ModelCard.load(tmp_path / "out/README.md")
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "token-classification"
    assert card.data.metrics == ["f1", "precision"]  # no loss names
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"  # the registered name's release
    assert card.data.license == "apache-2.0"  # the base model's own card
    assert "| test/f1_PER | 0.2500 |" in card.text and "(this export is `last.ckpt`)" in card.text
    assert "| 1 | B-PER |" in card.text and "CRF.from_export" in card.text
    assert "**A small sample**" in card.text and "on a **sample**, not the task's test set" in card.text
    assert "Intended use: None: trained on a sample" in card.text
    snippets = re.findall(r"```python\n(.*?)```", card.text, flags=re.S)
    assert len(snippets) == 3 and "trust_remote_code=True" in snippets[1]  # bertkit, its CRF pipeline, the plain one
    for snippet in snippets:  # each as a user would paste it
        namespace: dict = {}
        exec(compile(snippet, "README.md", "exec"), namespace)
        found = namespace.get("records") or namespace.get("tagger") or namespace.get("model")
        assert found is not None and (callable(found) or found[0]["entities"] is not None)
    (run / "test_scores.json").unlink()
    assert main(["export", str(run / "checkpoints/last.ckpt"), str(tmp_path / "out"), "--onnx", "false"]) == 0
    card = ModelCard.load(tmp_path / "out/README.md")
    assert card.data.metrics is None and "No test scores: run `bertkit test`" in card.text
    (run / "test_scores.json").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="bertkit.commands.card"):
        assert main(["export", str(run / "checkpoints/last.ckpt"), str(tmp_path / "out"), "--onnx", "false"]) == 0
    assert "test_scores.json: not a bertkit test scores file" in caplog.text


@pytest.mark.slow
def test_the_exported_crf_pipeline_finds_the_entities_bertkit_finds(sample_run, tmp_path, capsys):
    """``pipeline(model=export, trust_remote_code=True)`` runs the export's own pipeline
    (``crf_pipeline.py``): the entities ``bertkit predict`` finds, by type and character span,
    after the export fitted its emission biases for the plain pipeline (``--calibrate``, on the
    run's validation sample); the plain ``token-classification`` pipeline still loads without
    remote code."""
    from transformers import pipeline

    from bertkit.cli import main
    from bertkit.inference.predictor import Predictor

    assert (
        main(["export", str(sample_run / "runs/ner/checkpoints/last.ckpt"), str(tmp_path / "out"), "--onnx", "false"])
        == 0
    )
    said = capsys.readouterr().out
    assert "emission biases fitted for transformers' plain pipeline: validation F1" in said
    assert "The emission layer's biases were fitted" in (tmp_path / "out/README.md").read_text()
    lines = (ROOT / "plugins/token_tagging/sample/test.conll").read_text().split("\n\n")
    texts = [
        " ".join(row.split()[0] for row in block.splitlines() if row and not row.startswith("-DOCSTART-"))
        for block in lines
    ]
    web = "Write to peter.blackburn@example.org , see https://www.example.org/oslo?id=2 , #Oslo or @Blackburn ."
    texts = [t for t in texts if t][:60] + [web, "Peter Blackburn flew to Oslo . " + web]
    ours = [
        {(e["type"], e["start"], e["end"]) for e in r["entities"]}
        for r in Predictor.load(tmp_path / "out").predict(texts)
    ]
    tagger = pipeline(model=str(tmp_path / "out"), trust_remote_code=True, device=-1)
    assert type(tagger).__name__ == "CRFTokenClassificationPipeline"
    theirs = [{(e["entity_group"], e["start"], e["end"]) for e in found} for found in tagger(texts)]
    assert theirs == ours and sum(map(len, ours)) > 0
    plain = pipeline("token-classification", model=str(tmp_path / "out"), device=-1)
    assert type(plain).__name__ == "TokenClassificationPipeline" and len(plain(texts[:2])) == 2
    # the plain pipeline reads a URL, e-mail address, hashtag or @-mention as one word, as bertkit
    grouped = plain(web, aggregation_strategy="first")
    whole = [m.span() for m in re.finditer(r"\S*[@#/]\S*", web)]
    assert not any(a < e["start"] < b or a < e["end"] < b for e in grouped for a, b in whole)
    pieces = plain.tokenizer(web).word_ids()
    assert max(w for w in pieces if w is not None) + 1 == len(web.split())
    # pre-split words (those BERT's rules leave whole, so both readings have the same words): the
    # spans in the words joined by spaces, as the plain text's
    split = [t.split() for t in texts if all(re.fullmatch(r"\w+|[^\w\s]", w) for w in t.split())]
    joined = [
        {(e["entity_group"], e["start"], e["end"]) for e in found} for found in tagger([" ".join(w) for w in split])
    ]
    words = [
        {(e["entity_group"], e["start"], e["end"]) for e in found} for found in tagger(split, is_split_into_words=True)
    ]
    assert words == joined and sum(map(len, words)) > 0
    long = "Peter Blackburn flew to Oslo . " * 300  # 1,800 sub-words: the export's tokenizer truncates at 512
    assert plain.tokenizer.model_max_length == 512
    assert isinstance(plain(long), list) and isinstance(tagger(long), list)


@pytest.mark.slow
def test_an_export_without_the_runs_validation_data_says_so_or_fails_as_asked(
    sample_run, tmp_path, monkeypatch, capsys
):
    """The run's validation file is not where the run read it: the export is written
    uncalibrated and says why; with ``--calibrate true`` it fails naming the file, writing nothing;
    ``--calibrate false`` says nothing of it."""
    from bertkit.cli import main

    monkeypatch.setenv("BERTKIT_DATA_DIR", str(tmp_path / "elsewhere"))
    checkpoint = str(sample_run / "runs/ner/checkpoints/last.ckpt")
    assert main(["export", checkpoint, str(tmp_path / "out"), "--onnx", "false"]) == 0
    said = capsys.readouterr().out
    assert "not calibrated for transformers' own decoding (--calibrate)" in said and "elsewhere" in said
    assert main(["export", checkpoint, str(tmp_path / "strict"), "--onnx", "false", "--calibrate", "true"]) != 0
    said = capsys.readouterr()
    assert "--calibrate true" in said.err + said.out and "elsewhere" in said.err + said.out
    assert not (tmp_path / "strict").exists()
    assert main(["export", checkpoint, str(tmp_path / "off"), "--onnx", "false", "--calibrate", "false"]) == 0
    assert "calibrat" not in capsys.readouterr().out
