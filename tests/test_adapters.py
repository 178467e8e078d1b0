"""LoRA adapters (``model.adapter``, peft): only the adapters and the head train, for every encoder
family and head; the merged export loads in transformers with bertkit's logits, and the PEFT
folder loads over the transformers base with them too; checkpoints hold the adapters and the head
and read back over ``model.pretrained`` (whose fingerprint they check); the layers inside an
adapter are left alone by the passes that replace linear layers; training runs padded, unpadded
and in bf16 (DDP: ``tests/test_ddp_equality.py``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertkit import BertModule
from bertkit.model.adapters import Adapter, frozen_fingerprint, is_adapter_key
from tests.conftest import FAST, RECIPE, ROOT, run_bertkit
from tests.family_parity import HEADS, batch, check_export

peft = pytest.importorskip("peft", reason="the lora extra (peft) is not installed")
transformers = pytest.importorskip("transformers")
LORA = ROOT / "recipes" / "ner_lora.yaml"


def _directory(family: str, tmp_path: Path, minilm_dir: Path) -> Path:
    if family == "bert":
        return minilm_dir
    if family == "electra":  # a small ElectraModel on BERT's vocabulary
        torch.manual_seed(0)
        config = transformers.ElectraConfig(
            vocab_size=30522, embedding_size=128, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=256,
        )  # fmt: skip
        transformers.ElectraModel(config).save_pretrained(tmp_path / "electra")
        for name in ("tokenizer.json", "vocab.txt"):
            if (minilm_dir / name).is_file():
                shutil.copy(minilm_dir / name, tmp_path / "electra" / name)
        return tmp_path / "electra"
    if family == "modernbert":
        from tests.test_modernbert import hf_directory

        return hf_directory(tmp_path / "modernbert")
    from tests.test_roberta import hf_directory

    return hf_directory(family, tmp_path / family)


def _perturbed(model: BertModule) -> BertModule:
    """Every trainable weight moved (LoRA's B starts at 0: an untrained adapter changes nothing),
    once the adapters are on (``configure_model``, as a trainer calls it)."""
    model.configure_model()
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


@pytest.mark.slow
@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("family", ["bert", "roberta", "electra", "modernbert"])
def test_adapters_and_head_train_and_the_merged_export_reads_alike(family, head, tmp_path, minilm_dir):
    if family == "electra" and head in ("sequence", "mlm"):  # ElectraFamily.hf_architecture
        pytest.skip("transformers' ELECTRA classes for these heads have other task layers than BERT's")
    model = BertModule(HEADS[head][0](), pretrained=str(_directory(family, tmp_path, minilm_dir)), adapter=Adapter(r=4))
    assert model.base_fingerprint is None and not any(is_adapter_key(k) for k in model.state_dict())
    model.configure_model()  # what a trainer does first: the adapters go on
    targets = model.hparams.adapter["target_modules"]
    assert targets == list(model.family.adapter_targets)
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    adapters = {k for k in trainable if is_adapter_key(k)}
    assert adapters and trainable - adapters == {
        f"head.{k}" for k, p in model.head.named_parameters() if p.requires_grad
    }
    assert all(k.split(".lora_")[0].endswith(tuple(targets)) for k in adapters)
    if not model.head.reads_pooler:  # outside the loss: DDP would stop at the first step
        assert not [k for k in trainable if k.startswith("encoder.pooler.")]
    model = _perturbed(model)
    inputs = batch(model.tokenizer, pairs=head == "qa")
    if head != "mlm":
        with torch.no_grad():
            unpadded = model(inputs)
            model.hparams.unpad = False
            padded = model(inputs)
            model.hparams.unpad = True
        real = inputs["attention_mask"].bool()
        for key in [k for k in unpadded if k.endswith("logits")]:
            mine, other = unpadded[key], padded[key]
            if mine.dim() > 2:
                mine, other = mine[real], other[real]
            torch.testing.assert_close(mine, other, atol=1e-5, rtol=1e-4)
    check_export(model, head, model.family.hf_architecture(model.head.hf_architecture), tmp_path / "export")


def test_adapter_settings_are_checked():
    with pytest.raises(ValueError, match=r"model.adapter.r=0: expected an integer >= 1"):
        Adapter(r=0)
    from bertkit_plugins.token_tagging import TokenClassification

    with pytest.raises(ValueError, match=r"\['query_proj'\] name no linear layer of the encoder \(its linear layers: "):
        BertModule(TokenClassification(entity_types=["PER"]), adapter=Adapter(target_modules=["query_proj"]))


@settings(max_examples=8, deadline=None)
@given(
    targets=st.sets(
        st.sampled_from(["query", "key", "value", "attention.output.dense", "intermediate.dense"]), min_size=1
    )
)
def test_passes_that_replace_linear_layers_leave_the_adapters_layers_alone(targets):
    """Packing for oneDNN and int8 replace ``nn.Linear`` modules; inside a LoRA layer they would
    cut the adapter off its base weights. The base's fingerprint does not depend on the targets."""
    from bertkit_plugins.token_tagging import TokenClassification

    from bertkit.model.prepacked import PrepackedLinear, prepack_linears, prepacking_available, unprepack_linears
    from bertkit.model.quantize import quantize_linears

    task = TokenClassification(entity_types=["PER"], crf=False)
    torch.manual_seed(0)
    plain = BertModule(task, pretrained=None, preset="tiny", vocab_file="all-MiniLM-L6-v2")
    torch.manual_seed(0)
    model = _perturbed(
        BertModule(
            task,
            pretrained=None,
            preset="tiny",
            vocab_file="all-MiniLM-L6-v2",
            adapter=Adapter(target_modules=sorted(targets)),
        )
    )
    # the base's fingerprint is the plain encoder's, whichever layers carry adapters
    assert model.base_fingerprint == frozen_fingerprint(plain.encoder)
    inputs = batch(model.tokenizer, pairs=False)
    with torch.no_grad():
        before = model(inputs)["logits"]
        lora_layers = [m for m in model.encoder.modules() if hasattr(m, "get_base_layer")]
        inside = {id(x) for m in lora_layers for x in m.modules()}
        if prepacking_available():
            prepack_linears(model.encoder)
            packed = [m for m in model.encoder.modules() if isinstance(m, PrepackedLinear)]
            assert packed and not {id(m) for m in packed} & inside
            torch.testing.assert_close(model(inputs)["logits"], before, atol=1e-5, rtol=1e-5)
            unprepack_linears(model.encoder)
        quantize_linears(model.encoder)
        assert all(type(m.get_base_layer()) is torch.nn.Linear for m in lora_layers)
        assert model(inputs)["logits"].isfinite().all()


@pytest.mark.slow
def test_a_lora_run_keeps_adapters_and_head_and_exports_both_forms(tmp_path, minilm_dir):
    proc = run_bertkit("fit", "--config", str(RECIPE), "--config", str(LORA), *FAST, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert re.search(r"trainable \(1\.\d\d %: LoRA r=8 on query, key, value, dense, and the head\)", out), out[-2000:]
    assert re.search(r"last checkpoint at step 6: \S+last\.ckpt, \d\.\d MB \(adapters and head\)", out), out[-2000:]
    last = tmp_path / "runs/ner/checkpoints/last.ckpt"
    stored = torch.load(last, weights_only=True)
    assert all(is_adapter_key(k) or k.startswith("head.") for k in stored["state_dict"])
    assert last.stat().st_size < 6e6  # r 8 on every linear layer: 4.2 MB; the base (MiniLM) alone is 90 MB

    model = BertModule.load_from_checkpoint(last).eval()
    assert {k: v for k, v in model.state_dict().items() if k in stored["state_dict"]}.keys() == stored[
        "state_dict"
    ].keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in stored["state_dict"].items())
    from bertkit.inference.predictor import Predictor

    texts = ["Peter Blackburn flew to Oslo on Tuesday.", "EU rejects German call to boycott British lamb ."]
    loaded = Predictor.load(last)  # what bertkit serve runs: its layers packed, the adapters' not
    plain = Predictor.from_model(model, max_length=loaded.max_length)
    assert loaded.predict(texts) == plain.predict(texts)
    run_bertkit(  # the logits as trained: no emission biases fitted for the plain pipeline
        "export", str(last), str(tmp_path / "export"), "--adapter", "true", "--onnx", "false", "--calibrate", "false",
        cwd=tmp_path,
    )  # fmt: skip
    card = (tmp_path / "export" / "README.md").read_text(encoding="utf-8")
    assert "# TokenClassification (LoRA) from all-MiniLM-L6-v2" in card and "## LoRA" in card
    assert f"`{tmp_path / 'export'}/adapter` holds the adapters alone as a PEFT folder" in card
    config = json.loads((tmp_path / "export" / "adapter" / "adapter_config.json").read_text(encoding="utf-8"))
    assert config["base_model_name_or_path"] == "sentence-transformers/all-MiniLM-L6-v2"  # not the registered name
    check = batch(model.tokenizer, pairs=False)
    real = check["attention_mask"].bool()
    with torch.no_grad():
        ours = model(check)["logits"][real]
        merged = transformers.BertForTokenClassification.from_pretrained(tmp_path / "export").eval()
        base = transformers.BertForTokenClassification.from_pretrained(minilm_dir, num_labels=ours.shape[-1])
        adapted = peft.PeftModel.from_pretrained(base, tmp_path / "export" / "adapter").eval()
        for reader in (merged, adapted):
            theirs = reader(input_ids=check["input_ids"], attention_mask=check["attention_mask"]).logits[real]
            torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-4)

    other = tmp_path / "other-base"
    shutil.copytree(minilm_dir, other)
    from safetensors.torch import load_file, save_file

    weights = load_file(other / "model.safetensors")
    weights["embeddings.LayerNorm.bias"] = weights["embeddings.LayerNorm.bias"] + 0.01
    save_file(weights, other / "model.safetensors")
    with pytest.raises(ValueError, match=r"the checkpoint's adapters were trained over other base weights"):
        BertModule.load_from_checkpoint(last, pretrained=str(other))
    with pytest.raises(ValueError, match=r"the checkpoint holds adapters \(model.adapter\), but this model has none"):
        BertModule.load_from_checkpoint(last, adapter=None)


