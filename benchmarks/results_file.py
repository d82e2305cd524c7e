"""Where a benchmark's printed table is kept: ``docs/results/<name>.md``, with the command that
produced it, the date and the machine, so every figure quoted in the README has a file behind it."""

from __future__ import annotations

import csv
import datetime
import os
import platform
import shlex
import sys
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parents[1] / "docs" / "results"


def write_result(name: str, title: str, table: str, directory: Path = RESULTS_DIR) -> Path:
    """Write ``table`` (markdown) to ``<directory>/<name>.md`` (``docs/results/`` by default) and
    return the path."""
    script = Path(sys.argv[0]).resolve()
    command = shlex.join(["python", f"benchmarks/{script.name}", *sys.argv[1:]])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    path = directory / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# {title}\n\n"
        f"Produced by `{command}` on {when}: {os.cpu_count()} CPU(s), {platform.machine()}, "
        f"Python {platform.python_version()}, load average at the end {load} "
        "(a load above the CPU count means other jobs shared the machine: wall times are pessimistic).\n\n"
        f"{table.rstrip()}\n"
    )
    print(f"written to {path}")
    return path


def write_rows(path: Path, rows: list[dict]) -> None:
    """Write a benchmark's rows (dicts with the same keys) to the CSV file ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")
