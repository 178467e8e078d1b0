"""A trained model answering requests: ``Predictor`` gives the records ``bertkit predict`` writes for
the same lines (NER windows included) and TEI-style embeddings; ``bertkit serve`` answers every
route over HTTP from a real checkpoint in its own process, refuses bad requests with a 4xx that
names the field while it keeps serving, and refuses a checkpoint it cannot load before listening."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.question_answering import QuestionAnsweringHead
from bertkit_plugins.token_tagging import TokenTaggingHead

from bertkit import BertDataModule
from bertkit.callbacks import prediction_records
from bertkit.inference import Predictor
from tests.conftest import FAST, RECIPE, run_bertkit
from tests.test_export import tiny

LONG = " ".join(["Peter Blackburn flew from Oslo to Paris on Tuesday ."] * 12)  # > 32 tokens: windows
TEXTS = ["EU rejects German call to boycott British lamb .", LONG, "Fine ."]


def test_predictor_gives_the_records_bertkit_predict_writes(tmp_path: Path) -> None:
    model = tiny(TokenTaggingHead(entity_types=["PER", "LOC", "ORG"], stride=8))
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    data = BertDataModule(data_dir=str(tmp_path), predict_file="texts.txt", max_length=32, eval_batch_size=2)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    data.attach(model)
    expected = prediction_records(model, data, trainer.predict(model, datamodule=data))
    ours = Predictor(model, max_length=32, batch_size=3).predict(TEXTS)
    assert len(ours) == 3 and len(ours[1]["words"]) == len(LONG.split())  # every word of the windowed text
    for mine, theirs in zip(ours, expected):
        assert mine["tags"] == theirs["tags"] and mine["entities"] == theirs["entities"]


def test_predictor_reads_records_and_names_the_bad_input() -> None:
    predictor = Predictor(tiny(QuestionAnsweringHead()), max_length=48)
    context = "Peter Blackburn flew to Oslo on Tuesday. " * 6
    records = predictor.predict(
        [{"question": "Who flew?", "context": context}, {"question": "When?", "context": "On Tuesday."}]
    )
    assert [r["id"] for r in records] == ["inputs:1", "inputs:2"] and records[1]["question"] == "When?"
    for record, ctx in zip(records, (context, "On Tuesday.")):
        assert record["answer"] == ctx[record["start"] : record["end"]] and record["n_best"]
    with pytest.raises(ValueError, match=r"inputs:2: no 'question' string"):
        predictor.predict([{"question": "Who?", "context": "x"}, {"context": "y"}])
    with pytest.raises(ValueError, match=r"not a mix"):
        predictor.predict(["text", {"question": "Who?", "context": "x"}])


def test_predictor_refuses_empty_and_multi_line_texts_and_embeds_unit_vectors() -> None:
    predictor = Predictor(tiny(TokenTaggingHead(entity_types=["PER"])), max_length=32)
    with pytest.raises(ValueError, match=r"inputs\[1\]: empty text"):
        predictor.predict(["Oslo", "   "])
    with pytest.raises(ValueError, match=r"inputs\[0\]: one line per input"):
        predictor.predict(["Oslo\nParis"])
    vectors = torch.tensor(predictor.embed(["Oslo is cold .", LONG]))
    assert vectors.shape == (2, 128) and torch.allclose(vectors.norm(dim=-1), torch.ones(2), atol=1e-5)
    raw = torch.tensor(predictor.embed(["Oslo is cold ."], normalize=False))
    assert torch.allclose(raw / raw.norm(), vectors[:1], atol=1e-5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(port: int, path: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, object]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=headers or {})
    if body is not None and "Content-Type" not in (headers or {}):
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, _json_or_text(response.read())
    except urllib.error.HTTPError as err:
        return err.code, _json_or_text(err.read())


def _json_or_text(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode()  # /health answers ok


def _post(port: int, path: str, payload: object, **kwargs) -> tuple[int, object]:
    return _call(port, path, json.dumps(payload).encode(), **kwargs)


@pytest.fixture(scope="module")
def ner_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("serve")
    tiny_model = ["--model.pretrained=null", "--model.preset=tiny", "--model.vocab_file=all-MiniLM-L6-v2"]
    run_bertkit("fit", "--config", str(RECIPE), *FAST, *tiny_model, cwd=root)
    return root / "runs/ner/checkpoints/last.ckpt"


def test_serve_answers_every_route_and_refuses_bad_requests(ner_checkpoint: Path, tmp_path: Path) -> None:
    port = _free_port()
    command = [sys.executable, "-m", "bertkit.cli", "serve", str(ner_checkpoint), "--port", str(port), "--api_key", "k"]
    server = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    key = {"X-API-Key": "k"}
    try:
        for _ in range(240):
            try:
                if _call(port, "/health", headers=key) == (200, "ok"):
                    break
            except OSError:
                pass
            assert server.poll() is None, server.stdout.read()
            time.sleep(0.5)
        else:
            raise AssertionError("the server did not answer /health within 120 s")
        status, records = _post(port, "/predict", {"inputs": ["Peter Blackburn flew to Oslo .", LONG]}, headers=key)
        assert status == 200 and len(records) == 2 and len(records[1]["words"]) == len(LONG.split())
        for record in records:
            for entity in record["entities"]:
                assert entity["text"] == record["text"][entity["start"] : entity["end"]]
        status, vectors = _post(port, "/embed", {"inputs": "Oslo is cold ."}, headers=key)
        assert status == 200 and len(vectors) == 1 and len(vectors[0]) == 128  # the tiny preset's width
        assert abs(sum(v * v for v in vectors[0]) - 1.0) < 1e-4
        status, info = _call(port, "/info", headers=key)
        assert status == 200 and info["model"]["head"] == "TokenTaggingHead" and info["model"]["family"] == "bert"
        bad = [
            (b"{not json", "/predict"),
            (b'{"inputs": "\xff\xfe"}', "/predict"),
            (json.dumps({"inputs": "a " * 600_000}).encode(), "/predict"),
            (json.dumps({"text": "x"}).encode(), "/predict"),
            (json.dumps({"inputs": [3]}).encode(), "/predict"),
            (json.dumps({"inputs": ["ok", " "]}).encode(), "/predict"),
            (json.dumps({"inputs": ["x"] * 300}).encode(), "/predict"),
            (json.dumps({"inputs": "x", "normalize": "yes"}).encode(), "/embed"),
        ]
        said = []
        for body, path in bad:
            status, answer = _call(port, path, body, headers=key)
            assert 400 <= status < 500, (body, status, answer)
            said.append(json.dumps(answer))
        assert "not UTF-8 JSON" in said[0] and "not UTF-8 JSON" in said[1] and "at most 1,000,000" in said[2]
        assert "JSON object with" in said[3] and "inputs[0]" in said[4] and "inputs[1]: empty text" in said[5]
        assert "300" in said[6] and "normalize" in said[7]
        form = {"Content-Type": "application/x-www-form-urlencoded", **key}
        assert _call(port, "/predict", b"inputs=x", headers=form)[0] == 415
        assert _post(port, "/predict", {"inputs": "x"})[0] in (401, 403)  # no key
        assert _call(port, "/nowhere", headers=key)[0] == 404
        assert _post(port, "/predict", {"inputs": "Oslo ."}, headers=key)[0] == 200  # still serving
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            raise


def test_serve_refuses_a_checkpoint_it_cannot_load_before_listening(tmp_path: Path) -> None:
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(b"not a checkpoint")
    proc = subprocess.run(
        [sys.executable, "-m", "bertkit.cli", "serve", str(broken), "--port", str(_free_port())],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ}, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "bertkit: error:" in proc.stderr and "broken.ckpt" in proc.stderr, proc.stderr


def test_serve_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import bertkit.commands
    from bertkit.cli import main

    real = bertkit.commands.find_spec
    monkeypatch.setattr(bertkit.commands, "find_spec", lambda name: None if name == "litserve" else real(name))
    assert main(["serve", "model.ckpt"]) == 2
    assert "pip install 'bertkit[serve]'" in capsys.readouterr().err
