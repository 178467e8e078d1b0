"""Sequence classification data: readers (BOM, quoting, missing columns, blank lines), pair
encoding and BERT's truncation, label vocabulary, class weights, seeded dev split, real files."""

from __future__ import annotations

import pytest
import torch
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.sequence_classification.readers import read_jsonl, read_lines, read_table
from hypothesis import given
from hypothesis import strategies as st

from bertkit import BertConfig, BertTokenizer
from bertkit.data.collate import pad_batch
from bertkit.data.datamodule import BertDataModule
from bertkit.model.tokenizer import truncate_pair
from bertkit.utils.io import text_lines
from tests.conftest import DATA, need

MRPC_LIKE = (
    "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    '1\t1\t2\t"Yes, of course.\tHe agreed.\n'
    "\n"
    "0\t3\t4\tShe left early\tShe stayed late.\n"
)


def test_tsv_with_bom_bare_quotes_and_blank_lines(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(MRPC_LIKE, encoding="utf-8")
    examples = read_table(path, "#1 String", "#2 String", "Quality", quoting="none")
    assert [(e.text, e.text_pair, e.label) for e in examples] == [
        ('"Yes, of course.', "He agreed.", "1"),
        ("She left early", "She stayed late.", "0"),
    ]
    assert [e.source for e in examples] == [f"{path}:2", f"{path}:4"]  # the blank line 3 is skipped
    # With standard quoting the bare quote would swallow the rest of the file into one field.
    with pytest.raises(ValueError, match=rf"{path}:2: a quoted field runs over lines 2-4 .*quoting: none"):
        read_table(path, "#1 String", "#2 String", "Quality")


def test_csv_quoted_fields_and_column_indices(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text('"Great, really great",pos\n"Two\nlines",neg\n', encoding="utf-8")
    examples = read_table(path, 0, None, 1, delimiter=",", header=False, quoting="multiline")
    assert [(e.text, e.label) for e in examples] == [("Great, really great", "pos"), ("Two\nlines", "neg")]
    assert examples[1].source == f"{path}:2"  # the line where the record starts
    with pytest.raises(ValueError, match=rf"{path}:2: a quoted field runs over lines 2-3 \(2 lines joined"):
        read_table(path, 0, None, 1, delimiter=",", header=False)  # minimal quoting: one line per field


def test_missing_columns_are_named(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\nfine film\t1\nno label here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}:3: no label column \(index 1\); the row has 1 fields"):
        read_table(path, "sentence", None, "label")
    with pytest.raises(ValueError, match=rf"{path}:1: no text column 'text'; the header has \['sentence', 'label'\]"):
        read_table(path, "text", None, "label")
    with pytest.raises(ValueError, match="no header; give an index"):
        read_table(path, "sentence", None, "label", header=False)


def test_jsonl_fields_and_errors(tmp_path):
    path = tmp_path / "rte.jsonl"
    path.write_text('{"sentence1": "A", "sentence2": "B", "label": 1}\n\n{"sentence1": "C", "label": 0}\n')
    with pytest.raises(ValueError, match=rf"{path}:3: no text pair field 'sentence2'"):
        read_jsonl(path, "sentence1", "sentence2", "label")
    path.write_text('{"sentence1": "A", "sentence2": "B", "label": 1}\n{oops\n')
    with pytest.raises(ValueError, match=rf"{path}:2: not valid JSON"):
        read_jsonl(path, "sentence1", "sentence2", "label")


def test_plain_text_pairs_need_a_tab(tmp_path):
    path = tmp_path / "pairs.txt"
    path.write_text("a dog\ta cat\n\nno tab\n")
    with pytest.raises(ValueError, match=rf"{path}:3: expected two texts separated by a tab"):
        read_lines(path, text_lines(path), pairs=True)
    assert [e.text for e in read_lines(path, text_lines(path), pairs=False)] == ["a dog\ta cat", "no tab"]


def google_truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """Verbatim logic of google-research/bert run_classifier.py ``_truncate_seq_pair``."""
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_length:
            break
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


@given(st.integers(0, 60), st.integers(0, 60), st.integers(0, 80))
def test_truncate_pair_matches_google(len_a, len_b, budget):
    a, b = list(range(len_a)), list(range(len_b))
    google_truncate_seq_pair(a, b, budget)
    assert truncate_pair(len_a, len_b, budget) == (len(a), len(b))


def test_pair_features_have_segment_ids_and_trim_the_longer_text(minilm_dir):
    tokenizer = BertTokenizer.from_pretrained(minilm_dir)
    head = SequenceClassification(text_column="a", text_pair_column="b", labels=["0", "1"])
    from bertkit_plugins.sequence_classification.readers import Example

    short, long = "a cat sat", "the dog ran far away over the hills and back home again"
    [feature] = head.featurize([Example(short, long, "1", "x:1")], tokenizer, max_length=12)
    ids, segments = feature["input_ids"], feature["token_type_ids"]
    n_a = len(tokenizer.encode(short).input_ids) - 2  # 3 tokens
    assert len(ids) == 12 and feature["labels"] == 1
    assert (
        ids[0] == tokenizer.cls_token_id
        and ids[n_a + 1] == tokenizer.sep_token_id
        and ids[-1] == tokenizer.sep_token_id
    )
    assert segments == [0] * (n_a + 2) + [1] * (12 - n_a - 2)  # A kept whole: only B is trimmed
    assert tokenizer.backend.decode(ids[n_a + 2 : -1]) == "the dog ran far away over"


def test_label_vocabulary_from_train_and_unknown_labels(tmp_path, minilm_dir):
    tokenizer = BertTokenizer.from_pretrained(minilm_dir)
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\na\t10\nb\t2\nc\t2\n")
    head = SequenceClassification()
    assert not head.ready
    examples = head.read(path)
    head.learn(examples)
    assert head.ready and head.hparams.labels == ["2", "10"]  # numeric order, not "10" < "2"
    assert [f["labels"] for f in head.featurize(examples, tokenizer, 16)] == [1, 0, 0]
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\nd\t2\ne\t7\n")
    with pytest.raises(ValueError, match=rf"{dev}:3: label '7' is not in the label vocabulary \['2', '10'\]"):
        head.featurize(head.read(dev), tokenizer, 16)


def test_balanced_class_weights_and_multi_hot_batches(tmp_path, minilm_dir):
    tokenizer = BertTokenizer.from_pretrained(minilm_dir)
    config = BertConfig.preset("tiny", vocab_size=tokenizer.vocab_size)
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\na\tx\nb\tx\nc\tx\nd\ty\n")
    single = SequenceClassification(class_weights="balanced")
    assert not single.ready  # the weights are counted on the training file
    single.learn(single.read(path))
    assert single.ready and single.hparams.balanced_weights == pytest.approx([4 / (2 * 3), 4 / (2 * 1)])
    head = single.build_head(config, tokenizer)
    assert torch.allclose(head.loss_weight, torch.tensor([4 / (2 * 3), 4 / (2 * 1)]))
    path.write_text("sentence\tlabel\na\tx,y\nb\tx\nc\t\nd\tz\n")
    multi = SequenceClassification(problem_type="multi_label", class_weights="balanced")
    examples = multi.read(path)
    multi.learn(examples)
    assert multi.hparams.labels == ["x", "y", "z"] and examples[2].label == []
    head = multi.build_head(config, tokenizer)
    assert torch.allclose(head.loss_weight, torch.tensor([2 / 2, 3 / 1, 3 / 1]))  # negatives / positives
    batch = pad_batch(multi.featurize(examples, tokenizer, 16))
    assert batch["labels"].tolist() == [[1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 1]]


def test_regression_labels_must_be_numbers(tmp_path):
    path = tmp_path / "sts.tsv"
    path.write_text("sentence\tlabel\na\t3.5\nb\thigh\n")
    with pytest.raises(ValueError, match=rf"{path}:3: label 'high' is not a decimal number"):
        SequenceClassification(problem_type="regression").read(path)


def test_validation_split_is_seeded_and_reproducible(tmp_path):
    lines = "".join(f"text {i}\t{i % 2}\n" for i in range(50))
    (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + lines)

    def split(seed):
        task = SequenceClassification()  # the data module needs its task alone: no model, no trainer
        data = BertDataModule(task, data_dir=str(tmp_path), train_file="train.tsv", validation_split=0.2, seed=seed)
        data.setup("fit")
        return [e.text for e in data.examples["train"]], [e.text for e in data.examples["validation"]]

    train, dev = split(7)
    assert len(dev) == 10 and len(train) == 40 and not set(train) & set(dev)
    assert split(7) == (train, dev) and split(8)[1] != dev


def test_real_glue_files_read_completely():
    sst2, mrpc, rte = (need(DATA / p) for p in ("classification/sst2", "pair/mrpc", "pair/rte"))
    head = SequenceClassification()
    assert [len(head.read(sst2 / f)) for f in ("train.tsv", "dev.tsv", "test.tsv")] == [60614, 6735, 872]
    pairs = SequenceClassification(
        text_column="#1 String", text_pair_column="#2 String", label_column="Quality", quoting="none"
    )
    train = pairs.read(mrpc / "msr_paraphrase_train.txt")
    assert len(train) == 4076 and len(pairs.read(mrpc / "msr_paraphrase_test.txt")) == 1725
    assert {e.label for e in train} == {"0", "1"} and all(e.text and e.text_pair for e in train)
    nli = SequenceClassification(text_column="sentence1", text_pair_column="sentence2")
    assert [len(nli.read(rte / f)) for f in ("train.jsonl", "validation.jsonl")] == [2490, 277]


def test_single_label_metrics_report_f1_per_label():
    from bertkit_plugins.sequence_classification.metrics import ClassificationMetrics

    metrics = ClassificationMetrics("single_label", 3, labels=["neg", "neu", "pos"])
    logits = torch.eye(3)[[0, 0, 1, 2, 2, 2]]  # predictions 0 0 1 2 2 2
    metrics.update(logits, torch.tensor([0, 1, 1, 2, 2, 0]))
    values = metrics.compute()
    # neg: tp 1, fp 1, fn 1 -> 0.5; neu: tp 1, fn 1 -> 2/3; pos: tp 2, fp 1 -> 0.8
    assert {k: round(float(v), 4) for k, v in values.items() if k.startswith("f1_") and k != "f1_macro"} == {
        "f1_neg": 0.5, "f1_neu": 0.6667, "f1_pos": 0.8,
    }  # fmt: skip
    assert abs(float(values["f1_macro"]) - (0.5 + 2 / 3 + 0.8) / 3) < 1e-6


def test_a_data_module_reads_featurizes_and_batches_with_no_model_and_no_trainer(tmp_path, minilm_dir):
    """The data module needs a task and a tokenizer only: it reads the files, lets the task learn
    its labels, and builds padded batches that can be inspected before any model exists."""
    (tmp_path / "train.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"text number {i}\t{'ab'[i % 2]}\n" for i in range(10))
    )
    task, tokenizer = SequenceClassification(), BertTokenizer.from_pretrained(minilm_dir)
    data = BertDataModule(task, tokenizer, data_dir=str(tmp_path), train_file="train.tsv", batch_size=4)
    data.setup("fit")
    batches = list(data.train_dataloader())
    assert task.hparams.labels == ["a", "b"] and [len(b["input_ids"]) for b in batches] == [4, 4, 2]
    assert all(b["input_ids"].shape == b["attention_mask"].shape for b in batches)
    assert sorted(label for b in batches for label in b["labels"].tolist()) == [0] * 5 + [1] * 5
    with pytest.raises(RuntimeError, match=r"BertDataModule has no task: give BertDataModule\(task=…\)"):
        BertDataModule(data_dir=str(tmp_path), train_file="train.tsv").setup("fit")


def test_a_tasks_own_batch_order_replaces_the_data_modules(tmp_path, minilm_dir, caplog):
    """``Task.batch_order``: the training loader takes the task's ``BatchOrder`` (an
    ``EpochBatchSampler`` drawn each epoch, resumable), evaluation its batch sampler, and the
    first process warns its left-out message; ``BatchSettings`` tells it which loader and the
    data module's settings."""
    from bertkit.api.task import BatchOrder, EpochBatchSampler

    class LastFirst(EpochBatchSampler):
        def __init__(self, count: int) -> None:
            super().__init__(seed=0)
            self.count = count

        def draw(self, g):
            return [[i, i - 1] for i in range(self.count - 1, 0, -2)]  # pairs, last first

    seen = []

    class OwnOrder(SequenceClassification):
        def batch_order(self, features, settings):
            seen.append(settings)
            if settings.train:
                left = "" if len(features) % 2 == 0 else "1 training feature left out"
                return BatchOrder(LastFirst(len(features)), as_batch_sampler=True, settings=("pairs",), left_out=left)
            return BatchOrder([[i] for i in range(len(features))], as_batch_sampler=True)

    (tmp_path / "train.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"text number {i}\t{'ab'[i % 2]}\n" for i in range(7))
    )
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\nshort\ta\na much longer text than that\tb\n")
    task, tokenizer = OwnOrder(), BertTokenizer.from_pretrained(minilm_dir)
    data = BertDataModule(
        task, tokenizer, data_dir=str(tmp_path), train_file="train.tsv", validation_file="dev.tsv", batch_size=4,
        seed=3,
    )  # fmt: skip
    data.setup("fit")
    with caplog.at_level("WARNING"):
        labels = [b["labels"].tolist() for b in data.train_dataloader()]
    assert labels == [[0, 1], [0, 1], [0, 1]]  # features 6 5, 4 3, 2 1: labels a b, a b, a b
    assert "1 training feature left out" in caplog.text
    lengths = [len(b["input_ids"][0]) for b in data.val_dataloader()]
    assert lengths[0] < lengths[1]  # the task's order, not the data module's longest first
    train, evaluation = seen
    assert (train.train, train.batch_size, train.seed, train.num_replicas, train.rank) == (True, 4, 3, 1, 0)
    assert (evaluation.train, evaluation.batch_size, len(evaluation.lengths)) == (False, 8, 2)
