"""The ``bertkit embed``, ``bertkit export`` and ``bertkit serve`` commands. Their signatures and docstrings are the
commands' options and help (jsonargparse); the implementations (torch, Lightning) are imported
when a command runs, so ``bertkit embed --help`` answers at once."""

from __future__ import annotations

import json
import logging
import os
from contextlib import nullcontext
from importlib.util import find_spec
from pathlib import Path

from bertkit.choices import Backend, Features, Pooling, Precision, Pruner
from bertkit.io import atomic_path

log = logging.getLogger(__name__)


def embed(
    input: str,
    output: str,
    pretrained: str = "all-MiniLM-L6-v2",
    checkpoint: str | None = None,
    features: Features = "last",
    pooling: Pooling = "mean",
    max_length: int = 128,
    batch_size: int = 32,
    int8: bool = False,
) -> None:
    """Write contextual features of each non-blank line of a UTF-8 text file (BERT §5.3).

    ``OUTPUT`` ending in ``.safetensors``: one tensor ``features`` (lines, D) (pooled only), with
    the settings and each row's ``file:line`` in its metadata; ``.jsonl``: one record per line with
    ``source`` (``file:line``), ``text`` and ``features`` (``tokens`` and a list of vectors with
    ``--pooling tokens``). Lines are read, embedded and (JSONL) written 4,096 at a time into
    ``OUTPUT.partial``, renamed to ``OUTPUT`` at the end: memory does not grow with the input,
    and an interrupted run keeps the lines it wrote.

    Args:
        input: the text file, one text per line (blank lines are skipped; sources keep numbers).
        output: ``.safetensors`` or ``.jsonl`` file to (over)write atomically.
        pretrained: a Hugging Face format directory or a registered model name.
        checkpoint: a ``bertkit fit`` checkpoint whose (fine-tuned) encoder to use instead.
        features: last, second_to_last, sum_last_four or concat_last_four (Table 7).
        pooling: mean, cls or tokens.
        max_length: tokens per line, specials included; longer lines are truncated (with a warning).
        batch_size: lines per forward pass.
        int8: run the encoder's linear layers in int8 (``bertkit.quantize``; CPU): faster, and
            the features move: compare them with float32's on your own texts before relying
            on them.
    """
    import torch
    from safetensors.torch import save_file

    from bertkit.embed import PART_LINES, embed_texts, read_parts
    from bertkit.encoders import family_of
    from bertkit.module import BertModule
    from bertkit.pretrained import resolve_pretrained

    target = Path(output)
    if target.suffix not in (".safetensors", ".jsonl"):
        raise ValueError(f"{output}: expected a .safetensors or .jsonl output file")
    if pooling == "tokens" and target.suffix == ".safetensors":
        raise ValueError(f"{output}: --pooling tokens gives a matrix per line; write it to a .jsonl file")
    if checkpoint is not None:
        model = BertModule.load_from_checkpoint(checkpoint, map_location="cpu")
        encoder, tokenizer = model.encoder, model.tokenizer
    else:
        directory = resolve_pretrained(pretrained)
        encoder, tokenizer = family_of(directory).from_pretrained(directory)
    if int8:
        from bertkit.quantize import quantize_linears

        quantize_linears(encoder)
    else:
        from bertkit.packed import pack_linears

        pack_linears(encoder)  # float32 on the CPU, for oneDNN (the same values)
    count, truncated, dims, kept, sources = 0, 0, 0, [], []
    partial = target.with_name(target.name + ".partial")
    target.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("w", encoding="utf-8") if target.suffix == ".jsonl" else nullcontext() as out:
        for part in read_parts(input, PART_LINES):
            texts = [line for _, line in part]
            vectors, tokens, cut = embed_texts(encoder, tokenizer, texts, features, pooling, max_length, batch_size)
            count, truncated, dims = count + len(texts), truncated + cut, vectors[0].shape[-1]
            part_sources = [f"{input}:{number}" for number, _ in part]
            if out is None:  # safetensors: one matrix, written at the end
                kept += vectors
                sources += part_sources
                continue
            for source, text, words, vector in zip(part_sources, texts, tokens, vectors, strict=True):
                record = {"source": source, "text": text}
                record |= (
                    {"tokens": words, "features": vector.tolist()}
                    if pooling == "tokens"
                    else {"features": vector.tolist()}
                )
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
    if not count:
        partial.unlink(missing_ok=True)
        raise ValueError(f"{input}: no text to embed (the file is empty or blank)")
    if truncated:
        log.warning(
            "%d of %d lines of %s were longer than %d tokens and truncated", truncated, count, input, max_length
        )
    if target.suffix == ".safetensors":
        settings = {"features": features, "pooling": pooling, "int8": str(int8), "sources": "\n".join(sources)}
        with atomic_path(target) as tmp:
            save_file({"features": torch.stack(kept).contiguous()}, str(tmp), metadata=settings)
    else:
        os.replace(partial, target)
    print(f"wrote {count} {features}/{pooling} feature{'s' if count != 1 else ''} ({dims} dims) to {output}")


