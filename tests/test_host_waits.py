"""A training step waits for nothing on the host: no call that reads a tensor's value
(``bertkit.utils.host_reads``: ``item``, ``tolist``, ``bool`` …; on a GPU each waits for the
device) between the start of a step and its end, outside the data loader's collation, for the tagger, the sentence classifier
and the span head, with the recipes' callbacks and progress. The loss and the non-finite flag
are read every ``trainer.log_every_n_steps`` steps instead (``benchmarks/host_overhead.py``
measures the per-step counts against a bare loop). The CRF tagger and the span classifier read
their rows of words as the loader collated them (``word_positions``), not by reading the longest
row on the host."""

from __future__ import annotations

from collections import Counter

import pytest
import pytorch_lightning as pl

from bertkit import compose
from bertkit.utils.host_reads import LOADER, counted_reads
from tests.conftest import ROOT


class Window(pl.Callback):
    """Turns counting on at the first step's start and off at the last step's end."""

    def __init__(self, active: list[bool], last: int) -> None:
        self.active, self.last = active, last

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.active[0] = True

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.last:
            self.active[0] = False


@pytest.mark.parametrize(
    ("recipe", "extra"),
    [
        ("ner.yaml", {"model.task.init_args.crf": False, "model.task.init_args.emission_loss_weight": 0.0}),
        ("sst2.yaml", {}),
        ("squad.yaml", {}),
        ("ner.yaml", {}),  # the CRF tagger
        ("ner_nested.yaml", {}),  # the span classifier
    ],
)
def test_a_training_step_reads_no_tensor_on_the_host(recipe, extra, tmp_path):
    steps = 8
    run = compose(
        ROOT / "recipes" / recipe,
        overrides={
            "model.pretrained": None, "model.preset": "tiny", "model.vocab_file": "all-MiniLM-L6-v2",
            "data.dataset": None, "data.batch_size": 4, "data.validation_file": None, "trainer.max_steps": steps,
            "trainer.log_every_n_steps": 50, "trainer.default_root_dir": str(tmp_path), **extra,
        },
    )  # fmt: skip
    active = [False]
    run.trainer.callbacks.append(Window(active, steps))
    with counted_reads(lambda: active[0]) as counted:
        run.trainer.fit(run.model, datamodule=run.datamodule)
    reads = Counter({site: n for site, n in counted.items() if LOADER not in site})
    assert reads == Counter(), reads
