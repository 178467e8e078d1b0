"""Knowledge distillation (the ``Distillation`` callback, or a recipe's ``model.teacher``): a
student learns from a trained teacher's soft targets as well as from the labels (Hinton, Vinyals and Dean 2015, "Distilling the Knowledge in
a Neural Network"): loss = alpha x T² x KL(teacher's softmax(z/T) || student's softmax(z/T)) +
(1 - alpha) x the head's own loss. T² keeps the soft targets' gradients at the scale of the hard
ones' as T changes (Hinton et al. §2). What is distilled is what the head names
(``Head.distillation_targets``): tag distributions of scored tokens, label distributions of
sentences, start and end distributions of answer spans. With ``hidden_weight`` the student's
hidden states also learn the teacher's (TinyBERT, Jiao et al. 2020, "TinyBERT: Distilling BERT
for Natural Language Understanding", §3.1: the mean squared error between the student's states,
through a learned projection W_h where the widths differ, and the teacher's, student layer m
matched to teacher layer g(m) = m x N / M, the embeddings to the embeddings).

The teacher (a ``bertkit fit`` checkpoint or a ``bertkit export`` folder) is frozen, in
evaluation mode (no dropout), computed on the fly on the student's batches or once for every
training feature before the first step (``cache``, ``bertkit.training.teacher_cache``), and is
no part of the student: neither its optimizer nor its checkpoints hold it. Student and teacher may differ in
family and size but must share the vocabulary: the teacher reads the student's token ids.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.utilities import rank_zero_info
from torch.utils.data import DataLoader, IterableDataset

from bertkit.tasks.loss import mean_over_processes
from bertkit.tasks.task import Batch
from bertkit.training.teacher_cache import TeacherTargets, cached_targets
from bertkit.training.trained import load_trained
from bertkit.utils.precision import check_float32

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
        cache: run the teacher once over the training features before the first step and look
            its targets up in every step (``bertkit.training.teacher_cache``; written to
            ``$BERTKIT_CACHE/teacher`` and read by later runs of the same teacher on the same
            data), instead of running it on every batch. Faster from the second epoch on
            (the Distillation page measures it); not with streamed training data, nor with
            ``hidden_weight`` (the hidden states are not cached: the teacher runs anyway).
        hidden_weight: beta, the weight of TinyBERT's hidden-state loss added to the loss (0: none).
            TinyBERT weighs its layer losses 1 in its intermediate-layer stage; its public
            code's task-distillation stage trains the states first, then the predictions.

    Raises:
        ValueError: ``temperature`` not positive, or ``alpha`` outside [0, 1].
    """

    path: str
    temperature: float = 2.0
    alpha: float = 0.5
    cache: bool = False
    hidden_weight: float = 0.0

    def __post_init__(self) -> None:
        check_float32(self.temperature, "model.teacher.temperature", low=0.0, low_open=True)
        check_float32(self.alpha, "model.teacher.alpha", low=0.0, high=1.0)
        check_float32(self.hidden_weight, "model.teacher.hidden_weight", low=0.0)
        if self.cache and self.hidden_weight > 0:
            raise ValueError(
                "model.teacher: cache with hidden_weight > 0: the hidden states are not cached, so the teacher runs on "
                "every batch anyway; leave one out"
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


def matched_layers(student: int, teacher: int) -> list[tuple[int, int]]:
    """TinyBERT's uniform mapping: (m, g(m)) for m = 0 … M, g(m) = round(m x N / M), 0 being the
    embeddings (M student blocks, N teacher blocks; Jiao et al. 2020, §3.1 and §4.2)."""
    return [(m, round(m * teacher / student)) for m in range(student + 1)]


def hidden_state_loss(
    student: tuple[torch.Tensor, ...],
    teacher: tuple[torch.Tensor, ...],
    attention_mask: torch.Tensor,
    projection: torch.nn.Module | None,
    across: bool = True,
) -> torch.Tensor:
    """TinyBERT's hidden-state loss: the mean over the matched layers (``matched_layers``) of the
    mean squared error over real tokens and the teacher's width between ``projection`` (W_h;
    None: the widths are equal) of the student's states and the teacher's.

    Args:
        student, teacher: M + 1 and N + 1 tensors (B, T, H_s) and (B, T, H_t), the embeddings
            first (``EncoderOutput.hidden_states``, cut to the blocks).
        attention_mask: (B, T), 1 for real tokens.
        across: average over processes (``mean_over_processes``).
    """
    real = attention_mask.bool()
    pairs = matched_layers(len(student) - 1, len(teacher) - 1)
    total = sum(
        F.mse_loss(
            (projection(student[m][real]) if projection is not None else student[m][real]).float(),
            teacher[n][real].float(),
            reduction="sum",
        )
        for m, n in pairs
    )
    return mean_over_processes(total, real.sum() * teacher[0].shape[-1] * len(pairs), across)


class Distillation(pl.Callback):
    """Distil a trained model into the one ``fit`` trains: a Lightning callback (in a recipe's
    ``trainer.callbacks``, or made by ``model.teacher``) that, when ``fit`` sets up, reads the
    teacher and adds its loss to the student's (``BertModule.add_objective``); it moves the
    teacher to the student's device when fitting starts, and with ``cache`` computes its targets
    before the first step. Validation, test and predict are the student's alone.

    Args:
        path, temperature, alpha, cache, hidden_weight: as ``Teacher``'s.

    Raises:
        ValueError: see ``Teacher`` (at construction) and ``Distiller`` (when ``fit`` sets up).
    """

    def __init__(
        self, path: str, temperature: float = 2.0, alpha: float = 0.5, cache: bool = False, hidden_weight: float = 0.0
    ) -> None:
        self.spec = Teacher(path, temperature, alpha, cache, hidden_weight)
        self.distiller: Distiller | None = None

    def setup(self, trainer: pl.Trainer, pl_module: BertModule, stage: str) -> None:
        if stage == "fit" and self.distiller is None:
            self.distiller = Distiller(self.spec, pl_module)
            pl_module.add_objective(self.distiller)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: BertModule) -> None:
        if self.distiller is not None:
            self.distiller.model.to(pl_module.device)

    def on_train_start(self, trainer: pl.Trainer, pl_module: BertModule) -> None:
        if self.distiller is not None and self.spec.cache:
            self.distiller.cache_targets(trainer.train_dataloader)


