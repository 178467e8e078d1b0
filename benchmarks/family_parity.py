"""Parity of every encoder family with transformers, as a table: from the same random weights
(small models with tokenizers trained on the project's docs, as the tests build them), the largest
absolute difference of bertkit's outputs from transformers' (eager attention, fp32) at the real
tokens of real sentences and pairs — the encoder on its padded and unpadded paths, and each head's
export loaded in the family's transformers class. The tests assert the same bounds; this records
the values.

    python benchmarks/family_parity.py     # writes benchmarks/results/family_parity.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import transformers  # noqa: E402
from provenance import header, started  # noqa: E402

from bertkit import BertModule  # noqa: E402
from bertkit.model.families import family_of  # noqa: E402
from tests import test_modernbert, test_roberta  # noqa: E402
from tests.family_parity import HEADS, batch, check_export  # noqa: E402


def encoder_rows(family: str, directory: Path, model_class: str) -> list[dict]:
    """Max |diff| of the last hidden state (ModernBERT: the final norm's output, which is
    ``ModernBertModel``'s) per path, over sentences and pairs."""
    encoder, tokenizer = family_of(directory).from_pretrained(directory)
    hf = getattr(transformers, model_class).from_pretrained(directory, attn_implementation="eager").eval()
    rows = []
    for unpad in (False, True):
        worst = 0.0
        for pairs in (False, True):
            inputs = batch(tokenizer, pairs)
            with torch.no_grad():
                ours = encoder.eval()(**inputs, unpad=unpad, output_hidden_states=True)
                theirs = hf(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).last_hidden_state
            mine = ours.hidden_states[-1] if family == "modernbert" else ours.last_hidden_state
            worst = max(worst, float((mine - theirs)[inputs["attention_mask"].bool()].abs().max()))
        rows.append({"family": family, "path": "unpadded" if unpad else "padded", "max_abs_diff": worst})
    return rows


def head_rows(family: str, directory: Path, prefix: str, tmp: Path) -> list[dict]:
    rows = []
    for head, (make, task) in HEADS.items():
        torch.manual_seed(0)
        model = BertModule(make(), pretrained=str(directory)).eval()
        extra = getattr(model.encoder, "head", None)  # ModernBERT's prediction head
        with torch.no_grad():  # fresh task layers start at zero bias: make every tensor count
            for p in [*model.head.parameters(), *(extra.parameters() if extra is not None else [])]:
                p.normal_(0, 0.5)
        worst = check_export(model, head, prefix + task, tmp / f"{family}-{head}")
        rows.append({"family": family, "head": head, "architecture": prefix + task, "max_abs_diff": worst})
    return rows


def main() -> None:
    run = started("family_parity.py")
    encoders, heads = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for kind, (_, _, model_class, _) in test_roberta.MODELS.items():
            directory = test_roberta.hf_directory(kind, tmp / kind)
            encoders += encoder_rows(kind, directory, model_class)
            heads += head_rows(kind, directory, model_class.removesuffix("Model"), tmp)
        directory = test_modernbert.hf_directory(tmp / "modernbert")
        encoders += encoder_rows("modernbert", directory, "ModernBertModel")
        heads += head_rows("modernbert", directory, "ModernBert", tmp)
    result = {
        **header("family_parity", run["command"], run["commit"], transformers=transformers.__version__),
        "settings": {"dtype": "float32", "attention": "eager (transformers)"},
        "encoders": encoders,
        "heads": heads,
    }
    out = ROOT / "benchmarks" / "results" / "family_parity.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for row in encoders + heads:
        print(row)


if __name__ == "__main__":
    main()
