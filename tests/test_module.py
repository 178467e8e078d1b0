"""BertModule: BERT's optimiser groups and schedule, a fresh preset encoder, hyper-parameters."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from bertkit_plugins.token_tagging import TokenClassification

from bertkit import BertModule


@pytest.fixture
def tiny(minilm_dir) -> BertModule:
    return BertModule(
        TokenClassification(["PER"]), pretrained=None, preset="tiny", vocab_file=str(minilm_dir / "vocab.txt")
    )


def test_fresh_preset_encoder(tiny):
    assert tiny.encoder.config.num_hidden_layers == 2 and tiny.encoder.config.vocab_size == tiny.tokenizer.vocab_size
    assert tiny.hparams["task"] == {
        "class_path": "bertkit_plugins.token_tagging.task.TokenClassification",
        "init_args": dict(TokenClassification(["PER"]).hparams),
    }


def test_weight_decay_groups_and_linear_schedule(tiny):
    class Stub:
        estimated_stepping_batches = 100

    tiny._trainer = Stub()  # only estimated_stepping_batches is read
    config = tiny.configure_optimizers()
    decay, plain = config["optimizer"].param_groups
    names = {id(p): n for n, p in tiny.named_parameters() if not n.startswith("encoder.pooler.")}
    assert not any(p.requires_grad for p in tiny.encoder.pooler.parameters())  # a tagger does not read it
    assert decay["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    # google-research/bert's rule by name: every bias and LayerNorm parameter, nothing else, is exempt
    exempt = {n for n in names.values() if n.endswith(".bias") or "LayerNorm" in n}
    assert {names[id(p)] for p in plain["params"]} == exempt
    assert {names[id(p)] for p in decay["params"]} == set(names.values()) - exempt
    schedule = config["lr_scheduler"]["scheduler"]
    lrs = []
    for _ in range(100):
        lrs.append(schedule.get_last_lr()[0])
        config["optimizer"].step(), schedule.step()
    peak = max(lrs)
    assert lrs[0] == 0 and lrs.index(peak) == 10 and peak == pytest.approx(5e-5)  # 10 % warm-up
    assert lrs[55] == pytest.approx(5e-5 * 45 / 90) and lrs[-1] == pytest.approx(5e-5 / 90)


def test_bad_settings_are_named(minilm_dir):
    with pytest.raises(ValueError, match="warmup_ratio"):
        BertModule(TokenClassification(["PER"]), warmup_ratio=1.5)
    with pytest.raises(ValueError, match="preset and vocab_file"):
        BertModule(TokenClassification(["PER"]), pretrained=None)
    with pytest.raises(FileNotFoundError, match="registered: all-MiniLM-L6-v2"):
        BertModule(TokenClassification(["PER"]), pretrained="bert-base-uncased")


def test_training_step_reduces_loss_on_a_batch(tiny):
    from bertkit_plugins.token_tagging.conll import Sentence

    from bertkit.data.collate import pad_batch

    pl.seed_everything(0)
    sentences = [Sentence(["Marta", "met", "Tomas"], ["B-PER", "O", "B-PER"], "mem:1", [1, 2, 3])] * 4
    batch = pad_batch(tiny.task.featurize(sentences, tiny.tokenizer, 16), tiny.tokenizer.pad_token_id)
    optimizer = torch.optim.AdamW(tiny.parameters(), lr=1e-3)
    losses = []
    for _ in range(20):
        loss = tiny(batch)["loss"]
        optimizer.zero_grad(), loss.backward(), optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_every_head_gives_the_same_outputs_unpadded_and_padded(minilm_dir):
    """Classification (cls and mean pooling), QA spans and MLM read the packed encoder output
    through ``EncoderOutput.map_tokens``/``select``/the pooler: same outputs as the padded path."""
    from bertkit_plugins.pretraining import PreTraining
    from bertkit_plugins.question_answering import QuestionAnswering
    from bertkit_plugins.sequence_classification import SequenceClassification

    from bertkit.data.collate import pad_batch

    vocab = str(minilm_dir / "vocab.txt")
    heads = {
        "cls": lambda: SequenceClassification(labels=["a", "b"]),
        "mean": lambda: SequenceClassification(labels=["a", "b"], pooling="mean"),
        "qa": QuestionAnswering,
        "mlm": PreTraining,
    }
    pl.seed_everything(0)
    texts = ["A short one .", "A somewhat longer sentence about [MASK] in Rome .", "[MASK] ok"]
    for name, make in heads.items():
        torch.manual_seed(0)
        model = BertModule(make(), pretrained=None, preset="tiny", vocab_file=vocab).eval()
        encodings = model.tokenizer.encode_batch(texts, max_length=32)
        batch = pad_batch(
            [{"input_ids": e.input_ids, "token_type_ids": e.token_type_ids} for e in encodings],
            model.tokenizer.pad_token_id,
        )
        mask = batch["attention_mask"].bool()
        outputs = []
        for unpad in (True, False):
            model.hparams.unpad = unpad
            with torch.no_grad():
                outputs.append(model(batch))
        for key, value in outputs[0].items():
            other = outputs[1][key]
            if value.shape[:2] == mask.shape and value.dtype.is_floating_point:  # per-token: real tokens only
                value, other = value[mask], other[mask]
            assert torch.allclose(value.float(), other.float(), atol=1e-5), (name, key)


@pytest.mark.system  # inductor compiles the blocks: a toolchain run
def test_compiled_blocks_give_the_same_outputs_and_keys(minilm_dir):
    """``compile=True`` compiles each block in place (torch.compile, dynamic shapes): state-dict
    keys unchanged, outputs equal to eager on the CPU."""
    from bertkit_plugins.token_tagging.conll import Sentence

    from bertkit.data.collate import pad_batch

    vocab = str(minilm_dir / "vocab.txt")
    sentences = [Sentence(["Ana", "met", "Bo"], ["B-PER", "O", "B-PER"], "m:1", [1] * 3),
                 Sentence(["Hi", "there", "you", "all", "."], ["O"] * 5, "m:2", [2] * 5)]  # fmt: skip
    logits = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = BertModule(
            TokenClassification(["PER"]), pretrained=None, preset="tiny", vocab_file=vocab, compile=compiled
        )
        batch = pad_batch(model.task.featurize(sentences, model.tokenizer, 16), model.tokenizer.pad_token_id)
        with torch.no_grad():
            logits.append(model.eval()(batch)["logits"])
        keys = set(model.state_dict())
    assert not any("_orig_mod" in k for k in keys)
    assert torch.allclose(logits[0], logits[1], atol=1e-5)
