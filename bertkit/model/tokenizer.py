"""Tokenization on the Hugging Face ``tokenizers`` library (Rust), for any ``tokenizer.json``.

A ``vocab.txt`` builds BERT's pipeline (google-research/bert tokenization.py): BertNormalizer
(clean text, Chinese-character spacing, optional lower-casing and accent stripping),
BertPreTokenizer (whitespace and punctuation), WordPiece with greedy longest-match and ``##``
continuations, then the template ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` with segment ids
0 / 1. A ``tokenizer.json`` keeps its own pipeline — WordPiece (BERT, ELECTRA), byte-level BPE
(RoBERTa, ModernBERT) or Unigram / SentencePiece (XLM-RoBERTa) — and its own template
(``<s> A </s></s> B </s>`` for RoBERTa), which ``build_inputs`` reproduces for heads that cut
windows from token ids. Two things differ from a plain ``tokenizers.Tokenizer``, as transformers'
fast tokenizers do them: pre-tokenized words are encoded as they appear inside a text (after a
space: ``add_prefix_space=True``, which transformers requires for RoBERTa's
``is_split_into_words``), and character offsets into raw text never cover the spaces a
byte-level or SentencePiece token carries (``trim_offsets``), so entity and answer spans start
at their first character.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Encoding, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from bertkit.utils.io import atomic_path, read_json, text_lines

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
BRACKETED = re.compile(r"\[[A-Za-z0-9_]+\]")
# The tokens that play each role, BERT's spelling first, RoBERTa's / XLM-R's / BART's second;
# a directory's special_tokens_map.json or tokenizer_config.json names them when they differ.
ROLES: dict[str, tuple[str, ...]] = {
    "pad": ("[PAD]", "<pad>"),
    "unk": ("[UNK]", "<unk>"),
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "mask": ("[MASK]", "<mask>"),
}
# Pre-tokenizers whose words never hold a space, so offsets need no trimming.
_SPACE_FREE = (pre_tokenizers.BertPreTokenizer, pre_tokenizers.Whitespace, pre_tokenizers.WhitespaceSplit)

CJK = (
    "[\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f"
    "\U0002b820-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f]"
)
"""The CJK ideographs BERT's basic tokenizer makes words of their own (google-research/bert
tokenization.py, ``_is_chinese_char``): CJK Unified Ideographs and their extensions A-E, and the
compatibility ideographs (Hiragana, Katakana and Hangul are not among them: they are written
with spaces or split by the WordPiece vocabulary)."""


WEB_TOKEN = r"(?i:https?://|www\.)\S*[\w/]|[\w.+-]+@\w[\w-]*(?:\.\w[\w-]*)+|(?<!\w)[#@]\w+"
"""A URL (``http://``, ``https://`` or ``www.`` up to the next space, without trailing
punctuation), an e-mail address, a hashtag or an @-mention: one word each where words are
tagged (``split_words``, and a tagger's tokenizer, ``BertTokenizer.save(words=True)``). BERT's
rules would make a word of every piece between punctuation characters, and a tagger would tag
the pieces (``reuters`` in ``desk@reuters.com`` as an organisation); corpora that tag such text
(WNUT, OntoNotes' web text) give each one word."""
_PUNCTUATION = "\\p{P}!-/:-@\\[-`{-~"  # BERT's _is_punctuation: Unicode's P* and ASCII's other printables


def web_words() -> pre_tokenizers.PreTokenizer:
    """A new ``WEB_WORDS`` (each tokenizer gets its own: a shared pre-tokenizer is one lock that
    every tokenizer's threads take)."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(
                Regex(f"(?:{WEB_TOKEN})(?=[{_PUNCTUATION}]|$)|[^{_PUNCTUATION}]+|[{_PUNCTUATION}]"),
                "isolated",
                invert=True,
            ),
        ]
    )


WEB_WORDS = web_words()
"""BERT's pre-tokenizer (``BertPreTokenizer``: white space, and each punctuation character a
word) with ``WEB_TOKEN``'s words kept whole where they end where one of BERT's words ends (at
punctuation or white space: ``@0€`` stays BERT's ``@``, ``0€``)."""


def split_words(text: str) -> list[tuple[str, tuple[int, int]]]:
    """The words of plain text by BERT's basic-tokenizer rules (Devlin et al. 2019;
    google-research/bert ``BasicTokenizer``): white space separates words, and each punctuation
    character and each CJK ideograph (``CJK``) is a word of its own, except that a URL, an e-mail
    address, a hashtag or an @-mention (``WEB_TOKEN``) is one word.

    Returns:
        ``(word, (start, end))`` per word, ``[start, end)`` character offsets into ``text``.
    """
    return _WORDS.pre_tokenize_str(text)


UNSPACED_SCRIPTS = {
    "Thai": "\u0e00-\u0e7f",
    "Lao": "\u0e80-\u0eff",
    "Tibetan": "\u0f00-\u0fff",
    "Myanmar": "\u1000-\u109f",
    "Khmer": "\u1780-\u17ff",
    "Japanese kana": "\u3040-\u30ff",
}
"""Scripts written without spaces between words that BERT's rules (``split_words``) do not
split either (unlike CJK ideographs): a run of them is read as one word."""
_UNSPACED = {name: re.compile(f"[{span}]") for name, span in UNSPACED_SCRIPTS.items()}
_ANY_UNSPACED = re.compile(f"[{''.join(UNSPACED_SCRIPTS.values())}]")


def unspaced_script(word: str) -> str | None:
    """The name of the first ``UNSPACED_SCRIPTS`` script a word of two or more characters is
    written in (a run ``split_words`` left whole, which may be several words), else None."""
    if len(word) < 2 or not _ANY_UNSPACED.search(word):  # one search for the common case (none of them)
        return None
    return next((name for name, pattern in _UNSPACED.items() if pattern.search(word)), None)


_WORDS = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(CJK), "isolated"), web_words()])


