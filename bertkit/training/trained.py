"""A trained model from what ``bertkit fit`` and ``bertkit export`` write: a checkpoint (``.ckpt``)
or an export folder (its ``bertkit.json`` names the task). ``Predictor`` serves such a model; a
distillation run (``model.teacher``) learns from one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from bertkit.data.datamodule import BertDataModule
from bertkit.model.families import EncoderFamily, family_of
from bertkit.model.weights import read_state_dict, renamed
from bertkit.tasks.head import Head, exported
from bertkit.tasks.task import Batch, task_from_spec
from bertkit.training.checkpoints import load_checkpoint, recorded_max_length
from bertkit.utils import deprecation
from bertkit.utils.io import atomic_path, read_json

if TYPE_CHECKING:
    from bertkit.training.module import BertModule

SERVING_FILE = "bertkit.json"
"""The export folder's record of its task and ``model.max_length`` (``save_serving_config``)."""


def save_serving_config(model: BertModule, directory: str | Path, max_length: int) -> None:
    """Write ``bertkit.json`` (``SERVING_FILE``) into an export ``directory`` (atomically)."""
    with atomic_path(Path(directory) / SERVING_FILE) as tmp:
        tmp.write_text(json.dumps({"task": model.task.spec(), "max_length": max_length}, indent=2) + "\n", "utf-8")


def serving_config(folder: Path) -> tuple[dict, str]:
    """An export folder's ``bertkit.json`` and the key of its task (release 0.1 wrote ``head``).

    Raises:
        FileNotFoundError: no ``bertkit.json`` (an export of the encoder alone, or not written by
            ``bertkit export``).
    """
    config = read_json(folder / SERVING_FILE, "not a `bertkit export` folder with a task head")
    return config, "task" if "task" in config else "head"


def read_head_weights(head: Head, folder: Path, family: type[EncoderFamily]) -> None:
    """The trained tensors of a built ``head`` (``TransformersExport.hf_state_dict``) from an export's weights.

    Raises:
        ValueError: the export holds the encoder alone, or lacks one of the head's tensors.
    """
    export = exported(head)
    own = export.hf_state_dict()
    if not own:
        raise ValueError(
            f"{folder}: the export holds the encoder alone, not {type(head).__name__}'s trained layer; "
            "serve the checkpoint instead"
        )
    weights, path = read_state_dict(folder)
    renames = family.hf_renames(family.hf_architecture(export.hf_architecture) or "")
    with torch.no_grad():
        for key, tensor in own.items():
            stored = weights.get(renamed(key, renames))
            if stored is None:
                raise ValueError(f"{path}: no {renamed(key, renames)!r}, a weight of the trained head")
            tensor.copy_(stored)


def stored_max_length(stored: dict[str, Any], path: str | Path) -> int:
    """The input length a checkpoint's model reads, specials included: its ``model.max_length``
    (or, where an earlier release saved it, its run's ``data.max_length``); what ``test``,
    ``predict``, ``serve`` and an export's ``bertkit.json`` read input with. Never a default: a
    window of another length than training's changes the predictions.

    Raises:
        ValueError: the checkpoint records none (an earlier release's run without a
            ``BertDataModule``); names the file.
    """
    length = recorded_max_length(stored)
    if length is not None:
        return length
    raise ValueError(
        f"{path}: records no max_length (an earlier release's run without a BertDataModule), so the length its "
        "model reads input in is unknown; save it again from a run of this release"
    )


def run_validation_data(model: BertModule, stored: dict[str, Any], path: str | Path) -> BertDataModule:
    """The validation data of the run that saved checkpoint ``path`` (``stored``, as
    ``load_checkpoint`` reads it): its data module's saved settings with ``model``'s task and
    tokenizer, set up for ``validate``.

    Raises:
        ValueError: the run had no data module or no validation data, or its validation file is
            malformed (named); FileNotFoundError: the file is not where the run read it.
    """
    settings = {k: v for k, v in (stored.get("datamodule_hyper_parameters") or {}).items() if not k.startswith("_")}
    if not settings:
        raise ValueError(f"{path}: records no data module settings (the run that saved it had no BertDataModule)")
    with deprecation.stored():  # the run's settings as it saved them, an earlier release's names included
        data = BertDataModule(**{**settings, "max_length": None}, task=model.task, tokenizer=model.tokenizer)
    data.attach(model)
    data.check_files("validate")
    data.setup("validate")
    return data


def validation_outputs(model: BertModule, data: BertDataModule) -> Iterator[tuple[dict[str, torch.Tensor], Batch]]:
    """``model``'s outputs (eval mode, no gradients) and each batch of ``data``'s validation
    loader, computed as they are iterated."""
    model.eval()
    for batch in data.val_dataloader():
        with torch.inference_mode():
            outputs = model(batch)
        yield outputs, batch


def load_trained(path: str | Path, device: str, model_class: type[BertModule]) -> tuple[BertModule, int]:
    """A trained model of ``model_class`` (``BertModule``, or a subclass) and the input length it
    reads (``stored_max_length``), from a checkpoint or an export folder (its task from ``bertkit.json``:
    registered or already-imported tasks only, nothing it names is imported), on ``device``.

    Raises:
        FileNotFoundError: neither a checkpoint nor an export folder with ``bertkit.json``.
        ValueError: see ``BertModule.load_from_checkpoint`` and ``read_head_weights``.
    """
    path = Path(path)
    if not path.is_dir():
        model = model_class.load_from_checkpoint(path, map_location=device)
        stored = load_checkpoint(path, mmap=True)
        return model, stored_max_length(stored, path)  # the model's, or an earlier release's data.max_length
    config, key = serving_config(path)
    task = task_from_spec(config[key], f"{path / SERVING_FILE}: {key}")
    model = model_class(task, pretrained=str(path), max_length=int(config["max_length"])).to(device)
    if model.head is None:  # its learned settings are in the export's weights
        model.build_head()
    read_head_weights(model.head, path, family_of(path))
    return model, int(config["max_length"])
