"""What a CRF-trained NER export gives transformers users: entity F1 on CoNLL-2003 ``eng.testb``
of one export read by bertkit (``Predictor``: the CRF's Viterbi path, as ``bertkit predict``) and
by transformers' ``pipeline("token-classification")`` with ``aggregation_strategy`` "first"
(on the export as ``bertkit export`` writes it, its emission biases fitted on eng.testa, and,
as ``pipeline first, --calibrate false``, on one without them), by bertkit with the CRF taken off
(each word's arg-max: where it and the plain pipeline differ, and where it and the CRF differ, by kind)
(a word takes its first sub-word's tag: what the model was trained on) and "simple", and by the
export's own pipeline (``pipeline(model=folder, trust_remote_code=True)``: ``crf_pipeline.py``,
the CRF's Viterbi decoding inside transformers), for the NER
recipe trained with the CRF's loss alone and with the emissions' cross-entropy beside it
(``model.task.init_args.emission_loss_weight``) against the gold tags or the CRF's own posterior
or Viterbi path (``emission_target`` ``labels`` / ``crf`` / ``viterbi``), with the CRF's loss reaching the encoder or
training the CRF's scores alone (``--crf-trains-encoder false``: a softmax tagger under a CRF), over seeds.

Each run is the NER recipe (MiniLM, CRF) for one epoch of ``--train-batches`` batches or for
``--epochs`` whole epochs (the recipe's budget), validation off, with ``seed_everything`` and ``data.seed`` set to the seed, exported with
``bertkit export --onnx false``. F1 is micro entity F1 (exact type and word span) in percent,
both sides read as word spans of the text (``inference_vs_transformers.word_spans``). ``--web``
also scores every reader on the test text with one web token put into each sentence (``web_text``:
a URL, an e-mail address, a hashtag or an @-mention, outside the entities, tagged ``O``), where the
text's word splitting is what differs most between readers.

    BERTKIT_DATA_DIR=../shared/data python benchmarks/crf_export.py   # writes benchmarks/results/crf_export.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import fine_tune
from inference_vs_transformers import bertkit_answers, pipeline_answers, score, texts_and_gold
from provenance import commit, header

from bertkit.inference.predictor import Predictor
from bertkit.training.checkpoints import load_checkpoint
from bertkit.utils.io import atomic_path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "crf_export.json"
TEST = "ner/conll2003/eng.testb"
READERS = ("bertkit (CRF Viterbi)", "pipeline first", "pipeline simple", "pipeline trust_remote_code (CRF)")
ARGMAX = "bertkit (logits' arg-max)"
"""bertkit's predictor with the CRF taken off the head: each word tagged by its first sub-word's
arg-max, as the plain pipeline's ``"first"`` does, from bertkit's own word splitting."""
UNCALIBRATED = "pipeline first, --calibrate false"
"""The plain pipeline on an export of the same checkpoint without ``bertkit export``'s emission
biases (``--calibrate false``)."""


WEB = " (web tokens)"
"""The suffix of a reader's score on ``web_text``'s sentences."""
WEB_TOKENS = (
    "https://www.reuters.com/world/europe/{n}/",
    "http://news.bbc.co.uk/sport/hi/football/{n}.stm",
    "www.example.org/results?id={n}&lang=en",
    "desk{n}@reuters.com",
    "j.smith.{n}@mail.example.co.uk",
    "#WorldCup{n}",
    "#Brexit",
    "@ReutersSports",
)
"""The web tokens ``web_text`` draws from (``{n}``: a number drawn with them)."""


def web_text(texts: list[str], gold: list, seed: int = 0) -> tuple[list[str], list]:
    """``texts`` and ``gold`` with one web token (``WEB_TOKENS``) put in each sentence, at a word
    boundary that no gold entity spans, drawn with ``seed``; the gold entities' word positions
    after it move up by one."""
    draw, texts_out, gold_out = random.Random(seed), [], []
    for text, entities in zip(texts, gold, strict=True):
        words = text.split(" ")
        free = [i for i in range(len(words) + 1) if not any(s < i < e for _, s, e in entities)]
        at = draw.choice(free)
        token = draw.choice(WEB_TOKENS).format(n=draw.randrange(10, 10_000))
        texts_out.append(" ".join([*words[:at], token, *words[at:]]))
        gold_out.append({(kind, s + (s >= at), e + (s >= at)) for kind, s, e in entities})
    return texts_out, gold_out


def bertkit_read(folder: Path, texts: list[str], crf: bool = True) -> list:
    """bertkit's entities in ``texts`` from the export in ``folder``: the CRF's path, or
    (``crf=False``) each word's arg-max."""
    loaded, found = Predictor.load(folder), []
    if not crf:
        loaded.head.crf = None  # the head then decodes each word by its arg-max
    for start in range(0, len(texts), 32):
        found += bertkit_answers("conll2003", texts[start : start + 32], loaded.predict(texts[start : start + 32]))
    return found


