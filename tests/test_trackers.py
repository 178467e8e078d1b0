"""Trackers from overlays (``recipes/trackers/``): TensorBoard and MLflow log a fit beside the run's
CSV logs (which the summary's plots read); ``bertkit tune --tracker`` is tested with the study in
``test_tune``."""

from __future__ import annotations

import csv
import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonargparse import Namespace

from bertkit.training.run_folder import place_outputs
from tests.conftest import RECIPE, ROOT, run_bertkit
from tests.test_tune import tiny_recipe

TRACKERS = ROOT / "recipes" / "trackers"
CSV = "pytorch_lightning.loggers.csv_logs.CSVLogger"


def logger(class_path: str) -> Namespace:
    return Namespace(class_path=class_path, init_args=Namespace())


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, [CSV]),
        ([logger("pytorch_lightning.loggers.MLFlowLogger")], [CSV, "pytorch_lightning.loggers.MLFlowLogger"]),
        (logger("pytorch_lightning.loggers.TensorBoardLogger"), [CSV, "pytorch_lightning.loggers.TensorBoardLogger"]),
        ([logger("pytorch_lightning.loggers.CSVLogger")], ["pytorch_lightning.loggers.CSVLogger"]),
        (False, []),
    ],
)
def test_fit_keeps_its_csv_logs_beside_the_trackers_a_recipe_gives(given, expected):
    trainer = Namespace(default_root_dir="runs/x", logger=given, callbacks=[])
    place_outputs(trainer, "fit")
    found = trainer.logger if isinstance(trainer.logger, list) else [trainer.logger] if trainer.logger else []
    assert [f.class_path for f in found] == expected
    if expected[:1] == [CSV]:
        assert found[0].init_args.save_dir == "runs/x" and found[0].init_args.name == "logs"


@pytest.mark.system
def test_a_fit_logs_to_tensorboard_and_mlflow_with_its_settings_and_scores(tmp_path):
    pytest.importorskip("tensorboard")
    mlflow = pytest.importorskip("mlflow")
    tiny_recipe(tmp_path)
    steps = ["--trainer.limit_train_batches=6", "--trainer.val_check_interval=3", "--trainer.log_every_n_steps=1"]
    for name in ("tensorboard", "mlflow"):
        proc = run_bertkit(
            "fit", "--config", "tiny.yaml", "--config", str(TRACKERS / f"{name}.yaml"),
            f"--trainer.default_root_dir=runs/{name}", *steps, "--trainer.enable_progress_bar=true", cwd=tmp_path,
        )  # fmt: skip
        assert f"logs: runs/{name}/logs/version_0 (metrics.csv, learning_curves.png" in proc.stdout
        assert "also logged to: " in proc.stdout
        # One step numbering: the console's, the CSV logs' and the checkpoint's (the trackers' below)
        assert [int(n) for n in re.findall(r"validation after step (\d+)", proc.stdout)] == [3, 6]
        rows = list(csv.DictReader((tmp_path / f"runs/{name}/logs/version_0/metrics.csv").open()))
        assert [int(r["step"]) for r in rows if r["val/f1"]] == [3, 6]
        assert [int(r["step"]) for r in rows if r["train/loss"]] == [1, 2, 3, 4, 5, 6]
        assert "last checkpoint at step 6" in proc.stdout
    assert list((tmp_path / "runs/tensorboard/bertkit/version_0").glob("events.out.tfevents.*"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    events = EventAccumulator(str(tmp_path / "runs/tensorboard/bertkit/version_0"))
    events.Reload()
    hparams, metrics = {}, []
    for content in events.PluginTagToContent("hparams").values():
        data = HParamsPluginData.FromString(content)
        hparams.update(data.session_start_info.hparams)
        metrics += [m.name.tag for m in data.experiment.metric_infos]
    assert metrics == ["val/f1"]  # the HParams tab's metric: the monitored score
    assert [e.step for e in events.Scalars("val/f1")] == [3, 6]
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4, 5, 6]
    assert hparams["trainer.max_epochs"].number_value == 1 and hparams["model.task.init_args.crf"].number_value == 1
    assert hparams["trainer.precision"].string_value == "32-true"
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("bertkit").experiment_id])
    assert run.data.params["learning_rate"] == "0.0001" and "val/f1" in run.data.metrics
    assert run.data.params["trainer.max_epochs"] == "1" and run.data.params["model.task.init_args.crf"] == "True"
    assert run.data.params["trainer.precision"] == "32-true" and "model.task.init_args.entity_types" in run.data.params
    assert run.info.run_id in proc.stdout
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val/f1")] == [3, 6]


