"""Crash safety: a run killed (SIGKILL) or stopped (SIGTERM) inside an epoch and resumed with
``--ckpt_path last`` ends with the weights and scores of the run that was never interrupted.
Restored: model, optimizer and scheduler state and the loop position (Lightning), the place in the
epoch's training order (``bertkit.data.resumable.TrainingLoader``: the order is seeded by seed +
epoch, and the loader's state says how many batches of it were trained on), and the random
generators of dropout and masking (``bertkit.training.rng``)."""

from __future__ import annotations

import csv
import signal

import pytest
import torch
from bertkit_plugins.multitask.samplers import TaskMixingBatchSampler
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit.data.resumable import TrainingLoader, fingerprint
from bertkit.data.samplers import (
    BatchShardSampler,
    IndexedByBatch,
    TokenBudgetBatchSampler,
    TrainShardSampler,
)
from tests.conftest import RECIPE, ROOT, TINY, Spawned, notebook, run_bertkit

ARGS = [
    "--config", str(RECIPE), *TINY,
    "--trainer.max_epochs=2", "--trainer.limit_train_batches=6", "--trainer.limit_val_batches=2",
    "--trainer.val_check_interval=3", "--trainer.enable_progress_bar=false", "--data.batch_size=8",
]  # fmt: skip
TWO = ["--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.accelerator=cpu", "--data.batch_size=4"]


PRETRAIN = [
    "--config", str(ROOT / "recipes/pretrain_bert.yaml"), "--model.preset=tiny", "--model.max_length=32",
    "--model.task.init_args.dynamic_masking=true", "--trainer.max_steps=12", "--trainer.val_check_interval=3",
    "--trainer.limit_val_batches=2", "--trainer.enable_progress_bar=false", "--data.batch_size=8",
]  # fmt: skip


def final(run, folder: str = "ner", score: str = "val/f1") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    state = torch.load(run / f"runs/{folder}/checkpoints/last.ckpt", weights_only=True)
    logs = sorted((run / f"runs/{folder}/logs").glob("version_*/metrics.csv"))
    rows = [r for r in csv.DictReader(logs[-1].open()) if r.get(score)]
    return state["state_dict"], rows[-1]


def place(checkpoint: dict) -> tuple[int, int]:
    """(epoch, batches trained in it) of the training loader in a checkpoint, as the data module
    and Lightning's fit loop each saved it."""
    saved = checkpoint["BertDataModule"]["train_loader"]
    assert checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [saved]
    return saved["epoch"], saved["batches"]


def interrupt_then_resume(
    tmp_path, callback: str, step: int, *extra: str, args: list[str] = ARGS, folder: str = "ner", score: str = "val/f1"
) -> dict:
    """Run whole, then interrupted by ``callback`` at ``step`` and resumed; assert that both end
    with the same weights and last validation scores; return the checkpoint resumed from."""
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    whole.mkdir(), broken.mkdir()
    ddp = any(a.startswith("--trainer.strategy") for a in [*args, *extra])  # DDP starts its processes from sys.argv
    if ddp:  # the reference run: its two processes forked here, as a notebook's (the same steps)
        with notebook(whole, [*args, *extra], processes=2) as composed:
            composed.trainer.fit(composed.model, datamodule=composed.datamodule)
    else:
        run_bertkit("fit", *args, *extra, cwd=whole)
    env = {"PYTHONPATH": str(ROOT)}
    stopped = Spawned(  # a new interpreter: a fork of this one could inherit a lock another thread held
        ["fit", *args, *extra, f"--trainer.callbacks+=tests.kill.{callback}", f"--trainer.callbacks.step={step}"],
        broken, env,
    ).wait()  # fmt: skip
    assert stopped.returncode in (-signal.SIGKILL, 143), stopped.stderr[-2000:]
    resumed_from = torch.load(broken / f"runs/{folder}/checkpoints/last.ckpt", weights_only=True)
    assert not list((broken / f"runs/{folder}/checkpoints").glob(".*.tmp"))
    if ddp:  # resumed by two processes forked here (the command's resume: the one-process runs)
        with notebook(broken, [*args, *extra], processes=2) as composed:
            composed.trainer.fit(composed.model, datamodule=composed.datamodule, ckpt_path="last")
    else:
        run_bertkit("fit", *args, *extra, "--ckpt_path=last", cwd=broken)  # a new command
    logs = sorted((broken / f"runs/{folder}/logs").glob("version_*/metrics.csv"))
    steps = [float(r["step"]) for r in csv.DictReader(logs[-1].open()) if r.get("step")]
    assert len(logs) == 2 and min(steps) > resumed_from["global_step"]  # the second run went on from there
    (weights, scores), (resumed, resumed_scores) = final(whole, folder, score), final(broken, folder, score)
    assert weights.keys() == resumed.keys()
    assert [k for k in weights if not torch.equal(weights[k], resumed[k])] == []
    assert scores[score] == resumed_scores[score] and scores["step"] == resumed_scores["step"]
    return resumed_from


