"""WordPiece tokenization on the Hugging Face ``tokenizers`` library (Rust).

The pipeline is BERT's (google-research/bert tokenization.py): BertNormalizer (clean text,
Chinese-character spacing, optional lower-casing and accent stripping), BertPreTokenizer
(whitespace and punctuation), WordPiece with greedy longest-match and ``##`` continuations,
then the template ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Encoding, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from bertkit.io import atomic_path, text_lines

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
BRACKETED = re.compile(r"\[[A-Za-z0-9_]+\]")
# BERT's input template (Devlin et al. 2019, §3): (piece, segment id); $A and $B are the sequences.
SINGLE_TEMPLATE = (("[CLS]", 0), ("$A", 0), ("[SEP]", 0))
PAIR_TEMPLATE = (*SINGLE_TEMPLATE, ("$B", 1), ("[SEP]", 1))


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


@dataclass
class Inputs:
    """A model input built from token ids by the tokenizer's template (``BertTokenizer.build_inputs``).

    Attributes:
        input_ids: the template's special tokens and the sequences' ids.
        token_type_ids: the segment id of each position.
        sequence_ids: 0 / 1 where the first / second sequence's tokens are, None at special tokens.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    sequence_ids: list[int | None]

    def start(self, sequence: int = 0) -> int:
        """Position of the first token of ``sequence`` (0 or 1).

        Raises:
            ValueError: that sequence has no tokens here.
        """
        return self.sequence_ids.index(sequence)

    def spread(self, fill: Any, first: Sequence[Any], second: Sequence[Any] = ()) -> list[Any]:
        """One value per position: ``first``'s at the first sequence's tokens, ``second``'s at the
        second's, ``fill`` at special tokens (a per-token feature such as labels, -100 at specials)."""
        values = {0: iter(first), 1: iter(second)}
        return [fill if s is None else next(values[s]) for s in self.sequence_ids]


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
        backend.add_special_tokens(list(SPECIAL_TOKENS))  # "[MASK]" in a text is one token, never split
        self._add_template()

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of bracketed vocabulary entries: ``[PAD]``, ``[UNK]``, ``[CLS]``, ``[SEP]``,
        ``[MASK]`` and reserved slots such as ``[unused0]``; never real text pieces."""
        return frozenset(i for t, i in self.backend.get_vocab().items() if BRACKETED.fullmatch(t))

    def save(self, directory: str | Path) -> None:
        """Write ``tokenizer.json`` and ``vocab.txt`` (ids in order) atomically into ``directory``."""
        directory = Path(directory)
        with atomic_path(directory / "tokenizer.json") as tmp:
            self.backend.save(str(tmp))
        vocab = sorted(self.backend.get_vocab().items(), key=lambda item: item[1])
        with atomic_path(directory / "vocab.txt") as tmp:
            tmp.write_text("".join(f"{token}\n" for token, _ in vocab), encoding="utf-8")

    def _add_template(self) -> None:
        cls, sep = ("[CLS]", self.cls_token_id), ("[SEP]", self.sep_token_id)
        single, pair = (
            " ".join(f"{piece}:{segment}" for piece, segment in t) for t in (SINGLE_TEMPLATE, PAIR_TEMPLATE)
        )
        self.backend.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=[cls, sep])

    def num_special_tokens(self, pair: bool = False) -> int:
        """Special tokens the template adds to one sequence (2: ``[CLS]``, ``[SEP]``) or a pair (3)."""
        return sum(not piece.startswith("$") for piece, _ in (PAIR_TEMPLATE if pair else SINGLE_TEMPLATE))

    def build_inputs(self, first: list[int], second: list[int] | None = None) -> Inputs:
        """The model input of one or two sequences of token ids by the template that ``encode``
        applies (``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]``, segment ids 0 / 1): for heads that
        cut windows from tokenized text. Hugging Face's ``build_inputs_with_special_tokens`` and
        ``create_token_type_ids_from_sequences`` in one.
        """
        sequences = {"$A": (0, first), "$B": (1, second or [])}
        specials = {"[CLS]": self.cls_token_id, "[SEP]": self.sep_token_id}
        inputs = Inputs([], [], [])
        for piece, segment in PAIR_TEMPLATE if second is not None else SINGLE_TEMPLATE:
            if piece in sequences:
                sequence, ids = sequences[piece]
                inputs.input_ids += ids
                inputs.sequence_ids += [sequence] * len(ids)
            else:
                inputs.input_ids.append(specials[piece])
                inputs.sequence_ids.append(None)
            inputs.token_type_ids += [segment] * (len(inputs.input_ids) - len(inputs.token_type_ids))
        return inputs

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
        for number, line in text_lines(path):  # one token a line, as BERT's load_vocab reads it
            vocab.setdefault(line, number - 1)
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
            max_length: if given, truncate to this many tokens, specials included (see
                ``truncate_pair`` for pairs).
            is_pretokenized: ``text``/``pair`` are lists of words; ``word_ids`` index them.
        """
        return self.encode_batch([text], None if pair is None else [pair], max_length, is_pretokenized)[0]

    def encode_batch(
        self,
        texts: list[str] | list[list[str]],
        pairs: list[str] | list[list[str]] | None = None,
        max_length: int | None = None,
        is_pretokenized: bool = False,
    ) -> list[Encoded]:
        """``encode`` for many texts (or text pairs, ``pairs[i]`` going with ``texts[i]``) at once.

        Raises:
            ValueError: ``pairs`` has another length than ``texts``; ``max_length`` leaves no room
                for the special tokens.
        """
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"encode_batch: {len(texts)} texts but {len(pairs)} pairs")
        specials = self.num_special_tokens(pair=pairs is not None)
        if max_length is not None and max_length <= specials:
            raise ValueError(f"max_length={max_length}: must leave room for {specials} special tokens")
        inputs = texts if pairs is None else list(zip(texts, pairs))
        encodings = [
            Encoded.from_encoding(e) for e in self.backend.encode_batch(inputs, is_pretokenized=is_pretokenized)
        ]
        if max_length is None:
            return encodings
        return [_truncate(e, max_length - specials) for e in encodings]

    def tokenize(self, texts: list[str] | list[list[str]], is_pretokenized: bool = False) -> list[Encoded]:
        """WordPiece tokens of many texts, without specials (batched): the input of window builders.

        ``offsets`` are character offsets into each text (into each word with ``is_pretokenized``,
        where ``word_ids`` index the words).
        """
        encodings = self.backend.encode_batch(texts, is_pretokenized=is_pretokenized, add_special_tokens=False)
        return [Encoded.from_encoding(enc) for enc in encodings]


def truncate_pair(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Tokens kept of segments A and B so that together they fit ``budget``.

    BERT's ``_truncate_seq_pair`` (google-research/bert run_classifier.py): remove one token at a
    time from the end of the longer segment, from B when they are equal. (The ``tokenizers``
    ``longest_first`` strategy breaks ties the other way, so it is not used.)
    """
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def _truncate(enc: Encoded, budget: int) -> Encoded:
    """Keep the leading tokens of each segment that ``truncate_pair`` allows; specials stay."""
    len_a, len_b = enc.sequence_ids.count(0), enc.sequence_ids.count(1)
    keep_a, keep_b = truncate_pair(len_a, len_b, budget) if len_b else (min(len_a, budget), 0)
    if (keep_a, keep_b) == (len_a, len_b):
        return enc
    quota = {None: len(enc.input_ids), 0: keep_a, 1: keep_b}
    seen = {None: 0, 0: 0, 1: 0}
    keep = []
    for i, sequence in enumerate(enc.sequence_ids):
        seen[sequence] += 1
        if seen[sequence] <= quota[sequence]:
            keep.append(i)
    return Encoded(*([getattr(enc, f)[i] for i in keep] for f in Encoded.__dataclass_fields__))
