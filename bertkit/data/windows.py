"""The max-context rule, shared by every head that cuts a long input into overlapping windows.

A token held by several windows belongs to one of them: the window where
``min(tokens to its left, tokens to its right) + 0.01 * window length`` is highest, the first of
equal scores winning — google-research/bert ``run_squad.py`` ``_check_is_max_context``. The
token tagger labels and predicts each word once, in the window that owns its first token; the
span head lets an answer start only in the window that owns the start token.
"""

from __future__ import annotations

from collections.abc import Sequence


def max_context_window(spans: Sequence[tuple[int, int]], position: int) -> int:
    """Index of the window that gives token ``position`` its most context.

    Args:
        spans: the windows, in order, as token ranges ``[start, end)``.
        position: a token index.

    Raises:
        ValueError: no window holds ``position``.
    """
    best, best_score = -1, -1.0
    for k, (start, end) in enumerate(spans):
        if start <= position < end:
            score = min(position - start, end - 1 - position) + 0.01 * (end - start)
            if score > best_score:
                best, best_score = k, score
    if best < 0:
        raise ValueError(f"token {position} is in none of the windows {list(spans)}")
    return best
