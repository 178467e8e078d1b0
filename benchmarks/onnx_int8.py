"""What int8 ONNX costs: accuracy of ``bertkit export --int8 true`` against the fp32 ONNX model
and bertkit itself on CoNLL-2003 (entity F1, ``eng.testb``) and SST-2 (accuracy, the recipe's
test file), with sizes and inference time, in one run on one machine.

MiniLM (all-MiniLM-L6-v2) is fine-tuned here with each task's recipe for a short budget (one
epoch, ``--train-batches`` batches, validation off), exported, and every variant scores the same
batches of the test split through the head's own metrics: bertkit (torch fp32), ONNX fp32, ONNX
int8 (``quantize_onnx``: ONNX Runtime's transformer optimizer, then dynamic quantization) with one
scale per tensor, and with one scale per output channel (what ``--int8 true`` writes).

    BERTKIT_DATA_DIR=../shared/data python benchmarks/onnx_int8.py   # writes benchmarks/results/onnx_int8.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import onnxruntime
import torch
from common import fine_tune
from provenance import commit, header

from bertkit import BertModule, compose
from bertkit.inference.onnx import export_onnx, quantize_onnx
from bertkit.utils.io import atomic_path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "onnx_int8.json"
TASKS = {"conll2003": ("recipes/ner.yaml", "f1"), "sst2": ("recipes/sst2.yaml", "accuracy")}


def score(model: BertModule, loader, forward) -> tuple[dict[str, float], float]:
    """The head's test metrics over ``loader`` with logits from ``forward(batch)``; seconds taken."""
    start = time.perf_counter()
    with torch.no_grad():
        for batch in loader:
            model.head.update_metrics("test", forward(batch), batch)
    seconds = time.perf_counter() - start
    return {k: float(v) for k, v in model.head.compute_metrics("test").items()}, seconds


def onnx_forward(path: Path, outputs: list[str]):
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def forward(batch: dict) -> dict[str, torch.Tensor]:
        got = session.run(outputs, {k: batch[k].numpy() for k in names})
        return {name: torch.from_numpy(array) for name, array in zip(outputs, got, strict=True)}

    return forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-batches", type=int, default=300)
    parser.add_argument("--work", type=Path, default=Path("runs/onnx_int8"))
    parser.add_argument("--reuse", action="store_true", help="score the checkpoints already in --work")
    args = parser.parse_args()
    if not os.environ.get("BERTKIT_DATA_DIR"):
        raise SystemExit("set BERTKIT_DATA_DIR to the folder with ner/conll2003 and classification/sst2")
    measured = commit()
    runs = []
    for task, (recipe, metric) in TASKS.items():
        work = args.work / task
        checkpoint = work / "checkpoints" / "last.ckpt"
        if not (args.reuse and checkpoint.is_file()):
            checkpoint = fine_tune(recipe, work, args.train_batches)
        model = BertModule.load_from_checkpoint(checkpoint, map_location="cpu").eval()
        run = compose(ROOT / recipe, overrides={"trainer.enable_progress_bar": False})
        run.datamodule.attach(model)
        run.datamodule.setup("test")
        loader = run.datamodule.test_dataloader()
        outputs = list(model.head.onnx_outputs)
        fp32, tensor, channel = work / "model.onnx", work / "model.int8-tensor.onnx", work / "model.int8.onnx"
        export_onnx(model, fp32)
        quantize_onnx(fp32, tensor, per_channel=False)
        quantize_onnx(fp32, channel, per_channel=True)
        variants = {
            "bertkit (torch fp32)": (None, model),
            "ONNX fp32": (fp32, onnx_forward(fp32, outputs)),
            "ONNX int8, per tensor": (tensor, onnx_forward(tensor, outputs)),
            "ONNX int8, per channel (--int8 true)": (channel, onnx_forward(channel, outputs)),
        }
        baseline = None
        for name, (path, forward) in variants.items():
            scores, seconds = score(model, loader, forward)
            baseline = scores[metric] if baseline is None else baseline
            runs.append({
                "task": task, "variant": name, metric: round(100 * scores[metric], 2),
                "change_vs_bertkit": round(100 * (scores[metric] - baseline), 2),
                "size_mb": round(path.stat().st_size / 1e6, 1) if path else None,
                "test_seconds": round(seconds, 1), "train_batches": args.train_batches,
            })  # fmt: skip
            print(runs[-1], flush=True)
    result = header(
        "int8 ONNX (dynamic quantization) against fp32: test scores of fine-tuned MiniLM",
        "BERTKIT_DATA_DIR=../shared/data python benchmarks/onnx_int8.py",
        measured,
        cpu_threads=torch.get_num_threads(),
        torch=torch.__version__,
        onnxruntime=onnxruntime.__version__,
    )
    result["runs"] = runs
    with atomic_path(OUT) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
