"""WordPiece tokenization on the Hugging Face ``tokenizers`` library (Rust).

The pipeline is BERT's (google-research/bert tokenization.py): BertNormalizer (clean text,
Chinese-character spacing, optional lower-casing and accent stripping), BertPreTokenizer
(whitespace and punctuation), WordPiece with greedy longest-match and ``##`` continuations,
then the template ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Encoding, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@dataclass
class Encoded:
    """One encoded sequence; every list has one entry per token.

    Attributes:
        input_ids: WordPiece ids, specials included.
        token_type_ids: segment ids (0 = A, 1 = B).
        offsets: (start, end) character offsets into the text the token came from; (0, 0) for specials.
        word_ids: index of the pre-tokenized word each token belongs to; None for specials.
        sequence_ids: 0 for A, 1 for B, None for specials.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]
    sequence_ids: list[int | None]

    @classmethod
    def from_encoding(cls, enc: Encoding) -> Encoded:
        return cls(enc.ids, enc.type_ids, enc.offsets, enc.word_ids, enc.sequence_ids)


class BertTokenizer:
    """BERT WordPiece tokenizer.

    Build it with ``from_pretrained(directory)`` (``tokenizer.json``, else ``vocab.txt``) or
    ``from_vocab(vocab.txt, lowercase)``; ``backend`` is the underlying ``tokenizers.Tokenizer``.
    Truncation and padding are never applied behind the caller's back: ``encode`` truncates only
    when given ``max_length``, and batching pads (``bertkit.data.pad_batch``).
    """

    def __init__(self, backend: Tokenizer) -> None:
        backend.no_truncation()
        backend.no_padding()
        self.backend = backend
        missing = [t for t in SPECIAL_TOKENS if backend.token_to_id(t) is None]
        if missing:
            raise ValueError(f"vocabulary lacks the special tokens {', '.join(missing)}")
        self.pad_token_id = backend.token_to_id("[PAD]")
        self.unk_token_id = backend.token_to_id("[UNK]")
        self.cls_token_id = backend.token_to_id("[CLS]")
        self.sep_token_id = backend.token_to_id("[SEP]")
        self.mask_token_id = backend.token_to_id("[MASK]")
        self._add_template()

    def _add_template(self) -> None:
        cls, sep = ("[CLS]", self.cls_token_id), ("[SEP]", self.sep_token_id)
        self.backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A:0 [SEP]:0", pair="[CLS] $A:0 [SEP]:0 $B:1 [SEP]:1", special_tokens=[cls, sep]
        )

    @classmethod
    def from_vocab(
        cls, vocab_file: str | Path, lowercase: bool = True, strip_accents: bool | None = None
    ) -> BertTokenizer:
        """Tokenizer from a ``vocab.txt`` (one token a line; the line number is the id).

        Args:
            vocab_file: path to ``vocab.txt``.
            lowercase: lower-case input (``do_lower_case``; True for uncased models).
            strip_accents: strip accents; None follows ``lowercase`` (as BERT does).

        Raises:
            FileNotFoundError: no such file.
            ValueError: the vocabulary lacks a special token.
        """
        path = Path(vocab_file)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: vocabulary file not found")
        vocab = {}
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            vocab.setdefault(line.rstrip("\n"), i)
        backend = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        backend.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
        )
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece(prefix="##")
        return cls(backend)

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> BertTokenizer:
        """Tokenizer of a Hugging Face format model directory.

        Uses ``tokenizer.json`` when present; otherwise ``vocab.txt`` with ``do_lower_case`` from
        ``tokenizer_config.json`` (default True, as Hugging Face ``BertTokenizer``).

        Raises:
            FileNotFoundError: neither file is in ``directory``.
        """
        directory = Path(directory)
        if (directory / "tokenizer.json").is_file():
            return cls(Tokenizer.from_file(str(directory / "tokenizer.json")))
        if not (directory / "vocab.txt").is_file():
            raise FileNotFoundError(f"{directory}: no tokenizer.json or vocab.txt")
        settings_file = directory / "tokenizer_config.json"
        settings = json.loads(settings_file.read_text(encoding="utf-8")) if settings_file.is_file() else {}
        return cls.from_vocab(
            directory / "vocab.txt", settings.get("do_lower_case", True), settings.get("strip_accents")
        )

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def encode(
        self,
        text: str | list[str],
        pair: str | list[str] | None = None,
        max_length: int | None = None,
        is_pretokenized: bool = False,
    ) -> Encoded:
        """Encode one text (or text pair) with the ``[CLS] A [SEP] (B [SEP])`` template.

        Args:
            text: segment A: a string, or a list of words with ``is_pretokenized``.
            pair: optional segment B, same kind as ``text``.
            max_length: if given, truncate to this many tokens, specials included, taking tokens
                from the longer segment first (BERT's ``_truncate_seq_pair``).
            is_pretokenized: ``text``/``pair`` are lists of words; ``word_ids`` index them.
        """
        if max_length is not None:
            self.backend.enable_truncation(max_length, strategy="longest_first")
        try:
            return Encoded.from_encoding(self.backend.encode(text, pair, is_pretokenized=is_pretokenized))
        finally:
            self.backend.no_truncation()

    def tokenize_words(self, sentences: list[list[str]]) -> list[Encoded]:
        """WordPiece tokens of pre-split sentences, without specials (batched): the input of window
        builders; ``word_ids`` index each sentence's words."""
        encodings = self.backend.encode_batch(sentences, is_pretokenized=True, add_special_tokens=False)
        return [Encoded.from_encoding(enc) for enc in encodings]
