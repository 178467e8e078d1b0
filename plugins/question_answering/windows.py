"""Sliding windows over a long passage, as google-research/bert ``run_squad.py``.

A passage longer than the room left beside the question becomes overlapping windows whose
starts are ``doc_stride`` tokens apart (Google's meaning of ``doc_stride``: the step between
windows. Hugging Face ``run_qa.py`` passes the same number as ``stride``, which is the *overlap*).
An answer may start only in the window that gives its start token the most context
(``bertkit.data.windows.max_context_window``, Google's ``_check_is_max_context``).
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
