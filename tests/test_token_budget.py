"""Token-budget batches: budget respected, every feature once per epoch, seeded fresh order per
epoch, and a fit whose schedule counts the budgeted batches."""

from __future__ import annotations

import itertools

import pytest
import pytorch_lightning as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertDataModule, BertModule
from bertkit.data.samplers import TokenBudgetBatchSampler


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 64), min_size=1, max_size=300),
    budget=st.integers(64, 700),
    padded=st.booleans(),
    grouped=st.booleans(),
    seed=st.integers(0, 5),
)
def test_batches_respect_the_budget_and_cover_every_feature(lengths, budget, padded, grouped, seed):
    sampler = TokenBudgetBatchSampler(lengths, budget, seed, padded, grouped)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        for b in batches:
            cost = len(b) * max(lengths[i] for i in b) if padded else sum(lengths[i] for i in b)
            assert cost <= budget
        # greedy: a batch and the first feature of the next would exceed the budget (ungrouped order)
        if not grouped:
            for b, nxt in itertools.pairwise(batches):
                ext = b + nxt[:1]
                cost = len(ext) * max(lengths[i] for i in ext) if padded else sum(lengths[i] for i in ext)
                assert cost > budget


def test_order_is_seeded_and_changes_per_epoch():
    lengths = [5 + i % 17 for i in range(200)]
    a, b = TokenBudgetBatchSampler(lengths, 100, seed=3), TokenBudgetBatchSampler(lengths, 100, seed=3)
    assert list(a) == list(b)
    b.set_epoch(1)
    assert list(a) != list(b)
    with pytest.raises(ValueError, match="max_tokens=10 is less than the longest feature"):
        TokenBudgetBatchSampler(lengths, 10)


@pytest.mark.slow
def test_fit_with_a_token_budget(tmp_path, minilm_dir):
    """Two epochs on the bundled sample: Lightning sets the epoch, the schedule spans the budgeted
    batches, and no batch holds more real tokens than the budget."""
    from bertkit_plugins.token_tagging import TokenClassification

    seen: list[int] = []

    class Watch(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            seen.append(int(batch["attention_mask"].sum()))

    pl.seed_everything(0)
    head = TokenClassification(["PER", "LOC", "ORG", "MISC"])
    model = BertModule(head, pretrained=None, preset="tiny", vocab_file=str(minilm_dir / "vocab.txt"))
    data = BertDataModule(train_file="train.conll", max_tokens=400, batch_size=4)
    trainer = pl.Trainer(
        max_epochs=2, limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[Watch()], default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(model, datamodule=data)
    sampler = trainer.train_dataloader.sampler.inner  # one process: every batch it draws
    assert isinstance(sampler, TokenBudgetBatchSampler) and sampler.epoch == 1
    assert max(seen) <= 400 and sum(seen) / len(seen) > 200  # batches are filled, not one sentence each
    features = len(data.features["train"])
    assert len(seen) == trainer.global_step == trainer.estimated_stepping_batches
    assert len(sampler) < features / 4  # far fewer batches than batch_size=4 would give
