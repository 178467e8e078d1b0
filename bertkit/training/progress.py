"""What a ``bertkit`` run prints while it trains: a one-line model summary, Rich's bar on a terminal
(its epoch counter fixed for step-limited runs), and plain lines when output goes to a file or a
pipe (``nohup bertkit fit … > fit.log``), where a bar shows a reader of the log nothing until the
run ends."""

from __future__ import annotations

import sys
import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback, ModelSummary, ProgressBar, RichProgressBar, TQDMProgressBar
from pytorch_lightning.utilities.model_summary import get_human_readable_count
from typing_extensions import override


class ShowsTrainingLosses:
    """A progress bar's metrics with the module's ``progress_metrics`` (``BertModule``'s training
    losses, read every ``trainer.log_every_n_steps`` steps rather than after each, as Lightning's
    ``prog_bar`` values are): mixed into each of bertkit's bars."""

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        return {**super().get_metrics(trainer, pl_module), **getattr(pl_module, "progress_metrics", {})}  # type: ignore[misc]


class EpochRichProgressBar(ShowsTrainingLosses, RichProgressBar):
    """Lightning's ``RichProgressBar``, counting epochs from 1 as the summary does (``Epoch 1/3``
    for the first of three, where Lightning says ``Epoch 0/2``), and ``Epoch 2`` rather than
    ``Epoch 1/-2`` when the run is limited by ``max_steps`` (``max_epochs: -1``). The metrics it
    shows (the training loss) are read every ``trainer.log_every_n_steps`` steps, when the
    loggers read them, not after every step: each read waits for the GPU to finish the step."""

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.is_disabled and self.train_progress_bar_id is None:  # a run resumed inside an epoch
            self._initialize_train_progress_bar_id()
        self._update(self.train_progress_bar_id, batch_idx + 1)
        if trainer.global_step % max(trainer.log_every_n_steps, 1) == 0:
            self._update_metrics(trainer, pl_module)
        self.refresh()

    @override
    def _get_train_description(self, current_epoch: int) -> str:
        width = len(super()._get_train_description(current_epoch))
        epochs = self.trainer.max_epochs
        shown = f"Epoch {current_epoch + 1}" + (f"/{epochs}" if epochs is not None and epochs > 0 else "")
        return f"{shown:{width}}"


class PlainProgress(ShowsTrainingLosses, ProgressBar):
    """One line to stdout every ``every_s`` seconds of training and at each epoch's end, and one
    after each validation: epoch, step, share of the run, the metrics shown on a progress bar,
    steps per second and time left.

    Args:
        every_s: seconds between two lines during an epoch (wall clock).
    """

    def __init__(self, every_s: float = 30.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._enabled = True
        self._started = self._last = 0.0
        self._first_step = self._batches = 0
        self._epoch_batches: int | float = float("inf")

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule, prefix: str = "") -> str:
        shown = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num" and k.startswith(prefix)}
        return "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items())

    def _line(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batches: int) -> str:
        epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else None
        epoch = f"epoch {trainer.current_epoch + 1}" + (f"/{epochs}" if epochs else "")  # from 1, as the summary
        total = self._epoch_batches
        batch = f"batch {batches}" + (f"/{total}" if total != float("inf") else "")
        steps = trainer.global_step - self._first_step
        elapsed = time.monotonic() - self._started
        rate = steps / elapsed if elapsed > 0 else 0.0
        last = trainer.estimated_stepping_batches
        parts = [epoch, batch, f"step {trainer.global_step}"]
        if last != float("inf") and last > 0:
            parts[-1] += f"/{int(last)} ({100 * trainer.global_step / last:.0f}%)"
            if rate > 0:
                parts.append(f"{rate:.2f} steps/s  eta {_clock((last - trainer.global_step) / rate)}")
        metrics = self._metrics(trainer, pl_module)
        return "  ".join(parts + ([metrics] if metrics else []))

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started = self._last = time.monotonic()
        self._first_step = trainer.global_step

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning's total_train_batches counts the steps left to max_steps from *now*: fix it
        # for the epoch when it starts
        self._epoch_batches = self.total_train_batches

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._batches = batch_idx + 1
        now = time.monotonic()
        if self._enabled and now - self._last >= self.every_s:
            self._last = now
            print(self._line(trainer, pl_module, batch_idx + 1), flush=True)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._enabled:
            self._last = time.monotonic()
            print(self._line(trainer, pl_module, self._batches) + "  (epoch end)", flush=True)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._enabled and not trainer.sanity_checking and trainer.state.fn == "fit":
            scores = self._metrics(trainer, pl_module, "val/")
            print(f"validation after step {trainer.global_step}: {scores or 'done'}", flush=True)


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's shell is the kernel's), not merely one
    that imported ``ipykernel`` (Jupyter's client libraries may, to find its kernel spec)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class LossesTQDMProgressBar(ShowsTrainingLosses, TQDMProgressBar):
    """Lightning's tqdm bar with the training losses, where rich is not installed."""


class BriefSummary(ModelSummary):
    """The model in one line when ``fit`` starts, in place of Lightning's table (whose FLOPs
    column reads 0 for a model without an example input): each top-level module with its class
    and parameter count, the trainable count (with ``model.adapter``, its share and the adapters'
    rank and layers) and the size in MB (float32)."""

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        parts = [
            f"{name} {type(module).__name__} {get_human_readable_count(sum(p.numel() for p in module.parameters()))}"
            for name, module in pl_module.named_children()
        ]
        total = sum(p.numel() for p in pl_module.parameters())
        trainable = sum(p.numel() for p in pl_module.parameters() if p.requires_grad)
        adapter = getattr(pl_module, "hparams", {}).get("adapter")
        share = (
            f" ({100 * trainable / total:.2f} %: LoRA r={adapter['r']} on {', '.join(adapter['target_modules'])}, "
            "and the head)"
            if adapter
            else ""
        )
        print(
            f"model: {' + '.join(parts)} parameters; {get_human_readable_count(trainable)} trainable{share}, "
            f"{total * 4 / 1e6:.1f} MB",
            flush=True,
        )


def console_callbacks(callbacks: list[Callback], progress: bool | None, summary: bool | None) -> list[Callback]:
    """What a run prints, unless its recipe names its own callback or turns it off: the one-line
    model summary, and ``PlainProgress`` when stdout is not a terminal (outside notebooks), else
    Rich's bar (when rich is installed; tqdm's otherwise), each showing the training losses."""
    extra: list[Callback] = []
    if summary is not False and not any(isinstance(c, ModelSummary) for c in callbacks):
        extra.append(BriefSummary())
    if progress is False or any(isinstance(c, ProgressBar) for c in callbacks):
        return extra
    if not sys.stdout.isatty() and not in_notebook():
        return [*extra, PlainProgress()]
    try:
        return [*extra, EpochRichProgressBar()]
    except ModuleNotFoundError:
        return [*extra, LossesTQDMProgressBar()]
