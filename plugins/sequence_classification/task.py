"""``SequenceClassification``: one label (or several, or a number) per text or text pair.

BERT's fine-tuning recipe for GLUE (Devlin et al. 2019, §4.1; google-research/bert
run_classifier.py): pairs are packed ``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1 and
truncated longest-first; the head (``PooledClassificationHead``) is the pooled ``[CLS]`` vector
(tanh pooler) -> dropout -> one linear layer.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
from bertkit_plugins.sequence_classification.readers import (
    Column,
    Example,
    Quoting,
    file_format,
    read_jsonl,
    read_lines,
    read_table,
)
from bertkit_plugins.sequence_classification.sample import tables
from pydantic import Field

from bertkit.api.task import (
    BertConfig,
    BertTokenizer,
    Feature,
    Head,
    NonBlank,
    Task,
    Text,
    check_choice,
    check_float32,
    deprecated_alias,
    parse,
    sample_files,
)

ProblemType = Literal["single_label", "multi_label", "regression"]
Pooling = Literal["cls", "mean"]
FileFormat = Literal["auto", "tsv", "csv", "jsonl"]


NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
"""A decimal number as a table's regression label (``float()`` would also take ``1_000``, ``nan``,
``infinity``)."""

JSON_LABELS = {
    "single_label": NonBlank | int,
    "multi_label": list[NonBlank] | list[int] | Text,
    "regression": float,
}
"""What a JSON Lines label must be, per problem type: a label string or integer (never a boolean
or a fraction); a list of them or a string of separated labels; a number."""


CLASS_WEIGHTS = list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | Literal["balanced"] | None
"""``class_weights``: ``balanced``, or a finite weight of at least 0 per label."""
UNIT = Annotated[float, Field(gt=0, lt=1)]
"""A probability strictly between 0 and 1 (``threshold``)."""


def _json_kind(label: Any) -> str:
    """``an integer``, ``a number``, ``a string`` or ``a list of`` those, for a label as read."""
    if isinstance(label, list):
        kinds = sorted({_json_kind(x).split(" ", 1)[1] + "s" for x in label})
        return f"a list of {' and '.join(kinds)}" if kinds else "an empty list"
    return {int: "an integer", float: "a number", str: "a string"}.get(type(label), type(label).__name__)


def _label_order(labels: set[str]) -> list[str]:
    """Sorted labels; numerically when every label is a number (so ``2`` comes before ``10``)."""
    try:
        return sorted(labels, key=float)
    except ValueError:
        return sorted(labels)


class SequenceClassification(Task):
    """Sequence classification or regression (single texts and text pairs).

    Args:
        problem_type: ``single_label`` (softmax, cross-entropy), ``multi_label`` (a sigmoid per
            label, binary cross-entropy; labels at or above ``threshold`` are predicted) or
            ``regression`` (one output, mean squared error; STS-B style).
        labels: the label vocabulary in output order. None (default) = the distinct labels of the
            training file, sorted (numerically if all are numbers); stored in checkpoints. A
            label outside it in any file is an error naming the file and line.
        balanced_weights: the ``balanced`` class weights, counted on the training file
            (``learn``) and stored in checkpoints; leave it unset.
        text_column: the text: a header name or 0-based index (TSV/CSV), a field name (JSONL).
        text_pair_column: the second text of a pair task; ``""`` (default) for single texts.
            (Not None: jsonargparse would read a quoted name starting with ``#``, such as
            MRPC's ``"#2 String"``, as an empty YAML value.)
        label_column: the label (the value's text; a JSON number or list is accepted).
        file_format: ``auto`` (by suffix: .csv, .jsonl/.json, anything else TSV), ``tsv``,
            ``csv`` or ``jsonl``. ``.txt`` files given to ``predict`` are plain text: one
            example per line, a tab between the texts of a pair.
        header: TSV/CSV files start with a header line.
        quoting: ``minimal`` (standard CSV quoting, fields on one line), ``multiline`` (quoted
            fields may hold line breaks) or ``none`` (quotes are text; MRPC).
        label_separator: separates the labels of a multi-label row in TSV/CSV.
        pooling: ``cls`` (the tanh pooler over ``[CLS]``, as BERT) or ``mean`` (mean of the last
            hidden states over real tokens, as Sentence-BERT).
        class_weights: None; ``balanced`` (weight n / (k * n_c) per class, sklearn's rule; for
            multi-label the BCE ``pos_weight`` = negatives / positives per label), counted on
            the training file; or one weight per label.
        threshold: multi-label decision threshold on each sigmoid probability.
        positive_label: the label whose F1 is reported as ``f1`` in two-label tasks; None =
            ``1`` if it is a label, else the second label.
        classifier_dropout: dropout before the linear layer (BERT: 0.1).
    """

    learned = ("labels", "balanced_weights")
    data_settings = (
        "text_column", "text_pair_column", "label_column", "file_format", "header", "quoting", "label_separator",
    )  # fmt: skip
    token_keys: frozenset[str] = frozenset()  # labels are per sentence: a class, a score or multi-hot

    def __init__(
        self,
        problem_type: ProblemType = "single_label",
        labels: list[str] | None = None,
        text_column: Column = "sentence",
        text_pair_column: Column = "",
        label_column: Column = "label",
        file_format: FileFormat = "auto",
        header: bool = True,
        quoting: Quoting = "minimal",
        label_separator: str = ",",
        pooling: Pooling = "cls",
        class_weights: list[float] | str | None = None,
        threshold: float = 0.5,
        positive_label: str | None = None,
        classifier_dropout: float = 0.1,
        balanced_weights: list[float] | None = None,
    ) -> None:
        super().__init__()
        for name, value, kind in (
            ("problem_type", problem_type, ProblemType),
            ("pooling", pooling, Pooling),
            ("file_format", file_format, FileFormat),
            ("quoting", quoting, Quoting),
        ):
            check_choice(f"model.task.{name}", value, kind)
        parse(CLASS_WEIGHTS, class_weights, "model.task.class_weights")
        for i, weight in enumerate(class_weights if isinstance(class_weights, list) else []):
            check_float32(weight, f"model.task.class_weights[{i}]", low=0.0)  # the loss weighs in float32
        if isinstance(class_weights, list) and not any(class_weights):
            raise ValueError(
                f"model.task.class_weights={class_weights!r}: every weight is 0 (nothing would be learned)"
            )
        parse(UNIT, threshold, "model.task.threshold")
        check_float32(threshold, "model.task.threshold", low=0.0, high=1.0, low_open=True, high_open=True)
        if problem_type == "regression" and class_weights is not None:
            raise ValueError("model.task.class_weights: not used by regression; remove it")
        if labels is not None and len(set(labels)) != len(labels):
            raise ValueError(f"model.task.labels={labels!r}: labels must be distinct")
        self.save_hyperparameters()
        self.pair_column = None if text_pair_column == "" else text_pair_column

    # ----- what the task learns from train -----
    @property
    def ready(self) -> bool:
        hp = self.hparams
        if hp.problem_type == "regression":
            return True
        return hp.labels is not None and (hp.class_weights != "balanced" or hp.balanced_weights is not None)

    def learn(self, examples: list[Example]) -> None:
        """Count labels on the training examples: without ``labels`` they become the vocabulary;
        with ``class_weights: balanced`` they give the weights (sklearn's rule n / (k * n_c) per
        class; multi-label: the BCE ``pos_weight`` = negatives / positives per label)."""
        hp = self.hparams
        if hp.problem_type == "regression":
            return
        counts = Counter(label for e in examples for label in _as_list(e.label))
        if hp.labels is None:
            hp.labels = _label_order(set(counts))
        if hp.class_weights == "balanced":
            n = torch.tensor([float(counts[label]) for label in hp.labels]).clamp(min=1.0)
            weights = (
                (len(examples) - n).clamp(min=0.0) / n if hp.problem_type == "multi_label" else n.sum() / (len(n) * n)
            )
            hp.balanced_weights = weights.tolist()

    def loss_weights(self) -> list[float] | None:
        """The loss weight of each label (``class_weights``), None without weights; ones for
        ``balanced`` weights not counted yet (a checkpoint of release 0.1 brings its own)."""
        hp = self.hparams
        if hp.class_weights is None:
            return None
        if isinstance(hp.class_weights, list):
            return list(hp.class_weights)
        return hp.balanced_weights or [1.0] * len(hp.labels)

    def num_outputs(self) -> int:
        """Outputs of the classifier: one per label, one for regression.

        Raises:
            ValueError: fewer than two single-label labels, or as many class weights as labels.
        """
        hp = self.hparams
        num_outputs = 1 if hp.problem_type == "regression" else len(hp.labels)
        if hp.problem_type == "single_label" and num_outputs < 2:
            raise ValueError(f"model.task.labels={hp.labels!r}: single_label classification needs at least 2 labels")
        if isinstance(hp.class_weights, list) and len(hp.class_weights) != num_outputs:
            raise ValueError(
                f"model.task.class_weights has {len(hp.class_weights)} weights for {num_outputs} labels {hp.labels}"
            )
        return num_outputs

    def build_head(self, config: BertConfig, tokenizer: BertTokenizer) -> Head:
        from bertkit_plugins.sequence_classification.head import PooledClassificationHead

        return PooledClassificationHead(self, config)

    def positive_index(self) -> int:
        """Index of ``positive_label`` (default: ``1`` if it is a label, else the second label)."""
        labels, positive = self.hparams.labels or [], self.hparams.positive_label
        if positive is not None:
            if positive not in labels:
                raise ValueError(f"model.task.positive_label={positive!r} is not one of the labels {labels}")
            return labels.index(positive)
        return labels.index("1") if "1" in labels else 1

    # ----- data -----
    def _parse_label(self, raw: Any, source: str, json: bool) -> Any:
        """A label as the problem type declares it: from a table, text (a regression label is a
        decimal number); from JSON Lines, a value of ``JSON_LABELS``' type (never converted)."""
        hp = self.hparams
        if json:
            raw = parse(JSON_LABELS[hp.problem_type], raw, f"{source}: {hp.label_column}")
        if hp.problem_type == "regression":
            if isinstance(raw, str) and not NUMBER.fullmatch(raw.strip()):
                raise ValueError(f"{source}: label {raw!r} is not a decimal number (problem_type: regression)")
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError(f"{source}: label {raw!r} is not a finite number (problem_type: regression)")
            return value
        if hp.problem_type == "multi_label":
            if isinstance(raw, list):
                return [str(x).strip() for x in raw]
            return [x.strip() for x in raw.split(hp.label_separator) if x.strip()]
        if not str(raw).strip():
            raise ValueError(f"{source}: an empty label (problem_type: single_label)")
        return str(raw).strip()

    def read(self, path: Path, labelled: bool = True) -> list[Example]:
        """The examples of ``path`` (labels parsed by the problem type).

        Raises:
            ValueError: a label of the wrong type, or (JSON Lines) labels of one file with
                different JSON types, such as ``1`` and ``"1"`` (names both lines).
        """
        hp = self.hparams
        label_column = hp.label_column if labelled else None
        fmt = file_format(Path(path), hp.file_format)
        if fmt == "jsonl":
            for name in ("text_column", "text_pair_column", "label_column"):
                if isinstance(hp[name], int):
                    raise ValueError(f"{path}: model.task.{name}={hp[name]} must be a field name for JSON Lines")
            examples = read_jsonl(path, hp.text_column, self.pair_column, label_column)
        else:
            delimiter = "," if fmt == "csv" else "\t"
            examples = read_table(
                path, hp.text_column, self.pair_column, label_column, delimiter, hp.header, hp.quoting
            )
        if labelled:
            first: dict[str, str] = {}
            for e in examples:
                kind = _json_kind(e.label) if fmt == "jsonl" else "text"
                e.label = self._parse_label(e.label, e.source, fmt == "jsonl")
                if kind == "an empty list":  # a multi-label example without labels fits any list
                    continue
                first.setdefault(kind, e.source)
                if len(first) > 1:
                    other = next(k for k in first if k != kind)
                    raise ValueError(
                        f"{e.source}: {hp.label_column} is {kind}, but at {first[other]} it is {other}: the labels "
                        'of one file must have one JSON type (1 and "1" would be one class, 1.0 and "1.0" two)'
                    )
        return examples

    def sample_files(self) -> dict[str, Path] | None:
        """A generated sentiment (single texts) or paraphrase (pairs) sample with this head's
        column names, labels 0/1 (``bertkit_plugins.sequence_classification.sample``); none for
        regression, multi-label or columns given by index."""
        hp = self.hparams
        named = isinstance(hp.text_column, str) and isinstance(hp.label_column, str)
        if hp.problem_type != "single_label" or not named or not hp.header or isinstance(self.pair_column, int):
            return None
        kind = "paraphrase" if self.pair_column else "sentiment"
        return sample_files(f"classification-{kind}", tables(hp.text_column, self.pair_column, hp.label_column))

    def read_text_lines(self, path: Path, lines: Iterable[tuple[int, str]]) -> list[Example]:
        return read_lines(path, lines, pairs=self.pair_column is not None)

    def _label_target(self, example: Example, label_ids: dict[str, int]) -> Any:
        hp = self.hparams
        if hp.problem_type == "regression":
            return example.label
        unknown = [x for x in _as_list(example.label) if x not in label_ids]
        if unknown:
            raise ValueError(
                f"{example.source}: label {unknown[0]!r} is not in the label vocabulary {hp.labels} "
                "(built from the training file, or model.task.labels)"
            )
        if hp.problem_type == "multi_label":
            hot = [0.0] * len(hp.labels)
            for label in example.label:
                hot[label_ids[label]] = 1.0
            return hot
        return label_ids[example.label]

    def featurize(self, examples: list[Example], tokenizer: BertTokenizer, max_length: int) -> list[Feature]:
        pairs = [e.text_pair for e in examples] if self.pair_column is not None else None
        encodings = tokenizer.encode_batch([e.text for e in examples], pairs, max_length)
        label_ids = {label: i for i, label in enumerate(self.hparams.labels or [])}
        features = []
        for index, (example, enc) in enumerate(zip(examples, encodings, strict=True)):
            feature = {"input_ids": enc.input_ids, "token_type_ids": enc.token_type_ids, "example_index": index}
            if example.label is not None:
                feature["labels"] = self._label_target(example, label_ids)
            features.append(feature)
        return features

    # ----- predictions: the head's scores (PooledClassificationHead.feature_predictions) as records -----
    def format_record(self, example: Example, prediction: dict[str, Any]) -> dict[str, Any]:
        hp = self.hparams
        record: dict[str, Any] = {"source": example.source, "text": example.text}
        if example.text_pair is not None:
            record["text_pair"] = example.text_pair
        values = prediction["scores"]
        if hp.problem_type == "regression":
            record["score"] = values
        else:
            probabilities = dict(zip(hp.labels, values, strict=True))
            if hp.problem_type == "multi_label":
                record["labels"] = [label for label, p in probabilities.items() if p >= hp.threshold]
            else:
                record["label"] = max(probabilities, key=probabilities.get)
            record["probabilities"] = probabilities
        return record


def _as_list(label: Any) -> list[str]:
    return label if isinstance(label, list) else [label]


SequenceClassificationHead = deprecated_alias(
    SequenceClassification, "SequenceClassificationHead", "bertkit_plugins.sequence_classification.head"
)
