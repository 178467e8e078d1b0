"""One training step of a ModernBERT-base-shaped encoder at long lengths: bertkit's
``ModernBertModel`` (unpadded) vs transformers' ``ModernBertModel`` (SDPA attention), same
machine, same run.

Each case runs in a fresh process per implementation: random weights of ModernBERT-base's shape
(22 layers, hidden 768, 12 heads, GeGLU 1,152, a 128-token local window, global every third
layer, 50,368 tokens), a warm-up step at 128 tokens, then one timed step at the case's lengths —
forward, a mean-square loss on the last hidden states of the real tokens, backward, AdamW — and
the process's peak resident memory (after building the model, and at the end). Batches of mixed
lengths are padded to the longest; bertkit computes on the real tokens only, transformers on
every position.

    python benchmarks/long_context.py              # writes benchmarks/results/long_context.json
    python benchmarks/long_context.py --quick      # 512 and 2,048 only
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from provenance import header, started

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "long_context.json"
CASES = {"512": [512], "2048": [2048], "8192": [8192], "mixed 2048+512+512+256": [2048, 512, 512, 256]}
QUICK = ("512", "2048")
SHAPE = {
    "vocab_size": 50368, "hidden_size": 768, "num_hidden_layers": 22, "num_attention_heads": 12,
    "intermediate_size": 1152, "local_attention": 128, "global_attn_every_n_layers": 3, "pad_token_id": 50283,
}  # fmt: skip


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(implementation: str):
    import torch

    torch.manual_seed(0)
    if implementation == "bertkit":
        from bertkit_plugins.modernbert import ModernBertConfig, ModernBertModel

        encoder = ModernBertModel(ModernBertConfig(**SHAPE), add_pooling_layer=False)
        return encoder, lambda ids, mask: encoder(ids, mask).last_hidden_state
    import transformers

    config = transformers.ModernBertConfig(**SHAPE)
    model = transformers.ModernBertModel._from_config(config, attn_implementation="sdpa")
    return model, lambda ids, mask: model(input_ids=ids, attention_mask=mask).last_hidden_state


def child(implementation: str, lengths: list[int]) -> dict[str, float]:
    """Time one step in this process; returns seconds and memory."""
    import torch

    model, forward = build(implementation)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(lens: list[int]) -> float:
        T = max(lens)
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(5, SHAPE["vocab_size"] - 100, (len(lens), T), generator=g)
        mask = torch.tensor([[1] * n + [0] * (T - n) for n in lens])
        start = time.perf_counter()
        hidden = forward(ids * mask, mask)
        loss = hidden[mask.bool()].pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    step([128])  # warm-up: threads, allocator, optimizer state
    built = rss_mb()
    seconds = step(lengths)
    return {"seconds": round(seconds, 2), "rss_after_warmup_mb": round(built), "peak_rss_mb": round(rss_mb())}


def run_case(implementation: str, lengths: list[int]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", implementation, ",".join(map(str, lengths))],
        check=False, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="512 and 2,048 tokens only")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], [int(n) for n in args.child[1].split(",")])))
        return
    run = started("long_context.py")
    import torch
    import transformers

    rows = []
    for name, lengths in CASES.items():
        if args.quick and name not in QUICK:
            continue
        row = {"case": name, "real_tokens": sum(lengths), "padded_tokens": len(lengths) * max(lengths)}
        for implementation in ("bertkit", "transformers"):
            result = run_case(implementation, lengths)
            print(name, implementation, result, flush=True)
            row |= {f"{implementation}_{k}": v for k, v in result.items()}
        if "bertkit_seconds" in row and "transformers_seconds" in row:
            row["speedup"] = round(row["transformers_seconds"] / row["bertkit_seconds"], 2)
        rows.append(row)
    result = {
        **header("long_context", run["command"], run["commit"], transformers=transformers.__version__),
        "settings": {"shape": SHAPE, "threads": torch.get_num_threads(), "transformers_attention": "sdpa"},
        "rows": rows,
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
