"""Pre-training data: masking strategies, Google's instance algorithm, shards, corpus reading,
vocabulary training."""

from __future__ import annotations

import pickle
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from bertkit_plugins.pretraining.corpus import read_documents, split_sentences
from bertkit_plugins.pretraining.instances import Instance, create_instances, truncate_seq_pair
from bertkit_plugins.pretraining.masking import NgramMasking, TokenMasking, WholeWordMasking, words
from bertkit_plugins.pretraining.prepare import prepare, tokenize_documents
from bertkit_plugins.pretraining.shards import Shards, write_shard
from bertkit_plugins.pretraining.vocab import train_vocab
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.model.tokenizer import BertTokenizer, Inputs

CLS, SEP, MASK, V = 2, 3, 4, 1000
SPECIALS = frozenset(range(10))  # ids 0-9 play [PAD] [UNK] [CLS] [SEP] [MASK] [unused0-4]


def sequence(rng: random.Random, length: int, word_prob: float = 0.6) -> tuple[list[int], list[bool], list[bool]]:
    """[CLS] A [SEP] B [SEP] of random non-special ids, random word starts; (ids, starts, maskable)."""
    cut = rng.randint(2, length - 2)
    ids = [CLS] + [rng.randrange(10, V) for _ in range(cut - 2)] + [SEP]
    ids += [rng.randrange(10, V) for _ in range(length - cut - 1)] + [SEP]
    starts = [t in (CLS, SEP) or rng.random() < word_prob or ids[i - 1] in (CLS, SEP) for i, t in enumerate(ids)]
    return ids, starts, [t not in (CLS, SEP) for t in ids]


def mask(strategy, ids, starts, maskable, rng):
    return strategy.mask(ids, starts, maskable, rng, MASK, V, SPECIALS)


@pytest.mark.parametrize("strategy", [TokenMasking(), WholeWordMasking(), NgramMasking()], ids=type)
def test_masking_proportions_over_many_draws(strategy) -> None:
    rng = random.Random(0)
    chosen = total = 0
    outcome = Counter()
    for _ in range(3000):
        ids, starts, maskable = sequence(rng, rng.randint(20, 128))
        m = mask(strategy, ids, starts, maskable, rng)
        chosen += len(m.positions)
        total += len(ids)
        for p in m.positions:
            new = m.input_ids[p]
            outcome["mask" if new == MASK else "same" if new == ids[p] else "random"] += 1
    assert abs(chosen / total - 0.15) < 0.01
    n = sum(outcome.values())
    assert abs(outcome["mask"] / n - 0.8) < 0.01
    assert abs(outcome["random"] / n - 0.1) < 0.01
    assert abs(outcome["same"] / n - 0.1) < 0.01


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), length=st.integers(5, 128), prob=st.floats(0.05, 0.9))
def test_no_special_token_masked_or_drawn_and_cap_holds(seed: int, length: int, prob: float) -> None:
    rng = random.Random(seed)
    ids, starts, maskable = sequence(rng, length)
    for strategy in (
        TokenMasking(prob, 7),
        WholeWordMasking(prob, 7),
        NgramMasking(3, masked_lm_prob=prob, max_predictions_per_seq=7),
    ):
        m = mask(strategy, ids, starts, maskable, rng)
        budget = min(7, max(1, round(length * prob)))
        assert len(m.positions) <= budget  # whole words that would overflow the budget are skipped
        if isinstance(strategy, TokenMasking):
            assert len(m.positions) == min(budget, sum(maskable))
        assert m.positions == sorted(set(m.positions))
        assert all(maskable[p] for p in m.positions)  # never [CLS] / [SEP]
        assert m.labels == [ids[p] for p in m.positions]
        assert all(m.input_ids[i] == ids[i] for i in range(length) if i not in m.positions)
        assert not any(m.input_ids[p] in SPECIALS - {MASK} for p in m.positions)  # nothing special drawn


def test_random_replacements_cover_the_vocabulary_but_no_specials() -> None:
    rng = random.Random(1)
    drawn = set()
    strategy = TokenMasking(masked_lm_prob=0.5, max_predictions_per_seq=64, mask_token_prob=0.0, random_token_prob=1.0)
    for _ in range(400):
        ids, starts, maskable = sequence(rng, 128)
        m = mask(strategy, ids, starts, maskable, rng)
        drawn.update(m.input_ids[p] for p in m.positions)
    assert drawn.isdisjoint(SPECIALS) and len(drawn) > 0.95 * (V - len(SPECIALS))


