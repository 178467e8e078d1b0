"""A trained model answering requests: ``Predictor`` gives the records ``bertkit predict`` writes for
the same lines (NER windows included) and TEI-style embeddings; ``bertkit serve`` answers every
route over HTTP from a real checkpoint in its own process, refuses bad requests with a 4xx that
names the field while it keeps serving, and refuses a checkpoint it cannot load before listening."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.question_answering import QuestionAnswering
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import SpanClassification, TokenClassification
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertDataModule
from bertkit.data.collate import pad_batch
from bertkit.inference.onnx import export_onnx
from bertkit.inference.predictor import Predictor
from bertkit.training.callbacks import prediction_records
from bertkit.training.trained import save_serving_config
from tests.conftest import Forked, Spawned, run_bertkit
from tests.test_export import tiny

LONG = " ".join(["Peter Blackburn flew from Oslo to Paris on Tuesday ."] * 12)  # > 32 tokens: windows
TEXTS = ["EU rejects German call to boycott British lamb .", LONG, "Fine ."]


def test_predictor_gives_the_records_bertkit_predict_writes(tmp_path: Path) -> None:
    model = tiny(TokenClassification(entity_types=["PER", "LOC", "ORG"], stride=8), max_length=32)
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    data = BertDataModule(data_dir=str(tmp_path), predict_file="texts.txt", eval_batch_size=2)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    data.attach(model)
    expected = prediction_records(model, data, trainer.predict(model, datamodule=data))
    ours = Predictor.from_model(model, max_length=32, max_tokens=64).predict(TEXTS)  # sorted, 2 windows a batch
    assert len(ours) == 3 and len(ours[1]["words"]) == len(LONG.split())  # every word of the windowed text
    for mine, theirs in zip(ours, expected, strict=True):
        assert mine["tags"] == theirs["tags"] and mine["entities"] == theirs["entities"]


@pytest.mark.slow
def test_a_compiled_predictor_gives_the_same_records() -> None:
    model = tiny(SequenceClassification(labels=["neg", "pos"]))
    want = Predictor.from_model(model, max_length=32).predict(TEXTS)
    predictor = Predictor.from_model(model, max_length=32).compile(backend="aot_eager")  # traced, not lowered
    got = predictor.predict(TEXTS)
    assert predictor.info()["compiled"] and all(b._compiled_call_impl is not None for b in model.encoder.blocks)
    for mine, theirs in zip(got, want, strict=True):
        assert mine["label"] == theirs["label"]
        assert mine["probabilities"] == pytest.approx(theirs["probabilities"], abs=1e-5)


def test_a_bf16_predictor_runs_in_bf16_and_answers_in_float32() -> None:
    """Weights and activations in bf16, records and embeddings as fp32 would give them to bf16's
    precision (8 bits of mantissa: probabilities within 0.02), outputs handed back as float32."""
    model = tiny(SequenceClassification(labels=["neg", "pos"]))
    fp32 = Predictor.from_model(model, max_length=32)
    want, want_vectors = fp32.predict(TEXTS), torch.tensor(fp32.embed(TEXTS))
    predictor = Predictor.from_model(model, max_length=32).to_bfloat16()
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16} and predictor.info()["precision"] == "bf16"
    assert {v.dtype for v in predictor.forward(_batch(predictor)).values() if v.is_floating_point()} == {torch.float32}
    for mine, theirs in zip(predictor.predict(TEXTS), want, strict=True):
        assert mine["probabilities"] == pytest.approx(theirs["probabilities"], abs=0.02)
    vectors = torch.tensor(predictor.embed(TEXTS))
    assert torch.nn.functional.cosine_similarity(vectors, want_vectors).min() > 0.999


def _batch(predictor: Predictor) -> dict:
    """The padded batch of ``TEXTS`` the predictor's head makes."""
    examples = predictor.examples(TEXTS)
    features = predictor.task.featurize(examples, predictor.tokenizer, predictor.max_length)
    return pad_batch(list(features), predictor.tokenizer.pad_token_id, predictor.task.pad_values)


def test_predictor_reads_records_and_names_the_bad_input() -> None:
    predictor = Predictor.from_model(tiny(QuestionAnswering()), max_length=48)
    context = "Peter Blackburn flew to Oslo on Tuesday. " * 6
    records = predictor.predict(
        [{"question": "Who flew?", "context": context}, {"question": "When?", "context": "On Tuesday."}]
    )
    assert [r["id"] for r in records] == ["inputs:1", "inputs:2"] and records[1]["question"] == "When?"
    for record, ctx in zip(records, (context, "On Tuesday."), strict=True):
        assert record["answer"] == ctx[record["start"] : record["end"]] and record["n_best"]
    with pytest.raises(ValueError, match=r"inputs:2: question: missing"):
        predictor.predict([{"question": "Who?", "context": "x"}, {"context": "y"}])
    with pytest.raises(ValueError, match=r"not a mix"):
        predictor.predict(["text", {"question": "Who?", "context": "x"}])


