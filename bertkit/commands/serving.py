"""``bertkit serve``: a checkpoint behind HTTP on LitServe (Lightning's serving engine; the ``serve``
extra). Routes:

- ``POST /predict`` ``{"inputs": TEXT | [TEXT …] | RECORD | [RECORD …]}`` -> a list with one
  record per input, the records ``bertkit predict`` writes (a text is a line of the head's
  plain-text format; a record one object of its JSON-lines format, ``{"question", "context"}``
  for question answering).
- ``POST /embed`` ``{"inputs": TEXT | [TEXT …], "normalize": true}`` -> a list of vectors, as
  text-embeddings-inference answers (mean-pooled last layer).
- ``GET /health``, ``GET /info`` (LitServe's; ``/info`` carries the model's family, head, labels
  and max length); ``GET /`` a page to try the model.

A request the model cannot read gets a 4xx whose message names the field, alone: the requests
batched with it are answered, and the server keeps serving. Inputs are windowed as ``bertkit
predict`` windows them; the windows of the requests batched together are sorted by length and
cut by a token budget. SIGTERM drains the requests in flight, then the server exits 0.
"""

from __future__ import annotations

import dataclasses
import hmac
import os
import signal
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import litserve as ls
import torch
from fastapi import HTTPException
from pydantic import Field
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from bertkit.api.app import (
    DEFAULT_ADAPTER,
    MAX_TOKENS,
    Backend,
    Featurized,
    Precision,
    Predictor,
    Schema,
    Text,
    check_texts,
    load_adapters,
    parse,
    parse_json,
)

MAX_INPUTS = 256
"""Most inputs in one request."""
MAX_BODY = 1_000_000
"""Most bytes in one request body."""


class JSONBodies(BaseHTTPMiddleware):
    """A POST body must be UTF-8 JSON (``parse_json``) of at most ``MAX_BODY`` bytes sent as
    ``application/json``: else 415, 413 or 400 with what was expected (LitServe would answer 500
    or parse a form). The body is read as it streams and refused as soon as it passes the limit
    (a chunked body has no ``Content-Length`` to check first)."""

    async def dispatch(self, request: Request, call_next: Any) -> Response:
        if request.method == "POST":
            kind = request.headers.get("content-type", "").split(";")[0].strip()
            if kind != "application/json":
                return JSONResponse({"detail": f"Content-Type {kind or 'none'}: expected application/json"}, 415)
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_BODY:
                return JSONResponse({"detail": f"request body of {int(declared):,} bytes: at most {MAX_BODY:,}"}, 413)
            chunks, size = [], 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY:
                    return JSONResponse({"detail": f"request body of more than {MAX_BODY:,} bytes: at most that"}, 413)
                chunks.append(chunk)
            body = b"".join(chunks)
            try:
                parse_json(body, "the request body")
            except ValueError as err:  # not UTF-8, not JSON, NaN, a key twice, nested too deep
                return JSONResponse({"detail": str(err)}, 400)
            request._body = body  # what Starlette's Request.body() caches: the app downstream reads it
        return await call_next(request)


class APIKey(BaseHTTPMiddleware):
    """Every route but ``OPEN`` answers 401 unless the request's ``X-API-Key`` header holds the
    key (compared in constant time); ``/docs`` and ``/openapi.json`` describe the server, so
    they are closed too."""

    OPEN = ("/", "/health")

    def __init__(self, app: Any, key: str) -> None:
        super().__init__(app)
        self.key = key.encode("utf-8")

    async def dispatch(self, request: Request, call_next: Any) -> Response:
        given = request.headers.get("x-api-key", "").encode("utf-8")
        if request.url.path not in self.OPEN and not hmac.compare_digest(given, self.key):
            return JSONResponse({"detail": "a missing or wrong X-API-Key header"}, 401)
        return await call_next(request)


