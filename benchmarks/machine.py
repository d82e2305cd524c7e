"""The machine a benchmark ran on, as every result file records it beside its timings: the CPU's
model name, the flags that decide its matmul speed (float32 by AVX2/FMA/AVX-512; bfloat16 is native
only with AVX512-BF16 or AMX-BF16, emulated otherwise), the cores and the load (``uptime``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hgpo_rllib.cpu_features import CPUINFO, cpu_flags, cpu_model_name

#: The /proc/cpuinfo flags that decide CPU matmul speed in float32 and bfloat16.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_description(cpuinfo: str | Path = CPUINFO) -> tuple[str, list[str]]:
    """The CPU's model name and which of :data:`SPEED_FLAGS` it has."""
    flags = cpu_flags(cpuinfo)
    return cpu_model_name(cpuinfo), [flag for flag in SPEED_FLAGS if flag in flags]


def cpu_line(cpuinfo: str | Path = CPUINFO) -> str:
    """One line: the CPU's model name, the cores this process may use, and each speed flag yes/no."""
    name, flags = cpu_description(cpuinfo)
    marks = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in SPEED_FLAGS)
    return f"{name}, {len(os.sched_getaffinity(0))} cores usable; flags: {marks}"


def load() -> str:
    """The 1, 5 and 15-minute load averages."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def uptime() -> str:
    """``uptime``'s line (the load averages alone where the command is missing)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average {load()}"