def test_predictor_refuses_empty_and_multi_line_texts_and_embeds_unit_vectors() -> None:
    predictor = Predictor.from_model(tiny(TokenClassification(entity_types=["PER"])), max_length=32)
    with pytest.raises(ValueError, match=r"inputs\[1\]: empty text"):
        predictor.predict(["Oslo", "   "])
    with pytest.raises(ValueError, match=r"inputs\[0\]: one line per input"):
        predictor.predict(["Oslo\nParis"])
    vectors = torch.tensor(predictor.embed(["Oslo is cold .", LONG]))
    assert vectors.shape == (2, 128) and torch.allclose(vectors.norm(dim=-1), torch.ones(2), atol=1e-5)
    raw = torch.tensor(predictor.embed(["Oslo is cold ."], normalize=False))
    assert torch.allclose(raw / raw.norm(), vectors[:1], atol=1e-5)


def test_embed_requests_batched_together_keep_their_own_normalize() -> None:
    from bertkit.commands.serving import Batching, EmbedAPI, Refusal

    api = EmbedAPI("unused.ckpt", "torch", Batching(max_batch_size=4, timeout=0.0))
    api.predictor = Predictor.from_model(tiny(TokenClassification(entity_types=["PER"])), max_length=32)
    requests = [{"inputs": ["Oslo .", LONG]}, {"inputs": "Oslo .", "normalize": False}, {"inputs": ""}]
    outputs = api.unbatch(api.predict(api.batch([api.decode_request(r) for r in requests])))
    assert torch.allclose(torch.tensor(outputs[0]), torch.tensor(api.predictor.embed(["Oslo .", LONG])), atol=1e-5)
    assert torch.allclose(
        torch.tensor(outputs[1]), torch.tensor(api.predictor.embed(["Oslo ."], normalize=False)), atol=1e-5
    )
    assert outputs[2] == Refusal(422, "inputs[0]: empty text")
    assert api.encode_response(outputs[2]).status_code == 422


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["token", "token_crf", "sequence", "qa"])
def test_an_export_folder_predicts_as_its_model_on_torch_and_onnx(kind: str, tmp_path: Path) -> None:
    """``bertkit.json`` + the transformers files + ``model.onnx`` give back the model's records:
    the head's weights are read back from the export (its random weights would disagree), on
    ONNX too where the head decodes the graph's logits (a CRF's transition scores). The graph's
    logits are bertkit's within 1e-4 on inputs other than the traced ones (``export_onnx``'s check)."""
    head = {
        "token": TokenClassification(entity_types=["PER", "LOC"], stride=8),
        "token_crf": TokenClassification(entity_types=["PER", "LOC"], stride=8, crf=True),
        "sequence": SequenceClassification(labels=["neg", "pos"]),
        "qa": QuestionAnswering(),
    }[kind]
    model = tiny(head)
    model.save_pretrained(tmp_path)
    save_serving_config(model, tmp_path, 32)
    assert export_onnx(model, tmp_path / "model.onnx") < 1e-4
    assert (tmp_path / "model.onnx").stat().st_size > 100_000  # the weights are inside the graph's file
    inputs = (
        TEXTS
        if kind != "qa"
        else [{"question": "Who flew?", "context": LONG}, {"question": "Who?", "context": "Oslo ."}]
    )
    want = Predictor.from_model(model, max_length=32).predict(inputs)
    for backend in ("torch", "onnx"):
        predictor = Predictor.load(tmp_path, max_tokens=64, backend=backend)
        assert predictor.info() | {"backend": "torch"} == Predictor.from_model(model, 32).info()
        got = predictor.predict(inputs)
        for mine, theirs in zip(got, want, strict=True):
            if kind.startswith("token"):
                assert mine["tags"] == theirs["tags"]
            elif kind == "sequence":
                assert mine["probabilities"] == pytest.approx(theirs["probabilities"], abs=1e-5)
            else:
                assert (mine["start"], mine["end"]) == (theirs["start"], theirs["end"])
                assert mine["score"] == pytest.approx(theirs["score"], abs=1e-4)


