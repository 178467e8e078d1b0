"""Attention of the unpadded encoder on the CPU: which exact route, and what random batch order
costs with it. MiniLM (all-MiniLM-L6-v2), batches of 32 from the real data.

    python benchmarks/attention_routes.py                 # writes benchmarks/results/attention_routes.json
    python benchmarks/attention_routes.py --tasks ner --steps 4

1. ``attention``: one attention layer, forward and backward with dropout 0.1 (training), on the
   packed queries, keys and values of random batches (12 heads of 32), per route: ``padded``
   (re-pad to the batch's longest sequence, one SDPA with the key-padding mask), ``grouped``
   (bertkit's CPU route: sequences sorted by length and cut into groups whose padding adds at most
   ``GROUP_PADDING`` of their attention work, one padded SDPA each), ``per_sequence`` (one SDPA per
   run of equal lengths) and ``jagged`` (SDPA over nested jagged tensors). Median milliseconds over
   ``--batches`` batches. ``padded`` and ``grouped`` are bertkit's (attention with dropout as SDPA's
   math with ``bertkit.model.dropout`` on the CPU); ``per_sequence`` and ``jagged`` use SDPA's own dropout.
2. ``steps``: whole training steps (forward, backward, AdamW) of the recipe's model on the same
   ``steps * 32`` examples (AdamW fused, as ``bertkit fit`` runs it) in random order and in length-grouped order
   (``LengthGroupedSampler``, as ``data.group_by_length``), with the ``padded`` route (the CPU
   path before length groups) and ``grouped``: real (non-padding) tokens per second over all
   ``--steps`` steps, after one untimed warm-up step on other examples.

Data (``--data-dir``, default ``$BERTKIT_DATA_DIR`` or ``../shared/data``): CoNLL-2003 eng.train,
SST-2 train.tsv, SQuAD v1.1 dev-v1.1.json (windows of 384, doc_stride 128).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from common import ROOT, write_result
from gpu_vs_transformers import make_head
from provenance import header, started

import bertkit.model.unpadded
from bertkit import BertModule
from bertkit.data.collate import pad_batch
from bertkit.data.samplers import LengthGroupedSampler
from bertkit.model.unpadded import Unpadded, grouped_attention, padded_attention

FILES = {
    "ner": ("ner/conll2003/eng.train", 128),
    "sst2": ("classification/sst2/train.tsv", 128),
    "squad": ("qa/squad/dev-v1.1.json", 384),
}
BATCH, HEADS, HEAD_SIZE, DROPOUT = 32, 12, 32, 0.1


def per_sequence_attention(q, k, v, layout: Unpadded, dropout_p: float) -> torch.Tensor:
    """One SDPA per run of consecutive sequences of equal length, on views of the packed rows."""
    A, D = k.shape[1:]
    runs: list[list[int]] = []  # [first sequence, count, length]
    for b, n in enumerate(layout.lengths):
        if runs and runs[-1][2] == n:
            runs[-1][1] += 1
        else:
            runs.append([b, 1, n])
    out = []
    for first, count, length in runs:
        rows = slice(layout.offsets[first], layout.offsets[first + count])
        qb, kb, vb = (t[rows].view(count, length, A, D).transpose(1, 2) for t in (q, k, v))
        out.append(F.scaled_dot_product_attention(qb, kb, vb, dropout_p=dropout_p).transpose(1, 2).reshape(-1, A, D))
    return torch.cat(out)


def jagged_attention(q, k, v, layout: Unpadded, dropout_p: float) -> torch.Tensor:
    offsets = layout.cu_seqlens.long()
    nested = [torch.nested.nested_tensor_from_jagged(t.contiguous(), offsets).transpose(1, 2) for t in (q, k, v)]
    return F.scaled_dot_product_attention(*nested, dropout_p=dropout_p).transpose(1, 2).values()


ROUTES = {
    "padded": lambda q, k, v, lay, p: padded_attention(q, k, v, lay, p, False, None),
    "per_sequence": per_sequence_attention,
    "grouped": lambda q, k, v, lay, p: grouped_attention(q, k, v, lay, p, False, None),
    "jagged": jagged_attention,
}


def features(task: str, model: BertModule, data: Path) -> list[dict]:
    path, max_length = FILES[task]
    out = model.task.featurize(model.task.read(data / path), model.tokenizer, max_length)
    return [f for f in out if task != "squad" or f["start_positions"] >= 0]


def attention_rows(task: str, lengths: list[int], batches: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in ROUTES}
    for _ in range(batches):
        sample = rng.sample(lengths, BATCH)
        layout = Unpadded.from_mask(torch.tensor([[1] * n + [0] * (max(sample) - n) for n in sample]))
        q, k, v = (torch.randn(layout.offsets[-1], HEADS, HEAD_SIZE, requires_grad=True) for _ in range(3))
        upstream = torch.randn(layout.offsets[-1], HEADS, HEAD_SIZE)
        for name, attention in ROUTES.items():
            start = time.perf_counter()
            attention(q, k, v, layout, DROPOUT).backward(upstream)
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["padded"])
    return [
        {
            "task": task,
            "route": name,
            "median_ms": 1000 * statistics.median(t),
            "vs_padded": statistics.median(t) / base,
        }
        for name, t in times.items()
    ]


def step_rows(task: str, model: BertModule, feats: list[dict], steps: int, seed: int) -> list[dict]:
    """The same ``steps * BATCH`` examples, every step timed, in random order and in length-grouped
    order, each after one untimed warm-up step on another batch (the same for both orders)."""
    collate = partial(pad_batch, pad_token_id=model.tokenizer.pad_token_id, pad_values=model.task.pad_values)
    pool = [feats[i] for i in torch.randperm(len(feats), generator=torch.Generator().manual_seed(seed))]
    warm_up, pool = collate(pool[:BATCH]), pool[BATCH : (steps + 1) * BATCH]
    grouped = list(LengthGroupedSampler([len(f["input_ids"]) for f in pool], BATCH, seed=seed))
    orders = {"random": list(range(len(pool))), "grouped": grouped}
    rows = []
    for order_name, order in orders.items():
        batches = [warm_up] + [collate([pool[i] for i in order[k * BATCH : (k + 1) * BATCH]]) for k in range(steps)]
        for route in ("padded", "grouped"):
            bertkit.model.unpadded.route = lambda q, p, route=route: route
            torch.manual_seed(seed)
            model.train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)  # as bertkit trains
            seconds = tokens = 0.0
            for i, batch in enumerate(batches):
                start = time.perf_counter()
                model(batch)["loss"].backward()
                optimizer.step()
                optimizer.zero_grad()
                if i:  # the first step is untimed
                    seconds += time.perf_counter() - start
                    tokens += int(batch["attention_mask"].sum())
            timed = batches[1:]
            padding = 1 - sum(int(b["attention_mask"].sum()) for b in timed) / sum(
                b["attention_mask"].numel() for b in timed
            )
            rows.append({"task": task, "order": order_name, "route": route, "real_tokens_per_second": tokens / seconds,
                         "seconds_per_step": seconds / steps, "padding_share": padding})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=list(FILES), default=list(FILES))
    parser.add_argument("--batches", type=int, default=5, help="random batches for the attention timings")
    parser.add_argument("--steps", type=int, default=6, help="timed training steps per order and route")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=os.environ.get("BERTKIT_DATA_DIR", ROOT.parent / "shared" / "data"))
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "attention_routes.json"))
    args = parser.parse_args()
    provenance = started("attention_routes.py")
    result = {
        **header("attention_routes", provenance["command"], provenance["commit"]),
        "settings": {"batch_size": BATCH, "attention_dropout": DROPOUT, "batches": args.batches, "steps": args.steps},
        "attention": [],
        "steps": [],
    }
    choose = bertkit.model.unpadded.route
    for task in args.tasks:
        model = BertModule(make_head(task), pretrained="all-MiniLM-L6-v2")
        model.head._tokenizer = model.tokenizer
        feats = features(task, model, Path(args.data_dir))
        result["attention"] += attention_rows(task, [len(f["input_ids"]) for f in feats], args.batches, args.seed)
        result["steps"] += step_rows(task, model, feats, args.steps, args.seed)
        bertkit.model.unpadded.route = choose
        for row in result["steps"][-4:]:
            print(row)
        write_result(Path(args.output), result)


if __name__ == "__main__":
    main()
