"""benchmarks/results_file.py: a result file is replaced only by a rerun of the command that wrote it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import benchmark_module

results_file = benchmark_module("results_file")


def run_as(monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", ["benchmarks/iteration_profile.py", *args])


def test_a_rerun_replaces_its_own_result_and_another_command_writes_beside_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_as(monkeypatch, "--variants", "vllm", "default")
    first = results_file.write_result("profile", "first", "| a |", tmp_path)
    assert first == tmp_path / "profile.md"
    assert results_file.write_result("profile", "rerun", "| b |", tmp_path) == first
    assert first.read_text().startswith("# rerun\n")
    # Same name, settings the name does not show: the first run's file is kept.
    run_as(monkeypatch, "--config", '{"group_size": 4}', "--variants", "vllm", "default")
    second = results_file.write_result("profile", "other", "| c |", tmp_path)
    assert second == tmp_path / "profile-2.md"
    assert first.read_text().startswith("# rerun\n") and second.read_text().startswith("# other\n")
    assert f"kept {first}: another command produced it" in capsys.readouterr().out
    assert results_file.write_result("profile", "other again", "| d |", tmp_path) == second
    run_as(monkeypatch, "--iterations", "5")
    assert results_file.write_result("profile", "third", "| e |", tmp_path) == tmp_path / "profile-3.md"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile-2.md", "profile-3.md", "profile.md"]
