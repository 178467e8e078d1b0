"""A third-party task, an encoder family and a command, each written only against its tier of
``bertkit.api``, as the plugin docs show them (``tests/fixtures/bertkit-plugin-api``, the code on
those pages verbatim), installed as a distribution and run through the CLI in new processes: the
task trains, tests, predicts, exports (transformers loads the export and computes its scores) and
is served, and the command writes the export's records; the family loads a transformers CamemBERT
directory, fine-tunes and exports it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import FAST, RECIPE, ROOT, run_bertkit
from tests.test_contract_heads import recipe, score, score_files
from tests.test_plugins import env_with, pip_install_target
from tests.test_serve import _post, serving

pytestmark = pytest.mark.slow  # plugins installed as distributions, run in new processes

FIXTURE = ROOT / "tests" / "fixtures" / "bertkit-plugin-api"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    pip_install_target(FIXTURE, target)
    return target


def test_the_plugin_pages_show_the_code_tested_here() -> None:
    task = (FIXTURE / "bertkit_score_task.py").read_text()
    assert f"```python\n{task}```" in (ROOT / "docs" / "plugins.md").read_text()
    family = (FIXTURE / "bertkit_camembert.py").read_text()
    assert f"```python\n{family}```" in (ROOT / "docs" / "plugin-guide.md").read_text()
    command = (FIXTURE / "bertkit_scores_command.py").read_text()
    assert f"```python\n{command}```" in (ROOT / "docs" / "plugins.md").read_text()


@pytest.fixture(scope="module")
def documented_task(site: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], list[dict]]:
    """The guide's score task fit on the colour-count files, tested, its predictions written
    and its checkpoint exported: (folder, environment, prediction records)."""
    folder = tmp_path_factory.mktemp("score_task")
    score_files(folder)
    texts = (folder / "texts.txt").read_text().splitlines()
    files = {"train": "train.tsv", "validation": "test.tsv", "test": "test.tsv"}
    config = recipe(folder, "ScoreTask", files, key="task")
    env = env_with(site, BERTKIT_LOAD_PLUGINS="score_task,scores_command")

    run_bertkit("fit", "--config", str(config), cwd=folder, env=env)
    tested = run_bertkit("test", "--config", str(config), "--ckpt_path", "last", cwd=folder, env=env)
    assert score(tested.stdout, "test/score") < 0.5  # the colour count varies by about 1.3 (variance ~1.6)
    predict = ["predict", "--config", str(config), "--ckpt_path", "last", "--data.predict_file", "texts.txt"]
    run_bertkit(*predict, cwd=folder, env=env)
    records = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    assert [r["text"] for r in records] == texts and records[0]["score"] > records[1]["score"] + 1
    run_bertkit("export", str(folder / "checkpoints" / "last.ckpt"), "export", "--onnx", "false", cwd=folder, env=env)
    return folder, env, records


def test_the_documented_task_trains_tests_predicts_and_exports(documented_task) -> None:
    """The export read by transformers, and by the guide's command, gives the scores predicted."""
    import transformers

    folder, env, records = documented_task
    texts = [r["text"] for r in records]
    hf = transformers.BertForSequenceClassification.from_pretrained(folder / "export").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder / "export")
    with torch.no_grad():
        logits = hf(**tokenizer(texts, return_tensors="pt", padding=True)).logits.squeeze(-1)
    assert logits.tolist() == pytest.approx([r["score"] for r in records], abs=1e-4)

    said = run_bertkit("scores", "export", "texts.txt", "--output", "scored.jsonl", cwd=folder, env=env).stdout
    scored = [json.loads(line) for line in (folder / "scored.jsonl").read_text().splitlines()]
    assert f"{len(texts)} records written to scored.jsonl" in said and [r["text"] for r in scored] == texts
    assert [r["score"] for r in scored] == pytest.approx([r["score"] for r in records], abs=1e-4)


@pytest.mark.system
def test_the_documented_task_is_served(documented_task) -> None:
    folder, env, records = documented_task
    texts = [r["text"] for r in records]
    with serving(folder / "export", folder, "--embed", "false", env=env) as (port, _):
        status, served = _post(port, "/predict", {"inputs": texts})
    assert status == 200 and [r["text"] for r in served] == texts
    assert [r["score"] for r in served] == pytest.approx([r["score"] for r in records], abs=1e-4)


def test_the_documented_family_loads_fine_tunes_and_exports_a_camembert_directory(site, tmp_path):
    """The guide's CamemBERT family: a transformers ``camembert`` directory (random weights, a
    SentencePiece tokenizer trained here) is found by its ``model_type``, fine-tunes NER, and
    exports as ``CamembertForTokenClassification``, which transformers loads without a missing key."""
    import transformers

    from tests import trained_tokenizers
    from tests.family_parity import docs_text

    tokenizer = trained_tokenizers.train("xlm-roberta", docs_text(), vocab_size=1500)
    pad = tokenizer.token_to_id("<pad>")
    config = transformers.CamembertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=512 + pad + 1, pad_token_id=pad, type_vocab_size=1,
    )  # fmt: skip
    transformers.CamembertModel(config).save_pretrained(tmp_path / "camembert")
    trained_tokenizers.save(tokenizer, tmp_path / "camembert")
    env = env_with(site, BERTKIT_LOAD_PLUGINS="camembert")
    overlay = ROOT / "recipes" / "roberta.yaml"
    fit = ["fit", "--config", str(RECIPE), "--config", str(overlay), f"--model.pretrained={tmp_path / 'camembert'}"]
    run_bertkit(*fit, *FAST, cwd=tmp_path, env=env)
    run_bertkit("export", "runs/ner/checkpoints/last.ckpt", "export", "--onnx=false", cwd=tmp_path, env=env)
    exported = json.loads((tmp_path / "export" / "config.json").read_text())
    assert exported["model_type"] == "camembert" and exported["architectures"] == ["CamembertForTokenClassification"]
    hf, info = transformers.CamembertForTokenClassification.from_pretrained(
        tmp_path / "export", output_loading_info=True
    )
    crf = {"crf.transitions", "crf.start_transitions", "crf.end_transitions"}  # the recipe's CRF: decode them apart
    assert not info["missing_keys"] and info["unexpected_keys"] == crf, info
    assert hf.config.id2label[0] == "O" and hf.config.bos_token_id == tokenizer.token_to_id("<s>")
