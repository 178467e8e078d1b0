"""What a run prints: Rich's bar counts epochs from 1 and names step-limited epochs without Lightning's negative total
(plain progress lines, the one-line summary and the absence of Lightning's noise are checked on a
real run in ``test_cli.test_print_config_reruns_unchanged``)."""

from __future__ import annotations

import logging

import pytest


def _tiny(log_loss: bool = False):
    """A one-layer LightningModule (SGD) whose loss is logged to the progress bar if asked."""
    import pytorch_lightning as pl
    import torch

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch).pow(2).mean()
            if log_loss:
                self.log("train/loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Tiny()


@pytest.mark.parametrize("max_epochs, says", [(-1, "Epoch 3"), (None, "Epoch 3"), (3, "Epoch 3/3")])
def test_rich_bar_counts_epochs_from_one_without_a_negative_total(max_epochs, says) -> None:
    from types import SimpleNamespace

    from bertkit.training.progress import EpochRichProgressBar

    bar = EpochRichProgressBar()
    bar._trainer = SimpleNamespace(max_epochs=max_epochs)
    assert bar._get_train_description(2).strip() == says


@pytest.mark.parametrize("every", [1, 3, 7])
def test_the_rich_bar_reads_the_metrics_only_when_they_are_logged(every) -> None:
    """Reading the shown loss waits for a GPU's step: the bar reads it at the steps the loggers
    do (multiples of ``log_every_n_steps``) and at the end, never in between."""
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader

    from bertkit.training.progress import EpochRichProgressBar

    reads: list[int] = []

    class Counting(EpochRichProgressBar):
        def get_metrics(self, trainer, pl_module):
            reads.append(trainer.global_step)
            return super().get_metrics(trainer, pl_module)

    trainer = pl.Trainer(
        max_steps=20, callbacks=[Counting()], logger=False, enable_checkpointing=False, enable_model_summary=False,
        log_every_n_steps=every,
    )  # fmt: skip
    trainer.fit(_tiny(log_loss=True), DataLoader(torch.randn(40, 2), batch_size=1))
    during = [step for step in reads if 0 < step < 20]
    assert during and all(step % every == 0 for step in during), reads
    assert len(during) == len(range(every, 20, every))


@pytest.mark.parametrize("bar", ["EpochRichProgressBar", "PlainProgress", "LossesTQDMProgressBar"])
def test_every_bar_shows_the_modules_progress_metrics(bar) -> None:
    """The training losses are no prog_bar values (Lightning reads those after every step): each
    of bertkit's bars, tqdm's where rich is missing included, shows ``progress_metrics``."""
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader

    from bertkit.training import progress

    shown: list[dict] = []

    class Looking(pl.Callback):
        def on_train_end(self, trainer, module):
            shown.append(instance.get_metrics(trainer, module))

    instance = getattr(progress, bar)()
    trainer = pl.Trainer(
        max_steps=2, callbacks=[instance, Looking()], logger=False, enable_checkpointing=False,
        enable_model_summary=False,
    )  # fmt: skip
    module = _tiny()
    module.progress_metrics = {"train/loss": 0.25}
    trainer.fit(module, DataLoader(torch.randn(4, 2), batch_size=1))
    assert shown and shown[0]["train/loss"] == 0.25


def test_without_rich_the_bar_is_tqdms_with_the_losses(monkeypatch) -> None:
    from bertkit.training import progress

    def missing():
        raise ModuleNotFoundError("rich")

    monkeypatch.setattr(progress, "EpochRichProgressBar", missing)
    monkeypatch.setattr(progress.sys.stdout, "isatty", lambda: True)
    bars = [c for c in progress.console_callbacks([], None, False) if isinstance(c, progress.ProgressBar)]
    assert [type(b) for b in bars] == [progress.LossesTQDMProgressBar]


def test_a_process_that_imported_ipykernel_is_no_notebook() -> None:
    """Running a notebook's kernel from this process imports ipykernel here; the bar that shows
    progress to a pipe must stay the plain one (only a kernel gets Rich's)."""
    import importlib

    from bertkit.training.progress import in_notebook

    importlib.import_module("ipykernel")
    assert not in_notebook()


def test_plain_lines_count_batches_against_the_epochs_own_total(capsys) -> None:
    """A step-limited run of 10 batches an epoch and 25 steps: every line says ``batch i/N`` with
    N fixed for the epoch (10, 10, then the 5 left), never the steps left to ``max_steps``."""
    import re

    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader

    from bertkit.training.progress import PlainProgress

    trainer = pl.Trainer(
        max_steps=25, max_epochs=-1, callbacks=[PlainProgress(every_s=0.0)], logger=False,
        enable_checkpointing=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(_tiny(), DataLoader(torch.randn(10, 2), batch_size=1))
    lines = re.findall(r"epoch (\d+)  batch (\d+)/(\d+)  step (\d+)/25", capsys.readouterr().out)
    assert len(lines) >= 25
    for epoch, batch, total, step in (map(int, line) for line in lines):
        assert total == (10 if epoch <= 2 else 5) and 1 <= batch <= total and step == 10 * (epoch - 1) + batch


@pytest.mark.parametrize(
    ("variable", "rank"), [("RANK", "0"), ("RANK", "3"), ("LOCAL_RANK", "1"), ("SLURM_PROCID", "2")]
)
def test_bertkit_notes_print_on_rank_zero_and_errors_everywhere(monkeypatch, variable, rank):
    from bertkit.cli.console import _RankZero

    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, rank)
    keep = _RankZero().filter

    def record(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "note", None, None)

    assert keep(record("bertkit.data.datamodule", logging.WARNING)) == (rank == "0")
    assert keep(record("bertkit_plugins.token_tagging", logging.INFO)) == (rank == "0")
    assert keep(record("bertkit.cli", logging.ERROR)) and keep(record("somebody.else", logging.WARNING))