Inputs = Annotated[list[Text], Field(min_length=1, max_length=MAX_INPUTS)]
Records = Annotated[list[dict[str, Any]], Field(min_length=1, max_length=MAX_INPUTS)]


class PredictRequest(Schema):
    """``POST /predict``'s body: a text, a record, or a list of 1 to ``MAX_INPUTS`` of either;
    ``adapter``: which of the server's adapters answers (``bertkit serve --adapters``; absent:
    ``--model``'s, named ``default``)."""

    inputs: Text | dict[str, Any] | Inputs | Records
    adapter: str = DEFAULT_ADAPTER

    def listed(self) -> list[Any]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]


class EmbedRequest(Schema):
    """``POST /embed``'s body (text-embeddings-inference's): texts and whether to normalize."""

    inputs: Text | Inputs
    normalize: bool = True

    def listed(self) -> list[str]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]


ROUTES: dict[str, type[Schema]] = {"/predict": PredictRequest, "/embed": EmbedRequest}
"""The routes whose requests ``WorkQueue`` admits by work, and their bodies' schemas."""


def request_texts(inputs: Any) -> list[str]:
    """The texts of a request's ``inputs``: a text, a record, or a list of either (a record's
    string values); what its work is counted in."""
    listed = inputs if isinstance(inputs, list) else [inputs]
    values = [x for i in listed for x in ([i] if not isinstance(i, dict) else i.values())]
    return [x for x in values if isinstance(x, str)]


class WorkQueue(BaseHTTPMiddleware):
    """``POST /predict`` and ``/embed`` admitted by work, not by count: a request's work is its
    texts' sub-word tokens (``BertTokenizer.count_tokens``, in Rust: exact for every script), and
    a route takes it while its requests admitted and not yet answered hold at most ``limit``
    tokens together (``--max_queued_tokens`` x ``--workers``; counted across LitServe's HTTP
    processes in ``admitted``, shared memory made before they fork), else answers 503 with
    ``Retry-After`` at once. A request therefore waits behind at most ``limit`` tokens of other
    requests' work, whatever they send: the wait a one-sentence request sees is bounded by the
    time the model takes for that much (docs/cli.md, Serving, states it as measured). With nothing
    admitted, a request is taken whatever its size (its model process refuses one over
    ``--max_request_tokens``, 413). A body that is not a request is passed on for the route to
    refuse (4xx)."""

    def __init__(self, app: Any, count_tokens: Any, limit: int, admitted: dict[str, Any]) -> None:
        super().__init__(app)
        self.count_tokens, self.limit, self.admitted = count_tokens, limit, admitted

    @staticmethod
    def counters(routes: tuple[str, ...] = tuple(ROUTES)) -> dict[str, Any]:
        """A shared counter of admitted tokens per route (``multiprocessing.Value``), made before
        LitServe forks its HTTP processes."""
        import multiprocessing

        return {route: multiprocessing.get_context("fork").Value("q", 0) for route in routes}

    async def dispatch(self, request: Request, call_next: Any) -> Response:
        route = request.url.path
        if request.method != "POST" or route not in self.admitted:
            return await call_next(request)
        try:
            body = parse(ROUTES[route], parse_json(await request.body(), "the request body"), "the request body")
        except ValueError:
            return await call_next(request)  # the route answers what is wrong with it
        work = sum(self.count_tokens([t for t in request_texts(body.inputs) if _unicode(t)]))
        counter = self.admitted[route]
        with counter.get_lock():
            queued = counter.value
            if not queued or queued + work <= self.limit:
                counter.value = queued + work
        if queued and queued + work > self.limit:
            return JSONResponse(
                {"detail": f"busy: {queued:,} tokens of requests are queued for {route} and this one makes {work:,}; "
                 f"at most {self.limit:,} together (bertkit serve --max_queued_tokens): retry shortly"},
                503, headers={"Retry-After": "1"},
            )  # fmt: skip
        try:
            return await call_next(request)
        finally:
            with counter.get_lock():
                counter.value -= work