@dataclass
class Encoded:
    """One encoded sequence; every list has one entry per token.

    Attributes:
        input_ids: token ids, specials included.
        token_type_ids: segment ids (0 = A, 1 = B in BERT; all 0 in RoBERTa).
        offsets: (start, end) character offsets into the text the token came from, spaces
            excluded; (0, 0) for specials.
        word_ids: index of the pre-tokenized word each token belongs to; None for specials.
        sequence_ids: 0 for A, 1 for B, None for specials.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]
    sequence_ids: list[int | None]

    @classmethod
    def from_encoding(cls, enc: Encoding, texts: Sequence[str] | None = None) -> Encoded:
        """From a ``tokenizers`` encoding; with the raw ``texts`` (A, and B for a pair) the
        offsets are trimmed of the spaces at either end of a token."""
        offsets = enc.offsets if texts is None else _trim(enc.offsets, enc.sequence_ids, texts)
        return cls(enc.ids, enc.type_ids, offsets, enc.word_ids, enc.sequence_ids)


def _trim(offsets: list[tuple[int, int]], sequence_ids: list[int | None], texts: Sequence[str]) -> list:
    trimmed = []
    for (start, end), s in zip(offsets, sequence_ids, strict=True):
        if s is not None:
            text = texts[s]
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
        trimmed.append((start, end))
    return trimmed


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


Template = tuple[tuple[int | str, int], ...]
"""A template as (piece, segment id) pairs; a piece is ``"$A"``, ``"$B"`` or a special token's id."""


def _read_template(backend: Tokenizer, pair: bool) -> Template:
    """The template the backend's post-processor applies, read off a probe encoding."""
    probe = backend.encode(["a"], ["b"] if pair else None, is_pretokenized=True)
    template: list[tuple[int | str, int]] = []
    for token, segment, sequence in zip(probe.ids, probe.type_ids, probe.sequence_ids, strict=True):
        piece = token if sequence is None else ("$A", "$B")[sequence]
        if sequence is None or not template or template[-1][0] != piece:
            template.append((piece, segment))
    return tuple(template)


def _words_as_in_text(backend: Tokenizer) -> Tokenizer:
    """A copy of ``backend`` that encodes each pre-tokenized word as it appears after a space:
    byte-level pre-tokenizers get ``add_prefix_space`` and Metaspace ``prepend_scheme: always``
    (transformers' ``add_prefix_space=True``); others are returned as they are."""
    spec = json.loads(backend.to_str())
    changed = False
    steps = spec.get("pre_tokenizer") or {}
    for step in steps.get("pretokenizers", [steps]):
        if step.get("type") == "ByteLevel" and not step.get("add_prefix_space"):
            step["add_prefix_space"], changed = True, True
        elif step.get("type") == "Metaspace" and step.get("prepend_scheme") != "always":
            step["prepend_scheme"], changed = "always", True
    return Tokenizer.from_str(json.dumps(spec)) if changed else backend


