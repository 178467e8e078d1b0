"""The bad-input battery: common mistakes with recipes, options, data files, weights and
checkpoints each end with exit code 2 and one ``bertkit: error:`` line that names the file and
line, or the option or field, to fix — never a traceback, never a silent success.

The CLI runs in this process (``bertkit.cli.main``) so that the battery stays fast; models are
the tiny preset with MiniLM's vocabulary unless the case is about pretrained weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from bertkit.cli import main
from tests.conftest import ROOT, TINY

R = ROOT / "recipes"
NER, SST2, SQUAD, PRETRAIN = (str(R / f"{n}.yaml") for n in ("ner", "sst2", "squad", "pretrain_bert"))
QUICK = ["--trainer.max_steps=1", "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
CONLL_OK = "EU B-ORG\nrejects O\nGerman B-MISC\ncall O\n\nPeter B-PER\nBlackburn I-PER\n"
TSV_OK = "sentence\tlabel\na fine film\t1\na dull film\t0\n"
SQUAD_OK = {
    "data": [
        {
            "paragraphs": [
                {
                    "context": "Oslo is in Norway.",
                    "qas": [
                        {"id": "q1", "question": "Where is Oslo?", "answers": [{"text": "Norway", "answer_start": 11}]}
                    ],
                }
            ]
        }
    ]
}


@dataclass
class Case:
    """``bertkit ARGS`` in a folder holding ``files``: exit 2, every ``expect`` in the message."""

    id: str
    args: list[str]
    expect: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)


def ner(*args: str) -> list[str]:
    """``fit`` of the NER recipe on a tiny model."""
    return ["fit", "--config", NER, *TINY, *QUICK, *args]


def conll(id: str, train: str | bytes, expect: list[str], validation: str = CONLL_OK) -> Case:
    """A NER case whose data folder ``d/`` holds ``train`` as the training file."""
    return Case(id, ner("--data.data_dir=d"), expect, {"d/eng.train": train, "d/eng.testa": validation})


def sst2(*args: str) -> list[str]:
    return ["fit", "--config", SST2, *TINY, *QUICK, "--data.data_dir=d", *args]


def squad(*args: str) -> list[str]:
    return ["fit", "--config", SQUAD, *TINY, *QUICK, "--data.data_dir=d", "--data.validation_file=null", *args]


CASES = [
    # --- the command line and recipes ---
    Case("no-recipe", ["fit"], ["no recipe given", "--config"]),
    Case("missing-recipe", ["fit", "--config", "nope.yaml"], ["nope.yaml: config file not found"]),
    Case("recipe-not-yaml", ["fit", "--config", "r.yaml"], ["r.yaml:2: not valid YAML"], {"r.yaml": "a: [1\nb: 2\n"}),
    Case("recipe-a-list", ["fit", "--config", "r.yaml"], ["r.yaml: expected a YAML mapping"], {"r.yaml": "- 1\n"}),
    Case(
        "plugins-not-list",
        ["fit", "--config", "r.yaml"],
        ["r.yaml: 'plugins' must be a list"],
        {"r.yaml": "plugins: x\n"},
    ),
    Case(
        "plugin-missing",
        ["fit", "--config", NER, "--config", "r.yaml"],
        ["no_such_plugin"],
        {"r.yaml": "plugins: [no_such_plugin]\n"},
    ),
    Case(
        "head-typo",
        ["fit", "--config", NER, "--model.task", "TokenClasification"],
        ["--model.task", "'TokenClasification'", "(did you mean TokenClassification?)"],
    ),
    Case(
        "head-typo-in-recipe",
        ["fit", "--config", "r.yaml"],
        ["r.yaml: model.task.class_path", "known tasks: MaskedLM, MultiTask, PreTraining"],
        {"r.yaml": "model:\n  task:\n    class_path: SequenceClasification\n"},
    ),
    Case(
        "task-head-typo",
        ["fit", "--config", "r.yaml"],
        ["r.yaml: model.task.init_args.tasks.ner.class_path", "(did you mean TokenClassification?)"],
        {
            "r.yaml": "model:\n  task:\n    class_path: MultiTask\n    init_args:\n      tasks:\n        ner:\n          class_path: TokenClasification\n"
        },
    ),
    Case(
        "task-temperature",
        ["fit", "--config", str(R / "multitask.yaml"), "--data.task_temperature=0.5"],
        ["data.task_temperature=0.5: expected a number >= 1"],
    ),
    Case(
        "multitask-temperature",
        ["fit", "--config", str(R / "multitask.yaml"), "--model.task.init_args.temperature=0.5"],
        ["model.task.temperature=0.5: expected a number >= 1"],
    ),
    Case("head-not-importable", ["fit", "--config", NER, "--model.task", "nowhere.Head"], ["'nowhere.Head'"]),
    Case("head-not-a-head", ["fit", "--config", NER, "--model.task", "collections.OrderedDict"], ["is not a"]),
    Case("key-typo", ner("--data.batchsize=8"), ["--data.batchsize"]),
    Case("value-type", ner("--data.batch_size=abc"), ["data.batch_size", "abc"]),
    Case(
        "predict-format",
        ner("--data.predict_format=xml"),
        ["data.predict_format='xml': expected one of auto, text, native"],
    ),
    Case("validation-split", ner("--data.validation_split=1.5"), ["data.validation_split=1.5"]),
    Case("max-length", ner("--model.max_length=4"), ["model.max_length=4"]),
    Case("max-tokens", ner("--data.max_tokens=0"), ["data.max_tokens=0"]),
    Case("max-tokens-too-small", ner("--data.max_tokens=10"), ["data.max_tokens=10", "longest feature"]),
    Case("warmup-ratio", ner("--model.warmup_ratio=1.5"), ["model.warmup_ratio=1.5"]),
    Case("attention-dropout", ner("--model.attention_dropout=2"), ["model.attention_dropout=2"]),
    Case(
        "preset",
        [
            "fit",
            "--config",
            NER,
            "--model.pretrained=null",
            "--model.preset=huge",
            "--model.vocab_file=all-MiniLM-L6-v2",
        ],
        ["model.preset='huge': expected one of tiny, mini, small, medium, base, large"],
    ),
    Case(
        "encoder-unknown",
        ner("--model.encoder=xlnet"),
        ["model.encoder='xlnet': no such encoder family; registered: bert, electra, modernbert, roberta, xlm-roberta"],
    ),
    Case(
        "encoder-mismatch",
        ["fit", "--config", NER, "--model.encoder=electra", *QUICK],
        ["model.encoder='electra', but model.pretrained='all-MiniLM-L6-v2' is a 'bert' model"],
    ),
    Case(
        "tag-scheme",
        ner("--model.task.init_args.tag_scheme=IOB3"),
        ["model.task.tag_scheme='IOB3': expected one of IOB1, IOB2, BIOES"],
    ),
    Case(
        "pooling", sst2("--model.task.init_args.pooling=max"), ["model.task.pooling='max': expected one of cls, mean"]
    ),
    Case(
        "classification-labels",
        sst2("--model.task.init_args.labels=[a,a]"),
        ["model.task.labels", "distinct"],
        {"d/train.tsv": TSV_OK},
    ),
    # --- weights and tokenizers ---
    Case("pretrained-missing", ["fit", "--config", NER, "--model.pretrained=nodir"], ["model.pretrained='nodir'"]),
    Case(
        "pretrained-no-weights",
        ["fit", "--config", NER, "--model.pretrained=m"],
        ["m: no weights found"],
        {
            "m/config.json": json.dumps(
                {
                    "vocab_size": 30,
                    "hidden_size": 8,
                    "num_hidden_layers": 1,
                    "num_attention_heads": 2,
                    "intermediate_size": 16,
                }
            )
        },
    ),
    Case(
        "pretrained-bad-config",
        ["fit", "--config", NER, "--model.pretrained=m"],
        ["config.json", "not valid JSON"],
        {"m/config.json": "{hidden_size: 8"},
    ),
    Case(
        "vocab-missing",
        ["fit", "--config", NER, "--model.pretrained=null", "--model.preset=tiny", "--model.vocab_file=nope.txt"],
        ["model.vocab_file='nope.txt': vocabulary file not found"],
    ),
    # --- checkpoints ---
    Case(
        "ckpt-missing",
        ["test", "--config", NER, *TINY, "--ckpt_path=nope.ckpt"],
        ["nope.ckpt: checkpoint file not found"],
    ),
    Case(
        "ckpt-garbage",
        ["test", "--config", NER, *TINY, "--ckpt_path=bad.ckpt"],
        ["bad.ckpt: not a readable checkpoint"],
        {"bad.ckpt": b"not a checkpoint"},
    ),
    Case(
        "ckpt-a-directory", ["test", "--config", NER, *TINY, "--ckpt_path=adir"], ["adir", "directory"], {"adir/x": ""}
    ),
    Case(
        "ckpt-last-truncated",
        ["test", "--config", NER, *TINY, "--ckpt_path=last"],
        ["last.ckpt: not a readable checkpoint"],
        {"runs/ner/checkpoints/last.ckpt": b"PK\x03\x04truncated"},
    ),
    Case(
        "recipe-duplicate-key",
        ["fit", "--config", "r.yaml"],
        ["r.yaml:3", "'trainer' given twice (first on line 1)"],
        {"r.yaml": "trainer:\n  max_steps: 2\ntrainer:\n  max_epochs: 3\n"},
    ),
    conll("conll-bare-cr", "EU B-ORG\rrejects O\n\nPeter B-PER\n", ["d/eng.train:1", "carriage return"]),
    Case(
        "tsv-stray-quote",
        sst2(),
        ["d/train.tsv:3", "runs over lines 3-5", "quoting: none"],
        {"d/train.tsv": 'sentence\tlabel\nfine\t1\n"a fine film\t1\na\t0\nb\t1\n', "d/dev.tsv": TSV_OK},
    ),
    Case(
        "regression-nan-label",
        sst2("--model.task.init_args.problem_type=regression"),
        ["d/train.tsv:3", "'nan' is not a decimal number"],
        {"d/train.tsv": "sentence\tlabel\nfine\t1.5\ngood\tnan\n", "d/dev.tsv": TSV_OK},
    ),
    Case("ckpt-not-lightning", ["test", "--config", NER, *TINY, "--ckpt_path=w.ckpt"], ["w.ckpt", "no state_dict"]),
    Case(
        "ckpt-best-none",
        ["test", "--config", NER, *TINY, "--ckpt_path=best"],
        ["--ckpt_path best: no checkpoint found"],
    ),
    Case(
        "ckpt-last-none", ["predict", "--config", NER, *TINY, "--ckpt_path=last"], ["--ckpt_path last: no checkpoint"]
    ),
    Case("predict-untrained", ["predict", "--config", NER, *TINY], ["no --ckpt_path", "untrained"]),
    Case("test-untrained", ["test", "--config", NER, *TINY], ["no --ckpt_path", "TokenClassification"]),
    # --- data files ---
    Case("data-dir-missing-file", ner("--data.data_dir=d"), ["d/eng.train: data.train_file not found"], {"d/x": ""}),
    conll("conll-no-tag", "EU B-ORG\nrejects O\n\nGerman\n", ["d/eng.train:4:", "'German'"]),
    conll("conll-bad-tag", "EU X-ORG\n", ["d/eng.train:1:", "'X-ORG'", "IOB1"]),
    conll(
        "conll-not-utf8", b"EU B-ORG\nrejects O\nGerm\xe9 B-MISC\n", ["d/eng.train:3: not UTF-8", "0xe9", "column 5"]
    ),
    conll("conll-empty", "", ["d/eng.train: no examples in data.train_file"]),
    conll("conll-only-docstart", "-DOCSTART- -X- O O\n\n", ["d/eng.train: no examples"]),
    conll("conll-unknown-type", "Oslo B-CITY\n", ["d/eng.train:1", "CITY"]),
    conll("conll-bad-validation", CONLL_OK, ["d/eng.testa:1:"], validation="EU\n"),
    Case(
        "predict-missing-file",
        ["predict", "--config", NER, *TINY, "--ckpt_path=pre.ckpt", "--data.predict_file=missing.txt"],
        ["missing.txt"],
    ),
    Case("tsv-no-label-column", sst2(), ["d/train.tsv", "label"], {"d/train.tsv": "sentence\tscore\nfine\t1\n"}),
    Case("tsv-short-row", sst2(), ["d/train.tsv:4:", "no label column"], {"d/train.tsv": TSV_OK + "only text\n"}),
    Case("tsv-not-utf8", sst2(), ["d/train.tsv:2: not UTF-8"], {"d/train.tsv": b"sentence\tlabel\ncaf\xe9\t1\n"}),
    Case(
        "tsv-one-label",
        sst2("--data.validation_file=null"),
        ["at least 2 labels"],
        {"d/train.tsv": "sentence\tlabel\na\t1\nb\t1\n"},
    ),
    Case(
        "squad-misspelt-key",
        squad(),
        ["data[0]", "'Paragraphs'", "did you mean 'paragraphs'"],
        {"d/train-v1.1.json": json.dumps({"data": [{"Paragraphs": SQUAD_OK["data"][0]["paragraphs"]}]})},
    ),
    Case(
        "squad-article-not-object",
        squad(),
        ["data[1]: expected an object"],
        {"d/train-v1.1.json": json.dumps({"data": [SQUAD_OK["data"][0], "Oslo"]})},
    ),
    Case(
        "squad-negative-answer-start",
        squad(),
        ["qas[0].answers[0].answer_start", "expected greater than or equal to 0"],
        {"d/train-v1.1.json": json.dumps(SQUAD_OK).replace('"answer_start": 11', '"answer_start": -7')},
    ),
    Case("squad-not-json", squad(), ["d/train-v1.1.json:1: not valid JSON"], {"d/train-v1.1.json": "{data: 1"}),
    Case("squad-no-data", squad(), ["d/train-v1.1.json: data: missing"], {"d/train-v1.1.json": "{}"}),
    Case(
        "squad-no-context",
        squad(),
        ["data[0].paragraphs[0].context: missing"],
        {"d/train-v1.1.json": json.dumps({"data": [{"paragraphs": [{"qas": []}]}]})},
    ),
    Case(
        "squad-answer-start",
        squad(),
        ["qas[0].answers[0].answer_start: expected an integer", 'got a string "x"'],
        {
            "d/train-v1.1.json": json.dumps(
                {
                    "data": [
                        {
                            "paragraphs": [
                                {
                                    "context": "c",
                                    "qas": [
                                        {"id": "1", "question": "q", "answers": [{"text": "c", "answer_start": "x"}]}
                                    ],
                                }
                            ]
                        }
                    ]
                }
            )
        },
    ),
    Case(
        "mask-line-without-mask",
        ["predict", "--config", PRETRAIN, "--model.preset=tiny", "--ckpt_path=pre.ckpt", "--data.predict_file=m.txt"],
        ["m.txt:2: no [MASK]"],
        {"m.txt": "the [MASK] sat\nno mask here\n"},
    ),
    Case(
        "squad-flag-a-string",
        squad(),
        ["qas[0].is_impossible: expected true or false", 'got a string "false"'],
        {"d/train-v1.1.json": json.dumps(SQUAD_OK).replace('"id": "q1"', '"id": "q1", "is_impossible": "false"')},
    ),
    Case(
        "squad-blank-answer",
        squad(),
        ["qas[0].answers[0].text: expected text with a character other than white space"],
        {"d/train-v1.1.json": json.dumps(SQUAD_OK).replace('"text": "Norway"', '"text": " "')},
    ),
    Case(
        "squad-key-twice",
        squad(),
        ["d/train-v1.1.json: key 'data' given twice"],
        {"d/train-v1.1.json": '{"data": [], "data": []}'},
    ),
    Case(
        "jsonl-labels-of-two-types",
        sst2("--data.train_file=t.jsonl", "--model.task.text_column=text"),
        ["d/t.jsonl:2: label is a string, but at d/t.jsonl:1 it is an integer"],
        {"d/t.jsonl": '{"text": "fine", "label": 1}\n{"text": "dull", "label": "0"}\n'},
    ),
    Case(
        "jsonl-text-a-number",
        sst2("--data.train_file=t.jsonl", "--model.task.text_column=text"),
        ["d/t.jsonl:1: text: expected a string, got an integer 7"],
        {"d/t.jsonl": '{"text": 7, "label": 1}\n'},
    ),
    Case(
        "class-weights-negative",
        sst2("--model.task.class_weights=[1.0, -1.0]"),
        ["bertkit: error: model.task.class_weights[1]: expected greater than or equal to 0, got a number -1.0"],
        {"d/train.tsv": TSV_OK},
    ),
    Case(
        "recipe-alias",
        ["fit", "--config", "r.yaml"],
        ["r.yaml:2: not valid YAML (an alias (*a): recipes do not expand aliases"],
        {"r.yaml": "x: &a [1, 2]\ny: [*a, *a]\n"},
    ),
    Case(
        "recipe-utf16",
        ["fit", "--config", "r.yaml"],
        ["r.yaml: not UTF-8 text (UTF-16: save it as UTF-8)"],
        {"r.yaml": "model:\n  learning_rate: 1.0e-4\n".encode("utf-16")},
    ),
    Case(
        "tune-no-jobs",
        ["tune", "--config", SST2, "--space", "s.yaml", "--n_jobs", "0"],
        ["n_jobs"],
        {"s.yaml": "model.learning_rate: [0.001]\n"},
    ),
    # --- machines and plugin commands ---
    Case("prepare-missing-corpus", ["prepare", "nofile", "out"], ["nofile: corpus not found"]),
    Case("prepare-bad-option", ["prepare", "--corpus", "x"], ["unrecognized arguments"]),
]
if not torch.cuda.is_available():
    CASES.append(Case("no-gpu", ner("--trainer.accelerator=gpu"), ["no CUDA GPU", "--trainer.accelerator cpu"]))


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BERTKIT_DEBUG", raising=False)
    return tmp_path


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)


def test_battery_has_forty_cases():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_error(case, in_tmp, capsys):
    write_files(in_tmp, case.files)
    if case.id == "ckpt-not-lightning":
        torch.save({"weights": torch.zeros(2)}, in_tmp / "w.ckpt")
    if "--ckpt_path=pre.ckpt" in case.args:  # a checkpoint file, read only after the data
        torch.save({"state_dict": {}}, in_tmp / "pre.ckpt")
    code = main(case.args)
    err = capsys.readouterr().err
    message = next((line for line in err.splitlines() if line.startswith("bertkit: error:")), "")
    assert code == 2, err[-3000:]
    assert "Traceback" not in err
    for expected in case.expect:
        assert expected in message, f"{expected!r} not in {message!r}"


def test_help_lists_every_command_and_the_recipes(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    commands = [line.split()[0] for line in out.split("commands:")[1].split("\n\n")[0].strip().splitlines()]
    assert commands == [
        "fit",
        "validate",
        "test",
        "predict",
        "plugins",
        "augment",
        "embed",
        "export",
        "prepare",
        "serve",
        "stream",
        "tune",
        "vocab",
    ]
    assert "  recipes/ner.yaml" in out and "  recipes/squad_v2.yaml" in out