def differences(argmax: list, viterbi: list) -> dict[str, int]:
    """The sentences where the arg-max's entities are not the CRF's, by what differs first: the
    arg-max cuts one of the CRF's entities into several (another type or a new ``B-``), finds
    entities the CRF does not (a lone ``I-``, say), misses some, or places bounds otherwise."""
    kinds = dict.fromkeys(("cuts a CRF entity", "only the arg-max's entities", "only the CRF's", "other bounds"), 0)
    for ours, theirs in zip(argmax, viterbi, strict=True):
        if ours == theirs:
            continue
        extra, missing = ours - theirs, theirs - ours
        if any(sum(s >= start and e <= end for _, s, e in extra) > 1 for _, start, end in missing):
            kinds["cuts a CRF entity"] += 1
        elif not missing:
            kinds["only the arg-max's entities"] += 1
        elif not extra:
            kinds["only the CRF's"] += 1
        else:
            kinds["other bounds"] += 1
    return kinds


def read_export(folder: Path, texts: list[str], gold: list, readers: tuple[str, ...] = READERS) -> dict[str, Any]:
    """Entity F1 of each of ``readers`` of the export in ``folder``; with bertkit's arg-max, the
    sentences where it differs from the plain pipeline's ``"first"`` and from the CRF's path."""
    from transformers import pipeline

    scores: dict[str, Any] = {}
    found = {}
    if READERS[0] in readers or ARGMAX in readers:
        found[READERS[0]] = bertkit_read(folder, texts)
        scores[READERS[0]] = score("conll2003", found[READERS[0]], gold)
    if ARGMAX in readers:
        found[ARGMAX] = bertkit_read(folder, texts, crf=False)
        scores[ARGMAX] = score("conll2003", found[ARGMAX], gold)
    for strategy in ("first", "simple"):
        if f"pipeline {strategy}" in readers:
            pipe = pipeline("token-classification", model=str(folder), device=-1, aggregation_strategy=strategy)
            found[f"pipeline {strategy}"] = pipeline_answers("conll2003", texts, pipe(texts, batch_size=32))
            scores[f"pipeline {strategy}"] = score("conll2003", found[f"pipeline {strategy}"], gold)
    if ARGMAX in found and "pipeline first" in found:
        scores["sentences where pipeline first and bertkit's arg-max differ"] = sum(
            a != p for a, p in zip(found[ARGMAX], found["pipeline first"], strict=True)
        )
        scores["sentences where the arg-max and the CRF differ"] = differences(found[ARGMAX], found[READERS[0]])
    if READERS[3] in readers:
        pipe = pipeline(model=str(folder), device=-1, trust_remote_code=True)
        scores[READERS[3]] = score("conll2003", pipeline_answers("conll2003", texts, pipe(texts, batch_size=32)), gold)
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in scores.items()}


