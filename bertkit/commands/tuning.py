"""``bertkit tune``: hyper-parameter search over a recipe on Optuna (the ``tune`` extra).

The search space is a YAML mapping from the recipe's dotted keys (jsonargparse's names, as on the
command line) to ranges or choices::

    model.learning_rate: {low: 1.0e-5, high: 3.0e-4, log: true}   # float (log-uniform)
    model.warmup_ratio: {low: 0.0, high: 0.2}                      # float (uniform)
    trainer.max_epochs: {low: 1, high: 4}                          # int: both bounds are ints
    data.batch_size: [16, 32]                                      # a choice

The objective is the recipe's monitored score, in its direction (``val/f1`` max, ``val/loss``
min), read from the trial's ``last.ckpt`` (``ModelCheckpoint.best_model_score``). Each trial is an
ordinary run folder, ``<default_root_dir>/trials/NNN`` (checkpoints, logs, ``config.yaml``),
trained in a process of its own as ``bertkit fit`` trains it (``compose``, then
``Trainer.fit``), forked from a server process that imported torch, Lightning and bertkit once
(so a trial starts without their import time); the study lives in
``<default_root_dir>/tune/study.db`` (SQLite) or any SQLAlchemy URL, so it resumes after an interruption, a trial whose process stopped sending
heartbeats is marked failed and re-queued once (Optuna's ``RetryHeartbeatStaleTrialCallback``), and
workers share it: ``--n_jobs`` on one machine, or ``bertkit tune`` on several machines with one
``--storage``. A pruner (median or successive halving) reads the score at every validation;
pruned and failed trials are recorded with their reason and never stop the study. A tracker
overlay (``--tracker recipes/trackers/mlflow.yaml``) is added to every trial's recipe: each trial is
a run in the tracker with its settings, its scores, ``tune_study``/``tune_run`` parameters and
its objective (``tune/objective``). A line per finished trial (on stderr) says its number, state and score.
"""

from __future__ import annotations

import csv
import ctypes
import difflib
import json
import math
import multiprocessing
import os
import re
import signal
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import quote

import optuna
import pytorch_lightning as pl
import torch
import yaml
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from bertkit.api.app import Pruner, atomic_path, load_checkpoint, load_yaml

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeats are "experimental"

HEARTBEAT = (30, 90)  # seconds between a trial's heartbeats; seconds without one before it is stale
NOT_LOGGED = 3  # a trial process's exit code when the recipe does not log its monitored score


@dataclass(frozen=True)
class Param:
    """One dimension of the space: ``choices`` (categorical) or ``low``/``high`` (``log``,
    ``step``), ints where both bounds are ints; or a ``fixed`` setting, the same in every trial
    (its only choice, not searched)."""

    key: str
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    fixed: bool = False

    def suggest(self, trial: optuna.Trial) -> Any:
        if self.fixed:
            return self.choices[0]
        if self.choices is not None:
            return trial.suggest_categorical(self.key, list(self.choices))
        if isinstance(self.low, int) and isinstance(self.high, int):
            return trial.suggest_int(self.key, self.low, self.high, log=self.log, step=int(self.step or 1))
        return trial.suggest_float(self.key, float(self.low), float(self.high), log=self.log, step=self.step)


RANGE_FIELDS = {"low", "high", "log", "step"}


