"""Several tasks on one encoder: the task-mixing and evaluation batch orders (in one process and
shared among several), the multi-task task's checks and loss weights, a Python run whose per-task
metrics and predictions come back namespaced, the same tasks on RoBERTa and ModernBERT encoders,
the multi-task recipe through the CLI (fit, then predict in a new process from the checkpoint),
and its predictions on two processes."""

from __future__ import annotations

import csv
import json
import math
import random
from collections import Counter

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.multitask import MultiTask
from bertkit_plugins.multitask.samplers import SplitBatchSampler, TaskEvalBatchSampler, TaskMixingBatchSampler
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import TokenClassification
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertDataModule, BertModule, TaskData
from bertkit.tasks.task import BatchSettings, Task
from bertkit.utils.deprecation import BertkitRemovedIn03Warning
from tests.conftest import FAST, ROOT, TINY, notebook, run_bertkit
from tests.test_classification_train import toy_rows

RECIPE = ROOT / "recipes" / "multitask.yaml"
ENTITY_TYPES = ["PER", "LOC", "ORG", "MISC"]

task_lists = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=60)


@settings(max_examples=6, deadline=None)
@given(own=st.sampled_from([1.0, 3.0, math.inf]), given_=st.sampled_from([None, 2.0, math.inf]))
def test_the_task_mixes_by_its_own_temperature_and_a_data_modules_warns_and_overrides_it(own, given_):
    """``MultiTask(temperature=…)`` is the setting; release 0.1's ``data.task_temperature`` still
    works, with a deprecation warning, and overrides it."""
    if given_ is not None:
        with pytest.warns(BertkitRemovedIn03Warning, match=f"model.task.init_args.temperature {given_} instead"):
            BertDataModule(tasks={"a": TaskData(train_file="a.tsv")}, task_temperature=given_)
    task = MultiTask({name: SequenceClassification(labels=["x", "y"]) for name in "ab"}, temperature=own)
    features = [{"task": "a"}] * 9 + [{"task": "b"}]
    order = task.batch_order(features, BatchSettings(True, [4] * 10, 2, 0, 1, 0, given_))
    assert order.settings[1] == (own if given_ is None else given_)
    assert order.sampler.inner.temperature == order.settings[1]


@settings(max_examples=50, deadline=None)
@given(tasks=task_lists, batch_size=st.integers(1, 8), temperature=st.sampled_from([1.0, 2.0, math.inf]))
def test_mixing_batches_hold_one_task_and_are_fixed_per_epoch(tasks, batch_size, temperature):
    sampler = TaskMixingBatchSampler(tasks, batch_size, seed=3, temperature=temperature)
    batches = list(sampler)
    assert len(batches) == len(sampler) == sum(math.ceil(tasks.count(t) / batch_size) for t in set(tasks))
    assert all(len({tasks[i] for i in b}) == 1 and 0 < len(b) <= batch_size for b in batches)
    assert list(sampler) == batches  # the same epoch: the same batches
    if temperature == 1.0:  # proportional: every feature exactly once per epoch
        assert sorted(i for b in batches for i in b) == list(range(len(tasks)))


def test_temperature_sets_each_tasks_share_of_batches():
    tasks = ["big"] * 900 + ["small"] * 100
    shares = {}
    for temperature in (1.0, 2.0, math.inf):
        sampler = TaskMixingBatchSampler(tasks, 1, seed=0, temperature=temperature)
        counts = Counter()
        for epoch in range(5):
            sampler.set_epoch(epoch)
            counts.update(tasks[b[0]] for b in sampler)
        shares[temperature] = counts["small"] / sum(counts.values())
        assert shares[temperature] == pytest.approx(sampler.probabilities()["small"], abs=0.02)
    assert shares[1.0] == pytest.approx(0.1, abs=1e-9)  # exactly proportional
    assert sampler.probabilities() == {"big": 0.5, "small": 0.5}  # T = inf: uniform
    assert shares[1.0] < shares[2.0] < shares[math.inf]
    with pytest.raises(ValueError, match="model.task.temperature"):
        TaskMixingBatchSampler(tasks, 4, temperature=0.5)


