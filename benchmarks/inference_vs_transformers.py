"""Inference speed and accuracy: bertkit's ``Predictor`` (what ``bertkit serve`` runs: torch, torch
compiled, torch in bf16 and int8, onnxruntime on the exported graph in fp32 and int8) against transformers'
``pipeline`` in fp32 and bf16 (``dtype=torch.bfloat16``), the same fine-tuned checkpoint and the
same texts, one text per call (batch 1) and 32 per call. bf16 is fast only on a device that
computes it natively (``bertkit.utils.precision.native_bf16``: AVX512-BF16 or AMX on a CPU).

MiniLM (all-MiniLM-L6-v2) is fine-tuned with each task's recipe for a short budget (one epoch of
``--train-batches`` batches, validation off) and exported with ``bertkit export --int8 true``;
every variant then reads that folder, loaded alone while it is timed (bertkit torch in fp32 with its
linear layers pre-packed for oneDNN, as ``Predictor.load`` loads it: ``bertkit.model.prepacked``). Texts: CoNLL-2003 ``eng.testb`` (words joined by spaces)
and the SST-2 recipe's test file. Batch 32: every test text, in calls of 32 in file order;
batch 1: the first ``--single-texts`` texts, one call each. Sentences/s = texts / seconds of
calls; p50 = median milliseconds of one call; tokens = the real tokens bertkit's tokenizer makes of
the timed texts (the same useful work for every variant). The score is entity F1 (exact type and word span)
or accuracy against the gold labels over the batch-32 pass: the accuracy int8 and bf16 cost is
read on the same texts.

    BERTKIT_DATA_DIR=../shared/data python benchmarks/inference_vs_transformers.py   # writes benchmarks/results/inference_vs_transformers.json
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from bertkit_plugins.token_tagging.conll import entities, read_conll
from common import fine_tune
from provenance import commit, header

from bertkit.inference.predictor import Predictor
from bertkit.utils.io import atomic_path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "inference_vs_transformers.json"
TASKS = {
    "conll2003": ("recipes/ner.yaml", "ner/conll2003/eng.testb", "token-classification", "f1"),
    "sst2": ("recipes/sst2.yaml", "classification/sst2/test.tsv", "text-classification", "accuracy"),
}
Gold = list[Any]  # per text: a set of (type, first word, end word) entities, or a label


def fine_tune_and_export(recipe: str, work: Path, batches: int) -> Path:
    """``common.fine_tune``, then ``bertkit export --int8 true`` of its checkpoint; the export folder."""
    folder = work / "export"
    bertkit = str(Path(sys.executable).with_name("bertkit"))
    subprocess.run(
        [bertkit, "export", str(fine_tune(recipe, work, batches)), str(folder), "--int8", "true"], check=True
    )
    return folder


def texts_and_gold(task: str, path: Path) -> tuple[list[str], Gold]:
    """The test texts and their gold answers."""
    if task == "conll2003":
        sentences = read_conll(path)  # IOB1, read as IOB2
        return [" ".join(s.words) for s in sentences], [set(entities(s.tags)) for s in sentences]
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["sentence"].strip() for r in rows], [r["label"] for r in rows]


def score(task: str, predicted: Gold, gold: Gold) -> float:
    """Entity F1 (micro, exact span and type) or accuracy, in percent."""
    if task != "conll2003":
        return 100 * sum(p == g for p, g in zip(predicted, gold, strict=True)) / len(gold)
    hits = sum(len(p & g) for p, g in zip(predicted, gold, strict=True))
    found, wanted = sum(map(len, predicted)), sum(map(len, gold))
    return 200 * hits / (found + wanted) if found + wanted else 100.0


def word_spans(text: str, found: list[tuple[str, int, int]]) -> set[tuple[str, int, int]]:
    """Entities given as (type, start, end) characters of ``text`` (words joined by single spaces)
    as (type, first word, end word): the words their characters touch. Both sides are read this way,
    whatever words they split the text into (bertkit's pre-tokenizer splits ``U.S.``)."""
    word_of, word = [], 0
    for char in text:
        word_of.append(word)
        word += char == " "
    return {(kind, word_of[start], word_of[end - 1] + 1) for kind, start, end in found}


def bertkit_answers(task: str, texts: list[str], records: list[dict[str, Any]]) -> Gold:
    if task != "conll2003":
        return [r["label"] for r in records]
    spans = ([(e["type"], e["start"], e["end"]) for e in r["entities"]] for r in records)
    return [word_spans(text, found) for text, found in zip(texts, spans, strict=True)]


def pipeline_answers(task: str, texts: list[str], outputs: list[Any]) -> Gold:
    """The pipeline's entities as word spans, or its labels."""
    if task != "conll2003":
        return [o["label"] for o in outputs]
    spans = ([(e["entity_group"], e["start"], e["end"]) for e in found] for found in outputs)
    return [word_spans(text, found) for text, found in zip(texts, spans, strict=True)]


def token_counts(folder: Path, texts: list[str]) -> list[int]:
    """Real tokens of each text as bertkit's predictor feeds it to the encoder (summed over
    windows)."""
    loaded = Predictor.load(folder)
    counts = [0] * len(texts)
    for feature in loaded.task.featurize(loaded.examples(texts), loaded.tokenizer, loaded.max_length):
        counts[feature["example_index"]] += len(feature["input_ids"])
    return counts


def timed_calls(call: Callable[[list[str]], list[Any]], texts: list[str], size: int) -> tuple[list[Any], list[float]]:
    """``call`` on ``texts``, ``size`` at a time: its outputs and the seconds of each call."""
    outputs, seconds = [], []
    for start in range(0, len(texts), size):
        begin = time.perf_counter()
        outputs += call(texts[start : start + size])
        seconds.append(time.perf_counter() - begin)
    return outputs, seconds


def variants(task: str, folder: Path, kind: str) -> dict[str, Callable[[], Callable[[list[str]], list[Any]]]]:
    """Each variant as a builder of texts -> answers comparable with the gold ones: one variant is
    loaded at a time (no other model's threads or memory around it while it is timed)."""
    from transformers import pipeline

    def predictor(
        backend: str = "torch", compiled: bool = False, precision: str = "fp32"
    ) -> Callable[[], Callable[[list[str]], list[Any]]]:
        def build() -> Callable[[list[str]], list[Any]]:
            loaded = Predictor.load(folder, backend=backend).in_precision(precision)
            loaded = loaded.compile() if compiled else loaded
            return lambda texts: bertkit_answers(task, texts, loaded.predict(texts))

        return build

    def transformers_pipeline(dtype: torch.dtype = torch.float32) -> Callable[[], Callable[[list[str]], list[Any]]]:
        def build() -> Callable[[list[str]], list[Any]]:
            grouped = {"aggregation_strategy": "simple"} if task == "conll2003" else {}  # entities, not word pieces
            pipe = pipeline(kind, model=str(folder), device=-1, dtype=dtype, **grouped)
            return lambda texts: pipeline_answers(task, texts, pipe(texts, batch_size=len(texts)))

        return build

    return {
        "bertkit torch": predictor(),
        "bertkit torch, compiled": predictor(compiled=True),
        "bertkit torch, bf16": predictor(precision="bf16"),
        "bertkit torch, int8": predictor(precision="int8"),
        "bertkit onnxruntime fp32": predictor("onnx"),
        "bertkit onnxruntime int8": predictor("onnx-int8"),
        "transformers pipeline": transformers_pipeline(),
        "transformers pipeline, bf16": transformers_pipeline(torch.bfloat16),
    }


def ratios_of(speed: dict[tuple[str, int], float]) -> dict[str, float]:
    """The ratios of sentences/s the results state, from {(variant, batch size): sentences/s}."""

    def versus(ours: str, theirs: str, n: int) -> float:
        return round(speed[ours, n] / speed[theirs, n], 2)

    pipelines = ("transformers pipeline", "transformers pipeline, bf16")
    return {
        **{f"bertkit torch / pipeline, batch {n}": versus("bertkit torch", pipelines[0], n) for n in (1, 32)},
        "bertkit torch / onnxruntime fp32, batch 32": versus("bertkit torch", "bertkit onnxruntime fp32", 32),
        "onnxruntime int8 / fp32, batch 32": versus("bertkit onnxruntime int8", "bertkit onnxruntime fp32", 32),
        "bertkit torch int8 / fp32, batch 32": versus("bertkit torch, int8", "bertkit torch", 32),
        **{
            f"bertkit torch int8 / pipeline, batch {n}": versus("bertkit torch, int8", pipelines[0], n) for n in (1, 32)
        },
        **{
            f"bertkit torch bf16 / {theirs}, batch {n}": versus("bertkit torch, bf16", theirs, n)
            for theirs in pipelines
            for n in (1, 32)
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-batches", type=int, default=300)
    parser.add_argument("--single-texts", type=int, default=300, help="texts timed one call each (batch 1)")
    parser.add_argument("--work", type=Path, default=Path("runs/inference_vs_transformers"))
    parser.add_argument("--reuse", action="store_true", help="use the exports already in --work")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args()
    data = Path(os.environ.get("BERTKIT_DATA_DIR", ROOT.parent / "shared" / "data"))
    if not (data / TASKS["sst2"][1]).is_file():
        raise SystemExit(f"{data}: no {TASKS['sst2'][1]}; set BERTKIT_DATA_DIR to the real data folder")
    os.environ["BERTKIT_DATA_DIR"] = str(data)
    measured = commit()
    runs, ratios = [], {}
    for task, (recipe, test_file, kind, metric) in TASKS.items():
        folder = args.work / task / "export"
        if not (args.reuse and (folder / "model.int8.onnx").is_file()):
            folder = fine_tune_and_export(recipe, args.work / task, args.train_batches)
        texts, gold = texts_and_gold(task, data / test_file)
        tokens = token_counts(folder, texts)
        speed = {}
        for name, build in variants(task, folder, kind).items():
            call = build()
            call(texts[:64])  # warm-up (and, compiled, most of the compiling)
            call(texts[:1])
            for size, subset in ((32, texts), (1, texts[: args.single_texts])):
                answers, seconds = timed_calls(call, subset, size)
                speed[name, size] = len(subset) / sum(seconds)
                runs.append({
                    "task": task, "variant": name, "batch_size": size, "texts": len(subset),
                    "tokens": sum(tokens[: len(subset)]),
                    "attention_length": sum(n * n for n in tokens[: len(subset)]) / sum(tokens[: len(subset)]),
                    "sentences_per_second": round(speed[name, size], 1),
                    "p50_ms": round(1000 * statistics.median(seconds), 2),
                    metric: round(score(task, answers, gold[: len(subset)]), 2) if size == 32 else None,
                })  # fmt: skip
                print(runs[-1], flush=True)
            del call
            gc.collect()
        ratios[task] = ratios_of(speed)
    import onnxruntime
    import transformers

    result = header(
        "inference: bertkit Predictor (torch fp32/bf16/int8, compiled, onnxruntime fp32/int8) vs transformers pipeline (fp32/bf16)",
        "BERTKIT_DATA_DIR=../shared/data python benchmarks/inference_vs_transformers.py",
        measured,
        cpu_threads=torch.get_num_threads(),
        transformers=transformers.__version__,
        onnxruntime=onnxruntime.__version__,
    )
    result["settings"] = {"train_batches": args.train_batches, "model": "all-MiniLM-L6-v2", "commit": measured}
    result["ratios"], result["runs"] = ratios, runs
    with atomic_path(args.output) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
