"""``SpanClassification``: entities as spans, nested or flat: every span of up to
``max_span_width`` words is classified (``SpanClassificationHead``) from its first and last
words' states and a width embedding.

The span representation is Lee et al. 2017's (endpoints and a learned width feature), as in
SpERT (Eberts & Ulges 2020) and spaCy's span categorizer; flat output keeps the best-scoring
spans that do not overlap (greedy non-maximum suppression, as in Li et al. 2021's span-based
NER), nested output keeps every span classified as an entity.

Data: CoNLL column files (flat entities, read through the tags) or JSON Lines with spans::

    {"tokens": ["IL-2", "gene", "expression"], "entities": [{"start": 0, "end": 2, "type": "DNA"},
                                                            {"start": 0, "end": 1, "type": "protein"}]}

``start`` and ``end`` are word indices, ``end`` exclusive (the layout of GENIA and ACE
conversions such as Shibuya & Hovy 2020's).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from bertkit_plugins.token_tagging.conll import Sentence, TagScheme, entities, tokenized_records
from bertkit_plugins.token_tagging.span_metric import keep_best
from bertkit_plugins.token_tagging.task import TokenClassification
from pydantic import Field

from bertkit.api.task import (
    BertConfig,
    BertTokenizer,
    Feature,
    Head,
    NonBlank,
    Schema,
    by_example,
    deprecated_alias,
    parse,
)

log = logging.getLogger(__name__)

SAMPLE_NESTED = {
    split: Path(__file__).parent / "sample" / "nested" / f"{split}.jsonl" for split in ("train", "validation", "test")
}


class EntitySpan(Schema):
    """``{"start", "end", "type"}``: word indices (``end`` exclusive) and a non-blank type."""

    start: Annotated[int, Field(ge=0)]
    end: int
    type: NonBlank


def read_span_jsonl(path: str | Path, tokens_field: str, entities_field: str, labelled: bool) -> list[Sentence]:
    """JSON Lines of ``{"tokens": [...], "entities": [{"start", "end", "type"}, ...]}`` (the file is
    one document).

    Raises:
        ValueError: a record that is not such an object, a span outside its sentence or empty,
            or a type that is not a string (names file and line).
    """
    sentences = []
    for where, record, words in tokenized_records(path, tokens_field, entities_field if labelled else None):
        spans = None
        if labelled:
            spans = []
            for i, span in enumerate(parse(list[EntitySpan], record[entities_field], f"{where}: {entities_field}")):
                if not span.start < span.end <= len(words):
                    raise ValueError(
                        f"{where}: {entities_field}[{i}]: expected 0 <= start < end <= {len(words)} (word indices, "
                        f"end exclusive), got start {span.start}, end {span.end}"
                    )
                spans.append((span.start, span.end, span.type))
        number = int(where.rpartition(":")[2])
        sentences.append(Sentence(words, None, where, [number] * len(words), document=0, spans=spans))
    return sentences


class SpanClassification(TokenClassification):
    """Span classification for nested or flat entities.

    Args:
        entity_types: entity types; a span of another type in any file is an error naming it.
        max_span_width: the longest span classified, in words; a gold entity longer than this
            is never predicted (it counts as missed: the metric sees every gold span).
        nested: keep every span classified as an entity (nested and overlapping output); False:
            keep the best-scoring spans that do not overlap (flat output).
        width_embedding_size: size of the learned span-width embedding.
        tag_scheme, tag_column: how CoNLL files are read (as ``TokenClassification``).
        tokens_field: the token list's field in JSON Lines files.
        entities_field: the span list's field in JSON Lines files.
        stride: tokens of overlap between windows of a sentence longer than ``max_length``; a
            span is classified in the window that owns its first word, when its last word is in
            that window too.
        classifier_dropout: dropout before the span classifier.
        context: document context, as ``TokenClassification``'s.
    """

    pad_values: ClassVar[Mapping[str, int]] = {
        "word_present": -1, "present_positions": -1, "span_labels": -100, "gold_spans": -1,
    }  # fmt: skip
    data_settings = ("tag_scheme", "tag_column", "tokens_field", "entities_field")
    token_keys = frozenset({"word_present", "word_index"})

    def __init__(
        self,
        entity_types: list[str],
        max_span_width: int = 8,
        nested: bool = False,
        width_embedding_size: int = 32,
        tag_scheme: TagScheme = "IOB1",
        tag_column: int = -1,
        tokens_field: str = "tokens",
        entities_field: str = "entities",
        stride: int = 32,
        classifier_dropout: float = 0.1,
        context: int = 0,
    ) -> None:
        if max_span_width < 1 or width_embedding_size < 1:
            raise ValueError(
                f"model.task: max_span_width={max_span_width} and width_embedding_size={width_embedding_size}: "
                "expected positive numbers"
            )
        super().__init__(
            entity_types, tag_scheme=tag_scheme, tag_column=tag_column, tokens_field=tokens_field, stride=stride,
            classifier_dropout=classifier_dropout, context=context,
        )  # fmt: skip
        own = inspect.signature(SpanClassification.__init__).parameters
        # the tagger's settings this task does not take (crf, tags_field …) are not its hyper-parameters
        self.save_hyperparameters(ignore=[p for p in inspect.signature(super().__init__).parameters if p not in own])
        self.types = list(entity_types)
        self.type_ids = {t: i + 1 for i, t in enumerate(self.types)}  # 0: not an entity

    def build_head(self, config: BertConfig, tokenizer: BertTokenizer) -> Head:
        from bertkit_plugins.token_tagging.span_head import SpanClassificationHead

        hp = self.hparams
        return SpanClassificationHead(
            self.types, config, hp.max_span_width, hp.nested, hp.width_embedding_size, hp.classifier_dropout
        )

    # ----- data -----
    def read(self, path: Path, labelled: bool = True) -> list[Sentence]:
        """A CoNLL column file (flat entities from its tags), or JSON Lines of spans (``.jsonl``)."""
        hp = self.hparams
        if Path(path).suffix.lower() != ".jsonl":
            sentences = super().read(path, labelled)
            for s in sentences:
                s.spans = [(a, b, kind) for kind, a, b in entities(s.tags)] if s.tags is not None else None
            return sentences
        sentences = read_span_jsonl(path, hp.tokens_field, hp.entities_field, labelled)
        for s in sentences:
            bad = next((k for _, _, k in s.spans or [] if k not in self.type_ids), None)
            if bad is not None:
                raise ValueError(
                    f"{s.source}: entity type {bad!r} not in model.task.entity_types {self.types}; add it to the recipe"
                )
        return sentences

    def featurize(self, examples: list[Sentence], tokenizer: BertTokenizer, max_length: int) -> list[Feature]:
        width = self.hparams.max_span_width
        features = []
        classified: set[tuple[int, int, int]] = set()  # (example, first, end) of gold spans some window labels
        for window in self.windows(examples, tokenizer, max_length):
            sentence, word_ids = examples[window.example], window.word_ids
            firsts = [p == 0 or word_ids[p - 1] != word_ids[p] for p in range(window.start, window.end)]
            words = [word_ids[p] for p, first in zip(range(window.start, window.end), firsts, strict=True) if first]
            owned = [
                w if first and window.owner[w] == window.index else -1
                for w, first in zip(word_ids[window.start : window.end], firsts, strict=True)
            ]
            feature = {
                "input_ids": window.inputs.input_ids,
                "token_type_ids": window.inputs.token_type_ids,
                "word_present": window.spread(
                    -1,
                    [w if first else -1 for w, first in zip(word_ids[window.start : window.end], firsts, strict=True)],
                ),
                "word_index": window.spread(-1, owned),
                "example_index": window.example,
            }
            # where word_present marks a word, in order: the head's span starts, collated by the loader
            feature["present_positions"] = [p for p, w in enumerate(feature["word_present"]) if w >= 0]
            if sentence.spans is not None:
                gold = {(a, b): self.type_ids[k] for a, b, k in sentence.spans}
                labels = []  # slot a * width + k: the span of words[a] … words[a + k]; -100: not classified here
                for a, first in enumerate(words):
                    mine = window.owner[first] == window.index
                    labels += [
                        gold.get((first, first + k + 1), 0) if mine and a + k < len(words) else -100
                        for k in range(width)
                    ]
                    if mine:
                        classified |= {
                            (window.example, first, first + k + 1) for k in range(min(width, len(words) - a))
                        }
                feature["span_labels"] = labels
                # every gold span of the sentence, with its first window, so that the metric counts those
                # no window classifies (longer than max_span_width, or across a window's end) as missed
                spans = sentence.spans if window.index == 0 else []
                feature["gold_spans"] = [v for a, b, k in spans for v in (a, b, self.type_ids[k])]
            features.append(feature)
        gold = [(i, a, b) for i, s in enumerate(examples) for a, b, _ in s.spans or []]
        missed = [span for span in gold if span not in classified]
        if missed:
            i, a, b = missed[0]
            log.warning(
                "%d of %d gold entities no window can classify (longer than max_span_width=%d words, or across a "
                "window's end): they count as missed; the first: %s, words %d-%d",
                len(missed), len(gold), width, examples[i].source, a, b,
            )  # fmt: skip
        return features

    # ----- predictions: the head's spans (SpanClassificationHead.feature_predictions) as records -----
    def format_predictions(self, examples: list[Sentence], predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        records = []
        for sentence, windows in zip(examples, by_example(predictions, len(examples), self), strict=True):
            spans = sorted((s for w in windows for s in w["spans"]), key=lambda s: (s[0], s[1]))
            if not self.hparams.nested:
                spans = sorted(keep_best(spans), key=lambda s: (s[0], s[1]))
            found = []
            for first, end, kind, score in spans:
                start, stop = sentence.offsets[first][0], sentence.offsets[end - 1][1]
                found.append(
                    {
                        "type": kind,
                        "text": sentence.text[start:stop],
                        "start": start,
                        "end": stop,
                        "words": [first, end],
                        "score": round(score, 6),
                    }
                )
            record = {"source": sentence.source, "text": sentence.text, "words": sentence.words, "entities": found}
            if not self.hparams.nested:  # flat: the same spans as IOB2 tags
                tags = ["O"] * len(sentence.words)
                for first, end, kind, _ in spans:
                    tags[first:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - first - 1)
                record["tags"] = tags
            records.append(record)
        return records

    def sample_files(self) -> dict[str, Path]:
        """The nested-entity sample (``sample/nested``: protein, DNA, cell_type, cell_line)."""
        return dict(SAMPLE_NESTED)


SpanHead = deprecated_alias(SpanClassification, "SpanHead", __name__)