def _unicode(text: str) -> bool:
    """Whether ``text`` is Unicode text (a record's value may hold a lone surrogate, which the
    route refuses and the tokenizer cannot count)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Batching:
    """How requests are run together: up to ``max_batch_size`` requests, the first waiting up to
    ``timeout`` seconds for others; their windows cut into forward passes of at most
    ``max_tokens`` tokens, padding included (``Predictor``); one request's windows may hold
    ``max_request_tokens`` tokens at most; a route's model process has at most
    ``max_queued_tokens`` tokens of requests admitted and not yet answered (``WorkQueue``)."""

    max_tokens: int = MAX_TOKENS
    max_batch_size: int = 8
    timeout: float = 0.01
    max_request_tokens: int = 16384
    max_queued_tokens: int = 32768


@dataclasses.dataclass
class Refusal:
    """A request the model cannot read, answered with ``status`` and ``detail`` alone: decoding
    never raises, so that a bad request never fails the others batched with it."""

    status: int
    detail: str


class _ModelAPI(ls.LitAPI):
    """What both routes share: the model, handed over by the main process where the worker runs on
    the CPU (``loaded``: predictors loaded with ``prepack=False``, which the worker process receives
    pickled, their tensors in shared memory) and loaded from ``model`` in ``setup`` elsewhere;
    requests decoded by ``read`` (a ``Refusal`` where it raises), then run together,
    ``max_batch_size`` requests at most, waiting up to ``batch_timeout`` seconds for more.
    (Request arguments stay unannotated: LitServe reads an annotation as the body's schema.)"""

    def __init__(
        self, model: str, backend: Backend, batching: Batching, compile: bool = False, precision: Precision = "fp32",
        adapters: dict[str, str] | None = None, loaded: dict[str, Predictor] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(api_path=self.route, max_batch_size=batching.max_batch_size, batch_timeout=batching.timeout)
        self.model, self.backend, self.max_tokens = model, backend, batching.max_tokens
        self.max_request_tokens = batching.max_request_tokens
        self.compile, self.precision, self.adapters, self.loaded = compile, precision, adapters or {}, loaded

    route = ""
    """The route's path."""

    def setup(self, device: str) -> None:
        started = time.monotonic()
        if self.loaded is not None and torch.device(device).type == "cpu":
            self.predictors, how = self.loaded, "received"
        else:
            self.predictors, how = (
                load_predictors(self.model, self.adapters, self.backend, self.max_tokens, device),
                "loaded",
            )
        self.loaded = None  # a worker restarted by LitServe is handed the main process's copy again
        self.predictor = self.predictors[DEFAULT_ADAPTER].in_precision(self.precision)
        if self.compile:
            self.predictor.compile()
        elif self.precision == "fp32":
            for predictor in self.predictors.values():
                predictor.prepack()
        print(
            f"bertkit serve: {type(self).__name__} {how} on {device} in {time.monotonic() - started:.1f} s", flush=True
        )

    def read(self, request: Any) -> Any:
        raise NotImplementedError

    def check_work(self, tokens: int, bound: str = "") -> None:
        """Raises HTTPException 413 when a request's inputs make more than ``max_request_tokens``
        (``bound``: ``at least``, for the texts' tokens counted before their windows are made)."""
        if tokens > self.max_request_tokens:
            raise HTTPException(
                413,
                f"inputs: {bound + ' ' if bound else ''}{tokens:,} tokens (all windows): at most "
                f"{self.max_request_tokens:,} per request (bertkit serve --max_request_tokens); send long documents "
                "in several requests",
            )

    def run(self, requests: list[Any]) -> list[Any]:
        """The outputs of decoded requests, one each."""
        raise NotImplementedError

    def decode_request(self, request) -> Any:
        try:
            return self.read(request)
        except HTTPException as err:
            return Refusal(err.status_code, str(err.detail))
        except ValueError as err:
            return Refusal(422, str(err))

    def batch(self, requests: list[Any]) -> list[Any]:
        return requests

    def predict(self, requests) -> Any:
        batched = isinstance(requests, list)
        requests = requests if batched else [requests]
        readable = [r for r in requests if not isinstance(r, Refusal)]
        answers = iter(self.run(readable) if readable else [])
        outputs = [r if isinstance(r, Refusal) else next(answers) for r in requests]
        return outputs if batched else outputs[0]

    def unbatch(self, outputs: list[Any]) -> list[Any]:
        return outputs

    def encode_response(self, output) -> Any:
        if isinstance(output, Refusal):
            return JSONResponse({"detail": output.detail}, output.status)
        return output


class PredictAPI(_ModelAPI):
    """``POST /predict``: the task's records (each request's examples featurized on their own)."""

    route = "/predict"

    def read(self, request: Any) -> tuple[str, Featurized]:
        body = parse(PredictRequest, request, "the request body")
        predictor = self.predictors.get(body.adapter)
        if predictor is None:
            raise ValueError(f"adapter: {body.adapter!r} is not served; expected one of {sorted(self.predictors)}")
        inputs = body.listed()
        # the texts' own tokens, counted in Rust (every script: 250,000 ideographs are 250,000 tokens, one
        # "word" by spaces): a lower bound of their windows' tokens, refused before any window is made.
        # Records (a task's own fields, such as a question truncated to max_query_length) are counted
        # once featurized.
        self.check_work(predictor.least_tokens([x for x in inputs if isinstance(x, str)]), "at least")
        featurized = predictor.featurize(predictor.examples(inputs))
        self.check_work(featurized.tokens)
        return body.adapter, featurized

    def run(self, requests: list[tuple[str, Featurized]]) -> list[list[dict[str, Any]]]:
        """Each adapter's requests run together (one adapter active per forward pass)."""
        answers: list[Any] = [None] * len(requests)
        for name in dict.fromkeys(name for name, _ in requests):
            rows = [i for i, (asked, _) in enumerate(requests) if asked == name]
            records = self.predictors[name].predict_featurized([requests[i][1] for i in rows])
            for i, record in zip(rows, records, strict=True):
                answers[i] = record
        return answers


class EmbedAPI(_ModelAPI):
    """``POST /embed``: text-embeddings-inference's request and response (with ``--adapters``,
    the encoder with ``--model``'s adapter)."""

    route = "/embed"

    def read(self, request: Any) -> tuple[list[str], bool]:
        body = parse(EmbedRequest, request, "the request body")
        check_texts(body.listed())
        limit = self.predictor.max_length  # embed truncates each text to it
        self.check_work(sum(min(n, limit) for n in self.predictor.tokenizer.count_tokens(body.listed())))
        return body.listed(), body.normalize

    def run(self, requests: list[tuple[list[str], bool]]) -> list[list[list[float]]]:
        vectors = iter(self.predictor.embed([t for texts, _ in requests for t in texts], normalize=False))
        answers = []
        for texts, normalize in requests:
            rows = torch.tensor([next(vectors) for _ in texts])
            answers.append((torch.nn.functional.normalize(rows, dim=-1) if normalize else rows).tolist())
        return answers


class DrainingServer(ls.LitServer):
    """A LitServer that, on SIGTERM to its main process (``kill``, Kubernetes, ``docker stop``),
    stops accepting connections, answers the requests in flight, then exits 0 (LitServe's own
    shutdown closes the workers' queues first, failing those requests)."""

    def run(self, *args: Any, **kwargs: Any) -> None:
        main = os.getpid()

        def interrupt(signum: int, frame: Any) -> None:
            if os.getpid() != main:  # a worker forked with this handler: uvicorn raises the signal again once drained
                raise SystemExit(0)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # draining already: a second SIGTERM changes nothing
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, interrupt)
        try:
            super().run(*args, **kwargs)
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _perform_graceful_shutdown(self, manager: Any, uvicorn_workers: dict, shutdown_reason: str = "normal") -> None:
        for worker in uvicorn_workers.values():  # uvicorn drains on SIGTERM while the model workers still answer
            if worker.is_alive() and not isinstance(worker, threading.Thread):
                worker.terminate()
        for worker in uvicorn_workers.values():
            worker.join(timeout=self.uvicorn_graceful_timeout)
        alive = {name: w for name, w in uvicorn_workers.items() if w.is_alive()}
        super()._perform_graceful_shutdown(manager, alive, shutdown_reason)


def load_predictors(
    model: str, adapters: dict[str, str], backend: Backend, max_tokens: int, device: str, prepack: bool = False
) -> dict[str, Predictor]:
    """The predictors a server answers with, by adapter name: ``model``'s alone as ``default``, or
    it and each of ``adapters`` over one shared encoder (``load_adapters``); unpacked unless
    ``prepack`` (``Predictor.prepack``)."""
    if not adapters:
        return {DEFAULT_ADAPTER: Predictor.load(model, max_tokens, device, backend, prepack)}
    return load_adapters({DEFAULT_ADAPTER: model, **adapters}, max_tokens, device, prepack)


PAGE = Path(__file__).with_name("serve_page.html")
"""``GET /``: a page to try the model (no build step)."""


def server(
    model: str, backend: Backend = "torch", accelerator: str = "auto", workers: int = 1,
    batching: Batching | None = None, timeout: float = 30.0, embed: bool = True, compile: bool = False,
    precision: Precision = "fp32", api_key: str | None = None, adapters: dict[str, str] | None = None,
) -> ls.LitServer:  # fmt: skip
    """The LitServer of ``model`` (a checkpoint or an export folder) with its routes and the page
    (``workers`` model processes per route and device; arguments as ``bertkit serve``'s; no
    ``/embed`` on an ONNX backend, whose graph ends in the head's logits); the model is loaded
    once here, so that one that cannot load stops start-up, and handed to the CPU workers (the
    torch backend; an ONNX Runtime session does not pickle); with ``api_key``, every route but the
    page and ``/health`` needs it in ``X-API-Key`` (checked before a body is read); ``adapters``:
    more adapter checkpoints over ``model``'s base, answered by the same encoder
    (``bertkit.inference.adapter_set``)."""
    batching = batching or Batching()
    loaded = load_predictors(model, adapters or {}, backend, batching.max_tokens, "cpu")
    info = loaded[DEFAULT_ADAPTER].info()
    if precision != "fp32":
        info["precision"] = precision  # /info states the precision served, which each worker converts to
    if adapters:
        info["adapters"] = {name: predictor.info() for name, predictor in loaded.items()}
    handed = loaded if backend == "torch" else None
    apis = [PredictAPI(model, backend, batching, compile, precision, adapters, handed)]
    if embed and backend == "torch":  # the default adapter's predictor (the whole set travels with its encoder)
        apis.append(
            EmbedAPI(model, backend, batching, compile, precision, None, {DEFAULT_ADAPTER: loaded[DEFAULT_ADAPTER]})
        )
    queue = {
        "count_tokens": loaded[DEFAULT_ADAPTER].tokenizer.count_tokens, "limit": batching.max_queued_tokens * workers,
        "admitted": WorkQueue.counters(),
    }  # fmt: skip
    lit_server = DrainingServer(
        apis, accelerator=accelerator, workers_per_device=workers, timeout=timeout, model_metadata=info,
        middlewares=[(WorkQueue, queue), JSONBodies, *([(APIKey, {"key": api_key})] if api_key else [])],
    )  # fmt: skip
    page = PAGE.read_text(encoding="utf-8")
    routes = lit_server.app.router.routes
    routes[:] = [r for r in routes if getattr(r, "path", None) != "/"]  # LitServe's "litserve running"
    lit_server.app.add_api_route("/", lambda: HTMLResponse(page), methods=["GET"], include_in_schema=False)
    return lit_server
