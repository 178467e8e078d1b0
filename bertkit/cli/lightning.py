"""``BertkitCLI``: LightningCLI as ``bertkit fit|validate|test|predict`` runs it (imported by
``bertkit.cli.main`` only for those commands: Lightning takes seconds to import)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning import Callback, LightningModule, Trainer
from pytorch_lightning.callbacks import BasePredictionWriter
from pytorch_lightning.cli import LightningCLI
from pytorch_lightning.strategies.launchers import _MultiProcessingLauncher
from pytorch_lightning.utilities.exceptions import SIGTERMException
from typing_extensions import override

from bertkit.cli.guide import config_files, last_task_key
from bertkit.data.datamodule import BertDataModule
from bertkit.inference.layers import Int8, Prepacked
from bertkit.training.checkpoints import (
    AtomicCheckpointIO,
    check_checkpoint,
    load_checkpoint,
    newest_last,
    recorded_best,
    refuse_changed_recipe,
    stored_task,
)
from bertkit.training.module import BertModule
from bertkit.training.progress import console_callbacks
from bertkit.training.run_folder import NothingDone, claim, place_outputs, release_all, write_scores
from bertkit.training.summary import fit_summary, options
from bertkit.training.trackers import flat_settings, log_settings
from bertkit.utils.deprecation import warn_deprecated


class BertkitCLI(LightningCLI):
    """LightningCLI with a ``plugins`` key, one run folder (``bertkit.training.run_folder``),
    ``--ckpt_path best|last`` across processes, atomic checkpoints, and a summary with plots when
    ``fit`` ends.

    Args:
        recipe_args: the command line (for the next commands the summary suggests).
    """

    def __init__(self, *args: Any, recipe_args: list[str] | None = None, **kwargs: Any) -> None:
        self.recipe_args = recipe_args if recipe_args is not None else list(kwargs.get("args") or sys.argv[1:])
        super().__init__(*args, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:
        """Lightning's subcommands, or while the parser is built (``_add_subcommands``) the one the
        command line names."""
        every = LightningCLI.subcommands()
        only = getattr(self, "_only_subcommand", None)
        return {only: every[only]} if only in every else every

    @override
    def _add_subcommands(self, parser: Any, **kwargs: Any) -> None:
        """Build the parser of the subcommand the command line names only: Lightning builds one for
        each of fit, validate, test and predict, and reading their signatures took 0.5 s of a
        tiny run's 3.7 s."""
        self._only_subcommand = self.recipe_args[0] if self.recipe_args else None
        try:
            super()._add_subcommands(parser, **kwargs)
        finally:
            self._only_subcommand = None

    @override
    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        self.datamodule.attach(self.model)  # the model's input settings: max_length
        trainer = super().instantiate_trainer(**kwargs)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer

    @override
    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Trainer:
        given = config.get("callbacks") or []
        given = given if isinstance(given, list) else [given]
        if self.subcommand not in (None, "fit"):
            self.save_config_callback = None  # the run's config.yaml is fit's; scores name their recipes
        extra = console_callbacks(
            [*given, *callbacks], config.get("enable_progress_bar"), config.get("enable_model_summary")
        )
        if self.subcommand != "fit":  # validate, test, predict, or a notebook's trainer (compose)
            extra += [Int8()] if self._get(self.config, "int8") else []
            extra.append(Prepacked())
        self.work = WorkDone()
        return super()._instantiate_trainer(config, [*callbacks, *extra, self.work])

    @override
    def before_instantiate_classes(self) -> None:
        model = self._get(self.config, "model")
        if model.get("task") is not None and model.get("head") is not None:  # an overlay of the other release
            model["task"], model["head"] = model[last_task_key(self.recipe_args)], None
        place_outputs(self._get(self.config, "trainer"), self.subcommand)
        data = self._get(self.config, "data")
        if data.get("max_length") is not None:  # release 0.1's place of the model's input length
            warn_deprecated(
                f"data.max_length is release 0.1's place of model.max_length (the model owns its input length): "
                f"give model.max_length {data['max_length']} instead"
            )
            model["max_length"] = data["max_length"]
        if self.subcommand == "fit" and self._get(self.config, "int8"):
            raise ValueError(
                "--int8 true is for validate, test and predict (int8 layers have no gradient): leave it out to fit"
            )
        if self.subcommand is not None:  # missing data files are named before the model is built
            BertDataModule(**{k: v for k, v in data.items() if k != "__path__"}).check_files(self.subcommand)

    def add_arguments_to_parser(self, parser: Any) -> None:
        # The data module reads and featurizes with the model's task and tokenizer, and budgets
        # tokens as the model's encoder runs (unpadded or not): linked once the model is built.
        for target, source in (("task", "task"), ("tokenizer", "tokenizer"), ("unpadded", "hparams")):
            parser.link_arguments("model", f"data.{target}", compute_fn=_part(source), apply_on="instantiate")
        parser.add_argument(
            "--plugins", type=list[str], default=[], help="Plugin modules to import before parsing (by dotted name)."
        )
        parser.add_argument(
            "--int8",
            type=bool,
            default=False,
            help="validate, test, predict: the encoder's linear layers in int8 on the CPU (bertkit.Int8); "
            "test measures the score it changes.",
        )
        parser.add_argument(
            "--overwrite",
            type=bool,
            default=False,
            help="fit: start a new run over the checkpoints of an earlier run in the run folder (replacing them).",
        )

    @override
    def _parse_ckpt_path(self) -> None:
        """LightningCLI takes a ``--ckpt_path`` file's hyper-parameters as the model's settings:
        check first (``check_checkpoint``) that it is a readable checkpoint of the recipe's task,
        so that parsing them imports nothing a checkpoint names and never swaps the task. ``fit``
        keeps the recipe's settings and compares them with the checkpoint's (``before_fit``);
        ``best``/``last`` are checked once resolved (``_resolve_ckpt_path``)."""
        subcommand = self.config.get("subcommand")
        path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if subcommand == "fit" or path in (None, "best", "last", "hpc", "registry"):
            return
        model = self.config[subcommand].get("model", {})
        task = model.get("task") or model.get("head")  # head: release 0.1's name
        _, key = stored_task(check_checkpoint(path, getattr(task, "class_path", None)))
        super()._parse_ckpt_path()
        model = self.config[subcommand]["model"]
        if model.get("task") is not None and model.get("head") is not None:  # the recipe's and the checkpoint's
            model["task"], model["head"] = model[key], None  # the checkpoint's: it holds what the task learned

    def _resolve_ckpt_path(self, required: bool = True) -> None:
        """Turn ``best``/``last`` into a file (also from an earlier process) and check the file
        (``check_checkpoint``); refuse to evaluate or predict without a checkpoint, as the
        task's head would be untrained (random).

        Raises:
            ValueError: no ``--ckpt_path`` (when ``required``), or a checkpoint of another task.
            FileNotFoundError: ``best``/``last`` and no such checkpoint in the checkpoint folder.
        """
        config = self.config_init[self.subcommand]
        wanted = config.get("ckpt_path")
        if wanted is None:
            if not required:
                return
            raise ValueError(
                f"no --ckpt_path for `bertkit {self.subcommand}`: the {type(self.model.task).__name__}'s head would be "
                "untrained (random). Pass --ckpt_path best, last or a .ckpt file from `bertkit fit` with this recipe."
            )
        checkpoint = self.trainer.checkpoint_callback
        if wanted in ("best", "last") and checkpoint is not None and not checkpoint.best_model_path:
            path = recorded_best(checkpoint) if wanted == "best" else newest_last(checkpoint)
            if path is None or not Path(path).is_file():
                raise FileNotFoundError(
                    f"--ckpt_path {wanted}: no checkpoint found in {checkpoint.dirpath} "
                    "(run `bertkit fit` with this recipe first)"
                )
            config["ckpt_path"] = str(path)
        elif self.subcommand != "fit":
            return  # a file given for validate/test/predict: checked in _parse_ckpt_path
        if config["ckpt_path"] not in ("best", "last", "hpc", "registry"):
            stored = check_checkpoint(config["ckpt_path"], self.model.task.spec()["class_path"])
            if self.subcommand == "fit":
                refuse_changed_recipe(config["ckpt_path"], stored, self.model, self.datamodule)

    def before_fit(self) -> None:
        self._fit_started = time.monotonic()
        config = self.config_init[self.subcommand]
        if self.trainer.is_global_zero:
            checkpoint = self.trainer.checkpoint_callback
            folder = checkpoint.dirpath if checkpoint is not None else None
            claim(self.trainer.default_root_dir, folder, config.get("ckpt_path") is not None, config.get("overwrite"))
        self._resolve_ckpt_path(required=False)
        checkpoint = self.trainer.checkpoint_callback
        settings = flat_settings(self.config[self.subcommand].as_dict())
        log_settings(self.trainer.loggers, settings, checkpoint.monitor if checkpoint is not None else None)

    def before_validate(self) -> None:
        self._resolve_ckpt_path()

    def before_test(self) -> None:
        self._resolve_ckpt_path()

    def before_predict(self) -> None:
        if not any(isinstance(c, BasePredictionWriter) for c in self.trainer.callbacks):
            raise NothingDone(
                "bertkit predict: the recipe's trainer.callbacks have no prediction writer, so nothing would be "
                "written; add `- class_path: bertkit.PredictionWriter` to trainer.callbacks"
            )
        self._resolve_ckpt_path()

    def predict(self, model: BertModule, datamodule: BertDataModule, ckpt_path: str | None = None, **_: Any) -> None:
        """``trainer.predict`` over the predict file part by part (``data.predict_chunk_size``
        examples each; ``PredictionWriter`` appends each part's records), the checkpoint loaded once."""
        for index, _ in datamodule.predict_in_parts():
            self.trainer.predict(
                model, datamodule=datamodule, ckpt_path=None if index else ckpt_path, return_predictions=False
            )
        if not self.work.predicted:
            limit = self.trainer.limit_predict_batches
            why = f"trainer.limit_predict_batches is {limit}" if not limit else "the predict file holds no example"
            raise NothingDone(f"bertkit predict: no batch was predicted ({why}); nothing was written")

    @override
    def _run_subcommand(self, subcommand: str) -> None:
        check_launcher(self.trainer, subcommand, self.config[subcommand].trainer.strategy)
        try:
            super()._run_subcommand(subcommand)
        except SIGTERMException:
            raise Interrupted(143, "SIGTERM", self.trainer, self.recipe_args) from None
        except SystemExit:  # Lightning ends a run stopped by Ctrl-C with sys.exit(1)
            if self.trainer.interrupted:
                raise Interrupted(130, "Ctrl-C", self.trainer, self.recipe_args) from None
            raise
        finally:
            release_all()  # the run folder's lock: a later fit may take it

    def after_validate(self) -> None:
        self._write_scores()

    def after_test(self) -> None:
        self._write_scores()

    def _write_scores(self) -> None:
        checkpoint = self.config_init[self.subcommand].get("ckpt_path")
        path = write_scores(self.trainer, self.subcommand, checkpoint, config_files(self.recipe_args))
        if path is not None:
            print(f"scores written to {path}", flush=True)

    def after_fit(self) -> None:
        if self.work.steps == 0 and not self.trainer.interrupted:
            raise NothingDone(f"bertkit fit: no training step ran ({self._why_no_step()}); no checkpoint was written")
        if self.trainer.is_global_zero:
            seconds = time.monotonic() - self._fit_started
            print(fit_summary(self.trainer, self.recipe_args[1:], seconds), flush=True)

    def _why_no_step(self) -> str:
        trainer = self.trainer
        if trainer.max_steps == 0:
            return "trainer.max_steps is 0"
        if trainer.max_epochs == 0:
            return "trainer.max_epochs is 0"
        if not trainer.limit_train_batches:
            return f"trainer.limit_train_batches is {trainer.limit_train_batches}"
        if self.work.resumed_at:
            return (
                f"the run resumed at step {self.work.resumed_at}, epoch {trainer.current_epoch}, which already meets "
                f"trainer.max_steps {trainer.max_steps} / max_epochs {trainer.max_epochs}: raise them to train on"
            )
        return "the training data gave no batch"


