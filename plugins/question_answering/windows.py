"""Sliding windows over a long passage, as google-research/bert ``run_squad.py``.

A passage longer than the room left beside the question becomes overlapping windows whose
starts are ``doc_stride`` tokens apart (Google's meaning of ``doc_stride``: the step between
windows. Hugging Face ``run_qa.py`` passes the same number as ``stride``, which is the *overlap*).
Each context token is scored in every window that holds it by ``min(left, right) + 0.01 * length``
(``_check_is_max_context``); an answer may start only in the window with the best score.
"""

from __future__ import annotations


def doc_spans(num_tokens: int, room: int, doc_stride: int) -> list[tuple[int, int]]:
    """Token spans ``(start, length)`` covering ``num_tokens`` context tokens.

    Args:
        num_tokens: context tokens of the passage.
        room: context tokens one window holds (``max_seq_length - question - 3``).
        doc_stride: tokens between the starts of consecutive windows.

    Raises:
        ValueError: ``room`` or ``doc_stride`` below 1.
    """
    if room < 1 or doc_stride < 1:
        raise ValueError(f"window room {room} and doc_stride {doc_stride}: both must be at least 1")
    spans, start = [], 0
    while True:
        length = min(num_tokens - start, room)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, doc_stride)


def is_max_context(spans: list[tuple[int, int]], index: int, position: int) -> bool:
    """Whether window ``index`` gives context token ``position`` its best context
    (``_check_is_max_context``: the first of equal scores wins)."""
    best_score, best = None, None
    for k, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best = score, k
    return best == index