def read_space(path: str | Path, keys: set[str]) -> list[Param]:
    """The search space of a YAML file, each key checked against the recipe's ``keys``: a list
    is a choice, ``{low, high[, log, step]}`` a range, a plain value a setting fixed for every
    trial (a short budget: ``trainer.max_epochs: 1``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a mapping of keys to ranges or choices; an unknown key (with the closest
            recipe key); a malformed range (names the file and key, and what was expected).
    """
    path = Path(path)
    space = load_yaml(path)
    if not isinstance(space, dict) or not space:
        raise ValueError(f"{path}: expected a mapping of recipe keys to ranges or choices")
    params = []
    for key, spec in space.items():
        where = f"{path}: {key}"
        if key not in keys:
            close = difflib.get_close_matches(str(key), sorted(keys), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(f"{where}: not a key of the recipe{hint}")
        if not isinstance(spec, (list, dict)):  # a plain value: the same in every trial
            params.append(Param(key, choices=(spec,), fixed=True))
            continue
        if isinstance(spec, list):
            if not spec:
                raise ValueError(f"{where}: expected at least one choice")
            params.append(Param(key, choices=tuple(spec)))
            continue
        if not isinstance(spec, dict) or not {"low", "high"} <= set(spec) or set(spec) - RANGE_FIELDS:
            raise ValueError(f"{where}: expected a list of choices or {{low, high}} with optional log and step")
        low, high, log, step = spec["low"], spec["high"], spec.get("log", False), spec.get("step")
        numbers = (low, high) if step is None else (low, high, step)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
            raise ValueError(f"{where}: low, high and step must be numbers, got {spec}")
        if not low < high or not isinstance(log, bool) or (log and (low <= 0 or step is not None)):
            raise ValueError(f"{where}: expected low < high, and low > 0 without step when log: true; got {spec}")
        params.append(Param(key, low=low, high=high, log=log, step=step))
    return params


def flat_keys(config: dict[str, Any], prefix: str = "") -> set[str]:
    """Every dotted key of a parsed recipe (``model.head.init_args.stride`` …)."""
    keys = set()
    for key, value in config.items():
        keys.add(prefix + key)
        if isinstance(value, dict):
            keys |= flat_keys(value, f"{prefix}{key}.")
    return keys


def make_pruner(name: Pruner) -> optuna.pruners.BasePruner:
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=0)
    if name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


JOURNAL = "journal://"
"""``journal:///path/to/study.log``: Optuna's journal file (``JournalStorage``), which workers on
machines that share a file system (NFS) use without a database server."""


GRPC = "grpc://"
"""``grpc://host:port``: an Optuna gRPC storage proxy (``optuna.storages.run_grpc_proxy_server``
in front of one database), so that many workers do not each hold database connections."""


def heartbeats(url: str) -> bool:
    """Whether the storage at ``url`` records heartbeats (RDB URLs; not journals, not gRPC proxies)."""
    return not url.startswith((JOURNAL, GRPC))


def journal_url(url: str) -> str:
    """A journal URL with its path made absolute (trial processes may run in other folders);
    any other URL as it is.

    Raises:
        ValueError: the journal's folder does not exist.
    """
    if not url.startswith(JOURNAL):
        return url
    path = Path(url[len(JOURNAL) :]).expanduser().resolve()
    if not path.parent.is_dir():
        raise ValueError(f"--storage {url}: no folder {path.parent} for the journal file")
    return f"{JOURNAL}{path}"


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """Optuna's RDB storage with heartbeats (a trial whose process died is failed and re-queued),
    or for ``journal://`` URLs its journal file, locked by ``open(O_EXCL)`` (NFSv3 and later),
    or for ``grpc://host:port`` a gRPC storage proxy (needs ``grpcio``); these two have no
    heartbeats.

    Raises:
        ValueError: the URL cannot be opened (names it).
    """
    if url.startswith(GRPC):
        host, _, port = url[len(GRPC) :].rpartition(":")
        if not (host and port.isdigit()):
            raise ValueError(f"--storage {url}: expected grpc://HOST:PORT")
        if find_spec("grpc") is None:
            raise ValueError(f"--storage {url}: a gRPC storage proxy needs grpcio: pip install grpcio")
        return optuna.storages.GrpcStorageProxy(host=host, port=int(port))
    if url.startswith(JOURNAL):
        path = url[len(JOURNAL) :]
        lock = optuna.storages.journal.JournalFileOpenLock(path)
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(path, lock_obj=lock))
    try:
        return optuna.storages.RDBStorage(
            url, heartbeat_interval=HEARTBEAT[0], grace_period=HEARTBEAT[1],
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1),
        )  # fmt: skip
    except (SQLAlchemyError, ImportError, ValueError) as err:  # a bad URL, a missing driver, no server
        raise ValueError(
            f"--storage {shown(url)}: cannot be opened ({type(err).__name__}: {masked(err, url)})"
        ) from None


