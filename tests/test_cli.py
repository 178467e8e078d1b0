"""The main job end to end on the bundled sample: fit -> checkpoint -> test -> predict, resume,
weights-only checkpoints, plain-text prediction, and --print_config round trip."""

from __future__ import annotations

import json
import shlex

import pytest
import torch

from bertkit import BertModule
from tests.conftest import FAST, RECIPE, TINY, run_bertkit


def predict_text(run_dir, text, *extra: str):
    """``bertkit predict`` with the best checkpoint of ``run_dir`` on ``text``; returns the JSONL path."""
    out = text.with_suffix(".jsonl")
    run_bertkit(
        "predict", "--config", str(RECIPE), "--ckpt_path", "best", f"--data.predict_file={text}", *extra,
        "--trainer.callbacks+=bertkit.PredictionWriter", f"--trainer.callbacks.output_file={out}",
        "--trainer.enable_progress_bar=false", cwd=run_dir,
    )  # fmt: skip
    return out


@pytest.mark.slow
def test_fit_writes_weights_only_checkpoints(sample_run):
    ckpts = sorted((sample_run / "runs/ner/checkpoints").glob("*.ckpt"))
    assert {p.name for p in ckpts} >= {"last.ckpt"} and len(ckpts) == 2
    ckpt = torch.load(ckpts[0], weights_only=True)
    assert ckpt["hyper_parameters"]["task"]["init_args"]["entity_types"] == ["PER", "LOC", "ORG", "MISC"]
    model = BertModule.load_from_checkpoint(ckpts[0], weights_only=True)
    assert torch.equal(model.head.classifier.weight, ckpt["state_dict"]["head.classifier.weight"])
    assert not list(sample_run.glob("runs/ner/checkpoints/.*.tmp"))


def test_test_writes_its_scores_and_adds_no_log_folder(sample_run):
    versions = sorted((sample_run / "runs/ner/logs").glob("version_*"))
    proc = run_bertkit(
        "test", "--config", str(RECIPE), "--ckpt_path", "best", "--trainer.enable_progress_bar=false", cwd=sample_run
    )
    written = json.loads((sample_run / "runs/ner/test_scores.json").read_text())
    assert "scores written to runs/ner/test_scores.json" in proc.stdout
    assert written["command"] == "test" and written["recipes"] == [str(RECIPE)]
    assert written["checkpoint"].endswith(".ckpt") and "last" not in written["checkpoint"]  # best, resolved
    for key in ("test/f1", "test/precision", "test/recall", "test/f1_PER", "test/f1_MISC"):
        assert 0.0 <= written["scores"][key] <= 1.0, proc.stdout
    assert sorted((sample_run / "runs/ner/logs").glob("version_*")) == versions
    assert not (sample_run / "runs/ner/config.yaml").exists()


@pytest.mark.system
def test_test_in_int8_measures_what_quantization_changes(sample_run):
    """``--int8 true`` quantizes the encoder after the checkpoint loads: test scores within a few
    points of float32's, predictions for every sentence; ``fit`` refuses it before building a model."""
    args = ("--config", str(RECIPE), "--ckpt_path", "best", "--trainer.enable_progress_bar=false")
    scores = sample_run / "runs/ner/test_scores.json"
    run_bertkit("test", *args, cwd=sample_run)
    fp32 = json.loads(scores.read_text())["scores"]
    proc = run_bertkit("test", *args, "--int8=true", cwd=sample_run)
    int8 = json.loads(scores.read_text())["scores"]
    assert "linear layers of the encoder run in int8" in proc.stdout + proc.stderr
    assert abs(int8["test/f1"] - fp32["test/f1"]) <= 0.05 and int8["test/f1"] > 0.0, (fp32, int8)
    run_bertkit("predict", *args, "--int8=true", cwd=sample_run)
    assert len((sample_run / "runs/ner/predictions.jsonl").read_text().splitlines()) > 0
    refused = run_bertkit(
        "fit",
        "--config",
        str(RECIPE),
        "--int8=true",
        "--trainer.default_root_dir=runs/int8",
        cwd=sample_run,
        check=False,
    )
    assert refused.returncode != 0 and "--int8 true is for validate, test and predict" in refused.stderr


