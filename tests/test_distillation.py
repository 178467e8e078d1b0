"""Knowledge distillation (the ``Distillation`` callback, or ``model.teacher``): the soft-target loss is Hinton et al.'s; every
head that names targets (tags with and without a CRF, sentence labels, answer spans) learns
nothing from an identical teacher and something from another; alpha 0 trains exactly what the
labels alone train; a teacher checkpoint or export folder of another vocabulary or task is
refused with both named; the student's checkpoints hold no teacher; a student keeps a
pre-trained model's first layers (``model.num_layers``)."""

from __future__ import annotations

import csv
import json
import math
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from bertkit_plugins.question_answering import QuestionAnswering
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import TokenClassification
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertModule, compose
from bertkit.training.distillation import Distiller, Teacher, hidden_state_loss, matched_layers, soft_target_loss
from bertkit.training.trained import save_serving_config
from tests.conftest import FAST, RECIPE, TINY, run_bertkit
from tests.family_parity import batch

TINY_ENCODER = dict(pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2")
HEADS = {
    "tags": (lambda: TokenClassification(entity_types=["PER", "LOC"], crf=False), False),
    "tags_crf": (lambda: TokenClassification(entity_types=["PER", "LOC"], crf=True), False),
    "sentences": (lambda: SequenceClassification(labels=["neg", "pos"]), False),
    "spans": (QuestionAnswering, True),
}


@settings(max_examples=40, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(2, 6)),
    temperature=st.floats(0.5, 8.0),
    seed=st.integers(0, 2**16),
)
def test_the_soft_target_loss_is_t_squared_times_the_mean_kl_over_the_rows(shape, temperature, seed):
    g = torch.Generator().manual_seed(seed)
    student, teacher = torch.randn(shape, generator=g) * 3, torch.randn(shape, generator=g) * 3
    rows = torch.rand(shape[:-1], generator=g) < 0.7
    got = soft_target_loss(student, teacher, rows, temperature)
    expected = []
    for s, t in zip(student[rows].double().numpy(), teacher[rows].double().numpy(), strict=True):
        p = np.exp(t / temperature - np.logaddexp.reduce(t / temperature))
        q = np.exp(s / temperature - np.logaddexp.reduce(s / temperature))
        expected.append(float((p * (np.log(p) - np.log(q))).sum()) * temperature**2)
    # float32 against float64: the KL's rounding (about 1e-7) is multiplied by T²
    assert float(got) == pytest.approx(sum(expected) / max(len(expected), 1), rel=1e-4, abs=1e-6 * temperature**2)
    assert float(soft_target_loss(teacher, teacher, rows, temperature)) == pytest.approx(0.0, abs=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    layers=st.tuples(st.integers(1, 6), st.integers(1, 12)),
    widths=st.tuples(st.integers(2, 6), st.integers(2, 6)),
    lengths=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_the_hidden_state_loss_is_tinybert_mse_over_matched_layers_and_real_tokens(layers, widths, lengths, seed):
    g = torch.Generator().manual_seed(seed)
    (m, n), (hs, ht), T = layers, widths, max(lengths)
    mask = torch.tensor([[1] * k + [0] * (T - k) for k in lengths])
    student = tuple(torch.randn(len(lengths), T, hs, generator=g) for _ in range(m + 1))
    teacher = tuple(torch.randn(len(lengths), T, ht, generator=g) for _ in range(n + 1))
    projection = torch.nn.Linear(hs, ht) if hs != ht else None
    pairs = matched_layers(m, n)
    assert pairs[0] == (0, 0) and pairs[-1] == (m, n) and [a for a, _ in pairs] == list(range(m + 1))
    assert all(b1 <= b2 for (_, b1), (_, b2) in zip(pairs, pairs[1:], strict=False))
    expected = []
    with torch.no_grad():
        for a, b in pairs:
            for row, k in enumerate(lengths):
                s = student[a][row, :k]
                s = projection(s) if projection is not None else s
                expected.append(((s.double() - teacher[b][row, :k].double()) ** 2).numpy())
        got = hidden_state_loss(student, teacher, mask, projection)
    assert float(got) == pytest.approx(float(np.concatenate(expected).mean()), rel=1e-4)
    same = tuple(t[..., :hs] for t in teacher)
    assert float(hidden_state_loss(same, same, mask, None)) == 0.0


def _labelled(model: BertModule, pairs: bool) -> dict:
    inputs = batch(model.tokenizer, pairs)
    b, t = inputs["input_ids"].shape
    if pairs:
        inputs["start_positions"], inputs["end_positions"] = torch.tensor([3, 4]), torch.tensor([5, 4])
    elif isinstance(model.task, SequenceClassification):
        inputs["labels"] = torch.arange(b) % 2
    else:
        inputs["labels"] = torch.where(torch.arange(t) % 2 == 0, torch.arange(t) % 5, -100).repeat(b, 1)
        inputs["labels"][inputs["attention_mask"] == 0] = -100
        inputs["word_index"] = torch.where(inputs["labels"] != -100, torch.arange(t) // 2, -1)
    return inputs


@pytest.mark.parametrize("head", list(HEADS))
def test_a_student_learns_nothing_from_itself_and_something_from_another(head, tmp_path):
    make, pairs = HEADS[head]
    torch.manual_seed(0)
    student = BertModule(make(), **TINY_ENCODER)
    student.save_pretrained(tmp_path / "same")
    save_serving_config(student, tmp_path / "same", 64)
    inputs = _labelled(student, pairs)
    student.eval()  # no dropout: the teacher's outputs, exactly
    distiller = Distiller(Teacher(path=str(tmp_path / "same"), temperature=2.0, alpha=0.5), student)
    outputs = distiller.combine(student(inputs), inputs, student)
    assert float(outputs["distill_loss"]) == pytest.approx(0.0, abs=1e-5)
    assert float(outputs["loss"]) == pytest.approx(0.5 * float(outputs["hard_loss"]), rel=1e-5)
    with torch.no_grad():
        for p in student.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    outputs = distiller.combine(student(inputs), inputs, student)
    assert float(outputs["distill_loss"]) > 1e-4
    outputs["loss"].backward()
    assert all(p.grad is not None for p in student.head.parameters() if p.requires_grad)
    assert all(p.grad is None for p in distiller.model.parameters())


def test_a_teacher_of_another_vocabulary_task_or_without_targets_is_refused(tmp_path, minilm_dir):
    from tests.test_roberta import hf_directory

    torch.manual_seed(0)
    roberta = BertModule(
        TokenClassification(entity_types=["PER"]), pretrained=str(hf_directory("roberta", tmp_path / "r"))
    )
    roberta.save_pretrained(tmp_path / "roberta-export")
    save_serving_config(roberta, tmp_path / "roberta-export", 64)
    student = BertModule(TokenClassification(entity_types=["PER"]), **TINY_ENCODER)
    with pytest.raises(
        ValueError,
        match=rf"model.teacher {re.escape(str(tmp_path / 'roberta-export'))}: its vocabulary \(\d+ tokens, .*is not the student's \(30522 tokens, all-MiniLM-L6-v2\)",
    ):
        Distiller(Teacher(path=str(tmp_path / "roberta-export")), student)
    other = BertModule(SequenceClassification(labels=["a", "b"]), **TINY_ENCODER)
    other.save_pretrained(tmp_path / "classifier")
    save_serving_config(other, tmp_path / "classifier", 64)
    with pytest.raises(
        ValueError,
        match=r"a bertkit_plugins.sequence_classification.task.SequenceClassification model, but the student's task is bertkit_plugins.token_tagging",
    ):
        Distiller(Teacher(path=str(tmp_path / "classifier")), student)
    regression = BertModule(SequenceClassification(problem_type="regression"), **TINY_ENCODER)
    regression.save_pretrained(tmp_path / "regression")
    save_serving_config(regression, tmp_path / "regression", 64)
    distiller = Distiller(Teacher(path=str(tmp_path / "regression")), regression)
    inputs = batch(regression.tokenizer, pairs=False)
    inputs["labels"] = torch.tensor([0.5, 1.0, 0.0, 2.0])
    with pytest.raises(ValueError, match="PooledClassificationHead names no distillation_targets"):
        distiller.combine(regression(inputs), inputs, regression)
    with pytest.raises(ValueError, match=r"model.teacher.temperature=0: expected a number > 0"):
        Teacher(path="x", temperature=0)
    with pytest.raises(ValueError, match=r"model.teacher.hidden_weight=-1.0: expected a number >= 0"):
        Teacher(path="x", hidden_weight=-1.0)
    with pytest.raises(ValueError, match=r"cache with hidden_weight > 0: the hidden states are not cached"):
        Teacher(path="x", cache=True, hidden_weight=1.0)


def _final(folder: Path) -> tuple[dict, list[dict]]:
    state = torch.load(folder / "runs/ner/checkpoints/last.ckpt", weights_only=True)["state_dict"]
    rows = list(csv.DictReader(next(folder.glob("runs/ner/logs/version_*/metrics.csv")).open()))
    return state, rows


@pytest.mark.system  # five fits, a predict and an export with a MiniLM teacher
def test_a_tiny_student_distils_a_minilm_teacher_from_its_checkpoint_and_its_export(tmp_path, sample_run):
    checkpoint = sample_run / "runs/ner/checkpoints/last.ckpt"  # the teacher: MiniLM, the NER recipe
    run_bertkit("export", str(checkpoint), str(tmp_path / "teacher-export"), "--onnx", "false", cwd=tmp_path)
    student = [*TINY, *FAST]
    student.append("--trainer.log_every_n_steps=1")
    transfer = tmp_path / "transfer"  # text the teacher tags, trained on beside the gold sentences
    transfer.mkdir()
    (transfer / "text.txt").write_text("Ingrid Halvorsen joined Sundby Steel in Hamburg .\n\nFans cheered in Accra .\n")
    run_bertkit("predict", "--config", str(RECIPE), f"--ckpt_path={checkpoint}", "--data.predict_file=text.txt",
                "--trainer.enable_progress_bar=false", cwd=transfer)  # fmt: skip
    predicted = transfer / "runs/ner/predictions.jsonl"
    runs = {}
    for name, extra in {
        "labels": [],
        "alpha0": [f"--model.teacher.path={checkpoint}", "--model.teacher.alpha=0"],
        "export": [
            f"--model.teacher.path={tmp_path / 'teacher-export'}",
            f"--data.train_file=[eng.train, {predicted}]",
        ],
        "hidden": [f"--model.teacher.path={checkpoint}", "--model.teacher.hidden_weight=1.0"],
    }.items():
        (tmp_path / name).mkdir()
        run_bertkit("fit", "--config", str(RECIPE), *student, *extra, cwd=tmp_path / name)
        runs[name] = _final(tmp_path / name)
    labels, alpha0 = runs["labels"][0], runs["alpha0"][0]
    assert labels.keys() == alpha0.keys() and all(torch.equal(labels[k], alpha0[k]) for k in labels)
    for name in ("hidden", "export"):  # a checkpoint's teacher (with its hidden states) and an export's
        state, rows = runs[name]
        assert state.keys() - {"distill_projection.weight", "distill_projection.bias"} == labels.keys()  # no teacher's
        assert state["encoder.embeddings.word_embeddings.weight"].shape == (30522, 128)
        assert any(not torch.equal(state[k], labels[k]) for k in labels)
        logged = [r for r in rows if r.get("train/distill_loss")]
        assert logged and all(math.isfinite(float(r["train/distill_loss"])) for r in logged)
    tiny = {"model.pretrained": None, "model.preset": "tiny", "model.vocab_file": "all-MiniLM-L6-v2"}
    both = compose(RECIPE, overrides={**tiny, "data.train_file": ["eng.train", str(predicted)]}).datamodule
    both.setup("fit")
    records = [json.loads(line) for line in predicted.read_text().splitlines()]
    assert [s.words for s in both.examples["train"][-2:]] == [r["words"] for r in records]
    assert [s.tags for s in both.examples["train"][-2:]] == [r["tags"] for r in records]
    state, rows = runs["hidden"]  # TinyBERT's states: the tiny student's 128 projected to MiniLM's 384
    assert state.keys() - labels.keys() == {"distill_projection.weight", "distill_projection.bias"}
    assert state["distill_projection.weight"].shape == (384, 128)
    hidden = [float(r["train/hidden_loss"]) for r in rows if r.get("train/hidden_loss")]
    assert len(hidden) > 3 and all(math.isfinite(h) for h in hidden)
    last = tmp_path / "hidden/runs/ner/checkpoints/last.ckpt"
    model = BertModule.load_from_checkpoint(last)  # test, predict, serve: no teacher, no projection
    assert not hasattr(model, "distill_projection") and model.state_dict().keys() == labels.keys()
    resumed = [f"--model.teacher.path={checkpoint}", "--model.teacher.hidden_weight=1.0", "--trainer.max_epochs=2"]
    run_bertkit("fit", "--config", str(RECIPE), *student, *resumed, "--ckpt_path", "last", cwd=tmp_path / "hidden")
    after = torch.load(last, weights_only=True)["state_dict"]
    assert not torch.equal(after["distill_projection.weight"], state["distill_projection.weight"])


@pytest.mark.parametrize("layers", [2])
def test_a_student_keeps_the_first_layers_and_exports_them(layers, tmp_path, minilm_dir):
    """``model.num_layers``: MiniLM's first blocks, the rest dropped; transformers reads the
    export as a model of that depth with bertkit's logits."""
    from tests.family_parity import check_export

    whole = BertModule(TokenClassification(entity_types=["PER"], crf=False))
    torch.manual_seed(0)
    cut = BertModule(TokenClassification(entity_types=["PER"], crf=False), num_layers=layers).eval()
    assert len(cut.encoder.blocks) == cut.encoder.config.num_hidden_layers == layers
    kept = {
        k: v
        for k, v in whole.encoder.state_dict().items()
        if not k.startswith("encoder.layer.") or int(k.split(".")[2]) < layers
    }
    assert cut.encoder.state_dict().keys() == kept.keys()
    assert all(torch.equal(cut.encoder.state_dict()[k], v) for k, v in kept.items())
    check_export(cut, "token", "BertForTokenClassification", tmp_path / "export")
    with pytest.raises(ValueError, match=r"model.num_layers=7: expected 1 to 6, the encoder's blocks"):
        BertModule(TokenClassification(entity_types=["PER"]), num_layers=7)


def _features(draw_lengths: list[int], pairs: bool, seed: int) -> list[dict]:
    """Features as the heads read them: [CLS] ids [SEP], and labels (tags on every other token,
    a label, or an answer span)."""
    g = torch.Generator().manual_seed(seed)
    features = []
    for i, n in enumerate(draw_lengths):
        ids = [101, *torch.randint(1000, 2000, (n - 2,), generator=g).tolist(), 102]
        feature = {"input_ids": ids, "token_type_ids": [0] * (n // 2) + [1] * (n - n // 2) if pairs else [0] * n}
        if pairs:
            feature["start_positions"], feature["end_positions"] = min(3, n - 1), min(4, n - 1)
        elif i % 2 and n > 3:  # tags: the scored tokens every other one
            feature["labels"] = [-100] + [j % 3 if j % 2 else -100 for j in range(n - 2)] + [-100]
            feature["word_index"] = [-1] + [j // 2 if j % 2 else -1 for j in range(n - 2)] + [-1]
        else:
            feature["labels"] = [-100] + [j % 3 for j in range(n - 2)] + [-100]
            feature["word_index"] = [-1, *range(n - 2), -1]
        features.append(feature)
    return features


@settings(max_examples=6, deadline=None)
@given(
    head=st.sampled_from(["tags", "tags_crf", "sentences", "spans"]),
    lengths=st.lists(st.integers(4, 20), min_size=2, max_size=10),
    seed=st.integers(0, 1000),
    data=st.data(),
)
def test_cached_targets_equal_the_teachers_on_any_batch_of_the_features(head, lengths, seed, data):
    """Whatever features a batch holds, in any order and padding, duplicates included (and the
    same ids scored at other tokens, whose CRF marginals differ: other words), the cache gives the
    teacher's targets of that batch, saved and read back alike."""
    from bertkit.data.collate import pad_batch
    from bertkit.training.teacher_cache import TeacherTargets

    make, pairs = HEADS[head]
    torch.manual_seed(seed)
    task = make()
    teacher = BertModule(task, **TINY_ENCODER).eval()
    features = _features(lengths, pairs, seed)
    if head == "sentences":
        for i, f in enumerate(features):
            f.pop("word_index"), f.update(labels=i % 2)
    features.append(dict(features[0]))  # the same feature twice
    if "word_index" in features[0]:  # the same ids scored at other tokens ("1-0" against "1 - 0")
        n = len(features[0]["input_ids"])
        features.append(
            {**features[0], "labels": [-100] + [1] * (n - 2) + [-100], "word_index": [-1, *range(n - 2), -1]}
        )
    collate = lambda part: pad_batch(part, 0, task.pad_values)  # noqa: E731
    cache = TeacherTargets.compute(teacher, features, collate)
    assert len(cache) == len(
        {(*f["input_ids"], *f["token_type_ids"], None, *f.get("word_index", [])) for f in features}
    )
    with tempfile.TemporaryDirectory() as tmp:
        cache.save(Path(tmp) / "t.safetensors")
        read = TeacherTargets.load(Path(tmp) / "t.safetensors")
    chosen = data.draw(st.lists(st.integers(0, len(features) - 1), min_size=1, max_size=6))
    batch = collate([features[i] for i in chosen])
    with torch.no_grad():
        theirs = teacher.head.distillation_targets(teacher(batch), batch)
    for store in (cache, read):
        got = store.targets(theirs, batch)
        for name, (logits, rows) in theirs.items():
            torch.testing.assert_close(got[name][0][rows], logits[rows].float(), atol=1e-5, rtol=1e-5)
            assert got[name][0].shape == logits.shape
    unseen = collate(_features([7], pairs, seed + 1))
    with pytest.raises(ValueError, match="no feature the teacher's pass saw"):
        cache.targets(theirs, unseen)


@pytest.mark.system
def test_a_cached_teacher_trains_as_the_teacher_on_each_batch_and_is_read_by_the_next_run(tmp_path):
    """NER student from a tiny teacher's checkpoint, by the ``Distillation`` callback in
    ``trainer.callbacks`` and by ``model.teacher``: with the cache, each step's distillation loss
    is the on-the-fly one's (the passes differ in padding only); a second run reads the file and
    trains to the same weights, bit for bit."""
    run_bertkit("fit", "--config", str(RECIPE), *FAST, "--model.pretrained=null", "--model.preset=tiny",
                "--model.vocab_file=all-MiniLM-L6-v2", "--trainer.default_root_dir=teacher", cwd=tmp_path)  # fmt: skip
    teacher = next((tmp_path / "teacher").rglob("last.ckpt"))
    student = [*TINY, *FAST]
    student += ["--trainer.log_every_n_steps=1"]
    env = {"BERTKIT_CACHE": str(tmp_path / "cache")}
    said, runs = {}, {}
    for name, extra in {  # the callback itself in trainer.callbacks, then model.teacher (the recipes' shortcut)
        "fly": ["--trainer.callbacks+=bertkit.Distillation", f"--trainer.callbacks.path={teacher}"],
        "cached": [f"--model.teacher.path={teacher}", "--model.teacher.cache=true"],
        "again": [f"--model.teacher.path={teacher}", "--model.teacher.cache=true"],
    }.items():
        (tmp_path / name).mkdir()
        proc = run_bertkit("fit", "--config", str(RECIPE), *student, *extra, cwd=tmp_path / name, env=env)
        said[name], runs[name] = proc.stdout + proc.stderr, _final(tmp_path / name)
    assert re.search(r"targets for [\d,]+ training features computed and written to \S+teacher", said["cached"])
    assert re.search(r"targets for [\d,]+ training features read from", said["again"])
    losses = {
        n: [float(r["train/distill_loss"]) for r in rows if r.get("train/distill_loss")]
        for n, (_, rows) in runs.items()
    }
    assert len(losses["fly"]) == len(losses["cached"]) > 3
    np.testing.assert_allclose(losses["cached"], losses["fly"], rtol=1e-3, atol=1e-5)
    cached, again = runs["cached"][0], runs["again"][0]
    assert all(torch.equal(cached[k], again[k]) for k in cached)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipe", "overlay"),
    [("ner.yaml", "ner_distill.yaml"), pytest.param("sst2.yaml", "sst2_distill.yaml", marks=pytest.mark.system)],
)
def test_the_distillation_recipes_train_a_two_layer_student(recipe, overlay, tmp_path):
    """Each overlay as its comment runs it (on the bundled samples; a tiny teacher for speed):
    the teacher, then the student with MiniLM's first 2 blocks."""
    recipes = RECIPE.parent
    run_bertkit(
        "fit", "--config", str(recipes / recipe), *FAST, *TINY, "--trainer.default_root_dir=teacher", cwd=tmp_path
    )
    teacher = tmp_path / "teacher/checkpoints/last.ckpt"
    proc = run_bertkit(
        "fit", "--config", str(recipes / recipe), "--config", str(recipes / overlay), *FAST,
        f"--model.teacher.path={teacher}", "--trainer.default_root_dir=student", cwd=tmp_path,
        env={"BERTKIT_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    state = torch.load(tmp_path / "student/checkpoints/last.ckpt", weights_only=True)
    assert state["hyper_parameters"]["num_layers"] == 2 and state["hyper_parameters"]["teacher"]["path"] == str(teacher)
    assert not any(k.startswith("encoder.encoder.layer.2.") for k in state["state_dict"])
    assert "computed and written to" not in proc.stdout + proc.stderr  # neither caches the teacher's targets
    hidden = "distill_projection.weight" in state["state_dict"]  # the teacher's hidden states: SST-2's overlay
    assert hidden == (overlay == "sst2_distill.yaml")
