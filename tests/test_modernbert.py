"""The ModernBERT family: from the same random weights bertkit's encoder equals transformers'
``ModernBertModel`` (padded and unpadded, sentences longer than the local window, pairs, with its
byte-level BPE tokenizer trained here), the config round-trips, and token tagging, sequence
classification and QA export to ``ModernBertFor…`` with equal logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from bertkit_plugins.modernbert import ModernBertConfig, ModernBertFamily

from bertkit import BertModule
from bertkit.model.families import family_of
from tests import trained_tokenizers
from tests.family_parity import HEADS, batch, check_export, docs_text

transformers = pytest.importorskip("transformers")


def hf_directory(directory: Path, seed: int = 0) -> Path:
    """A transformers-format ModernBERT directory: 5 layers (global 0 and 3), a window of 8
    tokens (±4), random weights and norms, a tokenizer trained here."""
    tokenizer = trained_tokenizers.train("modernbert", docs_text(), vocab_size=1500)
    ids = {name: tokenizer.token_to_id(token) for name, token in (("cls", "[CLS]"), ("sep", "[SEP]"), ("pad", "[PAD]"))}
    config = transformers.ModernBertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=64, num_hidden_layers=5, num_attention_heads=4,
        intermediate_size=96, global_attn_every_n_layers=3, local_attention=8, global_rope_theta=1000.0,
        pad_token_id=ids["pad"], cls_token_id=ids["cls"], sep_token_id=ids["sep"], bos_token_id=ids["cls"],
        eos_token_id=ids["sep"],
    )  # fmt: skip
    torch.manual_seed(seed)
    model = transformers.ModernBertModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.2)  # fresh norms are all ones: make them count
    model.save_pretrained(directory)
    trained_tokenizers.save(tokenizer, directory)
    return directory


def test_config_reads_both_forms_and_round_trips(tmp_path: Path) -> None:
    config = ModernBertConfig.from_pretrained(hf_directory(tmp_path / "hf"))
    assert (config.global_attn_every_n_layers, config.local_attention) == (3, 8)
    assert (config.global_rope_theta, config.local_rope_theta) == (1000.0, 10000.0)
    flat = json.loads((tmp_path / "hf" / "config.json").read_text())
    for key in ("layer_types", "rope_parameters"):
        flat.pop(key)
    flat |= {"global_attn_every_n_layers": 3, "global_rope_theta": 1000.0, "local_rope_theta": 10000.0}
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "config.json").write_text(json.dumps(flat))
    assert ModernBertConfig.from_pretrained(tmp_path / "flat") == config
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / "config.json").write_text(json.dumps(config.to_dict()))
    assert ModernBertConfig.from_pretrained(tmp_path / "ours") == config
    assert transformers.ModernBertConfig.from_pretrained(tmp_path / "ours").layer_types == [
        "full_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention"
    ]  # fmt: skip
    flat["layer_types"] = ["full_attention", "full_attention", "sliding_attention", "full_attention", "full_attention"]
    (tmp_path / "flat" / "config.json").write_text(json.dumps(flat))
    with pytest.raises(ValueError, match="not a global layer every n layers"):
        ModernBertConfig.from_pretrained(tmp_path / "flat")


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
def test_encoder_equals_transformers(unpad: bool, tmp_path: Path) -> None:
    directory = hf_directory(tmp_path)
    family = family_of(directory)
    assert family is ModernBertFamily
    encoder, tokenizer = family.from_pretrained(directory)  # a bare ModernBertModel: the head starts fresh
    hf = transformers.ModernBertModel.from_pretrained(directory, attn_implementation="eager").eval()
    assert set(encoder.state_dict()) - {k for k in encoder.state_dict() if k.startswith("head.")} == set(
        hf.state_dict()
    )
    encoder.eval()
    for pairs in (False, True):
        inputs = batch(tokenizer, pairs)
        assert int(inputs["attention_mask"].sum(1).max()) > 8  # longer than the local window
        with torch.no_grad():
            ours = encoder(**inputs, unpad=unpad, output_hidden_states=True)
            theirs = hf(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        real = inputs["attention_mask"].bool()
        worst = (ours.hidden_states[-1] - theirs.last_hidden_state)[real].abs().max()
        assert worst <= 1e-5, worst


@pytest.mark.parametrize("head", list(HEADS))
def test_every_head_exports_to_the_family_class(head: str, tmp_path: Path) -> None:
    make, task = HEADS[head]
    model = BertModule(make(), pretrained=str(hf_directory(tmp_path / "base"))).eval()
    with torch.no_grad():  # fresh heads start at zero bias: make every tensor count
        for p in [*model.head.parameters(), *model.encoder.head.parameters()]:
            p.normal_(0, 0.5)
    check_export(model, head, "ModernBert" + task, tmp_path / "export")
    # the export loads back into bertkit: encoder, prediction head and all
    again = BertModule(make(), pretrained=str(tmp_path / "export")).eval()
    for key, value in model.encoder.state_dict().items():
        assert torch.equal(again.encoder.state_dict()[key], value), key


@pytest.mark.system
def test_modernbert_directory_fine_tunes_ner_predicts_and_exports(tmp_path: Path) -> None:
    """``model.pretrained`` a ModernBERT directory through the CLI: NER trains, predicted entity
    offsets are the words' characters (no leading spaces from the byte-level pieces), and the
    export runs in onnxruntime with bertkit's logits (RoPE and the banded mask in the graph)."""
    from tests.conftest import FAST, RECIPE, run_bertkit

    directory = hf_directory(tmp_path / "modernbert")
    run_bertkit("fit", "--config", str(RECIPE), f"--model.pretrained={directory}", *FAST, cwd=tmp_path)
    text = tmp_path / "news.txt"
    text.write_text("Peter Blackburn flew to Oslo with the European Union delegation on Monday .\n", encoding="utf-8")
    ckpt = "runs/ner/checkpoints/last.ckpt"
    run_bertkit("predict", "--config", str(RECIPE), "--ckpt_path", ckpt, f"--data.predict_file={text}", cwd=tmp_path)
    (record,) = [json.loads(line) for line in (tmp_path / "runs/ner/predictions.jsonl").read_text().splitlines()]
    assert len(record["tags"]) == len(record["words"]) == 13
    for entity in record["entities"]:
        assert entity["text"] == record["text"][entity["start"] : entity["end"]] == entity["text"].strip()
    run_bertkit("export", ckpt, "runs/ner/export", cwd=tmp_path)
    export = tmp_path / "runs/ner/export"
    config = json.loads((export / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForTokenClassification"] and (export / "model.onnx").is_file()
