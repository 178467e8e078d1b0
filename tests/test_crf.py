"""The CRF of ``TokenClassification(crf=True)``: its forward algorithm and Viterbi agree with
enumerating every tag sequence, Viterbi never returns a sequence the scheme forbids (whatever the
scores), the head trains and decodes windows of long sentences, and an export decodes the same
way from ``transformers``' logits with ``CRF.from_export``."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
import transformers
from bertkit_plugins.token_tagging import TokenClassification, TokenClassificationHead
from bertkit_plugins.token_tagging.conll import Sentence
from bertkit_plugins.token_tagging.crf import (
    CRF,
    FORBIDDEN,
    allowed_moves,
    log_marginals,
    log_partition,
    path_score,
    viterbi,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertModule
from bertkit.data.collate import pad_batch

IOB2 = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
BIOES = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]


def valid(tags: list[str], scheme: str, free_start: bool = False) -> bool:
    """Whether ``tags`` is a well-formed sequence, written from the schemes' definitions (not from
    ``allowed_moves``); ``free_start``: it may go on with an entity opened before it."""
    for i, tag in enumerate(tags):
        previous = tags[i - 1] if i else None
        opened = previous is not None and previous[0] in "BI"  # an entity goes on after previous
        if tag[0] in "IE" and (
            previous is None and not free_start or previous is not None and (not opened or previous[2:] != tag[2:])
        ):
            return False
        if scheme == "BIOES" and opened and (tag[0] not in "IE" or previous[2:] != tag[2:]):
            return False
    return scheme == "IOB2" or not tags or tags[-1][0] in "OES"


@pytest.mark.parametrize("tags", [IOB2, BIOES[:5]], ids=["IOB2", "BIOES"])
def test_forward_algorithm_and_viterbi_agree_with_enumeration(tags):
    torch.manual_seed(0)
    scheme = "IOB2" if tags is IOB2 else "BIOES"
    crf = CRF(tags, scheme)
    with torch.no_grad():
        for p in crf.parameters():
            p.normal_(0, 1)
    n, length = len(tags), 4
    emissions = torch.randn(4, length, n) * 2
    lengths = torch.tensor([4, 3, 1, 0])
    mask = torch.arange(length) < lengths[:, None]
    free = torch.tensor([False, True, False, False])
    with torch.no_grad():
        transitions, start, end = crf.scores(free)
    log_z, best = (
        log_partition(emissions, mask, transitions, start, end),
        viterbi(emissions, mask, transitions, start, end),
    )
    for row in range(4):
        k = int(lengths[row])
        if k == 0:  # an empty sequence: log Z 0, no tags
            assert float(log_z[row]) == 0.0 and (best[row] == -1).all()
            continue
        paths = torch.tensor(list(itertools.product(range(n), repeat=k))).reshape(-1, k)
        padded = torch.zeros(len(paths), length, dtype=torch.long)
        padded[:, :k] = paths
        scores = path_score(
            emissions[row : row + 1].expand(len(paths), -1, -1), padded, mask[row : row + 1].expand(len(paths), -1),
            transitions, start[row : row + 1].expand(len(paths), -1), end,
        )  # fmt: skip
        assert float(log_z[row]) == pytest.approx(float(torch.logsumexp(scores, 0)), abs=1e-4)
        assert best[row, :k].tolist() == paths[scores.argmax()].tolist() and (best[row, k:] == -1).all()
        named = [tags[i] for i in best[row, :k]]
        assert valid(named, scheme, free_start=bool(free[row])) and scores.max() > FORBIDDEN / 2
    assert crf.nll(emissions, best.clamp(min=0), mask, free)[:3].min() > 0  # a probability below 1


@settings(max_examples=60, deadline=None)
@given(
    scheme=st.sampled_from(["IOB2", "BIOES"]),
    seed=st.integers(0, 2**16),
    length=st.integers(1, 12),
    scale=st.sampled_from([1.0, 10.0, 1000.0]),
)
def test_viterbi_never_returns_a_sequence_the_scheme_forbids(scheme, seed, length, scale):
    tags = IOB2 if scheme == "IOB2" else BIOES
    generator = torch.Generator().manual_seed(seed)
    emissions = torch.randn(3, length, len(tags), generator=generator) * scale
    emissions[0, :, [i for i, t in enumerate(tags) if t[0] in "IE"]] += scale  # scores that favour bad moves
    crf = CRF(tags, scheme)
    with torch.no_grad():
        crf.transitions.copy_(torch.randn(len(tags), len(tags), generator=generator) * scale)
    mask = torch.ones(3, length, dtype=torch.bool)
    mask[2, max(1, length // 2) :] = False
    for row in crf.decode(emissions, mask).tolist():
        named = [tags[i] for i in row if i >= 0]
        assert named and valid(named, scheme), named


@settings(max_examples=40, deadline=None)
@given(
    scheme=st.sampled_from(["IOB2", "BIOES"]),
    seed=st.integers(0, 2**16),
    lengths=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    free=st.booleans(),
)
def test_log_marginals_agree_with_enumeration(scheme, seed, lengths, free):
    """Each position's marginal is the summed probability of the paths through its tag, by
    enumerating every path; rows of any length (0 included) in one padded batch."""
    tags = IOB2 if scheme == "IOB2" else BIOES[:5]
    generator = torch.Generator().manual_seed(seed)
    crf = CRF(tags, scheme)
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    n, width = len(tags), max(lengths)
    emissions = torch.randn(len(lengths), max(width, 1), n, generator=generator) * 3
    mask = torch.arange(max(width, 1)) < torch.tensor(lengths)[:, None]
    free_start = torch.full((len(lengths),), free)
    marginals = crf.log_marginals(emissions, mask, free_start)
    transitions, start, end = crf.scores(free_start)
    for row, k in enumerate(lengths):
        assert (marginals[row, k:] == 0).all()
        if k == 0:
            continue
        paths = torch.tensor(list(itertools.product(range(n), repeat=k))).reshape(-1, k)
        padded = torch.zeros(len(paths), emissions.shape[1], dtype=torch.long)
        padded[:, :k] = paths
        scores = path_score(
            emissions[row : row + 1].expand(len(paths), -1, -1), padded, mask[row : row + 1].expand(len(paths), -1),
            transitions, start[row : row + 1].expand(len(paths), -1), end,
        )  # fmt: skip
        probability = scores.softmax(0)
        for t in range(k):
            expected = torch.zeros(n).index_add_(0, paths[:, t], probability)
            torch.testing.assert_close(marginals[row, t].exp(), expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(torch.logsumexp(marginals, 2)[mask], torch.zeros(int(mask.sum())), atol=1e-5, rtol=0)
    assert torch.equal(
        log_marginals(emissions, mask, transitions, start, end), marginals
    )  # the module's call is the function's


def test_allowed_moves_follow_the_schemes():
    moves, start, end = allowed_moves(IOB2)
    ids = {t: i for i, t in enumerate(IOB2)}
    assert moves[ids["B-PER"], ids["I-PER"]] and moves[ids["I-PER"], ids["I-PER"]]
    assert not moves[ids["O"], ids["I-PER"]] and not moves[ids["B-LOC"], ids["I-PER"]]
    assert start.tolist() == [True, True, False, True, False] and end.all()
    moves, start, end = allowed_moves(BIOES, "BIOES")
    ids = {t: i for i, t in enumerate(BIOES)}
    assert (
        not moves[ids["B-PER"], ids["O"]]
        and moves[ids["B-PER"], ids["E-PER"]]
        and not moves[ids["S-PER"], ids["E-PER"]]
    )
    assert [BIOES[i] for i in end.nonzero().flatten()] == ["O", "E-PER", "S-PER", "E-LOC", "S-LOC"]
    with pytest.raises(ValueError, match="tag 'X-PER': expected O or B/I-TYPE"):
        allowed_moves(["O", "X-PER"])


def test_a_crf_head_trains_decodes_windows_and_exports(tmp_path):
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="model.task.crf: the CRF scores the first sub-word"):
        TokenClassification(entity_types=["PER", "LOC"], crf=True, label_all_subwords=True)
    head = TokenClassification(entity_types=["PER", "LOC"], crf=True, crf_learning_rate=0.01)
    model = BertModule(head, pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2")
    words = [
        "Peter",
        "Blackburn",
        "flew",
        "from",
        "Oslo",
        "to",
        "Bergen",
        "with",
        "Anna",
        "Berg",
        "and",
        "Tom",
        "Lee",
    ] * 3
    tags = ["B-PER", "I-PER", "O", "O", "B-LOC", "O", "B-LOC", "O", "B-PER", "I-PER", "O", "B-PER", "I-PER"] * 3
    sentences = [Sentence(words, tags, f"x:{i}", list(range(len(words))), " ".join(words), []) for i in range(2)]
    features = head.featurize(sentences, model.tokenizer, max_length=16)  # windows: free starts
    assert len(features) > 4 and any(min(w for w in f["word_index"] if w >= 0) > 0 for f in features)
    batch = pad_batch(features, pad_values=head.pad_values)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)  # 0.01 diverges for some initial weights
    losses = []
    for _ in range(40):
        loss = model(batch)["loss"]
        optimizer.zero_grad(), loss.backward(), optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 4 and model.head.crf.transitions.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        outputs = model(batch)
    joined = {}
    for p in head.predict(model.head.feature_predictions(model.head.decode(outputs, batch), batch)):
        joined.setdefault(p["example_index"], {})[p["word_index"]] = p["tag"]
    for example in joined.values():
        assert valid([example[w] for w in sorted(example)], "IOB2") and len(example) == len(words)
    assert sum(a == b for a, b in zip([joined[0][w] for w in range(len(words))], tags, strict=True)) >= len(words) - 2

    model._trainer = SimpleNamespace(estimated_stepping_batches=10)  # all configure_optimizers reads
    groups = model.configure_optimizers()["optimizer"].param_groups
    lr = {id(p): (g["lr"], g["weight_decay"]) for g in groups for p in g["params"]}
    assert lr[id(model.head.crf.transitions)] == (0.0, 0.0) and groups[-1]["initial_lr"] == 0.01  # warm-up from 0
    assert len(lr) == sum(1 for _ in model.parameters() if _.requires_grad)  # each parameter in one group

    model.save_pretrained(tmp_path)
    hf = transformers.BertForTokenClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        logits = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert torch.allclose(logits, outputs["logits"], atol=1e-4)
    emissions, positions, free_start = TokenClassificationHead._words(logits, batch)
    theirs = CRF.from_export(tmp_path).decode(emissions, positions >= 0, free_start)
    ours = model.head.crf.decode(
        TokenClassificationHead._words(outputs["logits"], batch)[0], positions >= 0, free_start
    )
    assert torch.equal(theirs, ours)


@settings(max_examples=10, deadline=None)
@given(
    weight=st.floats(0.1, 4.0), seed=st.integers(0, 1000), target=st.sampled_from(["labels", "crf", "viterbi"]),
    trains=st.booleans(),
)  # fmt: skip
def test_the_emission_loss_adds_the_logits_cross_entropy_at_the_scored_words(weight, seed, target, trains):
    """Against the gold tags, or against the CRF's own posterior or Viterbi path held constant:
    the loss's gradient at a scored word's logits is then softmax minus the target, over the words.
    With ``crf_trains_encoder`` false the CRF's loss reaches its own scores and not the logits."""
    torch.manual_seed(seed)
    task = TokenClassification(
        entity_types=["PER", "LOC"], crf=True, emission_loss_weight=weight, emission_target=target,
        crf_trains_encoder=trains,
    )  # fmt: skip
    model = BertModule(task, pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2").eval()
    with torch.no_grad():  # transitions that move the posterior away from the emissions' softmax
        model.head.crf.transitions.normal_(0.0, 1.0)
    words = ["Anna", "Berg", "flew", "to", "Oslo", "today"]
    tags = ["B-PER", "I-PER", "O", "O", "B-LOC", "O"]
    sentences = [Sentence(words, tags, "x:1", list(range(len(words))), " ".join(words), [])]
    batch = pad_batch(task.featurize(sentences, model.tokenizer, max_length=16), pad_values=task.pad_values)
    out = model(batch)
    first = batch["word_index"] >= 0  # the words' first sub-words, where the labels are
    logits = out["logits"][first]
    if target == "labels":
        expected = torch.nn.functional.cross_entropy(logits, batch["labels"][first])
    else:
        emissions, positions, free_start = TokenClassificationHead._words(out["logits"], batch)
        words = positions >= 0
        if target == "crf":
            wanted = model.head.crf.log_marginals(emissions, words, free_start)[words].exp().detach()
        else:
            path = model.head.crf.decode(emissions, words, free_start)[words]
            wanted = torch.nn.functional.one_hot(path, len(task.tags)).float()
        expected = -(wanted * logits.log_softmax(-1)).sum(-1).mean()
        (gradient,) = torch.autograd.grad(out["emission_loss"], out["logits"], retain_graph=True)
        torch.testing.assert_close(gradient[first], (logits.softmax(-1) - wanted).detach() / len(logits))
    torch.testing.assert_close(out["emission_loss"], expected)
    torch.testing.assert_close(out["loss"], out["crf_loss"] + weight * expected)
    transitions = model.head.crf.transitions
    reached = torch.autograd.grad(out["crf_loss"], [out["logits"], transitions], allow_unused=True)
    assert reached[1] is not None and reached[1].abs().sum() > 0  # the CRF's scores learn either way
    assert (reached[0] is not None and bool(reached[0][first].abs().sum() > 0)) == trains


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"crf": False, "emission_loss_weight": 1.0}, "set crf: true"),
        ({"crf": True, "emission_loss_weight": -1.0}, ">= 0"),
        (
            {"crf": True, "emission_loss_weight": 1.0, "emission_target": "posterior"},
            "expected one of labels, crf, viterbi",
        ),
        ({"crf": True, "crf_trains_encoder": False}, "crf_trains_encoder false: .* emission_loss_weight > 0"),
        ({"crf": False, "crf_trains_encoder": False}, "crf_trains_encoder false: .*set crf: true"),
    ],
)
def test_an_emission_loss_without_a_crf_or_below_zero_is_refused(options, message):
    with pytest.raises(ValueError, match=message):
        TokenClassification(entity_types=["PER"], **options)


