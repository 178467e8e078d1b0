"""Serving under load: ``bertkit serve`` (torch on the checkpoint; ONNX Runtime on its export)
against the same model in transformers' ``pipeline``, behind the same engine (LitServe, the same
request batching) and the same load generator, on 127.0.0.1, in one run on one machine.

MiniLM (all-MiniLM-L6-v2) is fine-tuned with the NER and SST-2 recipes for a short budget
(``onnx_int8.fine_tune``) and exported (``bertkit export``: the transformers folder the pipeline
loads, and ``model.onnx``). For each model, server and request size (1 or 32 texts per request),
``--clients`` threads send requests back to back (CoNLL-2003 ``eng.testb`` sentences, SST-2 test
sentences, in turn) until ``--texts`` texts are answered; each server gets a warm-up first. Written:
texts/s, request latency p50 / p99, errors (non-200 answers), the server's resident memory (all
its processes, proportional set size; each server runs one model process: bertkit's torch
server without ``/embed``) after start-up and at the end, and how often its answers agree with bertkit's
torch answers on the same texts (NER: the same entity spans and types; SST-2: the same label).

    BERTKIT_DATA_DIR=../shared/data python benchmarks/serve_load.py   # benchmarks/results/serve_load.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import litserve as ls
import psutil
from onnx_int8 import fine_tune
from provenance import commit, header

from bertkit.utils.io import atomic_path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "serve_load.json"
TASKS = {"ner": "recipes/ner.yaml", "sst2": "recipes/sst2.yaml"}
SERVERS = ("bertkit-torch", "bertkit-onnx", "transformers-pipeline")


def texts_of(task: str, data: Path) -> list[str]:
    """The test sentences: CoNLL-2003 eng.testb words joined by spaces; SST-2 test.tsv sentences."""
    if task == "sst2":
        lines = (data / "classification/sst2/test.tsv").read_text(encoding="utf-8").splitlines()[1:]
        return [line.split("\t")[0].strip() for line in lines if line.strip()]
    sentences, words = [], []
    for line in (data / "ner/conll2003/eng.testb").read_text(encoding="utf-8").splitlines() + [""]:
        if not line.strip() or line.startswith("-DOCSTART-"):
            if words:
                sentences.append(" ".join(words))
            words = []
        else:
            words.append(line.split()[0])
    return sentences


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, payload: Any) -> tuple[int, Any, float]:
    """(status, answer, seconds) of one POST on a new connection."""
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        connection.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    seconds = time.perf_counter() - start
    return response.status, json.loads(body) if response.status == 200 else body.decode(errors="replace"), seconds


def start_server(
    kind: str, task_dir: Path, port: int, python: str = sys.executable, options: tuple[str, ...] = ()
) -> subprocess.Popen:
    """A server of ``kind`` on ``task_dir``'s model, once /health answers; bertkit's are those of
    ``python``'s installation, with ``options`` after its command line."""
    bertkit = str(Path(python).with_name("bertkit"))
    if kind == "bertkit-torch":
        command = [bertkit, "serve", str(task_dir / "checkpoints/last.ckpt"), "--embed", "false"]  # one model process
    elif kind == "bertkit-onnx":
        command = [bertkit, "serve", str(task_dir / "export"), "--backend", "onnx"]
    else:
        command = [sys.executable, __file__, "--reference-server", str(task_dir / "export")]
    server = subprocess.Popen(  # its own process group: whatever it leaves behind is killed after it
        [*command, "--port", str(port), *options], cwd=task_dir, stderr=subprocess.DEVNULL, start_new_session=True
    )
    for _ in range(600):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return server
        except OSError:
            pass
        if server.poll() is not None:
            raise SystemExit(f"{kind} server exited with {server.returncode}")
        time.sleep(0.5)
    raise SystemExit(f"{kind} server did not answer /health in 300 s")