def shown(url: str) -> str:
    """A storage URL with its password replaced by ``***`` (SQLAlchemy's ``hide_password``)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:  # not a URL SQLAlchemy reads: nothing it could take for a password
        return url


def masked(err: BaseException, url: str) -> str:
    """``err``'s message with the URL's password replaced by ``***``: the password field wherever
    the URL appears (as given, or as SQLAlchemy renders it), and the password standing alone (a
    driver may echo it), never the same letters inside another word (a password ``p`` must not
    turn "import" into "im***ort", which shows it)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return str(err)
    if not parsed.password:
        return str(err)
    message = str(err)
    for form in {url, parsed.render_as_string(hide_password=False)}:
        message = message.replace(form, shown(url))
    forms = {str(parsed.password), quote(str(parsed.password), safe="")}
    alone = "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))
    return re.sub(rf"(?<!\w)(?:{alone})(?!\w)", "***", message)


class ObjectiveNotLogged(ValueError):
    """The recipe's validation does not log the score its ModelCheckpoint monitors."""


class Objective(pl.Callback):
    """Checks at the first validation (the sanity check included) that the monitored score is
    logged, before a trial trains on towards a score that never comes.

    Raises:
        ObjectiveNotLogged: it is not (names the scores that are).
    """

    def __init__(self, monitor: str) -> None:
        self.monitor = monitor

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Give the trackers (the loggers after the run's CSV logger) the trial's objective."""
        best = getattr(trainer.checkpoint_callback, "best_model_score", None)
        if best is not None:
            for tracker in trainer.loggers[1:]:
                tracker.log_metrics({"tune/objective": float(best)}, step=trainer.global_step)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.monitor not in trainer.callback_metrics:
            logged = ", ".join(sorted(trainer.callback_metrics)) or "nothing"
            raise ObjectiveNotLogged(
                f"the recipe's ModelCheckpoint monitors {self.monitor}, which the model does not log (it logs {logged})"
            )


class Pruning(pl.Callback):
    """Reports the monitored score to the trial at every validation and stops training (the
    trial's user attribute ``pruned_at`` says at which validation) when the pruner says so; never
    at the last validation, after all the training, where stopping saves nothing and the trial's
    score would be lost."""

    def __init__(self, trial: optuna.Trial, monitor: str) -> None:
        self.trial, self.monitor, self.validations = trial, monitor, 0

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if trainer.sanity_checking or value is None:
            return
        self.validations += 1
        self.trial.report(float(value), step=self.validations)
        final = trainer.global_step >= trainer.estimated_stepping_batches  # pruning would save nothing: it counts
        if not final and self.trial.should_prune():
            self.trial.set_user_attr("pruned_at", f"validation {self.validations}, {self.monitor}={float(value):.4f}")
            trainer.should_stop = True


@dataclass
class Study:
    """A search over one recipe: where its trials and results go and how they are scored."""

    recipe: str
    root: Path
    monitor: str
    direction: str
    storage: str
    name: str
    pruner: Pruner
    tracker: str | None = None
    """A tracker overlay composed after the recipe in every trial (``recipes/trackers/``)."""

    def recipes(self) -> list[str]:
        """The files each trial composes: the recipe, then the tracker overlay."""
        return [self.recipe, *([self.tracker] if self.tracker else [])]

    def load(self) -> optuna.Study:
        return optuna.create_study(
            storage=open_storage(self.storage), study_name=self.name, direction=self.direction,
            pruner=make_pruner(self.pruner), load_if_exists=True,
        )  # fmt: skip


def run_in_process(study: Study, overrides: dict[str, Any], folder: Path, trial_id: int | None, threads: int) -> float:
    """``bertkit fit`` of the recipe with ``overrides`` into ``folder`` in a new process (pruned
    through ``trial_id`` when given; a tracker names the run by ``folder``'s name); the best
    monitored score. The process is forked from ``trial_processes``' server, which imported torch,
    Lightning and bertkit once, so a trial starts without their import time; it runs in this
    process's working folder and environment as they are now, on ``threads`` threads, its output in
    ``folder/trial.log``.

    Raises:
        ObjectiveNotLogged: the recipe does not log its monitored score (stops the study).
        RuntimeError: the run failed (the last line of its log) or recorded no score.
    """
    folder.mkdir(parents=True, exist_ok=True)
    job = {
        "study": {**study.__dict__, "root": str(study.root)}, "overrides": overrides, "trial_id": trial_id,
        "cwd": os.getcwd(), "environ": dict(os.environ), "threads": threads, "log": str(folder / "trial.log"),
    }  # fmt: skip
    process = trial_processes().Process(target=trial_process, args=(job,), name=f"trial {folder.name}")
    process.start()
    process.join()
    code = process.exitcode
    lines = (folder / "trial.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
    if code == NOT_LOGGED:
        raise ObjectiveNotLogged(f"{study.recipe}: {next(x for x in reversed(lines) if 'does not log' in x)}")
    if code != 0:
        raise RuntimeError(f"exit {code}: {lines[-1] if lines else 'no output'} (log: {folder / 'trial.log'})")
    score = best_score(folder / "checkpoints" / "last.ckpt")
    if score is None:
        raise RuntimeError(f"{folder}: no {study.monitor} recorded (does the recipe validate?)")
    return score


def trial_processes() -> multiprocessing.context.BaseContext:
    """Python's ``forkserver`` start method with this module preloaded: its server process (started
    at the first trial, ended with this process) imports torch, Lightning and bertkit once, never
    trains, and forks each trial from that single-threaded state (Python's documentation:
    ``multiprocessing.set_forkserver_preload``)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def trial_process(job: dict[str, Any]) -> None:
    """A trial's process: its output to its log, the caller's working folder and environment, its
    threads, then ``fit_trial``. On Linux it is killed when the forkserver ends, which happens when
    ``bertkit tune`` ends, even by ``kill -9``, instead of training on unseen (its trial is
    re-queued by the next run)."""
    log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1), os.dup2(log, 2), os.close(log)
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["environ"] | {"OMP_NUM_THREADS": str(job["threads"])})
    torch.set_num_threads(job["threads"])
    fit_trial(job)


