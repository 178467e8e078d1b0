"""SQuAD exact match and F1, as the official evaluation scripts compute them.

``normalize_answer`` (lower-case, drop punctuation, drop the articles a/an/the, collapse
whitespace) and the token F1 are those of ``evaluate-v1.1.py`` / ``evaluate-v2.0.py``
(Rajpurkar et al.); a prediction's score is the maximum over the gold answers. v1.1 and v2.0 differ
at empty answers: v2.0 drops gold answers that normalise to nothing (using ``""`` when none is
left) and scores F1 ``1`` when both sides are empty, v1.1 scores it ``0``. Scores are in percent
like the scripts. torchmetrics' ``SQuAD`` implements v1.1 only (no unanswerable questions), hence
this metric; it agrees with ``SQuAD`` on v1.1 (tested).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

PUNCTUATION = set(string.punctuation)
ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
# Per question: null-score difference; exact and F1 of the best span and of no answer; flags.
STATES = ("diff", "exact_span", "f1_span", "exact_null", "f1_null", "has_answer", "nonempty")


def normalize_answer(text: str) -> str:
    """Official SQuAD normalisation: lower-case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def exact_match(gold: str, prediction: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(prediction))


def f1(gold: str, prediction: str, version_2: bool) -> float:
    """Token-overlap F1 of normalised answers (v2.0: 1 when both are empty; v1.1: 0)."""
    gold_tokens, pred_tokens = normalize_answer(gold).split(), normalize_answer(prediction).split()
    if version_2 and (not gold_tokens or not pred_tokens):
        return float(gold_tokens == pred_tokens)
    same = sum((Counter(gold_tokens) & Counter(pred_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def best_scores(golds: list[str], prediction: str, version_2: bool) -> tuple[float, float]:
    """(exact, F1) of ``prediction``: the maximum over the gold answers, each 0 or 1 / in [0, 1]."""
    if version_2:
        golds = [g for g in golds if normalize_answer(g)] or [""]
    return max(exact_match(g, prediction) for g in golds), max(f1(g, prediction, version_2) for g in golds)


class SquadScore(Metric):
    """SQuAD exact match and F1 (percent) of question answers; with v2.0 also per answerable /
    unanswerable question and the best null-score threshold.

    ``update`` takes, per question, the best span's text (always a span, even if the model
    abstains), the null-score difference (v2.0; ``inf`` where no span exists) and the gold answer
    texts. ``compute`` answers the questions whose difference is at most ``threshold`` and leaves
    the rest unanswered; ``best_exact``/``best_f1`` and their thresholds are the official
    ``find_best_thresh`` applied to the best spans.

    Args:
        version_2: SQuAD v2.0 scoring and the threshold search.
        threshold: ``null_score_diff_threshold`` used for the ``exact_match``/``f1`` keys (v2.0).
        kwargs: torchmetrics ``Metric`` options (``sync_on_compute`` …).
    """

    full_state_update = False

    def __init__(self, version_2: bool = False, threshold: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.version_2, self.threshold = version_2, threshold
        for name in STATES:
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, spans: list[str], diffs: list[float], golds: list[list[str]]) -> None:
        """Add questions: best span texts, null-score differences and gold answer texts."""
        rows = []
        for span, diff, gold in zip(spans, diffs, golds, strict=True):
            rows.append(
                (diff, *best_scores(gold, span, self.version_2), *best_scores(gold, "", self.version_2))
                + (float(bool(gold)), float(bool(span)))
            )
        if rows:
            columns = torch.tensor(rows, dtype=torch.float64, device=self.device).T
            for name, column in zip(STATES, columns, strict=True):
                getattr(self, name).append(column)

    def _states(self) -> dict[str, torch.Tensor]:
        return {n: dim_zero_cat(getattr(self, n)) for n in STATES}

    def compute(self) -> dict[str, torch.Tensor]:
        s = self._states()
        if not len(s["diff"]):
            return {}
        answered = s["diff"] <= self.threshold if self.version_2 else torch.ones_like(s["diff"], dtype=torch.bool)
        exact = torch.where(answered, s["exact_span"], s["exact_null"])
        f1_ = torch.where(answered, s["f1_span"], s["f1_null"])
        out = {"exact_match": 100 * exact.mean(), "f1": 100 * f1_.mean()}
        if not self.version_2:
            return out
        has = s["has_answer"].bool()
        for prefix, rows in (("HasAns", has), ("NoAns", ~has)):
            if rows.any():
                out[f"{prefix}_exact"] = 100 * exact[rows].mean()
                out[f"{prefix}_f1"] = 100 * f1_[rows].mean()
        for kind in ("exact", "f1"):
            best, at = best_threshold(s["diff"], s[f"{kind}_span"], has, s["nonempty"].bool())
            out[f"best_{kind}"], out[f"best_{kind}_thresh"] = torch.tensor(best), torch.tensor(at)
        return out


def best_threshold(
    diff: torch.Tensor, span_score: torch.Tensor, has_answer: torch.Tensor, nonempty: torch.Tensor
) -> tuple[float, float]:
    """The official v2.0 ``find_best_thresh``: start with every question unanswered, answer them in
    rising order of ``diff``, keep the best total. Returns (score in percent, threshold)."""
    score = best = float((~has_answer).sum())
    threshold = 0.0
    for i in sorted(range(len(diff)), key=lambda i: float(diff[i])):
        if has_answer[i]:
            score += float(span_score[i])
        elif nonempty[i]:
            score -= 1
        if score > best:
            best, threshold = score, float(diff[i])
    return 100.0 * best / len(diff), threshold