def export(checkpoint: str, output: str, onnx: bool | None = None, int8: bool = False) -> None:
    """Export a ``bertkit fit`` checkpoint for inference: a transformers directory and ONNX.

    ``OUTPUT`` becomes a Hugging Face directory that the head's ``transformers`` class loads
    (``BertForTokenClassification`` …, with ``id2label``), plus ``model.onnx`` checked against
    bertkit with onnxruntime.

    Args:
        checkpoint: a ``.ckpt`` file (``runs/ner/checkpoints/last.ckpt`` …).
        output: the directory to write (files in it are replaced atomically).
        onnx: also write ``model.onnx`` (needs ``pip install 'bertkit[onnx]'``); unset: when
            the onnx extra is installed and the head has logits to export.
        int8: also write ``model.int8.onnx``, its weights quantized to int8 (ONNX Runtime's
            dynamic quantization: about a third of the size; the Results page gives the
            accuracy it costs on CoNLL-2003 and SST-2).
    """
    from bertkit.checkpoints import load_checkpoint
    from bertkit.export import export_onnx, quantize_onnx
    from bertkit.inference import save_serving_config
    from bertkit.module import BertModule

    model = BertModule.load_from_checkpoint(checkpoint, map_location="cpu")
    architecture = model.save_pretrained(output)
    if architecture != model.encoder.config.to_dict()["architectures"][0]:  # the task layers are in: servable
        stored = load_checkpoint(checkpoint, mmap=True).get("datamodule_hyper_parameters") or {}
        save_serving_config(model, output, int(stored.get("max_length", 128)))
    print(f"wrote {output} ({architecture})")
    if onnx is None:
        if not model.head.onnx_outputs:
            return
        if not int8 and (find_spec("onnxruntime") is None or find_spec("onnxscript") is None):
            print("no model.onnx: the onnx extra is not installed (pip install 'bertkit[onnx]'; --onnx false skips it)")
            return
        onnx = True
    if int8 and not onnx:
        raise ValueError("--int8 true quantizes model.onnx: it needs --onnx true (or unset)")
    if onnx:
        worst = export_onnx(model, Path(output) / "model.onnx")
        print(f"wrote {Path(output) / 'model.onnx'} (onnxruntime vs bertkit: max |diff| {worst:.1e})")
    if int8:
        before, after = quantize_onnx(Path(output) / "model.onnx", Path(output) / "model.int8.onnx")
        print(f"wrote {Path(output) / 'model.int8.onnx'} ({after / 1e6:.1f} MB; model.onnx {before / 1e6:.1f} MB)")


