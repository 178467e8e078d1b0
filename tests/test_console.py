"""What a run prints: Rich's bar counts epochs from 1 and names step-limited epochs without Lightning's negative total
(plain progress lines, the one-line summary and the absence of Lightning's noise are checked on a
real run in ``test_cli.test_print_config_reruns_unchanged``)."""

from __future__ import annotations

import logging

import pytest


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

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch).pow(2).mean()
            self.log("train/loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    trainer = pl.Trainer(
        max_steps=20, callbacks=[Counting()], logger=False, enable_checkpointing=False, enable_model_summary=False,
        log_every_n_steps=every,
    )  # fmt: skip
    trainer.fit(Tiny(), DataLoader(torch.randn(40, 2), batch_size=1))
    during = [step for step in reads if 0 < step < 20]
    assert during and all(step % every == 0 for step in during), reads
    assert len(during) == len(range(every, 20, every))


def test_plain_lines_count_batches_against_the_epochs_own_total(capsys) -> None:
    """A step-limited run of 10 batches an epoch and 25 steps: every line says ``batch i/N`` with
    N fixed for the epoch (10, 10, then the 5 left), never the steps left to ``max_steps``."""
    import re

    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader

    from bertkit.training.progress import PlainProgress

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    trainer = pl.Trainer(
        max_steps=25, max_epochs=-1, callbacks=[PlainProgress(every_s=0.0)], logger=False,
        enable_checkpointing=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Tiny(), DataLoader(torch.randn(10, 2), batch_size=1))
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
