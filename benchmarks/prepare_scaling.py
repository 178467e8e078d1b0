"""Memory of ``bertkit prepare`` does not grow with the corpus: prepare the Brown corpus read 1
and K times (the same file listed K times: K x the documents), sampling the resident memory of
the whole process tree (the command and its workers) every 0.2 s.

    python benchmarks/prepare_scaling.py [--times 1 8] [--workers 2]

Writes benchmarks/results/prepare_scaling.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, write_result

CORPUS = ROOT.parent / "shared" / "data" / "corpus" / "brown.txt"
VOCAB = ROOT.parent / "shared" / "data" / "vocab" / "bert-base-cased"


def tree_rss_mb(root: int) -> float:
    """Resident memory of ``root`` and all its descendants (from /proc), in MiB."""
    parents, rss = {}, {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        pid = int(status.parent.name)
        parents[pid] = int(fields["PPid"])
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
    tree, grew = {root}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(rss.get(p, 0) for p in tree) / 1024


def measure(times: int, workers: int, out: Path) -> dict[str, float]:
    inputs = "[" + ", ".join([str(CORPUS)] * times) + "]"
    exe = Path(sys.executable).with_name("bertkit")
    command = [str(exe), "prepare", inputs, str(out), "--vocab", str(VOCAB), "--lowercase", "false"]
    command += ["--workers", str(workers), "--documents_per_shard", "250"]
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, tree_rss_mb(proc.pid))
        time.sleep(0.2)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.read()[-3000:])
    manifest = json.loads((out / "train" / "manifest.json").read_text())
    return {
        "times_the_corpus": times,
        "corpus_mb": times * CORPUS.stat().st_size / 2**20,
        "documents": manifest["documents"],
        "instances": manifest["instances"],
        "tokens": manifest["tokens"],
        "shards": len(manifest["shards"]),
        "seconds": time.perf_counter() - start,
        "peak_rss_mb_process_tree": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--times", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for times in args.times:
            runs.append(measure(times, args.workers, Path(tmp) / f"x{times}"))
            print(runs[-1], flush=True)
    write_result(ROOT / "benchmarks" / "results" / "prepare_scaling.json", {"workers": args.workers, "runs": runs})


if __name__ == "__main__":
    main()