@pytest.mark.slow
def test_an_export_without_what_serving_needs_says_what_is_missing(tmp_path: Path) -> None:
    model = tiny(TokenClassification(entity_types=["PER"]))
    model.save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"bertkit\.json.*not a `bertkit export` folder with a task head"):
        Predictor.load(tmp_path)
    save_serving_config(model, tmp_path, 32)
    with pytest.raises(FileNotFoundError, match=r"model\.int8\.onnx: no such file; `bertkit export` writes it"):
        Predictor.load(tmp_path, backend="onnx-int8")
    with pytest.raises(ValueError, match=r"the onnx backend runs an export's ONNX graph"):
        Predictor.load(tmp_path / "model.ckpt", backend="onnx")
    spans = tiny(SpanClassification(entity_types=["PER"]))
    spans.save_pretrained(tmp_path / "spans")
    save_serving_config(spans, tmp_path / "spans", 32)
    with pytest.raises(
        ValueError, match=r"spans: the export holds the encoder alone, not SpanClassificationHead's trained layer"
    ):
        Predictor.load(tmp_path / "spans")
    with pytest.raises(ValueError, match=r"embeddings need the torch backend"):
        export_onnx(model, tmp_path / "model.onnx")
        Predictor.load(tmp_path, backend="onnx").embed(["Oslo ."])
    with pytest.raises(ValueError, match=r"compile needs the torch backend \(this predictor runs onnx\)"):
        Predictor.load(tmp_path, backend="onnx").compile()
    with pytest.raises(ValueError, match=r"bf16 needs the torch backend \(this predictor runs onnx\)"):
        Predictor.load(tmp_path, backend="onnx").to_bfloat16()
    with pytest.raises(ValueError, match=r"int8 needs the torch backend \(this predictor runs onnx\)"):
        Predictor.load(tmp_path, backend="onnx").to_int8()


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


def _oversized(port: int, path: str, chunks: list[bytes], headers: dict[str, str], chunked: bool) -> tuple[int, str]:
    """POST ``chunks`` (with chunked transfer encoding, or one body of declared length), sending
    until the server stops reading (it may answer before the body ends); its status and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {sum(map(len, chunks))}"
        head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json", framing,
                *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
        try:
            conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            for chunk in chunks:
                conn.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if chunked else chunk)
            conn.sendall(b"0\r\n\r\n" if chunked else b"")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered before the body ended
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < 20:
            piece = conn.recv(65536)
            if not piece:
                break
            answer += piece
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2].decode(errors="replace")


def _json_or_text(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode()  # /health answers ok


def _post(port: int, path: str, payload: object, **kwargs) -> tuple[int, object]:
    return _call(port, path, json.dumps(payload).encode(), **kwargs)


@pytest.fixture(scope="module")
def ner_checkpoint(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny NER checkpoint whose tagger says B-PER for every word (its bias raised): every
    word is an entity, so the checks below on entities can fail."""
    root = tmp_path_factory.mktemp("serve")
    checkpoint = torch.load(tiny_run / "runs/ner/checkpoints/last.ckpt", weights_only=True)
    checkpoint["state_dict"]["head.classifier.bias"][1] += 100.0  # tags: O, B-PER, I-PER, …
    torch.save(checkpoint, root / "per.ckpt")
    return root / "per.ckpt"


@contextmanager
def serving(
    checkpoint: Path, cwd: Path, *options: str, env: dict[str, str] | None = None
) -> Iterator[tuple[int, Spawned]]:
    """``bertkit serve CHECKPOINT OPTIONS`` in a new process and session (``Spawned``, with
    ``env`` added to this one's), once /health answers:
    (port, process). Stopped with SIGTERM at the end (killed if it has not exited 60 s later)."""
    port = _free_port()
    server = Spawned(["serve", str(checkpoint), "--port", str(port), *options], cwd, env)
    given = {**os.environ, **(env or {})}
    key = {"X-API-Key": given["BERTKIT_API_KEY"]} if "BERTKIT_API_KEY" in given else {}
    try:
        for _ in range(240):
            try:
                if _call(port, "/health", headers=key) == (200, "ok"):
                    break
            except OSError:
                pass
            if server.poll() is not None:
                ended = server.wait()
                raise AssertionError(ended.stdout + ended.stderr)
            time.sleep(0.5)
        else:
            raise AssertionError("the server did not answer /health within 120 s")
        yield port, server
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


