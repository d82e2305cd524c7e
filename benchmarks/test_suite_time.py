"""How long the README's test command takes, and what it ran: ``docs/results/test_suite_time.md``.

Run: ``python benchmarks/test_suite_time.py [pytest args]`` from the repository root (default: the
README's plain ``python -m pytest``, which leaves out ``@pytest.mark.slow``). It records the wall
time, the counts of passed / skipped / failed tests from pytest's JUnit XML report, and the slowest
tests. Run it on an otherwise idle machine: the figure is the suite's, not the neighbours'.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from results_file import write_result

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        start = time.perf_counter()
        status = subprocess.run([*command, *sys.argv[1:]], cwd=ROOT, check=False).returncode
        wall_s = time.perf_counter() - start
        suite = ET.parse(report).getroot().find("testsuite")
        cases = suite.findall("testcase")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    slowest = sorted(cases, key=lambda c: float(c.get("time", 0)), reverse=True)[:10]
    lines = [
        f"Wall time {wall_s / 60:.1f} min ({wall_s:.0f} s), pytest exit status {status}: {passed} passed, "
        f"{counts['skipped']} skipped, {counts['failures']} failed, {counts['errors']} errors.",
        "",
        "| slowest tests | seconds |",
        "|---|---:|",
        *(f"| {c.get('classname')}::{c.get('name')} | {float(c.get('time', 0)):.1f} |" for c in slowest),
    ]
    table = "\n".join(lines)
    print(table)
    write_result("test_suite_time", "Test-suite time", table)


if __name__ == "__main__":
    main()
