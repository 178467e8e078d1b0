"""Write ``tests/durations.json`` (the order ``conftest.pytest_collection_modifyitems`` hands tests
out in) from the output of whole runs of the suite with ``--durations=0``, the default run's and
the system tests' (a test in both takes the later log's times):

    pytest --durations=0 -p no:cacheprovider > suite.log
    pytest -m system --durations=0 -p no:cacheprovider > system.log
    python -m tests.durations suite.log system.log

Per module the sum of its tests' setup, call and teardown times; per test of ``QUICK_LIMIT`` seconds
or more its own (``conftest`` marks those ``slow``: the quick subset ``-m "not slow"`` leaves them out).
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICK_LIMIT = 1.0
"""Seconds (setup, call and teardown, in a whole run on 2 workers) from which a test is left out of the
quick subset."""
LINE = re.compile(r"^([0-9.]+)s (?:call|setup|teardown)\s+(\S+)$")


def durations(*logs: str) -> tuple[dict[str, float], dict[str, float]]:
    """(seconds per module, seconds per test) of ``--durations=0`` reports; a test in several
    takes the last one's."""
    tests: dict[str, float] = {}
    for log in logs:
        found_here: dict[str, float] = defaultdict(float)
        for line in log.splitlines():
            found = LINE.match(line.strip())
            if found:
                found_here[found[2]] += float(found[1])
        tests |= found_here
    modules: dict[str, float] = defaultdict(float)
    for test, seconds in tests.items():
        modules[test.partition("::")[0]] += seconds
    return dict(modules), tests


def main(*log_files: str) -> None:
    import torch

    texts = [Path(log_file).read_text(encoding="utf-8") for log_file in log_files]
    modules, tests = durations(*texts)
    if not modules:
        sys.exit(f"{', '.join(log_files)}: no --durations=0 lines (run pytest --durations=0 and pass its output)")
    workers = re.search(r"created: (\d+)/\d+ workers", texts[0])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    result = {
        "command": "pytest --durations=0 and pytest -m system --durations=0, then python -m tests.durations LOG "
        "SYSTEM_LOG: per module, the sum of its tests' setup, call and teardown times; per test of QUICK_LIMIT s "
        "or more, its own",
        "commit": commit.stdout.strip(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}, "
        f"{workers[1] if workers else 1} xdist workers",
        "modules": {k: round(v, 1) for k, v in sorted(modules.items(), key=lambda kv: -kv[1])},
        "tests": {k: round(v, 1) for k, v in sorted(tests.items(), key=lambda kv: -kv[1]) if v >= QUICK_LIMIT},
    }
    (ROOT / "tests" / "durations.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:])
