"""Checks of ``benchmarks/machine.py``: what a result file records of the CPU it ran on."""

from __future__ import annotations

import os
from pathlib import Path

from helpers import benchmark_module

machine = benchmark_module("machine")

CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma avx512f\n"


def test_the_cpu_is_its_model_name_and_the_speed_flags_it_has(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    assert machine.cpu_description(cpuinfo) == ("AMD EPYC 7B13", ["avx2", "fma", "avx512f"])
    cores = len(os.sched_getaffinity(0))
    assert machine.cpu_line(cpuinfo) == (
        f"AMD EPYC 7B13, {cores} cores usable; flags: avx2 yes, fma yes, avx512f yes, avx512_bf16 no, "
        "amx_bf16 no"
    )


def test_the_load_is_three_averages() -> None:
    assert len(machine.load().split("/")) == 3 and "load average" in machine.uptime()