MLFLOW = {"trainer": {"logger": [{"class_path": "pytorch_lightning.loggers.MLFlowLogger"}]}}


@pytest.mark.parametrize(
    ("recipes", "options", "missing", "message"),
    [
        (
            [MLFLOW],
            [],
            "mlflow",
            "1.yaml: trainer.logger MLFlowLogger needs mlflow, which is not installed: pip install 'bertkit[track]'",
        ),
        ([MLFLOW, {"trainer": {"logger": False}}], [], "mlflow", None),  # a later recipe unsets it
        ([{"data": {"hf_dataset": "conll2003"}}], [], "datasets", "1.yaml: data.hf_dataset needs datasets"),
        ([{"data": {"hf_dataset": "conll2003"}}], ["--data.hf_dataset=null"], "datasets", None),
        ([{}], ["--data.hf_dataset", "x.parquet"], "datasets", "the command line: data.hf_dataset needs datasets"),
    ],
)
def test_a_missing_extra_is_named_before_lightning_starts(tmp_path, monkeypatch, recipes, options, missing, message):
    import bertkit.cli
    import bertkit.cli.extras
    from bertkit.cli.extras import check_extras

    args = []
    for number, recipe in enumerate(recipes, 1):
        (tmp_path / f"{number}.yaml").write_text(yaml.safe_dump(recipe))
        args += ["--config", str(tmp_path / f"{number}.yaml")]
    real = bertkit.cli.extras.find_spec
    monkeypatch.setattr(bertkit.cli.extras, "find_spec", lambda name: None if name == missing else real(name))
    if message is None:
        check_extras(args + options)
        return
    with pytest.raises(ImportError, match=re.escape(message)):
        check_extras(args + options)
    monkeypatch.setattr(bertkit.cli, "run_lightning", lambda args: pytest.fail("Lightning started"))
    assert bertkit.cli.main(["fit", "--config", str(RECIPE), *args, *options]) == 2


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///mlflow.db", "sqlite:///{cwd}/mlflow.db"),
        ("sqlite:///runs/x/mlflow.db", "sqlite:///{cwd}/runs/x/mlflow.db"),
        ("sqlite:////srv/mlflow.db", "sqlite:////srv/mlflow.db"),
        ("sqlite://", "sqlite://"),
        ("file:./mlruns", "file:{cwd}/mlruns"),
        ("file:///srv/mlruns", "file:///srv/mlruns"),
        ("mlruns", "{cwd}/mlruns"),
        ("/srv/mlruns", "/srv/mlruns"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("databricks", "databricks"),
    ],
)
def test_a_relative_tracker_location_is_made_absolute_against_the_working_folder(tmp_path, given, expected):
    from bertkit.training.run_folder import absolute_location

    assert absolute_location(given, tmp_path) == expected.format(cwd=tmp_path)


@pytest.mark.system
def test_runs_started_in_two_folders_in_one_process_each_track_into_their_own(tmp_path, monkeypatch):
    """MLflow keeps one store per location string for the whole process: the recipe's relative
    ``sqlite:///mlflow.db`` names, for each run, the folder that run starts in."""
    pytest.importorskip("mlflow")
    from bertkit import compose

    uris = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        run = compose(RECIPE, TRACKERS / "mlflow.yaml", overrides={"model.pretrained": None, "model.preset": "tiny",
                      "model.vocab_file": "all-MiniLM-L6-v2"})  # fmt: skip
        (tracker,) = [t for t in run.trainer.loggers if type(t).__name__ == "MLFlowLogger"]
        uris.append(tracker._tracking_uri)
    assert uris == [f"sqlite:///{tmp_path / 'a'}/mlflow.db", f"sqlite:///{tmp_path / 'b'}/mlflow.db"]


segment = st.text(alphabet="abcxyz019_-.", min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(segment, min_size=1, max_size=4), form=st.sampled_from(["sqlite:///", "file:", "file:./", ""]))
def test_any_relative_tracker_location_lands_in_the_working_folder_and_stays_there(tmp_path_factory, parts, form):
    """Every relative location of each form resolves under the working folder; resolving again
    (a second run, another folder) changes nothing; an absolute one is never moved."""
    from bertkit.training.run_folder import absolute_location

    cwd, elsewhere = tmp_path_factory.getbasetemp() / "cwd", tmp_path_factory.getbasetemp() / "elsewhere"
    relative = "/".join(parts)
    resolved = absolute_location(form + relative, cwd)
    prefix = {"sqlite:///": "sqlite:///", "file:": "file:", "file:./": "file:", "": ""}[form]
    assert resolved == f"{prefix}{cwd / relative}"
    assert absolute_location(resolved, elsewhere) == resolved
