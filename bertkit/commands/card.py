"""The model card ``bertkit export`` writes as the folder's ``README.md``, in the Hugging Face
Hub's format (``huggingface_hub.ModelCard``): YAML front matter (``library_name``,
``pipeline_tag``, ``base_model``, ``datasets``, ``metrics``, ``tags``), then what the model is,
its labels, its scores, how it was trained and how to load it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from bertkit.model.hub import COMMIT, hub_id

log = logging.getLogger(__name__)

PIPELINES = {
    "ForTokenClassification": "token-classification",
    "ForSequenceClassification": "text-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMaskedLM": "fill-mask",  # *ForPreTraining: no pipeline loads it (BERT's has NSP, ELECTRA's is a detector)
    "Model": "feature-extraction",
}
MODEL_SETTINGS = ("learning_rate", "weight_decay", "warmup_ratio", "attention_dropout")
DATA_SETTINGS = (
    "hf_dataset",
    "hf_config",
    "data_dir",
    "dataset",
    "train_file",
    "max_length",
    "batch_size",
    "max_tokens",
)


def pipeline_tag(architecture: str) -> str | None:
    """The Hub's pipeline tag of a ``transformers`` class (``BertForTokenClassification`` →
    ``token-classification``), or None (``BertForPreTraining``: no pipeline)."""
    return next((tag for suffix, tag in PIPELINES.items() if architecture.endswith(suffix)), None)


def run_scores(checkpoint: Path) -> dict[str, Any] | None:
    """The ``test_scores.json`` (``bertkit test``) of the run folder a checkpoint lies in
    (``<root>/checkpoints/x.ckpt`` → ``<root>/test_scores.json``), or None; a file that cannot be
    read is None too, with a warning (the card is written without scores)."""
    path = checkpoint.parent.parent / "test_scores.json"
    if checkpoint.parent.name != "checkpoints" or not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        record = err
    if isinstance(record, dict) and isinstance(record.get("scores"), dict):
        return record
    why = record if isinstance(record, Exception) else "no scores mapping"
    log.warning("%s: not a bertkit test scores file (%s); the model card has no scores", path, why)
    return None


def model_card(model: Any, architecture: str, checkpoint: str | Path, stored: dict[str, Any], folder: Path) -> str:
    """The model card of an export (Markdown with YAML front matter).

    Args:
        model: the exported ``BertModule``.
        architecture: the ``transformers`` class written into ``config.json``.
        checkpoint: the exported checkpoint file (its run folder's ``test_scores.json`` gives
            the scores).
        stored: the checkpoint's contents (``epoch``, ``global_step``,
            ``datamodule_hyper_parameters``).
        folder: where the export is read from, as the user named it (in the loading examples).
    """
    from huggingface_hub import ModelCardData

    hparams, data = dict(model.hparams), stored.get("datamodule_hyper_parameters") or {}
    pretrained = str(hparams.get("pretrained") or "")
    base = hub_id(pretrained)  # a Hub id resolved in training carries its commit (bertkit.model.hub.pinned)
    base = base if base and base[1] and COMMIT.fullmatch(base[1]) else None
    scores = run_scores(Path(checkpoint))
    tag = pipeline_tag(architecture)
    metadata = ModelCardData(
        library_name="transformers",
        pipeline_tag=tag,
        base_model=base[0] if base else None,
        datasets=[data["hf_dataset"]] if data.get("hf_dataset") else None,
        metrics=sorted({k.split("/", 1)[-1].split("_")[0] for k in scores["scores"]} - {"loss"}) if scores else None,
        tags=["bertkit", type(model.task).__name__],
    )
    source = f"a fresh {hparams.get('preset')} encoder"
    if pretrained:
        source = f"`{base[0]}` at revision `{base[1]}`" if base else f"`{pretrained}`"
    lines = [
        f"# {folder.name}",
        "",
        f"A `{architecture}` trained with [bertkit](https://github.com/bertkit/bertkit) "
        f"(task `{type(model.task).__name__}`), starting from {source}.",
        *_labels(model),
        *_scores(scores, Path(checkpoint)),
        "## Training",
        "",
        f"- {stored.get('global_step', '?')} optimizer steps; saved in epoch {stored.get('epoch', 0) + 1}",
        *(f"- model.{k}: `{hparams[k]}`" for k in MODEL_SETTINGS if hparams.get(k) is not None),
        *(f"- data.{k}: `{data[k]}`" for k in DATA_SETTINGS if data.get(k) is not None),
        *(f"- task: `{k}`: `{v}`" for k, v in (model.task.spec().get("init_args") or {}).items() if _short(v)),
        "",
        *_usage(tag, folder),
    ]
    notes = model.head.hf_notes()
    if notes:
        lines += ["## Notes", "", notes, ""]
    return f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(lines).rstrip() + "\n"


def _short(value: Any) -> bool:
    return value is not None and len(json.dumps(value)) <= 80


def _labels(model: Any) -> list[str]:
    labels = (model.head.hf_config() or {}).get("id2label")
    if not labels:
        return [""]
    return ["", "## Labels", "", "| id | label |", "| --- | --- |", *(f"| {i} | {t} |" for i, t in labels.items()), ""]


def _scores(scores: dict[str, Any] | None, checkpoint: Path) -> list[str]:
    if scores is None:
        return ["No test scores: run `bertkit test` on the run before exporting to have them here.", ""]
    rows = [f"| {k} | {v:.4f} |" for k, v in sorted(scores["scores"].items())]
    tested = Path(str(scores.get("checkpoint")))
    other = "" if tested.name == checkpoint.name else f" (this export is `{checkpoint.name}`)"
    return [
        "## Scores",
        "",
        f"`bertkit test` of `{tested.name}`{other}, recipes: {', '.join(scores.get('recipes') or []) or 'none'}:",
        "",
        "| metric | value |",
        "| --- | --- |",
        *rows,
        "",
    ]


def _usage(tag: str | None, folder: Path) -> list[str]:
    settings = ', aggregation_strategy="first"' if tag == "token-classification" else ""
    lines = ["## Use", ""]
    if tag:
        lines += [
            "In `transformers`:",
            "",
            "```python",
            "from transformers import pipeline",
            "",
            f'model = pipeline("{tag}", model="{folder}"{settings})',
            "```",
            "",
        ]
    lines += [
        "In bertkit (the same decoding as `bertkit predict`):",
        "",
        "```python",
        "from bertkit import Predictor",
        "",
        f'records = Predictor.from_export("{folder}").predict(["A text to read."])',
        "```",
        "",
    ]
    return lines
