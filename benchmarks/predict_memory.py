"""Peak memory of ``bertkit predict`` against the size of the input file: part by part (the
default, ``data.predict_chunk_size`` 4,096) and in one pass (``data.predict_chunk_size 0``).

A tiny NER model (2 layers × 128, MiniLM's vocabulary, one training step on the bundled sample)
predicts plain-text files of about 1 MB and 20 MB made of generated news-like sentences; the model
size does not change what grows with the input (examples, features and prediction records).

    python benchmarks/predict_memory.py    # writes benchmarks/results/predict_memory.json
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from provenance import commit, header

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "predict_memory.json"
BERTKIT = str(Path(sys.executable).with_name("bertkit"))
RECIPE = str(ROOT / "recipes" / "ner.yaml")
TINY = ["--model.pretrained=null", "--model.preset=tiny", "--model.vocab_file=all-MiniLM-L6-v2"]
NAMES = ["Maria Silva", "Jan Kowalski", "Aiko Tanaka", "Omar Haddad", "Lena Berg", "Kofi Mensah"]
PLACES = ["Lisbon", "Oslo", "Nairobi", "Osaka", "Lima", "Krakow", "Quebec", "Tunis"]
ORGS = ["Bluefin Bank", "Northwind Air", "Acme Steel", "the United Nations", "Helix Labs"]
VERBS = ["met", "visited", "left", "praised", "criticised", "joined", "called"]


def text_file(path: Path, megabytes: float, seed: int = 0) -> int:
    """Write about ``megabytes`` of one-sentence lines; return the number of lines."""
    rng = random.Random(seed)
    lines, size = 0, 0
    with path.open("w", encoding="utf-8") as out:
        while size < megabytes * 1_000_000:
            line = (
                f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(ORGS)} in {rng.choice(PLACES)} on "
                f"day {rng.randint(1, 365)}, said officials from {rng.choice(PLACES)}.\n"
            )
            out.write(line)
            size += len(line.encode())
            lines += 1
    return lines


def peak_rss_mb(args: list[str], cwd: Path) -> tuple[float, float]:
    """Peak resident memory (MB) and wall seconds of ``bertkit ARGS`` in a fresh process."""
    probe = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", probe, BERTKIT, *args], cwd=cwd, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    rss, seconds = out.stdout.split()
    return float(rss), float(seconds)


def main() -> None:
    measured = commit()  # the code measured: taken before the run
    env_data = os.environ.pop("BERTKIT_DATA_DIR", None)  # the bundled sample trains the model
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        subprocess.run(
            [BERTKIT, "fit", "--config", RECIPE, *TINY, "--trainer.max_steps=1", "--trainer.limit_val_batches=0",
             "--trainer.enable_progress_bar=false"],
            cwd=work, check=True, capture_output=True,
        )  # fmt: skip
        runs = []
        for megabytes, chunk in ((1, 4096), (20, 4096), (1, 0), (20, 0)):
            path = work / f"input_{megabytes}mb.txt"
            lines = text_file(path, megabytes) if not path.exists() else sum(1 for _ in path.open())
            args = [
                "predict", "--config", RECIPE, *TINY, "--ckpt_path=last", f"--data.predict_file={path}",
                f"--data.predict_chunk_size={chunk}", "--trainer.enable_progress_bar=false",
            ]  # fmt: skip
            rss, seconds = peak_rss_mb(args, work)
            written = sum(1 for _ in (work / "runs/ner/predictions.jsonl").open())
            runs.append(
                dict(input_mb=megabytes, lines=lines, predict_chunk_size=chunk, peak_rss_mb=round(rss, 1),
                     seconds=round(seconds, 1), records_written=written)
            )  # fmt: skip
            print(runs[-1], flush=True)
    if env_data is not None:
        os.environ["BERTKIT_DATA_DIR"] = env_data
    result = header(
        "bertkit predict: peak memory against input size, in parts and in one pass",
        "python benchmarks/predict_memory.py",
        measured,
    )
    result["runs"] = runs
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
