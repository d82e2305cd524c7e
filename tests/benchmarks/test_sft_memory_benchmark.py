"""Checks of ``benchmarks/sft_memory.py`` on the tiny model: one side measured in this process, and
(slow) the whole table, each side in a process of its own."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from helpers import benchmark_module

bench = benchmark_module("sft_memory")


def test_one_side_fits_the_tiny_model_and_reports_its_memory() -> None:
    args = argparse.Namespace(
        model=None, dtype="float32", batch_size=2, tokens=32, steps=1, gradient_checkpointing=True
    )
    result = bench.measure(args)
    assert set(result) == {"peak_mib", "fit_mib", "seconds_per_step", "train_loss"}
    assert result["peak_mib"] > result["fit_mib"] >= 0
    assert 7.0 < result["train_loss"] < 8.5  # about ln(2048) = 7.6: a random-init model's first loss


@pytest.mark.slow
def test_the_table_compares_both_sides_with_the_same_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["--tokens", "32", "--steps", "1", "--batch-size", "2", "--results-dir", str(tmp_path)]
    monkeypatch.setattr("sys.argv", ["sft_memory.py", *argv])
    bench.main()
    rows = (tmp_path / "sft_memory.md").read_text().splitlines()[-2:]
    assert [row.split(" | ")[0] for row in rows] == ["| no", "| yes"]
    assert rows[0].split(" | ")[-1] == rows[1].split(" | ")[-1]  # the same mean loss
