"""Pre-training head and recipes: the MLM loss falls, the export is a ``transformers``
``BertForPreTraining`` with identical logits, MiniLM's decoder is tied, masks are dynamic in
training and fixed in evaluation, and the recipes run fit -> predict -> fine-tune via the CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.pretraining import CorpusPreparation, MaskedLM, NgramMasking, PreTraining, WholeWordMasking
from bertkit_plugins.pretraining.prepare import prepare
from bertkit_plugins.pretraining.shards import Shards
from bertkit_plugins.pretraining.task import PreTrainingInstances

from bertkit import BertDataModule, BertModule, compose
from bertkit.data.collate import pad_batch
from tests.conftest import FAST, ROOT, fit_between_validations, run_bertkit
from tests.test_pretraining_data import corpus_file


@pytest.fixture(autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One preparation cache for the session, outside the user's home."""
    path = tmp_path_factory.getbasetemp() / "bertkit-cache"
    monkeypatch.setenv("BERTKIT_CACHE", str(path))
    return path


@pytest.mark.slow
def test_mlm_loss_falls_on_a_tiny_corpus(tmp_path: Path, minilm_dir: Path) -> None:
    corpus_file(tmp_path / "train.txt", random.Random(0), documents=60)
    corpus_file(tmp_path / "valid.txt", random.Random(1), documents=12)
    pl.seed_everything(0)
    head = PreTraining(masking=WholeWordMasking(), dynamic_masking=True, preparation=CorpusPreparation(workers=1))
    model = BertModule(
        head, pretrained=None, preset="tiny", vocab_file=str(minilm_dir), learning_rate=1e-3, max_length=64
    )
    data = BertDataModule(data_dir=str(tmp_path), train_file="train.txt", validation_file="valid.txt", batch_size=16)
    before, after = fit_between_validations(model, data, max_epochs=6)
    assert before["val/mlm_loss"] > 9.0  # about ln(30522) = 10.3 at initialisation
    assert after["val/mlm_loss"] < 5.5  # the corpus has 15 words: ln 15 = 2.7 for a unigram guess
    assert after["val/mlm_accuracy"] > before["val/mlm_accuracy"] + 0.05  # seeds 0-2: 0.0 -> 0.066, 0.133, 0.133
    assert after["val/mlm_perplexity"] == pytest.approx(torch.tensor(after["val/mlm_loss"]).exp().item(), rel=1e-4)
    assert 0.0 <= after["val/nsp_accuracy"] <= 1.0


