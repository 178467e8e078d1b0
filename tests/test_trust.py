"""What bertkit promises under real use, not only on one epoch of a well-formed file: checkpoints
and model directories never make bertkit import code, ``last.ckpt`` holds the last state after a
plateau, a run folder has one writer, a resume refuses a changed recipe, signals end a run with
128 + the signal's number and a way to resume, a non-finite loss stops the run, and readers keep
every token of real-world whitespace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bertkit.model.families import family_of
from bertkit.training.checkpoints import load_checkpoint
from bertkit.training.module import BertModule
from bertkit.training.run_folder import RunFolderBusy, claim
from tests.conftest import RECIPE, ROOT, TINY, Forked, run_bertkit

TINY = [
    "--config", str(RECIPE), *TINY,
    "--trainer.enable_progress_bar=false", "--data.batch_size=4",
]  # fmt: skip
PAYLOAD = "import pathlib; pathlib.Path('{marker}').write_text('ran')\nfrom bertkit_plugins.token_tagging import *\n"


@pytest.fixture(scope="module")
def plateau(tmp_path_factory) -> Path:
    """A 3-epoch fit whose score never improves after the first epoch (learning rate 0)."""
    work = tmp_path_factory.mktemp("plateau")
    args = [*TINY, "--trainer.max_epochs=3", "--trainer.limit_train_batches=5", "--trainer.limit_val_batches=2"]
    proc = run_bertkit("fit", *args, "--model.learning_rate=0.0", cwd=work)
    (work / "summary.txt").write_text(proc.stdout)
    return work


def test_last_ckpt_holds_the_last_step_after_a_plateau(plateau):
    last = load_checkpoint(plateau / "runs/ner/checkpoints/last.ckpt")
    assert last["global_step"] == 15 and last["epoch"] == 2
    assert "last checkpoint at step 15:" in (plateau / "summary.txt").read_text()


def test_resume_refuses_a_changed_model_setting(plateau):
    proc = run_bertkit(
        "fit", *TINY, "--trainer.max_epochs=4", "--ckpt_path=last", "--model.learning_rate=0.01", cwd=plateau,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "model.learning_rate=0.01 (checkpoint: 0.0)" in proc.stderr and "Traceback" not in proc.stderr


def test_a_new_run_keeps_an_earlier_runs_checkpoints(plateau):
    before = sorted(p.name for p in (plateau / "runs/ner/checkpoints").iterdir())
    proc = run_bertkit("fit", *TINY, "--trainer.max_steps=1", cwd=plateau, check=False)
    assert proc.returncode == 2 and "--overwrite true" in proc.stderr and "--ckpt_path last" in proc.stderr
    assert sorted(p.name for p in (plateau / "runs/ner/checkpoints").iterdir()) == before


def _crafted(sample_run: Path, folder: Path, class_path: str) -> Path:
    """A real checkpoint whose stored head names ``class_path``, beside a module that would run."""
    state = torch.load(sample_run / "runs/ner/checkpoints/last.ckpt", weights_only=True)
    state["hyper_parameters"]["task"]["class_path"] = class_path
    path = folder / "model.ckpt"
    torch.save(state, path)
    (folder / "bk_utils.py").write_text(PAYLOAD.format(marker=folder / "MARKER"))
    return path


@pytest.mark.slow
def test_a_checkpoint_cannot_make_bertkit_import_a_file_beside_it(sample_run, tmp_path, monkeypatch):
    path = _crafted(sample_run, tmp_path, "bk_utils.TokenClassification")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="bk_utils.TokenClassification' is not a registered"):
        BertModule.load_from_checkpoint(path, weights_only=True)
    for command in (
        ["export", str(path), "out", "--onnx", "false"],
        ["test", "--config", str(RECIPE), f"--ckpt_path={path}"],
    ):
        proc = run_bertkit(*command, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, check=False)
        assert proc.returncode == 2 and "does not import code" in proc.stderr, proc.stderr[-2000:]
    assert "bk_utils" not in sys.modules and not (tmp_path / "MARKER").exists()


def test_a_stored_full_path_must_be_the_registered_class(sample_run, tmp_path):
    path = _crafted(sample_run, tmp_path, "collections.OrderedDict")
    with pytest.raises(ValueError, match="not a registered Task"):
        BertModule.load_from_checkpoint(path, weights_only=True)
    path = _crafted(sample_run, tmp_path, "bertkit_plugins.token_tagging.task.TokenClassification")
    assert type(BertModule.load_from_checkpoint(path, weights_only=True).task).__name__ == "TokenClassification"


def test_a_model_directory_cannot_name_a_module_to_import(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bk_utils.BertFamily"}))
    (tmp_path / "bk_utils.py").write_text(PAYLOAD.format(marker=tmp_path / "MARKER"))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="config.json: model_type"):
        family_of(tmp_path)
    assert not (tmp_path / "MARKER").exists()


@pytest.mark.slow
def test_a_run_folder_has_one_writer(tmp_path):
    read, write = os.pipe()
    holder = os.fork()  # another process holding the folder
    if holder == 0:
        try:
            claim(tmp_path, None, False, False)
            os.write(write, b"held")
            time.sleep(60)
        finally:
            os._exit(0)
    try:
        assert os.read(read, 4) == b"held"
        with pytest.raises(RunFolderBusy, match=f"pid {holder}"):
            claim(tmp_path, None, False, False)
    finally:
        os.kill(holder, signal.SIGKILL), os.waitpid(holder, 0), os.close(read), os.close(write)
    claim(tmp_path, None, False, False)  # released when its holder died


def test_an_earlier_runs_checkpoints_need_resume_or_overwrite(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints/last.ckpt").write_bytes(b"x")
    with pytest.raises(RunFolderBusy, match="last.ckpt"):
        claim(tmp_path, tmp_path / "checkpoints", resuming=False, overwrite=False)
    claim(tmp_path, tmp_path / "checkpoints", resuming=True, overwrite=False)
    assert (tmp_path / "checkpoints/last.ckpt").exists()  # resumed: kept
    (tmp_path / "checkpoints/epoch0-accuracy=0.5000.ckpt").write_bytes(b"x")  # another task's best
    (tmp_path / "checkpoints/notes.txt").write_text("mine")
    claim(tmp_path, tmp_path / "checkpoints", resuming=False, overwrite=True)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["notes.txt"]  # replaced: none left


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
@pytest.mark.slow
def test_a_signal_ends_fit_with_its_exit_code_and_the_resume_command(tmp_path, signum, code):
    epochs = ["--trainer.max_epochs=1000", "--trainer.limit_train_batches=4", "--trainer.limit_val_batches=1"]
    proc = Forked(["fit", *TINY, *epochs], tmp_path)  # last.ckpt after 4 steps, then an epoch every 4 more
    last = tmp_path / "runs/ner/checkpoints/last.ckpt"
    deadline = time.monotonic() + 120
    while not last.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signum)
    ended = proc.wait(timeout=120)
    err = ended.stderr
    assert ended.returncode == code, err[-3000:]
    assert "last checkpoint (step" in err and "--ckpt_path last" in err, err[-3000:]
    if signum == signal.SIGTERM:  # stopped at a batch boundary: last.ckpt holds that step
        stopped = int(err.split("stopped by SIGTERM at step ")[1].split()[0])
        assert load_checkpoint(last)["global_step"] == stopped


def test_a_non_finite_loss_stops_fit_with_a_message(tmp_path):
    (tmp_path / "d").mkdir()
    rows = ["sentence\tlabel"] + [f"film {i}\t{'1e300' if i == 3 else i}" for i in range(8)]
    (tmp_path / "d/train.tsv").write_text("\n".join(rows) + "\n")
    proc = run_bertkit(
        "fit", "--config", str(ROOT / "recipes/sst2.yaml"), "--model.pretrained=null", "--model.preset=tiny",
        "--model.vocab_file=all-MiniLM-L6-v2", "--data.data_dir=d", "--data.validation_file=null",
        "--model.task.init_args.problem_type=regression", "--data.batch_size=8", "--trainer.max_steps=3",
        "--trainer.enable_progress_bar=false", cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "training loss is not finite" in proc.stderr, proc.stderr[-2000:]


def test_a_plugin_module_that_raises_is_one_line(tmp_path):
    (tmp_path / "boom.py").write_text("raise RuntimeError('kaboom')\n")
    (tmp_path / "r.yaml").write_text("plugins: [boom]\n")
    proc = run_bertkit(
        "fit", "--config", str(RECIPE), "--config", "r.yaml", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)},
        check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "'boom'" in proc.stderr and "RuntimeError: kaboom" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_conll_columns_split_on_ascii_space_and_tab_only(tmp_path):
    from bertkit_plugins.token_tagging.conll import read_conll

    path = tmp_path / "eng.train"
    path.write_text("New\u00a0York B-LOC\nis\tO\n  booming   O  \n\nParis B-LOC\n", encoding="utf-8")
    sentences = read_conll(path)
    assert [s.words for s in sentences] == [["New\u00a0York", "is", "booming"], ["Paris"]]
    assert sentences[0].tags == ["B-LOC", "O", "O"]


def _corpus(path: Path, documents: int) -> Path:
    text = "\n\n".join(
        "\n".join(f"Sentence {s} of document {d} is about the {d * s}th harbour of the north." for s in range(6))
        for d in range(documents)
    )
    path.write_text(text + "\n")
    return path


def test_an_interrupted_prepare_is_never_read_as_complete(tmp_path):
    from bertkit_plugins.pretraining.prepare import prepare
    from bertkit_plugins.pretraining.shards import Shards

    corpus = _corpus(tmp_path / "corpus.txt", 8)
    out = tmp_path / "prepared"
    prepare(str(corpus), str(out), max_seq_length=32, documents_per_shard=2, workers=1)
    assert len(Shards(out / "train")) > 0
    broken = tmp_path / "broken.txt"
    broken.write_bytes(b"fine line\n\xff\xfe not UTF-8\n")
    with pytest.raises(ValueError, match="not UTF-8"):  # fails part-way through the new preparation
        prepare(
            [str(corpus), str(broken)], str(out), max_seq_length=32, documents_per_shard=2, workers=1, overwrite=True
        )
    with pytest.raises(FileNotFoundError, match="run `bertkit prepare`"):
        Shards(out / "train")


def test_shards_of_another_preparation_are_refused(tmp_path):
    from bertkit_plugins.pretraining.prepare import prepare
    from bertkit_plugins.pretraining.shards import MANIFEST, Shards

    out = tmp_path / "prepared"
    prepare(str(_corpus(tmp_path / "corpus.txt", 8)), str(out), max_seq_length=32, documents_per_shard=2, workers=1)
    manifest = json.loads((out / "train" / MANIFEST).read_text())
    manifest["shards"][0]["instances"] += 1
    (out / "train" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="the manifest says .*prepare` again"):
        Shards(out / "train")[0]


def test_a_stored_masking_strategy_is_rebuilt_only_from_known_classes():
    from bertkit_plugins.pretraining import PreTraining

    stored = PreTraining(masking={"class_path": "WholeWordMasking", "init_args": {}}).spec()["init_args"]
    assert type(PreTraining(**stored).masking).__name__ == "WholeWordMasking"
    with pytest.raises(ValueError, match="'bk_utils.Masking' is not a registered MaskingStrategy"):
        PreTraining(masking={"class_path": "bk_utils.Masking"})


@pytest.mark.parametrize("given", [[], ["--trainer.max_steps=1"], ["--overwrite", "false"]])
def test_a_new_run_over_an_earlier_one_is_refused_before_torch_is_imported(tmp_path, given):
    (tmp_path / "runs/ner/checkpoints").mkdir(parents=True)
    (tmp_path / "runs/ner/checkpoints/epoch2-f1=0.9000.ckpt").write_bytes(b"")
    code = (
        "import sys; from bertkit.cli import main; "
        f"code = main(['fit', '--config', {str(RECIPE)!r}, *{given!r}]); print('torch' in sys.modules); sys.exit(code)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout.strip() == "False", proc.stdout + proc.stderr
    assert "holds the checkpoints of an earlier run (epoch2-f1=0.9000.ckpt)" in proc.stderr
