"""``bertkit tune``: a space file is checked against the recipe's keys before any trial; a study
runs each trial as a run folder, resumes from its SQLite file with the trials it has, records a
failed trial with its reason without stopping, makes each complete trial a tracker run
(``--tracker``) and writes a best.yaml that ``bertkit fit`` reads; workers share one study through
a journal file or a gRPC proxy; the pruning callback stops a trial the pruner rejects."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from bertkit import compose
from bertkit.commands.tuning import Param, Pruning, read_space
from tests.conftest import RECIPE, ROOT, free_port, run_bertkit

pytest.importorskip("optuna")

KEYS = {"model.learning_rate", "model.warmup_ratio", "data.batch_size", "trainer.max_epochs"}


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (
            "model.learning_rat: {low: 1.0e-5, high: 1.0e-4}",
            r"model\.learning_rat: not a key of the recipe; did you mean model\.learning_rate\?",
        ),
        ("data.batch_size: []", r"data\.batch_size: expected at least one choice"),
        ("model.learning_rate: {low: 1.0e-4}", r"model\.learning_rate: expected a list of choices or \{low, high\}"),
        ("model.learning_rate: {low: 1.0e-4, high: 1.0e-5}", r"expected low < high"),
        ("model.warmup_ratio: {low: 0.0, high: 0.2, log: true}", r"low > 0 without step when log: true"),
        ("model.warmup_ratio: {low: a, high: 0.2}", r"low, high and step must be numbers"),
        ("- model.learning_rate", r"expected a mapping of recipe keys"),
    ],
)
def test_a_bad_space_names_the_file_and_key(space: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(space + "\n")
    with pytest.raises(ValueError, match=message):
        read_space(path, KEYS)


def test_a_space_reads_ints_floats_and_choices(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(
        "model.learning_rate: {low: 1.0e-5, high: 1.0e-3, log: true}\n"
        "trainer.max_epochs: {low: 1, high: 3}\ndata.batch_size: [8, 16]\nmodel.warmup_ratio: 0.0\n"
    )
    import optuna

    params = read_space(path, KEYS)
    trial = optuna.create_study().ask()
    values = {p.key: p.suggest(trial) for p in params}
    assert 1e-5 <= values["model.learning_rate"] <= 1e-3 and isinstance(values["trainer.max_epochs"], int)
    assert values["data.batch_size"] in (8, 16) and params[2] == Param("data.batch_size", choices=(8, 16))
    assert values["model.warmup_ratio"] == 0.0 and "model.warmup_ratio" not in trial.params  # fixed


def test_pruning_stops_training_and_says_where() -> None:
    said: dict = {}
    trial = SimpleNamespace(
        report=lambda value, step: said.update(value=value, step=step),
        should_prune=lambda: True,
        set_user_attr=lambda key, value: said.update({key: value}),
    )
    trainer = SimpleNamespace(
        callback_metrics={"val/f1": 0.25}, sanity_checking=False, should_stop=False, global_step=40,
        estimated_stepping_batches=160,
    )  # fmt: skip
    pruning = Pruning(trial, "val/f1")
    pruning.on_validation_end(trainer, None)
    assert trainer.should_stop and said["step"] == 1 and said["pruned_at"] == "validation 1, val/f1=0.2500"
    last = SimpleNamespace(**{**vars(trainer), "should_stop": False, "global_step": 160})
    pruning.on_validation_end(last, None)  # the last validation: reported, never pruned
    assert said["step"] == 2 and not last.should_stop


def tiny_recipe(folder: Path) -> dict:
    """The NER recipe on a tiny random encoder, a few batches; written to ``folder/tiny.yaml``."""
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe["model"] |= {"pretrained": None, "preset": "tiny", "vocab_file": "all-MiniLM-L6-v2"}
    recipe["trainer"] |= {"max_epochs": 1, "limit_train_batches": 3, "limit_val_batches": 1}
    recipe["trainer"] |= {"enable_progress_bar": False, "default_root_dir": str(folder / "runs")}
    recipe["data"]["batch_size"] = 8
    (folder / "tiny.yaml").write_text(yaml.safe_dump(recipe))
    return recipe


@pytest.mark.slow
@pytest.mark.system
def test_a_study_runs_resumes_records_failures_and_writes_a_best_recipe(tmp_path: Path) -> None:
    """Two trials, then one more on resuming (the space fails one of them: it is recorded and the
    study goes on); with ``--tracker``, every complete trial is also an MLflow run."""
    mlflow = pytest.importorskip("mlflow")
    tiny_recipe(tmp_path)
    (tmp_path / "space.yaml").write_text(
        "model.learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}\nmodel.max_length: [32, 0]\n"
        "trainer.limit_train_batches: 2\n"
    )  # max_length 0 fails: a failed trial must not stop the study; a plain value is fixed
    tune = ["tune", "--config", "tiny.yaml", "--space", "space.yaml", "--pruner", "none", "--seed", "3"]
    tune += ["--tracker", str(ROOT / "recipes" / "trackers" / "mlflow.yaml")]
    said = run_bertkit(*tune, "--trials", "2", cwd=tmp_path).stderr
    said += run_bertkit(*tune, "--trials", "3", cwd=tmp_path).stderr  # resumes: one more
    out = tmp_path / "runs" / "tune"
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert [r["number"] for r in rows] == ["0", "1", "2"]
    assert {r["state"] for r in rows} == {"COMPLETE", "FAIL"}
    # every complete trial is a tracker run with its parameters and objective
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("bertkit").experiment_id])
    tracked = {r.data.params["tune_run"]: r for r in runs}
    assert {r.data.params["tune_study"] for r in runs} == {"tiny"}
    for row in rows:
        if row["model.max_length"] == "0":
            assert row["state"] == "FAIL" and "model.max_length=0: expected an integer in [8, 512]" in row["failed"], (
                row
            )
        else:
            assert row["state"] == "COMPLETE" and 0.0 <= float(row["value"]) <= 1.0
            assert f"trial {row['number'].zfill(3)} complete: val/f1 {float(row['value']):.4f}" in said
            folder = Path(row["folder"])  # an ordinary run folder
            assert (folder / "checkpoints" / "last.ckpt").is_file() and (
                folder / "logs/version_0/config.yaml"
            ).is_file()
            run = tracked[row["number"].zfill(3)]
            assert float(run.data.params["learning_rate"]) == pytest.approx(float(row["model.learning_rate"]))
            assert run.data.metrics["tune/objective"] == pytest.approx(float(row["value"]))
    summary = json.loads((out / "summary.json").read_text())
    best = max((r for r in rows if r["state"] == "COMPLETE"), key=lambda r: float(r["value"]))
    assert summary["best_value"] == pytest.approx(float(best["value"]))
    assert yaml.safe_load((out / "best.yaml").read_text()) == {
        "trainer": {"limit_train_batches": 2},
        "model": {"learning_rate": pytest.approx(float(best["model.learning_rate"])), "max_length": 32},
    }
    assert "trainer.limit_train_batches" not in rows[0]  # fixed, not searched
    assert (out / "history.png").stat().st_size > 1000 and (out / "slice.png").is_file()
    again = compose(tmp_path / "tiny.yaml", out / "best.yaml")  # what fit reads from both files
    assert again.model.hparams["learning_rate"] == pytest.approx(float(best["model.learning_rate"]))
    assert (
        again.model.hparams["max_length"] == again.datamodule.max_length == 32
        and again.trainer.limit_train_batches == 2
    )


def test_a_stale_trial_is_waited_for_failed_and_run_again_with_its_parameters(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """A worker killed with ``kill -9`` leaves its trial RUNNING: a worker waits for it before it
    reports; once its heartbeat is stale the trial is failed, re-queued and run with its
    parameters."""
    import optuna

    from bertkit.commands import tuning as tune

    monkeypatch.setattr(tune, "HEARTBEAT", (1, 2))
    study = tune.Study("r.yaml", tmp_path, "val/f1", "maximize", f"sqlite:///{tmp_path / 's.db'}", "s", "none")
    space = [tune.Param("model.learning_rate", low=1e-5, high=1e-3, log=True)]
    lost = study.load().ask({"model.learning_rate": optuna.distributions.FloatDistribution(1e-5, 1e-3, log=True)})
    lost.storage.record_heartbeat(lost._trial_id)  # and its worker dies
    ran: list[float] = []
    monkeypatch.setattr(
        tune, "run_in_process", lambda s, overrides, *a: ran.append(overrides["model.learning_rate"]) or 0.5
    )
    search = tune.optimize(study, space, trials=2, n_jobs=1, seed=0, poll=0.5)
    assert [t.state.name for t in search.trials] == ["FAIL", "COMPLETE", "COMPLETE", "COMPLETE"]
    assert ran[-1] == lost.params["model.learning_rate"] and len(ran) == 3
    assert "waiting for trial(s) [0], running in other workers" in capsys.readouterr().out


def test_tune_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text("model.learning_rat: [0.001]\n")
    out = run_bertkit("tune", "--config", str(RECIPE), "--space", "space.yaml", cwd=tmp_path, check=False)
    assert out.returncode == 2 and "did you mean model.learning_rate?" in out.stderr
    (tmp_path / "space.yaml").write_text("model.learning_rate: [0.001]\n")
    bad = ["--storage", "nosuchdb://x"]
    out = run_bertkit("tune", "--config", str(RECIPE), "--space", "space.yaml", *bad, cwd=tmp_path, check=False)
    assert out.returncode == 2 and "--storage nosuchdb://x: cannot be opened" in out.stderr
    for bad, said in (
        ("journal:///no/such/folder/s.log", "no folder /no/such/folder"),
        ("grpc://x", "grpc://HOST:PORT"),
    ):
        out = run_bertkit(
            "tune", "--config", str(RECIPE), "--space", "space.yaml", "--storage", bad, cwd=tmp_path, check=False
        )
        assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out.stderr
    for option in ("--n_jobs", "--trials"):
        out = run_bertkit(
            "tune", "--config", str(RECIPE), "--space", "space.yaml", option, "0", cwd=tmp_path, check=False
        )
        assert out.returncode == 2 and option.lstrip("-") in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_a_study_whose_every_trial_failed_exits_1(tmp_path: Path) -> None:
    tiny_recipe(tmp_path)
    (tmp_path / "space.yaml").write_text("model.max_length: [0, 1]\n")  # every trial fails at once
    out = run_bertkit(
        "tune", "--config", "tiny.yaml", "--space", "space.yaml", "--trials", "1", cwd=tmp_path, check=False
    )
    assert out.returncode == 1 and "no trial completed" in out.stderr, out.stderr
    assert json.loads(out.stdout)["trials"]["FAIL"] == 1


@pytest.mark.system
def test_an_objective_the_recipe_does_not_log_stops_the_study_at_its_first_validation(tmp_path: Path) -> None:
    recipe = tiny_recipe(tmp_path)
    recipe["trainer"]["callbacks"][0]["init_args"]["monitor"] = "val/f2"
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(recipe))
    (tmp_path / "space.yaml").write_text("model.learning_rate: [0.001, 0.0001]\n")
    out = run_bertkit(
        "tune", "--config", "tiny.yaml", "--space", "space.yaml", "--trials", "3", cwd=tmp_path, check=False
    )
    assert out.returncode == 2, out.stderr
    assert "ModelCheckpoint monitors val/f2, which the model does not log (it logs " in out.stderr
    assert "val/f1" in out.stderr and not (tmp_path / "runs" / "trials" / "001").exists()


@pytest.mark.slow
@pytest.mark.system
def test_two_workers_share_a_study_one_through_its_journal_file_one_through_a_grpc_proxy(tmp_path: Path) -> None:
    """``bertkit tune`` workers running together on one study (the tiny recipe, two trials): one
    in a new interpreter reaches it through a gRPC proxy (Optuna's ``run_grpc_proxy_server``, in
    a process of its own: gRPC's threads never live in this one, whose later tests fork), the
    other, in this process while the first runs, reads and writes the journal file itself. Each
    trial is run by one worker, in a run folder of its own."""
    pytest.importorskip("grpc")
    import optuna

    tiny_recipe(tmp_path)
    (tmp_path / "space.yaml").write_text("model.learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}\n")
    port = free_port()
    journal = tmp_path / "study.log"
    serve = (
        "import optuna; optuna.storages.run_grpc_proxy_server(optuna.storages.JournalStorage("
        f"optuna.storages.journal.JournalFileBackend({str(journal)!r})), host='127.0.0.1', port={port})"
    )
    server = subprocess.Popen([sys.executable, "-c", serve], stderr=subprocess.DEVNULL)
    tune = ["tune", "--config", "tiny.yaml", "--space", "space.yaml", "--pruner", "none", "--trials", "2"]
    exe = str(Path(sys.executable).with_name("bertkit"))
    try:
        proxied = subprocess.Popen(
            [exe, *tune, "--storage", f"grpc://127.0.0.1:{port}", "--seed", "2"],
            cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        first = tmp_path / "runs" / "trials" / "000"  # made when the proxied worker starts trial 0
        for _ in range(1200):
            if first.exists() or proxied.poll() is not None:
                break
            time.sleep(0.25)
        journal_storage = "journal://study.log"  # relative: made absolute for the trials
        local = run_bertkit(*tune, "--storage", journal_storage, "--seed", "1", cwd=tmp_path, check=False)
        _, err = proxied.communicate(timeout=600)
    finally:
        server.kill(), server.wait()
    assert local.returncode == 0 and proxied.returncode == 0, (local.stderr[-2000:], err[-2000:])
    assert "trial 000 complete" in err and "trial 001 complete" in local.stderr  # one trial each
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    trials = optuna.load_study(study_name="tiny", storage=storage).trials
    assert len(trials) >= 2 and all(t.state.name == "COMPLETE" for t in trials)
    assert sorted(t.number for t in trials) == list(range(len(trials)))  # each trial taken by one worker
    folders = [Path(t.user_attrs["folder"]) for t in trials]
    assert len(set(folders)) == len(trials) and all((f / "checkpoints/last.ckpt").is_file() for f in folders)
