"""Whether a linear read-out of a CRF tagger lets transformers' plain pipeline find what the CRF's
Viterbi path finds: per checkpoint of the NER recipe, read-outs fitted on the run's validation set
(eng.testa, what ``bertkit export`` calibrates on), each scored on CoNLL-2003 ``eng.testb`` as the
plain ``token-classification`` pipeline groups a word's arg-max tag (aggregation ``"first"``:
``calibration.pipeline_entities``) against the Viterbi path's entities:

- ``argmax``: the emission layer as trained; ``argmax + bias``: with the per-tag biases ``bertkit
  export`` fits (``calibration.fit_bias``);
- ``logit map``: a tags x tags matrix and bias on the emissions;
- ``hidden layer``: a new emission layer on the encoder's last hidden states (what a second
  classifier in the export would be), started from the trained one;

the last two fitted by cross-entropy (L-BFGS, an L2 pull towards the starting weights) to the
Viterbi path (what the plain pipeline should reproduce) or to the gold tags, and for each the
share of test words whose tag equals the Viterbi path's.

    BERTKIT_DATA_DIR=../shared/data python benchmarks/crf_readout.py runs/ner/checkpoints/last.ckpt
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from bertkit_plugins.token_tagging.calibration import entity_f1, fit_bias, pipeline_entities
from provenance import commit, header, started
from torch import nn

from bertkit.training.checkpoints import load_checkpoint
from bertkit.training.module import BertModule
from bertkit.training.trained import run_validation_data
from bertkit.utils.io import atomic_path

OUT = Path(__file__).parent / "results" / "crf_readout.json"
L2 = (1e-3, 1e-4)


class HiddenAndLogits(nn.Module):
    """A head's emission layer that also returns its input: (…, hidden + tags)."""

    def __init__(self, layer: nn.Linear) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.cat([hidden, self.layer(hidden)], -1)


def words(model: BertModule, loader: Any) -> dict[str, torch.Tensor]:
    """Each scored word's hidden state, emissions, Viterbi tag, gold tag, and whether it begins its row."""
    head, tags = model.head, len(model.head.tags)
    found: dict[str, list[torch.Tensor]] = {k: [] for k in ("hidden", "emissions", "viterbi", "gold", "first")}
    for batch in loader:
        with torch.inference_mode():
            both = model({k: v for k, v in batch.items() if k != "labels"})["logits"]
        both, positions, free_start = head._words(both, batch)
        scored = positions >= 0
        emissions = both[..., -tags:]
        found["hidden"].append(both[..., :-tags][scored])
        found["emissions"].append(emissions[scored])
        found["viterbi"].append(head.crf.decode(emissions, scored, free_start)[scored])
        found["gold"].append(batch["labels"].gather(1, positions.clamp(min=0))[scored])
        found["first"].append(scored.long().cumsum(1)[scored] == 1)
    return {k: torch.cat(v) for k, v in found.items()}


def fitted(
    inputs: torch.Tensor, target: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, l2: float
) -> nn.Linear:
    """A linear layer from ``weight``/``bias`` fitted by cross-entropy to ``target`` (L-BFGS, full batch)."""
    layer = nn.Linear(weight.shape[1], weight.shape[0])
    layer.weight.data.copy_(weight)
    layer.bias.data.copy_(bias)
    start = weight.clone()
    optimizer = torch.optim.LBFGS(layer.parameters(), max_iter=300, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(layer(inputs), target) + l2 * ((layer.weight - start) ** 2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return layer.requires_grad_(False)


def read_outs(checkpoint: Path) -> dict[str, float]:
    model = BertModule.load_from_checkpoint(checkpoint, map_location="cpu").eval()
    data = run_validation_data(model, load_checkpoint(checkpoint, mmap=True), checkpoint)
    head, names = model.head, model.head.tags
    emission_layer = head.classifier
    head.classifier = HiddenAndLogits(emission_layer)
    validation = words(model, data.val_dataloader())
    data.setup("test")
    test = words(model, data.test_dataloader())
    gold = pipeline_entities(test["gold"], test["first"], names)

    def score(tags: torch.Tensor) -> dict[str, float]:
        return {
            "f1": round(entity_f1(pipeline_entities(tags, test["first"], names), gold), 2),
            "agrees_with_viterbi": round(float((tags == test["viterbi"]).float().mean()), 4),
        }

    found = {"viterbi": score(test["viterbi"]), "argmax": score(test["emissions"].argmax(-1))}
    bias, _, _ = fit_bias(validation["emissions"], validation["gold"], validation["first"], names)
    found["argmax + bias"] = score((test["emissions"] + bias).argmax(-1))
    identity = (torch.eye(len(names)), torch.zeros(len(names)))
    trained = (emission_layer.weight.data, emission_layer.bias.data)
    for target in ("viterbi", "gold"):
        for l2 in L2:
            for name, source, start in (("logit map", "emissions", identity), ("hidden layer", "hidden", trained)):
                layer = fitted(validation[source], validation[target], *start, l2)
                found[f"{name} -> {target}, l2 {l2:g}"] = score(layer(test[source]).argmax(-1))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", type=Path, nargs="+")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args()
    run = started("crf_readout.py")
    measured = commit()
    runs = []
    for checkpoint in args.checkpoints:
        begin = time.perf_counter()
        runs.append({"checkpoint": str(checkpoint), **read_outs(checkpoint)})
        runs[-1]["seconds"] = round(time.perf_counter() - begin)
        print(json.dumps(runs[-1], indent=1), flush=True)
    result = header(
        "Linear read-outs of a CRF tagger for transformers' plain pipeline: entity F1 against the Viterbi path's",
        "BERTKIT_DATA_DIR=../shared/data " + run["command"],
        measured,
        repeats=len(runs),
    )
    result["settings"] = {"fitted_on": "eng.testa", "scored_on": "eng.testb", "l2": list(L2), "optimizer": "L-BFGS"}
    result["runs"] = runs
    with atomic_path(args.output) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
