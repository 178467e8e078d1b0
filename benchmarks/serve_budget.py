"""Serving with a large request in flight: a one-sentence request's latency while the largest
request ``bertkit serve`` admits (``--max_request_tokens``) runs, and what a request over the
budget costs the requests behind it — a tiny NER model (the recipe's first steps on a 2-layer
encoder), one model process, on 127.0.0.1.

For each of ``--repeats`` rounds: the sentence alone (latency, 10 requests), the sentence sent
0.3 s after a maximal request (its latency and the maximal request's), and the sentence sent 2 s
after a ``--words``-word request (its status, seconds to answer, and the sentence's latency);
the same over-budget request in scripts written without spaces (Chinese, Thai: as many
characters). Then the queue's bound (``--max_queued_tokens``): ``--concurrent`` clients sending
maximal requests back to back for ``--seconds`` while a bystander sends the sentence one request
after another: the bystander's latency (p50, p99, max), the maximal requests answered and
refused (503), and the tokens per second the model answered, from which the bound on a
request's wait (queued tokens / tokens per second) follows.
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
    body = json.dumps({"inputs": inputs}, ensure_ascii=False).encode()  # UTF-8: 3 bytes a CJK character, not 6
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


def bystander(port: int, maximal: str, args: argparse.Namespace, queued: int | None) -> dict[str, Any]:
    """``args.concurrent`` clients posting ``maximal`` back to back for ``args.seconds`` while one
    posts the sentence back to back: its latencies, their statuses, the tokens answered per
    second (``args.budget`` per maximal request) and the wait a bound of ``queued`` tokens gives
    at that rate (None: no bound)."""
    concurrent, stop = args.concurrent, time.monotonic() + args.seconds
    statuses: list[int] = []
    latencies: list[float] = []

    def heavy() -> None:
        while time.monotonic() < stop:
            status, took, _ = post(port, maximal)
            statuses.append(status)
            if status == 503:
                time.sleep(0.2)  # Retry-After, shortened: the clients keep the queue full

    clients = [threading.Thread(target=heavy) for _ in range(concurrent)]
    started_at = time.monotonic()
    for client in clients:
        client.start()
    time.sleep(0.5)
    while time.monotonic() < stop:
        status, took, _ = post(port, SENTENCE)
        assert status == 200, status
        latencies.append(took)
    for client in clients:
        client.join()
    elapsed = time.monotonic() - started_at
    answered = statuses.count(200) * args.budget  # tokens, about: each maximal request is just inside it
    latencies.sort()
    return {
        "concurrent_maximal_clients": concurrent,
        "seconds": round(elapsed, 1),
        "sentence_requests": len(latencies),
        "sentence_p50_seconds": round(statistics.median(latencies), 3),
        "sentence_p99_seconds": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 3),
        "sentence_max_seconds": round(latencies[-1], 3),
        "maximal_answered": statuses.count(200),
        "maximal_refused_503": statuses.count(503),
        "maximal_other": len(statuses) - statuses.count(200) - statuses.count(503),
        "answered_tokens_per_second": round(answered / elapsed),
        "wait_bound_seconds": None if queued is None else round(queued / max(answered / elapsed, 1e-9), 2),
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
                        "behind_over_budget_chinese": behind(args.port, "東京" * (args.words // 2), 2.0),
                        "behind_over_budget_thai": behind(args.port, "ภาษาไทย" * (args.words // 7), 2.0),
                    }
                )
            queue = {
                "max_queued_tokens": args.queued,
                **bystander(args.port, " ".join(["Oslo"] * words), args, args.queued),
            }
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
        unbounded = None
        if args.unbounded:  # the same clients with the queue's bound lifted: what it prevents
            lifted = ("--max_queued_tokens", str(10**12))
            server = start_server("bertkit-torch", task, args.port, python, lifted)
            try:
                post(args.port, SENTENCE)
                unbounded = {
                    "max_queued_tokens": 10**12,
                    **bystander(args.port, " ".join(["Oslo"] * words), args, None),
                }
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=120)
    return {
        "bertkit": str(folder),
        "commit": described.stdout.strip(),
        "maximal_request_words": words,
        "rounds": rounds,
        "queue": queue,
        **({"queue_unbounded": unbounded} if unbounded else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=int, default=16384, help="--max_request_tokens (the default)")
    parser.add_argument("--words", type=int, default=190_000, help="words of the request over the budget")
    parser.add_argument("--port", type=int, default=8731)
    parser.add_argument("--concurrent", type=int, default=8, help="clients sending maximal requests back to back")
    parser.add_argument("--queued", type=int, default=32768, help="bertkit serve's --max_queued_tokens (its default)")
    parser.add_argument("--unbounded", action="store_true", help="also measure the clients with the bound lifted")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long they send")
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
        "concurrent": args.concurrent,
        "seconds": args.seconds,
        "over_budget_request_words": args.words,
        "repeats": args.repeats,
        **sides,
    }
    with atomic_path(args.out) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