@settings(max_examples=50, deadline=None)
@given(tasks=task_lists, batch_size=st.integers(1, 8), data=st.data())
def test_eval_batches_take_every_feature_once_and_the_tasks_in_turn(tasks, batch_size, data):
    lengths = data.draw(st.lists(st.integers(1, 50), min_size=len(tasks), max_size=len(tasks)))
    batches = list(TaskEvalBatchSampler(tasks, lengths, batch_size))
    assert sorted(i for b in batches for i in b) == list(range(len(tasks)))
    assert all(len({tasks[i] for i in b}) == 1 for b in batches)
    first = [tasks[b[0]] for b in batches[: len(set(tasks))]]
    assert sorted(first) == sorted(set(tasks))  # the first round has a batch of every task


@settings(max_examples=50, deadline=None)
@given(
    tasks=task_lists, batch_size=st.integers(1, 8), world=st.integers(1, 4),
    temperature=st.sampled_from([1.0, 2.0, math.inf]), data=st.data(),
)  # fmt: skip
def test_processes_train_one_task_per_step_and_together_one_processs_batches(
    tasks, batch_size, world, temperature, data
):
    """N processes x batch B take, step by step, the batches one process takes with N x B (in
    parts as even as possible, all of one task), leaving out only global batches with fewer
    features than processes; a resumed epoch goes on with the step after the checkpoint's."""
    epoch = data.draw(st.integers(0, 3))

    def split(rank):
        sampler = SplitBatchSampler(TaskMixingBatchSampler(tasks, batch_size * world, 5, temperature), world, rank)
        sampler.set_epoch(epoch)
        return sampler

    one = TaskMixingBatchSampler(tasks, batch_size * world, 5, temperature)
    one.set_epoch(epoch)
    kept = [b for b in one if len(b) >= world]
    steps = [list(split(rank)) for rank in range(world)]
    assert all(len(s) == len(kept) for s in steps)
    for k, batch in enumerate(kept):
        parts = [s[k] for s in steps]
        assert [i for part in parts for i in part] == batch  # together: one process's batch, in order
        assert max(map(len, parts)) - min(map(len, parts)) <= 1 and min(map(len, parts)) >= 1
        assert len({tasks[i] for part in parts for i in part}) == 1  # one task at this step, everywhere
    assert split(0).left_out() == sum(len(b) for b in one if len(b) < world)
    at = data.draw(st.integers(0, len(kept)))
    resumed = split(0)
    resumed.resume(epoch, at)
    assert list(resumed) == steps[0][at:]


@settings(max_examples=50, deadline=None)
@given(tasks=task_lists, batch_size=st.integers(1, 8), world=st.integers(1, 4), data=st.data())
def test_processes_evaluate_every_feature_once_and_every_task(tasks, batch_size, world, data):
    lengths = data.draw(st.lists(st.integers(1, 50), min_size=len(tasks), max_size=len(tasks)))
    if min(Counter(tasks).values()) < world:
        with pytest.raises(ValueError, match=r"data\.tasks\..*fewer than the .* processes"):
            TaskEvalBatchSampler(tasks, lengths, batch_size, world, 0)
        return
    shares = [list(TaskEvalBatchSampler(tasks, lengths, batch_size, world, rank)) for rank in range(world)]
    assert sorted(i for share in shares for b in share for i in b) == list(range(len(tasks)))
    for share in shares:
        assert all(len({tasks[i] for i in b}) == 1 and 0 < len(b) <= batch_size for b in share)
        first = [tasks[b[0]] for b in share[: len(set(tasks))]]
        assert sorted(first) == sorted(set(tasks))  # each process: a batch of every task in its first round


def tasks() -> dict[str, Task]:
    return {"ner": TokenClassification(entity_types=ENTITY_TYPES), "colours": SequenceClassification()}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tasks": {}}, "at least one task"),
        ({"tasks": {"ner-task": SequenceClassification()}}, "must be a Python identifier"),
        ({"loss_weights": {"sst2": 1.0}}, r"\['sst2'\] are not tasks"),
        ({"loss_weights": {"ner": -1.0}}, "must be >= 0"),
    ],
)
def test_multitask_checks_its_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiTask(**{"tasks": tasks(), **kwargs})