def _words_of(starts: list[bool], maskable: list[bool]) -> list[set[int]]:
    return [set(w) for run in words(starts, maskable) for w in run]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), length=st.integers(6, 128))
def test_whole_word_and_ngram_masking_never_split_a_word(seed: int, length: int) -> None:
    rng = random.Random(seed)
    ids, starts, maskable = sequence(rng, length, word_prob=0.3)  # long words
    for strategy in (WholeWordMasking(0.3, 40), NgramMasking(3, masked_lm_prob=0.3, max_predictions_per_seq=40)):
        covered = set(mask(strategy, ids, starts, maskable, rng).positions)
        for word in _words_of(starts, maskable):
            assert word <= covered or word.isdisjoint(covered)


def test_ngram_spans_are_one_to_three_consecutive_words_of_one_segment() -> None:
    rng = random.Random(2)
    lengths = Counter()
    for _ in range(300):
        ids, starts, maskable = sequence(rng, 100)
        runs = words(starts, maskable)
        where = {w[0]: (r, k) for r, run in enumerate(runs) for k, w in enumerate(run)}
        for alternatives in NgramMasking(max_ngram=3).spans(runs, rng):
            r, k = where[alternatives[0][0]]
            sizes = []
            for span in alternatives:  # longest first: n, n - 1, ..., 1 words from the same start
                size = [
                    j for j in (1, 2, 3) if k + j <= len(runs[r]) and [i for w in runs[r][k : k + j] for i in w] == span
                ]
                assert len(size) == 1 and span[0] == alternatives[0][0]
                sizes += size
            assert sizes == list(range(len(alternatives), 0, -1))
            lengths[len(alternatives)] += 1
    share = {n: lengths[n] / sum(lengths.values()) for n in (1, 2, 3)}
    assert set(lengths) <= {1, 2, 3}
    # p(n) ∝ 1/n: 6/11, 3/11, 2/11 (slightly more 1s and 2s near segment ends)
    assert abs(share[3] - 2 / 11) < 0.03 and abs(share[2] - 3 / 11) < 0.03


def test_whole_word_masking_with_a_tokenizer_without_double_hash(tmp_path: Path) -> None:
    """A BPE tokenizer marks no continuation pieces; words still come from its word ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    text = ["internationalization of unbelievable misunderstandings", "counterrevolutionaries overwhelmingly"] * 50
    trainer = trainers.BpeTrainer(vocab_size=45, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    backend.train_from_iterator(text, trainer)
    tokenizer = BertTokenizer(backend)
    assert not any(t.startswith("##") for t in tokenizer.backend.get_vocab())
    (document,) = tokenize_documents(tokenizer, [["internationalization of unbelievable misunderstandings"]])
    pieces, starts = document[0]
    ids = [tokenizer.cls_token_id, *pieces, tokenizer.sep_token_id]
    starts = [True, *starts, True]
    maskable = [False] + [True] * len(pieces) + [False]
    word_ids = tokenizer.tokenize(["internationalization of unbelievable misunderstandings"])[0].word_ids
    expected = [{i + 1 for i, w in enumerate(word_ids) if w == k} for k in range(4)]
    assert sum(len(w) > 1 for w in expected) >= 3  # several multi-piece words
    assert _words_of(starts, maskable) == expected
    rng = random.Random(0)
    for _ in range(200):
        covered = set(WholeWordMasking(0.5, 20).mask(ids, starts, maskable, rng, 4, 45, frozenset(range(5))).positions)
        assert all(w <= covered or w.isdisjoint(covered) for w in expected)


# ----- instances (Google's create_instances_from_document) -----


def numbered_documents(rng: random.Random, n: int, longest: int = 12) -> list:
    """Document d's sentence s has ids d * 10000 + s * 100 + k: the source of every token is known."""
    docs = []
    for d in range(n):
        doc = []
        for s in range(rng.randint(1, 30)):
            ids = [d * 10000 + s * 100 + k for k in range(rng.randint(1, longest))]
            doc.append((ids, [True] * len(ids)))
        docs.append(doc)
    return docs


