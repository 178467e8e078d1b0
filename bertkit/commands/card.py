"""The model card ``bertkit export`` writes as the folder's ``README.md``, in the Hugging Face
Hub's format (``huggingface_hub.ModelCard``): YAML front matter (``library_name``,
``pipeline_tag``, ``base_model``, ``datasets``, ``metrics``, ``tags``), then what the model is,
its labels, its scores, how it was trained and how to load it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from bertkit.api.app import base_model, exported, file_names, resolve_pretrained

log = logging.getLogger(__name__)

PIPELINES = {
    "ForTokenClassification": "token-classification",
    "ForSequenceClassification": "text-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMaskedLM": "fill-mask",  # *ForPreTraining: no pipeline loads it (BERT's has NSP, ELECTRA's is a detector)
    "Model": "feature-extraction",
}
DATA_STATE = "BertDataModule"
"""The checkpoint key of the data module's state (Lightning's: the class's qualified name)."""
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
    """The model card of an export (Markdown with YAML front matter, ``huggingface_hub.ModelCard``):
    the base model as a Hub id (with its commit where training pinned one), the data the run
    actually read (a bundled sample said as such), the test scores and the set they came from,
    intended use and limitations, the base model's license, and how to load the folder (every
    snippet runs as written: the test suite executes them).

    Args:
        model: the exported ``BertModule``.
        architecture: the ``transformers`` class written into ``config.json``.
        checkpoint: the exported checkpoint file (its run folder's ``test_scores.json`` gives
            the scores).
        stored: the checkpoint's contents (``epoch``, ``global_step``,
            ``datamodule_hyper_parameters``, the data module's ``data_sources``).
        folder: where the export is read from, as the user named it (in the loading examples).
    """
    from huggingface_hub import ModelCardData

    hparams, data = dict(model.hparams), stored.get("datamodule_hyper_parameters") or {}
    pretrained = str(hparams.get("pretrained") or "")
    base = base_model(pretrained) if pretrained else None
    sources = (stored.get(DATA_STATE) or {}).get("data_sources") or {}
    sample = "sample" in sources.values()
    scores = run_scores(Path(checkpoint))
    tag = pipeline_tag(architecture)
    adapter = hparams.get("adapter")
    task = type(model.task).__name__
    metadata = ModelCardData(
        library_name="transformers",
        pipeline_tag=tag,
        base_model=base[0] if base else None,
        license=_license(pretrained),
        datasets=[data["hf_dataset"]] if data.get("hf_dataset") and not sample else None,
        metrics=_metric_names(scores),
        tags=["bertkit", task, *(["lora", "peft"] if adapter else [])],
    )
    source = f"a fresh {hparams.get('preset')} encoder"
    if pretrained:
        revision = f" at revision `{base[1]}`" if base and base[1] else ""
        source = f"`{base[0]}`{revision}" if base else f"`{pretrained}`"
        if base and pretrained != base[0] and not base[1]:
            source += f" (bertkit's registered `{pretrained}`: its files, checked against that release's SHA-256 sums)"
    notes = exported(model.head).hf_notes()  # what transformers users must know (the head's export)
    lines = [
        f"# {task}{' (LoRA)' if adapter else ''} from {base[0].split('/')[-1] if base else pretrained or 'scratch'}",
        "",
        f"A `{architecture}` trained with [bertkit](https://github.com/bertkit/bertkit) (task `{task}`), "
        f"starting from {source}.",
        *_labels(model),
        *_data(sources, data, sample),
        *_scores(scores, Path(checkpoint)),
        *_adapter(adapter, folder),
        "## Training",
        "",
        f"- {stored.get('global_step', '?')} optimizer steps; saved in epoch {stored.get('epoch', 0) + 1}",
        *(f"- model.{k}: `{hparams[k]}`" for k in MODEL_SETTINGS if hparams.get(k) is not None),
        *(f"- data.{k}: `{data[k]}`" for k in DATA_SETTINGS if data.get(k) is not None),
        *(f"- task: `{k}`: `{v}`" for k, v in (model.task.spec().get("init_args") or {}).items() if _short(v)),
        "",
        *_uses(sample, data.get("max_length"), metadata.license),
        *_usage(tag, folder, bool(notes)),
    ]
    if notes:
        lines += ["## Notes", "", notes, ""]
    return f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(lines).rstrip() + "\n"


def _metric_names(scores: dict[str, Any] | None) -> list[str] | None:
    """The metrics scored (``f1``, ``precision`` …; per-type rows fold into their metric), no losses."""
    if not scores:
        return None
    names = {key.split("/", 1)[-1] for key in scores["scores"]}
    return sorted({name.split("_")[0] for name in names if not name.endswith("loss")}) or None


def _license(pretrained: str) -> str | None:
    """The base model's license, from the front matter of its own card (``README.md``) where
    its folder has one; None where it cannot be read (the card then names none)."""
    from huggingface_hub import ModelCard

    try:
        card = Path(resolve_pretrained(pretrained, weights=False)) / "README.md"
        return ModelCard.load(card).data.license if card.is_file() else None
    except (OSError, ValueError) as err:
        log.info("no license read for %s: %s", pretrained, err)
        return None


