"""One benchmark over several seeds: each side's mean and standard deviation, and the paired
difference per seed (one seed cannot tell a gap from chance).

Each seed runs the task's benchmark script in its own process (``--seed N``, which also sets
bertkit's ``data.seed``) and writes ``benchmarks/results/seeds/<task>/<name>/seed<N>.json``; a
seed whose file exists is not run again, so an interrupted harness resumes. The summary goes to
``benchmarks/results/seeds/<task>/<name>.json``: per score and side the mean and sample standard
deviation, and the paired difference bertkit − transformers (mean, standard error, t). An
ablation (``--bertkit-only`` with ``--set``) is compared, seed by seed, with the bertkit side of
``--against`` (default ``matched``, the plain run), and with the transformers side of that run.
Usage (needs ``pip install -e ".[bench]"``)::

    python benchmarks/seeds.py rte --seeds 1 2 3 4 5
    python benchmarks/seeds.py rte --seeds 1 2 3 4 5 --name random-order -- --bertkit-only --set data.group_by_length=false
    python benchmarks/seeds.py ner --name crf --against plain --transformers-from short -- --bertkit-only --set model.task.init_args.crf=true

Arguments after ``--`` go to the task's script (``--epochs``, ``--train-sentences`` …).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import common

TASKS = {  # script and its arguments; scores in points (0-100) from a result file and side
    "rte": ("glue_vs_transformers.py", ["--task", "rte"]),
    "mrpc": ("glue_vs_transformers.py", ["--task", "mrpc"]),
    "sst2": ("glue_vs_transformers.py", ["--task", "sst2"]),
    "ner": ("ner_vs_transformers.py", []),
    "squad": ("squad_vs_transformers.py", []),
}


def scores(task: str, side: dict[str, Any]) -> dict[str, float]:
    """A side's test scores in points."""
    if task == "ner":
        return {"f1": 100 * side["test_f1"]}
    if task == "squad":
        return dict(side["test"])  # exact_match, f1: already points
    return {k: 100 * v for k, v in side["test"].items()}


def spread(values: list[float]) -> dict[str, float]:
    """Mean, sample standard deviation and standard error of the mean."""
    sd = statistics.stdev(values) if len(values) > 1 else math.nan
    return {"mean": statistics.fmean(values), "sd": sd, "se": sd / math.sqrt(len(values)), "n": len(values)}


def paired(ours: list[float], theirs: list[float]) -> dict[str, float]:
    """The per-seed difference ours − theirs: its mean, spread and t = mean / standard error."""
    out = spread([a - b for a, b in zip(ours, theirs, strict=True)])
    out["t"] = out["mean"] / out["se"] if out["se"] > 0 else math.nan
    out["within_one_se"] = abs(out["mean"]) <= out["se"]
    return out


def run_seed(task: str, seed: int, path: Path, extra: list[str]) -> dict[str, Any]:
    if not path.exists():
        script, args = TASKS[task]
        command = [sys.executable, str(common.ROOT / "benchmarks" / script), *args, "--seed", str(seed)]
        subprocess.run([*command, "--output", str(path), *extra], check=True)
    return json.loads(path.read_text())


def summarise(
    task: str, runs: dict[int, dict[str, Any]], baseline: dict[int, dict[str, Any]] | None,
    others: dict[int, dict[str, Any]] | None = None,
) -> dict:  # fmt: skip
    seeds = sorted(runs)
    ours = [scores(task, runs[s]["bertkit"]) for s in seeds]
    summary: dict[str, Any] = {"seeds": seeds, "bertkit": {}, "transformers": {}, "paired_difference": {}}
    # A bertkit-only ablation is paired with the baseline's transformers runs, or those of
    # ``others`` (same seeds and data: the transformers side does not depend on bertkit's settings).
    sources = {"this configuration": runs, "the baseline": baseline, "--transformers-from": others}
    found = [(n, r) for n, r in sources.items() if r and all(r[s]["transformers"] for s in seeds)]
    reference = found[0][1] if found else None
    if found:
        summary["transformers_from"] = found[0][0]
    for key in ours[0]:
        summary["bertkit"][key] = spread([o[key] for o in ours]) | {"values": [o[key] for o in ours]}
        if reference is not None:
            theirs = [scores(task, reference[s]["transformers"])[key] for s in seeds]
            summary["transformers"][key] = spread(theirs) | {"values": theirs}
            summary["paired_difference"][key] = paired([o[key] for o in ours], theirs)
        if baseline is not None:
            base = [scores(task, baseline[s]["bertkit"])[key] for s in seeds]
            summary.setdefault("effect_vs_baseline", {})[key] = paired([o[key] for o in ours], base)
    return summary


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--name", default="matched", help="this configuration's folder name")
    parser.add_argument(
        "--against", default="matched", help="baseline configuration of an ablation (none: a bertkit-only run alone)"
    )
    parser.add_argument("--transformers-from", help="a configuration whose transformers runs to pair with (run before)")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)

    folder = common.ROOT / "benchmarks" / "results" / "seeds" / args.task
    runs = {s: run_seed(args.task, s, folder / args.name / f"seed{s}.json", extra) for s in args.seeds}
    baseline = None
    if "--bertkit-only" in extra and args.against != "none":  # an ablation: paired with the baseline configuration
        baseline = {s: run_seed(args.task, s, folder / args.against / f"seed{s}.json", []) for s in args.seeds}
    others = None
    if args.transformers_from:
        others = {s: json.loads((folder / args.transformers_from / f"seed{s}.json").read_text()) for s in args.seeds}
    summary = {"task": args.task, "name": args.name, "script_arguments": extra}
    if baseline is not None:
        summary["seeds_arguments"] = ["--against", args.against]
    if others is not None:
        summary.setdefault("seeds_arguments", []).extend(["--transformers-from", args.transformers_from])
    summary |= summarise(args.task, runs, baseline, others)
    named = {"the baseline": f"the baseline ({args.against})", "--transformers-from": str(args.transformers_from)}
    if summary.get("transformers_from") in named:
        summary["transformers_from"] = named[summary["transformers_from"]]
    speeds = [runs[s]["bertkit"].get("tokens_per_second") for s in sorted(runs)]
    if all(isinstance(v, (int, float)) for v in speeds):  # training throughput, real tokens/s
        summary["bertkit_tokens_per_second"] = spread(speeds)
    common.write_result(folder / f"{args.name}.json", summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "script_arguments"}, indent=2))


if __name__ == "__main__":
    main()
