"""``bertkit serve``: a checkpoint or export folder over HTTP (LitServe, ``bertkit.commands.serving``).
The signature and docstring are the command's options and help (jsonargparse); LitServe and torch
are imported when the command runs."""

from __future__ import annotations

import logging
import os
import socket
from importlib.util import find_spec
from pathlib import Path

from bertkit.api.app import Backend, Precision

log = logging.getLogger(__name__)


def serve(
    model: str,
    backend: Backend = "torch",
    host: str = "127.0.0.1",
    port: int = 8000,
    accelerator: str = "auto",
    workers: int = 1,
    max_tokens: int = 1024,
    max_request_tokens: int = 16384,
    max_queued_tokens: int = 32768,
    max_batch_size: int = 8,
    batch_timeout: float = 0.01,
    timeout: float = 30.0,
    api_key: str | None = None,
    api_key_file: str | None = None,
    embed: bool = True,
    compile: bool = False,
    bf16: bool = False,
    int8: bool = False,
    adapters: dict[str, str] | None = None,
) -> None:
    """Serve a ``bertkit fit`` checkpoint or a ``bertkit export`` folder over HTTP (LitServe;
    ``pip install 'bertkit[serve]'``): ``POST /predict`` (the records ``bertkit predict``
    writes), ``POST /embed`` (text-embeddings-inference's request and response; torch backend),
    ``GET /health``, ``GET /info``, and a page to try the model at ``GET /``. SIGTERM answers
    the requests in flight, then exits.

    Args:
        model: a ``.ckpt`` file (``runs/ner/checkpoints/last.ckpt`` …) or an export folder.
        backend: ``torch``; ``onnx`` or ``onnx-int8``: onnxruntime on an export folder's
            ``model.onnx`` or ``model.int8.onnx`` (``pip install 'bertkit[onnx]'``).
        host: the address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface).
        port: the TCP port.
        accelerator: ``auto``, ``cpu`` or ``cuda``.
        workers: model processes per route and device.
        max_tokens: tokens per forward pass, padding included (windows sorted by length).
        max_request_tokens: the most tokens one request's inputs may make, all windows together
            (a request over it is answered 413 before it reaches the model, which it would
            otherwise hold while the requests behind it wait).
        max_queued_tokens: the most tokens of requests a route's model process holds admitted and
            not yet answered (times ``workers``); a request past it is answered 503 with
            ``Retry-After`` at once, so that a request waits behind at most this much work
            (docs/cli.md, Serving: the wait it bounds, as measured). At least ``max_request_tokens``.
        max_batch_size: requests run together in one model call (1: one at a time).
        batch_timeout: seconds the first request of a batch waits for others to join it.
        timeout: seconds a request may wait before a 504.
        api_key: require this value in every request's ``X-API-Key`` header (every route but
            ``/`` and ``/health``, ``/docs`` and ``/openapi.json`` included). A value given here
            is visible to other users in ``ps``: prefer ``--api_key_file`` or the
            ``BERTKIT_API_KEY`` environment variable.
        api_key_file: a file holding the API key (its first line).
        embed: serve ``/embed`` (torch backend): a second model process, about 0.5 GB more.
        compile: compile the encoder's blocks (``Predictor.compile``; torch backend): the first
            requests wait while it compiles; the Results page measures what it gains.
        bf16: run the torch model in bfloat16 (``Predictor.to_bfloat16``): faster than fp32 on a
            GPU and on a CPU with AVX512-BF16 or AMX, slower on one without; the Results page
            measures its speed and accuracy.
        int8: run the encoder's linear layers in int8 (``Predictor.to_int8``; torch backend, on
            the CPU): the fastest CPU option; the Results page measures its speed and accuracy.
        adapters: more LoRA adapter checkpoints trained over ``--model``'s base model, by name
            (``'{"sst2": "runs/sst2/checkpoints/last.ckpt"}'``; ``--model`` is then an adapter
            checkpoint too, named ``default``): one encoder in memory answers them all, a
            ``/predict`` request choosing one with its ``adapter`` field (torch backend, float32;
            ``pip install 'bertkit[lora]'``).
    """
    if find_spec("litserve") is None:
        raise ValueError("bertkit serve needs the serve extra: pip install 'bertkit[serve]'")
    api_key = _api_key(api_key, api_key_file)
    if backend != "torch" and embed:
        log.warning(
            "no /embed on the %s backend: its graph ends in the head's logits (--backend torch serves it)", backend
        )

    for flag, value in (("compile", compile), ("bf16", bf16), ("int8", int8)):
        if value and backend != "torch":
            raise ValueError(f"--{flag} true needs the torch model; the {backend} backend runs an ONNX graph")
    if bf16 and int8:
        raise ValueError("--bf16 true and --int8 true: choose one precision")
    if int8 and accelerator not in ("auto", "cpu"):
        raise ValueError(f"--int8 true runs on the CPU (torch's int8 kernels), not --accelerator {accelerator}")
    if adapters:
        _check_adapters(adapters, backend, compile or bf16 or int8)
    precision: Precision = "bf16" if bf16 else "int8" if int8 else "fp32"
    if int8 and accelerator == "auto":
        import torch

        if torch.cuda.is_available():
            log.warning("--int8 true runs on the CPU: the GPU stays unused (--bf16 true serves on it)")
        accelerator = "cpu"
    _check_port(host, port)
    from bertkit.commands.serving import Batching, server  # imports LitServe: after the checks above

    if max_queued_tokens < max_request_tokens:
        raise ValueError(
            f"--max_queued_tokens {max_queued_tokens}: expected at least --max_request_tokens ({max_request_tokens}), "
            "or no request of the largest size admitted could ever wait its turn"
        )
    batching = Batching(max_tokens, max_batch_size, batch_timeout, max_request_tokens, max_queued_tokens)
    routes = "POST /predict" + (f" (adapters: default, {', '.join(adapters)})" if adapters else "")
    routes += ", POST /embed" if embed and backend == "torch" else ""
    print(
        f"bertkit serve: loading {model} ({backend}, {precision}) in {workers} worker(s); "
        f"http://{host}:{port} answers once its model processes are ready (the page at /; {routes})",
        flush=True,
    )
    server(model, backend, accelerator, workers, batching, timeout, embed, compile, precision, api_key, adapters).run(
        host=host, port=port, generate_client_file=False, log_level="warning"
    )


