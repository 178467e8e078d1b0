"""Two "nodes" of one process each on one machine: ``torchrun --nnodes 2 --node_rank 0|1``
with the rendezvous on 127.0.0.1 and gloo, as a cluster runs them (docs/multinode.md), the
working directory shared as a cluster's file system would be. The second node's process has
local rank 0 and global rank 1, the distinction a cluster's nodes make (more processes per node
are ``tests/test_ddp.py``'s two processes on one machine; four on two cores took 55 s). ``fit`` of
the NER recipe on a tiny model finishes on both nodes; rank 0 alone writes (one log version, one
summary, one checkpoint); and the 2 x batch 4 layout trains the model that 1 process x batch 8
trains (``tests/test_ddp_equality.py`` explains the tolerances). Scores on two processes are
``tests/test_ddp.py``'s: the nodes change no more than which process writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import RECIPE, ROOT, TINY, free_port, run_bertkit
from tests.test_ddp_equality import LOSS_TOLERANCE, WEIGHT_TOLERANCE

pytestmark = [pytest.mark.slow, pytest.mark.ddp, pytest.mark.system]

COMMON = [
    "--config", str(RECIPE), *TINY,
    "--trainer.enable_progress_bar=false",
]  # fmt: skip
FIT = ["--trainer.max_steps=3", "--trainer.limit_val_batches=0", "--trainer.callbacks+=tests.equal.NoDropoutStepLosses"]
NODES = ["--trainer.num_nodes=2", "--trainer.devices=1", "--trainer.strategy=ddp", "--trainer.accelerator=cpu"]


def on_two_nodes(cwd: Path, *args: str) -> list[str]:
    """``bertkit ARGS`` under torchrun on two nodes of one process; each node's output."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"  # where --no-python finds the bertkit script
    port = free_port()
    launch = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
        "--master_addr", "127.0.0.1", "--master_port", str(port), "--no-python",
    ]  # fmt: skip
    nodes = [
        subprocess.Popen(
            [*launch, "--node_rank", str(rank), "bertkit", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=600)[0] for node in nodes]
    for node, output in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, output[-4000:]
    return outputs


def test_fit_on_two_nodes_trains_what_one_process_trains(tmp_path):
    (tmp_path / "one").mkdir(), (tmp_path / "two").mkdir()
    one = tmp_path / "one"
    run_bertkit(  # one process: in this one
        "fit", *COMMON, *FIT, f"--trainer.callbacks.path={one / 'losses'}", "--data.batch_size=8", cwd=one,
        env={"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    two = tmp_path / "two"
    fitted = on_two_nodes(
        two, "fit", *COMMON, *FIT, *NODES, f"--trainer.callbacks.path={two / 'losses'}", "--data.batch_size=4"
    )
    assert [out.count("bertkit fit: done after") for out in fitted] == [1, 0]  # rank 0's summary only
    assert [out.count("No data directory given") for out in fitted] == [1, 0]  # and its notes
    assert sorted(p.name for p in (two / "runs/ner/logs").iterdir()) == ["version_0"]
    assert sorted(p.name for p in (two / "runs/ner/checkpoints").iterdir()) == ["last.ckpt"]

    losses = [[json.loads(x) for x in (run / "losses").read_text().split()] for run in (one, two)]
    assert len(losses[0]) == 3 and losses[1] == pytest.approx(losses[0], rel=LOSS_TOLERANCE)
    weights = [
        torch.load(run / "runs/ner/checkpoints/last.ckpt", weights_only=True)["state_dict"] for run in (one, two)
    ]
    worst = max(float((weights[0][k].double() - weights[1][k].double()).abs().max()) for k in weights[0])
    assert worst < WEIGHT_TOLERANCE
