"""Small tokenizers of each kind, trained with the ``tokenizers`` trainers on a text (no hub):
the ``tokenizer.json`` layouts that transformers' conversions write for RoBERTa (byte-level BPE,
``RobertaProcessing``), ModernBERT (byte-level BPE, BERT's template, untrimmed offsets) and
XLM-RoBERTa (Unigram with Metaspace, ``<s> A </s></s> B </s>``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
from tokenizers.models import BPE, Unigram

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
MODERNBERT_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
KINDS = ("roberta", "modernbert", "xlm-roberta")


def _byte_level(texts: Iterable[str], vocab_size: int, specials: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def _unigram(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(Unigram())
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=ROBERTA_SPECIALS, unk_token="<unk>")
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def train(kind: str, texts: list[str], vocab_size: int = 2000) -> Tokenizer:
    """A tokenizer of ``kind`` (one of ``KINDS``) trained on ``texts``, with its family's template."""
    if kind == "roberta":
        tokenizer = _byte_level(texts, vocab_size, ROBERTA_SPECIALS)
        tokenizer.post_processor = processors.RobertaProcessing(
            ("</s>", tokenizer.token_to_id("</s>")), ("<s>", tokenizer.token_to_id("<s>")), trim_offsets=True
        )
        return tokenizer
    if kind == "modernbert":
        tokenizer = _byte_level(texts, vocab_size, MODERNBERT_SPECIALS)
        cls, sep = ("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1", special_tokens=[cls, sep]
        )
        return tokenizer
    if kind == "xlm-roberta":
        tokenizer = _unigram(texts, vocab_size)
        s, e = ("<s>", tokenizer.token_to_id("<s>")), ("</s>", tokenizer.token_to_id("</s>"))
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[s, e]
        )
        return tokenizer
    raise ValueError(f"kind={kind!r}: expected one of {KINDS}")


def save(tokenizer: Tokenizer, directory: Path) -> Path:
    """Write ``tokenizer.json`` into ``directory`` (created); returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def hf_tokenizer(tokenizer: Tokenizer, words: bool = False):
    """transformers' ``PreTrainedTokenizerFast`` on the same ``tokenizer.json``; ``words``: as
    transformers' RoBERTa tokenizer with ``add_prefix_space=True`` (what it requires for
    ``is_split_into_words``): the pre-tokenizer prefixes each word with a space."""
    import json

    from transformers import PreTrainedTokenizerFast

    spec = json.loads(tokenizer.to_str())
    if words:
        steps = spec["pre_tokenizer"]
        if steps["type"] == "ByteLevel":
            steps["add_prefix_space"] = True
    names = ROBERTA_SPECIALS if tokenizer.token_to_id("<s>") is not None else None
    roles = dict(zip(("cls_token", "pad_token", "sep_token", "unk_token", "mask_token"), names, strict=True)) if names else {
        "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]",
    }  # fmt: skip
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), **roles)
