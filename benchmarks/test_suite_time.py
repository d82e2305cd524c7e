"""How long the README's test command takes, and what it ran: ``docs/results/test_suite_time.md``.

Run: ``python benchmarks/test_suite_time.py [--runs N] [--checkout DIR] [--baseline DIR] [-- pytest
args]`` from the repository root (default: the README's plain ``python -m pytest``, which leaves out
``@pytest.mark.slow``). It records the wall time of each run and their median, the counts of passed /
skipped / failed tests from pytest's JUnit XML report, and the slowest tests. ``--baseline DIR`` (another
checkout, e.g. ``git worktree add DIR <commit>``) runs that checkout's suite too, alternating with this
one run by run, so that both medians come from the same stretch of machine time and their ratio can
be quoted. Run it on an otherwise idle machine: the figure is the suite's, not the neighbours'.

A run of the suite takes 10-25 minutes on 2 cores, so the benchmark resumes: every finished run is
appended to ``docs/results/test_suite_time_runs.jsonl`` under its checkout's commit, ``--runs N`` runs
only what is missing for N runs of each commit, and the table is rewritten after every run from all
recorded runs of those commits. Ctrl-C loses only the run in progress.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from results_file import RESULTS_DIR, write_result

from hgpo_rllib.help_text import doc_summary

ROOT = Path(__file__).resolve().parents[1]
RUNS_FILE = RESULTS_DIR / "test_suite_time_runs.jsonl"


@dataclass
class SuiteRun:
    commit: str
    wall_s: float
    status: int
    passed: int
    skipped: int
    failed: int
    slowest: list[tuple[str, float]]
    when: str = ""
    load_end: float = 0.0
    #: Why this run's time is not an idle machine's, if it is not.
    note: str = field(default="")


def commit_of(checkout: Path) -> str:
    """The checkout's commit (a run of a tree with uncommitted changes is refused: it names nothing)."""
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=checkout, capture_output=True, text=True
    ).stdout.strip()
    if dirty:
        raise SystemExit(f"{checkout} has uncommitted changes; time a clean checkout (git worktree add)")
    return subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], cwd=checkout, capture_output=True, text=True, check=True
    ).stdout.strip()


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
        commit_of(checkout),
        round(wall_s, 1),
        status,
        counts["tests"] - failed - counts["skipped"],
        counts["skipped"],
        failed,
        slowest,
        when=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        load_end=round(os.getloadavg()[0], 2),
    )


def recorded_runs() -> list[SuiteRun]:
    if not RUNS_FILE.is_file():
        return []
    return [SuiteRun(**json.loads(line)) for line in RUNS_FILE.read_text().splitlines() if line.strip()]


def summary_line(label: str, runs: list[SuiteRun]) -> str:
    if not runs:
        return f"| {label} | | (no run yet) | | | | |"
    walls = ", ".join(f"{r.wall_s:.0f}" + (" *" if r.note else "") for r in runs)
    last = runs[-1]
    return (
        f"| {label} | {statistics.median(r.wall_s for r in runs):.0f} | {walls} | {last.passed} | "
        f"{last.skipped} | {last.failed} | {last.status} |"
    )


def table(checkouts: dict[str, tuple[Path, str]], runs: list[SuiteRun]) -> str:
    by_label = {label: [r for r in runs if r.commit == commit] for label, (_, commit) in checkouts.items()}
    lines = [
        "| checkout (commit) | median wall (s) | runs (s) | passed | skipped | failed | pytest status |",
        "|---|---:|---|---:|---:|---:|---:|",
        *(summary_line(f"{label} ({checkouts[label][1]})", r) for label, r in by_label.items()),
    ]
    if len(by_label) == 2 and all(by_label.values()):
        ours, theirs = (statistics.median(r.wall_s for r in rs) for rs in by_label.values())
        lines += ["", f"Ratio of medians, this checkout / baseline: {ours / theirs:.3f}."]
    notes = [f"- {r.commit} at {r.when}: {r.note}" for rs in by_label.values() for r in rs if r.note]
    if notes:
        lines += ["", "\\* not an idle machine:", *notes]
    ours = by_label["this checkout"]
    if ours and ours[-1].slowest:
        lines += [
            "",
            "| slowest tests (this checkout, last run) | seconds |",
            "|---|---:|",
            *(f"| {name} | {seconds:.1f} |" for name, seconds in ours[-1].slowest),
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--runs", type=int, default=1, help="runs per checkout to have recorded (median)")
    parser.add_argument(
        "--checkout", type=Path, default=ROOT, help="the checkout to time (default: this repository)"
    )
    parser.add_argument("--baseline", type=Path, help="another checkout to time alternately with this one")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    this = args.checkout.resolve()
    checkouts = {"this checkout": (this, commit_of(this))}
    if args.baseline:
        checkouts["baseline"] = (args.baseline.resolve(), commit_of(args.baseline.resolve()))
    try:
        for i in range(args.runs):
            for label, (checkout, commit) in checkouts.items():
                done = sum(r.commit == commit for r in recorded_runs())
                if done > i:
                    continue
                print(f"run {i + 1}/{args.runs}: {label} ({commit})", flush=True)
                run = run_suite(checkout, args.pytest_args)
                with RUNS_FILE.open("a") as out:
                    out.write(json.dumps(asdict(run)) + "\n")
                write_result("test_suite_time", "Test-suite time", table(checkouts, recorded_runs()))
    except KeyboardInterrupt:
        raise SystemExit(
            f"\ninterrupted; finished runs are kept in {RUNS_FILE}: rerun the same command"
        ) from None
    print(table(checkouts, recorded_runs()))
    write_result("test_suite_time", "Test-suite time", table(checkouts, recorded_runs()))


if __name__ == "__main__":
    main()
