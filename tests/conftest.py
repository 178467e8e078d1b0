"""Shared fixtures: the MiniLM checkpoint, the real-data folder, and small sample runs."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

from tests.durations import QUICK_LIMIT

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("BERTKIT_DATA_DIR", ROOT.parent / "shared" / "data"))
CONLL = DATA / "ner" / "conll2003"
RECIPE = ROOT / "recipes" / "ner.yaml"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's default): one worker per core, at most 4 (DDP tests start two
    processes each, and every worker holds models in memory)."""
    return max(1, min(os.cpu_count() or 1, 4))


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that took longest in a measured run (``tests/durations.json``, written by
    ``python -m tests.durations``) first, and in each the longest tests first, each module's tests
    kept together; new ones last: xdist hands out tests in this order, so the longest runs start
    early instead of leaving one worker busy at the end while the other idles (longest-first
    scheduling). A test measured at ``QUICK_LIMIT`` seconds or more, and every ``system`` test,
    is marked ``slow``: the quick subset (``-m "not slow"``) leaves it out."""
    measured = json.loads((ROOT / "tests" / "durations.json").read_text())
    modules, tests = measured["modules"], measured["tests"]
    items.sort(key=lambda item: (-modules.get(item.nodeid.partition("::")[0], 0.0), -tests.get(item.nodeid, 0.0)))
    for item in items:
        if tests.get(item.nodeid, 0.0) >= QUICK_LIMIT or item.get_closest_marker("system"):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config: pytest.Config) -> None:
    """Nothing downloads: the Hugging Face Hub is offline for the tests and the processes they
    start (tests that resolve Hub ids lay out a cache). Under xdist, each worker (and the
    processes its tests start) uses its share of the cores: torch's default of every core per
    process would make the workers fight over them. ``BERTKIT_DATA_DIR`` names the real data
    (``DATA``, read above) and is then taken out of the environment: a recipe a test runs reads
    the bundled sample, as on a user's first day, whether or not the variable is set (with it, a
    notebook trained on all of CoNLL-2003)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        os.environ.pop("BERTKIT_DATA_DIR", None)  # where tests run: xdist's workers have read it
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


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
    *args: str, cwd: Path, env: dict[str, str] | None = None, check: bool = True, fresh_process: bool = False
) -> subprocess.CompletedProcess:
    """Run ``bertkit ARGS`` in ``cwd``: the console script's ``bertkit.cli.main`` in this process
    (``in_process``: torch and Lightning are imported once per test process, not once per
    command; ``PYTHONPATH`` in ``env`` goes before ``sys.path`` for the run), or the console
    script in a new process (``fresh_process``: runs that spawn processes from ``sys.argv`` (DDP),
    are killed, or serve)."""
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning", **(env or {})}
    if fresh_process:
        exe = Path(sys.executable).with_name("bertkit")
        proc = subprocess.run([str(exe), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=900)
    else:
        proc = in_process(list(args), cwd, full_env)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"bertkit {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


def free_port() -> int:
    """A TCP port on 127.0.0.1 that no process listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_bertkit_fresh(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """``run_bertkit`` in a new process."""
    return run_bertkit(*args, fresh_process=True, **kwargs)


class Forked:
    """``bertkit ARGS`` in a process forked from this one: a process of its own for signals, kills,
    exit statuses and DDP (``sys.argv`` is the command's, so Lightning starts the other ranks as
    the console script would), without the seconds a new interpreter spends importing torch and
    Lightning. Output goes to files in a temporary folder, read and removed by ``wait``;
    ``isolated`` sets its working directory, environment and plugins as a new process has them."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        full_env = self._prepare(args, env)
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                _fresh_signals()
                sys.argv = [str(Path(sys.executable).with_name("bertkit")), *args]
                with self.out.open("w", buffering=1) as out, self.err.open("w", buffering=1) as err:
                    code = in_process(list(args), cwd, full_env, out, err).returncode
            finally:
                os._exit(code)

    def _prepare(self, args: list[str], env: dict[str, str] | None) -> dict[str, str]:
        """Set the command, no status yet and the output files; the environment it runs with."""
        self.args, self.returncode, self.ended = args, None, None
        self.folder = Path(tempfile.mkdtemp(prefix=f"{type(self).__name__.lower()}-"))
        self.out, self.err = self.folder / "stdout", self.folder / "stderr"
        return {**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning", **(env or {})}

    def poll(self) -> int | None:
        """The exit status (negative: the signal that ended it) once it has ended, else None."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float = 900) -> subprocess.CompletedProcess:
        """Wait for the end (killed after ``timeout`` seconds); its status and output (the same
        on every call)."""
        if self.ended is None:
            deadline = time.monotonic() + timeout
            while self.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.returncode is None:
                self._kill()
            out, err = (path.read_text() if path.exists() else "" for path in (self.out, self.err))
            shutil.rmtree(self.folder, ignore_errors=True)
            self.ended = subprocess.CompletedProcess(["bertkit", *self.args], self.returncode, out, err)
        return self.ended

    def _kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])


class Spawned(Forked):
    """``bertkit ARGS`` run by the console script in a new interpreter and a session of its own,
    for servers: their worker processes start from a clean process, not from a fork of a pytest
    worker whose threads may hold locks. ``wait`` ends the whole session, so no worker of a
    killed server outlives the test."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        full_env = self._prepare(args, env)
        exe = str(Path(sys.executable).with_name("bertkit"))
        with self.out.open("w") as out, self.err.open("w") as err:
            self.popen = subprocess.Popen(
                [exe, *args], cwd=cwd, env=full_env, stdout=out, stderr=err, start_new_session=True
            )
        self.pid = self.popen.pid

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.popen.poll()
        return self.returncode

    def wait(self, timeout: float = 900) -> subprocess.CompletedProcess:
        try:
            return super().wait(timeout)
        finally:
            self._end_session()

    def _kill(self) -> None:
        self._end_session()
        self.returncode = self.popen.wait()

    def _end_session(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # every process of the session has ended
            pass


def _fresh_signals() -> None:
    """Signal handling as a new interpreter starts with it, whatever a test changed in this one
    (an ignored SIGCHLD would make every wait for a child fail with ECHILD): every signal's
    default, except Python's own (SIGINT raises KeyboardInterrupt; SIGPIPE and SIGXFSZ ignored);
    none blocked."""
    python = {signal.SIGINT: signal.default_int_handler, signal.SIGPIPE: signal.SIG_IGN, signal.SIGXFSZ: signal.SIG_IGN}
    for signum in signal.valid_signals():
        try:
            signal.signal(signum, python.get(signum, signal.SIG_DFL))
        except (OSError, ValueError):  # SIGKILL, SIGSTOP and the real-time ones Python cannot set
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def run_bertkit_forked(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``bertkit ARGS`` in a forked process (``Forked``), to its end; its status is not checked."""
    return Forked(list(args), cwd, env).wait()


def in_process(
    args: list[str], cwd: Path, env: dict[str, str], out: IO[str] | None = None, err: IO[str] | None = None
) -> subprocess.CompletedProcess:
    """``bertkit.cli.main(args)`` as a new process would run it (``isolated``): stdout and stderr
    captured (into ``out`` and ``err`` where given, and then not returned), an uncaught error's
    traceback and exit status 1 as the interpreter gives them."""
    import traceback
    from io import StringIO

    from bertkit.cli import main

    out, err = out or StringIO(), err or StringIO()
    with isolated(cwd, env, out, err):
        try:
            code = main(args)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except Exception:  # uncaught: the traceback and exit status 1, as the interpreter gives them
            traceback.print_exc()
            code = 1
    texts = [stream.getvalue() if isinstance(stream, StringIO) else "" for stream in (out, err)]
    return subprocess.CompletedProcess(["bertkit", *args], code, *texts)


@contextmanager
def isolated(cwd: Path, env: dict[str, str], out: IO[str], err: IO[str]) -> Iterator[None]:
    """Run the block as a new process would: in ``cwd`` with ``env``, plugins loaded anew,
    ``env``'s ``PYTHONPATH`` first on ``sys.path`` (its distributions' entry points found, its
    modules imported, both forgotten afterwards), warnings shown again, stdout and stderr
    (Lightning's log handlers included) written to ``out`` and ``err``; the working directory,
    environment, random states, torch settings and run-folder locks are restored or released
    afterwards."""
    import importlib
    import random
    import warnings
    from contextlib import redirect_stderr, redirect_stdout

    import numpy as np
    import torch

    import bertkit.plugins
    import bertkit.training.run_folder

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    settings = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    matmul = torch.get_float32_matmul_precision()
    handlers = [  # a handler left on a stream an earlier test's capture closed is left alone
        h
        for h in _all_handlers()
        if isinstance(h, logging.StreamHandler)
        and not isinstance(h, logging.FileHandler)
        and not getattr(h.stream, "closed", False)
    ]
    streams = [h.stream for h in handlers]
    bertkit.plugins._pm = None  # entry points and BERTKIT_LOAD_PLUGINS are read anew, as at start-up
    bertkit.plugins._sources.clear()
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    imported = set(sys.modules)
    sys.path[:0] = paths
    importlib.invalidate_caches()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with warnings.catch_warnings(), redirect_stdout(out), redirect_stderr(err):
            warnings.resetwarnings()  # a new process's filters; shown again although seen before here
            warnings.simplefilter("default")
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.showwarning = _to_stderr  # as a process prints them (pytest would record them)
            for handler, stream in zip(handlers, streams, strict=True):
                handler.setStream(out if stream in (sys.stdout, sys.__stdout__) else err)
            yield
    finally:
        for path in paths:
            sys.path.remove(path)
        for name in set(sys.modules) - imported:  # the modules of PYTHONPATH: a new process would not have them
            if any(str(getattr(sys.modules[name], "__file__", None) or "").startswith(p) for p in paths):
                del sys.modules[name]
        importlib.invalidate_caches()
        bertkit.plugins._pm = None
        bertkit.plugins._sources.clear()
        for handler, stream in zip(handlers, streams, strict=True):
            handler.setStream(stream)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        torch.set_num_threads(settings[0])
        torch.use_deterministic_algorithms(settings[1])
        torch.set_float32_matmul_precision(matmul)
        bertkit.training.run_folder.release_all()


def as_overrides(args: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Command-line arguments (``--config FILE``, ``--key=value``) as ``compose``'s recipes and overrides."""
    import yaml

    configs, overrides, given = [], {}, iter(args)
    for arg in given:
        if arg == "--config":
            configs.append(next(given))
        else:
            key, value = arg.removeprefix("--").split("=", 1)
            overrides[key] = yaml.safe_load(value)
    return configs, overrides


@contextmanager
def notebook(cwd: Path, args: list[str], processes: int = 1) -> Iterator[Any]:
    """The recipe of command-line ``args`` composed as a notebook composes it (``bertkit.compose``)
    in ``cwd``, ``isolated`` (its output discarded); ``processes`` > 1: DDP on the CPU with the
    processes forked from this one (``ddp_fork``, the launcher of ``ddp_notebook``), as many."""
    from io import StringIO

    from bertkit import compose

    configs, overrides = as_overrides(args)
    if processes > 1:
        overrides |= {"trainer.strategy": "ddp_fork", "trainer.devices": processes, "trainer.accelerator": "cpu"}
    output = StringIO()
    with isolated(cwd, dict(os.environ), output, output):
        yield compose(*configs, overrides=overrides)


def _to_stderr(message, category, filename, lineno, file=None, line=None) -> None:
    import warnings

    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _all_handlers() -> list[logging.Handler]:
    loggers = [
        logging.getLogger(),
        *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)),
    ]
    return [h for logger in loggers for h in logger.handlers]


# A tiny random encoder (2 x 128) with MiniLM's vocabulary: for runs whose subject is not the pre-trained weights.
TINY = ["--model.pretrained=null", "--model.preset=tiny", "--model.vocab_file=all-MiniLM-L6-v2"]

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


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory in which ``bertkit fit`` ran once on the bundled sample with the tiny
    encoder (``TINY``): for tests of what is done with a checkpoint, not of what it learned."""
    work = tmp_path_factory.mktemp("tiny_run")
    run_bertkit("fit", "--config", str(RECIPE), *FAST, *TINY, cwd=work)
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
