"""A CRF tagger's export calibration (``bertkit_plugins.token_tagging.calibration``): the emission
biases move the plain pipeline's arg-max and leave every CRF decoding as it was; the entities
are grouped as transformers' pipeline groups them."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from bertkit_plugins.token_tagging.calibration import entity_f1, fit_bias, pipeline_entities
from bertkit_plugins.token_tagging.crf import CRF
from bertkit_plugins.token_tagging.crf_pipeline import best_path, iob2_scores
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.pipelines.token_classification import TokenClassificationPipeline

IOB2 = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
BIOES = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]


@settings(max_examples=60, deadline=None)
@given(
    scheme=st.sampled_from(["IOB2", "BIOES"]),
    seed=st.integers(0, 2**16),
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=4),
    free=st.lists(st.booleans(), min_size=4, max_size=4),
    scale=st.sampled_from([0.1, 1.0, 3.0]),
)
def test_an_absorbed_emission_bias_leaves_every_crf_decoding_as_it_was(scheme, seed, lengths, free, scale):
    """Emissions plus a bias, read by a CRF that absorbed the bias: the same Viterbi path (in
    bertkit and in the export's ``crf_pipeline.py``), likelihood and marginals, in rows that start
    a sentence and rows that start inside one."""
    tags = IOB2 if scheme == "IOB2" else BIOES
    generator = torch.Generator().manual_seed(seed)
    crf = CRF(tags, scheme)
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * scale)
    emissions = torch.randn(len(lengths), max(lengths), len(tags), generator=generator) * 3
    mask = torch.arange(max(lengths)) < torch.tensor(lengths)[:, None]
    free_start = torch.tensor(free[: len(lengths)])
    gold = crf.decode(torch.randn(emissions.shape, generator=generator) * 3, mask, free_start)  # an allowed path
    before = (crf.decode(emissions, mask, free_start), crf.nll(emissions, gold, mask, free_start))
    marginals = crf.log_marginals(emissions, mask, free_start)
    old_scores = [s.clone() for s in (crf.transitions, crf.start_transitions, crf.end_transitions)]
    bias = torch.randn(len(tags), generator=generator) * 3
    crf.absorb_emission_bias(bias)
    shifted = emissions + bias
    assert torch.equal(crf.decode(shifted, mask, free_start), before[0])
    torch.testing.assert_close(crf.nll(shifted, gold, mask, free_start), before[1], atol=1e-3, rtol=1e-4)
    # as probabilities: a forbidden tag's log-marginal is about FORBIDDEN, moved by the bias
    torch.testing.assert_close(
        crf.log_marginals(shifted, mask, free_start).exp(), marginals.exp(), atol=1e-5, rtol=1e-4
    )
    if scheme == "IOB2":  # the export's own pipeline, on each sentence
        for row, k in enumerate(lengths):
            theirs = best_path(shifted[row, :k], *iob2_scores(tags, *(s.detach() for s in crf.parameters())))
            assert theirs == best_path(emissions[row, :k], *iob2_scores(tags, *old_scores))


def transformers_groups(sentences: list[list[str]]) -> list[tuple[int, int, int, str]]:
    """The entities ``TokenClassificationPipeline.group_entities`` forms from each sentence's
    word tags (then dropping ``O``, as its ``postprocess`` does): (sentence, first, end, type)."""
    pipeline = object.__new__(TokenClassificationPipeline)  # its grouping alone: no model
    pipeline.tokenizer = SimpleNamespace(convert_tokens_to_string=" ".join)
    found = []
    for s, tags in enumerate(sentences):
        words = [{"entity": t, "score": 1.0, "word": str(i), "start": i, "end": i + 1} for i, t in enumerate(tags)]
        for group in pipeline.group_entities(words) if words else []:
            if group["entity_group"] != "O":
                found.append((s, group["start"], group["end"], group["entity_group"]))
    return found


tag_lists = st.lists(st.lists(st.sampled_from(IOB2), min_size=1, max_size=8), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(predicted=tag_lists, gold=tag_lists)
def test_entities_are_grouped_as_transformers_pipeline_groups_them(predicted, gold):
    """``pipeline_entities`` finds transformers' entities (an ``I-`` after ``O`` or another type
    starts one; ``B-`` always does) and ``entity_f1`` scores them as sets of (type, span)."""
    gold = (gold * len(predicted))[: len(predicted)]
    gold = [(g * len(p))[: len(p)] for p, g in zip(predicted, gold, strict=True)]  # the same words

    def keys(sentences: list[list[str]]) -> torch.Tensor:
        tags = torch.tensor([IOB2.index(t) for s in sentences for t in s])
        first = torch.tensor([i == 0 for s in sentences for i in range(len(s))])
        return pipeline_entities(tags, first, IOB2)

    ours, theirs = keys(predicted), set(transformers_groups(predicted))
    wanted = set(transformers_groups(gold))
    assert len(ours) == len(theirs) and len(keys(gold)) == len(wanted)
    expected = 200 * len(theirs & wanted) / (len(theirs) + len(wanted)) if theirs or wanted else 100.0
    assert abs(entity_f1(ours, keys(gold)) - expected) < 1e-9


def test_fit_bias_keeps_only_what_raises_f1_and_finds_a_bias_that_helps():
    """Words tagged ``B-PER`` by a small margin over ``O`` where the gold says ``O``: a bias toward
    ``O`` recovers them; the F1 never falls below the arg-max's own."""
    generator = torch.Generator().manual_seed(0)
    gold = torch.tensor([1, 2, 0, 0, 3, 0, 0, 0] * 20)
    emissions = torch.nn.functional.one_hot(gold, len(IOB2)).float() * 4 + torch.rand(len(gold), 5, generator=generator)
    wrong = torch.arange(len(gold)) % 8 == 6  # an O word: B-PER wins by a small margin
    emissions[wrong, 1] = emissions[wrong, 0] + 0.3
    first = torch.arange(len(gold)) % 8 == 0
    bias, before, after = fit_bias(emissions, gold, first, IOB2)
    assert before < 100.0 and after == 100.0 and bias[0] - bias[1] > 0.3
    exact = torch.nn.functional.one_hot(gold, len(IOB2)).float()
    bias, before, after = fit_bias(exact, gold, first, IOB2)
    assert before == after == 100.0 and not bias.any()  # nothing to gain: nothing changed