@pytest.fixture(scope="module")
def served(ner_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of ``bertkit serve`` on the NER checkpoint, with an API key ``k`` (from the
    environment, not the command line) and a work budget of 4,096 tokens a request."""
    cwd = tmp_path_factory.mktemp("cwd")
    with serving(ner_checkpoint, cwd, "--max_request_tokens", "4096", env={"BERTKIT_API_KEY": "k"}) as (port, _):
        yield port


KEY = {"X-API-Key": "k"}


@pytest.mark.slow
@pytest.mark.system
def test_serve_answers_every_route_and_refuses_bad_requests(served: int) -> None:
    port = served
    status, records = _post(port, "/predict", {"inputs": ["Peter Blackburn flew to Oslo .", LONG]}, headers=KEY)
    assert status == 200 and len(records) == 2 and len(records[1]["words"]) == len(LONG.split())
    for record in records:
        assert [e["text"] for e in record["entities"]] == record["words"]  # every word B-PER
        for entity in record["entities"]:
            assert entity["text"] == record["text"][entity["start"] : entity["end"]] and entity["type"] == "PER"
    status, vectors = _post(port, "/embed", {"inputs": "Oslo is cold ."}, headers=KEY)
    assert status == 200 and len(vectors) == 1 and len(vectors[0]) == 128  # the tiny preset's width
    assert abs(sum(v * v for v in vectors[0]) - 1.0) < 1e-4
    status, info = _call(port, "/info", headers=KEY)
    assert status == 200 and info["model"]["task"] == "TokenClassification" and info["model"]["family"] == "bert"
    bad = [
        (b"{not json", "/predict"),
        (b'{"inputs": "\xff\xfe"}', "/predict"),
        (json.dumps({"text": "x"}).encode(), "/predict"),
        (json.dumps({"inputs": [3]}).encode(), "/predict"),
        (json.dumps({"inputs": ["ok", " "]}).encode(), "/predict"),
        (json.dumps({"inputs": ["x"] * 300}).encode(), "/predict"),
        (json.dumps({"inputs": "x", "normalize": "yes"}).encode(), "/embed"),
        (json.dumps({"inputs": "Oslo " * 5000}).encode(), "/predict"),  # 25 kB, 5,000 words: over the work budget
        (json.dumps({"inputs": ["Oslo " * 500] * 40}).encode(), "/embed"),  # 40 texts x 128 tokens (truncated)
        (b"[" * 100_000 + b"]" * 100_000, "/predict"),
        (b'{"inputs": "\\ud800 Oslo"}', "/embed"),
        (b'{"inputs": "a", "inputs": "b"}', "/predict"),
        (b'{"inputs": [NaN]}', "/predict"),
    ]
    said = []
    for body, path in bad:
        status, answer = _call(port, path, body, headers=KEY)
        assert 400 <= status < 500, (body[:40], status, answer)
        said.append(json.dumps(answer))
    assert "not valid JSON" in said[0] and "not UTF-8" in said[1]
    assert "inputs: missing" in said[2] and "inputs[0]" in said[3] and "inputs[1]: empty text" in said[4]
    assert "300" in said[5] and "normalize: expected true or false" in said[6]
    assert "at most 4,096 per request" in said[7] and "at most 4,096 per request" in said[8]
    assert "nested too deep" in said[9] and "lone surrogate" in said[10] and "given twice" in said[11]
    assert "NaN is not a JSON number" in said[12] and "at least 5,000 tokens" in said[7]  # found before tokenizing
    status, answer = _post(port, "/predict", {"inputs": "Oslo-Paris " * 2000}, headers=KEY)  # 2,000 words
    assert status == 413 and "at least 6,000 tokens" in answer["detail"]  # counted in tokens, 3 a word
    status, answer = _post(port, "/predict", {"inputs": "Oslo-Paris " * 1300}, headers=KEY)  # 3,900 tokens
    assert status == 413 and "at least" not in answer["detail"]  # within the budget, but not its overlapping windows
    assert "tokens (all windows): at most 4,096" in answer["detail"]
    status, answer = _oversized(port, "/predict", [b"[" * 10_000] * 200, KEY, chunked=True)  # 2 MB, no length given
    assert status == 413 and "more than 1,000,000 bytes" in answer
    status, answer = _oversized(port, "/predict", [b"[" * 10_000] * 200, KEY, chunked=False)  # refused from its length
    assert status == 413 and "request body of 2,000,000 bytes: at most 1,000,000" in answer
    for path in ("/docs", "/openapi.json", "/info"):
        assert _call(port, path)[0] == 401 and _call(port, path, headers=KEY)[0] == 200
    assert _call(port, "/health")[0] == 200 and _call(port, "/")[0] == 200  # probes and the page stay open
    form = {"Content-Type": "application/x-www-form-urlencoded", **KEY}
    assert _call(port, "/predict", b"inputs=x", headers=form)[0] == 415
    assert _post(port, "/predict", {"inputs": "x"})[0] == 401  # no key
    assert _call(port, "/nowhere", headers=KEY)[0] == 404
    assert _post(port, "/predict", {"inputs": "Oslo ."}, headers=KEY)[0] == 200  # still serving


@pytest.mark.slow
@pytest.mark.system
def test_a_bad_request_fails_alone_in_its_batch_and_sigterm_drains(ner_checkpoint: Path, tmp_path: Path) -> None:
    """The checkpoint's export served on ONNX: four requests sent together are run as one batch
    (the first waits up to 3 s for the others); SIGTERM arrives while they wait: each is
    answered — the bad one with its own 422 — and the server exits 0."""
    run_bertkit("export", str(ner_checkpoint), str(tmp_path / "export"), cwd=tmp_path)
    assert json.loads((tmp_path / "export/bertkit.json").read_text())["max_length"] == 128  # the recipe's
    bodies = [["Peter flew to Oslo ."], [LONG, "Fine ."], ["ok", "  "], ["Paris ."]]
    options = ("--backend", "onnx", "--max_batch_size", "4", "--batch_timeout", "3")
    with serving(tmp_path / "export", tmp_path, *options) as (port, server):
        assert _call(port, "/info")[1]["model"]["backend"] == "onnx"
        assert _post(port, "/embed", {"inputs": "Oslo ."})[0] == 404  # the graph ends in the logits
        with ThreadPoolExecutor(4) as pool:
            answers = [pool.submit(_post, port, "/predict", {"inputs": body}) for body in bodies]
            time.sleep(1.0)
            server.send_signal(signal.SIGTERM)
            answers = [a.result() for a in answers]
        ended = server.wait(timeout=60)
        assert ended.returncode == 0, ended.stdout + ended.stderr
    assert [status for status, _ in answers] == [200, 200, 422, 200], answers
    assert answers[2][1]["detail"] == "inputs[1]: empty text"
    for body, (_, records) in zip(bodies, answers, strict=True):
        if isinstance(records, list):
            assert [r["text"] for r in records] == body and all(r["entities"] for r in records)


def test_serve_routes_follow_the_backend_and_embed_option(ner_checkpoint: Path) -> None:
    from bertkit.commands.serving import server

    def routes(**options) -> set[str]:
        return {getattr(r, "path", "") for r in server(str(ner_checkpoint), **options).app.routes}

    assert {"/", "/predict", "/embed", "/info", "/health"} <= routes()
    assert "/embed" not in routes(embed=False) and "/predict" in routes(embed=False)
    for precision in ("bf16", "int8"):  # what /info answers
        assert server(str(ner_checkpoint), precision=precision).model_metadata["precision"] == precision


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_cpu_worker_runs_the_model_the_main_process_loaded(ner_checkpoint: Path, precision: str, capsys) -> None:
    """The model crosses to a worker as LitServe's spawned process receives it (pickled, its
    tensors in shared memory), is converted and packed there, and answers as a predictor loaded
    from the checkpoint does; the main process's copy stays float32 and unpacked."""
    from multiprocessing.reduction import ForkingPickler

    from bertkit.commands.serving import Batching, PredictAPI, load_predictors
    from bertkit.model.prepacked import PrepackedLinear, prepacking_available

    loaded = load_predictors(str(ner_checkpoint), {}, "torch", 1024, "cpu")
    api = PredictAPI(str(ner_checkpoint), "torch", Batching(), precision=precision, loaded=loaded)
    worker = ForkingPickler.loads(ForkingPickler.dumps(api))
    assert all(p.is_shared() for p in worker.loaded["default"].encoder.parameters())
    worker.setup("cpu")
    assert "PredictAPI received on cpu" in capsys.readouterr().out and worker.loaded is None
    alone = Predictor.load(ner_checkpoint).in_precision(precision)
    texts = ["Peter Blackburn flew to Oslo .", LONG]
    assert worker.predictor.predict(texts) == alone.predict(texts)
    assert worker.predictor.description.get("precision") == alone.description.get("precision")
    main = loaded["default"]
    assert "precision" not in main.description and all(p.dtype == torch.float32 for p in main.encoder.parameters())
    assert not any(isinstance(m, PrepackedLinear) for m in main.encoder.modules())  # packed in the worker alone
    packed = any(isinstance(m, PrepackedLinear) for m in worker.predictor.encoder.modules())
    assert packed == (precision == "fp32" and prepacking_available())


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.browser
def test_the_page_highlights_entities_in_a_real_browser(served: int) -> None:
    """``GET /`` in headless Chromium: type the key and two lines, run, read the marks."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no {CHROMIUM}: apt-get install chromium (.ci/run installs it)")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    lines = ["Peter Blackburn flew to Oslo .", "EU rejects German call ."]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(120_000)  # a loaded 2-core machine answers slowly
            page.goto(f"http://127.0.0.1:{served}/")
            page.wait_for_selector("#key", state="visible")  # /info asked for the key
            page.fill("#key", "k")
            page.fill("#text", "\n".join(lines))
            page.click("#submit")
            page.wait_for_selector(".entities")
            boxes = page.query_selector_all(".entities")
            assert len(boxes) == 2
            for box, line in zip(boxes, lines, strict=True):
                marks = box.query_selector_all("mark.entity")
                assert [m.get_attribute("data-type") for m in marks] == ["PER"] * len(line.split())
                assert [m.evaluate("m => m.firstChild.textContent") for m in marks] == line.split()
            assert "TokenClassification on a bert encoder (torch;" in page.text_content("#about")
            page.fill("#text", "   \n ")
            page.click("#submit")  # blank lines are not sent: the page says so itself (no 422 from the server)
            page.wait_for_function("document.getElementById('error').textContent !== ''")
            assert page.text_content("#error") == "Type some text: one input per line."
            page.fill("#key", "wrong")
            page.fill("#text", "Oslo .")
            page.click("#submit")
            page.wait_for_function("document.getElementById('error').textContent !== ''")
            assert page.text_content("#error").startswith(("401", "403"))
        finally:
            browser.close()


@contextmanager
def page_answered_by(answer: Callable[[str, Any], Any]) -> Iterator[Any]:
    """The page in headless Chromium at http://bertkit.test/, its requests answered in this
    process: ``answer(path, request)`` gives the JSON of ``/info`` and ``/predict``."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no {CHROMIUM}: apt-get install chromium (.ci/run installs it)")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    from bertkit.commands.serving import PAGE

    def route(route) -> None:
        path = route.request.url.split("bertkit.test", 1)[1]
        if path == "/":
            route.fulfill(body=PAGE.read_text(), content_type="text/html")
        else:
            route.fulfill(json=answer(path, route.request))

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(120_000)  # a loaded 2-core machine answers slowly
            page.route("http://bertkit.test/**", route)
            page.goto("http://bertkit.test/")
            yield page
        finally:
            browser.close()


