"""Share of padding in the training batches of SST-2, MRPC and RTE: random order (transformers'
``Trainer``) vs bertkit's length-grouped order. Batch 32, max length 128, tokenizer of all-MiniLM-L6-v2.

    python benchmarks/padding.py
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import common
from bertkit_plugins.pretrained import locate_minilm
from bertkit_plugins.sequence_classification.readers import read_jsonl, read_table

from bertkit.data.samplers import LengthGroupedSampler
from bertkit.model.tokenizer import BertTokenizer

BATCH = 32


def padding_share(lengths: list[int], order: list[int]) -> float:
    """Padding tokens / computed tokens when batches of ``BATCH`` follow ``order``."""
    batches = [order[k : k + BATCH] for k in range(0, len(order), BATCH)]
    computed = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return 1 - sum(lengths) / computed


def main() -> None:
    data = Path(os.environ.get("BERTKIT_DATA_DIR", common.ROOT.parent / "shared" / "data"))
    tokenizer = BertTokenizer.from_pretrained(locate_minilm())
    sets = {
        "sst2": read_table(data / "classification/sst2/train.tsv", "sentence", None, "label"),
        "mrpc": read_table(
            data / "pair/mrpc/msr_paraphrase_train.txt", "#1 String", "#2 String", "Quality", quoting="none"
        ),
        "rte": read_jsonl(data / "pair/rte/train.jsonl", "sentence1", "sentence2", "label"),
    }
    for name, examples in sets.items():
        pairs = [e.text_pair for e in examples] if examples[0].text_pair is not None else None
        lengths = [len(e.input_ids) for e in tokenizer.encode_batch([e.text for e in examples], pairs, 128)]
        shuffled = list(range(len(lengths)))
        random.Random(0).shuffle(shuffled)
        grouped = list(LengthGroupedSampler(lengths, BATCH, seed=42))
        print(f"{name}: padding {padding_share(lengths, shuffled):.1%} of computed tokens in random batches, "
              f"{padding_share(lengths, grouped):.1%} in length-grouped batches")  # fmt: skip


if __name__ == "__main__":
    main()
