"""Crash safety: a run killed with SIGKILL mid-epoch and resumed with ``--ckpt_path last`` ends
with the weights and scores of the run that was never interrupted. Restored: model, optimizer
and scheduler state and the loop position (Lightning), the training order (the sampler is seeded
by seed + epoch), and the random generators of dropout and masking (``bertkit.training.rng``)."""

from __future__ import annotations

import csv
import signal

import pytest
import torch

from tests.conftest import RECIPE, ROOT, run_bertkit_fresh

ARGS = [
    "--config", str(RECIPE), "--model.pretrained=null", "--model.preset=tiny", "--model.vocab_file=all-MiniLM-L6-v2",
    "--trainer.max_epochs=2", "--trainer.limit_train_batches=6", "--trainer.limit_val_batches=2",
    "--trainer.enable_progress_bar=false", "--data.batch_size=8",
]  # fmt: skip


def final(run) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    state = torch.load(run / "runs/ner/checkpoints/last.ckpt", weights_only=True)
    logs = sorted((run / "runs/ner/logs").glob("version_*/metrics.csv"))
    rows = [r for r in csv.DictReader(logs[-1].open()) if r.get("val/f1")]
    return state["state_dict"], rows[-1]


@pytest.mark.slow
def test_kill_9_then_resume_ends_as_the_uninterrupted_run(tmp_path):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    whole.mkdir(), broken.mkdir()
    run_bertkit_fresh("fit", *ARGS, cwd=whole)
    env = {"PYTHONPATH": str(ROOT)}
    killed = run_bertkit_fresh(
        "fit", *ARGS, "--trainer.callbacks+=tests.kill.KillAtStep", "--trainer.callbacks.step=9",
        cwd=broken, env=env, check=False,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    assert torch.load(broken / "runs/ner/checkpoints/last.ckpt", weights_only=True)["global_step"] == 6
    assert not list((broken / "runs/ner/checkpoints").glob(".*.tmp"))
    run_bertkit_fresh("fit", *ARGS, "--ckpt_path=last", cwd=broken)
    (weights, scores), (resumed, resumed_scores) = final(whole), final(broken)
    assert weights.keys() == resumed.keys()
    assert [k for k in weights if not torch.equal(weights[k], resumed[k])] == []
    assert scores["val/f1"] == resumed_scores["val/f1"] and scores["step"] == resumed_scores["step"]
