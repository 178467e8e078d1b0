"""``data.hf_dataset``: Hugging Face ``datasets`` (a ``save_to_disk`` folder, a Parquet file, a
JSON Lines file, written here; no downloads) read into each head's examples with nothing lost,
class-label ids turned into their names; and the errors when a split or the extra is missing."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import ROOT, run_bertkit

datasets = pytest.importorskip("datasets")

TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
TINY = {"model.pretrained": None, "model.preset": "tiny", "model.vocab_file": "all-MiniLM-L6-v2"}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))


def ner_dataset(rows: int, seed: int) -> datasets.Dataset:
    import random

    rng = random.Random(seed)
    names = ["Ana", "Kofi", "Lena", "Omar"]
    places = ["Oslo", "Lima", "Accra"]
    tokens, tags = [], []
    for _ in range(rows):
        words = [rng.choice(names), "flew", "to", rng.choice(places), "on", "Monday", "."]
        tokens.append(words)
        tags.append([1, 0, 0, 5, 0, 0, 0])
    features = datasets.Features(
        {
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=TAGS)),
        }
    )
    return datasets.Dataset.from_dict({"tokens": tokens, "ner_tags": tags}, features=features)


def compose_with(recipe: str, **overrides):
    from bertkit import compose

    return compose(ROOT / "recipes" / recipe, overrides={**TINY, "trainer.enable_progress_bar": False, **overrides})


def test_a_saved_dataset_dict_becomes_the_ner_splits_word_for_word(tmp_path):
    saved = tmp_path / "ner_ds"
    parts = {"train": ner_dataset(40, 0), "validation": ner_dataset(8, 1), "test": ner_dataset(9, 2)}
    datasets.DatasetDict(parts).save_to_disk(str(saved))
    run = compose_with("ner.yaml", **{"data.hf_dataset": str(saved), "model.task.tag_scheme": "IOB2"})
    run.datamodule.setup("fit")
    run.datamodule.setup("test")
    for split, part in parts.items():
        examples = run.datamodule.examples[split]
        assert [s.words for s in examples] == part["tokens"]
        assert [s.tags for s in examples] == [[TAGS[t] for t in row] for row in part["ner_tags"]]
        assert examples[0].source == f"{saved}[{split}]:1"  # the data set's first record, not the cache file


def test_fit_and_test_read_a_dataset_through_the_cli(tmp_path):
    saved = tmp_path / "ner_ds"
    datasets.DatasetDict(
        {"train": ner_dataset(24, 0), "validation": ner_dataset(8, 1), "test": ner_dataset(8, 2)}
    ).save_to_disk(str(saved))
    args = ["--config", str(ROOT / "recipes/ner.yaml"), *(f"--{k}={'null' if v is None else v}" for k, v in TINY.items()),
            f"--data.hf_dataset={saved}", "--model.task.tag_scheme=IOB2", "--trainer.enable_progress_bar=false"]  # fmt: skip
    run_bertkit("fit", *args, "--trainer.max_steps=2", cwd=tmp_path, env={"BERTKIT_CACHE": str(tmp_path / "cache")})
    run_bertkit("test", *args, "--ckpt_path=last", cwd=tmp_path, env={"BERTKIT_CACHE": str(tmp_path / "cache")})
    assert "test/f1" in (tmp_path / "runs/ner/test_scores.json").read_text()


def test_a_parquet_file_with_class_labels_feeds_sentence_classification(tmp_path):
    features = datasets.Features(
        {"sentence": datasets.Value("string"), "label": datasets.ClassLabel(names=["negative", "positive"])}
    )
    rows = {"sentence": [f"a {w} film number {i}" for i, w in enumerate(["fine", "dull"] * 10)], "label": [1, 0] * 10}
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(tmp_path / "reviews.parquet"))
    run = compose_with(
        "sst2.yaml", **{"data.hf_dataset": str(tmp_path / "reviews.parquet"), "data.validation_file": None}
    )
    run.datamodule.setup("fit")
    train = run.datamodule.examples["train"]
    assert [e.text for e in train] == rows["sentence"]
    assert [e.label for e in train] == ["positive", "negative"] * 10
    assert run.model.task.hparams.labels == ["negative", "positive"]


def test_squad_rows_in_json_lines_keep_their_answers(tmp_path):
    context = "Marta Kowalczyk founded Helix Labs in Oslo in 2011."
    rows = [
        {"id": "q1", "title": "Helix", "context": context, "question": "Who founded Helix Labs?",
         "answers": {"text": ["Marta Kowalczyk"], "answer_start": [0]}},
        {"id": "q2", "title": "Helix", "context": context, "question": "Where is Helix Labs?",
         "answers": {"text": ["Oslo"], "answer_start": [context.index("Oslo")]}},
    ]  # fmt: skip
    datasets.Dataset.from_list(rows).to_json(str(tmp_path / "qa.jsonl"))
    run = compose_with("squad.yaml", **{"data.hf_dataset": str(tmp_path / "qa.jsonl"), "data.validation_file": None})
    run.datamodule.setup("fit")
    examples = run.datamodule.examples["train"]
    assert [e.id for e in examples] == ["q1", "q2"]
    assert [(a.text, a.start) for e in examples for a in e.answers] == [
        ("Marta Kowalczyk", 0),
        ("Oslo", context.index("Oslo")),
    ]


def test_a_missing_split_is_an_error_naming_the_splits_there(tmp_path):
    datasets.DatasetDict({"train": ner_dataset(4, 0)}).save_to_disk(str(tmp_path / "ds"))
    run = compose_with("ner.yaml", **{"data.hf_dataset": str(tmp_path / "ds"), "model.task.tag_scheme": "IOB2"})
    with pytest.raises(FileNotFoundError, match=r"data.validation_file='eng.testa': .* has no split 'eng.testa' "
                       r"\(its splits: train\)"):  # fmt: skip
        run.datamodule.setup("fit")


def test_without_the_extra_the_error_names_it(tmp_path, monkeypatch):
    from bertkit.data.hf_datasets import load_splits

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"pip install 'bertkit\[datasets\]'"):
        load_splits(str(tmp_path))


def test_errors_name_the_data_set_and_its_split_not_the_cache_file(tmp_path):
    parts = {"train": ner_dataset(6, 0), "validation": ner_dataset(4, 1)}
    datasets.DatasetDict(parts).save_to_disk(str(tmp_path / "ds"))
    overrides = {"data.hf_dataset": str(tmp_path / "ds"), "model.task.tag_scheme": "IOB2"}
    run = compose_with("ner.yaml", **overrides, **{"model.task.entity_types": ["PER"]})  # LOC is not a type here
    with pytest.raises(ValueError, match=rf"{tmp_path / 'ds'}\[train\]:1: .*LOC") as err:
        run.datamodule.setup("fit")
    assert "hf" not in str(err.value).replace(str(tmp_path), "")  # no cache folder
    run = compose_with("ner.yaml", **overrides)
    run.datamodule.setup("fit")
    sources = {e.source.rpartition(":")[0] for e in run.datamodule._read("train")}
    assert sources == {f"{tmp_path / 'ds'}[train]"}  # what later errors name