def _group(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except OSError:
        return None


def pss(pid: int) -> int:
    """Proportional set size of a process and all its descendants (LitServe runs several, forked:
    pages they share are counted once, split between them, not once per process as RSS would)."""
    parent = psutil.Process(pid)
    return sum(p.memory_full_info().pss for p in [parent, *parent.children(recursive=True)])


def load(port: int, texts: list[str], per_request: int, clients: int, total: int) -> dict[str, Any]:
    """``clients`` threads posting ``per_request`` texts per request until ``total`` texts."""
    requests = [
        [texts[(i * per_request + j) % len(texts)] for j in range(per_request)] for i in range(total // per_request)
    ]
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    queue = iter(requests)

    def client() -> None:
        while True:
            with lock:
                inputs = next(queue, None)
            if inputs is None:
                return
            try:
                status, answer, seconds = post(port, "/predict", {"inputs": inputs})
            except OSError as err:
                status, answer, seconds = -1, str(err), 0.0
            with lock:
                latencies.append(seconds)
                if status != 200:
                    errors.append(f"{status}: {str(answer)[:200]}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    ordered = sorted(latencies)
    return {
        "texts_per_request": per_request,
        "requests": len(requests),
        "texts": len(requests) * per_request,
        "seconds": wall,
        "texts_per_s": len(requests) * per_request / wall,
        "latency_p50_ms": 1000 * statistics.median(ordered),
        "latency_p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "errors": len(errors),
        **({"first_errors": errors[:3]} if errors else {}),  # a list: left out of the docs' table
    }


def answers_of(task: str, kind: str, records: list[Any]) -> list[Any]:
    """Comparable answers: NER entity (start, end, type) sets; SST-2 labels."""
    if task == "sst2":
        return [r["label"] for r in records]  # bertkit's record and the pipeline's both name it "label"
    if kind.startswith("bertkit"):
        return [sorted((e["start"], e["end"], e["type"]) for e in r["entities"]) for r in records]
    return [sorted((e["start"], e["end"], e["entity_group"]) for e in r) for r in records]


def measure(task: str, kind: str, task_dir: Path, texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    started = time.perf_counter()
    server = start_server(kind, task_dir, port)
    result: dict[str, Any] = {"task": task, "server": kind, "start_up_s": time.perf_counter() - started}
    try:
        sample = texts[: args.agreement]
        status, records, _ = post(port, "/predict", {"inputs": sample})  # also the warm-up
        if status != 200:
            raise SystemExit(f"{kind}: /predict answered {status}: {records}")
        result["answers"] = answers_of(task, kind, records)
        result["pss_start_mb"] = pss(server.pid) / 1e6
        result["runs"] = [load(port, texts, n, args.clients, args.texts if n > 1 else args.texts // 4) for n in (1, 32)]
        result["pss_end_mb"] = pss(server.pid) / 1e6
    finally:
        server.send_signal(signal.SIGTERM)
        result["exit_code"] = server.wait(timeout=120)
        left = [p for p in psutil.process_iter() if _group(p) == server.pid]
        result["processes_left_after_sigterm"] = len(left)  # LitServe's own shutdown leaves its workers
        for process in left:
            process.kill()
    print(json.dumps({k: v for k, v in result.items() if k != "answers"}), flush=True)
    return result


class PipelineAPI(ls.LitAPI):
    """transformers' pipeline on an export folder, batching requests as ``bertkit serve`` does."""

    def __init__(self, export: Path) -> None:
        super().__init__(max_batch_size=8, batch_timeout=0.01)  # bertkit serve's defaults
        self.export = export

    def setup(self, device: str) -> None:
        from transformers import pipeline

        config = json.loads((self.export / "config.json").read_text())
        if config["architectures"][0].endswith("TokenClassification"):
            self.pipe = pipeline("token-classification", model=str(self.export), aggregation_strategy="first")
        else:
            self.pipe = pipeline("text-classification", model=str(self.export))

    def decode_request(self, request):
        return request["inputs"]

    def batch(self, requests):
        return requests

    def predict(self, requests):
        flat = [t for texts in requests for t in texts]
        out = iter(self.pipe(flat, batch_size=32))
        return [[_plain(next(out)) for _ in texts] for texts in requests]

    def unbatch(self, outputs):
        return outputs

    def encode_response(self, output):
        return output


def reference_server(export: Path, port: int) -> None:
    ls.LitServer(PipelineAPI(export), accelerator="cpu", timeout=300).run(
        port=port, generate_client_file=False, log_level="warning"
    )


def _plain(value: Any) -> Any:
    """numpy scalars in pipeline outputs as Python numbers (JSON)."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value.item() if hasattr(value, "item") else value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-batches", type=int, default=300)
    parser.add_argument("--work", type=Path, default=Path("runs/serve_load"))
    parser.add_argument("--reuse", action="store_true", help="serve the checkpoints and exports already in --work")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads")
    parser.add_argument("--texts", type=int, default=2048, help="texts per run of 32-text requests (a quarter at 1)")
    parser.add_argument("--agreement", type=int, default=256, help="texts whose answers are compared")
    parser.add_argument("--reference-server", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference_server:
        return reference_server(args.reference_server, args.port)
    data = Path(os.environ.get("BERTKIT_DATA_DIR", ""))
    if not (data / "ner/conll2003").is_dir():
        raise SystemExit("set BERTKIT_DATA_DIR to the folder with ner/conll2003 and classification/sst2")
    measured = commit()
    rows = []
    for task in args.tasks:
        recipe = TASKS[task]
        task_dir = (args.work / task).resolve()
        if not (args.reuse and (task_dir / "export/bertkit.json").is_file()):
            checkpoint = fine_tune(recipe, task_dir, args.train_batches)
            bertkit = str(Path(sys.executable).with_name("bertkit"))
            subprocess.run([bertkit, "export", str(checkpoint), str(task_dir / "export")], check=True)
        texts = texts_of(task, data)
        results = [measure(task, kind, task_dir, texts, args) for kind in SERVERS]
        reference = results[0]["answers"]
        for result in results:
            agree = sum(a == b for a, b in zip(result.pop("answers"), reference, strict=True)) / len(reference)
            runs = result.pop("runs")
            rows += [{**result, **run, "agrees_with_bertkit_torch": agree} for run in runs]
    for row in rows:  # throughput over the pipeline's, same task and request size
        pipeline = next(
            r
            for r in rows
            if (r["task"], r["server"], r["texts_per_request"]) == (row["task"], SERVERS[-1], row["texts_per_request"])
        )
        row["x_pipeline"] = row["texts_per_s"] / pipeline["texts_per_s"]
    import onnxruntime
    import torch
    import transformers

    report = header(
        "Serving under load: bertkit serve (torch, ONNX) vs transformers' pipeline behind LitServe",
        "BERTKIT_DATA_DIR=../shared/data python benchmarks/serve_load.py",
        measured,
        cpu_threads=torch.get_num_threads(),
        torch=torch.__version__,
        onnxruntime=onnxruntime.__version__,
        transformers=transformers.__version__,
    )
    report["settings"] = {k: str(v) for k, v in vars(args).items() if k not in ("reference_server", "port")}
    report["model"] = "all-MiniLM-L6-v2 fine-tuned for one epoch of --train-batches batches with each recipe"
    report["rows"] = rows
    with atomic_path(OUT) as tmp:
        tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