def predictor_answers(predictor: Predictor) -> Callable[[str, Any], Any]:
    return lambda path, request: (
        {"model": predictor.info()} if path == "/info" else predictor.predict(json.loads(request.post_data)["inputs"])
    )


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.parametrize("kind", ["qa", "sequence"])
def test_the_page_marks_the_answer_and_draws_label_bars(kind: str) -> None:
    """The page with its /info and /predict answered by a Predictor in this process (the records
    a server sends): the answer is marked in its context; one bar per label, the predicted label
    first."""
    head = QuestionAnswering() if kind == "qa" else SequenceClassification(labels=["neg", "pos", "mixed"])
    predictor = Predictor.from_model(tiny(head), max_length=48)
    context = "Peter Blackburn flew from Oslo to Paris on Tuesday ."
    with page_answered_by(predictor_answers(predictor)) as page:
        if kind == "qa":
            page.wait_for_selector("#field-question", state="visible")  # the task's record fields
            assert page.text_content("#text-label") == "Context"
            page.fill("#text", context)
            page.click("#submit")
            assert page.text_content("#error") == "Type the question."
            page.fill("#field-question", "Who flew?")
            page.click("#submit")
            page.wait_for_selector(".answer mark")
            record = predictor.predict([{"question": "Who flew?", "context": context}])[0]
            assert page.text_content(".answer mark") == context[record["start"] : record["end"]]
            assert page.text_content(".answer") == context
        else:
            page.wait_for_function("document.getElementById('about').textContent.includes('Sequence')")
            page.fill("#text", "a charming journey .")
            page.click("#submit")
            page.wait_for_selector(".labels .bar")
            rows = [b.get_attribute("data-label") for b in page.query_selector_all(".labels .bar")]
            record = predictor.predict(["a charming journey ."])[0]
            assert sorted(rows) == ["mixed", "neg", "pos"] and rows[0] == record["label"]
            assert page.get_attribute(".labels .bar.chosen", "data-label") == record["label"]


