"""``bertkit serve``: a checkpoint behind HTTP on LitServe (Lightning's serving engine; the ``serve``
extra). Routes:

- ``POST /predict`` ``{"inputs": TEXT | [TEXT …] | RECORD | [RECORD …]}`` -> a list with one
  record per input, the records ``bertkit predict`` writes (a text is a line of the head's
  plain-text format; a record one object of its JSON-lines format, ``{"question", "context"}``
  for question answering).
- ``POST /embed`` ``{"inputs": TEXT | [TEXT …], "normalize": true}`` -> a list of vectors, as
  text-embeddings-inference answers (mean-pooled last layer).
- ``GET /health``, ``GET /info`` (LitServe's; ``/info`` carries the model's family, head, labels
  and max length).

A request the model cannot read gets a 4xx whose message names the field; the server keeps
serving. Inputs are windowed as ``bertkit predict`` windows them.
"""

from __future__ import annotations

import json
from typing import Any

import litserve as ls
from fastapi import HTTPException
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bertkit.inference import Predictor, check_texts

MAX_INPUTS = 256
"""Most inputs in one request."""
MAX_BODY = 1_000_000
"""Most bytes in one request body."""


class JSONBodies(BaseHTTPMiddleware):
    """A POST body must be UTF-8 JSON of at most ``MAX_BODY`` bytes sent as ``application/json``:
    else 415, 413 or 400 with what was expected (LitServe would answer 500 or parse a form)."""

    async def dispatch(self, request: Request, call_next: Any) -> Response:
        if request.method == "POST":
            kind = request.headers.get("content-type", "").split(";")[0].strip()
            if kind != "application/json":
                return JSONResponse({"detail": f"Content-Type {kind or 'none'}: expected application/json"}, 415)
            body = await request.body()
            if len(body) > MAX_BODY:
                return JSONResponse({"detail": f"request body of {len(body):,} bytes: at most {MAX_BODY:,}"}, 413)
            try:
                json.loads(body)
            except ValueError as err:  # invalid JSON or not UTF-8
                return JSONResponse({"detail": f"the request body is not UTF-8 JSON ({err})"}, 400)
        return await call_next(request)


def request_inputs(request: Any, texts_only: bool = False) -> list[Any]:
    """``request["inputs"]`` as a list of texts or records.

    Raises:
        HTTPException 422: no ``inputs``, a wrong type, none or more than ``MAX_INPUTS`` inputs.
    """
    if not isinstance(request, dict) or "inputs" not in request:
        raise HTTPException(422, 'the request body must be a JSON object with "inputs"')
    inputs = request["inputs"]
    inputs = inputs if isinstance(inputs, list) else [inputs]
    kinds = (str,) if texts_only else (str, dict)
    wrong = next((i for i, x in enumerate(inputs) if not isinstance(x, kinds)), None)
    if wrong is not None:
        expected = "a string" if texts_only else "a string or a JSON object"
        raise HTTPException(422, f"inputs[{wrong}]: expected {expected}, got {type(inputs[wrong]).__name__}")
    if not inputs or len(inputs) > MAX_INPUTS:
        raise HTTPException(422, f"inputs: expected 1 to {MAX_INPUTS} inputs, got {len(inputs)}")
    return inputs


class _ModelAPI(ls.LitAPI):
    """What both routes share: the checkpoint, loaded once per worker in ``setup``. (Request
    arguments stay unannotated: LitServe reads an annotation as the body's schema.)"""

    def __init__(self, checkpoint: str, batch_size: int, api_path: str) -> None:
        super().__init__(api_path=api_path)
        self.checkpoint, self.batch_size = checkpoint, batch_size

    def setup(self, device: str) -> None:
        self.predictor = Predictor.from_checkpoint(self.checkpoint, self.batch_size, device)


class PredictAPI(_ModelAPI):
    """``POST /predict``: the head's records."""

    def decode_request(self, request) -> list[Any]:
        inputs = request_inputs(request)
        try:
            return self.predictor.examples(inputs)
        except ValueError as err:
            raise HTTPException(422, str(err)) from None

    def predict(self, examples: list[Any]) -> list[dict[str, Any]]:
        return self.predictor.predict_examples(examples)

    def encode_response(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return records


class EmbedAPI(_ModelAPI):
    """``POST /embed``: text-embeddings-inference's request and response."""

    def decode_request(self, request) -> tuple[list[str], bool]:
        texts = request_inputs(request, texts_only=True)
        normalize = request.get("normalize", True)
        if not isinstance(normalize, bool):
            raise HTTPException(422, f"normalize: expected true or false, got {normalize!r}")
        try:
            check_texts(texts)
        except ValueError as err:
            raise HTTPException(422, str(err)) from None
        return texts, normalize

    def predict(self, request: tuple[list[str], bool]) -> list[list[float]]:
        return self.predictor.embed(*request)

    def encode_response(self, vectors: list[list[float]]) -> list[list[float]]:
        return vectors


def server(
    checkpoint: str, accelerator: str = "auto", workers: int = 1, batch_size: int = 32, timeout: float = 30.0
) -> ls.LitServer:
    """The LitServer of ``checkpoint`` with both routes (``workers`` model processes per route and
    device); the checkpoint is loaded once here, so that one that cannot load stops start-up."""
    info = Predictor.from_checkpoint(checkpoint, batch_size).info()
    apis = [PredictAPI(checkpoint, batch_size, "/predict"), EmbedAPI(checkpoint, batch_size, "/embed")]
    return ls.LitServer(
        apis, accelerator=accelerator, workers_per_device=workers, timeout=timeout, model_metadata=info,
        middlewares=[JSONBodies],
    )  # fmt: skip
