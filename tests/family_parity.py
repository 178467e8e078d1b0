"""What the encoder-family tests share: real sentences and pairs, a corpus to train tokenizers on,
the fine-tuning heads, and the check that an export loads in transformers with bertkit's logits."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import torch
from bertkit_plugins.pretraining import MaskedLM
from bertkit_plugins.question_answering import QuestionAnswering
from bertkit_plugins.sequence_classification import SequenceClassification
from bertkit_plugins.token_tagging import TokenClassification

from bertkit import BertModule
from bertkit.data.collate import pad_batch
from tests.conftest import ROOT

SENTENCES = [
    "Peter Blackburn flew to Oslo on Tuesday.",
    "EU rejects German call to boycott British lamb .",
    "Fine.",
    "  Spaces  around, and a naïve café in Zürich!",
]
PAIRS = [("Who flew to Oslo?", "Peter Blackburn flew to Oslo on Tuesday."), ("Why?", "Because it rained all week.")]
HEADS = {  # a fresh head and the task part of transformers' class name
    "token": (lambda: TokenClassification(entity_types=["PER", "LOC"]), "ForTokenClassification"),
    "sequence": (lambda: SequenceClassification(labels=["neg", "neu", "pos"]), "ForSequenceClassification"),
    "qa": (QuestionAnswering, "ForQuestionAnswering"),
    "mlm": (MaskedLM, "ForMaskedLM"),  # its decoder tied to the word embeddings
}


@cache
def docs_text() -> list[str]:
    """Real English to train the tokenizers on: the project's own documentation."""
    lines = []
    for path in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        lines += [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines


def batch(tokenizer, pairs: bool) -> dict[str, torch.Tensor]:
    encoded = tokenizer.encode_batch(*zip(*PAIRS, strict=True)) if pairs else tokenizer.encode_batch(SENTENCES)
    features = [{"input_ids": e.input_ids, "token_type_ids": e.token_type_ids} for e in encoded]
    return pad_batch(features, pad_token_id=tokenizer.pad_token_id)


def check_export(model: BertModule, head: str, architecture: str, directory: Path) -> float:
    """``model`` (its task layers randomised by the caller) exports to ``architecture``, which
    loads without missing or unexpected keys and gives bertkit's logits at the real tokens;
    returns the largest absolute difference."""
    import transformers

    inputs = batch(model.tokenizer, pairs=head == "qa")
    if head == "mlm":  # one token to predict per sequence
        inputs["labels"] = torch.full_like(inputs["input_ids"], -100)
        inputs["labels"][:, 2] = inputs["input_ids"][:, 2]
        inputs["input_ids"][:, 2] = model.tokenizer.mask_token_id
    with torch.no_grad():
        ours = model(inputs)
    model.save_pretrained(directory)
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == [architecture]
    for field, role in model.family.hf_token_roles.items():  # the export's own vocabulary's ids
        assert config[field] == getattr(model.tokenizer, f"{role}_token_id"), field
    hf, info = getattr(transformers, architecture).from_pretrained(
        directory, output_loading_info=True, attn_implementation="eager"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        segments = {"token_type_ids": inputs["token_type_ids"]} if getattr(hf.config, "type_vocab_size", 1) > 1 else {}
        theirs = hf.eval()(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], **segments)
    real = inputs["attention_mask"].bool()
    # (bertkit, transformers) logits at the real tokens
    if head == "qa":
        pairs = [(ours[k][real], theirs[k][real]) for k in ("start_logits", "end_logits")]
    elif head == "mlm":  # (B, V) at the masked positions
        pairs = [(ours["mlm_logits"], theirs.logits[:, 2])]
    elif head == "token":
        pairs = [(ours["logits"][real], theirs.logits[real])]
    else:
        pairs = [(ours["logits"], theirs.logits)]
    for mine, reference in pairs:
        torch.testing.assert_close(mine, reference, atol=1e-4 if head == "mlm" else 1e-5, rtol=1e-4)
    return max(float((mine - reference).abs().max()) for mine, reference in pairs)
