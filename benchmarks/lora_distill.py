"""Adapt and compress MiniLM (all-MiniLM-L6-v2, 6 layers x 384): LoRA against full fine-tuning,
and a 2-layer student trained on the labels alone against one distilled from the fully
fine-tuned model. The same recipe, data, batches and seeds on every side, each run in a process
of its own.

Sides, per task and seed, in this order:

- ``full``: the recipe as it is (also the teacher of ``student-distilled``);
- ``lora-r8``, ``lora-r16``: ``recipes/ner_lora.yaml``'s adapter block (its targets, alpha and
  learning rate) with that rank; ``lora-r4-qv``, ``lora-r8-attn``, ``lora-r8-all`` …: the rank and
  the targets named (``qv``: query and value; ``attn``: query, key and value; ``all``: every linear
  layer of the blocks), alpha = 2r; ``--lora-lr`` sets the adapters' learning rate, ``--rslora``
  peft's rank-stabilised scaling (alpha / sqrt(r));
- ``student``: MiniLM's first 2 layers (``model.num_layers``), the recipe's settings otherwise;
- ``student-distilled``: the same student with ``model.teacher`` the ``full`` run's last
  checkpoint (``Teacher``'s defaults); ``student-distilled-a0.9-t1-h1`` …: with the alpha (``a``),
  temperature (``t``) or hidden-state weight (``h``) named, ``-c``: the teacher's targets cached.
  ``--student-batches``: the student sides' budget, when it is not the teacher's;
  ``--teacher-seed N``: one teacher (the ``full`` run of seed N) for every seed's students.
- ``…-x`` (``student-x``, ``student-distilled…-x``, NER): the student trains on eng.train and a
  transfer set, the teacher's tags on Brown's press sections (its first 88 documents by default,
  ``--transfer-docs``: 202,862 words, as many as eng.train's 203,621; split into sentences at
  ``.``/``?``/``!`` tokens) as
  ``bertkit predict`` writes them: ``data.train_file`` lists both files, and the budget grows with
  the sentences (the same epochs). ``student-x`` trains on the teacher's tags alone (pseudo-labels);
  ``student-distilled…-x`` on its distribution as well (Jiao et al. 2020, §3.2: TinyBERT's
  transfer set). The labelling runs once per teacher (``transfer/`` beside it), timed.
- ``…-xa``: the same with an in-domain transfer set made from eng.train by mention replacement
  (``bertkit augment``; Dai & Adel 2020, "An Analysis of Simple Data Augmentation for Named Entity
  Recognition", MR): one copy of each sentence that holds an entity, every mention replaced by a
  mention of the same type drawn from the training set (seed 0), the words given pre-split; the
  teacher tags the copies (its tags, not the gold ones, are what the student learns). ``…-xa2``:
  two copies of each such sentence (``bertkit augment --copies 2``), and so on.

By default each task runs the recipes' defaults (``DEFAULT_SIDES``): ``full``, ``lora-r8`` and
``lora-r4``, ``student`` and the student distilled as its recipe does it (NER:
``student-distilled-t1-c-xa2``, ``ner_distill.yaml`` with two augmented copies; SST-2:
``student-distilled-a0.9-h1``, ``sst2_distill.yaml``: alpha 0.9 and the teacher's hidden states).

Tasks: CoNLL-2003 NER (the NER recipe, CRF; scored on ``eng.testb``) and SST-2 (scored on the
recipe's ``test.tsv``, GLUE's labelled dev set of 872 sentences, the number papers report; settings
are chosen on ``--test-file dev.tsv``, the 6,735 training phrases the recipe validates on). Each run trains one epoch of ``--batches`` batches of
32, validation off, with ``seed_everything`` and ``data.seed`` set to the seed. Per run: the test
score, training tokens per second (real tokens of the timed steps over their time, after
``--warmup`` steps), inference sentences per second (the test loader's first ``--speed-batches``
batches of 32, sorted by length as the loader gives them, forward only), the process's peak
resident memory, and the size of its last checkpoint.

    BERTKIT_DATA_DIR=../shared/data python benchmarks/lora_distill.py   # writes benchmarks/results/lora_distill.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from common import ROOT, write_result
from provenance import header, started

from bertkit.training.distillation import Teacher

OUT = ROOT / "benchmarks" / "results" / "lora_distill.json"
TASKS = {"ner": ("ner.yaml", "test/f1", {}), "sst2": ("sst2.yaml", "test/accuracy", {})}
SIDES = ("full", "lora-r8", "lora-r16", "student", "student-distilled")
DEFAULT_SIDES = {  # the recipes' defaults: ner_lora.yaml's adapter (r 8) and its smallest within 1.0 (r 4); the
    # students as ner_distill.yaml (T 1, two augmented copies tagged by the teacher) and sst2_distill.yaml run them
    "ner": ("full", "lora-r8", "lora-r4", "student", "student-distilled-t1-c-xa2"),
    "sst2": ("full", "lora-r8", "lora-r4", "student", "student-distilled-a0.9-h1"),
}
STUDENT_LAYERS = 2
MIN_EPOCH_BATCHES = 438  # batches of 32 in an epoch of the smaller training set (eng.train's 14,041 sentences)
TARGETS = {"qv": ["query", "value"], "attn": ["query", "key", "value"], "all": ["query", "key", "value", "dense"]}
LORA_SIDE = re.compile(r"lora-r(\d+)(?:-(qv|attn|all))?")
DISTILLED_SIDE = re.compile(r"student-distilled((?:-[ath][0-9.]+|-c)*)(-x(?:a\d*)?)?")
TRANSFER_SIDE = re.compile(
    r".*-x(?:(a)(\d*))?"
)  # a transfer set: Brown's (-x) or eng.train's augmented copies (-xa, -xa2 …)
TRANSFER_DOCS = 88  # Brown's press sections (A reportage, B editorial, C reviews)
GOLD_SENTENCES = 14041  # eng.train
SENTENCE_END = re.compile(r"(?<= [.?!]) (?=\S)")  # Brown is tokenised: a sentence ends at a lone . ? !
TEACHER_SETTINGS = {"a": "alpha", "t": "temperature", "h": "hidden_weight"}


def side_settings(side: str, teacher: Path, args: argparse.Namespace) -> tuple[list[Path], dict[str, Any]]:
    """The extra recipes and settings of a side."""
    lora = LORA_SIDE.fullmatch(side)
    if lora:
        rank, targets = int(lora[1]), lora[2]
        settings = {"model.adapter.r": rank}
        if targets:
            settings |= {"model.adapter.target_modules": TARGETS[targets], "model.adapter.alpha": 2.0 * rank}
        if args.lora_lr is not None:
            settings["model.learning_rate"] = args.lora_lr
        if args.rslora:
            settings["model.adapter.use_rslora"] = True
        return [ROOT / "recipes" / "ner_lora.yaml"], settings
    if side.startswith("student"):
        settings: dict[str, Any] = {"model.num_layers": STUDENT_LAYERS}
        transfer = TRANSFER_SIDE.fullmatch(side)
        if transfer:
            made = (
                augmented_set(teacher, int(transfer[2] or 1))
                if transfer[1]
                else transfer_set(teacher, args.transfer_docs)
            )
            settings["data.train_file"] = ["eng.train", str(made)]
        distilled = DISTILLED_SIDE.fullmatch(side)
        if distilled:
            settings["model.teacher.path"] = str(teacher)
            for part in filter(None, distilled[1].split("-")):
                if part == "c":
                    settings["model.teacher.cache"] = True
                else:
                    settings[f"model.teacher.{TEACHER_SETTINGS[part[0]]}"] = float(part[1:])
        return [], settings
    return [], {}


def transfer_folder(teacher: Path, documents: int) -> Path:
    """Where the teacher's tags on Brown's first ``documents`` documents are written."""
    return teacher.parents[1].parent / ("transfer" if documents == TRANSFER_DOCS else f"transfer-{documents}")


def transfer_set(teacher: Path, documents: int) -> Path:
    """The teacher's tags on Brown's first ``documents`` documents, written by ``bertkit predict``
    (once per teacher; its wall-clock in ``seconds.txt``)."""
    folder = transfer_folder(teacher, documents)
    out = folder / "predictions.jsonl"
    if out.is_file():
        return out
    brown = (Path(os.environ["BERTKIT_DATA_DIR"]) / "corpus" / "brown.txt").read_text().split("\n\n")
    text = folder.with_suffix(".txt")
    text.write_text(
        "\n\n".join(
            "\n".join(s for line in d.splitlines() if line.strip() for s in SENTENCE_END.split(line.strip()))
            for d in brown[:documents]
        ) + "\n"
    )  # fmt: skip
    return labelled(teacher, text, folder)


def labelled(teacher: Path, inputs: Path, folder: Path) -> Path:
    """``bertkit predict`` of ``inputs`` with ``teacher`` into ``folder`` (its wall-clock in
    ``seconds.txt``): the predictions file."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "bertkit", "predict", "--config", str(ROOT / "recipes" / "ner.yaml"),
         "--ckpt_path", str(teacher), "--data.predict_file", str(inputs), f"--trainer.default_root_dir={folder}",
         "--trainer.logger=false", "--trainer.enable_progress_bar=false"],
        check=True,
    )  # fmt: skip
    (folder / "seconds.txt").write_text(f"{time.perf_counter() - start:.1f}\n")
    return folder / "predictions.jsonl"