def test_tasks_that_pad_one_key_differently_are_refused():
    class First(SequenceClassification):
        pad_values = {"span": -1}

    class Second(SequenceClassification):
        pad_values = {"span": 0}

    with pytest.raises(ValueError, match="pads 'span' with 0"):
        MultiTask({"a": First(), "b": Second()})


def test_data_module_refuses_top_level_files_with_tasks():
    with pytest.raises(ValueError, match=r"data\.train_file, data\.max_tokens: not used with data\.tasks"):
        BertDataModule(train_file="x.tsv", max_tokens=512, tasks={"a": TaskData(train_file="y.tsv")})


def write_colours(folder, n=64) -> None:
    """A toy single-label classification set (label from the words) as ``train.tsv``."""
    folder.mkdir(exist_ok=True)
    with (folder / "train.tsv").open("w", newline="") as handle:
        csv.writer(handle, delimiter="\t").writerows(
            [("sentence", "label"), *toy_rows("single_label", n, random.Random(0))]
        )


@pytest.mark.system
def test_two_tasks_train_on_one_encoder_with_metrics_and_predictions_per_task(tmp_path):
    write_colours(tmp_path)
    pl.seed_everything(0)
    # Labels given, so that validation can run before fit (the CLI test learns them from the file).
    colours_task = SequenceClassification(labels=["animal", "both", "colour"])
    task = MultiTask(
        {"ner": TokenClassification(entity_types=ENTITY_TYPES), "colours": colours_task},
        {"colours": 0.5},
        temperature=math.inf,  # equal shares
    )
    model = BertModule(task, learning_rate=2e-4, warmup_ratio=0.0)
    colours = str(tmp_path / "train.tsv")
    tasks = {
        "ner": TaskData(train_file="train", validation_file="validation", test_file="test", predict_file="test"),
        "colours": TaskData(train_file=colours, validation_file=colours, test_file=colours, predict_file=colours),
    }
    data = BertDataModule(tasks=tasks, batch_size=8)
    trainer = pl.Trainer(
        max_epochs=2, limit_train_batches=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path,
    )  # fmt: skip
    before = trainer.validate(model, datamodule=data, verbose=False)[0]
    trainer.fit(model, datamodule=data)
    after = trainer.test(model, datamodule=data, verbose=False)[0]
    for name, score in (("ner", "f1"), ("colours", "accuracy")):  # each head learned its task
        assert after[f"test/{name}/loss"] < 0.5 * before[f"val/{name}/loss"], (before, after)
        assert after[f"test/{name}/{score}"] > before[f"val/{name}/{score}"] + 0.2
    assert not [k for k in after if k.startswith("test/") and k.count("/") == 1 and k != "test/loss"]

    # The batch loss is the task's loss times its weight.
    batch = next(b for b in data.test_dataloader() if b["task"][0] == "colours")
    with torch.no_grad():
        outputs = model.eval()(batch)
    assert outputs["loss"] == pytest.approx(0.5 * outputs["colours/loss"].item())

    records = [r for batch in trainer.predict(model, datamodule=data) for r in batch]
    formatted = task.format_predictions(data.examples["predict"], records)
    assert Counter(r["task"] for r in formatted) == Counter(e.task for e in data.examples["predict"])
    colour_records = [r for r in formatted if r["task"] == "colours"]
    assert {r["label"] for r in colour_records} <= {"animal", "both", "colour"}
    assert all("entities" in r for r in formatted if r["task"] == "ner")

    stored = model.hparams["task"]["init_args"]  # every task's spec
    assert stored["tasks"]["colours"]["init_args"]["labels"] == ["animal", "both", "colour"]
    rebuilt = BertModule(model.hparams["task"])
    assert rebuilt.task.tasks["colours"].hparams.labels == ["animal", "both", "colour"]
    rebuilt.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt.eval()(batch)["logits"], outputs["logits"])