def _data(sources: dict[str, str], data: dict[str, Any], sample: bool) -> list[str]:
    if sample:
        named = data.get("hf_dataset") or data.get("dataset") or "the task's data"
        return [
            "## Training data",
            "",
            f"**A small sample**, bundled with (or generated by) bertkit's task plugin, stood in for {named}: "
            "this model saw a few dozen examples. Its scores show that the training loop ran, not how well the "
            "task is done. Train on the real data (`--data.data_dir`, `BERTKIT_DATA_DIR` or `data.hf_dataset`) "
            "before using or publishing it.",
            "",
        ]
    if not sources:
        return []
    read = ", ".join(f"`{v}`" + (f" ({k})" if k else "") for k, v in sources.items())
    files = ", ".join(
        f"{k} " + " + ".join(f"`{n}`" for n in file_names(data[k]))
        for k in ("train_file", "validation_file", "test_file")
        if data.get(k)
    )
    return ["## Training data", "", f"Read from {read}" + (f": {files}." if files else "."), ""]


def _adapter(adapter: dict[str, Any] | None, folder: Path) -> list[str]:
    if not adapter:
        return []
    targets = ", ".join(adapter.get("target_modules") or [])
    return [
        "## LoRA",
        "",
        f"Trained with LoRA adapters (Hu et al. 2021; r {adapter['r']}, alpha {adapter['alpha']}, on {targets}) "
        "in place of the encoder's weights; the head trained fully. This folder holds the merged weights (each "
        "adapter's update added to its base weights): it loads as any `transformers` model. Exported with "
        f"`--adapter true`, `{folder}/adapter` holds the adapters alone as a PEFT folder, to load over the base "
        "model with `peft.PeftModel.from_pretrained(base, folder)`.",
        "",
    ]


def _uses(sample: bool, max_length: Any, license: str | None) -> list[str]:
    use = (
        "None: trained on a sample (above)."
        if sample
        else "The task above, on text like the training data (its language, domain and case)."
    )
    window = f"{max_length} tokens" if max_length else "the training run's max_length"
    return [
        "## Intended use and limitations",
        "",
        f"- Intended use: {use}",
        "- The scores above hold for their test set; expect lower ones on text of other domains, periods or styles.",
        f"- Text is read in windows of at most {window} (bertkit splits longer inputs and joins the windows' "
        "predictions; other readers may cut them).",
        f"- License: {license or 'none read: see the base model'}" + (" (the base model's)." if license else ""),
        "",
    ]


def _short(value: Any) -> bool:
    return value is not None and len(json.dumps(value)) <= 80


def _labels(model: Any) -> list[str]:
    labels = (exported(model.head).hf_config() or {}).get("id2label")
    if not labels:
        return [""]
    return ["", "## Labels", "", "| id | label |", "| --- | --- |", *(f"| {i} | {t} |" for i, t in labels.items()), ""]


def _scores(scores: dict[str, Any] | None, checkpoint: Path) -> list[str]:
    if scores is None:
        return ["No test scores: run `bertkit test` on the run before exporting to have them here.", ""]
    rows = [f"| {k} | {v:.4f} |" for k, v in sorted(scores["scores"].items())]
    tested = Path(str(scores.get("checkpoint")))
    other = "" if tested.name == checkpoint.name else f" (this export is `{checkpoint.name}`)"
    on = scores.get("data_sources") or {}
    where = " on a **sample**, not the task's test set" if "sample" in on.values() else ""
    return [
        "## Scores",
        "",
        f"`bertkit test` of `{tested.name}`{other}{where}, recipes: {', '.join(scores.get('recipes') or []) or 'none'}:",
        "",
        "| metric | value |",
        "| --- | --- |",
        *rows,
        "",
    ]


def _usage(tag: str | None, folder: Path, own_decoding: bool) -> list[str]:
    """How to load the folder: bertkit first where the head decodes otherwise than the plain
    pipeline (a CRF), with the export's own pipeline; the plain pipeline after it."""
    bertkit = [
        "In bertkit (the same decoding as `bertkit predict`):",
        "",
        "```python",
        "from bertkit import Predictor",
        "",
        f'records = Predictor.from_export("{folder}").predict(["A text to read."])',
        "```",
        "",
    ]
    lines = ["## Use", ""]
    if own_decoding:
        lines += bertkit
        lines += [
            "In `transformers`, the export's own pipeline decodes as bertkit does (it runs the folder's code):",
            "",
            "```python",
            "from transformers import pipeline",
            "",
            f'tagger = pipeline(model="{folder}", trust_remote_code=True)',
            "```",
            "",
        ]
    if tag:
        settings = ', aggregation_strategy="first"' if tag == "token-classification" else ""
        plain = "Without remote code (see the notes for what it leaves out):" if own_decoding else "In `transformers`:"
        lines += [plain, "", "```python", "from transformers import pipeline", ""]
        lines += [f'model = pipeline("{tag}", model="{folder}"{settings})', "```", ""]
    return lines if own_decoding else lines + bertkit