def _api_key(given: str | None, file: str | None) -> str | None:
    """The API key: ``--api_key`` (with a warning), ``--api_key_file``'s first line or
    ``BERTKIT_API_KEY``; None without one.

    Raises:
        ValueError: both options, an unreadable or empty key file.
    """
    if given and file:
        raise ValueError("--api_key and --api_key_file: give one")
    if given:
        log.warning(
            "--api_key on the command line is visible to other users in ps: use --api_key_file or BERTKIT_API_KEY"
        )
        return given
    if file:
        try:
            key = Path(file).read_text(encoding="utf-8").partition("\n")[0].strip()
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"--api_key_file {file}: cannot read it ({err})") from None
        if not key:
            raise ValueError(f"--api_key_file {file}: the file's first line is empty")
        return key
    return os.environ.get("BERTKIT_API_KEY") or None


def _check_adapters(adapters: dict[str, str], backend: Backend, converted: bool) -> None:
    """Raises ValueError (ImportError without peft) before anything loads when ``--adapters``
    cannot be served: a name taken by ``--model``'s adapter, an ONNX backend, or another precision
    or compilation (they would convert the encoder every adapter shares)."""
    from bertkit.api.app import DEFAULT_ADAPTER, LORA_INSTALL

    if DEFAULT_ADAPTER in adapters:
        raise ValueError(f"--adapters: the name {DEFAULT_ADAPTER!r} is --model's adapter; choose another")
    if backend != "torch":
        raise ValueError(f"--adapters needs the torch backend; the {backend} backend runs one exported graph")
    if converted:
        raise ValueError("--adapters serves float32: --bf16, --int8 and --compile would convert the shared encoder")
    if find_spec("peft") is None:
        raise ImportError(f"--adapters needs peft, which is not installed: {LORA_INSTALL}")


def _check_port(host: str, port: int) -> None:
    """Raises ValueError when ``host:port`` cannot be listened on (in use, or not this machine's),
    before minutes go into loading the model."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as err:
            raise ValueError(
                f"--host {host} --port {port}: cannot listen there ({err.strerror}); choose another --port"
            ) from None