def bert_template(a: list[int], b: list[int]) -> Inputs:
    """``[CLS] A [SEP] B [SEP]`` with [CLS] = -1 and [SEP] = -2."""
    return Inputs(
        [-1, *a, -2, *b, -2], [0] * (len(a) + 2) + [1] * (len(b) + 1), [None, *[0] * len(a), None, *[1] * len(b), None]
    )


def roberta_template(a: list[int], b: list[int]) -> Inputs:
    """``<s> A </s></s> B </s>`` with <s> = -1 and </s> = -2, one token type."""
    ids = [-1, *a, -2, -2, *b, -2]
    return Inputs(ids, [0] * len(ids), [None, *[0] * len(a), None, None, *[1] * len(b), None])


def _sources(ids: list[int]) -> list[tuple[int, int]]:
    return [(t // 10000, t % 10000 // 100) for t in ids]


def _segments(x: Instance) -> tuple[list[int], list[int]]:
    return x.input_ids[1 : x.segment_a_length - 1], x.input_ids[x.segment_a_length : -1]


def test_nsp_negatives_come_from_another_document_positives_continue() -> None:
    rng = random.Random(0)
    docs = numbered_documents(rng, 40)
    labels = Counter()
    for d in range(len(docs)):
        for x in create_instances(docs, d, 64, 0.1, "nsp", rng, bert_template):
            assert len(x.input_ids) <= 64 and x.input_ids[0] == -1 and x.input_ids[-1] == -2
            a, b = _segments(x)
            assert a and b and x.input_ids[x.segment_a_length - 1] == -2
            doc_a, doc_b = {s[0] for s in _sources(a)}, {s[0] for s in _sources(b)}
            assert doc_a == {d}
            if x.sentence_label:
                assert len(doc_b) == 1 and doc_b != {d}
            else:
                assert doc_b == {d} and max(s for _, s in _sources(a)) < min(s for _, s in _sources(b))
            labels[x.sentence_label] += 1
    # half, plus the chunks of a single sentence, which always take a random next (Google)
    assert 0.45 < labels[1] / sum(labels.values()) < 0.6


def test_sop_swaps_consecutive_segments_of_one_document() -> None:
    rng = random.Random(1)
    docs = numbered_documents(rng, 60)
    labels = Counter()
    for d in range(len(docs)):
        for x in create_instances(docs, d, 64, 0.1, "sop", rng, bert_template):
            a, b = _segments(x)
            first, second = (b, a) if x.sentence_label else (a, b)
            assert {s[0] for s in _sources(a + b)} == {d}
            assert _sources(first)[-1] <= _sources(second)[0]  # in document order once un-swapped
            labels[x.sentence_label] += 1
    assert 0.35 < labels[1] / sum(labels.values()) < 0.65


def test_instances_follow_the_tokenizers_pair_template() -> None:
    """RoBERTa's ``<s> A </s></s> B </s>``: four specials, so A + B get one token less than BERT's
    three-special template; word starts and segment lengths follow the template."""
    docs = numbered_documents(random.Random(2), 30)
    for d in range(len(docs)):
        for x in create_instances(docs, d, 64, 0.0, "none", random.Random(d), roberta_template):
            assert len(x.input_ids) <= 64 and x.segment_a_length == len(x.input_ids)  # one token type
            first_sep = x.input_ids.index(-2)
            a, b = x.input_ids[1:first_sep], x.input_ids[first_sep + 2 : -1]
            assert x.input_ids == roberta_template(a, b).input_ids and a and b and -2 not in a + b
            assert all(x.word_starts[i] for i in (0, first_sep, first_sep + 1, first_sep + 2, len(x.input_ids) - 1))
        for x in create_instances(docs, d, 64, 0.0, "none", random.Random(d), bert_template):
            assert len(x.input_ids) <= 64 and x.input_ids[x.segment_a_length - 1] == -2
    longest = {
        name: max(len(x.input_ids) for d in range(len(docs)) for x in create_instances(docs, d, 64, 0.0, "none", random.Random(d), t))
        for name, t in (("bert", bert_template), ("roberta", roberta_template))
    }  # fmt: skip
    assert longest == {"bert": 64, "roberta": 64}  # the budget is filled, never exceeded


def test_nsp_with_a_single_document_is_an_error() -> None:
    docs = numbered_documents(random.Random(0), 1)
    with pytest.raises(ValueError, match="at least two documents"):
        create_instances(docs, 0, 64, 0.1, "nsp", random.Random(0), bert_template)


@given(st.integers(0, 60), st.integers(0, 60), st.integers(2, 50), st.integers(0, 1000))
def test_truncate_seq_pair_trims_the_longer_side(la: int, lb: int, budget: int, seed: int) -> None:
    a, b = list(range(la)), list(range(100, 100 + lb))
    truncate_seq_pair(a, b, budget, random.Random(seed))
    assert len(a) + len(b) == min(la + lb, budget)
    assert a == list(range(a[0], a[0] + len(a))) if a else True  # a contiguous piece
    if la + lb > budget:
        assert abs(len(a) - len(b)) <= 1 or min(len(a), len(b)) == min(la, lb)


# ----- shards -----


def random_instances(rng: random.Random, n: int) -> tuple[list[Instance], list]:
    instances, masks = [], []
    strategy = TokenMasking()
    for _ in range(n):
        ids, starts, maskable = sequence(rng, rng.randint(5, 60))
        instances.append(Instance(ids, starts, ids.index(SEP) + 1, rng.randint(0, 1)))
        masks.append(mask(strategy, ids, starts, maskable, rng))
    return instances, masks


def test_shards_read_back_exactly(tmp_path: Path) -> None:
    from bertkit_plugins.pretraining.shards import write_manifest

    rng = random.Random(0)
    parts = [random_instances(rng, n) for n in (7, 1, 12)]
    entries = [write_shard(tmp_path / f"shard-{i:05d}", *part) for i, part in enumerate(parts)]
    write_manifest(tmp_path, {"static_masking": True, "shards": entries})
    shards = Shards(tmp_path)
    flat = [(x, m) for instances, masks in parts for x, m in zip(instances, masks, strict=True)]
    assert len(shards) == len(flat) == 20
    assert shards.lengths.tolist() == [len(x.input_ids) for x, _ in flat]
    copy = pickle.loads(pickle.dumps(shards))  # what a DataLoader worker receives: the path, no arrays
    assert copy._arrays is None
    for i, (x, m) in enumerate(flat):
        for item in (shards[i], copy[i]):
            assert item["input_ids"].tolist() == x.input_ids
            assert item["word_starts"].tolist() == x.word_starts
            assert (item["segment_a_length"], item["sentence_label"]) == (x.segment_a_length, x.sentence_label)
            assert item["masked_positions"].tolist() == m.positions
            assert item["masked_input_ids"].tolist() == [m.input_ids[p] for p in m.positions]
    with pytest.raises(IndexError):
        shards[20]
    assert isinstance(shards[0]["input_ids"], np.ndarray)


def corpus_file(path: Path, rng: random.Random, documents: int = 12) -> Path:
    words_ = "the a whale ship sea captain harpoon crew deck storm wind sail white long".split()
    docs = []
    for _ in range(documents):
        docs.append(
            "\n".join(
                " ".join(rng.choice(words_) for _ in range(rng.randint(3, 14))) + " ." for _ in range(rng.randint(2, 9))
            )
        )
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def test_same_seed_identical_instances_whatever_the_workers(tmp_path: Path, minilm_dir: Path) -> None:
    corpus = corpus_file(tmp_path / "corpus.txt", random.Random(0), documents=25)
    common = dict(
        vocab=str(minilm_dir),
        max_seq_length=32,
        dupe_factor=2,
        static_masking=WholeWordMasking(),
        documents_per_shard=8,
    )
    prepare(str(corpus), str(tmp_path / "one"), workers=1, **common)
    prepare(str(corpus), str(tmp_path / "two"), workers=2, **common)
    prepare(str(corpus), str(tmp_path / "other"), workers=1, seed=7, **common)
    one, two, other = (Shards(tmp_path / name / "train") for name in ("one", "two", "other"))
    # 25 documents, 8 per shard: the lone 25th merges into the third shard (NSP needs two documents)
    assert [s["documents"] for s in one.manifest["shards"]] == [8, 8, 9]
    assert len(one) == len(two) > 25
    for i in range(len(one)):
        assert all(np.array_equal(one[i][k], two[i][k]) for k in one[i])
    assert any(not np.array_equal(one[i]["input_ids"], other[i]["input_ids"]) for i in range(min(len(one), len(other))))


def test_holdout_keeps_whole_documents_out_of_train(tmp_path: Path, minilm_dir: Path) -> None:
    rng = random.Random(3)
    lines = []
    for d in range(40):  # every document has its own marker word
        lines.append("\n".join(f"marker{d} " + " ".join(rng.choice("abcdefgh") for _ in range(6)) for _ in range(4)))
    (tmp_path / "c.txt").write_text("\n\n".join(lines) + "\n")
    splits = prepare(
        str(tmp_path / "c.txt"), str(tmp_path / "out"), vocab=str(minilm_dir), max_seq_length=48, holdout=0.2, workers=1
    )
    tokenizer = BertTokenizer.from_pretrained(minilm_dir)

    def markers(split: str) -> set[str]:
        shards = Shards(splits[split])
        text = " ".join(tokenizer.backend.decode(shards[i]["input_ids"].tolist()) for i in range(len(shards)))
        return {w for w in text.split() if w.startswith("marker")}

    held, train = Shards(splits["validation"]).manifest["documents"], Shards(splits["train"]).manifest["documents"]
    assert held + train == 40 and 3 <= held <= 14
    # negatives are drawn within a split, so no held-out document's text reaches train
    assert markers("validation").isdisjoint(markers("train"))
    with pytest.raises(FileExistsError, match="already prepared"):
        prepare(str(tmp_path / "c.txt"), str(tmp_path / "out"), vocab=str(minilm_dir), holdout=0.2, workers=1)


# ----- corpus and vocabulary -----


def test_corpus_layouts(tmp_path: Path) -> None:
    (tmp_path / "g.txt").write_text("One.\nTwo.\n\n\n\nThree.\n\nFour.\nFive.\n")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "b.txt").write_text(
        "Call me Ishmael. Some years ago, never mind\nhow long precisely. I went.\n\nNew paragraph!\n"
    )
    (folder / "a.txt").write_text("\n\n")
    assert list(read_documents([tmp_path / "g.txt"])) == [["One.", "Two."], ["Three."], ["Four.", "Five."]]
    assert list(read_documents([folder])) == [
        ["Call me Ishmael.", "Some years ago, never mind how long precisely.", "I went.", "New paragraph!"]
    ]
    assert split_sentences('He said "Stop." Then 3 men left? "Yes!" ok') == [
        'He said "Stop."',
        "Then 3 men left?",
        '"Yes!" ok',
    ]
    (tmp_path / "bad.txt").write_bytes(b"fine\nalso fine\n\xff\xfe broken\n")
    with pytest.raises(ValueError, match=r"bad.txt:3: not UTF-8"):
        list(read_documents([tmp_path / "bad.txt"]))
    with pytest.raises(FileNotFoundError, match="corpus not found"):
        list(read_documents([tmp_path / "missing.txt"]))


@pytest.mark.parametrize("lowercase", [False, True])
def test_train_vocab_writes_a_loadable_wordpiece_vocabulary(tmp_path: Path, lowercase: bool) -> None:
    corpus = corpus_file(tmp_path / "c.txt", random.Random(0), documents=40)
    corpus.write_text(corpus.read_text() + "\nThe Whale and the SHIP. Café.\n")
    tokenizer = train_vocab(str(corpus), str(tmp_path / "vocab"), vocab_size=200, lowercase=lowercase, min_frequency=1)
    vocab = (tmp_path / "vocab" / "vocab.txt").read_text().splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(vocab) <= 200
    assert any(t.startswith("##") for t in vocab)
    again = BertTokenizer.from_pretrained(tmp_path / "vocab")
    from_txt = BertTokenizer.from_vocab(tmp_path / "vocab" / "vocab.txt", lowercase=lowercase)
    text = "The Whale and the SHIP. Café harpoon"
    assert again.encode(text).input_ids == tokenizer.encode(text).input_ids == from_txt.encode(text).input_ids
    assert ("Whale" in vocab or "W" in vocab) != lowercase