def serve(
    model: str,
    backend: Backend = "torch",
    host: str = "127.0.0.1",
    port: int = 8000,
    accelerator: str = "auto",
    workers: int = 1,
    max_tokens: int = 1024,
    max_batch_size: int = 8,
    batch_timeout: float = 0.01,
    timeout: float = 30.0,
    api_key: str | None = None,
    embed: bool = True,
    compile: bool = False,
    bf16: bool = False,
    int8: bool = False,
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
        max_batch_size: requests run together in one model call (1: one at a time).
        batch_timeout: seconds the first request of a batch waits for others to join it.
        timeout: seconds a request may wait before a 504.
        api_key: require this value in every request's ``X-API-Key`` header.
        embed: serve ``/embed`` (torch backend): a second model process, about 0.5 GB more.
        compile: compile the encoder's blocks (``Predictor.compile``; torch backend): the first
            requests wait while it compiles; the Results page measures what it gains.
        bf16: run the torch model in bfloat16 (``Predictor.to_bfloat16``): faster than fp32 on a
            GPU and on a CPU with AVX512-BF16 or AMX, slower on one without; the Results page
            measures its speed and accuracy.
        int8: run the encoder's linear layers in int8 (``Predictor.to_int8``; torch backend, on
            the CPU): the fastest CPU option; the Results page measures its speed and accuracy.
    """
    if find_spec("litserve") is None:
        raise ValueError("bertkit serve needs the serve extra: pip install 'bertkit[serve]'")
    if api_key:
        os.environ["LIT_SERVER_API_KEY"] = api_key  # LitServe reads it when it is imported
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
    precision: Precision = "bf16" if bf16 else "int8" if int8 else "fp32"
    if int8 and accelerator == "auto":
        import torch

        if torch.cuda.is_available():
            log.warning("--int8 true runs on the CPU: the GPU stays unused (--bf16 true serves on it)")
        accelerator = "cpu"
    from bertkit.serve import Batching, server  # imports LitServe: after the checks above

    batching = Batching(max_tokens, max_batch_size, batch_timeout)
    server(model, backend, accelerator, workers, batching, timeout, embed, compile, precision).run(
        host=host, port=port, generate_client_file=False, log_level="warning"
    )


def tune(
    recipe: str | None = None,
    space: str | None = None,
    trials: int = 20,
    n_jobs: int = 1,
    storage: str | None = None,
    study_name: str | None = None,
    pruner: Pruner = "median",
    seed: int = 0,
    seeds: int = 0,
    report: bool = False,
) -> None:
    """Search a recipe's hyper-parameters with Optuna (``pip install 'bertkit[tune]'``): each
    trial a run folder ``<default_root_dir>/trials/NNN``, the study in
    ``<default_root_dir>/tune/study.db`` (it resumes); at the end ``tune/best.yaml`` (``bertkit
    fit --config RECIPE --config best.yaml`` reproduces the best trial), ``tune/trials.csv``,
    ``tune/summary.json`` and plots (``history.png``, ``importances.png``, ``slice.png``).

    Args:
        recipe: the recipe (required; ``--config RECIPE`` says the same, as for ``bertkit fit``).
        space: (required) a YAML file of recipe keys to ranges ``{low, high, log, step}`` or lists of choices.
        trials: finished trials (complete, pruned or failed) the study should hold.
        n_jobs: trials run at once on this machine (each a process with cores / n_jobs threads).
        storage: an SQLAlchemy URL for the study (default: SQLite in the run folder); workers on
            several machines share one study through one database URL.
        study_name: the study's name in the storage (default: the recipe's file name).
        pruner: median, successive_halving or none: stop unpromising trials at a validation.
        seed: seed of the sampler (TPE).
        seeds: then run the best parameters and the recipe's defaults with seeds 1..N (mean ± SD).
        report: only write the results of the study so far (no new trials).
    """
    if recipe is None or space is None:
        raise ValueError("bertkit tune: give the recipe and the space: --config RECIPE --space SPACE.yaml")
    if find_spec("optuna") is None:
        raise ValueError("bertkit tune needs the tune extra: pip install 'bertkit[tune]'")
    from bertkit.tune import run

    summary = run(recipe, space, trials, n_jobs, storage, study_name, pruner, seed, seeds, report)
    print(json.dumps(summary, indent=2, default=str))
