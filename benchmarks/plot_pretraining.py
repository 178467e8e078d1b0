"""Figures and a summary for ``benchmarks/pretrain_transfer.sh``.

    python benchmarks/plot_pretraining.py curve LOG_DIR OUT.png        # held-out MLM/NSP accuracy over steps
    python benchmarks/plot_pretraining.py summary RUN_DIR OUT.json     # curve + NER transfer, as JSON
    python benchmarks/plot_pretraining.py compare RUN_DIR OUT.json     # electra_vs_mlm.sh: curves, NER, OUT.png
    python benchmarks/plot_pretraining.py architectures RUN_DIR OUT.json  # architecture_transfer.sh, OUT.png

LOG_DIR is a CSVLogger ``name`` folder (all its ``version_*`` are read).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from common import machine


def metrics(log_dir: Path) -> list[dict[str, str]]:
    """Rows of every ``version_*/metrics.csv`` under a CSVLogger folder, oldest version first
    (``fit`` and a later ``test`` log to separate versions)."""
    versions = sorted(log_dir.glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    if not versions:
        raise FileNotFoundError(f"{log_dir}: no version_* folder with metrics.csv")
    rows = []
    for version in versions:
        with (version / "metrics.csv").open(encoding="utf-8") as f:
            rows += list(csv.DictReader(f))
    return rows


HELD_OUT = (
    "mlm_accuracy", "mlm_perplexity", "nsp_accuracy", "sop_accuracy", "rtd_accuracy", "replaced_precision",
    "replaced_recall",
)  # fmt: skip


def curve(log_dir: Path) -> list[dict[str, float]]:
    """Held-out points: step, mlm_accuracy, mlm_perplexity, nsp/sop accuracy, ELECTRA's
    rtd_accuracy and replaced precision/recall (where logged)."""
    points = []
    for row in metrics(log_dir):
        if row.get("val/mlm_accuracy"):
            point = {"step": int(float(row["step"]))}
            for key in HELD_OUT:
                if row.get(f"val/{key}"):
                    point[key] = float(row[f"val/{key}"])
            points.append(point)
    return points


def plot(points: list[dict[str, float]], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    steps = [p["step"] for p in points]
    for key, label in (
        ("mlm_accuracy", "MLM accuracy"),
        ("nsp_accuracy", "NSP accuracy"),
        ("sop_accuracy", "SOP accuracy"),
    ):
        if all(key in p for p in points):
            ax.plot(steps, [p[key] for p in points], marker="o", label=label)
    ax.set_xlabel("optimizer step (batch 32 x 128 tokens)")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("mini BERT from scratch, MLM + NSP: held-out documents", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)


def ner_scores(run: Path) -> dict[str, float]:
    """Dev F1 per epoch (the fit's log) and the test F1 of the best-dev checkpoint (``bertkit
    test`` writes ``test_scores.json``; older runs logged it to the CSV)."""
    rows = metrics(run / "logs")
    val = [float(r["val/f1"]) for r in rows if r.get("val/f1")]
    scores = run / "test_scores.json"
    if scores.is_file():
        test = [json.loads(scores.read_text())["scores"]["test/f1"]]
    else:
        test = [float(r["test/f1"]) for r in rows if r.get("test/f1")]
    return {"dev_f1_per_epoch": val, "test_f1_best_dev": test[-1] if test else None}


def wall_minutes(run: Path) -> float:
    """Minutes from a run's first log file to its last checkpoint (fit only; mtimes)."""
    start = min(p.stat().st_mtime for p in (run / "logs").glob("version_*/hparams.yaml"))
    end = max(p.stat().st_mtime for p in (run / "checkpoints").glob("*.ckpt"))
    return round((end - start) / 60, 1)