@pytest.mark.system
def test_lora_trains_in_bf16(tmp_path):
    run_bertkit(
        "fit", "--config", str(RECIPE), "--config", str(LORA), *FAST, "--trainer.precision=bf16-mixed", cwd=tmp_path
    )
    stored = torch.load(tmp_path / "runs/ner/checkpoints/last.ckpt", weights_only=True)["state_dict"]
    lora_b = [v for k, v in stored.items() if ".lora_B." in k]
    assert lora_b and all(v.isfinite().all() for v in stored.values()) and any(v.abs().sum() > 0 for v in lora_b)


def test_a_recipe_with_an_adapter_names_the_lora_extra_before_lightning_starts(monkeypatch):
    import bertkit.cli
    import bertkit.cli.extras
    from bertkit.cli.extras import check_extras

    real = bertkit.cli.extras.find_spec
    monkeypatch.setattr(bertkit.cli.extras, "find_spec", lambda name: None if name == "peft" else real(name))
    with pytest.raises(
        ImportError,
        match=re.escape(f"{LORA}: model.adapter needs peft, which is not installed: pip install 'bertkit[lora]'"),
    ):
        check_extras(["--config", str(RECIPE), "--config", str(LORA)])
    with pytest.raises(ImportError, match="the command line: model.adapter needs peft"):
        check_extras(["--config", str(RECIPE), "--model.adapter.r=4"])
    check_extras(["--config", str(RECIPE), "--config", str(LORA), "--model.adapter=null"])
    monkeypatch.setattr(bertkit.cli, "run_lightning", lambda args: pytest.fail("Lightning started"))
    assert bertkit.cli.main(["fit", "--config", str(RECIPE), "--config", str(LORA)]) == 2