def check_launcher(trainer: Trainer, command: str, given: Any) -> None:
    """Refuse a strategy whose launcher runs the work in processes it forks or spawns
    (``ddp_fork``, ``ddp_notebook``, ``ddp_spawn`` …): this process, which reports the command's
    outcome (steps taken, checkpoints, what was written), would see none of it. Such strategies
    serve notebooks (``bertkit.compose``, then ``trainer.fit``); a command's processes start
    from its own command line (``ddp``).

    Args:
        trainer: the command's trainer.
        command: the command's name.
        given: ``trainer.strategy`` as the recipe gives it (a name, or a class spec).

    Raises:
        ValueError: naming the strategy and what to pass instead.
    """
    if isinstance(getattr(trainer.strategy, "launcher", None), _MultiProcessingLauncher):
        name = given if isinstance(given, str) else type(trainer.strategy).__name__
        method = getattr(trainer.strategy.launcher, "_start_method", "spawn")
        raise ValueError(
            f"trainer.strategy: {name} runs bertkit {command} in processes it {method}s, whose steps, checkpoints "
            "and outputs this command could not report; pass --trainer.strategy ddp (each process started from "
            "this command line) — the fork and spawn launchers are for notebooks (bertkit.compose)"
        )


class WorkDone(Callback):
    """How much work a command did in this process: optimizer steps of ``fit`` (after any resume)
    and predicted batches, so that a command whose work was empty says so (``NothingDone``; test
    and validate tell by their scores, ``write_scores``)."""

    def __init__(self) -> None:
        self.predicted = 0
        self.resumed_at: int | None = None
        self.steps = 0

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.resumed_at = trainer.global_step

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.steps = trainer.global_step - (self.resumed_at or 0)

    @override
    def on_predict_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.predicted += 1