def _web_words(backend: Tokenizer) -> Tokenizer:
    """A copy of ``backend`` that keeps ``WEB_TOKEN``'s words whole (``WEB_WORDS``) where its
    pre-tokenizer is BERT's (``BertPreTokenizer``); other backends are returned as they are."""
    if not isinstance(backend.pre_tokenizer, pre_tokenizers.BertPreTokenizer):
        return backend
    copy = Tokenizer.from_str(backend.to_str())
    copy.pre_tokenizer = web_words()
    return copy


class BertTokenizer:
    """The tokenizer of every encoder family: WordPiece, byte-level BPE or Unigram.

    Build it with ``from_pretrained(directory)`` (``tokenizer.json``, else ``vocab.txt``) or
    ``from_vocab(vocab.txt, lowercase)``; ``backend`` is the underlying ``tokenizers.Tokenizer``.
    Truncation and padding are never applied behind the caller's back: ``encode`` truncates only
    when given ``max_length``, and batching pads (``bertkit.data.datamodule.pad_batch``).

    Args:
        backend: a ``tokenizers.Tokenizer``. Without a post-processor it gets BERT's template
            on the ``cls`` and ``sep`` tokens; with one (any ``tokenizer.json`` of a model) its
            own template is kept.
        special_tokens: the token of each role (``pad``, ``unk``, ``cls``, ``sep``, ``mask``)
            where it is neither BERT's (``[PAD]`` …) nor RoBERTa's (``<pad>`` …) spelling.

    Raises:
        ValueError: the vocabulary has no token for a role (the message names the role and the
            spellings looked for).
    """

    def __init__(self, backend: Tokenizer, special_tokens: Mapping[str, str] | None = None) -> None:
        backend.no_truncation()
        backend.no_padding()
        self.backend = backend
        named = dict(special_tokens or {})
        if backend.post_processor is not None:  # its template's first and last specials: [CLS] … [SEP], <s> … </s>
            specials = [piece for piece, _ in _read_template(backend, pair=False) if not isinstance(piece, str)]
            if specials:
                named = {"cls": backend.id_to_token(specials[0]), "sep": backend.id_to_token(specials[-1]), **named}
        self.special_tokens = self._roles(backend, named)
        ids = {role: backend.token_to_id(token) for role, token in self.special_tokens.items()}
        self.pad_token_id, self.unk_token_id, self.mask_token_id = ids["pad"], ids["unk"], ids["mask"]
        self.cls_token_id, self.sep_token_id = ids["cls"], ids["sep"]
        backend.add_special_tokens(list(self.special_tokens.values()))  # "[MASK]" in a text stays one token
        if backend.post_processor is None:
            cls, sep = ((self.special_tokens[r], ids[r]) for r in ("cls", "sep"))
            backend.post_processor = processors.TemplateProcessing(
                single=f"{cls[0]}:0 $A:0 {sep[0]}:0",
                pair=f"{cls[0]}:0 $A:0 {sep[0]}:0 $B:1 {sep[0]}:1",
                special_tokens=[cls, sep],
            )  # BERT's input template (Devlin et al. 2019, §3)
        self.templates = {pair: _read_template(backend, pair) for pair in (False, True)}
        self._web = _web_words(backend)  # what a word is where words are tagged
        self._words = _words_as_in_text(self._web)
        self._trims = not isinstance(backend.pre_tokenizer, _SPACE_FREE)

    @staticmethod
    def _roles(backend: Tokenizer, named: Mapping[str, str]) -> dict[str, str]:
        """The token of each role: as ``named``, else the first spelling of ``ROLES`` that is an
        added special token (a SentencePiece vocabulary may hold ``[CLS]`` as a text piece), else
        the first in the vocabulary."""
        vocab = backend.get_vocab(with_added_tokens=True)
        added = {t.content for t in backend.get_added_tokens_decoder().values() if t.special}
        roles, missing = {}, []
        for role, spellings in ROLES.items():
            candidates = [named[role]] if role in named else spellings
            found = [t for t in candidates if t in added] + [t for t in candidates if t in vocab]
            if found:
                roles[role] = found[0]
            else:
                missing.append(f"{role} ({' or '.join(candidates)})")
        if missing:
            raise ValueError(f"vocabulary lacks the special tokens {', '.join(missing)}")
        return roles

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids that are never real text pieces: the special tokens of every role, the
        tokenizer's other added special tokens, and bracketed vocabulary entries such as BERT's
        ``[unused0]``."""
        vocab = self.backend.get_vocab(with_added_tokens=True)
        added = {i for i, t in self.backend.get_added_tokens_decoder().items() if t.special}
        roles = {vocab[t] for t in self.special_tokens.values()}
        return frozenset(added | roles | {i for t, i in vocab.items() if BRACKETED.fullmatch(t)})

    def save(self, directory: str | Path, model_max_length: int | None = None, words: bool = False) -> None:
        """Write ``tokenizer.json`` (and, for a WordPiece model, ``vocab.txt`` with ids in order)
        atomically into ``directory``; with ``model_max_length``, ``tokenizer_config.json`` too:
        the most tokens the model reads (its positions) and the special tokens, which
        ``transformers`` reads to truncate (without it, its tokenizer takes any length and a long
        text fails inside the model). With ``words`` (a tagger's export), the pre-tokenizer that
        pre-split words are encoded with: text splits into the words bertkit tags (``split_words``:
        a URL, e-mail address, hashtag or @-mention one word, its pieces ``##`` continuations that
        transformers' pipelines group into it). A WordPiece ``tokenizer.json`` whose pre-tokenizer
        is not BERT's (that one, or one read back from such an export) names
        ``PreTrainedTokenizerFast`` in ``tokenizer_config.json``, which reads ``tokenizer.json`` as
        it is (transformers 5's ``BertTokenizer`` rebuilds BERT's own pre-tokenizer)."""
        directory = Path(directory)
        backend = self._web if words else self.backend
        with atomic_path(directory / "tokenizer.json") as tmp:
            backend.save(str(tmp))
        own = isinstance(backend.model, WordPiece) and not isinstance(
            backend.pre_tokenizer, pre_tokenizers.BertPreTokenizer
        )
        as_written = {"tokenizer_class": "PreTrainedTokenizerFast"} if own else {}
        if model_max_length is not None or as_written:
            config = {
                **as_written,
                **({"model_max_length": model_max_length} if model_max_length is not None else {}),
                **{f"{r}_token": t for r, t in self.special_tokens.items()},
            }
            with atomic_path(directory / "tokenizer_config.json") as tmp:
                tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if not isinstance(self.backend.model, WordPiece):
            return
        vocab = sorted(self.backend.get_vocab().items(), key=lambda item: item[1])
        with atomic_path(directory / "vocab.txt") as tmp:
            tmp.write_text("".join(f"{token}\n" for token, _ in vocab), encoding="utf-8")

    def num_special_tokens(self, pair: bool = False) -> int:
        """Special tokens the template adds to one sequence (2 in BERT and RoBERTa) or a pair
        (3 in BERT, 4 in RoBERTa)."""
        return sum(not isinstance(piece, str) for piece, _ in self.templates[pair])

    def build_inputs(self, first: list[int], second: list[int] | None = None) -> Inputs:
        """The model input of one or two sequences of token ids by the template that ``encode``
        applies (``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` in BERT): for heads that cut
        windows from tokenized text. Hugging Face's ``build_inputs_with_special_tokens`` and
        ``create_token_type_ids_from_sequences`` in one.
        """
        sequences = {"$A": (0, first), "$B": (1, second or [])}
        inputs = Inputs([], [], [])
        for piece, segment in self.templates[second is not None]:
            if isinstance(piece, str):
                sequence, ids = sequences[piece]
                inputs.input_ids += ids
                inputs.sequence_ids += [sequence] * len(ids)
            else:
                inputs.input_ids.append(piece)
                inputs.sequence_ids.append(None)
            inputs.token_type_ids += [segment] * (len(inputs.input_ids) - len(inputs.token_type_ids))
        return inputs

    @classmethod
    def from_vocab(
        cls, vocab_file: str | Path, lowercase: bool = True, strip_accents: bool | None = None
    ) -> BertTokenizer:
        """BERT's WordPiece tokenizer from a ``vocab.txt`` (one token a line; the line number is the id).

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

        Uses ``tokenizer.json`` when present, with the special tokens that
        ``special_tokens_map.json`` or ``tokenizer_config.json`` name (``cls_token`` …);
        otherwise ``vocab.txt`` with ``do_lower_case`` from ``tokenizer_config.json`` (default
        True, as Hugging Face ``BertTokenizer``).

        Raises:
            FileNotFoundError: neither file is in ``directory``.
            ValueError: a settings file is not valid JSON; the vocabulary lacks a special token.
        """
        directory = Path(directory)
        settings = {}
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            if (directory / name).is_file():
                settings |= read_json(directory / name, "")
        if (directory / "tokenizer.json").is_file():
            named = {}
            for role in ROLES:
                token = settings.get(f"{role}_token")
                token = token.get("content") if isinstance(token, dict) else token
                if isinstance(token, str):
                    named[role] = token
            return cls(Tokenizer.from_file(str(directory / "tokenizer.json")), named)
        if not (directory / "vocab.txt").is_file():
            raise FileNotFoundError(f"{directory}: no tokenizer.json or vocab.txt")
        return cls.from_vocab(
            directory / "vocab.txt", settings.get("do_lower_case", True), settings.get("strip_accents")
        )

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def vocab_sha256(self) -> str:
        """sha256 of the vocabulary (token -> id, in id order): data prepared or streamed with one
        tokenizer records it, so a model with another vocabulary is refused."""
        items = sorted(self.backend.get_vocab().items(), key=lambda item: item[1])
        return hashlib.sha256(json.dumps(items).encode("utf-8")).hexdigest()

    def encode(
        self,
        text: str | list[str],
        pair: str | list[str] | None = None,
        max_length: int | None = None,
        is_pretokenized: bool = False,
    ) -> Encoded:
        """Encode one text (or text pair) with the template (``[CLS] A [SEP] (B [SEP])`` in BERT).

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
        inputs = texts if pairs is None else list(zip(texts, pairs, strict=True))
        encodings = self._encode(inputs, is_pretokenized, add_special_tokens=True)
        if max_length is None:
            return encodings
        return [_truncate(e, max_length - specials) for e in encodings]

    def count_tokens(self, texts: list[str]) -> list[int]:
        """The number of tokens of each text, specials excluded (``tokenizers``' batch encoding, in
        Rust, nothing else built): the unit a work budget is counted in, for every script, found
        at a small share of featurizing's cost (``bertkit serve`` refuses a request over its
        budget with it before any windows are made). Text is read as text (``encode``) or as the
        words a tagger reads (``split_words``: a URL one word, which may be one ``[UNK]`` where
        BERT's words make several pieces); the count is the smaller of the two, so that it never
        exceeds the tokens either reading makes."""
        texts = list(texts)
        counts = [len(e.ids) for e in self.backend.encode_batch(texts, add_special_tokens=False)]
        if self._web is self.backend:
            return counts
        words = self._web.encode_batch(texts, add_special_tokens=False)
        return [min(n, len(e.ids)) for n, e in zip(counts, words, strict=True)]

    def tokenize(self, texts: list[str] | list[list[str]], is_pretokenized: bool = False) -> list[Encoded]:
        """Tokens of many texts, without specials (batched): the input of window builders.

        ``offsets`` are character offsets into each text (into each word with ``is_pretokenized``,
        where ``word_ids`` index the words).
        """
        return self._encode(texts, is_pretokenized, add_special_tokens=False)

    def _encode(self, inputs: list, is_pretokenized: bool, add_special_tokens: bool) -> list[Encoded]:
        backend = self._words if is_pretokenized else self.backend
        encodings = backend.encode_batch(inputs, is_pretokenized=is_pretokenized, add_special_tokens=add_special_tokens)
        if is_pretokenized or not self._trims:
            return [Encoded.from_encoding(e) for e in encodings]
        texts = [(x,) if isinstance(x, str) else x for x in inputs]
        return [Encoded.from_encoding(e, t) for e, t in zip(encodings, texts, strict=True)]


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