def best_score(last: Path) -> float | None:
    """``best_model_score`` that ``last.ckpt``'s ModelCheckpoint state holds."""
    if not last.is_file():
        return None
    for key, value in (load_checkpoint(last).get("callbacks") or {}).items():
        score = value.get("best_model_score") if "ModelCheckpoint" in key else None
        if score is not None and math.isfinite(float(score)):
            return float(score)
    return None


def fit_trial(job: dict[str, Any]) -> None:
    """The trial process: the recipe composed as ``bertkit fit`` composes it, pruned, fitted."""
    from bertkit.api.app import compose

    study = Study(**{**job["study"], "root": Path(job["study"]["root"])})
    composed = compose(*study.recipes(), overrides=job["overrides"])
    run_name = Path(job["overrides"]["trainer.default_root_dir"]).name  # 003, best-seed1 …
    for tracker in composed.trainer.loggers[1:]:  # after the run's CSV logger
        tracker.log_hyperparams({"tune_study": study.name, "tune_run": run_name})
    if job["trial_id"] is not None:
        trial = optuna.trial.Trial(study.load(), job["trial_id"])
        composed.trainer.callbacks.append(Pruning(trial, study.monitor))
    composed.trainer.callbacks.insert(0, Objective(study.monitor))
    try:
        composed.trainer.fit(composed.model, datamodule=composed.datamodule)
    except ObjectiveNotLogged as err:
        print(err, flush=True)
        sys.exit(NOT_LOGGED)


