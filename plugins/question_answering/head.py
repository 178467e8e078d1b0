"""``AnswerSpanHead``: a start and an end logit per token (BERT's SQuAD layer, Devlin et al.
2019 §4.2-4.3; transformers' ``qa_outputs``), and the SQuAD metrics over whole questions."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from bertkit_plugins.question_answering.metric import SquadScore
from bertkit_plugins.question_answering.postprocess import window_candidates
from torch import nn

from bertkit.api.task import (
    Batch,
    BertConfig,
    DistillationTarget,
    EncoderOutput,
    Head,
    TransformersExport,
    forwarding,
    mean_over_processes,
)

if TYPE_CHECKING:
    from bertkit_plugins.question_answering.readers import QAExample
    from bertkit_plugins.question_answering.task import QuestionAnswering


class AnswerSpanHead(Head, TransformersExport):
    """One linear layer, hidden size -> (start, end), over every token; padding can start or end
    no answer. Metrics answer each question from all of its windows (``QuestionAnswering``) and
    score the answers (``SquadScore``); with ``tune_threshold`` the validation's best null-score
    threshold is kept in a buffer (so in checkpoints) and handed to the task.

    Args:
        task: the task (its settings, its answers from windows).
        config: the encoder's config (``hidden_size``, ``initializer_range``).
    """

    hf_architecture = "BertForQuestionAnswering"
    onnx_outputs = ("start_logits", "end_logits")

    def __init__(self, task: QuestionAnswering, config: BertConfig) -> None:
        super().__init__()
        self.task = [task]  # a list: the task is plain Python, not a submodule
        self.softmax_over_padding = task.hparams.softmax_over_padding
        self.qa_outputs = nn.Linear(config.hidden_size, 2)  # start, end
        nn.init.normal_(self.qa_outputs.weight, std=config.initializer_range)
        nn.init.zeros_(self.qa_outputs.bias)
        # NaN until tuned; a buffer so the tuned value travels in checkpoints.
        self.register_buffer("tuned_threshold", torch.tensor(math.nan, dtype=torch.float64))
        self.register_load_state_dict_post_hook(lambda module, keys: module._share_threshold())
        # Answers are formed from all processes' windows (``_gathered``): no second sync.
        version_2 = task.hparams.version_2_with_negative
        self.metrics = nn.ModuleDict({stage: SquadScore(version_2, sync_on_compute=False) for stage in ("val", "test")})
        self._pending: dict[str, dict[int, tuple[QAExample, list[dict]]]] = {"val": {}, "test": {}}

    @property
    def reads_padding(self) -> bool:  # type: ignore[override]
        return self.softmax_over_padding

    def _share_threshold(self) -> None:
        """Give the task the threshold in the buffer (tuned, or NaN: none)."""
        tuned = float(self.tuned_threshold)
        self.task[0].tuned_threshold = None if math.isnan(tuned) else tuned

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return {f"qa_outputs.{k}": v for k, v in self.qa_outputs.state_dict().items()}

    def forward(self, encoded: EncoderOutput, batch: Batch) -> dict[str, torch.Tensor]:
        """``start_logits`` and ``end_logits`` (B, T), padding at the lowest value; with labels,
        ``loss``."""
        logits = encoded.map_tokens(self.qa_outputs)  # (B, T, 2)
        padding = batch["attention_mask"] == 0
        low = torch.finfo(logits.dtype).min
        start_logits, end_logits = (x.masked_fill(padding, low) for x in logits.unbind(-1))  # (B, T) each
        out = {"start_logits": start_logits, "end_logits": end_logits}
        if "start_positions" in batch:
            starts, ends = batch["start_positions"], batch["end_positions"]
            scored = logits.unbind(-1) if self.softmax_over_padding else (start_logits, end_logits)
            both = F.cross_entropy(scored[0], starts, reduction="sum") + F.cross_entropy(
                scored[1], ends, reduction="sum"
            )  # windows labelled -100 (no usable answer) add nothing: 0, with a gradient, when none has one
            # every process takes this path (an all-reduce of the count under DDP), none waits on the host
            out["loss"] = mean_over_processes(both / 2, (starts != -100).sum(), self.training)
        return out

    def distillation_targets(self, outputs: dict[str, torch.Tensor], batch: Batch) -> dict[str, DistillationTarget]:
        """Each window's distributions of the answer's start and of its end over the positions
        (padding at the lowest value in both models' logits: it gets no probability)."""
        rows = torch.ones(outputs["start_logits"].shape[:-1], dtype=torch.bool, device=outputs["start_logits"].device)
        return {"start_logits": (outputs["start_logits"], rows), "end_logits": (outputs["end_logits"], rows)}

    def feature_predictions(self, decoded: dict[str, torch.Tensor], batch: Batch) -> list[dict[str, Any]]:
        """Per window: ``example_index``, ``null_score`` ([CLS]'s start + end logits) and its best
        ``spans`` ([score, char start, char end], at most the task's ``n_best_size``, each at most
        ``max_answer_length`` tokens; ``window_candidates``)."""
        hp = self.task[0].hparams
        start_logits, end_logits = decoded["start_logits"], decoded["end_logits"]
        scores, starts, ends = window_candidates(
            start_logits, end_logits, batch["may_start"].bool(), batch["may_end"].bool(), hp.n_best_size,
            hp.max_answer_length,
        )  # fmt: skip
        char_start, char_end = batch["char_start"].gather(1, starts), batch["char_end"].gather(1, ends)
        null = (start_logits[:, 0].float() + end_logits[:, 0].float()).tolist()
        windows = []
        for i, (row, a, b) in enumerate(zip(scores.tolist(), char_start.tolist(), char_end.tolist(), strict=True)):
            spans = [[s, x, y] for s, x, y in zip(row, a, b, strict=True) if s > -math.inf]
            windows.append({"example_index": int(batch["example_index"][i]), "null_score": null[i], "spans": spans})
        return windows

    def update_metrics(self, stage: str, outputs: dict[str, torch.Tensor], batch: Batch) -> None:
        pending = self._pending[stage]
        windows = self.feature_predictions(outputs, batch)
        for window, example in zip(windows, batch["example"], strict=True):
            pending.setdefault(window["example_index"], (example, []))[1].append(window)

    def compute_metrics(self, stage: str) -> dict[str, torch.Tensor]:
        """Answer every question seen this epoch (all its windows), then score the answers."""
        task, metric, pending = self.task[0], self.metrics[stage], self._pending[stage]
        spans, diffs, golds = [], [], []
        for example, windows in _gathered(pending).values():
            record = task.answer_record(example, windows)
            spans.append(record["best_span"])
            diff = record.get("null_score_diff")
            diffs.append(math.inf if diff is None else diff)
            golds.append([a.text for a in example.answers])
        pending.clear()
        metric.threshold = task.threshold
        metric.update(spans, diffs, golds)
        scores = metric.compute() if spans else {}
        metric.reset()
        if stage == "val" and task.hparams.tune_threshold and "best_f1_thresh" in scores:
            self.tuned_threshold.fill_(float(scores["best_f1_thresh"]))
            self._share_threshold()
        return {k: v.float() for k, v in scores.items()}


def _gathered(pending: dict[int, tuple[Any, list[dict]]]) -> dict[int, tuple[Any, list[dict]]]:
    """Every process's windows by question, so that each question is answered from all of its
    windows even when they were evaluated on different processes (one process: as it is)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return pending
    shares: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(shares, pending)
    merged: dict[int, tuple[Any, list[dict]]] = {}
    for share in shares:
        for index, (example, windows) in share.items():
            merged.setdefault(index, (example, []))[1].extend(windows)
    return merged


# release 0.1's bertkit_plugins.question_answering.head.QuestionAnsweringHead
__getattr__ = forwarding(__name__, "bertkit_plugins.question_answering.task")
