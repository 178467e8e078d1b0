"""What a run folder holds, read without Lightning: the checkpoints of an earlier run that a new
``bertkit fit`` must not replace unasked (``bertkit.training.run_folder.claim`` refuses it when
the run starts; ``bertkit.cli.extras.check_run_folder`` before Lightning is imported)."""

from __future__ import annotations

from pathlib import Path


def earlier_run(checkpoints: str | Path | None) -> str | None:
    """Why a new run may not start over the checkpoint folder ``checkpoints``: the message naming
    the earlier run's checkpoints and the ways on, or None where the folder holds none."""
    folder = Path(checkpoints) if checkpoints is not None else None
    old = sorted(folder.glob("*.ckpt")) if folder is not None and folder.is_dir() else []
    if not old:
        return None
    return (
        f"{folder} holds the checkpoints of an earlier run ({', '.join(p.name for p in old[:3])}"
        f"{' …' if len(old) > 3 else ''}): resume it with --ckpt_path last, start a new run with another "
        "--trainer.default_root_dir, or replace it with --overwrite true"
    )