@pytest.mark.parametrize("family", ["roberta", "modernbert"])
def test_two_tasks_train_on_other_encoder_families(tmp_path, minilm_dir, family):
    """Tagging and sentence classification on one fresh RoBERTa or ModernBERT encoder: both losses
    fall, and the export (the encoder alone: no transformers class has two heads) loads back."""
    write_colours(tmp_path)
    pl.seed_everything(0)
    named = {
        "ner": TokenClassification(entity_types=ENTITY_TYPES),
        "colours": SequenceClassification(labels=["animal", "both", "colour"]),
    }
    model = BertModule(
        MultiTask(named, temperature=math.inf), pretrained=None, encoder=family, preset="tiny", vocab_file=str(minilm_dir),
        learning_rate=1e-3, warmup_ratio=0.0,
    )  # fmt: skip
    colours = str(tmp_path / "train.tsv")
    tasks = {
        "ner": TaskData(train_file="train", validation_file="validation"),
        "colours": TaskData(train_file=colours, validation_file=colours),
    }
    data = BertDataModule(tasks=tasks, batch_size=8)
    trainer = pl.Trainer(
        max_epochs=1, limit_train_batches=30, limit_val_batches=6, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path,
    )  # fmt: skip
    before = trainer.validate(model, datamodule=data, verbose=False)[0]
    trainer.fit(model, datamodule=data)
    after = trainer.validate(model, datamodule=data, verbose=False)[0]
    assert after["val/ner/loss"] < 0.8 * before["val/ner/loss"], (before, after)
    assert after["val/colours/loss"] < before["val/colours/loss"], (before, after)  # slower from scratch
    with pytest.warns(UserWarning, match="encoder only"):
        model.save_pretrained(tmp_path / "export")
    again = BertModule(TokenClassification(entity_types=ENTITY_TYPES), pretrained=str(tmp_path / "export"))
    assert again.family is model.family
    for key, value in model.encoder.state_dict().items():
        assert torch.equal(again.encoder.state_dict()[key], value), key


@pytest.mark.slow
def test_multitask_recipe_fits_and_predicts_through_the_cli(tmp_path):
    write_colours(tmp_path / "sst2")
    task_data = f"--data.tasks.sst2.data_dir={tmp_path / 'sst2'}"
    files = ["--data.tasks.sst2.train_file=train.tsv", "--data.tasks.sst2.validation_file=train.tsv"]
    files += ["--data.tasks.sst2.test_file=train.tsv", "--data.tasks.sst2.predict_file=train.tsv"]
    run_bertkit("fit", "--config", str(RECIPE), *TINY, *FAST, task_data, *files, cwd=tmp_path)
    checkpoints = sorted(p.name for p in (tmp_path / "runs" / "multitask" / "checkpoints").iterdir())
    assert "last.ckpt" in checkpoints and any(n.startswith("epoch0-ner_f1=") for n in checkpoints)
    run_bertkit("predict", "--config", str(RECIPE), *TINY, task_data, *files, "--ckpt_path=best", cwd=tmp_path)
    lines = (tmp_path / "runs" / "multitask" / "predictions.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    sample = TokenClassification(entity_types=ENTITY_TYPES).sample_files()["test"]
    ner_sentences = len(TokenClassification(entity_types=ENTITY_TYPES).read(sample))
    assert Counter(r["task"] for r in records) == {"ner": ner_sentences, "sst2": 64}
    assert {r["label"] for r in records if r["task"] == "sst2"} <= {"animal", "both", "colour"}


@pytest.mark.system
def test_multitask_predictions_on_two_processes_are_one_processs(tmp_path):
    """Each process predicts some of every task's batches; the records written are one process's."""
    write_colours(tmp_path / "sst2")
    files = [f"--data.tasks.sst2.{split}_file=train.tsv" for split in ("train", "validation", "test", "predict")]
    args = ["--config", str(RECIPE), *TINY, *FAST, f"--data.tasks.sst2.data_dir={tmp_path / 'sst2'}", *files]
    with notebook(tmp_path, args) as run:
        run.trainer.fit(run.model, datamodule=run.datamodule)
    out = tmp_path / "runs" / "multitask" / "predictions.jsonl"
    written = []
    for processes in (1, 2):
        with notebook(tmp_path, args, processes) as run:
            run.trainer.predict(run.model, datamodule=run.datamodule, ckpt_path="last")
        written.append([json.loads(line) for line in out.read_text().splitlines()])
        out.unlink()
    one, two = written
    assert Counter(r["task"] for r in one) == Counter(r["task"] for r in two) and len(one) > 64
    assert [(r["task"], r.get("label"), r.get("entities")) for r in two] == [
        (r["task"], r.get("label"), r.get("entities")) for r in one
    ]