class Interrupted(Exception):
    """A run stopped by a signal: its exit code (128 + the signal's number) and what to say."""

    def __init__(self, code: int, what: str, trainer: Trainer, args: list[str]) -> None:
        checkpoint = trainer.checkpoint_callback
        last = newest_last(checkpoint) if checkpoint is not None and checkpoint.dirpath else None
        lines = [f"bertkit: stopped by {what} at step {trainer.global_step}"]
        if last is not None and trainer.state.fn == "fit":
            step = load_checkpoint(last, mmap=True).get("global_step")
            lines.append(f"  last checkpoint (step {step}): {last}")
            lines.append(f"  resume: bertkit {args[0]} {options(args[1:])} --ckpt_path last")
        super().__init__("\n".join(lines))
        self.code = code


def _part(name: str) -> Any:
    """What the data module takes from the built model: its task, its tokenizer, or (``hparams``)
    whether its encoder runs unpadded."""
    if name == "hparams":
        return lambda model: bool(model.hparams.unpad)
    return lambda model: getattr(model, name)


def cli_kwargs() -> dict[str, Any]:
    return dict(
        model_class=BertModule,
        datamodule_class=BertDataModule,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        parser_kwargs={"exit_on_error": False},  # a short `bertkit: error:` instead of pages of usage
        trainer_defaults={"log_every_n_steps": 10},  # learning curves with points within an epoch
    )
