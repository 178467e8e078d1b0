"""Knowledge distillation (``model.teacher``): a student learns from a trained teacher's soft
targets as well as from the labels (Hinton, Vinyals and Dean 2015, "Distilling the Knowledge in
a Neural Network"): loss = alpha x T² x KL(teacher's softmax(z/T) || student's softmax(z/T)) +
(1 - alpha) x the head's own loss. T² keeps the soft targets' gradients at the scale of the hard
ones' as T changes (Hinton et al. §2). What is distilled is what the head names
(``Head.distillation_targets``): tag distributions of scored tokens, label distributions of
sentences, start and end distributions of answer spans.

The teacher (a ``bertkit fit`` checkpoint or a ``bertkit export`` folder) is frozen, in
evaluation mode (no dropout), computed on the fly on the student's batches, and is no part of the
student: neither its optimizer nor its checkpoints hold it. Student and teacher may differ in
family and size but must share the vocabulary: the teacher reads the student's token ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from bertkit.tasks.loss import mean_over_processes
from bertkit.tasks.task import Batch

if TYPE_CHECKING:
    from bertkit.training.module import BertModule


@dataclass
class Teacher:
    """``model.teacher``: distil a trained model into this one.

    Args:
        path: the teacher: a ``bertkit fit`` checkpoint (``.ckpt``) or a ``bertkit export`` folder,
            of the same task, with the same vocabulary.
        temperature: T, the softmax temperature of both models' logits (2, the default of
            DistilBERT's training code, Sanh et al. 2019; Hinton et al. 2015 use 1 to 20).
        alpha: the soft targets' weight; the labels' loss weighs ``1 - alpha`` (0.5, DistilBERT's
            code's ``alpha_ce`` against its hard loss).

    Raises:
        ValueError: ``temperature`` not positive, or ``alpha`` outside [0, 1].
    """

    path: str
    temperature: float = 2.0
    alpha: float = 0.5

    def __post_init__(self) -> None:
        if not self.temperature > 0 or not 0.0 <= self.alpha <= 1.0:
            raise ValueError(
                f"model.teacher: temperature={self.temperature}, alpha={self.alpha}; expected temperature > 0 and "
                "0 <= alpha <= 1"
            )


def soft_target_loss(
    student: torch.Tensor, teacher: torch.Tensor, rows: torch.Tensor, temperature: float, across: bool = True
) -> torch.Tensor:
    """T² x the mean over ``rows`` of KL(softmax(teacher / T) || softmax(student / T)) over the
    last dimension, the mean taken over every process's rows (``mean_over_processes``).

    Args:
        student, teacher: logits (..., C) of the same shape.
        rows: bool (...), the rows that count.
        temperature: T.
        across: average over processes (training).
    """
    s = student[rows].float() / temperature
    t = teacher[rows].float() / temperature
    total = F.kl_div(s.log_softmax(-1), t.log_softmax(-1), log_target=True, reduction="sum")
    return mean_over_processes(total * temperature**2, rows.sum(), across)


class Distiller:
    """The frozen teacher of a student ``BertModule`` and the combined loss.

    Raises:
        FileNotFoundError, ValueError: the teacher cannot be read (``load_trained``), is of
            another task, or has another vocabulary (both named).
    """

    def __init__(self, spec: Teacher, student: BertModule) -> None:
        from bertkit.training.trained import load_trained

        devices = [student.device.index or 0] if student.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # building it draws random initial weights: not the run's draws
            teacher, _ = load_trained(spec.path, str(student.device))
        mine, theirs = student.task.spec()["class_path"], teacher.task.spec()["class_path"]
        if mine != theirs:
            raise ValueError(f"model.teacher {spec.path}: a {theirs} model, but the student's task is {mine}")
        if teacher.tokenizer.vocab_sha256() != student.tokenizer.vocab_sha256():
            raise ValueError(
                f"model.teacher {spec.path}: its vocabulary ({teacher.tokenizer.vocab_size} tokens, "
                f"{teacher.hparams.get('pretrained') or teacher.hparams.get('vocab_file')}) is not the student's "
                f"({student.tokenizer.vocab_size} tokens, {student.hparams.get('pretrained') or student.hparams.get('vocab_file')}): "
                "the teacher reads the student's token ids, so both need one tokenizer"
            )
        teacher.requires_grad_(False)
        self.model, self.spec = teacher.eval(), spec

    def combine(self, outputs: dict[str, torch.Tensor], batch: Batch, student: BertModule) -> dict[str, Any]:
        """The student's training outputs with ``loss`` = alpha x soft + (1 - alpha) x hard (soft:
        the mean of ``soft_target_loss`` over the head's targets), and the parts ``hard_loss`` and
        ``distill_loss`` (logged as ``train/…``).

        Raises:
            ValueError: the head takes no part (``Head.distillation_targets`` is empty).
        """
        mine = student.head.distillation_targets(outputs, batch)
        if not mine:
            raise ValueError(
                f"model.teacher: {type(student.head).__name__} names no distillation_targets, so it cannot learn "
                "from a teacher"
            )
        with torch.no_grad():
            theirs = self.model.head.distillation_targets(self.model(batch), batch)
        soft = sum(
            soft_target_loss(logits, theirs[name][0], rows, self.spec.temperature)
            for name, (logits, rows) in mine.items()
        ) / len(mine)  # the mean over targets, as QA's loss means its start and end losses
        hard, alpha = outputs["loss"], self.spec.alpha
        return {**outputs, "loss": alpha * soft + (1 - alpha) * hard, "hard_loss": hard, "distill_loss": soft}
