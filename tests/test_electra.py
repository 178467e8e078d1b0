"""Encoders as components, shown with ELECTRA (Clark et al. 2020): the encoder family is chosen by
name or by a pretrained directory's ``model_type``; ELECTRA's encoder equals transformers'
``ElectraModel``; replaced-token detection corrupts exactly the masked positions with the
generator's samples, shares the embeddings, learns, exports as ``ElectraForPreTraining`` with
identical logits, and its export fine-tunes NER through the CLI into an
``ElectraForTokenClassification``."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.electra import ElectraConfig, ElectraFamily, ElectraModel, ReplacedTokenDetection
from bertkit_plugins.pretraining import CorpusPreparation, TokenMasking
from bertkit_plugins.token_tagging import TokenClassification

from bertkit import BertDataModule, BertModule
from bertkit.data.collate import pad_batch
from bertkit.model.families import encoder_families, encoder_family, family_of
from tests.conftest import FAST, RECIPE, fit_between_validations, run_bertkit
from tests.test_pretraining_data import corpus_file

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path_factory.getbasetemp() / "bertkit-cache"
    monkeypatch.setenv("BERTKIT_CACHE", str(path))
    return path


def _batch(tokenizer) -> dict:
    encoded = tokenizer.encode_batch(
        ["The cat sat on the mat.", "Rain again, all through the long grey afternoon"], ["It was warm.", "Yes."]
    )
    return pad_batch([{"input_ids": e.input_ids, "token_type_ids": e.token_type_ids} for e in encoded])


def test_registry_lists_both_families_and_chooses_by_model_type(tmp_path: Path, minilm_dir: Path) -> None:
    assert {"bert", "electra"} <= set(encoder_families())
    assert encoder_family("electra") is ElectraFamily
    assert encoder_family("bertkit_plugins.electra.ElectraFamily") is ElectraFamily  # a class path works too
    assert family_of(minilm_dir).name == "bert"
    with pytest.raises(ValueError, match=r"model.encoder='xlnet': no such encoder family; registered: bert, electra, "):
        encoder_family("xlnet")
    ElectraModel(ElectraConfig.preset("tiny", vocab_size=100)).save_pretrained(tmp_path)
    assert family_of(tmp_path) is ElectraFamily
    config = json.loads((tmp_path / "config.json").read_text())
    config["model_type"] = "xlnet"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json: model_type='xlnet': no such encoder family"):
        family_of(tmp_path)
    with pytest.raises(ValueError, match=r"model.encoder='electra', but model.pretrained=.* is a 'bert' model"):
        BertModule(TokenClassification(entity_types=["PER"]), pretrained=str(minilm_dir), encoder="electra")


@pytest.mark.parametrize("unpad", [True, False])
def test_electra_encoder_equals_transformers(tmp_path: Path, minilm_dir: Path, unpad: bool) -> None:
    """transformers' ElectraModel (narrower embeddings + projection) loads into our encoder and
    gives the same hidden states, padded and unpadded; our save loads back into transformers."""
    torch.manual_seed(0)
    config = transformers.ElectraConfig(
        vocab_size=30522, embedding_size=64, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=512, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    hf = transformers.ElectraModel(config).eval()
    hf.save_pretrained(tmp_path / "hf")
    for name in ("tokenizer.json", "vocab.txt"):  # the tokenizer (ELECTRA's is BERT's)
        if (minilm_dir / name).is_file():
            shutil.copy(minilm_dir / name, tmp_path / "hf" / name)
    model = BertModule(TokenClassification(entity_types=["PER"]), pretrained=str(tmp_path / "hf"), unpad=unpad)
    assert model.family is ElectraFamily and model.encoder.embeddings_project is not None
    batch = _batch(model.tokenizer)
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        ours = model.encoder.eval()(**inputs, unpad=unpad).last_hidden_state
        theirs = hf(**inputs).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
    model.encoder.save_pretrained(tmp_path / "ours")
    again = transformers.ElectraModel.from_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        torch.testing.assert_close(again(**inputs).last_hidden_state[real], theirs[real], atol=1e-5, rtol=1e-5)


def _rtd_model(minilm_dir: Path, **head_args) -> BertModule:
    head = ReplacedTokenDetection(**head_args)
    return BertModule(head, pretrained=None, encoder="electra", preset="mini", vocab_file=str(minilm_dir))


def test_generator_corrupts_exactly_the_masked_positions(minilm_dir: Path) -> None:
    torch.manual_seed(0)
    model = _rtd_model(minilm_dir, temperature=3.0)  # a flat sampler: most samples differ from the original
    assert model.head.generator.config.hidden_size == 64  # a quarter of mini's 256
    assert not any(k.startswith("head.generator.embeddings.") for k in model.state_dict())  # shared, listed once
    names = [n for n, _ in model.named_parameters()]
    assert len(names) == len(set(names)) and "encoder.embeddings.word_embeddings.weight" in names
    batch = _batch(model.tokenizer)
    original = batch["input_ids"].clone()
    rng = random.Random(0)
    labels = torch.full_like(original, -100)
    for row, length in enumerate(batch["attention_mask"].sum(-1).tolist()):
        for position in rng.sample(range(1, length - 1), 3):
            labels[row, position] = original[row, position]
            batch["input_ids"][row, position] = model.tokenizer.mask_token_id
    batch["labels"] = labels
    corrupted = model.head.encoder_inputs(batch)
    chosen = labels != -100
    assert torch.equal(corrupted["input_ids"][~chosen], original[~chosen])  # untouched elsewhere
    assert not (corrupted["input_ids"][chosen] == model.tokenizer.mask_token_id).any()  # every [MASK] filled
    assert torch.equal(corrupted["replaced"], corrupted["input_ids"] != original)
    assert 0 < int(corrupted["replaced"].sum()) <= int(chosen.sum())
    assert corrupted["generator_logits"].shape == (int(chosen.sum()), model.tokenizer.vocab_size)
    out = model(batch)
    assert out["loss"].item() == pytest.approx((out["mlm_loss"] + 50.0 * out["rtd_loss"]).item(), rel=1e-5)
    out["loss"].backward()  # the generator learns from its MLM loss, the embeddings from both
    assert model.head.generator.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert model.encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("family", ["roberta", "modernbert"])
def test_rtd_on_another_family_uses_a_generator_of_that_family(tmp_path: Path, minilm_dir: Path, family: str) -> None:
    """A RoBERTa or ModernBERT discriminator gets a generator of its own class, half as wide,
    on its embeddings (listed once) through a projection; the generator and the embeddings learn,
    and the model reloads from its own state dict."""
    corpus_file(tmp_path / "train.txt", random.Random(0), documents=16)
    corpus_file(tmp_path / "valid.txt", random.Random(1), documents=4)
    pl.seed_everything(0)

    def model() -> BertModule:
        head = ReplacedTokenDetection(
            masking=TokenMasking(), preparation=CorpusPreparation(workers=1), generator_size=0.5
        )
        return BertModule(
            head,
            pretrained=None,
            encoder=family,
            preset="tiny",
            vocab_file=str(minilm_dir),
            learning_rate=3e-3,
            max_length=32,
        )

    rtd = model()
    generator = rtd.head.generator
    assert type(generator) is type(rtd.encoder) and generator.config.hidden_size == 64
    assert type(generator.config) is type(rtd.encoder.config)
    names = [n for n, _ in rtd.named_parameters()]
    assert len(names) == len(set(names)) and not any(".generator.embeddings._shared" in n for n in names)
    assert {n for n in names if n.startswith("head.generator.embeddings.")} == {
        "head.generator.embeddings.project.weight", "head.generator.embeddings.project.bias"
    }  # fmt: skip
    data = BertDataModule(data_dir=str(tmp_path), train_file="train.txt", validation_file="valid.txt", batch_size=16)
    embeddings = rtd.encoder.embeddings.word_embeddings.weight.detach().clone()
    before, after = fit_between_validations(rtd, data, max_epochs=2)
    assert after["val/mlm_loss"] < before["val/mlm_loss"] - 1.0  # the generator learns
    assert after["val/rtd_loss"] < before["val/rtd_loss"]
    assert not torch.equal(rtd.encoder.embeddings.word_embeddings.weight, embeddings)
    again = model()
    again.load_state_dict(rtd.state_dict())  # strict: the same keys
    for key, value in rtd.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key


@pytest.mark.system
def test_rtd_learns_and_exports_as_electra_for_pretraining(tmp_path: Path, minilm_dir: Path) -> None:
    corpus_file(tmp_path / "train.txt", random.Random(0), documents=60)
    corpus_file(tmp_path / "valid.txt", random.Random(1), documents=12)
    pl.seed_everything(0)
    head = ReplacedTokenDetection(masking=TokenMasking(), preparation=CorpusPreparation(workers=1))
    model = BertModule(
        head,
        pretrained=None,
        encoder="electra",
        preset="tiny",
        vocab_file=str(minilm_dir),
        learning_rate=1e-3,
        max_length=64,
    )
    data = BertDataModule(data_dir=str(tmp_path), train_file="train.txt", validation_file="valid.txt", batch_size=16)
    before, after = fit_between_validations(model, data, max_epochs=4)
    assert after["val/mlm_loss"] < before["val/mlm_loss"] - 2.0  # the generator learns the 15-word corpus
    assert after["val/rtd_loss"] < before["val/rtd_loss"]
    assert 0.0 <= after["val/replaced_recall"] <= 1.0 and 0.0 <= after["val/replaced_precision"] <= 1.0
    model.save_pretrained(tmp_path / "export")
    assert json.loads((tmp_path / "export" / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    hf, info = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "export", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    batch = _batch(model.tokenizer)
    model.eval()
    with torch.no_grad():
        ours = model(batch)["rtd_logits"]
        theirs = hf.eval()(**{k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}).logits
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_electra_export_fine_tunes_ner_through_the_cli(tmp_path: Path, minilm_dir: Path) -> None:
    """An ELECTRA encoder as ``model.pretrained`` of the NER recipe: it is detected, trained,
    predicts, and exports as transformers' ``ElectraForTokenClassification`` with equal logits."""
    torch.manual_seed(0)
    electra = _rtd_model(minilm_dir)
    electra.save_pretrained(tmp_path / "electra")
    run_bertkit("fit", "--config", str(RECIPE), f"--model.pretrained={tmp_path / 'electra'}", *FAST, cwd=tmp_path)
    run_bertkit(  # the logits as trained: no emission biases fitted for the plain pipeline
        "export", "runs/ner/checkpoints/last.ckpt", "runs/ner/export", "--onnx", "false", "--calibrate", "false",
        cwd=tmp_path,
    )  # fmt: skip
    export = tmp_path / "runs" / "ner" / "export"
    assert json.loads((export / "config.json").read_text())["architectures"] == ["ElectraForTokenClassification"]
    hf = transformers.ElectraForTokenClassification.from_pretrained(export).eval()
    model = BertModule.load_from_checkpoint(
        tmp_path / "runs/ner/checkpoints/last.ckpt", map_location="cpu", weights_only=True
    ).eval()
    assert model.family is ElectraFamily
    batch = _batch(model.tokenizer)
    with torch.no_grad():
        ours = model.encoder(**{k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")})
        logits = model.head.classifier(ours.last_hidden_state)
        theirs = hf(**{k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}).logits
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(logits[real], theirs[real], atol=1e-5, rtol=1e-5)
