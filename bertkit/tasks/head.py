"""``Head``: the network half of a task plugin, the layers on top of the encoder and their loss.

A ``Task`` builds its head (``Task.build_head``) once its settings are known; ``BertModule`` runs
the encoder and hands the head an ``EncoderOutput`` and the batch. The head also names its
metrics (torchmetrics, per stage) and what a Hugging Face or ONNX export holds of it. Nothing of
reading files or turning outputs into records belongs here: that is the task's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torchmetrics import MetricCollection

from bertkit.model.bert import EncoderOutput
from bertkit.tasks.task import Batch

DistillationTarget = tuple[torch.Tensor, torch.Tensor]
"""``(logits, rows)`` of ``Head.distillation_targets``."""


def feature_rows(
    outputs: Mapping[str, torch.Tensor], batch: Batch, token_outputs: Sequence[str], owner: str
) -> list[dict[str, Any]]:
    """Each feature's ``example_index`` and its row of every output but the losses, as plain
    Python lists (``Head.feature_predictions``' default); of an output named in ``token_outputs``, (B, T, …)
    with T the batch's length, the feature's own tokens only (its ``attention_mask``): a (B, T, C)
    ``logits`` becomes one list of C floats per token of the feature. ``owner`` names the class
    that declares ``token_outputs`` in errors.

    Raises:
        ValueError: an output named in ``token_outputs`` is missing, or does not have the
            batch's (B, T) in front.
    """
    keys = [k for k in outputs if k != "loss" and not k.endswith("_loss")]
    lengths = batch["attention_mask"].sum(1).tolist() if token_outputs else []
    for name in token_outputs:
        found = outputs.get(name)
        if found is None or tuple(found.shape[:2]) != tuple(batch["attention_mask"].shape):
            shape = "missing" if found is None else f"of shape {tuple(found.shape)}"
            raise ValueError(
                f"{owner}.token_outputs names {name!r}: expected a head output of shape "
                f"(B, T, …) = {tuple(batch['attention_mask'].shape)} in front (the batch's attention_mask), "
                f"got one {shape}"
            )

    def row(key: str, i: int) -> torch.Tensor:
        return outputs[key][i, : lengths[i]] if key in token_outputs else outputs[key][i]

    rows = batch["example_index"].tolist()
    return [{"example_index": e, **{k: row(k, i).tolist() for k in keys}} for i, e in enumerate(rows)]


class Head(nn.Module):
    """Layers and loss of a task on top of an encoder (``nn.Module``; built by ``Task.build_head``)."""

    reads_cls_only: bool = False
    """Whether the head reads only ``[CLS]`` (or the pooler) of the last layer; then the encoder
    computes the last block for ``[CLS]`` alone (``cls_only=True``). A property where it depends
    on a setting."""

    reads_pooler: bool = False
    """Whether the head reads the encoder's pooler output (BERT's tanh layer on ``[CLS]``). When it
    does not, ``BertModule`` freezes the pooler: a parameter that takes no part in the loss would
    stop multi-process (DDP) training at its first step."""

    trains_every_parameter: bool = True
    """Whether every parameter of the head takes part in every training batch's loss. False (a
    multi-task head trains one task's layers per batch): under DDP, ``BertModule`` has Lightning's
    DDP strategy find the unused parameters at each step (``find_unused_parameters``); those no
    process used keep no gradient, as in one process, so the optimizer leaves them as it would."""

    reads_padding: bool = False
    """Whether the head reads hidden states at padding positions (a loss over them, as
    transformers' QA loss); then the encoder runs padded whatever ``model.unpad`` says, so they
    are what the reference computes."""

    token_outputs: tuple[str, ...] = ()
    """The decoded outputs that run over the tokens, (B, T, …) with T the batch's length
    (per-token ``logits``, a tag per token): the default ``feature_predictions`` gives each feature its
    own tokens of them (its ``attention_mask``), not the batch's padding. An output not named is
    given whole, row by row: a (B, C) output cannot be told from a (B, T) one by its shape."""

    def attach(self, encoder: nn.Module) -> None:
        """Called once after the head is built, with the encoder, for a head that shares its
        weights (an MLM decoder tied to the word embeddings). Keep no submodule reference: the
        encoder's parameters must stay listed once, under ``encoder.``."""

    def encoder_inputs(self, batch: Batch) -> Batch:
        """The batch the encoder reads, made from the loader's (``BertModule`` calls this before
        the encoder, and passes the result on to ``forward``). The default returns it unchanged;
        ELECTRA's head runs its generator here and returns the corrupted ``input_ids``."""
        return batch

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        """Head outputs for a batch; includes ``loss`` (a scalar) when the batch has labels, and
        may include parts named ``*_loss`` (logged too).

        Raises:
            NotImplementedError: a subclass must implement it.
        """
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def decode(self, outputs: dict[str, torch.Tensor], batch: Batch) -> dict[str, torch.Tensor]:
        """The outputs with the head's decisions added, on the device (a CRF's Viterbi path):
        what evaluation metrics and ``feature_predictions`` read. Called on ``forward``'s outputs,
        or on an ONNX graph's (``onnx_outputs``); the default returns them unchanged."""
        return outputs

    def feature_predictions(self, decoded: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        """One batch's decisions as plain Python values (numbers, strings, lists), one dict per
        feature with its ``example_index`` (an int), from ``decode``'s outputs: what
        ``Task.predict`` reads. The last step that reads tensors; what follows runs on Python values.

        The default gives each feature its row of every output but the losses, as lists; of an
        output named in ``token_outputs``, the feature's own tokens only (a (B, T, C) ``logits``
        becomes one list of C floats per token of the feature's ``attention_mask``).

        Raises:
            ValueError: an output named in ``token_outputs`` is missing, or does not have the
                batch's (B, T) in front.
        """
        return feature_rows(decoded, batch, self.token_outputs, type(self).__name__)

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        """Accumulate ``stage`` metrics (``val`` or ``test``) for one batch of decoded outputs,
        usually ``self.metrics[stage].update(…)``."""

    def compute_metrics(self, stage: str) -> dict[str, torch.Tensor]:
        """Epoch-level metrics for ``stage``, keys without the stage prefix; ``BertModule`` logs
        them as ``{stage}/{key}`` (synchronised across processes by torchmetrics).

        The default computes and then resets ``self.metrics[stage]``: a torchmetrics ``Metric``
        (its value named ``score``, or its dict of values), or a ``MetricCollection`` or
        ``nn.ModuleDict`` of named ones; ``{}`` when the head has no ``metrics`` for the stage.
        """
        metrics = getattr(self, "metrics", None)
        if metrics is None or stage not in metrics:
            return {}
        found = metrics[stage]
        named = found.items() if isinstance(found, (nn.ModuleDict, MetricCollection)) else [("score", found)]
        values: dict[str, torch.Tensor] = {}
        for name, metric in named:
            value = metric.compute()
            metric.reset()
            values.update(value if isinstance(value, dict) else {name: value})
        return values

    def distillation_targets(self, outputs: dict[str, torch.Tensor], batch: Batch) -> dict[str, DistillationTarget]:
        """What a student with this head learns from a teacher with the same head (``model.teacher``;
        ``bertkit.training.distillation``): name -> ``(logits, rows)``, ``logits`` (..., C) of
        ``forward``'s outputs and ``rows`` a bool tensor of ``logits.shape[:-1]`` marking the rows
        whose distribution over the last dimension is learned (scored tokens, every sentence …).
        Called with the student's outputs and with the teacher's on the same batch; a class the
        distribution must not reach (padding) holds the lowest value in both. For a cached
        teacher (``model.teacher.cache``, ``bertkit.training.teacher_cache``) ``rows`` must follow
        from each feature alone, and a last dimension that is not the classes runs over the
        positions (question answering's start and end). Empty (the default): the head takes no
        part, and a run with a teacher says so."""
        return {}

    def parameter_settings(self) -> list[tuple[list[nn.Parameter], dict[str, float]]]:
        """Parameters of this head that need optimizer settings of their own (``lr``,
        ``weight_decay``), e.g. a CRF's transition scores; each list becomes one AdamW group
        without weight decay unless it says so, and the schedule applies to it as to the rest."""
        return []


class TransformersExport:
    """What a head declares when a ``transformers`` class computes what it computes: ``bertkit
    export`` then writes that class's checkpoint (the encoder's weights, this head's under the
    class's key names, its ``config.json`` entries) and an ONNX graph. Optional: a head that
    exports nothing implements nothing of it, and its export is the encoder alone. A head declares
    it as a base class (``class MyHead(Head, TransformersExport)``), or has any of its members
    itself; ``exported`` gives each member, the head's own or this default.
    """

    onnx_outputs: tuple[str, ...] = ()
    """Keys of ``forward``'s output that an ONNX export returns (logits per example or token);
    empty: the head has no ONNX export."""

    hf_architecture: str = "BertModel"
    """The ``transformers`` class whose checkpoint ``hf_state_dict`` completes (``config.json``'s
    ``architectures``), named for BERT; the encoder family names its own (``EncoderFamily.hf_architecture``)."""

    hf_tags_words: bool = False
    """True for a head that tags words (transformers' token classification): the export's
    ``tokenizer.json`` then splits text into the words bertkit's taggers read (``split_words``),
    so that a pipeline groups a URL's or an e-mail address's pieces into one word
    (``BertTokenizer.save(words=True)``)."""

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """This head's tensors under ``hf_architecture``'s key names (``cls.*`` for
        ``BertForPreTraining``, ``classifier.*`` …): its export key map. Empty when no
        ``transformers`` class computes what this head computes (the export is then the encoder
        alone, with a warning)."""
        return {}

    def hf_config(self) -> dict[str, Any]:
        """``config.json`` entries ``hf_architecture`` needs (``id2label``, ``problem_type`` …)."""
        return {}

    def hf_files(self) -> dict[str, str]:
        """Files written beside ``config.json`` for ``transformers`` users (name -> text): e.g. a
        pipeline class that ``hf_config``'s ``custom_pipelines`` names, which ``pipeline(...,
        trust_remote_code=True)`` runs. Such a file must import neither bertkit nor the plugin."""
        return {}

    def hf_notes(self) -> str:
        """What a ``transformers`` user of the export must know that its class does not say:
        layers it leaves out or decoding it does otherwise (Markdown; the export's model card
        prints it under "Notes"). Empty: ``hf_architecture`` computes what the head computes."""
        return ""

    def hf_calibrate(self, validation: Iterable[tuple[dict[str, torch.Tensor], Batch]]) -> str:
        """Adjust this head for ``hf_architecture``'s own decoding before ``bertkit export`` writes
        it, without changing what bertkit decodes (e.g. a CRF tagger fitting its emission biases
        for transformers' plain ``token-classification`` pipeline).

        Args:
            validation: the head's outputs (``forward``'s, at the trained weights, in eval mode)
                and each batch (with ``labels``) over the run's validation set, computed as it is
                iterated: the default reads none of it, so an export runs nothing for it.

        Returns:
            what it changed, measured, for the export's output and its model card ("" for
            nothing, the default).
        """
        return ""


EXPORT_MEMBERS = (
    "onnx_outputs", "hf_architecture", "hf_tags_words", "hf_state_dict", "hf_config", "hf_files", "hf_notes",
    "hf_calibrate",
)  # fmt: skip


def calibrates(head: Head) -> bool:
    """Whether ``head`` has an ``hf_calibrate`` of its own (``TransformersExport``'s reads nothing)."""
    found = exported(head).hf_calibrate
    return getattr(found, "__func__", found) is not TransformersExport.hf_calibrate


def exported(head: Head) -> TransformersExport:
    """``head``'s export members (``TransformersExport``): the head itself where it declares the
    protocol, otherwise each member it has, and the defaults (nothing exported) for the rest."""
    if isinstance(head, TransformersExport):
        return head
    view = TransformersExport()
    for name in EXPORT_MEMBERS:
        if hasattr(head, name):
            setattr(view, name, getattr(head, name))
    return view