@pytest.mark.slow
@pytest.mark.browser
def test_the_page_draws_nested_entities_inside_each_other() -> None:
    text = "the IL-9 gene in U938 T cells"
    spans = [("DNA", 4, 13), ("protein", 4, 8), ("cell_type", 17, 29), ("cell_line", 17, 21), ("protein", 9, 21)]
    record = {"text": text, "entities": [{"type": t, "text": text[a:b], "start": a, "end": b} for t, a, b in spans]}
    info = {"model": {"family": "bert", "head": "SpanClassification", "backend": "torch", "max_length": 128}}
    with page_answered_by(lambda path, request: info if path == "/info" else [record]) as page:
        page.fill("#text", text)
        page.click("#submit")
        page.wait_for_selector(".entities mark")
        outer = page.query_selector_all(".entities > mark.entity")
        assert [m.get_attribute("data-type") for m in outer] == ["DNA", "cell_type"]
        inner = [m.query_selector("mark.entity") for m in outer]
        assert [(m.get_attribute("data-type"), m.evaluate("m => m.firstChild.textContent")) for m in inner] == [
            ("protein", "IL-9"), ("cell_line", "U938")
        ]  # fmt: skip
        assert page.text_content(".entities .crossing") == "protein: gene in U938"  # crosses two
        assert page.evaluate("document.querySelector('.entities').firstChild.textContent") == "the "


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.mark.slow
def test_serve_refuses_a_checkpoint_it_cannot_load_before_listening(tmp_path: Path) -> None:
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(b"not a checkpoint")
    proc = Forked(["serve", str(broken), "--port", str(_free_port())], tmp_path).wait(timeout=300)
    assert proc.returncode == 2 and "bertkit: error:" in proc.stderr and "broken.ckpt" in proc.stderr, proc.stderr


