"""``bertkit vocab``: train a WordPiece vocabulary on a corpus with the ``tokenizers`` trainer.

The trainer is ``tokenizers.trainers.WordPieceTrainer`` on BERT's normaliser and
pre-tokeniser (the same pipeline ``BertTokenizer`` uses), with the five special tokens first
(``[PAD]`` = 0, as Google's vocabularies). Output: ``vocab.txt`` and ``tokenizer.json`` (+
``tokenizer_config.json`` with ``do_lower_case``), loadable as ``model.vocab_file``.
"""

from __future__ import annotations

import json
from pathlib import Path

from bertkit_plugins.pretraining.corpus import read_documents
from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, trainers
from tokenizers.models import WordPiece

from bertkit.api.task import SPECIAL_TOKENS, BertTokenizer, atomic_path


def train_vocab(
    inputs: str | list[str],
    output: str,
    vocab_size: int = 30522,
    lowercase: bool = False,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
) -> BertTokenizer:
    """Train a WordPiece vocabulary and write it to ``output``.

    Args:
        inputs: a corpus file or folder, or a list of them (see ``bertkit_plugins.pretraining.corpus``).
        output: the directory to write (created if missing).
        vocab_size: entries, special tokens included (30,522 uncased / 28,996 cased in BERT).
        lowercase: an uncased vocabulary (lower-case and strip accents) or a cased one.
        min_frequency: a merge must occur this often.
        limit_alphabet: the most single characters kept (BERT's scripts use 1,000).

    Raises:
        FileNotFoundError: a corpus path does not exist.
        ValueError: a corpus file is not UTF-8.
    """
    backend = Tokenizer(WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
        special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix="##",
    )
    inputs = [inputs] if isinstance(inputs, str) else inputs
    backend.train_from_iterator((s for d in read_documents(inputs) for s in d), trainer)
    tokenizer = BertTokenizer(backend)
    directory = Path(output)
    tokenizer.save(directory)
    with atomic_path(directory / "tokenizer_config.json") as tmp:
        tmp.write_text(json.dumps({"do_lower_case": lowercase}) + "\n", encoding="utf-8")
    return tokenizer
