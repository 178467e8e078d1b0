"""Masked-LM masking strategies (registered through the ``register_masking`` hook).

The procedure is google-research/bert ``create_masked_lm_predictions`` (Devlin et al. 2019,
§3.1, A.1): ``num_to_predict = min(max_predictions_per_seq, max(1, round(T * masked_lm_prob)))``
positions are chosen by walking candidate spans in random order, skipping spans that would
overflow the budget or overlap a chosen one; every chosen token becomes ``[MASK]`` (80 %), a
random token (10 %) or stays (10 %), and is predicted. ``[CLS]``, ``[SEP]`` and padding are never
candidates; random replacements are never special tokens (``BertTokenizer.special_ids``).

The strategies differ only in their candidate spans:

- ``TokenMasking``: every WordPiece alone (original BERT);
- ``WholeWordMasking``: every word, all its pieces together (Google's 2019 WWM release); words
  come from the tokenizer's word ids, so it works with any sub-word scheme, not only ``##``;
- ``NgramMasking``: spans of 1 to ``max_ngram`` consecutive whole words within one segment,
  length n drawn with probability proportional to 1/n, shortened while it overflows the budget
  (ALBERT, Lan et al. 2020, ``create_pretraining_data.py``).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class Masked:
    """Masked-LM inputs and targets of one sequence.

    Attributes:
        input_ids: T ids after masking.
        positions: sorted indices of the predicted tokens (at most ``max_predictions_per_seq``).
        labels: the original ids at ``positions``.
    """

    input_ids: list[int]
    positions: list[int]
    labels: list[int]


def maskable(input_ids: list[int], cls_token_id: int, sep_token_id: int) -> list[bool]:
    """Which tokens may be chosen: all but ``[CLS]`` and ``[SEP]`` (instances carry no padding)."""
    return [t != cls_token_id and t != sep_token_id for t in input_ids]


def words(word_starts: list[bool], maskable: list[bool]) -> list[list[list[int]]]:
    """Maskable positions grouped into words, words grouped into runs (segments) that any
    non-maskable token (``[CLS]``, ``[SEP]``, padding) ends: runs -> words -> positions."""
    runs: list[list[list[int]]] = [[]]
    for i, (start, ok) in enumerate(zip(word_starts, maskable, strict=True)):
        if not ok:
            if runs[-1]:
                runs.append([])
        elif start or not runs[-1]:
            runs[-1].append([i])
        else:
            runs[-1][-1].append(i)
    return [run for run in runs if run]


class MaskingStrategy:
    """Choose and corrupt masked-LM positions; subclasses define the candidate spans.

    Args:
        masked_lm_prob: fraction of the sequence's tokens to predict (0.15, BERT).
        max_predictions_per_seq: cap on predicted tokens per sequence (20 for T = 128 in
            Google's scripts, 80 for T = 512).
        mask_token_prob: share of chosen tokens replaced by ``[MASK]`` (0.8).
        random_token_prob: share replaced by a random non-special token (0.1); the rest stay.

    Raises:
        ValueError: a probability outside [0, 1], or a cap below 1.
    """

    def __init__(
        self,
        masked_lm_prob: float = 0.15,
        max_predictions_per_seq: int = 20,
        mask_token_prob: float = 0.8,
        random_token_prob: float = 0.1,
    ) -> None:
        for name, p in (("masked_lm_prob", masked_lm_prob), ("mask_token_prob", mask_token_prob)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"masking.{name}={p}: expected a probability in [0, 1]")
        if not 0.0 <= random_token_prob <= 1.0 - mask_token_prob:
            raise ValueError(f"masking.random_token_prob={random_token_prob}: expected 0 <= p <= 1 - mask_token_prob")
        if max_predictions_per_seq < 1:
            raise ValueError(f"masking.max_predictions_per_seq={max_predictions_per_seq}: expected at least 1")
        self.init_args: dict[str, Any] = dict(
            masked_lm_prob=masked_lm_prob,
            max_predictions_per_seq=max_predictions_per_seq,
            mask_token_prob=mask_token_prob,
            random_token_prob=random_token_prob,
        )
        self.masked_lm_prob = masked_lm_prob
        self.max_predictions_per_seq = max_predictions_per_seq
        self.mask_token_prob = mask_token_prob
        self.random_token_prob = random_token_prob

    def spec(self) -> dict[str, Any]:
        """``{"class_path", "init_args"}`` that rebuilds this strategy."""
        cls = type(self)
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": dict(self.init_args)}

    def spans(self, runs: list[list[list[int]]], rng: random.Random) -> Iterator[list[list[int]]]:
        """Candidate spans in random order; each candidate lists alternatives, longest first (the
        first that fits the remaining budget is taken)."""
        candidates = [[word] for run in runs for word in run]
        rng.shuffle(candidates)
        return iter(candidates)

    def mask(
        self,
        input_ids: list[int],
        word_starts: list[bool],
        maskable: list[bool],
        rng: random.Random,
        mask_token_id: int,
        vocab_size: int,
        special_ids: Collection[int],
    ) -> Masked:
        """Mask one sequence; ``rng`` makes it reproducible."""
        budget = min(self.max_predictions_per_seq, max(1, round(len(input_ids) * self.masked_lm_prob)))
        covered: set[int] = set()
        for alternatives in self.spans(words(word_starts, maskable), rng):
            if len(covered) >= budget:
                break
            span = next((s for s in alternatives if len(covered) + len(s) <= budget), None)
            if span is not None and covered.isdisjoint(span):
                covered.update(span)
        output = list(input_ids)
        for i in covered:
            r = rng.random()
            if r < self.mask_token_prob:
                output[i] = mask_token_id
            elif r < self.mask_token_prob + self.random_token_prob:
                output[i] = _random_token(rng, vocab_size, special_ids)
        positions = sorted(covered)
        return Masked(output, positions, [input_ids[i] for i in positions])


def _random_token(rng: random.Random, vocab_size: int, special_ids: Collection[int]) -> int:
    while True:
        token = rng.randrange(vocab_size)
        if token not in special_ids:
            return token


class TokenMasking(MaskingStrategy):
    """Each WordPiece is a candidate on its own (original BERT)."""

    def spans(self, runs: list[list[list[int]]], rng: random.Random) -> Iterator[list[list[int]]]:
        candidates = [[[i]] for run in runs for word in run for i in word]
        rng.shuffle(candidates)
        return iter(candidates)


class WholeWordMasking(MaskingStrategy):
    """Each whole word is a candidate: all of its pieces are predicted together or none."""


class NgramMasking(MaskingStrategy):
    """Spans of 1 to ``max_ngram`` whole words (ALBERT's n-gram masking).

    Args:
        max_ngram: the longest span in words (3 in ALBERT).
        kwargs: ``MaskingStrategy``'s arguments.
    """

    def __init__(self, max_ngram: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if max_ngram < 1:
            raise ValueError(f"masking.max_ngram={max_ngram}: expected at least 1")
        self.max_ngram = max_ngram
        self.init_args["max_ngram"] = max_ngram

    def spans(self, runs: list[list[list[int]]], rng: random.Random) -> Iterator[list[list[int]]]:
        starts = [(r, w) for r, run in enumerate(runs) for w in range(len(run))]
        rng.shuffle(starts)
        for r, w in starts:
            longest = min(self.max_ngram, len(runs[r]) - w)
            weights = [1.0 / n for n in range(1, longest + 1)]
            n = rng.choices(range(1, longest + 1), weights)[0]
            yield [[i for word in runs[r][w : w + k] for i in word] for k in range(n, 0, -1)]