@pytest.mark.slow
def test_predict_on_conll_and_plain_text(sample_run):
    run_bertkit(
        "predict", "--config", str(RECIPE), "--ckpt_path", "best", "--trainer.enable_progress_bar=false", cwd=sample_run
    )
    records = [json.loads(line) for line in (sample_run / "runs/ner/predictions.jsonl").read_text().splitlines()]
    from bertkit_plugins.token_tagging.conll import read_conll
    from bertkit_plugins.token_tagging.task import SAMPLE_FILES

    sentences = read_conll(SAMPLE_FILES["test"])
    assert [r["words"] for r in records] == [s.words for s in sentences]
    assert all(len(r["tags"]) == len(r["words"]) for r in records)

    text = sample_run / "news.txt"
    text.write_text(
        "Marta Kowalczyk flew from Lisbon to Oslo on Monday.\n\n  Shares in Bluefin Bank fell (again) today.\n"
    )
    out = predict_text(sample_run, text)
    lines = text.read_text().splitlines()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["text"] for r in records] == [lines[0], lines[2]]
    assert records[1]["words"][:3] == ["Shares", "in", "Bluefin"] and "(" in records[1]["words"]
    for r in records:
        for e in r["entities"]:
            assert r["text"][e["start"] : e["end"]] == e["text"]
            first, last = e["words"]
            assert e["text"].startswith(r["words"][first]) and e["text"].endswith(r["words"][last - 1])


@pytest.mark.system
def test_resume_from_last_checkpoint(sample_run, tmp_path):
    import shutil

    shutil.copytree(sample_run / "runs", tmp_path / "runs")
    before = torch.load(tmp_path / "runs/ner/checkpoints/last.ckpt", weights_only=True)
    args = [a for a in FAST if not a.startswith("--trainer.max_epochs")]
    run_bertkit("fit", "--config", str(RECIPE), *args, "--trainer.max_epochs=2", "--ckpt_path", "last", cwd=tmp_path)
    # The resumed run replaces last.ckpt (enable_version_counter: false): no last-v1.ckpt piles up.
    after = torch.load(tmp_path / "runs/ner/checkpoints/last.ckpt", weights_only=True)
    assert (before["epoch"], after["epoch"]) == (0, 1)
    assert after["global_step"] == 2 * before["global_step"]
    assert not list((tmp_path / "runs/ner/checkpoints").glob("last-v*.ckpt"))


@pytest.mark.slow
def test_print_config_reruns_unchanged(tmp_path):
    first = run_bertkit("fit", "--config", str(RECIPE), *FAST, "--print_config", cwd=tmp_path).stdout
    (tmp_path / "printed.yaml").write_text(first)
    second = run_bertkit("fit", "--config", "printed.yaml", "--print_config", cwd=tmp_path).stdout
    assert first == second
    # Without validation, with the progress bar on and stdout a pipe: plain progress lines, no
    # Lightning warnings about an empty validation loader or a missing monitored score.
    proc = run_bertkit(
        "fit", "--config", "printed.yaml", "--trainer.limit_val_batches=0", "--trainer.enable_progress_bar=true",
        cwd=tmp_path,
    )  # fmt: skip
    assert (tmp_path / "runs/ner/checkpoints/last.ckpt").is_file()
    assert "\r" not in proc.stdout and "epoch 1/1  batch 6/6  step 6/6 (100%)" in proc.stdout, proc.stdout
    assert "model: encoder BertModel" in proc.stdout and "FLOPs" not in proc.stdout
    assert "could not find the monitored key" not in proc.stderr and "Total length" not in proc.stderr