# Length-grouped orders resume through the same sampler as random ones (the generated test below
# covers every order); token budgets through a batch sampler.
ORDERS = {"random": [], "token_budget": ["--data.max_tokens=160"]}


@pytest.mark.slow
@pytest.mark.parametrize("order", ["random", pytest.param("token_budget", marks=pytest.mark.system)])
def test_kill_9_inside_an_epoch_then_resume_ends_as_the_uninterrupted_run(tmp_path, order):
    checkpoint = interrupt_then_resume(tmp_path, "KillAtStep", 11, *ORDERS[order])
    # validated (and checkpointed) every 3 batches: killed at step 11, resumed from step 9, inside epoch 1
    assert checkpoint["global_step"] == 9 and place(checkpoint) == (1, 3)


@pytest.mark.slow
@pytest.mark.system
def test_sigterm_inside_an_epoch_then_resume_ends_as_the_uninterrupted_run(tmp_path):
    checkpoint = interrupt_then_resume(tmp_path, "TermAtStep", 7)
    # Lightning stops at the batch boundary; last.ckpt holds that step: batch 2 of epoch 1
    assert checkpoint["global_step"] == 8 and place(checkpoint) == (1, 2)


@pytest.mark.slow
@pytest.mark.system
def test_pretraining_with_dynamic_masks_killed_inside_an_epoch_resumes_exactly(tmp_path):
    """Masks drawn from (seed, epoch, index), not from a stream the kill would lose."""
    checkpoint = interrupt_then_resume(
        tmp_path, "KillAtStep", 10, args=PRETRAIN, folder="pretrain_bert", score="val/mlm_accuracy"
    )
    assert checkpoint["global_step"] == 9 and place(checkpoint)[1] > 0


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.system
def test_kill_9_inside_an_epoch_on_two_processes_then_resume_ends_as_the_uninterrupted_run(tmp_path):
    checkpoint = interrupt_then_resume(tmp_path, "KillAtStep", 10, *TWO)
    assert checkpoint["global_step"] == 9 and place(checkpoint) == (1, 3)


def _orders(n: int, seed: int, world: int, rank: int, kind: str):
    lengths = [3 + (i * 7919 + seed) % 29 for i in range(n)]
    if kind == "token_budget":
        budget = TokenBudgetBatchSampler(lengths, 64, seed, group_by_length=bool(seed % 2))
        return lengths, BatchShardSampler(budget, world, rank)
    if kind == "tasks":
        return lengths, TaskMixingBatchSampler([f"t{i % 3}" for i in range(n)], 4, seed, temperature=1 + seed % 3)
    return lengths, TrainShardSampler(lengths, 4, seed, kind == "grouped", world, rank)


