"""Mention replacement for NER (Dai & Adel 2020, "An Analysis of Simple Data Augmentation for Named
Entity Recognition", MR): new sentences of the training text, each entity mention swapped for
another mention of its type. They are text for a teacher to tag, a transfer set in the training
text's own domain (docs/distillation.md), not gold data: a swapped mention can read oddly in its
new context, which the teacher's tags, not the original ones, account for.

``bertkit augment FILE OUTPUT.jsonl`` writes them as JSON Lines of pre-split words
(``{"tokens": [...]}``), which ``bertkit predict`` reads.
"""

from __future__ import annotations

import json
import random

from bertkit.api.task import atomic_path

from .conll import Sentence, TagScheme, entities, read_tagged


def mention_replacement(sentences: list[Sentence], copies: int = 1, seed: int = 0) -> list[list[str]]:
    """``copies`` new word lists per tagged sentence that holds an entity, in order: every mention
    (an entity chunk of its IOB2 tags, conlleval's reading) replaced by a mention of the same type
    drawn at random from all of ``sentences`` (``random.Random(seed)``; the mentions as often as
    they occur). Sentences without an entity give none.

    Raises:
        ValueError: ``copies`` below 1, or an unlabelled sentence (names its source).
    """
    if copies < 1:
        raise ValueError(f"copies={copies}: expected at least 1")
    pool: dict[str, list[list[str]]] = {}
    for sentence in sentences:
        if sentence.tags is None:
            raise ValueError(f"{sentence.source}: a sentence without tags; mention replacement needs tagged text")
        for kind, start, end in entities(sentence.tags):
            pool.setdefault(kind, []).append(sentence.words[start:end])
    rng = random.Random(seed)
    made = []
    for sentence in sentences:
        chunks = entities(sentence.tags or [])
        for _ in range(copies if chunks else 0):
            words, at = [], 0
            for kind, start, end in chunks:
                words += sentence.words[at:start] + rng.choice(pool[kind])
                at = end
            made.append(words + sentence.words[at:])
    return made


def augment(
    file: str, output: str, tag_scheme: TagScheme = "IOB1", tag_column: int = -1, copies: int = 1, seed: int = 0
) -> None:
    """Remake a tagged NER file's sentences with each entity mention swapped (mention replacement).

    Each sentence that holds an entity is written again with every mention replaced by another
    mention of its type from the file (Dai & Adel 2020), as JSON Lines of pre-split words
    (``{"tokens": [...]}``): text for a teacher to tag with ``bertkit predict``, a transfer set in
    the training text's domain (docs/distillation.md).

    Args:
        file: a CoNLL column file, or JSON Lines of ``tokens`` and ``ner_tags`` (``.jsonl``).
        output: the JSON Lines file to write (atomically).
        tag_scheme: the file's tagging scheme (``IOB1`` for CoNLL-2003, ``IOB2``, ``BIOES``).
        tag_column: the CoNLL column of the tags (-1: the last).
        copies: new sentences per sentence that holds an entity.
        seed: seed of the random choices (the same seed, the same sentences).
    """
    made = mention_replacement(read_tagged(file, tag_scheme, tag_column), copies, seed)
    with atomic_path(output) as tmp, tmp.open("w", encoding="utf-8") as out:
        out.writelines(json.dumps({"tokens": words}, ensure_ascii=False) + "\n" for words in made)
    print(f"{len(made):,} sentences ({copies} per sentence of {file} with an entity) written to {output}")
