"""Hugging Face Hub ids as ``pretrained:`` values, with no network: a cache laid out in the test
(``models--org--name/snapshots/<commit>``, ``refs/<branch>``) from the MiniLM files, offline mode
on; and the recorded checksums of the bundled MiniLM files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bertkit.model.hub import hub_commit, hub_id, pinned
from bertkit.model.pretrained import resolve_pretrained
from tests.conftest import FAST, RECIPE, run_bertkit

MAIN, TAGGED = "a" * 40, "0123456789abcdef" * 2 + "01234567"
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture
def hub_cache(tmp_path: Path, minilm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hub cache holding ``org/mini`` at two commits (``main`` and the tag ``v1``), offline."""
    cache = tmp_path / "hf" / "hub"
    repo = cache / "models--org--mini"
    for commit, ref in ((MAIN, "main"), (TAGGED, "v1")):
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True)
        for name in FILES:
            (snapshot / name).symlink_to(minilm_dir / name)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_an_id_a_tag_and_a_commit_resolve_to_their_snapshots_offline(hub_cache):
    snapshots = hub_cache / "models--org--mini" / "snapshots"
    assert resolve_pretrained("org/mini") == snapshots / MAIN
    assert resolve_pretrained("org/mini@v1") == snapshots / TAGGED
    assert resolve_pretrained(f"org/mini@{TAGGED}") == snapshots / TAGGED
    assert pinned("org/mini@v1", snapshots / TAGGED) == f"org/mini@{TAGGED}"
    assert hub_commit(snapshots / MAIN) == ("org/mini", MAIN)


@pytest.mark.parametrize("value", ["org/missing", "org/mini@v2", "bert-base-cased"])
def test_a_missing_id_offline_names_the_id_the_cache_and_the_variable(hub_cache, value):
    with pytest.raises(FileNotFoundError) as err:
        resolve_pretrained(value)
    message = str(err.value)
    assert f"model.pretrained={value!r}" in message and str(hub_cache) in message and "HF_HUB_OFFLINE" in message


def test_a_hub_tokenizer_builds_a_fresh_encoder_without_its_weights(hub_cache):
    from bertkit_plugins.token_tagging import TokenClassification

    from bertkit import BertModule
    from bertkit.model.pretrained import load_tokenizer

    tokenizer = load_tokenizer("org/mini")
    assert tokenizer.vocab_size == 30522
    assert tokenizer.encode("Hello world").input_ids[:1] == [101]
    for value, recorded in (("org/mini", f"org/mini@{MAIN}"), ("org/mini@v1", f"org/mini@{TAGGED}")):
        model = BertModule(TokenClassification(entity_types=["PER"]), pretrained=None, preset="tiny", vocab_file=value)
        assert model.hparams.vocab_file == recorded  # the commit it resolved to, as for model.pretrained
    model = BertModule(
        TokenClassification(entity_types=["PER"]), pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2"
    )
    assert model.hparams.vocab_file == "all-MiniLM-L6-v2"  # a registered name stays as given


@given(st.from_regex(r"[A-Za-z0-9][\w.-]{0,12}/[A-Za-z0-9][\w.-]{0,12}(@[\w.-]{1,8})?", fullmatch=True))
def test_every_org_name_revision_reads_back_as_a_hub_id(value):
    repo, _, revision = value.partition("@")
    if ".." in value or value.endswith(".txt") or "--" in repo:
        assert hub_id(value) is None
    else:
        assert hub_id(value) == (repo, revision or None)


@given(st.lists(st.from_regex(r"[\w.-]{1,6}", fullmatch=True), min_size=3, max_size=5))
def test_a_path_of_three_or_more_parts_is_never_taken_for_a_hub_id(parts):
    assert hub_id("/".join(parts)) is None and hub_id("/" + "/".join(parts[:2])) is None


@pytest.mark.slow
def test_fit_from_a_hub_id_records_the_commit_in_the_checkpoint_and_the_export(hub_cache, tmp_path):
    from huggingface_hub import ModelCard

    proc = run_bertkit("fit", "--config", str(RECIPE), "--model.pretrained", "org/mini", *FAST, cwd=tmp_path)
    assert f"started from: org/mini@{MAIN}" in proc.stdout
    last = tmp_path / "runs/ner/checkpoints/last.ckpt"
    assert torch.load(last, weights_only=True)["hyper_parameters"]["pretrained"] == f"org/mini@{MAIN}"
    run_bertkit("export", str(last), "export", "--onnx", "false", cwd=tmp_path)
    card = ModelCard.load(tmp_path / "export/README.md")
    assert card.data.base_model == "org/mini" and f"`org/mini` at revision `{MAIN}`" in card.text


def test_fit_from_a_missing_hub_id_is_one_error_line(hub_cache, tmp_path):
    proc = run_bertkit("fit", "--config", str(RECIPE), "--model.pretrained", "org/absent", cwd=tmp_path, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("bertkit: error:")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "'org/absent'" in lines[0] and "HF_HUB_OFFLINE" in lines[0] and str(hub_cache) in lines[0]
    assert "Traceback" not in proc.stderr


def test_the_bundled_minilm_files_are_checked_against_their_recorded_sums(minilm_dir, tmp_path):
    from bertkit_plugins.pretrained import MINILM_SHA256, check_files

    check_files(minilm_dir, MINILM_SHA256)
    copy = tmp_path / "minilm"
    copy.mkdir()
    for name in MINILM_SHA256:
        shutil.copy(minilm_dir / name, copy / name)
    with (copy / "vocab.txt").open("a") as file:
        file.write("extra\n")
    with pytest.raises(ValueError, match=r"vocab\.txt: SHA-256 .* expected 07eced37"):
        check_files(copy, MINILM_SHA256)