def _loader(n: int, seed: int, world: int, rank: int, kind: str) -> TrainingLoader:
    lengths, order = _orders(n, seed, world, rank, kind)
    data = fingerprint(lengths, kind, world)
    if isinstance(order, TrainShardSampler):
        return TrainingLoader(list(range(n)), batch_size=4, sampler=order, collate_fn=list, data=data)
    if isinstance(order, BatchShardSampler):
        return TrainingLoader(IndexedByBatch(range(n)), batch_size=None, sampler=order, collate_fn=list, data=data)
    return TrainingLoader(list(range(n)), batch_sampler=order, collate_fn=list, data=data)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(9, 80), seed=st.integers(0, 50), world=st.integers(1, 3), epochs=st.integers(1, 3),
    kind=st.sampled_from(["random", "grouped", "token_budget", "tasks"]), data=st.data(),
)  # fmt: skip
def test_a_loader_resumed_at_any_batch_goes_on_with_the_next_batch(n, seed, world, epochs, kind, data):
    world = 1 if kind == "tasks" else world
    rank = data.draw(st.integers(0, world - 1))
    whole = _loader(n, seed, world, rank, kind)
    batches = []
    for epoch in range(epochs):
        whole.order.set_epoch(epoch)
        batches.append(list(whole))
    epoch = data.draw(st.integers(0, epochs - 1))
    done = data.draw(st.integers(0, len(batches[epoch])))
    stopped = _loader(n, seed, world, rank, kind)
    stopped.order.set_epoch(epoch)
    for count, _ in enumerate(stopped, 1):
        if count == done:
            break
    state = stopped.state_dict() if done else {"epoch": epoch, "batches": 0, "data": stopped.data}
    resumed = _loader(n, seed, world, rank, kind)
    resumed.load_state_dict(state)
    resumed.order.set_epoch(epoch)
    assert list(resumed) == batches[epoch][done:]
    if epoch + 1 < epochs:  # the next epoch begins at its start
        resumed.order.set_epoch(epoch + 1)
        assert list(resumed) == batches[epoch + 1]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 60), batch_size=st.integers(1, 6), world=st.integers(1, 4), seed=st.integers(0, 9),
       grouped=st.booleans())  # fmt: skip
def test_processes_together_take_the_batches_one_process_takes(n, batch_size, world, seed, grouped):
    lengths = [1 + (i * 31 + seed) % 17 for i in range(n)]
    one = TrainShardSampler(lengths, batch_size * world, seed, grouped).batches()
    shares = [TrainShardSampler(lengths, batch_size, seed, grouped, world, rank) for rank in range(world)]
    left_out = shares[0].left_out()
    per_rank = [s.batches() for s in shares]
    assert len({len(b) for b in per_rank}) == 1  # every process takes as many steps: none waits
    assert all(batch for batches in per_rank for batch in batches)  # and no step is empty
    steps = [sum((batches[k] for batches in per_rank), []) for k in range(len(per_rank[0]))]
    assert steps == (one[:-1] if left_out else one)
    assert left_out == (len(one[-1]) if left_out else 0) and left_out < world


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=80), budget=st.integers(30, 120),
    world=st.integers(1, 4), seed=st.integers(0, 9), grouped=st.booleans(), epoch=st.integers(0, 2),
)  # fmt: skip
def test_processes_share_the_token_budget_batches_one_process_draws(lengths, budget, world, seed, grouped, epoch):
    """Each process takes every world-th batch of the order one process draws, all within the
    budget, as many as the others; together they train on every batch but the last few."""
    whole = TokenBudgetBatchSampler(lengths, budget, seed, group_by_length=grouped)
    shares = [BatchShardSampler(TokenBudgetBatchSampler(lengths, budget, seed, False, grouped), world, r)
              for r in range(world)]  # fmt: skip
    for order in (whole, *shares):
        order.set_epoch(epoch)
    per_rank = [list(share) for share in shares]
    assert len({len(batches) for batches in per_rank}) == 1  # every process takes as many steps
    dealt = [batch for step in zip(*per_rank, strict=True) for batch in step]
    batches = whole.batches()
    assert dealt == batches[: len(batches) - len(batches) % world] and shares[0].left_out() == len(batches) % world
    assert all(sum(lengths[i] for i in batch) <= budget for batch in dealt)
