"""Split a SQuAD JSON file by article (never by question) into train.json and eval.json.

SQuAD train is not available offline here, so the real runs train on some articles of
``dev-v1.1.json`` and evaluate on the others. The articles are shuffled with ``random.Random(seed)``
and the first ``--eval-articles`` become the evaluation set; ``split.json`` records the titles.

Usage::

    python benchmarks/squad_split.py --out runs/squad-split            # 40 train / 8 eval, seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

from bertkit.utils.io import atomic_path

DEFAULT_SOURCE = Path(os.environ.get("BERTKIT_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


def split_articles(document: dict, eval_articles: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, eval) article lists; the same seed gives the same split.

    Raises:
        ValueError: ``eval_articles`` leaves no article for one side.
    """
    articles = list(document["data"])
    if not 0 < eval_articles < len(articles):
        raise ValueError(f"--eval-articles {eval_articles}: the file has {len(articles)} articles")
    order = list(range(len(articles)))
    random.Random(seed).shuffle(order)
    held = set(order[:eval_articles])
    train = [a for i, a in enumerate(articles) if i not in held]
    return train, [a for i, a in enumerate(articles) if i in held]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE / "qa" / "squad" / "dev-v1.1.json")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--eval-articles", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    document = json.loads(args.source.read_text(encoding="utf-8"))
    train, held = split_articles(document, args.eval_articles, args.seed)
    record = {"source": str(args.source), "seed": args.seed}
    for name, articles in (("train", train), ("eval", held)):
        with atomic_path(args.out / f"{name}.json") as tmp:
            tmp.write_text(json.dumps({"version": document.get("version"), "data": articles}), encoding="utf-8")
        questions = sum(len(p["qas"]) for a in articles for p in a["paragraphs"])
        record[name] = {"articles": len(articles), "questions": questions, "titles": [a["title"] for a in articles]}
    with atomic_path(args.out / "split.json") as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(
        json.dumps(
            {
                k: v if not isinstance(v, dict) else {"articles": v["articles"], "questions": v["questions"]}
                for k, v in record.items()
            }
        )
    )


if __name__ == "__main__":
    main()
