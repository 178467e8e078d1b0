"""Shared fixtures: the MiniLM checkpoint, the real-data folder, and small sample runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("BERTKIT_DATA_DIR", ROOT.parent / "shared" / "data"))
CONLL = DATA / "ner" / "conll2003"
RECIPE = ROOT / "recipes" / "ner.yaml"


def need(path: Path) -> Path:
    """Skip the test with a reason when real data is absent (a user's fresh machine)."""
    if not path.exists():
        pytest.skip(f"real data not found at {path} (set BERTKIT_DATA_DIR to the shared data folder)")
    return path


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    from bertkit_plugins.pretrained import locate_minilm

    return Path(locate_minilm())


def run_bertkit(
    *args: str, cwd: Path, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """Run the ``bertkit`` console script of this environment."""
    # Recipes fall back to the bundled sample: drop the real-data folder unless a test sets it.
    full_env = {k: v for k, v in os.environ.items() if k != "BERTKIT_DATA_DIR"}
    full_env.update({"PYTHONWARNINGS": "ignore::DeprecationWarning", **(env or {})})
    exe = Path(sys.executable).with_name("bertkit")
    proc = subprocess.run([str(exe), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"bertkit {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


# Small settings so a whole fit on the bundled sample takes seconds.
FAST = [
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=6",
    "--trainer.limit_val_batches=2",
    "--trainer.enable_progress_bar=false",
    "--data.batch_size=8",
]


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory in which ``bertkit fit`` ran once on the bundled sample."""
    work = tmp_path_factory.mktemp("sample_run")
    run_bertkit("fit", "--config", str(RECIPE), *FAST, cwd=work)
    return work


def fit_between_validations(model, datamodule, max_epochs: int) -> tuple[dict, dict]:
    """Validation metrics before and after fitting ``model`` (no logs, checkpoints or bars)."""
    import pytorch_lightning as pl

    trainer = pl.Trainer(
        max_epochs=max_epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    before = trainer.validate(model, datamodule=datamodule, verbose=False)[0]
    trainer.fit(model, datamodule=datamodule)
    return before, trainer.validate(model, datamodule=datamodule, verbose=False)[0]
