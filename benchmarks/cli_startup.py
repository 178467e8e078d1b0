"""Start-up time of ``bertkit``'s light commands (``--help``, ``plugins``, each command's
``--help``, a recipe mistake) in fresh processes, and of the imports they avoid (torch;
Lightning), measured in the same run on the same machine. The median of ``--repeat`` runs each.

    python benchmarks/cli_startup.py    # writes benchmarks/results/cli_startup.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from provenance import commit, header

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "cli_startup.json"
BERTKIT = str(Path(sys.executable).with_name("bertkit"))
COMMANDS = [
    ["--help"],
    ["plugins"],
    ["fit", "--help"],
    ["predict", "--help"],
    ["export", "--help"],
    ["embed", "--help"],
    ["prepare", "--help"],
    ["fit", "--config", "recipes/nope.yaml"],
]
IMPORTS = {
    "python -c 'import torch'": "import torch",
    "python -c 'import pytorch_lightning'": "import pytorch_lightning",
}


def seconds(cmd: list[str], repeat: int) -> float:
    """Median wall seconds of ``cmd`` run ``repeat`` times from the repository root."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    measured = commit()
    runs = []
    for cmd in COMMANDS:
        runs.append({"command": "bertkit " + " ".join(cmd), "seconds": round(seconds([BERTKIT, *cmd], args.repeat), 2)})
        print(runs[-1], flush=True)
    for name, code in IMPORTS.items():
        runs.append({"command": name, "seconds": round(seconds([sys.executable, "-c", code], args.repeat), 2)})
        print(runs[-1], flush=True)
    result = header(
        "bertkit start-up: light commands against the imports they avoid (median wall seconds)",
        "python benchmarks/cli_startup.py",
        measured,
    )
    result |= {"repeat": args.repeat, "runs": runs}
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