def test_export_loads_in_transformers_with_identical_logits(tmp_path: Path, minilm_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = BertModule(PreTraining(), pretrained=None, preset="tiny", vocab_file=str(minilm_dir)).eval()
    with torch.no_grad():  # heads away from their zero/one initialisation
        for p in model.head.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(tmp_path / "export")
    hf, info = transformers.BertForPreTraining.from_pretrained(tmp_path / "export", output_loading_info=True)
    hf.eval()
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    assert set(info["missing_keys"]) <= {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    tokenizer = model.tokenizer
    encoded = tokenizer.encode_batch(["The [MASK] sat on the mat.", "A [MASK] [MASK] day"], ["It was [MASK].", "Rain."])
    batch = pad_batch([{"input_ids": e.input_ids, "token_type_ids": e.token_type_ids} for e in encoded])
    with torch.no_grad():
        ours = model(batch)
        theirs = hf(**{k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")})
    chosen = batch["input_ids"] == tokenizer.mask_token_id
    assert int(chosen.sum()) == 4 and ours["mlm_logits"].shape == (4, tokenizer.vocab_size)  # only masked positions
    torch.testing.assert_close(ours["mlm_logits"], theirs.prediction_logits[chosen], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours["sentence_logits"], theirs.seq_relationship_logits, atol=1e-5, rtol=1e-5)
    # and the export is a `pretrained` directory for fine-tuning (cls.* tensors left to heads)
    again = BertModule(PreTraining(), pretrained=str(tmp_path / "export"))
    torch.testing.assert_close(again.encoder.state_dict(), model.encoder.state_dict())


def test_masked_lm_head_alone_exports_as_bert_for_masked_lm(tmp_path: Path, minilm_dir: Path) -> None:
    """MLM without a sentence task is its own head; PreTraining is that head plus NSP/SOP."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = BertModule(MaskedLM(), pretrained=None, preset="tiny", vocab_file=str(minilm_dir)).eval()
    with torch.no_grad():
        for p in model.head.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    assert {k.split(".")[0] for k in model.head.state_dict()} == {"predictions"}  # no NSP/SOP layer
    model.save_pretrained(tmp_path / "export")
    assert json.loads((tmp_path / "export" / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    hf = transformers.BertForMaskedLM.from_pretrained(tmp_path / "export").eval()
    encoded = model.tokenizer.encode_batch(["The [MASK] sat on the mat.", "A [MASK] day"])
    batch = pad_batch([{"input_ids": e.input_ids, "token_type_ids": e.token_type_ids} for e in encoded])
    with torch.no_grad():
        ours = model(batch)["mlm_logits"]
        theirs = hf(**{k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}).logits
    chosen = batch["input_ids"] == model.tokenizer.mask_token_id
    torch.testing.assert_close(ours, theirs[chosen], atol=1e-5, rtol=1e-5)
    both = PreTraining(sentence_task="sop")
    assert isinstance(both, MaskedLM) and both.spec()["init_args"]["sentence_task"] == "sop"
    with pytest.raises(ValueError, match="model.task.sentence_task='none': expected one of nsp, sop"):
        PreTraining(sentence_task="none")


def test_continued_pretraining_ties_the_decoder_to_minilm_embeddings() -> None:
    model = BertModule(PreTraining(sentence_task="sop"), pretrained="all-MiniLM-L6-v2")
    embedding = model.encoder.embeddings.word_embeddings.weight
    names = [n for n, _ in model.named_parameters()]
    assert sum(p is embedding for _, p in model.named_parameters()) == 1 and "head.predictions.bias" in names
    assert sorted(k for k in model.head.state_dict() if "metrics" not in k) == [
        "predictions.bias",
        "predictions.transform.LayerNorm.bias",
        "predictions.transform.LayerNorm.weight",
        "predictions.transform.dense.bias",
        "predictions.transform.dense.weight",
        "seq_relationship.bias",
        "seq_relationship.weight",
    ]
    batch = {
        "input_ids": torch.tensor([[101, 103, 2003, 102, 2023, 102]]),
        "token_type_ids": torch.tensor([[0, 0, 0, 0, 1, 1]]),
        "attention_mask": torch.ones(1, 6, dtype=torch.long),
        "labels": torch.tensor([[-100, 4937, -100, -100, -100, -100]]),
        "next_sentence_label": torch.tensor([1]),
    }
    out = model(batch)
    assert set(out) >= {"loss", "mlm_loss", "sop_loss"} and torch.allclose(
        out["loss"], out["mlm_loss"] + out["sop_loss"]
    )
    out["mlm_loss"].backward()
    assert embedding.grad is not None and embedding.grad[4937].abs().sum() > 0  # the tied decoder learns too
    nothing = model({**batch, "labels": torch.full_like(batch["labels"], -100)})  # no position to predict
    assert nothing["mlm_loss"].item() == 0.0 and torch.isfinite(nothing["loss"])


def test_dynamic_masks_change_in_training_and_stay_fixed_in_evaluation(tmp_path: Path, minilm_dir: Path) -> None:
    corpus = corpus_file(tmp_path / "c.txt", random.Random(0), documents=10)
    (directory,) = prepare(
        str(corpus), str(tmp_path / "p"), vocab=str(minilm_dir), max_seq_length=48, workers=1
    ).values()
    model = BertModule(PreTraining(masking=NgramMasking()), pretrained="all-MiniLM-L6-v2")
    data = model.task.featurize(model.task.read(directory), model.tokenizer, 48)
    assert isinstance(data, PreTrainingInstances) and len(data) == len(Shards(directory))
    draws = [data[(epoch, 0)]["labels"] for epoch in range(5)]
    assert len({tuple(d) for d in draws}) > 1  # new masks each epoch …
    assert data[(2, 0)] == data[(2, 0)]  # … drawn from (seed, epoch, index): the same in any process or resume
    data.for_training(True, seed=1)
    assert [data[(epoch, 0)]["labels"] for epoch in range(5)] != draws  # and from data.seed
    data.training = False
    assert data[0] == data[0] and data[3] == data[3]
    item = data[3]
    chosen = [i for i, label in enumerate(item["labels"]) if label != -100]
    assert chosen and all(item["token_type_ids"][i] in (0, 1) for i in chosen)
    assert item["next_sentence_label"] in (0, 1) and len(item["input_ids"]) <= 48


def test_static_masking_needs_static_shards(tmp_path: Path, minilm_dir: Path) -> None:
    corpus = corpus_file(tmp_path / "c.txt", random.Random(0), documents=6)
    (directory,) = prepare(
        str(corpus), str(tmp_path / "p"), vocab=str(minilm_dir), max_seq_length=48, workers=1
    ).values()
    model = BertModule(PreTraining(dynamic_masking=False), pretrained="all-MiniLM-L6-v2")
    with pytest.raises(ValueError, match="no static masks"):
        model.task.featurize(model.task.read(directory), model.tokenizer, 48)
    with pytest.raises(ValueError, match="sentence_task is 'nsp', but this model needs 'sop'"):
        model = BertModule(PreTraining(sentence_task="sop"), pretrained="all-MiniLM-L6-v2")
        model.task.featurize(model.task.read(directory), model.tokenizer, 48)


@pytest.mark.system
def test_recipes_fit_predict_and_fine_tune_from_the_export(tmp_path: Path, cache: Path) -> None:
    env = {"BERTKIT_CACHE": str(cache)}
    quick = [
        "--model.preset=tiny",
        "--trainer.max_steps=4",
        "--trainer.val_check_interval=2",
        "--trainer.limit_val_batches=2",
    ]
    recipe = str(ROOT / "recipes" / "pretrain_bert.yaml")
    run_bertkit("fit", "--config", recipe, *quick, cwd=tmp_path, env=env)
    export = tmp_path / "runs" / "pretrain_bert" / "export"
    config = json.loads((export / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"] and config["num_hidden_layers"] == 2
    (tmp_path / "masks.txt").write_text("The capital of France is [MASK].\n\nA [MASK] [MASK] day.\n")
    run_bertkit(
        "predict", "--config", recipe, "--model.preset=tiny", "--data.predict_file=masks.txt", "--ckpt_path=last",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    records = [
        json.loads(line) for line in (tmp_path / "runs/pretrain_bert/predictions.jsonl").read_text().splitlines()
    ]
    assert [len(r["masks"]) for r in records] == [1, 2]
    for record in records:
        for mask in record["masks"]:
            probabilities = [c["probability"] for c in mask["candidates"]]
            assert len(probabilities) == 5 and probabilities == sorted(probabilities, reverse=True)
        assert "[MASK]" not in record["filled"]
    # a fine-tuning recipe starts from the export (its cls.* tensors are left aside)
    run_bertkit(
        "fit", "--config", str(ROOT / "recipes" / "ner.yaml"), *FAST, f"--model.pretrained={export}", cwd=tmp_path
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overlay", "masking", "task"),
    [
        pytest.param("pretrain_wwm.yaml", WholeWordMasking, "nsp", marks=pytest.mark.system),
        ("pretrain_sop.yaml", NgramMasking, "sop"),
    ],
)
def test_overlay_recipes_compose_and_train(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overlay, masking, task
) -> None:
    monkeypatch.chdir(tmp_path)
    recipes = ROOT / "recipes"
    overrides = {
        "model.preset": "tiny", "trainer.max_steps": 2, "trainer.limit_val_batches": 1, "trainer.val_check_interval": 2,
        "trainer.enable_progress_bar": False, "trainer.logger": False,
    }  # fmt: skip
    run = compose(recipes / "pretrain_bert.yaml", recipes / overlay, overrides=overrides)
    assert isinstance(run.model.task.masking, masking) and run.model.task.hparams.sentence_task == task
    run.trainer.fit(run.model, datamodule=run.datamodule)
    assert run.trainer.global_step == 2
    reloaded = BertModule.load_from_checkpoint(run.trainer.checkpoint_callback.last_model_path, weights_only=True)
    assert isinstance(reloaded.task.masking, masking)
    assert reloaded.task.masking.spec() == run.model.task.masking.spec()


@pytest.mark.system
def test_modernbert_overlay_pretrains_a_modernbert_with_30_percent_masking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bertkit_plugins.modernbert import ModernBertFamily
    from bertkit_plugins.pretraining import MaskedLM

    monkeypatch.chdir(tmp_path)
    recipes = ROOT / "recipes"
    overrides = {
        "model.preset": "tiny", "trainer.max_steps": 2, "trainer.limit_val_batches": 1, "trainer.val_check_interval": 2,
        "trainer.enable_progress_bar": False, "trainer.logger": False,
    }  # fmt: skip
    run = compose(recipes / "pretrain_bert.yaml", recipes / "pretrain_modernbert.yaml", overrides=overrides)
    assert run.model.family is ModernBertFamily and type(run.model.task) is MaskedLM
    assert run.model.task.masking.masked_lm_prob == 0.3
    run.trainer.fit(run.model, datamodule=run.datamodule)
    assert run.trainer.global_step == 2
    reloaded = BertModule.load_from_checkpoint(run.trainer.checkpoint_callback.last_model_path, weights_only=True)
    assert reloaded.family is ModernBertFamily


def test_continue_recipe_starts_from_minilm() -> None:
    recipes = ROOT / "recipes"
    run = compose(
        recipes / "pretrain_bert.yaml", recipes / "pretrain_continue.yaml", overrides={"trainer.logger": False}
    )
    assert run.model.encoder.config.num_hidden_layers == 6 and run.model.encoder.config.hidden_size == 384
    assert isinstance(run.model.task.masking, WholeWordMasking) and run.model.task.hparams.dynamic_masking
