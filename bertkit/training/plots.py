"""Plots written next to a run's logs when ``fit`` ends (matplotlib, no display needed): the
learning curves of every logged loss and score, and the per-type scores of the last validation
(``val/f1_PER`` …, what the NER head logs per entity type)."""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from pathlib import Path

from bertkit.utils.io import atomic_path

# val/f1_PER, val/f1_positive …: plotted as bars, not curves (f1_macro/f1_micro are curves)
PER_TYPE = re.compile(r"/(?:f1|precision|recall)_(?!macro$|micro$)")


def read_metrics(metrics_csv: str | Path) -> dict[str, list[tuple[int, float]]]:
    """``{metric: [(steps, value), …]}`` from a CSVLogger ``metrics.csv`` (blank cells skipped);
    ``steps`` counts the optimizer steps done when the value was logged, as progress lines, the
    fit summary and the checkpoints count them (``BertModule`` logs it as the loggers' step).
    """
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    with Path(metrics_csv).open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            step = int(float(row.get("step") or 0))
            for key, cell in row.items():
                if key in ("step", "epoch") or not cell:
                    continue
                value = float(cell)
                if math.isfinite(value):
                    series[key].append((step, value))
    return dict(series)


def _save(figure: object, target: Path) -> None:
    with atomic_path(target) as tmp:
        figure.savefig(tmp, format="png", dpi=100, bbox_inches="tight")


def write_plots(metrics_csv: str | Path) -> list[Path]:
    """Write ``learning_curves.png`` (and ``per_type.png`` when per-type scores were logged)
    beside ``metrics_csv``; returns the files written (none when nothing was logged)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = read_metrics(metrics_csv)
    curves = {k: v for k, v in series.items() if not PER_TYPE.search(k) and k != "train/tokens"}
    losses = sorted(k for k in curves if k.endswith("loss"))
    scores = sorted(k for k in curves if k not in losses)
    written: list[Path] = []
    if losses or scores:
        figure, axes = plt.subplots(1, 2 if scores else 1, figsize=(12 if scores else 6, 4), squeeze=False)
        # one axis without scores: the scores' column is left out
        for ax, keys, title in zip(axes[0], (losses, scores), ("loss", "scores"), strict=False):
            for key in keys:
                steps, values = zip(*curves[key], strict=True)
                ax.plot(steps, values, marker="o" if len(steps) < 20 else None, label=key)
            ax.set(xlabel="optimizer step", title=title)
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small")
        written.append(Path(metrics_csv).with_name("learning_curves.png"))
        _save(figure, written[-1])
        plt.close(figure)
    per_type = {k.removeprefix("val/f1_"): v[-1][1] for k, v in series.items() if k.startswith("val/f1_")}
    per_type = {k: v for k, v in per_type.items() if k not in ("macro", "micro")}  # averages, not types
    if per_type:
        figure, ax = plt.subplots(figsize=(1.2 * len(per_type) + 2, 3.5))
        ax.bar(list(per_type), list(per_type.values()))
        ax.set(ylim=(0, 1), ylabel="F1", title="validation F1 per type or label (last epoch)")
        written.append(Path(metrics_csv).with_name("per_type.png"))
        _save(figure, written[-1])
        plt.close(figure)
    return written