class Distiller:
    """The frozen teacher of a student ``BertModule`` and the combined loss: a
    ``TrainingObjective`` (its ``modules``: the projection of hidden states,
    ``distill_projection``, where ``hidden_weight`` is set and the widths differ).

    Raises:
        FileNotFoundError, ValueError: the teacher cannot be read (``load_trained``), is of
            another task, or has another vocabulary (both named).
    """

    def __init__(self, spec: Teacher, student: BertModule) -> None:
        devices = [student.device.index or 0] if student.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # building it draws random initial weights: not the run's draws
            teacher, _ = load_trained(spec.path, str(student.device), type(student))
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
        self.cache: TeacherTargets | None = None
        self.projection: torch.nn.Linear | None = None
        widths = (student.encoder.config.hidden_size, teacher.encoder.config.hidden_size)
        if spec.hidden_weight > 0 and widths[0] != widths[1]:
            with torch.random.fork_rng(devices=devices):  # as the head: the run's own draws stay where they are
                torch.manual_seed(torch.initial_seed())
                self.projection = torch.nn.Linear(*widths)  # TinyBERT's W_h (its code's fit_dense: with a bias)
        self.reads_hidden_states = spec.hidden_weight > 0
        self.modules = {"distill_projection": self.projection} if self.projection is not None else {}

    def cache_targets(self, loader: DataLoader) -> None:
        """Compute (or read) the teacher's targets for every feature of the training ``loader``
        (``model.teacher.cache``), saying which and how long it took.

        Raises:
            ValueError: streamed training data (litdata), which is read once, in its own order.
        """
        if isinstance(loader.dataset, IterableDataset):
            raise ValueError(
                "model.teacher.cache: the training data is streamed (read in litdata's order, never whole); "
                "leave the cache out to run the teacher on each batch"
            )
        started = time.monotonic()
        self.cache, path, read = cached_targets(self.model, self.spec.path, loader.dataset, loader.collate_fn)
        rank_zero_info(
            f"model.teacher.cache: the teacher's targets for {len(self.cache):,} training features "
            f"{'read from' if read else 'computed and written to'} {path} in {time.monotonic() - started:.1f} s"
        )

    def combine(
        self,
        outputs: dict[str, torch.Tensor],
        batch: Batch,
        student: BertModule,
        states: tuple[torch.Tensor, ...] | None = None,
    ) -> dict[str, Any]:
        """The student's training outputs with ``loss`` = alpha x soft + (1 - alpha) x hard (soft:
        the mean of ``soft_target_loss`` over the head's targets) [+ hidden_weight x
        ``hidden_state_loss`` of the student's ``states``, embeddings first, one per block],
        and the parts ``hard_loss``, ``distill_loss`` [and ``hidden_loss``] (logged as ``train/…``).

        Raises:
            ValueError: the head takes no part (``Head.distillation_targets`` is empty).
        """
        mine = student.head.distillation_targets(outputs, batch)
        if not mine:
            raise ValueError(
                f"model.teacher: {type(student.head).__name__} names no distillation_targets, so it cannot learn "
                "from a teacher"
            )
        if self.cache is not None:
            theirs = self.cache.targets(mine, batch)
        else:
            with torch.no_grad():
                taught, encoded = self.model.forward_with_states(batch, states is not None)
                theirs = self.model.head.distillation_targets(taught, batch)
        soft = sum(
            soft_target_loss(logits, theirs[name][0], rows, self.spec.temperature)
            for name, (logits, rows) in mine.items()
        ) / len(mine)  # the mean over targets, as QA's loss means its start and end losses
        hard, alpha = outputs["loss"], self.spec.alpha
        combined = {**outputs, "loss": alpha * soft + (1 - alpha) * hard, "hard_loss": hard, "distill_loss": soft}
        if states is not None:
            blocks = len(self.model.encoder.blocks) + 1  # a family may add a last state (ModernBERT's final norm)
            hidden = hidden_state_loss(states, encoded.hidden_states[:blocks], batch["attention_mask"], self.projection)
            combined.update(loss=combined["loss"] + self.spec.hidden_weight * hidden, hidden_loss=hidden)
        return combined
