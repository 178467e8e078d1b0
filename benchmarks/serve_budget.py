"""Serving with a large request in flight: a one-sentence request's latency while the largest
request ``bertkit serve`` admits (``--max_request_tokens``) runs, and what a request over the
budget costs the requests behind it — a tiny NER model (the recipe's first steps on a 2-layer
encoder), one model process, on 127.0.0.1.

For each of ``--repeats`` rounds: the sentence alone (latency, 10 requests), the sentence sent
0.3 s after a maximal request (its latency and the maximal request's), and the sentence sent 2 s
after a ``--words``-word request (its status, seconds to answer, and the sentence's latency).
``--reference PYTHON`` measures another installation of bertkit (an earlier commit's virtual
environment) the same way in the same run, its commit recorded.

    python benchmarks/serve_budget.py --reference ../old/.venv/bin/python   # benchmarks/results/serve_budget.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from provenance import header, started
from serve_load import start_server

from bertkit.utils.io import atomic_path

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "Peter Blackburn flew from Oslo to Paris on Tuesday ."


def post(port: int, inputs: Any, timeout: float = 600) -> tuple[int, float, str]:
    """POST /predict; (status, seconds, body)."""
    body = json.dumps({"inputs": inputs})
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    connection.request("POST", "/predict", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, time.perf_counter() - start, response.read().decode(errors="replace")


def behind(port: int, big: Any, delay: float) -> dict[str, Any]:
    """``big`` posted, and ``delay`` seconds later the sentence: both answers' status and seconds."""
    answers: dict[str, tuple[int, float, str]] = {}
    first = threading.Thread(target=lambda: answers.__setitem__("big", post(port, big)))
    first.start()
    time.sleep(delay)
    answers["sentence"] = post(port, SENTENCE)
    first.join()
    return {
        "large_status": answers["big"][0],
        "large_seconds": round(answers["big"][1], 3),
        "sentence_status": answers["sentence"][0],
        "sentence_seconds": round(answers["sentence"][1], 3),
    }


def maximal_words(port: int, budget: int) -> int:
    """Words of ``Oslo`` the budget admits, from the token count a refusal states."""
    words = budget
    for _ in range(6):
        status, _, body = post(port, " ".join(["Oslo"] * words))
        if status == 200:
            return words
        tokens = int(re.search(r"([\d,]+) tokens", body)[1].replace(",", ""))  # as the refusal counts them
        words = int(words * budget / tokens * 0.98)
    raise SystemExit("no request under the budget found")


def measure(python: str, args: argparse.Namespace) -> dict[str, Any]:
    """Fit the tiny model and measure the rounds with ``python``'s bertkit."""
    bertkit = str(Path(python).with_name("bertkit"))
    probe = [python, "-c", "import bertkit; print(bertkit.__file__)"]
    source = subprocess.run(probe, capture_output=True, text=True, cwd="/")  # not this tree's bertkit
    folder = Path(source.stdout.strip()).parent
    described = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=folder, capture_output=True, text=True)
    with tempfile.TemporaryDirectory() as tmp:
        task = Path(tmp)
        subprocess.run(
            [bertkit, "fit", "--config", str(ROOT / "recipes/ner.yaml"), "--model.pretrained=null",
             "--model.preset=tiny", "--model.vocab_file=all-MiniLM-L6-v2", "--trainer.max_steps=5",
             "--trainer.limit_val_batches=1", "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={task}"],
            cwd=task, check=True, capture_output=True,
        )  # fmt: skip
        server = start_server("bertkit-torch", task, args.port, python)
        try:
            post(args.port, SENTENCE)  # warm-up
            words = maximal_words(args.port, args.budget)
            rounds = []
            for _ in range(args.repeats):
                alone = [post(args.port, SENTENCE)[1] for _ in range(10)]
                rounds.append(
                    {
                        "sentence_alone_p50_seconds": round(statistics.median(alone), 4),
                        "behind_maximal": behind(args.port, " ".join(["Oslo"] * words), 0.3),
                        "behind_over_budget": behind(args.port, " ".join(["Oslo"] * args.words), 2.0),
                    }
                )
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
    return {
        "bertkit": str(folder),
        "commit": described.stdout.strip(),
        "maximal_request_words": words,
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=int, default=16384, help="--max_request_tokens (the default)")
    parser.add_argument("--words", type=int, default=190_000, help="words of the request over the budget")
    parser.add_argument("--port", type=int, default=8731)
    parser.add_argument("--reference", help="the python of another bertkit installation, measured too")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/serve_budget.json")
    args = parser.parse_args()
    run = started("serve_budget.py")
    sides = {"this": measure(sys.executable, args)}
    if args.reference:
        sides["reference"] = measure(args.reference, args)
    result = header("serve_budget", run["command"], run["commit"]) | {
        "model": "tiny NER (2 layers x 128), torch, one model process, fp32",
        "budget_tokens": args.budget,
        "over_budget_request_words": args.words,
        "repeats": args.repeats,
        **sides,
    }
    with atomic_path(args.out) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
