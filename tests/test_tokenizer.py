"""Tokenizer parity with transformers.BertTokenizerFast on real sentences."""

from __future__ import annotations

import pytest

from bertkit import BertTokenizer
from tests.conftest import CONLL, DATA, need

transformers = pytest.importorskip("transformers")


def _real_sentences() -> list[str]:
    from bertkit_plugins.token_tagging.conll import read_conll

    sentences = [" ".join(s.words) for s in read_conll(need(CONLL / "eng.train"))[:1500]]
    sst = need(DATA / "classification" / "sst2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:501]
    return sentences + [line.split("\t")[0] for line in sst]


def hf_from_vocab(vocab, lowercase: bool, tmp_path):
    """transformers' fast BERT tokenizer built from a bare vocab.txt (works in transformers 4 and 5)."""
    import json
    import shutil

    shutil.copy(vocab, tmp_path / "vocab.txt")
    config = {"do_lower_case": lowercase, "tokenizer_class": "BertTokenizer"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return transformers.BertTokenizerFast.from_pretrained(str(tmp_path))


def test_uncased_vocab_and_tokenizer_json_match_hf(minilm_dir, tmp_path):
    texts = _real_sentences()
    assert len(texts) >= 1000
    hf = hf_from_vocab(minilm_dir / "vocab.txt", True, tmp_path)
    from_vocab = BertTokenizer.from_vocab(minilm_dir / "vocab.txt", lowercase=True)
    from_json = BertTokenizer.from_pretrained(minilm_dir)
    expected = hf(texts)["input_ids"]
    assert [from_vocab.encode(t).input_ids for t in texts] == expected
    assert [from_json.encode(t).input_ids for t in texts] == expected


def test_cased_vocab_matches_hf(tmp_path):
    vocab = need(DATA / "vocab" / "bert-base-cased" / "vocab.txt")
    texts = _real_sentences()
    hf = hf_from_vocab(vocab, False, tmp_path)
    ours = BertTokenizer.from_vocab(vocab, lowercase=False)
    assert [ours.encode(t).input_ids for t in texts] == hf(texts)["input_ids"]


def test_pairs_truncation_offsets_word_ids(minilm_dir):
    hf = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
    ours = BertTokenizer.from_pretrained(minilm_dir)
    a, b = (
        "Who founded Corrin Analytics in Lisbon?",
        "It was founded by Marta Kowalczyk in 1998 , a year after the merger .",
    )
    full = hf(a, b, return_offsets_mapping=True)
    enc = ours.encode(a, b, max_length=16)
    assert len(enc.input_ids) == 16 and enc.input_ids[0] == ours.cls_token_id
    # google-research/bert _truncate_seq_pair: 9 + 18 tokens into 13 -> 7 + 6 (ties trim B).
    n_a = full.sequence_ids().count(0)
    assert (n_a, full.sequence_ids().count(1)) == (9, 18) and enc.sequence_ids.count(0) == 7
    kept = list(range(1 + 7)) + list(range(1 + n_a, 1 + n_a + 1 + 6)) + [len(full["input_ids"]) - 1]
    assert enc.input_ids == [full["input_ids"][i] for i in kept]
    assert enc.token_type_ids == [0] * 9 + [1] * 7
    assert enc.offsets == [tuple(full["offset_mapping"][i]) for i in kept]
    words = ["Peter", "Blackburn", "visited", "Zürich"]
    enc = ours.encode(words, is_pretokenized=True)
    assert enc.word_ids == hf(words, is_split_into_words=True).word_ids()
    assert ours.encode(a).input_ids == hf(a)["input_ids"]  # truncation is off again afterwards


def test_missing_vocab_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        BertTokenizer.from_vocab(tmp_path / "vocab.txt")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(ValueError, match=r"cls \(\[CLS\] or <s>\), sep \(\[SEP\] or </s>\), mask"):
        BertTokenizer.from_vocab(tmp_path / "vocab.txt")