@settings(max_examples=60, deadline=None)
@given(
    types=st.lists(st.sampled_from(["PER", "LOC", "ORG", "MISC"]), min_size=1, max_size=3, unique=True),
    words=st.integers(1, 12), seed=st.integers(0, 10_000),
)  # fmt: skip
def test_the_exported_pipeline_decodes_as_the_crf(types, words, seed):
    """``crf_pipeline.py`` (written into exports, importing no bertkit) finds the path bertkit's
    constrained CRF finds, for any tag set, scores and sentence length."""
    from bertkit_plugins.token_tagging.crf_pipeline import best_path, iob2_scores

    tags = ["O", *(f"{p}-{t}" for t in types for p in "BI")]
    generator = torch.Generator().manual_seed(seed)
    crf = CRF(tags)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 3)
    emissions = torch.randn(1, words, len(tags), generator=generator) * 3
    ours = crf.decode(emissions, torch.ones(1, words, dtype=torch.bool))[0].tolist()
    theirs = best_path(emissions[0], *iob2_scores(tags, crf.transitions, crf.start_transitions, crf.end_transitions))
    assert theirs == ours


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.lists(st.integers(-1, 6), min_size=1, max_size=12), min_size=1, max_size=5))
def test_the_loader_collates_the_positions_the_head_would_find(rows):
    """A feature's ``word_positions`` (where ``word_index`` marks a word), padded by the loader,
    are ``compacted_positions`` of the batch's ``word_index``, rows without words included: the
    head takes them without reading the longest row on the host."""
    from bertkit_plugins.token_tagging.head import collated_positions, compacted_positions

    features = [
        {"input_ids": [5] * len(r), "word_index": r, "word_positions": [p for p, w in enumerate(r) if w >= 0]}
        for r in rows
    ]
    batch = pad_batch(features, 0, {"word_positions": -1})
    expected = compacted_positions(batch["word_index"])
    got = collated_positions(batch, "word_positions", "word_index")
    assert got.dtype == expected.dtype and torch.equal(got, expected)
    del batch["word_positions"]  # features without them: found from word_index
    assert torch.equal(collated_positions(batch, "word_positions", "word_index"), expected)
