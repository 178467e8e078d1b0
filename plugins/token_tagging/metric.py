"""Entity-level precision, recall and F1 (CoNLL-2003 / conlleval, same as seqeval's default mode).

Word-level predictions arrive in any order and from any window; ``compute`` joins them by
(example_index, word_index), so it is exact for windowed sentences and syncs across processes
(states are concatenated; duplicates from padded distributed samplers are removed).
"""

from __future__ import annotations

from collections import Counter

import torch
from bertkit_plugins.token_tagging.conll import entities
from torchmetrics import Metric


def entity_scores(gold: list[list[str]], pred: list[list[str]], types: list[str]) -> dict[str, float]:
    """Micro P/R/F1 over exact entity matches, then per type (keys ``precision_PER`` …).

    Args:
        gold, pred: one tag list per sentence, equal lengths.
        types: entity types to report separately.
    """
    correct, n_gold, n_pred = Counter(), Counter(), Counter()
    for g, p in zip(gold, pred, strict=True):
        g_set, p_set = set(entities(g)), set(entities(p))
        n_gold.update(e[0] for e in g_set)
        n_pred.update(e[0] for e in p_set)
        correct.update(e[0] for e in g_set & p_set)

    def prf(c: int, p: int, g: int) -> tuple[float, float, float]:
        precision = c / p if p else 0.0
        recall = c / g if g else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return precision, recall, f1

    scores = dict(
        zip(
            ("precision", "recall", "f1"),
            prf(sum(correct.values()), sum(n_pred.values()), sum(n_gold.values())),
            strict=True,
        )
    )
    for t in types:
        for name, value in zip(("precision", "recall", "f1"), prf(correct[t], n_pred[t], n_gold[t]), strict=True):
            scores[f"{name}_{t}"] = value
    return scores


class EntityF1(Metric):
    """Entity-level P/R/F1 from word-level tag ids.

    Args:
        tags: IOB2 tag names indexed by id (``O``, ``B-PER``, ``I-PER`` …).

    ``update(example_index, word_index, preds, target)`` takes four (N,) long tensors, one entry
    per word. ``compute()`` returns {precision, recall, f1, and each ``*_TYPE``} as tensors.
    """

    full_state_update = False

    def __init__(self, tags: list[str]) -> None:
        super().__init__()
        self.tags = list(tags)
        self.types = list(dict.fromkeys(t[2:] for t in tags if t != "O"))
        for name in ("example_index", "word_index", "preds", "target"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(
        self, example_index: torch.Tensor, word_index: torch.Tensor, preds: torch.Tensor, target: torch.Tensor
    ) -> None:
        self.example_index.append(example_index.long())
        self.word_index.append(word_index.long())
        self.preds.append(preds.long())
        self.target.append(target.long())

    def sentences(self) -> tuple[list[list[str]], list[list[str]]]:
        """Gold and predicted tag sequences, one per example, in example order."""
        if len(self.example_index) == 0:  # a list before a sync, one tensor after it
            return [], []

        def cat(x: list[torch.Tensor] | torch.Tensor) -> list[int]:
            return (torch.cat(x) if isinstance(x, list) else x).tolist()

        rows = sorted(
            set(zip(cat(self.example_index), cat(self.word_index), cat(self.preds), cat(self.target), strict=True))
        )
        gold: dict[int, list[str]] = {}
        pred: dict[int, list[str]] = {}
        for ex, _, p, g in rows:
            gold.setdefault(ex, []).append(self.tags[g])
            pred.setdefault(ex, []).append(self.tags[p])
        order = sorted(gold)
        return [gold[e] for e in order], [pred[e] for e in order]

    def compute(self) -> dict[str, torch.Tensor]:
        gold, pred = self.sentences()
        return {k: torch.tensor(v) for k, v in entity_scores(gold, pred, self.types).items()}
