"""Word-aligned overlapping windows, so a sentence longer than ``max_length`` loses no word.

Windows break at word boundaries where possible and overlap by about ``stride`` tokens; each word
is *owned* by exactly one window, the one where it has the most context on both sides
(``bertkit.data.windows.max_context_window``), so it is labelled and predicted once.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.api.task import Inputs, max_context_window


@dataclass
class Window:
    """One model input of a sentence: its tokens ``[start, end)`` (of ``word_ids``), which words it
    owns (``owner[w] == index``), the number of context tokens before and after them, and the
    inputs built from all of them."""

    example: int
    index: int
    word_ids: list[int]
    start: int
    end: int
    owner: dict[int, int]
    left: int
    right: int
    inputs: Inputs

    def spread(self, pad: int, values: list[int]) -> list[int]:
        """One value per token of ``[start, end)`` as a list over the whole input (``pad`` at the
        context and the template's special tokens)."""
        return self.inputs.spread(pad, [pad] * self.left + values + [pad] * self.right)


def make_windows(word_ids: list[int], budget: int, stride: int) -> list[tuple[int, int]]:
    """Token spans ``[start, end)`` covering all tokens, each at most ``budget`` long.

    Args:
        word_ids: word index of each sub-word token (non-decreasing).
        budget: tokens per window (``max_length`` minus the specials).
        stride: tokens of overlap between consecutive windows (less if words do not fit).

    Raises:
        ValueError: ``budget`` < 1 or ``stride`` not in ``[0, budget)``.
    """
    if budget < 1 or not 0 <= stride < budget:
        raise ValueError(f"window budget {budget} and stride {stride}: need budget >= 1 and 0 <= stride < budget")
    n = len(word_ids)
    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        end = min(start + budget, n)
        if end < n:  # back off to a word boundary unless one word fills the window
            cut = end
            while cut > start and word_ids[cut] == word_ids[cut - 1]:
                cut -= 1
            end = cut if cut > start else end
        spans.append((start, end))
        if end >= n:
            return spans
        nxt = max(end - stride, start + 1)
        while nxt < end and word_ids[nxt] == word_ids[nxt - 1]:  # start on a word's first token
            nxt += 1
        start = nxt


def owners(word_ids: list[int], spans: list[tuple[int, int]]) -> dict[int, int]:
    """Map each word (by its first token) to the window index that owns it (``max_context_window``)."""
    first: dict[int, int] = {}
    for pos, w in enumerate(word_ids):
        first.setdefault(w, pos)
    return {w: max_context_window(spans, pos) for w, pos in first.items()}
