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
    """Write ``table`` (markdown) to ``<directory>/<name>.md`` (``docs/results/`` by default), or beside
    it where another command produced that file (:func:`result_path`), and return the path."""
    script = Path(sys.argv[0]).resolve()
    command = shlex.join(["python", f"benchmarks/{script.name}", *sys.argv[1:]])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    path = result_path(directory, name, command)
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


def result_path(directory: Path, name: str, command: str) -> Path:
    """``<directory>/<name>.md``, unless that file records another command (settings the name does
    not show, such as ``--config``): then the first ``<name>-<n>.md`` (n = 2, 3, ...) that is free or
    records this one. Rerunning a command replaces its own result, never another run's."""
    path, n = directory / f"{name}.md", 1
    while path.exists() and f"Produced by `{command}` on " not in path.read_text():
        n += 1
        path = directory / f"{name}-{n}.md"
    if n > 1:
        print(f"kept {directory / name}.md: another command produced it")
    return path


def write_rows(path: Path, rows: list[dict]) -> None:
    """Write a benchmark's rows (dicts with the same keys) to the CSV file ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")
