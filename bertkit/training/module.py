"""``BertModule``: the LightningModule holding the encoder, its tokenizer, a task and its head.

Optimisation follows BERT (Devlin et al. 2019, §A.2; google-research/bert optimization.py):
AdamW with weight decay 0.01 on all weights but biases and LayerNorm (chosen by shape, see
``decays``), linear warm-up then linear
decay to zero over the run; gradient clipping (1.0) is the trainer's ``gradient_clip_val``, applied
by ``configure_gradient_clipping`` so that it also works with the fused AdamW under mixed precision.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.strategies import DDPStrategy
from pytorch_lightning.utilities import rank_zero_warn
from torch import nn
from typing_extensions import override

from bertkit.model.adapters import Adapter, without_adapters
from bertkit.model.bert import EncoderOutput
from bertkit.model.config import MAX_LENGTH, MIN_LENGTH, Preset
from bertkit.model.families import EncoderFamily, encoder_family, family_of
from bertkit.model.hub import pinned
from bertkit.model.pretrained import load_tokenizer, resolve_pretrained
from bertkit.model.tokenizer import BertTokenizer
from bertkit.model.unpadded import given_layout
from bertkit.model.weights import save_encoder
from bertkit.plugins import registered
from bertkit.tasks.head import Head, TransformersExport, exported
from bertkit.tasks.task import Batch, Task, predict_batch, task_from_spec
from bertkit.training.adapted import EncoderAdapters, fill_base_weights
from bertkit.training.distillation import Distillation, Teacher
from bertkit.training.nonfinite import NonFiniteLoss
from bertkit.training.objective import TrainingObjective
from bertkit.training.rng import rng_states, set_rng_states
from bertkit.utils.choices import check_int
from bertkit.utils.deprecation import warn_deprecated
from bertkit.utils.io import atomic_path
from bertkit.utils.precision import check_float32, native_bf16

ENCODER_KEYS = ("input_ids", "attention_mask", "token_type_ids")

CompileMode = Literal["reduce-overhead"]
"""``model.compile``'s named mode beside true/false (``torch.compile``'s mode of that name)."""

STATIC_RECOMPILE_LIMIT = 64
"""Dynamo's recompile limit under ``model.compile reduce-overhead`` (its default is 8): each
block is compiled once per batch size, bucketed length, grad mode and query length (a
classifier's last block computes ``[CLS]`` alone), a few dozen graphs in a run with buckets,
where the default would run all past the eighth eagerly."""


def decays(parameter: torch.Tensor) -> bool:
    """Whether weight decay applies: to matrices (linear and embedding weights), not to vectors.

    google-research/bert exempts biases and LayerNorm by name; in BERT those are exactly the
    1-D parameters, and choosing by shape (as nanoGPT and MosaicML do) also exempts the norms of an
    encoder that names them otherwise (``norm1``, ``ln_f``) instead of silently decaying them.
    """
    return parameter.ndim >= 2


class BertModule(pl.LightningModule):
    """An encoder (BERT, or another registered family) with a task and its head.

    Args:
        task: the task (a ``Task`` subclass, usually given by ``class_path`` in a recipe): its
            files, labels and records; it builds the head (``Task.build_head``) on the encoder.
        pretrained: a Hugging Face format directory, a registered name (``bertkit plugins`` lists
            them) or a Hugging Face Hub id, ``org/name`` or ``org/name@revision``
            (``bertkit.model.hub``: its cache, ``HF_HUB_OFFLINE``, ``HF_TOKEN``); its weights,
            config and tokenizer are used. A Hub id is recorded with the commit it resolved to
            (``org/name@<commit>``) in ``hparams`` and so in checkpoints and exports. None builds
            a fresh encoder from ``preset`` and ``vocab_file``.
        encoder: the encoder family (``bertkit.model.families``): a registered name (``bert``,
            ``electra`` …; ``bertkit plugins`` lists them) or an ``EncoderFamily`` class path.
            None: the ``model_type`` of the pretrained directory's ``config.json``, ``bert`` for
            a fresh encoder.
        preset: size of a fresh encoder: tiny, mini, small, medium, base or large.
        vocab_file: the tokenizer of a fresh encoder: ``vocab.txt``, a directory with a
            tokenizer, or a registered model name (its tokenizer only, not its weights).
        lowercase: lower-case input of a fresh encoder's tokenizer.
        max_length: tokens per feature the model reads, specials included (at most the encoder's
            positions, ``max_position_embeddings``): the model's input setting, saved with it, so
            that ``test``, ``predict``, ``serve`` and an export read input as training did
            (``bertkit fit`` gives it to the data module; a recipe's ``data.max_length`` is
            release 0.1's place). Default ``MAX_LENGTH`` (128, BERT's length for 90 % of its
            pre-training steps, Devlin et al. 2019, §A.2).
        learning_rate: peak learning rate (after warm-up).
        weight_decay: AdamW decoupled weight decay (on matrices; not on biases or norms).
        warmup_ratio: fraction of all optimizer steps spent warming up linearly from 0.
        adam_epsilon: AdamW epsilon.
        adam_betas: AdamW (beta1, beta2).
        unpad: run the encoder on the real tokens only (``BertModel(unpad=True)``; same results,
            no work spent on padding); False runs it on the padded batch.
        attention_dropout: override the encoder config's ``attention_probs_dropout_prob`` (BERT:
            0.1). 0 lets training on a CUDA GPU in bf16/fp16 use FlashAttention over the unpadded
            tokens (``torch.nn.attention.varlen``, which has no dropout; MosaicBERT and ModernBERT
            train without attention dropout); with dropout, training attention runs padded.
        compile: compile each encoder block with ``torch.compile(dynamic=True)`` (fuses the
            element-wise work around the matrix products; the first steps of each new shape are
            slow while it compiles). ``reduce-overhead``: ``torch.compile(mode="reduce-overhead",
            dynamic=False)``, which on a CUDA GPU records each block's kernels of a batch shape
            once as a CUDA graph and then replays them with one launch (PyTorch's CUDA graph
            trees; elsewhere it compiles without graphs); it needs the padded encoder (``unpad``
            false: the unpadded token count changes every batch) and few batch shapes
            (``data.pad_to_multiple_of``); it raises dynamo's recompile limit to
            ``STATIC_RECOMPILE_LIMIT``. State-dict keys are unchanged.
        int8: int8 inference is a callback now, ``bertkit.Int8`` (``bertkit validate|test|predict
            --int8 true``): True is an error that says so; False, which earlier checkpoints
            stored, is read and ignored.
        num_layers: keep the encoder's first N blocks only (a smaller model that starts from a
            pre-trained one's lower layers, such as a student for ``teacher``: DistilBERT, Sanh et
            al. 2019, initialised its student from its teacher's layers); None keeps them all.
        adapter: train LoRA adapters on the encoder instead of its weights (``Adapter``: ``r``,
            ``alpha``, ``dropout``, ``target_modules``; the ``lora`` extra, peft); the head trains
            fully, the encoder's other weights (its pooler too) stay frozen. The targets are
            checked here; the layers go on in ``configure_model`` (Lightning's hook for model
            transforms, which ``fit``/``test``/``load_from_checkpoint`` call). Checkpoints then hold
            the adapters and the head only, with a fingerprint of the base weights, which come
            from ``pretrained`` again when a checkpoint is read; ``save_pretrained`` writes the
            merged model.
        teacher: learn from a trained model's soft targets as well as from the labels
            (``bertkit.training.distillation.Teacher``: ``path``, ``temperature``, ``alpha``;
            Hinton et al. 2015): a checkpoint or export folder of the same task and vocabulary,
            read when ``fit`` starts, frozen and no part of this model's checkpoints. A recipe's
            shortcut for the ``Distillation`` callback with these settings
            (``configure_callbacks``), which ``trainer.callbacks`` may hold instead.
        head: release 0.1's name of ``task`` (a recipe's ``model.head``); deprecated.

    Raises:
        ValueError: no task, or a setting outside its range.
    """

    def __init__(
        self,
        task: Task | None = None,
        pretrained: str | None = "all-MiniLM-L6-v2",
        encoder: str | None = None,
        preset: Preset | None = None,
        vocab_file: str | None = None,
        lowercase: bool = True,
        max_length: int = MAX_LENGTH,
        learning_rate: float = 5e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        adam_epsilon: float = 1e-8,
        adam_betas: tuple[float, float] = (0.9, 0.999),
        unpad: bool = True,
        attention_dropout: float | None = None,
        compile: bool | CompileMode = False,
        int8: bool = False,
        num_layers: int | None = None,
        adapter: Adapter | None = None,
        teacher: Teacher | None = None,
        head: Task | None = None,
    ) -> None:
        super().__init__()
        task = _the_task(task, head)
        if int8:
            raise ValueError(
                "model.int8 moved: pass --int8 true to bertkit validate, test or predict "
                "(in Python: Trainer(callbacks=[bertkit.Int8()]))"
            )
        self.save_hyperparameters(ignore=["task", "head", "adapter", "teacher", "int8"])
        teacher = Teacher(**teacher) if isinstance(teacher, dict) else teacher  # a checkpoint's plain values
        self.hparams["teacher"] = asdict(teacher) if teacher is not None else None
        self._objectives: list[TrainingObjective] = []
        self._nonfinite = NonFiniteLoss()  # a training loss that was not finite (on the device)
        self._step_losses: dict[str, torch.Tensor] = {}  # this step's, read for progress_metrics
        self._progress: dict[str, float] = {}
        self.hparams["task"] = task.spec()  # plain values only: checkpoints load with weights_only=True
        check_float32(learning_rate, "model.learning_rate", low=0.0)  # 0 is allowed: a fit that trains nothing
        check_float32(weight_decay, "model.weight_decay", low=0.0)
        check_float32(adam_epsilon, "model.adam_epsilon", low=0.0, low_open=True)
        check_float32(warmup_ratio, "model.warmup_ratio", low=0.0, high=1.0, high_open=True)
        if attention_dropout is not None:
            check_float32(attention_dropout, "model.attention_dropout", low=0.0, high=1.0, high_open=True)
        if compile == "reduce-overhead" and unpad:
            raise ValueError(
                "model.compile reduce-overhead replays one CUDA graph per batch shape, and the unpadded encoder's "
                "token count changes with every batch: set model.unpad false (and data.pad_to_multiple_of, e.g. 32)"
            )
        adapter = Adapter(**adapter) if isinstance(adapter, dict) else adapter  # a checkpoint's plain values
        self.family, self.encoder, self.tokenizer = self._build_encoder(
            pretrained, encoder, preset, vocab_file, lowercase
        )
        check_int(max_length, "model.max_length", MIN_LENGTH, self.encoder.config.max_length)
        if num_layers is not None:
            self._keep_layers(num_layers)
        # checked now (a bad target or a missing peft stops before any trainer starts), put on in configure_model
        self._adapters = EncoderAdapters(adapter, self.encoder, self.family.adapter_targets) if adapter else None
        self.hparams["adapter"] = self._adapters.spec if self._adapters else None
        if attention_dropout is not None:
            self.encoder.set_attention_dropout(attention_dropout)
        if compile:
            options = {"dynamic": True} if compile is True else {"mode": compile, "dynamic": False}
            if compile == "reduce-overhead":
                limit = torch._dynamo.config.recompile_limit
                torch._dynamo.config.recompile_limit = max(limit, STATIC_RECOMPILE_LIMIT)
            for block in self.encoder.blocks:
                block.compile(**options)
        self.__dict__["task"] = task  # plain Python, never a submodule (release 0.1's heads are modules too)
        self.head: Head | None = None
        self._resumed_rng: dict[str, Any] | None = None
        if task.ready:
            self.build_head()

    @property
    def base_fingerprint(self) -> str | None:
        """With ``model.adapter``, the fingerprint of the frozen base weights its adapters train
        over (``bertkit.model.adapters.frozen_fingerprint``; what an adapter checkpoint records);
        None without adapters, or before ``configure_model`` put them on."""
        return self._adapters.fingerprint if self._adapters else None

    def build_head(self) -> None:
        """Build the task's head on the encoder (``Task.build_head``, then ``Head.attach``); the
        model builds it itself once the task is ready, and ``Predictor`` builds the head of an
        export folder whose task has not seen training data (its weights are then read in).

        The head's initial weights are drawn from torch's last seed (``seed_everything``'s), in a
        forked generator: the same head whether it is built at once or after the training data
        is read, and in one process or under DDP (whose start re-seeds the generators)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(torch.initial_seed())
            head = self.task.build_head(self.encoder.config, self.tokenizer)
        head.attach(self.encoder)
        self.head = head
        self._freeze_unread_pooler()
        fresh = getattr(self.encoder, "fresh_weights", "")  # set by pretrained_encoder
        if fresh and head.reads_pooler:
            rank_zero_warn(f"{fresh}: {type(head).__name__} reads them, so they start fresh and train with it")
        self.hparams["task"] = self.task.spec()  # now with what the task learned from data

    def _freeze_unread_pooler(self) -> None:
        """Freeze the encoder's pooler, its adapters included, where the head does not read it:
        outside the loss, its weights would stop DDP at the first step (unused parameters)."""
        pooler = getattr(self.encoder, "pooler", None)
        if pooler is not None and self.head is not None and not self.head.reads_pooler:
            pooler.requires_grad_(False)

    def _find_unused_under_ddp(self) -> None:
        """A head that trains some of its parameters per batch (``Head.trains_every_parameter``)
        under DDP: have the strategy find the unused ones at each step. Lightning reads its DDP
        arguments when it wraps the model, after ``configure_model``; it offers no public setter."""
        strategy = self._trainer.strategy if self._trainer is not None else None
        if self.head is not None and not self.head.trains_every_parameter and isinstance(strategy, DDPStrategy):
            strategy._ddp_kwargs["find_unused_parameters"] = True

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls, checkpoint_path: str | Path, map_location: Any = None, strict: bool | None = None, **kwargs: Any
    ) -> BertModule:
        """Lightning's ``load_from_checkpoint``, after ``bertkit.training.checkpoints.check_checkpoint``: the
        task the file names must be registered or already imported (nothing a checkpoint names is
        imported), and it is read with ``weights_only=True`` whatever torch's default. A checkpoint
        of an earlier release, which saved its input length with the data module's settings,
        gives the model that ``max_length``.

        Raises:
            FileNotFoundError, ValueError: see ``check_checkpoint``.
        """
        from bertkit.training.checkpoints import check_checkpoint, recorded_max_length

        if "://" not in str(checkpoint_path):
            length = recorded_max_length(check_checkpoint(checkpoint_path, None))
            if length is not None:
                kwargs.setdefault("max_length", length)
        kwargs["weights_only"] = True
        return super().load_from_checkpoint(checkpoint_path, map_location=map_location, strict=strict, **kwargs)

    def add_objective(self, objective: TrainingObjective) -> None:
        """Add a term to the training loss (``TrainingObjective``: a callback's, such as
        ``Distillation``): called in a callback's ``setup``, before ``configure_model``, which makes
        the objective's ``modules`` part of this model (trained, and held by its checkpoints while
        it trains) after the head. Validation, test and predict never run it."""
        self._objectives.append(objective)

    @override
    def configure_callbacks(self) -> list[pl.Callback]:
        """``model.teacher``: the ``Distillation`` callback with its settings (a recipe's shortcut
        for adding it to ``trainer.callbacks``; it acts in ``fit`` only)."""
        teacher = self.hparams.get("teacher")
        return [Distillation(**teacher)] if teacher else []

    @override
    def configure_model(self) -> None:
        """Put ``model.adapter``'s LoRA layers on the encoder (once; ``add_adapter``, their initial
        weights drawn from torch's last seed in a forked generator, as the head's; then the base
        weights' fingerprint), build the head of a task that became ready in
        ``datamodule.setup`` (``Task.learn``), then add the modules of the objectives a callback
        added (``add_objective``; the teacher's projection of hidden states,
        ``distill_projection``): all before the optimizer and a checkpoint see the parameters
        (Lightning calls it before either, and ``load_from_checkpoint`` before reading)."""
        if self._adapters is not None and self._adapters.put_on(self.encoder):
            self._freeze_unread_pooler()  # a head built before the adapters froze the pooler without them
        if self.head is None and self.task.ready:
            self.build_head()
        self._find_unused_under_ddp()
        for objective in self._objectives:
            for name, module in objective.modules.items():
                if not hasattr(self, name):
                    self.add_module(name, module)

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Store the random number generators' states (dropout, masking) of every process, so that
        a resumed run continues exactly as the uninterrupted one would (Lightning restores the
        rest). Processes draw different amounts (their batches differ in shape), so each keeps its
        own; every process saves a checkpoint (``Trainer.save_checkpoint`` waits for all), so all
        take part in the gathering."""
        self._nonfinite.check(self.global_step)  # no checkpoint of weights past a bad step's
        checkpoint["rng_states"] = rng_states()
        checkpoint["objective_modules"] = [name for o in self._objectives for name in o.modules]
        if self.base_fingerprint is not None:  # adapters and head only: the base comes from model.pretrained
            self._adapters.strip(checkpoint)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, checkpoint["rng_states"])
            checkpoint["rng_states_per_rank"] = gathered

    @override
    def on_train_start(self) -> None:
        """Restore the generators of a resumed checkpoint here, after the sanity check's loaders
        (which draw from them) and before the first training batch, where the saved run was."""
        if self._resumed_rng is not None:
            set_rng_states(self._resumed_rng)
            self._resumed_rng = None

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Give a task whose head is not built the settings it learned in training
        (``Task.learned``), then build the head; keep the generators' states for ``on_train_start``.

        Raises:
            ValueError: the head was built with other learned settings than the checkpoint's.
        """
        fill_base_weights(checkpoint, self._adapters, self, self.hparams.pretrained)
        for name in checkpoint.get("objective_modules", ["distill_projection"]):  # a training objective's
            if not hasattr(self, name):  # only training with that objective uses its modules
                for key in [k for k in checkpoint["state_dict"] if k.startswith(f"{name}.")]:
                    del checkpoint["state_dict"][key]
        per_rank = checkpoint.get("rng_states_per_rank") or []
        rank = self.trainer.global_rank if self._trainer is not None else 0
        self._resumed_rng = per_rank[rank] if rank < len(per_rank) else checkpoint.get("rng_states")
        stored = checkpoint.get("hyper_parameters", {})
        spec = stored.get("task") or stored.get("head") or {}  # release 0.1 stored the head
        self.task.restore_learned(spec.get("init_args", {}), self.head is not None)
        if self.head is None:
            self.build_head()

    def _keep_layers(self, count: int) -> None:
        """Drop the encoder's blocks after the first ``count`` (``model.num_layers``).

        Raises:
            ValueError: ``count`` is below 1 or above the encoder's number of blocks.
        """
        blocks = self.encoder.blocks
        if not 1 <= count <= len(blocks):
            raise ValueError(f"model.num_layers={count}: expected 1 to {len(blocks)}, the encoder's blocks")
        del blocks[count:]
        self.encoder.config.num_hidden_layers = count

    def _build_encoder(
        self, pretrained: str | None, name: str | None, preset: Preset | None, vocab_file: str | None, lowercase: bool
    ) -> tuple[type[EncoderFamily], nn.Module, BertTokenizer]:
        if pretrained is not None:
            directory = resolve_pretrained(pretrained)
            self.hparams["pretrained"] = pinned(pretrained, directory)
            family = family_of(directory)
            if name is not None and name != family.name:
                raise ValueError(
                    f"model.encoder={name!r}, but model.pretrained={pretrained!r} is a {family.name!r} model "
                    "(its config.json's model_type); leave model.encoder out to use it"
                )
            return family, *family.from_pretrained(directory)
        if preset is None or vocab_file is None:
            raise ValueError("model: give pretrained, or preset and vocab_file for a fresh encoder")
        family = encoder_family(name or "bert")
        tokenizer = load_tokenizer(vocab_file, lowercase, family.tokenizer_class)
        if not Path(vocab_file).expanduser().exists() and vocab_file not in registered("register_pretrained"):
            # a Hub id: recorded with the commit it resolved to, as model.pretrained is
            snapshot = resolve_pretrained(vocab_file, "model.vocab_file", weights=False)
            self.hparams["vocab_file"] = pinned(vocab_file, snapshot)
        return family, family.fresh(preset, tokenizer), tokenizer

    @override
    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        return self.forward_with_states(batch)[0]

    def forward_with_states(
        self, batch: Batch, output_hidden_states: bool = False
    ) -> tuple[dict[str, torch.Tensor], EncoderOutput]:
        """The head's outputs (``forward``'s) and the encoder's output, with every layer's
        (B, T, H) states when ``output_hidden_states`` (the last block then runs on every token,
        not the ``[CLS]`` position alone, for a head that reads only it).

        Raises:
            RuntimeError: the head is not built yet.
        """
        if self.head is None:
            raise RuntimeError(
                f"{type(self.task).__name__} has no head yet: it learns {', '.join(self.task.learned)} "
                "from the training file. Fit first, pass a checkpoint (--ckpt_path), or set them in the recipe."
            )
        if self.hparams.get("compile") == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs are no longer read
        batch = self.head.encoder_inputs(batch)
        inputs = {k: batch[k] for k in ENCODER_KEYS if k in batch}
        unpad = self.hparams.unpad and not self.head.reads_padding
        with given_layout(batch):  # the layout the loader computed, if it did (no device wait)
            encoded = self.encoder(
                **inputs, cls_only=self.head.reads_cls_only and not output_hidden_states, unpad=unpad,
                output_hidden_states=output_hidden_states,
            )  # fmt: skip
        return self.head(encoded, batch), encoded

    def _shared_step(self, batch: Batch, stage: str) -> dict[str, torch.Tensor]:
        objectives = self._objectives if stage == "train" else []
        hidden = any(o.reads_hidden_states for o in objectives)
        outputs, encoded = self.forward_with_states(batch, hidden)
        states = encoded.hidden_states[: len(self.encoder.blocks) + 1] if hidden else None
        for objective in objectives:
            outputs = objective.combine(outputs, batch, self, states if objective.reads_hidden_states else None)
        size = batch["input_ids"].shape[0]
        for key, value in outputs.items():  # the loss, and the parts a head sums it from (mlm_loss …)
            if key == "loss" or key.endswith(("_loss", "/loss")):
                # Evaluation losses are averaged over processes (each process's mean, then their mean).
                # Not on Lightning's progress bar: it reads its values after every step (progress_metrics)
                self.log(f"{stage}/{key}", value, batch_size=size, sync_dist=stage != "train")
                if stage == "train":
                    self._step_losses[f"{stage}/{key}"] = value.detach()
        if stage != "train":
            self.head.update_metrics(stage, self.head.decode(outputs, batch), batch)
        return outputs

    @override
    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        tokens = batch["attention_mask"].sum().float()  # every process's, summed at the epoch's end
        self.log("train/tokens", tokens, reduce_fx="sum", on_step=False, on_epoch=True, sync_dist=True)
        loss = self._shared_step(batch, "train")["loss"]
        self._log_step(self.global_step + 1, per_step=True)  # logged after this batch's optimizer step
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)  # 16-mixed's GradScaler sets found_inf itself
        optimizer = self.trainer.optimizers[0] if self.trainer.optimizers and scaler is None else None
        if not self._nonfinite.update(loss, self.global_step, optimizer):
            self._nonfinite.check(self.global_step)  # this optimizer cannot skip the step on the device
        return loss

    @override
    def on_train_batch_end(self, outputs: Any, batch: Batch, batch_idx: int) -> None:
        """Every ``trainer.log_every_n_steps`` steps, read the non-finite flag (``NonFiniteLoss``)
        and the step's losses for ``progress_metrics``."""
        if self.global_step % max(self.trainer.log_every_n_steps, 1) == 0:
            self._nonfinite.check(self.global_step)
            if self._step_losses:
                values = torch.stack([v.float() for v in self._step_losses.values()]).tolist()
                self._progress = dict(zip(self._step_losses, values, strict=True))

    @property
    def progress_metrics(self) -> dict[str, float]:
        """The training losses (``train/loss`` and its parts) of the last step that was a multiple
        of ``trainer.log_every_n_steps``, for a progress bar to show (bertkit's bars do): reading a
        loss waits for the GPU to finish its step, so they are read when the loggers read them,
        not after every step as Lightning's ``prog_bar`` values are."""
        return dict(self._progress)

    @override
    def on_train_epoch_end(self) -> None:
        self._log_step(self.global_step)  # the epoch's totals (train/tokens) at its last step

    @override
    def on_train_end(self) -> None:
        self._nonfinite.check(self.global_step)

    @override
    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "val")

    @override
    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "test")

    @override
    def predict_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        return predict_batch(self.task, self.head, self(batch), batch)

    def _log_epoch_metrics(self, stage: str) -> None:
        # Metric states a head resets here must be normal tensors: reset under validate's inference
        # mode would make inference tensors that a later fit's validation (no_grad) cannot update.
        with torch.inference_mode(False):
            metrics = self.head.compute_metrics(stage)
        checkpoint = self.trainer.checkpoint_callback
        shown = checkpoint.monitor if checkpoint is not None else None  # the score the run selects on
        for key, value in metrics.items():  # as floats: torchmetrics' MCC returns an integer 1 or 0 at the extremes
            self.log(f"{stage}/{key}", torch.as_tensor(value).float(), prog_bar=f"{stage}/{key}" == shown)
        if stage == "val" and self.trainer.state.fn == "fit":
            self._log_step(self.global_step)

    def _log_step(self, steps: int, per_step: bool = False) -> None:
        """Record metrics at ``steps``, the optimizer steps taken when they were computed: the
        number the console, the fit summary and the checkpoints give (Lightning's loggers would
        record the index of the step's batch, one less). Lightning reads a metric named ``step``
        as the loggers' step and then adds no ``epoch``: it is logged beside it."""
        self.log("step", float(steps), on_step=per_step, on_epoch=not per_step)
        self.log("epoch", float(self.current_epoch), on_step=per_step, on_epoch=not per_step)

    @override
    def on_validation_start(self) -> None:
        if self.trainer.state.fn == "fit":  # no scores of weights past a bad step's
            self._nonfinite.check(self.global_step)

    @override
    def on_fit_start(self) -> None:
        """Say when training on a GPU cannot use FlashAttention (attention dropout is on), and
        when a reduced precision runs on a CPU that emulates it
        (``bertkit.utils.precision.native_bf16``)."""
        self._nonfinite = NonFiniteLoss()
        precision = str(self.trainer.precision)
        if (
            self.device.type == "cpu"
            and precision.startswith(("16", "bf16"))
            and not (precision.startswith("bf16") and native_bf16(self.device))
        ):
            rank_zero_warn(
                f"trainer.precision {precision} on a CPU without native support for it: torch emulates it, "
                "slower than 32-true (bf16 is native on CPUs with AVX512-BF16 or AMX)"
            )
        datamodule = getattr(self.trainer, "datamodule", None)
        if self.hparams.get("compile") == "reduce-overhead" and not getattr(datamodule, "hparams", {}).get(
            "pad_to_multiple_of"
        ):
            rank_zero_warn(
                "model.compile reduce-overhead without data.pad_to_multiple_of: every new batch length is compiled "
                "and recorded anew; --data.pad_to_multiple_of 32 pads the batches to a few lengths"
            )
        dropout = self.encoder.config.attention_probs_dropout_prob
        if self.device.type == "cuda" and self.hparams.unpad and dropout > 0:
            rank_zero_warn(
                f"attention dropout {dropout}: training attention runs padded (FlashAttention varlen has no "
                "dropout); --model.attention_dropout 0.0 uses it. Evaluation uses it either way."
            )

    @override
    def on_validation_epoch_end(self) -> None:
        self._log_epoch_metrics("val")

    @override
    def on_test_epoch_end(self) -> None:
        self._log_epoch_metrics("test")

    def save_pretrained(self, directory: str | Path, merge_adapters: bool = True) -> str:
        """Write a Hugging Face format directory: ``config.json``, ``model.safetensors``,
        ``tokenizer.json`` and ``vocab.txt``, for the ``transformers`` class of the head
        (``TransformersExport.hf_architecture``: ``BertForTokenClassification``, ``…SequenceClassification``,
        ``…QuestionAnswering``, ``…PreTraining``) with its labels in ``id2label``: the trained task
        layer is kept; the encoder family names the class (``ElectraForTokenClassification`` for
        an ELECTRA encoder). A head no such class computes (mean pooling) exports the encoder alone
        (``BertModel``, ``ElectraModel``), with a warning. Any export loads as ``pretrained`` in
        any recipe. The head's ``hf_files`` are written beside them. Files are replaced atomically.
        With ``model.adapter``, the adapters' updates are merged into the encoder's weights
        (``merge_adapters``; False writes the base weights they apply to, as ``save_peft_adapter``
        needs).

        Returns:
            The ``transformers`` class written into ``config.json``'s ``architectures``.
        """
        built = self.head is not None
        export = exported(self.head) if built else TransformersExport()
        head_state = export.hf_state_dict()
        plain = self.encoder.config.to_dict()["architectures"][0]  # BertModel, ElectraModel …
        architecture = self.family.hf_architecture(export.hf_architecture) if head_state else None
        if built and architecture is None and any(True for _ in self.head.parameters()):
            rank_zero_warn(
                f"save_pretrained: {type(self.task).__name__} {dict(self.task.hparams)} has no transformers class "
                f"for a {self.family.name} encoder; {directory} holds the encoder only ({plain}), without the "
                "trained task layer"
            )
        if architecture is None:
            head_state = {}
        extra = {
            field: getattr(self.tokenizer, f"{role}_token_id") for field, role in self.family.hf_token_roles.items()
        }
        extra.update(export.hf_config() if head_state else {})
        # transformers builds its token, span and masked-LM classes without a pooler: export none
        skip = ("pooler.",) if architecture is not None and not self.head.reads_pooler else ()
        renames = self.family.hf_renames(architecture) if architecture is not None else {}
        adapted = self.base_fingerprint is not None
        encoder = without_adapters(self.encoder, merge=merge_adapters) if adapted else self.encoder
        save_encoder(encoder, directory, head_state, architecture or plain, extra, self.family.hf_prefix, skip, renames)
        self.tokenizer.save(directory, self.encoder.config.max_length, words=export.hf_tags_words)
        for name, text in (export.hf_files() if head_state else {}).items():
            with atomic_path(Path(directory) / name) as tmp:
                tmp.write_text(text, encoding="utf-8")
        return architecture or plain

    @override
    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip gradients (the trainer's ``gradient_clip_val``/``_algorithm``), also for a fused AdamW
        under mixed precision, which Lightning refuses to clip.

        bf16-mixed has no loss scaling: the gradients are true gradients and are clipped as they
        are. 16-mixed scales the loss; a fused AdamW would unscale inside its step, after
        clipping, so the gradients are unscaled here first with ``GradScaler.unscale_`` (its
        ``step`` then passes no scale to the fused kernel and still skips steps with inf/NaN).
        """
        if not gradient_clip_val:
            return
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        if scaler is not None and getattr(optimizer, "_step_supports_amp_scaling", False):
            scaler.unscale_(optimizer)  # optimizers without internal unscaling: Lightning did it already
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if gradient_clip_algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val, foreach=True)
        else:
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val, foreach=True)

    @override
    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        own = self.head.parameter_settings()  # e.g. a CRF's learning rate
        taken = {id(p) for params, _ in own for p in params}
        params = [p for p in self.parameters() if p.requires_grad and id(p) not in taken]
        groups = [
            {"params": [p for p in params if decays(p)], "weight_decay": hp.weight_decay},
            {"params": [p for p in params if not decays(p)], "weight_decay": 0.0},
            *({"params": group, "weight_decay": 0.0, **settings} for group, settings in own),
        ]
        fused = params[0].device.type in ("cpu", "cuda")  # one fused kernel per step (transformers' default)
        optimizer = torch.optim.AdamW(
            groups, lr=hp.learning_rate, betas=tuple(hp.adam_betas), eps=hp.adam_epsilon, fused=fused
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = int(hp.warmup_ratio * total)

        def factor(step: int) -> float:  # linear warm-up, then linear decay to 0
            if step < warmup:
                return step / warmup
            return max(0.0, (total - step) / max(1, total - warmup))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _the_task(task: Task | dict | None, head: Task | dict | None) -> Task:
    """The task from ``task``, or from release 0.1's ``head`` (a recipe's ``model.head``, with a
    warning; a checkpoint's stored head spec); a stored spec is rebuilt (``task_from_spec``).

    Raises:
        ValueError: neither or both are given, or a stored spec names no known task.
    """
    if head is not None and task is not None:
        raise ValueError("model.task and model.head: give the task once, as model.task")
    if isinstance(head, Task):
        warn_deprecated(
            "model.head is release 0.1's name: give the task as model.task (class_path and init_args as before)",
            stacklevel=3,
        )
    task = task if task is not None else head
    if task is None:
        raise ValueError("model.task: give the task (its class_path and init_args; `bertkit plugins` lists the tasks)")
    if isinstance(task, dict):  # rebuilt from a checkpoint's hyper-parameters
        return task_from_spec(task, "checkpoint hyper_parameters." + ("head" if head is not None else "task"))
    return task
