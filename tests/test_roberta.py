"""The RoBERTa and XLM-RoBERTa families: from the same random weights bertkit's encoder equals
transformers' ``RobertaModel`` / ``XLMRobertaModel`` (padded and unpadded, sentences and pairs,
their own tokenizers trained here), every fine-tuning head exports to the family's transformers
class with equal logits, and a RoBERTa directory fine-tunes NER through the CLI with entity
offsets on the words' characters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from bertkit_plugins.roberta import RobertaFamily, XLMRobertaFamily

from bertkit import BertModule
from bertkit.model.families import family_of
from tests import trained_tokenizers
from tests.conftest import FAST, RECIPE, ROOT, run_bertkit
from tests.family_parity import HEADS, batch, check_export, docs_text

transformers = pytest.importorskip("transformers")

MODELS = {
    "roberta": ("roberta", "RobertaConfig", "RobertaModel", RobertaFamily),
    "xlm-roberta": ("xlm-roberta", "XLMRobertaConfig", "XLMRobertaModel", XLMRobertaFamily),
}


def hf_directory(kind: str, directory: Path, seed: int = 0) -> Path:
    """A transformers-format directory of a small random ``kind`` model with a tokenizer trained here."""
    tokenizer_kind, config_name, model_name, _ = MODELS[kind]
    tokenizer = trained_tokenizers.train(tokenizer_kind, docs_text(), vocab_size=1500)
    pad = tokenizer.token_to_id("<pad>")
    config = getattr(transformers, config_name)(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=512 + pad + 1, pad_token_id=pad, type_vocab_size=1,
    )  # fmt: skip
    torch.manual_seed(seed)
    getattr(transformers, model_name)(config).save_pretrained(directory)
    trained_tokenizers.save(tokenizer, directory)
    return directory


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_encoder_equals_transformers(kind: str, unpad: bool, tmp_path: Path) -> None:
    directory = hf_directory(kind, tmp_path)
    family = family_of(directory)
    assert family is MODELS[kind][3]
    encoder, tokenizer = family.from_pretrained(directory)
    hf = getattr(transformers, MODELS[kind][2]).from_pretrained(directory, attn_implementation="eager").eval()
    derived = {"embeddings.position_ids", "embeddings.token_type_ids"}
    assert set(encoder.state_dict()) == set(hf.state_dict()) - derived
    encoder.eval()
    for pairs in (False, True):
        inputs = batch(tokenizer, pairs)
        assert int(inputs["input_ids"][0, 0]) == tokenizer.cls_token_id == hf.config.bos_token_id
        with torch.no_grad():
            ours = encoder(**inputs, unpad=unpad)
            theirs = hf(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        real = inputs["attention_mask"].bool()
        worst = (ours.last_hidden_state - theirs.last_hidden_state)[real].abs().max()
        assert worst <= 1e-5, worst
        torch.testing.assert_close(ours.pooler_output, theirs.pooler_output, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", list(HEADS))
@pytest.mark.parametrize("kind", list(MODELS))
def test_every_head_exports_to_the_family_class(kind: str, head: str, tmp_path: Path) -> None:
    make, task = HEADS[head]
    model = BertModule(make(), pretrained=str(hf_directory(kind, tmp_path / "base"))).eval()
    with torch.no_grad():  # fresh heads start at zero bias: make every tensor count
        for p in model.head.parameters():
            p.normal_(0, 0.5)
    check_export(model, head, MODELS[kind][2].removesuffix("Model") + task, tmp_path / "export")


def test_roberta_directory_fine_tunes_ner_through_the_cli(tmp_path: Path) -> None:
    """``model.pretrained`` a RoBERTa directory: detected by ``model_type``, NER trains on
    byte-level BPE pieces, and predicted entities' offsets are the words' characters."""
    directory = hf_directory("roberta", tmp_path / "roberta")
    overlay = ROOT / "recipes" / "roberta.yaml"
    run_bertkit(
        "fit", "--config", str(RECIPE), "--config", str(overlay), f"--model.pretrained={directory}", *FAST, cwd=tmp_path
    )  # fmt: skip
    text = tmp_path / "news.txt"
    text.write_text("Peter Blackburn flew to Oslo .\nThe  European Union met in Brussels .\n", encoding="utf-8")
    run_bertkit(
        "predict", "--config", str(RECIPE), "--ckpt_path", "runs/ner/checkpoints/last.ckpt",
        f"--data.predict_file={text}", cwd=tmp_path,
    )  # fmt: skip
    model = BertModule.load_from_checkpoint(tmp_path / "runs/ner/checkpoints/last.ckpt", weights_only=True)
    assert model.family is RobertaFamily and model.tokenizer.cls_token_id == model.tokenizer.backend.token_to_id("<s>")
    assert model.hparams.adam_betas == (0.9, 0.98) and model.hparams.weight_decay == 0.1
    records = [json.loads(line) for line in (tmp_path / "runs/ner/predictions.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        for entity in record["entities"]:
            assert entity["text"] == record["text"][entity["start"] : entity["end"]]
            assert entity["text"] == entity["text"].strip() and entity["text"]


def test_pretraining_instances_take_the_roberta_template(tmp_path: Path) -> None:
    """Prepared from a RoBERTa tokenizer, every instance is ``<s> A </s></s> B </s>`` within
    max_seq_length, and dynamic masks never choose a special token."""
    import random

    from bertkit_plugins.pretraining import TokenMasking
    from bertkit_plugins.pretraining.prepare import prepare
    from bertkit_plugins.pretraining.shards import Shards
    from bertkit_plugins.pretraining.task import MaskInstance, PreTrainingInstances

    from bertkit.model.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(hf_directory("roberta", tmp_path / "model"))
    lines = [line for line in docs_text() if "<" not in line]  # the docs write out <s> and </s>
    (tmp_path / "corpus.txt").write_text("\n\n".join("\n".join(lines[i : i + 6]) for i in range(0, 600, 6)) + "\n")
    paths = prepare(
        str(tmp_path / "corpus.txt"),
        str(tmp_path / "shards"),
        tokenizer,
        max_seq_length=48,
        sentence_task="none",
        workers=1,
    )
    shards = Shards(paths["train"])
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    assert len(shards) > 50
    for i in range(len(shards)):
        ids = shards[i]["input_ids"].tolist()
        first = ids.index(sep)
        assert len(ids) <= 48 and ids[0] == cls and ids[first + 1] == sep and ids[-1] == sep
        a, b = ids[1:first], ids[first + 2 : -1]
        assert a and b and ids == tokenizer.build_inputs(a, b).input_ids
    masking = TokenMasking(masked_lm_prob=0.5, max_predictions_per_seq=40)
    instances = PreTrainingInstances(shards, MaskInstance(tokenizer, masking, dynamic=True))
    random.seed(0)
    for i in range(len(shards)):
        item = instances[i]
        original = shards[i]["input_ids"].tolist()
        chosen = [p for p, label in enumerate(item["labels"]) if label != -100]
        assert chosen and not {original[p] for p in chosen} & {cls, sep}