def compare(run: Path, out: Path) -> None:
    """``electra_vs_mlm.sh``'s summary: both objectives' held-out curves, NER from each init."""
    arms = {name: curve(run / name / "logs") for name in ("mlm", "electra")}
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, points in arms.items():
        steps = [p["step"] for p in points]
        label = "MLM" if name == "mlm" else "ELECTRA generator (1/4 width)"
        left.plot(steps, [p["mlm_accuracy"] for p in points], marker="o", label=label)
    left.set(xlabel="optimizer step (batch 32 x 128 tokens)", ylabel="held-out MLM accuracy", ylim=(0, None))
    left.set_title("masked-token accuracy", fontsize=10)
    steps = [p["step"] for p in arms["electra"]]
    for key in ("rtd_accuracy", "replaced_precision", "replaced_recall"):
        right.plot(steps, [p[key] for p in arms["electra"]], marker="o", label=key)
    right.set(xlabel="optimizer step", ylabel="held-out", ylim=(0, 1))
    right.set_title("ELECTRA discriminator: replaced-token detection", fontsize=10)
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    manifest = json.loads((run / "shards" / "train" / "manifest.json").read_text())
    summary = {
        "machine": machine(),
        "corpus": {k: manifest[k] for k in ("documents", "instances", "tokens", "dupe_factor", "max_seq_length")},
        "pretraining": {
            name: {"curve": points, "fit_wall_minutes": wall_minutes(run / name)} for name, points in arms.items()
        },
        "ner_conll2003": {init: ner_scores(run / f"ner-{init}") for init in ("random", "mlm", "electra")},
    }
    out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary["ner_conll2003"], indent=2))


def architectures(run: Path, out: Path) -> None:
    """``architecture_transfer.sh``'s summary: each family's held-out MLM curve, parameters and
    fit time, and CoNLL-2003 test F1 per seed (the best-dev checkpoint of each run), mean and SD,
    and from a random initialisation where it was run."""
    from safetensors.torch import load_file

    families = ("bert", "modernbert")
    summary: dict = {"machine": machine(), "pretraining": {}, "ner_conll2003": {}}
    manifest = json.loads((run / "shards" / "train" / "manifest.json").read_text())
    summary["corpus"] = {k: manifest[k] for k in ("documents", "instances", "tokens", "max_seq_length")}
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, family in enumerate(families):
        weights = load_file(str(run / family / "export" / "model.safetensors"))
        parameters = sum(t.numel() for t in weights.values())  # the tied decoder once
        points = curve(run / family / "logs")
        summary["pretraining"][family] = {
            "parameters": parameters, "curve": points, "fit_wall_minutes": wall_minutes(run / family)
        }  # fmt: skip
        left.plot([p["step"] for p in points], [p["mlm_accuracy"] for p in points], marker="o", label=family)
        seeds = sorted(run.glob(f"ner-{family}-seed*/logs"))
        scores = {p.parent.name.rsplit("seed", 1)[1]: ner_scores(p.parent) for p in seeds}
        test = [s["test_f1_best_dev"] for s in scores.values() if s["test_f1_best_dev"] is not None]
        summary["ner_conll2003"][family] = {
            "per_seed": scores,
            "test_f1_mean": statistics.mean(test) if test else None,
            "test_f1_sd": statistics.stdev(test) if len(test) > 1 else None,
        }
        random_init = run / f"ner-{family}-random"
        if random_init.is_dir():
            summary["ner_conll2003"][family]["random_init_test_f1"] = ner_scores(random_init)["test_f1_best_dev"]
        right.scatter([i] * len(test), test, label=family)
    left.set(xlabel="optimizer step (batch 32 x 128 tokens)", ylabel="held-out MLM accuracy", ylim=(0, None))
    left.set_title("masked LM, 30 % of tokens: held-out documents", fontsize=10)
    right.set(xticks=range(len(families)), xticklabels=families, ylabel="CoNLL-2003 test F1 (one dot a seed)")
    right.set_title("NER fine-tuned from each export", fontsize=10)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({f: {k: v for k, v in s.items() if k != "per_seed"} for f, s in summary["ner_conll2003"].items()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["curve", "summary", "compare", "architectures"])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.what == "curve":
        plot(curve(args.source), args.out)
        return
    if args.what in ("compare", "architectures"):
        (compare if args.what == "compare" else architectures)(args.source, args.out)
        return
    manifest = json.loads((args.source / "shards" / "train" / "manifest.json").read_text())
    held = json.loads((args.source / "shards" / "validation" / "manifest.json").read_text())
    summary = {
        "machine": machine(),
        "corpus": {
            k: manifest[k] for k in ("inputs", "documents", "instances", "tokens", "dupe_factor", "max_seq_length")
        },
        "held_out": {k: held[k] for k in ("documents", "instances", "tokens")},
        "pretraining_curve": curve(args.source / "logs"),
        "ner_conll2003": {init: ner_scores(args.source / f"ner-{init}") for init in ("pretrained", "random")},
    }
    args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary["ner_conll2003"], indent=2))


if __name__ == "__main__":
    main()
