"""Write the bundled NER sample (original sentences, CoNLL format, IOB1 tags like CoNLL-2003).

Run ``python plugins/token_tagging/sample/generate.py`` to regenerate ``train.conll``,
``validation.conll`` and ``test.conll`` (seeded, so the output is identical each time). Person and
organisation names are invented; places and nationalities are real. Files use two columns
(``token tag``); the tag is the last column, as in CoNLL-2003.
"""

from __future__ import annotations

import random
from pathlib import Path

FIRST = "Marta Tomas Ingrid Kofi Aisha Lars Priya Diego Hana Olu Yusuf Elena Bram Mei Rafael Nadia Soren Lucia Abebe Fiona".split()
LAST = "Kowalczyk Reyes Halvorsen Mensah Rahman Lindqvist Raman Ortega Sato Adeyemi Demir Petrova Visser Chen Duarte Haddad Brandt Moreau Tesfaye Gallagher".split()
ORG = [
    "Norvale Shipping",
    "Corrin Analytics",
    "Halden United",
    "Bluefin Bank",
    "Tarsk Motors",
    "Orla Pharma",
    "the Kestrel Group",
    "Vantor Energy",
    "Fjell Airways",
    "Marrow Foods",
    "the Ostrand Institute",
    "Calder Rovers",
    "Pellham Insurance",
    "Sundby Steel",
    "the Merrit Foundation",
    "Quarry Lane Records",
]
LOC = [
    "Lisbon",
    "Nairobi",
    "Oslo",
    "Toronto",
    "Osaka",
    "Cairo",
    "Lima",
    "Warsaw",
    "Melbourne",
    "Accra",
    "Chile",
    "Norway",
    "Kenya",
    "Portugal",
    "Vietnam",
    "the Rhine",
    "Lake Geneva",
    "New Zealand",
    "Rio de Janeiro",
    "Hamburg",
    "Seville",
    "Bangalore",
    "Tunisia",
    "Iceland",
]
MISC = [
    "Norwegian",
    "Brazilian",
    "Kenyan",
    "Dutch",
    "Japanese",
    "Portuguese",
    "Canadian",
    "Egyptian",
    "World Cup",
    "Olympic",
    "Champions League",
    "Nobel Prize",
    "Euro 2024",
    "Australian Open",
    "Christmas",
    "Ramadan",
]
TEMPLATES = [
    "{PER} joined {ORG} as chief executive in {LOC} on Monday .",
    "{ORG} said it would open a new plant near {LOC} next year .",
    "Police in {LOC} questioned {PER} about the missing shipment .",
    "The {MISC} striker {PER} scored twice as {ORG} beat {ORG} 3-1 .",
    "{PER} , a spokesman for {ORG} , declined to comment .",
    "Shares in {ORG} fell 4 percent after the {MISC} regulator opened an inquiry .",
    "{PER} will travel to {LOC} and {LOC} before the {MISC} summit .",
    "Heavy rain closed roads between {LOC} and {LOC} for a second day .",
    "The {MISC} government appointed {PER} to lead the talks .",
    "{PER} told reporters in {LOC} that the deal was close .",
    "{ORG} agreed to buy {ORG} for 2.1 billion dollars .",
    "{PER} won the {MISC} title after beating {PER} in straight sets .",
    "Flights from {LOC} were delayed after a strike at {ORG} .",
    "{PER} and {PER} met in {LOC} on Tuesday to discuss trade .",
    "The festival in {LOC} drew thousands of {MISC} visitors .",
    "{ORG} reported a quarterly profit of 310 million euros .",
    "According to {ORG} , exports to {LOC} rose sharply in March .",
    "{PER} , who coaches {ORG} , praised the {MISC} defence .",
    "Rescue teams reached the village north of {LOC} late on Friday .",
    "The court in {LOC} fined {ORG} for breaking safety rules .",
    "{PER} said the {MISC} market remained weak .",
    "Analysts at {ORG} expect prices in {LOC} to stabilise .",
    "{PER} resigned from {ORG} citing personal reasons .",
    "Fans of {ORG} celebrated in the streets of {LOC} .",
    "The {MISC} team arrived in {LOC} ahead of the {MISC} qualifiers .",
    "{PER} finished third behind {PER} and {PER} .",
    "Trade between {LOC} and {LOC} grew by 12 percent last year .",
    "{ORG} hired {PER} from {ORG} to run its {LOC} office .",
    "The minister , {PER} , visited flood areas in {LOC} .",
    "Ticket sales for the {MISC} final opened on Wednesday .",
    "It was not clear when talks would resume .",
    "Prices rose 0.3 percent in the month , the agency said .",
    "The match was postponed because of snow .",
    "{PER} 21 , {PER} 18 , {PER} 15",
    "{LOC} 2 {LOC} 0",
    "{ORG} 71 {ORG} 64",
]
LONG = (
    "In a statement released late on Thursday , {ORG} said that {PER} , who had led its operations in {LOC} "
    "since the merger with {ORG} , would step down at the end of the month , that {PER} would take over the "
    "business in {LOC} and {LOC} , and that the {MISC} unit , which had struggled since the collapse of talks "
    "with {ORG} in {LOC} , would be sold to {ORG} , a move welcomed by {PER} of {ORG} and by the {MISC} "
    "union , which had warned that hundreds of jobs in {LOC} , {LOC} and {LOC} were at risk if no buyer was "
    "found before the {MISC} holidays ."
)


def fill(template: str, rng: random.Random) -> list[tuple[str, str]]:
    """Tokens with IOB2 tags for one template."""
    out: list[tuple[str, str]] = []
    for piece in template.split():
        if piece.startswith("{") and piece.endswith("}"):
            kind = piece[1:-1]
            if kind == "PER":
                name = f"{rng.choice(FIRST)} {rng.choice(LAST)}" if rng.random() < 0.7 else rng.choice(LAST)
            else:
                name = rng.choice({"ORG": ORG, "LOC": LOC, "MISC": MISC}[kind])
            words = name.split()
            if words[0] == "the":  # "the" is outside the entity, as in CoNLL-2003
                out.append(("the", "O"))
                words = words[1:]
            out += [(w, ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(words)]
        else:
            out.append((piece, "O"))
    return out


def to_iob1(tags: list[str]) -> list[str]:
    """IOB2 -> IOB1: B- only where an entity directly follows one of the same type."""
    out = []
    for i, tag in enumerate(tags):
        if tag.startswith("B-") and not (i and tags[i - 1] != "O" and tags[i - 1][2:] == tag[2:]):
            tag = "I-" + tag[2:]
        out.append(tag)
    return out


def write(path: Path, n_docs: int, rng: random.Random) -> None:
    lines = []
    for _ in range(n_docs):
        lines += ["-DOCSTART- O", ""]
        for _ in range(rng.randint(4, 12)):
            template = LONG if rng.random() < 0.02 else rng.choice(TEMPLATES)
            tokens = fill(template, rng)
            tags = to_iob1([t for _, t in tokens])
            lines += [f"{w} {t}" for (w, _), t in zip(tokens, tags, strict=True)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    here = Path(__file__).parent
    rng = random.Random(2003)
    for name, docs in (("train.conll", 120), ("validation.conll", 16), ("test.conll", 16)):
        write(here / name, docs, rng)
