"""A generated SQuAD-format sample for the question-answering recipes: short biographies with
questions whose answers are spans of them (and, for SQuAD v2.0, questions about someone the
paragraph does not mention, which have no answer). ``QuestionAnsweringHead.sample_files``."""

from __future__ import annotations

import json
import random

FIRST = ["Marta", "Kofi", "Ingrid", "Diego", "Hana", "Yusuf", "Elena", "Bram", "Priya", "Lars", "Aisha", "Soren"]
LAST = ["Kowalczyk", "Mensah", "Halvorsen", "Ortega", "Sato", "Demir", "Petrova", "Visser", "Raman", "Brandt"]
CITIES = ["Lisbon", "Nairobi", "Oslo", "Toronto", "Osaka", "Cairo", "Lima", "Quebec", "Krakow", "Tunis"]
ORGS = ["Norvale Shipping", "Bluefin Bank", "Orla Pharma", "Vantor Energy", "Fjell Airways", "Marrow Foods"]
JOBS = ["engineer", "pilot", "chemist", "teacher", "architect", "economist", "translator", "nurse"]
SPLITS = {"train": 120, "validation": 30}


def paragraph(rng: random.Random, index: int, impossible: bool) -> dict:
    name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    city, org, job, year = rng.choice(CITIES), rng.choice(ORGS), rng.choice(JOBS), str(rng.randint(1950, 2005))
    context = (
        f"{name} was born in {city} in {year}. After studying there, {name.split()[0]} worked as a {job} "
        f"for {org}, and later moved to {rng.choice([c for c in CITIES if c != city])}."
    )
    facts = [
        (f"Where was {name} born?", city),
        (f"In which year was {name} born?", year),
        (f"Which company did {name} work for?", org),
        (f"What did {name} work as?", job),
    ]
    qas = []
    for k, (question, text) in enumerate(rng.sample(facts, 2)):
        qas.append({"id": f"s{index}q{k}", "question": question,
                    "answers": [{"text": text, "answer_start": context.index(text)}]})  # fmt: skip
    if impossible:
        other = f"{rng.choice([f for f in FIRST if f not in name])} {rng.choice(LAST)}"
        qas.append({"id": f"s{index}q9", "question": f"Where was {other} born?", "answers": [], "is_impossible": True})
    return {"context": context, "qas": qas}


def squad(version_2: bool, seed: int = 11) -> dict[str, tuple[str, str]]:
    """``split -> (file name, SQuAD JSON text)``; the validation file also serves test."""
    rng = random.Random(seed)
    files = {}
    suffix = "v2.0" if version_2 else "v1.1"
    for split, count in SPLITS.items():
        paragraphs = [paragraph(rng, i, version_2 and i % 3 == 0) for i in range(count)]
        articles = [{"title": f"People {i // 10}", "paragraphs": paragraphs[i : i + 10]} for i in range(0, count, 10)]
        document = {"version": suffix, "data": articles}
        files[split] = (f"{split}-{suffix}.json", json.dumps(document, indent=1) + "\n")
    return files
