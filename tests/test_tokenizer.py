"""Tokenizer parity with transformers.BertTokenizerFast on real sentences."""

from __future__ import annotations

import shutil

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


def test_a_taggers_tokenizer_json_reads_text_as_the_words_bertkit_tags(minilm_dir, tmp_path):
    """A tagger's export (``save(words=True)``): transformers' tokenizer splits text into the
    words of ``split_words`` (a URL, e-mail address, hashtag or @-mention one word, its pieces
    after the first ``##`` continuations, which the token-classification pipeline groups), with
    the tokens bertkit encodes those words with; the plain ``save`` keeps BERT's own rules."""
    from bertkit.model.tokenizer import split_words

    text = "Mail desk@reuters.com or see https://www.reuters.com/world/x-1?id=2 (#Brexit), says @Reuters in U.S. news."
    ours = BertTokenizer.from_pretrained(minilm_dir)
    ours.save(tmp_path / "tagger", 512, words=True)
    ours.save(tmp_path / "plain", 512)
    for folder in ("tagger", "plain"):  # a model's config.json: transformers picks BERT's tokenizer class by it
        shutil.copy(minilm_dir / "config.json", tmp_path / folder / "config.json")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tagger"))
    enc = hf(text)
    words = split_words(text)
    assert [tuple(enc.word_to_chars(w)) for w in range(len(words))] == [o for _, o in words]
    assert max(w for w in enc.word_ids() if w is not None) == len(words) - 1
    assert enc["input_ids"] == ours.encode([w for w, _ in words], is_pretokenized=True).input_ids
    tokens = hf.convert_ids_to_tokens(enc["input_ids"])
    url = next(i for i, (w, _) in enumerate(words) if w.startswith("https://"))
    pieces = [t for t, w in zip(tokens, enc.word_ids(), strict=True) if w == url]
    assert len(pieces) > 5 and all(t.startswith("##") for t in pieces[1:])
    again = BertTokenizer.from_pretrained(tmp_path / "tagger")  # an export read back, saved as a plain one
    again.save(tmp_path / "again", 512)
    shutil.copy(minilm_dir / "config.json", tmp_path / "again" / "config.json")
    assert transformers.AutoTokenizer.from_pretrained(str(tmp_path / "again"))(text)["input_ids"] == enc["input_ids"]
    plain = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "plain"))
    assert plain(text)["input_ids"] == ours.encode(text).input_ids
    assert max(w for w in plain(text).word_ids() if w is not None) > len(words)


def test_missing_vocab_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        BertTokenizer.from_vocab(tmp_path / "vocab.txt")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(ValueError, match=r"cls \(\[CLS\] or <s>\), sep \(\[SEP\] or </s>\), mask"):
        BertTokenizer.from_vocab(tmp_path / "vocab.txt")
