"""How exactly the two exports of a LoRA run read in transformers: the merged model
(``bertkit export``: each adapter's update added to its base weights) and the PEFT adapter folder
(``--adapter true``) loaded over the transformers base with ``peft.PeftModel.from_pretrained``.

A LoRA run of ``recipes/ner_lora.yaml`` (softmax tagger: transformers' class computes the same
head) trains ``--steps`` steps on CoNLL-2003, is exported both ways, and the logits of the first
``--batches`` batches of ``eng.testb`` (batch 32) are compared with bertkit's at every real token:
the largest absolute difference, and the share of tokens whose arg-max tag differs.

    BERTKIT_DATA_DIR=../shared/data python benchmarks/adapter_export.py   # writes benchmarks/results/adapter_export.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from common import ROOT, write_result
from provenance import header, started

OUT = ROOT / "benchmarks" / "results" / "adapter_export.json"
RECIPES = [ROOT / "recipes" / "ner.yaml", ROOT / "recipes" / "ner_lora.yaml"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    provenance = started("adapter_export.py")
    import peft
    import transformers

    from bertkit import BertModule, compose
    from bertkit.model.pretrained import resolve_pretrained

    softmax = ["--model.task.init_args.crf=false", "--model.task.init_args.emission_loss_weight=0"]
    with tempfile.TemporaryDirectory() as work:
        fit = [sys.executable, "-m", "bertkit", "fit", *(f"--config={r}" for r in RECIPES), *softmax]
        fit += [
            f"--trainer.max_steps={args.steps}",
            "--trainer.limit_val_batches=0",
            f"--trainer.default_root_dir={work}/run",
        ]
        subprocess.run([*fit, "--trainer.enable_progress_bar=false"], check=True, cwd=work)
        last = Path(work) / "run" / "checkpoints" / "last.ckpt"
        export = Path(work) / "export"
        subprocess.run([sys.executable, "-m", "bertkit", "export", str(last), str(export), "--adapter", "true",
                        "--onnx", "false"], check=True, cwd=work)  # fmt: skip
        model = BertModule.load_from_checkpoint(last).eval()
        run = compose(
            *RECIPES, overrides={"model.task.init_args.crf": False, "model.task.init_args.emission_loss_weight": 0.0}
        )
        run.datamodule.attach(model)
        run.datamodule.setup("test")
        labels = model.head.classifier.out_features
        merged = transformers.AutoModelForTokenClassification.from_pretrained(export).eval()
        base_dir = resolve_pretrained(model.hparams.pretrained)
        base = transformers.AutoModelForTokenClassification.from_pretrained(base_dir, num_labels=labels)
        adapted = peft.PeftModel.from_pretrained(base, export / "adapter").eval()
        worst = {"merged": 0.0, "peft": 0.0}
        flips = {"merged": 0, "peft": 0}
        tokens = 0
        with torch.no_grad():
            for i, batch in enumerate(run.datamodule.test_dataloader()):
                if i == args.batches:
                    break
                real = batch["attention_mask"].bool()
                ours = model(batch)["logits"][real]
                tokens += int(real.sum())
                inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
                for name, reader in (("merged", merged), ("peft", adapted)):
                    theirs = reader(**inputs).logits[real]
                    worst[name] = max(worst[name], float((theirs - ours).abs().max()))
                    flips[name] += int((theirs.argmax(-1) != ours.argmax(-1)).sum())
    result = header("adapter_export", provenance["command"], provenance["commit"], repeats=1)
    result["settings"] = {
        "steps": args.steps,
        "batches": args.batches,
        "batch_size": 32,
        "recipes": ["ner.yaml", "ner_lora.yaml"],
    }
    result["results"] = {
        name: {"max_abs_logit_difference": worst[name], "tokens": tokens, "argmax_differs": flips[name]}
        for name in worst
    }
    write_result(OUT, result)
    print(result["results"])


if __name__ == "__main__":
    main()