def optimize(study: Study, space: list[Param], trials: int, n_jobs: int, seed: int, poll: float = 2.0) -> optuna.Study:
    """Run trials until the study holds ``trials`` finished ones (complete, pruned or failed) and
    none is running or waiting (re-queued) anywhere, checking every ``poll`` seconds (a read of
    the storage: a worker done first reports within 2 s of the last trial's end, not 10)."""
    search = study.load()
    search.set_user_attr("fixed", {p.key: p.choices[0] for p in space if p.fixed})  # for best.yaml
    search.sampler = optuna.samplers.TPESampler(seed=seed + len(search.trials))
    threads = max(1, (os.cpu_count() or 1) // n_jobs)

    def objective(trial: optuna.Trial) -> float:
        params = {p.key: p.suggest(trial) for p in space}
        folder = study.root / "trials" / f"{trial.number:03d}"
        trial.set_user_attr("folder", str(folder))
        overrides = {**params, "trainer.default_root_dir": str(folder)}
        try:
            score = run_in_process(study, overrides, folder, trial._trial_id, threads)
        except RuntimeError as err:
            trial.set_user_attr("failed", str(err))
            raise
        if "pruned_at" in trial.storage.get_trial_user_attrs(trial._trial_id):  # set by the trial's process
            raise optuna.TrialPruned()
        return score

    states = optuna.trial.TrialState
    finished = (states.COMPLETE, states.PRUNED, states.FAIL)

    def said(_: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.state == states.COMPLETE:
            why = f"{study.monitor} {trial.value:.4f}"
        else:
            why = trial.user_attrs.get("pruned_at") or trial.user_attrs.get("failed", "")
        print(f"trial {trial.number:03d} {trial.state.name.lower()}: {why} {trial.params}", file=sys.stderr, flush=True)

    while True:
        done = len(search.get_trials(deepcopy=False, states=finished))
        waiting = len(search.get_trials(deepcopy=False, states=(states.WAITING,)))
        if done < trials or waiting:  # a re-queued trial runs even when the count is reached
            goal = optuna.study.MaxTrialsCallback(max(trials, done + waiting), states=finished)
            search.optimize(objective, n_jobs=n_jobs, catch=(RuntimeError,), callbacks=[goal, said])
        running = [t.number for t in search.get_trials(deepcopy=False, states=(states.RUNNING,))]
        if not running:
            return search
        if not heartbeats(study.storage):  # a dead worker's trial would be waited for forever
            print(
                f"trial(s) {running} still running in other workers: the report counts the finished ones "
                "(without heartbeats a dead worker looks like a slow one; run bertkit tune --report later)",
                flush=True,
            )
            return search
        # Trials running in other workers (bertkit tune beside this one or on another machine) are
        # waited for, so that the report counts them; one whose worker died goes stale, is failed
        # and re-queued, and is then run here.
        print(f"waiting for trial(s) {running}, running in other workers", flush=True)
        time.sleep(poll)
        optuna.storages.fail_stale_trials(search)


def nested(params: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys as a recipe overlay (``{"model": {"learning_rate": …}}``)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        *parents, last = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def report(search: optuna.Study, out: Path) -> dict[str, Any]:
    """``best.yaml``, ``trials.csv`` and the plots into ``out``; the summary."""
    out.mkdir(parents=True, exist_ok=True)
    trials = search.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    keys = sorted({k for t in trials for k in t.params})
    with atomic_path(out / "trials.csv") as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["number", "state", "value", "seconds", *keys, "pruned_at", "failed", "folder"])
        for t in trials:
            seconds = (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete else ""
            attrs = t.user_attrs
            row = [t.number, t.state.name, t.value, seconds, *(t.params.get(k, "") for k in keys)]
            writer.writerow([*row, attrs.get("pruned_at", ""), attrs.get("failed", ""), attrs.get("folder", "")])
    summary: dict[str, Any] = {
        "trials": {s.name: sum(t.state == s for t in trials) for s in optuna.trial.TrialState},
    }
    if complete:
        best = search.best_trial
        summary |= {"best_value": best.value, "best_params": best.params, "best_trial": best.number}
        overlay = {**search.user_attrs.get("fixed", {}), **best.params}  # the trial's settings, fixed ones too
        with atomic_path(out / "best.yaml") as tmp:
            tmp.write_text(yaml.safe_dump(nested(overlay), sort_keys=False), encoding="utf-8")
        summary["plots"] = plots(search, out)
    with atomic_path(out / "summary.json") as tmp:
        tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return summary


def plots(search: optuna.Study, out: Path) -> list[str]:
    """Optimisation history, parameter importances (two complete trials or more) and slice plot
    as PNG (Optuna's matplotlib visualisations)."""
    import matplotlib

    matplotlib.use("Agg")
    from optuna.visualization import matplotlib as views

    written = []
    complete = [t for t in search.trials if t.state == optuna.trial.TrialState.COMPLETE]
    kinds = {"history": views.plot_optimization_history, "slice": views.plot_slice}
    if len(complete) >= 2 and len({k for t in complete for k in t.params}) >= 1:
        kinds["importances"] = views.plot_param_importances
    for name, plot in kinds.items():
        try:
            axes = plot(search)
        except (ValueError, RuntimeError) as err:  # e.g. importances of a parameter that never varied
            print(f"no {name} plot: {err}")
            continue
        figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
        path = out / f"{name}.png"
        with atomic_path(path) as tmp:
            figure.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
        written.append(str(path))
        matplotlib.pyplot.close(figure)
    return written


def seed_study(study: Study, best: dict[str, Any], fixed: dict[str, Any], seeds: int) -> dict[str, Any]:
    """The best parameters against the recipe's defaults (both with the space's ``fixed``
    settings) over seeds 1..``seeds`` (unpruned runs in ``tune/seeds``, one at a time on every
    core): mean ± sample SD of the monitored score each."""
    scores: dict[str, list[float]] = {"best": [], "recipe": []}
    for seed in range(1, seeds + 1):
        for name, params in (("best", best), ("recipe", fixed)):
            folder = study.root / "tune" / "seeds" / f"{name}-seed{seed}"
            overrides = {**params, "seed_everything": seed, "data.seed": seed, "trainer.default_root_dir": str(folder)}
            scores[name].append(run_in_process(study, overrides, folder, None, os.cpu_count() or 1))
    return {
        name: {"mean": statistics.fmean(v), "sd": statistics.stdev(v) if len(v) > 1 else 0.0, "scores": v}
        for name, v in scores.items()
    }


def run(
    recipe: str, space_file: str, trials: int, n_jobs: int, storage: str | None, name: str | None,
    pruner: Pruner, seed: int, seeds: int, report_only: bool, tracker: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``bertkit tune`` (its arguments, documented there): the summary it prints."""
    from bertkit.api.app import compose

    composed = compose(recipe, *([tracker] if tracker else []))
    checkpoint = composed.trainer.checkpoint_callback
    if checkpoint is None or not checkpoint.monitor:
        raise ValueError(f"{recipe}: its ModelCheckpoint monitors no score; bertkit tune optimises that score")
    root = Path(composed.trainer.default_root_dir).resolve()
    study = Study(
        recipe=str(Path(recipe).resolve()), root=root, monitor=checkpoint.monitor,
        direction="maximize" if checkpoint.mode == "max" else "minimize",
        storage=journal_url(storage) if storage else f"sqlite:///{root / 'tune' / 'study.db'}",
        name=name or Path(recipe).stem, pruner=pruner,
        tracker=str(Path(tracker).resolve()) if tracker else None,
    )  # fmt: skip
    (root / "tune").mkdir(parents=True, exist_ok=True)
    space = read_space(space_file, flat_keys(composed.config))
    del composed
    search = study.load() if report_only else optimize(study, space, trials, n_jobs, seed)
    summary = {"study": study.name, "storage": shown(study.storage), "objective": f"{study.direction} {study.monitor}"}
    summary |= report(search, root / "tune")
    if seeds and "best_params" in summary and not report_only:
        fixed = search.user_attrs.get("fixed", {})
        summary["seeds"] = seed_study(study, {**fixed, **summary["best_params"]}, fixed, seeds)
        with atomic_path(root / "tune" / "summary.json") as tmp:
            tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return summary