def test_bad_config_value_is_named(tmp_path):
    proc = run_bertkit("fit", "--config", str(RECIPE), "--data.predict_format=xml", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "predict_format" in proc.stderr


def test_malformed_data_file_is_a_short_error_naming_file_and_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "eng.train").write_text("EU I-ORG\nrejects O\n\nGerman\n")
    proc = run_bertkit("fit", "--config", str(RECIPE), f"--data.data_dir={data}", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert f"bertkit: error: {data / 'eng.train'}:4: expected 'token ... tag' columns, got 'German'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_long_lines_are_windowed_and_rejoined_in_prediction(sample_run):
    words = " ".join(f"Oslo{i} and Lisbon{i} ," for i in range(40))
    text = sample_run / "long.txt"
    text.write_text(words + "\n")
    out = predict_text(sample_run, text, "--model.max_length=24")
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["words"] == words.split() and len(record["tags"]) == 160


@pytest.mark.slow
def test_predict_in_parts_writes_what_one_pass_does(sample_run, tmp_path):
    text = tmp_path / "news.txt"
    text.write_text("".join(f"Maria Silva met {n} people in Oslo and Lisbon on day {n}.\n" for n in range(23)))
    outputs = []
    for size in ("0", "5"):  # one pass; five parts of at most 5 lines
        out = predict_text(sample_run, text, f"--data.predict_chunk_size={size}")
        outputs.append(out.read_text())
        assert not out.with_name(out.name + ".partial").exists()
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 23


def test_a_missing_data_file_is_named_before_the_model_is_built(tmp_path):
    # The model's weights do not exist either: the data error must come first.
    missing = ["--model.pretrained", str(tmp_path / "no_model"), f"--data.data_dir={tmp_path / 'none'}"]
    proc = run_bertkit("fit", "--config", str(RECIPE), *missing, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and f"{tmp_path / 'none' / 'eng.train'}: data.train_file not found" in proc.stderr
    proc = run_bertkit("test", "--config", str(RECIPE), *missing, "--ckpt_path=last", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and f"{tmp_path / 'none' / 'eng.testb'}: data.test_file not found" in proc.stderr


@pytest.mark.slow
def test_the_commands_fit_suggests_next_test_the_same_run(tmp_path):
    """Two runs in one folder, the second into ``runs/x`` with a smaller model: the ``next:``
    command fit prints (run as printed) tests runs/x's checkpoint, not the recipe's default run."""
    tiny = ["--model.pretrained=null", "--model.vocab_file=all-MiniLM-L6-v2", *FAST]
    run_bertkit("fit", "--config", str(RECIPE), "--model.preset=mini", *tiny, cwd=tmp_path)
    out = run_bertkit("fit", "--config", str(RECIPE), "--model.preset=tiny", *tiny,
                      "--trainer.default_root_dir=runs/x", cwd=tmp_path).stdout  # fmt: skip
    line = next(x for x in out.splitlines() if x.strip().startswith("next: bertkit test"))
    command = shlex.split(line.split("next: bertkit ", 1)[1])
    assert "--trainer.default_root_dir=runs/x" in command and "--model.preset=tiny" in command
    tested = run_bertkit(*command, cwd=tmp_path)
    assert tested.returncode == 0 and "runs/x/checkpoints/" in tested.stdout + tested.stderr
    assert "runs/ner/checkpoints/" not in tested.stdout + tested.stderr


EMPTY_WORK = {
    "test": (["test", "--ckpt_path", "best", "--trainer.limit_test_batches=0"], "test_scores.json", "no score"),
    "validate": (["validate", "--ckpt_path", "best", "--trainer.limit_val_batches=0"], "validate_scores.json", "no score"),
    "predict": (["predict", "--ckpt_path", "best", "--trainer.limit_predict_batches=0"], "predictions.jsonl", "no batch"),
    "predict-no-writer": (["predict", "--ckpt_path", "best", "--config", "NO_WRITER"], "predictions.jsonl", "no prediction writer"),
}  # fmt: skip


@pytest.mark.parametrize("member", sorted(EMPTY_WORK))
def test_a_command_whose_work_was_empty_exits_non_zero_and_keeps_the_earlier_result(sample_run, tmp_path, member):
    args, output, said = EMPTY_WORK[member]
    no_writer = tmp_path / "no_writer.yaml"
    no_writer.write_text("trainer:\n  callbacks:\n    - class_path: ModelCheckpoint\n", encoding="utf-8")
    args = [str(no_writer) if a == "NO_WRITER" else a for a in args]
    earlier = sample_run / "runs/ner" / output
    before = earlier.read_bytes() if earlier.exists() else None
    earlier.write_text('{"earlier": "result"}\n', encoding="utf-8")
    try:
        proc = run_bertkit(
            args[0],
            "--config",
            str(RECIPE),
            *args[1:],
            "--trainer.enable_progress_bar=false",
            cwd=sample_run,
            check=False,
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert said in proc.stderr
        assert earlier.read_text(encoding="utf-8") == '{"earlier": "result"}\n'
    finally:
        earlier.unlink()
        if before is not None:
            earlier.write_bytes(before)


@pytest.mark.parametrize(
    "setting", ["--trainer.max_steps=0", "--trainer.limit_train_batches=0", "--trainer.max_epochs=0"]
)
def test_a_fit_that_takes_no_step_exits_non_zero_and_suggests_nothing(tmp_path, setting):
    proc = run_bertkit("fit", "--config", str(RECIPE), *FAST, setting, cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no training step ran" in proc.stderr and setting.removeprefix("--").split("=")[0] in proc.stderr
    assert "--ckpt_path last" not in proc.stdout
    assert not list(tmp_path.glob("runs/ner/checkpoints/*.ckpt"))


def test_the_summary_says_one_thing_per_fact_and_why_no_validation_ran(tmp_path):
    from types import SimpleNamespace

    from bertkit.training.summary import fit_summary

    def trainer(best: str, seen: float | None, **budget):
        checkpoint = SimpleNamespace(
            monitor="val/f1",
            best_model_path=best,
            best_model_score=0.9 if best else None,
            last_model_path="",
            last_step=-1,
        )
        settings = {"limit_val_batches": 1.0, "num_training_batches": 31, "max_steps": -1, "global_step": 30, **budget}
        return SimpleNamespace(
            current_epoch=1, checkpoint_callback=checkpoint, lightning_module=SimpleNamespace(hparams={}),
            datamodule=SimpleNamespace(on_sample=False), callback_metrics={} if seen is None else {"val/f1": seen},
            logger=None, loggers=[None], **settings,
        )  # fmt: skip

    kept = fit_summary(trainer(str(tmp_path / "best.ckpt"), 0.9), [])
    assert kept.count("best val/f1") == 1 and "none kept" not in kept
    inside = fit_summary(trainer("", None, max_steps=30), [])
    assert "trainer.max_steps 30 stopped training inside the first epoch (31 batches)" in inside
    assert "--trainer.val_check_interval 30" in inside
    assert "limit_val_batches is 0" in fit_summary(trainer("", None, limit_val_batches=0), [])
    assert "never an improvement" in fit_summary(trainer("", 0.5), [])


@pytest.mark.parametrize(
    ("command", "strategy"),
    [("fit", "ddp_fork"), ("validate", "ddp_notebook"), ("test", "ddp_spawn"), ("predict", "ddp_fork")],
)
def test_a_command_refuses_a_launcher_whose_processes_it_could_not_report_on(tmp_path, command, strategy):
    """Fork and spawn launchers run the work in child processes: the command's own process would
    report no step, checkpoint or output (they are for notebooks)."""
    two = [f"--trainer.strategy={strategy}", "--trainer.devices=2", "--trainer.accelerator=cpu"]
    proc = run_bertkit(command, "--config", str(RECIPE), *TINY, *two, cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"trainer.strategy: {strategy} runs bertkit {command} in processes it" in proc.stderr
    assert "pass --trainer.strategy ddp" in proc.stderr and not (tmp_path / "runs/ner/checkpoints").exists()
