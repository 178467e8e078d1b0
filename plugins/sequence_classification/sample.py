"""Generated samples for the sequence-classification recipes: sentiment of single sentences
(SST-2-like) and paraphrase of sentence pairs (MRPC/RTE-like), labels ``0``/``1``. Written with
the column names the head is configured with, so any recipe that reads named TSV columns runs on
them (``SequenceClassificationHead.sample_files``)."""

from __future__ import annotations

import random

SUBJECTS = ["the film", "this book", "the new album", "the hotel", "our dinner", "the match", "the lecture", "the app"]
GOOD = ["wonderful", "delightful", "moving", "brilliant", "charming", "superb", "gripping", "warm"]
BAD = ["dull", "clumsy", "tedious", "awful", "bland", "sloppy", "forgettable", "grim"]
ADVERBS = ["", "really ", "rather ", "truly ", "quite "]
PEOPLE = ["Marta", "Kofi", "Ingrid", "Diego", "Hana", "Yusuf", "Elena", "Bram"]
PLACES = ["Lisbon", "Nairobi", "Oslo", "Toronto", "Osaka", "Cairo", "Lima", "Quebec"]
THINGS = [("car", "automobile"), ("house", "home"), ("boat", "vessel"), ("shop", "store"), ("job", "position")]
VERBS = [("bought", "purchased"), ("sold", "got rid of"), ("left", "departed from"), ("started", "began")]
SPLITS = {"train": 400, "validation": 100, "test": 100}


def sentiment(rng: random.Random) -> tuple[str, str]:
    """(sentence, label): 1 for praise, 0 for criticism; a negation flips the word's sense."""
    good = rng.random() < 0.5
    negated = rng.random() < 0.25
    word = rng.choice(GOOD if good != negated else BAD)
    verb = "was not" if negated else "was"
    return f"{rng.choice(SUBJECTS)} {verb} {rng.choice(ADVERBS)}{word} .", str(int(good))


def paraphrase(rng: random.Random) -> tuple[str, str, str]:
    """(sentence, sentence, label): 1 when the second says the same in other words, 0 when a
    person, place or number differs."""
    person, place, (thing, synonym), (verb, other_verb) = (
        rng.choice(PEOPLE), rng.choice(PLACES), rng.choice(THINGS), rng.choice(VERBS),
    )  # fmt: skip
    number = rng.randint(2, 30)
    first = f"{person} {verb} a {thing} in {place} {number} days ago."
    same = rng.random() < 0.5
    if not same:
        change = rng.choice(["person", "place", "number"])
        person = rng.choice([p for p in PEOPLE if p != person]) if change == "person" else person
        place = rng.choice([p for p in PLACES if p != place]) if change == "place" else place
        number = number + rng.randint(1, 9) if change == "number" else number
    second = f"{number} days ago in {place}, {person} {other_verb} a {synonym}."
    return first, second, str(int(same))


def tables(text: str, pair: str | None, label: str, seed: int = 7) -> dict[str, tuple[str, str]]:
    """``split -> (file name, TSV text)`` with a header of the given column names."""
    rng = random.Random(seed)
    files = {}
    for split, count in SPLITS.items():
        header = [text, pair, label] if pair else [text, label]
        rows = ["\t".join(header)]
        for _ in range(count):
            rows.append("\t".join(paraphrase(rng) if pair else sentiment(rng)))
        files[split] = (f"{split}.tsv", "\n".join(rows) + "\n")
    return files