def trained(args: argparse.Namespace) -> Iterator[tuple[dict[str, Any], Path, Path]]:
    """Each run's settings, last checkpoint and work folder: trained here, or ``--checkpoints``
    (their settings read from their hyper-parameters)."""
    for index, checkpoint in enumerate(args.checkpoints or []):
        stored = load_checkpoint(checkpoint, mmap=True)
        task = stored["hyper_parameters"]["task"]["init_args"]
        side = {"emission_loss_weight": task["emission_loss_weight"], "emission_target": task["emission_target"]}
        side["crf_trains_encoder"] = task.get("crf_trains_encoder", True)
        yield {**side, "seed": stored["datamodule_hyper_parameters"]["seed"]}, checkpoint, args.work / f"given-{index}"
    if args.checkpoints:
        return
    for weight, target in [(w, t) for w in args.weights for t in (args.targets if w else ["labels"])]:
        for seed in args.seeds:
            work = args.work / f"w{weight:g}-{target}{'' if args.crf_trains_encoder else '-crf-alone'}-s{seed}"
            options = [f"--seed_everything={seed}", f"--data.seed={seed}"]
            options.append(f"--model.task.init_args.emission_loss_weight={weight}")
            options.append(f"--model.task.init_args.emission_target={target}")
            options.append(f"--model.task.init_args.crf_trains_encoder={str(args.crf_trains_encoder).lower()}")
            if args.epochs:
                options += [f"--trainer.max_epochs={args.epochs}", "--trainer.limit_train_batches=1.0"]
            side = {"emission_loss_weight": weight, "emission_target": target, "seed": seed}
            side["crf_trains_encoder"] = args.crf_trains_encoder
            yield side, fine_tune("recipes/ner.yaml", work, args.train_batches, *options), work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-batches", type=int, default=300)
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="train whole epochs (the recipe's budget: 3) instead of --train-batches",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--weights", type=float, nargs="+", default=[0.0, 1.0], help="emission_loss_weight values")
    parser.add_argument(
        "--targets", nargs="+", default=["labels"], choices=["labels", "crf", "viterbi"], help="emission_target values"
    )
    parser.add_argument(
        "--crf-trains-encoder",
        choices=["true", "false"],
        default="true",
        help="true (the recipe's) or false: the CRF's loss trains its own scores alone (model.task.crf_trains_encoder)",
    )
    parser.add_argument(
        "--readers",
        nargs="+",
        default=list(READERS),
        choices=(*READERS, ARGMAX, UNCALIBRATED),
        help="which readers to score (an ablation's subset)",
    )
    parser.add_argument(
        "--checkpoints",
        type=Path,
        nargs="+",
        help="read these NER checkpoints instead of training (--epochs, --seeds, --weights, --targets unused)",
    )
    parser.add_argument(
        "--web", action="store_true", help="also score each reader on the test text with web tokens (web_text)"
    )
    parser.add_argument("--work", type=Path, default=Path("runs/crf_export"))
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args()
    args.crf_trains_encoder = args.crf_trains_encoder == "true"
    data = Path(os.environ.get("BERTKIT_DATA_DIR", ROOT.parent / "shared" / "data"))
    if not (data / TEST).is_file():
        raise SystemExit(f"{data}: no {TEST}; set BERTKIT_DATA_DIR to the real data folder")
    os.environ["BERTKIT_DATA_DIR"] = str(data)
    measured = commit()
    texts, gold = texts_and_gold("conll2003", data / TEST)
    tests = {"": (texts, gold)} | ({WEB: web_text(texts, gold)} if args.web else {})
    bertkit = str(Path(sys.executable).with_name("bertkit"))
    runs = []
    for side, checkpoint, work in trained(args):
        subprocess.run([bertkit, "export", str(checkpoint), str(work / "export"), "--onnx", "false"], check=True)
        if UNCALIBRATED in args.readers:
            plain = work / "export-uncalibrated"
            subprocess.run(
                [bertkit, "export", str(checkpoint), str(plain), "--onnx", "false", "--calibrate", "false"], check=True
            )
            for name, (text, wanted) in tests.items():
                side[UNCALIBRATED + name] = read_export(plain, text, wanted, (READERS[1],))[READERS[1]]
        for name, (text, wanted) in tests.items():
            side |= {k + name: v for k, v in read_export(work / "export", text, wanted, tuple(args.readers)).items()}
        runs.append(side)
        print(runs[-1], flush=True)
    kinds = ("emission_loss_weight", "emission_target", "crf_trains_encoder")
    sides = list(dict.fromkeys(tuple(r[k] for k in kinds) for r in runs))
    summary = {}
    for weight, target, trains in sides:
        rows = [r for r in runs if tuple(r[k] for k in kinds) == (weight, target, trains)]
        name = f"emission_loss_weight {weight:g}" + (f", emission_target {target}" if weight else "")
        summary[name + ("" if trains else ", crf_trains_encoder false")] = {
            reader + name: {"mean": round(statistics.mean(r[reader + name] for r in rows), 2),
                            "sd": round(statistics.stdev(r[reader + name] for r in rows), 2) if len(rows) > 1 else None}
            for name in tests for reader in args.readers
        }  # fmt: skip
        for name in tests:  # the goal: the plain pipeline within 0.5 of Viterbi
            for reader in (READERS[1], UNCALIBRATED):
                if {READERS[0], reader} <= set(args.readers):
                    gaps = [r[reader + name] - r[READERS[0] + name] for r in rows]
                    summary[next(reversed(summary))][f"{reader} - Viterbi{name}"] = {
                        "mean": round(statistics.mean(gaps), 2),
                        "sd": round(statistics.stdev(gaps), 2) if len(gaps) > 1 else None,
                    }
    import transformers

    result = header(
        "CRF NER export: entity F1 through bertkit vs transformers' pipeline, with and without the emission loss",
        "BERTKIT_DATA_DIR=../shared/data python benchmarks/crf_export.py " + shlex.join(sys.argv[1:]),
        measured,
        repeats=len(runs),
        transformers=transformers.__version__,
    )
    result["settings"] = {
        "recipe": "recipes/ner.yaml", "seeds": sorted({r["seed"] for r in runs}),
        **({"checkpoints": [str(c) for c in args.checkpoints]} if args.checkpoints else {}),
        **({} if args.checkpoints else {"epochs": args.epochs} if args.epochs else {"train_batches": args.train_batches}),
        "repeats": len(runs), "test_file": TEST, "sentences": len(texts),
        **({"web_tokens": list(WEB_TOKENS), "web_seed": 0} if args.web else {}),
    }  # fmt: skip
    result["summary"], result["runs"] = summary, runs
    with atomic_path(args.output) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
