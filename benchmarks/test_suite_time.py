"""How long the README's test command takes, and what it ran: ``docs/results/test_suite_time.md``.

Run: ``python benchmarks/test_suite_time.py [--runs N] [--baseline DIR] [-- pytest args]`` from the
repository root (default: the README's plain ``python -m pytest``, which leaves out
``@pytest.mark.slow``). It records the wall time of each run and their median, the counts of passed /
skipped / failed tests from pytest's JUnit XML report, and the slowest tests. ``--baseline DIR`` (another
checkout, e.g. ``git worktree add DIR <commit>``) runs that checkout's suite too, alternating with this
one run by run, so that both medians come from the same stretch of machine time and their ratio can
be quoted. Run it on an otherwise idle machine: the figure is the suite's, not the neighbours'.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from results_file import write_result

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class SuiteRun:
    wall_s: float
    status: int
    passed: int
    skipped: int
    failed: int
    slowest: list[tuple[str, float]]


def run_suite(checkout: Path, pytest_args: list[str]) -> SuiteRun:
    """The checkout's default test suite in a fresh process, with its own package first on the path."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        start = time.perf_counter()
        status = subprocess.run([*command, *pytest_args], cwd=checkout, env=env, check=False).returncode
        wall_s = time.perf_counter() - start
        suite = ET.parse(report).getroot().find("testsuite")
        cases = suite.findall("testcase")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failed = counts["failures"] + counts["errors"]
    slowest = sorted(
        ((f"{c.get('classname')}::{c.get('name')}", float(c.get("time", 0))) for c in cases),
        key=lambda item: -item[1],
    )[:10]
    return SuiteRun(
        wall_s, status, counts["tests"] - failed - counts["skipped"], counts["skipped"], failed, slowest
    )


def summary_line(label: str, runs: list[SuiteRun]) -> str:
    walls = ", ".join(f"{r.wall_s:.0f}" for r in runs)
    last = runs[-1]
    return (
        f"| {label} | {statistics.median(r.wall_s for r in runs):.0f} | {walls} | {last.passed} | "
        f"{last.skipped} | {last.failed} | {last.status} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=1, help="back-to-back runs per checkout (median reported)"
    )
    parser.add_argument("--baseline", type=Path, help="another checkout to time alternately with this one")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    checkouts = {"this checkout": ROOT}
    if args.baseline:
        checkouts["baseline " + str(args.baseline)] = args.baseline.resolve()
    runs: dict[str, list[SuiteRun]] = {label: [] for label in checkouts}
    for i in range(args.runs):
        for label, checkout in checkouts.items():
            print(f"run {i + 1}/{args.runs}: {label}", flush=True)
            runs[label].append(run_suite(checkout, args.pytest_args))
    lines = [
        "| checkout | median wall (s) | runs (s) | passed | skipped | failed | pytest status |",
        "|---|---:|---|---:|---:|---:|---:|",
        *(summary_line(label, r) for label, r in runs.items()),
    ]
    if args.baseline:
        ours, theirs = (statistics.median(r.wall_s for r in rs) for rs in runs.values())
        lines += ["", f"Ratio of medians, this checkout / baseline: {ours / theirs:.3f}."]
    lines += [
        "",
        "| slowest tests (this checkout, last run) | seconds |",
        "|---|---:|",
        *(f"| {name} | {seconds:.1f} |" for name, seconds in runs["this checkout"][-1].slowest),
    ]
    table = "\n".join(lines)
    print(table)
    write_result("test_suite_time", "Test-suite time", table)


if __name__ == "__main__":
    main()