def test_serve_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import bertkit.commands.serve
    from bertkit.cli import main

    real = bertkit.commands.serve.find_spec
    monkeypatch.setattr(bertkit.commands.serve, "find_spec", lambda name: None if name == "litserve" else real(name))
    assert main(["serve", "model.ckpt"]) == 2
    assert "pip install 'bertkit[serve]'" in capsys.readouterr().err


def test_serve_options_default_to_the_predictor_and_batching_defaults() -> None:
    import inspect

    import bertkit.commands.serve
    from bertkit.commands.serving import Batching
    from bertkit.inference.predictor import MAX_TOKENS

    options = inspect.signature(bertkit.commands.serve.serve).parameters
    assert options["max_tokens"].default == MAX_TOKENS == Batching().max_tokens
    assert options["max_batch_size"].default == Batching().max_batch_size
    assert options["batch_timeout"].default == Batching().timeout


@pytest.mark.parametrize("flag", ["--compile", "--bf16", "--int8"])
def test_torch_options_on_an_onnx_backend_are_refused_before_loading(flag: str, capsys: pytest.CaptureFixture) -> None:
    from bertkit.cli import main

    assert main(["serve", "export", "--backend", "onnx", flag, "true"]) == 2
    assert f"{flag} true needs the torch model; the onnx backend runs an ONNX graph" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--bf16", "true", "--int8", "true"], "--bf16 true and --int8 true: choose one precision"),
        (
            ["--int8", "true", "--accelerator", "cuda"],
            "--int8 true runs on the CPU (torch's int8 kernels), not --accelerator cuda",
        ),
        (
            ["--max_request_tokens", "4096", "--max_queued_tokens", "4000"],
            "--max_queued_tokens 4000: expected at least --max_request_tokens (4096)",
        ),
    ],
)
def test_serve_refuses_settings_that_cannot_run(
    options: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    from bertkit.cli import main

    assert main(["serve", "model.ckpt", *options]) == 2
    assert message in capsys.readouterr().err


def test_int8_on_a_gpu_machine_serves_on_the_cpu_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    from bertkit.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert main(["serve", str(tmp_path / "missing.ckpt"), "--int8", "true"]) == 2  # stops at loading, after the check
    assert "--int8 true runs on the CPU: the GPU stays unused" in caplog.text


SCRIPTS = st.sampled_from(
    [
        "Oslo",
        "flew",
        "東京",
        "北京大学",
        "タワーは",
        "ภาษาไทย",
        "한국어",
        "Ωμέγα",
        "😀",
        ",",
        "-",
        "2024",
        "https://a.b/c",
    ]
)


@settings(max_examples=40, deadline=None)
@given(words=st.lists(SCRIPTS, min_size=1, max_size=30), spaced=st.booleans(), tagger=st.booleans())
def test_a_request_is_counted_in_tokens_for_every_script_before_its_windows_are_made(words, spaced, tagger) -> None:
    """The pre-check counts the texts' tokens (``Predictor.least_tokens``), never more than the
    windows featurizing makes, whatever the script (a text without spaces is no single word) and
    whether the task reads the words of a text in windows (a tagger: a URL one word) or truncates
    the text (a classifier)."""
    from bertkit.commands.serving import Batching, PredictAPI

    text = (" " if spaced else "").join(words)
    predictor = _tiny_predictor() if tagger else _tiny_predictor(SequenceClassification(labels=["neg", "pos"]))
    counted = predictor.least_tokens([text])
    assert 0 < counted <= predictor.featurize(predictor.examples([text])).tokens
    api = PredictAPI("unused", "torch", Batching(max_request_tokens=max(counted - 1, 1)))
    api.predictors = {"default": predictor}
    calls = []
    api_featurize, predictor.featurize = predictor.featurize, lambda *a: calls.append(a) or api_featurize(*a)
    try:
        refusal = api.decode_request({"inputs": text})
        assert counted == 1 or (refusal.status == 413 and f"at least {counted:,} tokens" in refusal.detail)
        assert counted == 1 or not calls  # refused before any window was made
    finally:
        predictor.featurize = api_featurize


def test_a_long_text_without_spaces_is_refused_in_a_moment() -> None:
    from bertkit.commands.serving import Batching, PredictAPI

    api = PredictAPI("unused", "torch", Batching(max_request_tokens=16384))
    api.predictors = {"default": _tiny_predictor()}
    started = time.monotonic()
    refusal = api.decode_request({"inputs": "東京タワー" * 50_000})  # 250,000 characters, no space
    assert refusal.status == 413 and "at least 250,000 tokens" in refusal.detail and time.monotonic() - started < 10


_PREDICTORS: dict[str, Predictor] = {}


def _tiny_predictor(task: Any = None) -> Predictor:
    """A tiny model's predictor (made once per task class): a tagger of ``PER`` by default."""
    task = task or TokenClassification(["PER"])
    if type(task).__name__ not in _PREDICTORS:
        from bertkit import BertModule

        model = BertModule(task, pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2")
        _PREDICTORS[type(task).__name__] = Predictor.from_model(model.eval(), max_length=128)
    return _PREDICTORS[type(task).__name__]


async def _asgi_post(app: Any, path: str, body: bytes) -> int:
    """POST ``body`` to an ASGI ``app`` as a server would; the response status."""
    import asyncio

    scope = {
        "type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
        "headers": [(b"content-type", b"application/json")], "http_version": "1.1", "scheme": "http",
        "server": ("test", 80), "client": ("test", 1), "root_path": "",
    }  # fmt: skip
    given = [{"type": "http.request", "body": body, "more_body": False}]
    status: list[int] = []

    async def receive() -> dict:
        if given:
            return given.pop()
        await asyncio.Event().wait()  # the client never disconnects
        return {}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=3), min_size=1, max_size=8),
    limit=st.integers(1, 80),
)
def test_a_route_admits_requests_while_the_work_queued_for_it_fits_its_budget(sizes, limit) -> None:
    """Requests that stay in the model (none answered yet) are admitted in turn while the tokens
    admitted fit ``limit`` (the first whatever its size), the others answered 503 at once; once
    answered, their work leaves the count (the next request of any size is admitted)."""
    pytest.importorskip("litserve")
    import asyncio

    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from bertkit.commands.serving import WorkQueue

    async def scenario() -> None:
        release, entered = asyncio.Event(), []

        async def model(request: Any) -> JSONResponse:  # a route whose model is busy until released
            entered.append(request.url.path)
            await release.wait()
            return JSONResponse([])

        app = Starlette(routes=[Route("/predict", model, methods=["POST"])])
        admitted = WorkQueue.counters(("/predict",))
        count = lambda texts: [len(t.split()) for t in texts]  # noqa: E731  # a token per word
        app.add_middleware(WorkQueue, count_tokens=count, limit=limit, admitted=admitted)
        queued, expected, pending = 0, [], []
        for texts in sizes:
            body = json.dumps({"inputs": [" ".join(["w"] * n) for n in texts]}).encode()
            work = sum(texts)
            fits = not queued or queued + work <= limit
            queued += work if fits else 0
            expected.append(200 if fits else 503)
            task = asyncio.create_task(_asgi_post(app, "/predict", body))
            pending.append(task)
            for _ in range(2000):  # until the model holds it, or it was answered
                if task.done() or len(entered) == expected.count(200) and fits:
                    break
                await asyncio.sleep(0.001)
            assert task.done() == (not fits)  # a refusal comes at once, an admitted request waits
            assert admitted["/predict"].value == queued
        release.set()
        assert await asyncio.gather(*pending) == expected
        assert admitted["/predict"].value == 0
        big = json.dumps({"inputs": " ".join(["w"] * (limit + 5))}).encode()
        assert await _asgi_post(app, "/predict", big) == 200  # alone, admitted whatever its size

    asyncio.run(scenario())
