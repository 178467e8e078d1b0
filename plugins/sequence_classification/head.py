"""``SequenceClassificationHead``: one label (or several, or a number) per text or text pair.

BERT's fine-tuning recipe for GLUE (Devlin et al. 2019, §4.1; google-research/bert
run_classifier.py): the pooled ``[CLS]`` vector (tanh pooler) -> dropout -> one linear layer.
Pairs are packed ``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1 and truncated longest-first.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from bertkit_plugins.sequence_classification.metrics import ClassificationMetrics
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
from torch import nn

from bertkit.data.samples import sample_files
from bertkit.model.bert import EncoderOutput
from bertkit.model.config import BertConfig
from bertkit.model.dropout import Dropout
from bertkit.model.tokenizer import BertTokenizer
from bertkit.tasks.legacy import Batch, Feature, Head
from bertkit.utils.choices import check

ProblemType = Literal["single_label", "multi_label", "regression"]
Pooling = Literal["cls", "mean"]
FileFormat = Literal["auto", "tsv", "csv", "jsonl"]


def _label_order(labels: set[str]) -> list[str]:
    """Sorted labels; numerically when every label is a number (so ``2`` comes before ``10``)."""
    try:
        return sorted(labels, key=float)
    except ValueError:
        return sorted(labels)


class SequenceClassificationHead(Head):
    """Sequence classification or regression on ``[CLS]`` (single texts and text pairs).

    Args:
        problem_type: ``single_label`` (softmax, cross-entropy), ``multi_label`` (a sigmoid per
            label, binary cross-entropy; labels at or above ``threshold`` are predicted) or
            ``regression`` (one output, mean squared error; STS-B style).
        labels: the label vocabulary in output order. None (default) = the distinct labels of the
            training file, sorted (numerically if all are numbers); stored in checkpoints. A
            label outside it in any file is an error naming the file and line.
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

    learned = ("labels",)

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
    ) -> None:
        super().__init__()
        for name, value, kind in (
            ("problem_type", problem_type, ProblemType),
            ("pooling", pooling, Pooling),
            ("file_format", file_format, FileFormat),
            ("quoting", quoting, Quoting),
        ):
            check(f"model.head.{name}", value, kind)
        if isinstance(class_weights, str) and class_weights != "balanced":
            raise ValueError(f"model.head.class_weights={class_weights!r}: expected balanced or a list of weights")
        if problem_type == "regression" and class_weights is not None:
            raise ValueError("model.head.class_weights: not used by regression; remove it")
        if labels is not None and len(set(labels)) != len(labels):
            raise ValueError(f"model.head.labels={labels!r}: labels must be distinct")
        self.save_hyperparameters()
        self.pair_column = None if text_pair_column == "" else text_pair_column
        self._counts: Counter[str] = Counter()
        self._examples_seen = 0

    # ----- what the head learns from train -----
    @property
    def ready(self) -> bool:
        return self.hparams.problem_type == "regression" or self.hparams.labels is not None

    @property
    def reads_cls_only(self) -> bool:
        return self.hparams.pooling == "cls"

    @property
    def reads_pooler(self) -> bool:
        return self.hparams.pooling == "cls"

    def prepare(self, examples: list[Example]) -> None:
        """Count labels on the training examples; without ``labels`` they become the vocabulary."""
        if self.hparams.problem_type == "regression":
            return
        self._counts = Counter(label for e in examples for label in self._as_list(e.label))
        self._examples_seen = len(examples)
        if self.hparams.labels is None:
            self.hparams.labels = _label_order(set(self._counts))
        if hasattr(self, "loss_weight"):  # built before the data was seen (labels given)
            self.loss_weight.copy_(self._weights())

    def _as_list(self, label: Any) -> list[str]:
        return label if isinstance(label, list) else [label]

    def _weights(self) -> torch.Tensor:
        hp = self.hparams
        if isinstance(hp.class_weights, list):
            return torch.tensor(hp.class_weights, dtype=torch.float)
        if not self._counts:  # rebuilt from a checkpoint: its state dict brings the weights
            return torch.ones(len(hp.labels))
        counts = torch.tensor([float(self._counts[label]) for label in hp.labels]).clamp(min=1.0)
        if hp.problem_type == "multi_label":
            return (self._examples_seen - counts).clamp(min=0.0) / counts
        return counts.sum() / (len(hp.labels) * counts)

    hf_architecture = "BertForSequenceClassification"
    onnx_outputs = ("logits",)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """``classifier.*`` (on the pooler, as transformers computes it); none for mean pooling."""
        if self.hparams.pooling != "cls":
            return {}
        return {f"classifier.{k}": v for k, v in self.classifier.state_dict().items()}

    def hf_config(self) -> dict[str, Any]:
        hp = self.hparams
        problem = {"single_label": "single_label_classification", "multi_label": "multi_label_classification"}
        labels = hp.labels if hp.problem_type != "regression" else ["score"]
        return {
            "problem_type": problem.get(hp.problem_type, "regression"),
            "id2label": dict(enumerate(labels)),
            "label2id": {label: i for i, label in enumerate(labels)},
        }

    def build(self, config: BertConfig) -> None:
        hp = self.hparams
        num_outputs = 1 if hp.problem_type == "regression" else len(hp.labels)
        if hp.problem_type == "single_label" and num_outputs < 2:
            raise ValueError(f"model.head.labels={hp.labels!r}: single_label classification needs at least 2 labels")
        if isinstance(hp.class_weights, list) and len(hp.class_weights) != num_outputs:
            raise ValueError(
                f"model.head.class_weights has {len(hp.class_weights)} weights for {num_outputs} labels {hp.labels}"
            )
        self.dropout = Dropout(hp.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_outputs)
        nn.init.normal_(self.classifier.weight, std=config.initializer_range)
        nn.init.zeros_(self.classifier.bias)
        if hp.class_weights is not None:
            self.register_buffer("loss_weight", self._weights())
        positive = self.positive_index()
        self.metrics = nn.ModuleDict(
            {
                stage: ClassificationMetrics(hp.problem_type, num_outputs, positive, hp.threshold, hp.labels)
                for stage in ("val", "test")
            }
        )

    @property
    def label_ids(self) -> dict[str, int]:
        """Each label's output index."""
        return {label: i for i, label in enumerate(self.hparams.labels or [])}

    def positive_index(self) -> int:
        """Index of ``positive_label`` (default: ``1`` if it is a label, else the second label)."""
        labels, positive = self.hparams.labels or [], self.hparams.positive_label
        if positive is not None:
            if positive not in labels:
                raise ValueError(f"model.head.positive_label={positive!r} is not one of the labels {labels}")
            return labels.index(positive)
        return labels.index("1") if "1" in labels else 1

    # ----- data -----
    def _parse_label(self, raw: Any, source: str) -> Any:
        hp = self.hparams
        if hp.problem_type == "regression":
            try:
                value = float(raw)
            except (TypeError, ValueError):
                raise ValueError(f"{source}: label {raw!r} is not a number (problem_type: regression)") from None
            if not math.isfinite(value):
                raise ValueError(f"{source}: label {raw!r} is not a finite number (problem_type: regression)")
            return value
        if hp.problem_type == "multi_label":
            if isinstance(raw, list):
                return [str(x).strip() for x in raw]
            return [x.strip() for x in str(raw).split(hp.label_separator) if x.strip()]
        if isinstance(raw, float) and raw.is_integer():
            raw = int(raw)
        if isinstance(raw, (list, dict)) or raw is None:
            raise ValueError(f"{source}: label {raw!r} is not a single label (problem_type: single_label)")
        return str(raw).strip()

    def read(self, path: Path, labelled: bool = True) -> list[Example]:
        hp = self.hparams
        label_column = hp.label_column if labelled else None
        fmt = file_format(Path(path), hp.file_format)
        if fmt == "jsonl":
            for name in ("text_column", "text_pair_column", "label_column"):
                if isinstance(hp[name], int):
                    raise ValueError(f"{path}: model.head.{name}={hp[name]} must be a field name for JSON Lines")
            examples = read_jsonl(path, hp.text_column, self.pair_column, label_column)
        else:
            delimiter = "," if fmt == "csv" else "\t"
            examples = read_table(
                path, hp.text_column, self.pair_column, label_column, delimiter, hp.header, hp.quoting
            )
        if labelled:
            for e in examples:
                e.label = self._parse_label(e.label, e.source)
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

    def _label_target(self, example: Example) -> Any:
        hp = self.hparams
        if hp.problem_type == "regression":
            return example.label
        unknown = [x for x in self._as_list(example.label) if x not in self.label_ids]
        if unknown:
            raise ValueError(
                f"{example.source}: label {unknown[0]!r} is not in the label vocabulary {hp.labels} "
                "(built from the training file, or model.head.labels)"
            )
        if hp.problem_type == "multi_label":
            hot = [0.0] * len(hp.labels)
            for label in example.label:
                hot[self.label_ids[label]] = 1.0
            return hot
        return self.label_ids[example.label]

    def featurize(self, examples: list[Example], tokenizer: BertTokenizer, max_length: int) -> list[Feature]:
        pairs = [e.text_pair for e in examples] if self.pair_column is not None else None
        encodings = tokenizer.encode_batch([e.text for e in examples], pairs, max_length)
        features = []
        for index, (example, enc) in enumerate(zip(examples, encodings, strict=True)):
            feature = {"input_ids": enc.input_ids, "token_type_ids": enc.token_type_ids, "example_index": index}
            if example.label is not None:
                feature["labels"] = self._label_target(example)
            features.append(feature)
        return features

    # ----- model -----
    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        if self.hparams.pooling == "cls":
            if encoded.pooler_output is None:
                raise ValueError("model.head.pooling=cls needs the encoder's pooler; this encoder has none: use mean")
            pooled = encoded.pooler_output
        else:
            mask = batch["attention_mask"].unsqueeze(-1).to(encoded.last_hidden_state.dtype)
            pooled = (encoded.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels) or (B, 1)
        out = {"logits": logits}
        if "labels" in batch:
            out["loss"] = self._loss(logits, batch["labels"])
        return out

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        weight = getattr(self, "loss_weight", None)
        problem = self.hparams.problem_type
        if problem == "regression":
            return F.mse_loss(logits.squeeze(-1).float(), labels.float())
        if problem == "multi_label":
            return F.binary_cross_entropy_with_logits(logits.float(), labels.float(), pos_weight=weight)
        return F.cross_entropy(logits.float(), labels, weight=weight)

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        self.metrics[stage].update(outputs["logits"], batch["labels"])

    # ----- predictions -----
    def predict(self, outputs: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        logits = outputs["logits"].float()
        problem = self.hparams.problem_type
        if problem == "regression":
            scores = logits.squeeze(-1)
        else:
            scores = logits.sigmoid() if problem == "multi_label" else logits.softmax(-1)
        return [
            {"example_index": i, "scores": s}
            for i, s in zip(batch["example_index"].tolist(), scores.tolist(), strict=True)
        ]

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
