"""Entity P/R/F1 over spans (exact start, end and type), for nested or flat output.

Spans arrive from any window and process; ``compute`` removes duplicates (the repeats of a
padded distributed sampler), applies greedy non-maximum suppression per sentence for flat output,
and counts every gold span, so it is exact under DDP and a gold span no window classifies is
missed, not dropped.
"""

from __future__ import annotations

from collections import Counter

import torch
from torchmetrics import Metric


def keep_best(spans: list[tuple]) -> list[tuple]:
    """Greedy non-maximum suppression: spans ``(first, end, type, score, …)`` by descending score,
    each kept unless it overlaps one kept before (flat output)."""
    kept: list[tuple] = []
    taken: set[int] = set()
    for span in sorted(spans, key=lambda s: -s[3]):
        words = set(range(span[0], span[1]))
        if not words & taken:
            kept.append(span)
            taken |= words
    return kept


class SpanF1(Metric):
    """Entity-level P/R/F1 from spans.

    Args:
        types: entity types by id − 1 (id 0 is "no entity").
        nested: score every predicted span; False: only those non-maximum suppression keeps.

    ``update(predicted, scores, gold)``: predicted (N, 4) long rows ``(example, first word, end
    word, type id)`` with their probabilities (N,); gold (M, 4) rows of the same layout.
    ``compute()``: precision, recall, f1 and each ``*_TYPE`` as tensors.
    """

    full_state_update = False

    def __init__(self, types: list[str], nested: bool) -> None:
        super().__init__()
        self.types, self.nested = list(types), nested
        for name in ("predicted", "scores", "gold"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, predicted: torch.Tensor, scores: torch.Tensor, gold: torch.Tensor) -> None:
        self.predicted.append(predicted.long().reshape(-1, 4))
        self.scores.append(scores.float().reshape(-1))
        self.gold.append(gold.long().reshape(-1, 4))

    def compute(self) -> dict[str, torch.Tensor]:
        def rows(x: list[torch.Tensor] | torch.Tensor, width: int) -> list[list]:
            x = torch.cat(x) if isinstance(x, list) else x  # a list before a sync, one tensor after it
            return x.reshape(-1, width).tolist() if x.numel() else []

        scores = rows(self.scores, 1)
        predicted = {tuple(p): s[0] for p, s in zip(rows(self.predicted, 4), scores, strict=True)}
        gold = {tuple(g) for g in rows(self.gold, 4)}
        if not self.nested:
            by_example: dict[int, list[tuple]] = {}
            for (example, first, end, kind), score in predicted.items():
                by_example.setdefault(example, []).append((first, end, kind, score))
            predicted = {(e, a, b, k): s for e, spans in by_example.items() for a, b, k, s in keep_best(spans)}
        guessed = set(predicted)
        counts = {
            name: Counter(s[3] for s in spans) for name, spans in (("p", guessed), ("g", gold), ("c", guessed & gold))
        }
        out: dict[str, float] = {}
        for suffix, kinds in [("", None), *((f"_{t}", {i + 1}) for i, t in enumerate(self.types))]:
            c, p, g = (sum(n for k, n in counts[x].items() if kinds is None or k in kinds) for x in "cpg")
            precision, recall = c / p if p else 0.0, c / g if g else 0.0
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            out |= {f"precision{suffix}": precision, f"recall{suffix}": recall, f"f1{suffix}": f1}
        return {k: torch.tensor(v) for k, v in out.items()}
