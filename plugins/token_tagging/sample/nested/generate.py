"""Write the bundled nested-entity sample (original sentences in the style of GENIA: proteins
inside DNA regions, cell lines inside cell types), JSON Lines with spans.

Run ``python plugins/token_tagging/sample/nested/generate.py`` to regenerate ``train.jsonl``,
``validation.jsonl`` and ``test.jsonl`` (seeded, so the output is identical each time). Protein
and cell names are invented. Each line: ``{"tokens": [...], "entities": [{"start", "end",
"type"}]}``, word indices, ``end`` exclusive.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

PROTEINS = [
    "IL-9",
    "TNF-beta",
    "NF-kB2",
    "STAT7",
    "Kor-1",
    "GATA-5",
    "p47",
    "CD29",
    "MAPK12",
    "Tarin",
    "Velin-3",
    "RBX",
]
DNA_WORDS = ["gene", "promoter", "enhancer", "locus"]
CELL_LINES = ["Jurkat-K", "HL-70", "U938", "THP-2", "K563"]
CELL_WORDS = ["T cells", "monocytes", "B cells", "macrophages"]
TEMPLATES = [
    "The {dna} is active in {cell} .",
    "{protein} binds the {dna} in {cell} .",
    "Expression of {protein} was induced in {cell} .",
    "We cloned the {dna} from {cell} .",
    "{protein} and {protein2} regulate the {dna} .",
    "In {cell} , {protein} represses transcription .",
]


def phrase(rng: random.Random, kind: str) -> tuple[list[str], list[tuple[int, int, str]]]:
    """Words of one entity mention and its entities (nested ones included), offsets local."""
    if kind in ("protein", "protein2"):
        return [rng.choice(PROTEINS)], [(0, 1, "protein")]
    if kind == "dna":  # "the IL-9 gene": DNA, with the protein inside
        return [rng.choice(PROTEINS), rng.choice(DNA_WORDS)], [(0, 2, "DNA"), (0, 1, "protein")]
    if rng.random() < 0.5:  # "U938 monocytes": a cell type with a cell line inside
        words = [rng.choice(CELL_LINES), *rng.choice(CELL_WORDS).split()]
        return words, [(0, len(words), "cell_type"), (0, 1, "cell_line")]
    words = rng.choice(CELL_WORDS).split()
    return words, [(0, len(words), "cell_type")]


def sentence(rng: random.Random) -> dict:
    tokens: list[str] = []
    entities: list[dict] = []
    for piece in rng.choice(TEMPLATES).split():
        if piece.startswith("{"):
            words, spans = phrase(rng, piece.strip("{}"))
            entities += [{"start": len(tokens) + a, "end": len(tokens) + b, "type": t} for a, b, t in spans]
            tokens += words
        else:
            tokens.append(piece)
    return {"tokens": tokens, "entities": sorted(entities, key=lambda e: (e["start"], -e["end"]))}


def main() -> None:
    rng = random.Random(17)
    here = Path(__file__).parent
    for split, count in (("train", 240), ("validation", 60), ("test", 60)):
        lines = [json.dumps(sentence(rng)) for _ in range(count)]
        (here / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