def augmented_set(teacher: Path, copies: int) -> Path:
    """The teacher's tags on ``copies`` copies of eng.train's sentences with every mention replaced
    by another of its type (``bertkit augment``, mention replacement, seed 0; once per teacher, in
    ``transfer-augmented/``, or ``transfer-augmented-<copies>/``)."""
    folder = teacher.parents[1].parent / ("transfer-augmented" if copies == 1 else f"transfer-augmented-{copies}")
    out = folder / "predictions.jsonl"
    if out.is_file():
        return out
    folder.mkdir(parents=True, exist_ok=True)
    inputs = folder.with_suffix(".jsonl")
    train = Path(os.environ["BERTKIT_DATA_DIR"]) / "ner" / "conll2003" / "eng.train"
    subprocess.run(
        [sys.executable, "-m", "bertkit", "augment", str(train), str(inputs), "--copies", str(copies)], check=True
    )
    return labelled(teacher, inputs, folder)


def budget(batches: int) -> dict[str, Any]:
    """The trainer settings that train ``batches`` batches: one epoch cut short (``limit_train_batches``),
    or, for more, as many steps over whole epochs (``max_steps``: the schedule decays over them)."""
    if batches <= MIN_EPOCH_BATCHES:
        return {"trainer.max_epochs": 1, "trainer.limit_train_batches": batches}
    return {"trainer.max_epochs": -1, "trainer.max_steps": batches}


