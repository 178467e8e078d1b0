"""Emission biases for transformers' plain ``token-classification`` pipeline, fitted on a CRF
tagger's validation set without changing the CRF's own decoding.

A CRF tagger's export is read two ways: by the CRF (``bertkit predict``, ``crf_pipeline.py``), and
by transformers' plain pipeline, which tags each word by the arg-max of its first sub-word's
logits and joins words into entities (``aggregation_strategy="first"``). Adding a bias ``b`` (one
per tag) to every emission adds ``b[y]`` to a path's score at each word; subtracting ``b`` from the
transition scores into each tag and from the start scores takes it away again, so every path
scores what it scored, and the CRF's Viterbi path, likelihood and marginals are unchanged. The arg-max
of the emissions does change: ``fit_bias`` picks the ``b`` under which it finds the validation
set's entities best.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

GRID = torch.arange(-12, 13) / 4
"""The values each tag's bias is tried at: -3 to 3 in steps of 0.25 (logit units)."""
ROUNDS = 3
"""Passes of coordinate ascent over the tags (the third changed nothing on CoNLL-2003's eng.testa)."""


def pipeline_entities(tags: torch.Tensor, first: torch.Tensor, names: Sequence[str]) -> torch.Tensor:
    """The entities transformers' pipeline groups word tags into, as one key per entity.

    The rule of ``TokenClassificationPipeline.group_entities``: a word continues the entity before
    it when it has the same type and its tag does not begin with ``B-``; any other tagged word
    starts one (an ``I-`` after ``O`` or after another type included). ``O`` words are in none.

    Args:
        tags: (N,) tag ids of the words of many sentences, one after another.
        first: (N,) bool, True at each sentence's first word.
        names: the tag of each id (IOB2: ``O``, ``B-PER``, ``I-PER`` …).

    Returns:
        (E,) int64 keys, one per entity, equal for two entities exactly when they have the same
        type, first word and last word.
    """
    kinds = sorted({n[2:] for n in names if n[:2] in ("B-", "I-")})
    kind_of = torch.tensor([kinds.index(n[2:]) if n[:2] in ("B-", "I-") else -1 for n in names])
    begins_tag = torch.tensor([n.startswith("B-") for n in names])
    kind = kind_of[tags]
    previous = torch.cat([kind.new_full((1,), -1), kind[:-1]])
    tagged = kind >= 0
    begins = tagged & (begins_tag[tags] | first | (kind != previous))
    entity = torch.cumsum(begins.long(), 0) - 1  # each tagged word's entity
    count = int(begins.sum())
    positions = torch.arange(len(tags))
    last = torch.full((count,), -1, dtype=torch.long).scatter_reduce(0, entity[tagged], positions[tagged], "amax")
    start = positions[begins]
    return (start * (len(tags) + 1) + last) * len(kinds) + kind[begins]


def entity_f1(predicted: torch.Tensor, gold: torch.Tensor) -> float:
    """Micro entity F1 in percent of two sets of ``pipeline_entities`` keys (100 when both are empty)."""
    if len(predicted) + len(gold) == 0:
        return 100.0
    return 200.0 * int(torch.isin(predicted, gold).sum()) / (len(predicted) + len(gold))


def fit_bias(
    emissions: torch.Tensor, gold: torch.Tensor, first: torch.Tensor, names: Sequence[str]
) -> tuple[torch.Tensor, float, float]:
    """The per-tag bias under which the arg-max of ``emissions`` finds ``gold``'s entities best
    (``pipeline_entities``, ``entity_f1``): coordinate ascent over ``GRID`` from zero, ``ROUNDS``
    passes, a change kept only when it raises F1.

    Args:
        emissions: (N, tags) float, the words' first sub-word logits; gold: (N,) their tag ids;
        first: (N,) bool, each sentence's first word; names: the tags.

    Returns:
        the bias (tags,) float32, and the arg-max's entity F1 (percent) before and after it.
    """
    emissions = emissions.float()
    wanted = pipeline_entities(gold, first, names)

    def score(bias: torch.Tensor) -> float:
        return entity_f1(pipeline_entities((emissions + bias).argmax(-1), first, names), wanted)

    bias = torch.zeros(emissions.shape[1])
    before = best = score(bias)
    for _ in range(ROUNDS):
        changed = False
        for tag in range(len(bias)):
            for value in GRID:
                tried = bias.clone()
                tried[tag] = value
                found = score(tried)
                if found > best:
                    best, bias, changed = found, tried, True
        if not changed:
            break
    return bias, before, best
