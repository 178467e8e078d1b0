"""From start/end logits to answers, as google-research/bert ``run_squad.py`` ``write_predictions``.

Per window (``window_candidates``, on tensors): the ``n_best_size`` best start and end tokens,
every pair with start <= end, length <= ``max_answer_length``, both in the passage, and the start
in its max-context window; a span scores ``start_logit + end_logit``. Starts and ends are chosen
among the allowed tokens only (Google takes the top ``n_best_size`` of all tokens, question and
padding included, and filters afterwards, which can leave fewer or no candidates).

Per question (``answer``): the spans of all its windows, best first, de-duplicated by text, cut
to ``n_best_size``; the text is sliced from the original passage by character offsets. SQuAD v2.0:
the null score is the minimum over windows of ``start[CLS] + end[CLS]``; the question is left
unanswered when ``null_score - best_span_score > null_score_diff_threshold``.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def window_candidates(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    may_start: torch.Tensor,
    may_end: torch.Tensor,
    n_best_size: int,
    max_answer_length: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best spans of each window.

    Args:
        start_logits, end_logits: (B, T) logits.
        may_start: (B, T) bool, tokens a span may start at (passage, max context).
        may_end: (B, T) bool, tokens a span may end at (passage).
        n_best_size: starts and ends considered, and spans returned, per window.
        max_answer_length: longest span in tokens.

    Returns:
        scores (B, K) float32, ``-inf`` where there is no candidate; starts and ends (B, K) token
        indices; K = min(n_best_size, T**2), best first.
    """
    T = start_logits.shape[1]
    k = min(n_best_size, T)
    start = start_logits.float().masked_fill(~may_start, -math.inf)
    end = end_logits.float().masked_fill(~may_end, -math.inf)
    start_score, start_index = start.topk(k, dim=1)  # (B, k)
    end_score, end_index = end.topk(k, dim=1)
    length = end_index[:, None, :] - start_index[:, :, None] + 1  # (B, k, k)
    pair = start_score[:, :, None] + end_score[:, None, :]
    pair = pair.masked_fill((length < 1) | (length > max_answer_length), -math.inf)
    scores, flat = pair.flatten(1).topk(min(n_best_size, k * k), dim=1)
    return scores, start_index.gather(1, flat // k), end_index.gather(1, flat % k)


def _softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    exp = [math.exp(s - top) for s in scores]
    return [e / sum(exp) for e in exp]


def answer(
    context: str,
    windows: list[dict[str, Any]],
    n_best_size: int,
    version_2: bool,
    null_score_diff_threshold: float,
) -> dict[str, Any]:
    """The answer to one question from the candidates of all its windows.

    Args:
        context: the passage (answers are sliced from it).
        windows: per window ``{"null_score": float, "spans": [[score, start_char, end_char], ...]}``.
        n_best_size: alternatives kept.
        version_2: SQuAD v2.0: the question may be left unanswered.
        null_score_diff_threshold: v2.0: abstain when the null score beats the best span by more.

    Returns:
        ``answer`` (text, ``""`` when abstaining), ``start``/``end`` (character offsets, None when
        abstaining), ``score`` (logit sum of the best span), ``best_span`` (its text even when
        abstaining), ``null_score_diff`` (v2.0; it and ``score`` are None when no window has a
        valid span, and the question is then unanswered), ``abstained``, and
        ``n_best`` (text, start, end, score, probability: softmax over the listed scores; v2.0
        lists the null answer too).
    """
    spans = sorted((s for w in windows for s in w["spans"]), key=lambda s: -s[0])
    n_best, seen = [], set()
    for score, start, end in spans:
        text = context[start:end]
        if text in seen:
            continue
        seen.add(text)
        n_best.append({"text": text, "start": start, "end": end, "score": score})
        if len(n_best) == n_best_size:
            break
    found = bool(n_best)
    best = n_best[0] if found else {"text": "", "start": None, "end": None, "score": None}
    null_score = min(w["null_score"] for w in windows)
    diff = null_score - best["score"] if found else None
    abstained = not found or (version_2 and diff > null_score_diff_threshold)
    if version_2:
        n_best.append({"text": "", "start": None, "end": None, "score": null_score})
        n_best.sort(key=lambda c: -c["score"])
    for candidate, p in zip(n_best, _softmax([c["score"] for c in n_best]), strict=True):
        candidate["probability"] = p
    record = {
        "answer": "" if abstained else best["text"],
        "start": None if abstained else best["start"],
        "end": None if abstained else best["end"],
        "score": best["score"],
        "best_span": best["text"],
        "abstained": abstained,
        "n_best": n_best,
    }
    if version_2:
        record["null_score_diff"] = diff
    return record