def sentences_per_second(run: Any, batches: int) -> float:
    """Forward passes over the test loader's first ``batches`` batches, after one untimed."""
    model = run.model.eval()
    loader = run.datamodule.test_dataloader()
    taken = [b for _, b in zip(range(batches + 1), loader, strict=False)]
    with torch.inference_mode():
        model(taken[0])
        start = time.perf_counter()
        for b in taken[1:]:
            model(b)
        seconds = time.perf_counter() - start
    return sum(b["input_ids"].shape[0] for b in taken[1:]) / seconds


def child(task: str, side: str, seed: int, args: argparse.Namespace, work: Path) -> dict[str, float]:
    import pytorch_lightning as pl

    from bertkit import compose

    recipe, score, overrides = TASKS[task]
    overrides = overrides | ({"data.test_file": args.test_file} if args.test_file else {})
    teacher = work.parent / f"{task}-seed{args.teacher_seed}" if args.teacher_seed else work
    teacher_ckpt = teacher / "full" / "checkpoints" / "last.ckpt"
    extra, settings = side_settings(side, teacher_ckpt, args)
    batches = args.student_batches if side.startswith("student") and args.student_batches else args.batches
    if TRANSFER_SIDE.fullmatch(side):  # the same epochs over the gold sentences and the transfer set's
        with open(settings["data.train_file"][1]) as transfer:
            batches = round(batches * (GOLD_SENTENCES + sum(1 for _ in transfer)) / GOLD_SENTENCES)
    overrides = {
        **overrides, **settings, "seed_everything": seed, "data.seed": seed, "data.batch_size": 32,
        **budget(batches), "trainer.limit_val_batches": 0,
        "trainer.enable_progress_bar": False, "trainer.default_root_dir": str(work / side), "trainer.logger": False,
    }  # fmt: skip
    stamps: list[tuple[float, int]] = []

    class Stamp(pl.Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
            stamps.append((time.perf_counter(), int(batch["attention_mask"].sum())))

    run = compose(ROOT / "recipes" / recipe, *extra, overrides=overrides)
    run.trainer.callbacks.append(Stamp())
    run.trainer.fit(run.model, datamodule=run.datamodule)
    end = time.perf_counter()
    timed = stamps[args.warmup :]
    result = run.trainer.test(run.model, datamodule=run.datamodule, verbose=False)[0]
    also = {}
    if args.also_test:
        run.datamodule.hparams.test_file = args.also_test
        run.datamodule.forget("test")
        also = {"also_score": 100 * run.trainer.test(run.model, datamodule=run.datamodule, verbose=False)[0][score]}
    return also | {
        "score": 100 * result[score],
        "train_tokens_per_s": sum(n for _, n in timed) / (end - timed[0][0]),
        "inference_sentences_per_s": sentences_per_second(run, args.speed_batches),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "checkpoint_mb": (work / side / "checkpoints" / "last.ckpt").stat().st_size / 1e6,
        "trainable": sum(p.numel() for p in run.model.parameters() if p.requires_grad),
        "total": sum(p.numel() for p in run.model.parameters()),
        "train_batches": batches,
    } | ({"labelling_s": float((Path(settings["data.train_file"][1]).parent / "seconds.txt").read_text())}
         if TRANSFER_SIDE.fullmatch(side) else {})  # fmt: skip


def summary(found: list[dict[str, float]]) -> dict[str, Any]:
    def sd(key: str) -> float | None:
        return round(statistics.stdev(r[key] for r in found), 2) if len(found) > 1 else None

    also = (
        {
            "also_score_mean": round(statistics.mean(r["also_score"] for r in found), 2),
            "also_score_sd": sd("also_score"),
        }
        if all("also_score" in r for r in found)
        else {}
    )
    return also | {
        "score_mean": round(statistics.mean(r["score"] for r in found), 2),
        "score_sd": sd("score"),
        "train_tokens_per_s_median": round(statistics.median(r["train_tokens_per_s"] for r in found)),
        "inference_sentences_per_s_median": round(statistics.median(r["inference_sentences_per_s"] for r in found), 1),
        "peak_rss_mb_max": round(max(r["peak_rss_mb"] for r in found)),
        "checkpoint_mb": round(found[0]["checkpoint_mb"], 1),
        "trainable": found[0]["trainable"],
        "total": found[0]["total"],
        "runs": found,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--student-batches", type=int, help="the student sides' batches (default: --batches)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--speed-batches", type=int, default=16)
    parser.add_argument(
        "--sides", nargs="+", help=f"sides to run, in order (default: the recipes' defaults, per task: {DEFAULT_SIDES})"
    )
    parser.add_argument("--lora-lr", type=float, help="the LoRA sides' learning rate (default: ner_lora.yaml's)")
    parser.add_argument("--rslora", action="store_true", help="rank-stabilised LoRA scaling on the LoRA sides")
    parser.add_argument(
        "--test-file", help="score on this file of the task's data set (default: the recipe's test file)"
    )
    parser.add_argument(
        "--also-test",
        help="score each run on this file of the task's data set too (its ``also_score``): choose settings on "
        "one file and report another from the same runs",
    )
    parser.add_argument("--out", type=Path, default=OUT, help="the result file (%(default)s)")
    parser.add_argument(
        "--work",
        type=Path,
        help="keep each run's folder here (<task>-seed<seed>/<side>) and reuse a side already run there",
    )
    parser.add_argument(
        "--teacher-seed",
        type=int,
        help="with --work: one teacher, the full run of this seed, for every seed's students",
    )
    parser.add_argument(
        "--transfer-docs",
        type=int,
        default=TRANSFER_DOCS,
        help="Brown's first N documents as the transfer set (%(default)s)",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)  # task side seed work
    args = parser.parse_args()
    if args.child:
        task, side, seed, work = args.child
        print(json.dumps(child(task, side, int(seed), args, Path(work))))
        return
    provenance = started("lora_distill.py")
    sides_of = {task: list(args.sides or DEFAULT_SIDES[task]) for task in args.tasks}
    for side in {s for sides in sides_of.values() for s in sides}:
        if (
            side not in SIDES
            and not re.fullmatch(r"student-x(?:a\d*)?", side)
            and not LORA_SIDE.fullmatch(side)
            and not DISTILLED_SIDE.fullmatch(side)
        ):
            parser.error(
                f"--sides {side}: expected one of {SIDES}, lora-r<rank>-<qv|attn|all> , student-distilled-a<alpha>-t<T>-h<w>-c, each student side with -x or -xa<copies>"
            )
    if any(
        any(DISTILLED_SIDE.fullmatch(s) or TRANSFER_SIDE.fullmatch(s) for s in sides) and "full" not in sides
        for sides in sides_of.values()
    ):
        parser.error("--sides student-distilled… and …-x need full (the teacher) before them")
    if args.teacher_seed is not None and (args.work is None or args.teacher_seed not in args.seeds):
        parser.error("--teacher-seed needs --work and one of --seeds")
    runs: dict[str, dict[str, list[dict[str, float]]]] = {t: {s: [] for s in sides_of[t]} for t in args.tasks}
    for task in args.tasks:
        for seed in sorted(args.seeds, key=lambda s: s != args.teacher_seed):  # the teacher's seed first
            with contextlib.ExitStack() as stack:
                work = (
                    args.work / f"{task}-seed{seed}"
                    if args.work
                    else Path(stack.enter_context(tempfile.TemporaryDirectory()))
                )
                for side in sides_of[task]:
                    if side == "full" and args.teacher_seed not in (None, seed):
                        continue
                    kept = work / side / "result.json"
                    if kept.is_file():
                        runs[task][side].append(json.loads(kept.read_text()))
                        print(task, side, "(kept)", runs[task][side][-1], flush=True)
                        continue
                    command = [sys.executable, __file__, "--child", task, side, str(seed), work]
                    command += ["--batches", str(args.batches), "--warmup", str(args.warmup)]
                    command += ["--student-batches", str(args.student_batches)] if args.student_batches else []
                    command += ["--speed-batches", str(args.speed_batches)]
                    command += ["--lora-lr", str(args.lora_lr)] if args.lora_lr is not None else []
                    command += ["--rslora"] if args.rslora else []
                    command += ["--teacher-seed", str(args.teacher_seed)] if args.teacher_seed else []
                    command += ["--transfer-docs", str(args.transfer_docs)]
                    command += ["--test-file", args.test_file] if args.test_file else []
                    command += ["--also-test", args.also_test] if args.also_test else []
                    out = subprocess.run(command, capture_output=True, text=True)
                    if out.returncode != 0:
                        raise SystemExit(out.stderr[-3000:])
                    runs[task][side].append({"seed": seed, **json.loads(out.stdout.strip().splitlines()[-1])})
                    if args.work:
                        kept.write_text(json.dumps(runs[task][side][-1]))
                    print(task, side, runs[task][side][-1], flush=True)
    table = {task: {side: summary(found) for side, found in sides.items()} for task, sides in runs.items()}
    for sides in table.values():
        if not {"full", "student"} <= sides.keys():
            continue
        teacher, hard = sides["full"]["score_mean"], sides["student"]["score_mean"]
        for side in (s for s in sides if DISTILLED_SIDE.fullmatch(s) or TRANSFER_SIDE.fullmatch(s)):
            soft = sides[side]["score_mean"]
            sides[side]["gap_closed"] = round((soft - hard) / (teacher - hard), 3) if teacher != hard else None
            sides[side]["share_of_teacher"] = round(soft / teacher, 3)
            sides[side]["speed_up_over_teacher"] = round(
                sides[side]["inference_sentences_per_s_median"] / sides["full"]["inference_sentences_per_s_median"], 2
            )
    result = header("lora_distill", provenance["command"], provenance["commit"], repeats=len(args.seeds))
    result["settings"] = {
        "batches": args.batches, "student_batches": args.student_batches or args.batches, "batch_size": 32, "warmup": args.warmup, "seeds": args.seeds,
        "speed_batches": args.speed_batches, "student_layers": STUDENT_LAYERS,
        "teacher_defaults": {f.name: f.default for f in fields(Teacher) if f.name != "path"},
        "sides": sides_of, "lora_lr": args.lora_lr, "rslora": args.rslora, "teacher_seed": args.teacher_seed,
        "transfer_docs": args.transfer_docs, "test_file": args.test_file, "also_test": args.also_test,
    }  # fmt: skip
    result["tasks"] = table
    write_result(args.out, result)
    brief = {t: {s: {k: v for k, v in x.items() if k != "runs"} for s, x in d.items()} for t, d in table.items()}
    print(json.dumps(brief, indent=1))


if __name__ == "__main__":
    main()
