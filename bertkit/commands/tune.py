"""``bertkit tune``: an Optuna search over a recipe (``bertkit.commands.tuning``). The signature and
docstring are the command's options and help (jsonargparse); Optuna and Lightning are imported
when the command runs."""

from __future__ import annotations

import json
import logging
import os
from importlib.util import find_spec

from jsonargparse.typing import NonNegativeInt, PositiveInt

from bertkit.api.app import Pruner

log = logging.getLogger(__name__)


def tune(
    recipe: str | None = None,
    space: str | None = None,
    trials: PositiveInt = 20,
    n_jobs: PositiveInt = 1,
    storage: str | None = None,
    study_name: str | None = None,
    pruner: Pruner = "median",
    seed: int = 0,
    seeds: NonNegativeInt = 0,
    report: bool = False,
    tracker: str | None = None,
) -> int:
    """Search a recipe's hyper-parameters with Optuna (``pip install 'bertkit[tune]'``): each
    trial a run folder ``<default_root_dir>/trials/NNN``, the study in
    ``<default_root_dir>/tune/study.db`` (it resumes); at the end ``tune/best.yaml`` (``bertkit
    fit --config RECIPE --config best.yaml`` reproduces the best trial), ``tune/trials.csv``,
    ``tune/summary.json`` and plots (``history.png``, ``importances.png``, ``slice.png``).

    Args:
        recipe: the recipe (required; ``--config RECIPE`` says the same, as for ``bertkit fit``).
        space: (required) a YAML file of recipe keys to ranges ``{low, high, log, step}`` or lists of choices.
        trials: finished trials (complete, pruned or failed) the study should hold.
        n_jobs: trials run at once on this machine (each a process with cores / n_jobs threads).
        storage: an SQLAlchemy URL for the study (default: SQLite in the run folder), or
            ``journal:///path/study.log`` (Optuna's journal file), or ``grpc://HOST:PORT`` (an
            Optuna gRPC storage proxy); workers on several machines share one study through one
            database URL, one journal on a shared file system (NFS) or one proxy. Journals and
            proxies have no heartbeats: a trial whose worker died stays "running". Its password is never
            printed nor passed on a command line (trials read the study from their environment);
            ``BERTKIT_TUNE_STORAGE`` gives the URL without putting it in ``ps`` either.
        study_name: the study's name in the storage (default: the recipe's file name).
        pruner: median, successive_halving or none: stop unpromising trials at a validation.
        seed: seed of the sampler (TPE).
        seeds: then run the best parameters and the recipe's defaults with seeds 1..N (mean ± SD).
        report: only write the results of the study so far (no new trials).
        tracker: a tracker overlay (``recipes/trackers/mlflow.yaml`` …) added to each trial's
            recipe: every trial is a run in the tracker with its settings, scores and objective.

    Returns:
        The exit code: 0, or 1 when the study holds no completed trial (every one failed or
        was pruned; ``tune/trials.csv`` says why).
    """
    storage = storage or os.environ.get("BERTKIT_TUNE_STORAGE") or None
    if recipe is None or space is None:
        raise ValueError("bertkit tune: give the recipe and the space: --config RECIPE --space SPACE.yaml")
    if find_spec("optuna") is None:
        raise ValueError("bertkit tune needs the tune extra: pip install 'bertkit[tune]'")
    from bertkit.commands.tuning import run

    summary = run(recipe, space, trials, n_jobs, storage, study_name, pruner, seed, seeds, report, tracker)
    print(json.dumps(summary, indent=2, default=str))
    if "best_params" not in summary:
        log.error("no trial completed (%s): see tune/trials.csv for why each failed", summary["trials"])
        return 1
    return 0


tune.config_argument = "recipe"  # type: ignore[attr-defined]  # --config names the recipe, as for fit
