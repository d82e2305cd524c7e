"""What this CPU is and can do, read once from Linux's ``/proc/cpuinfo``: its model name and feature
flags. The run's defaults (bf16 where the CPU multiplies it natively, vLLM where it has AVX-512) and
every benchmark's record of the machine read the same lines (docs/throughput.md)."""

from __future__ import annotations

import platform
from pathlib import Path

CPUINFO = "/proc/cpuinfo"
#: The flags with which a CPU multiplies bf16 natively; without them torch emulates it, slower than fp32.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def _first_value(key: str, cpuinfo: str | Path) -> str | None:
    """The first core's value of ``key``; None where the file cannot be read (not Linux) or lacks it."""
    try:
        lines = Path(cpuinfo).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, separator, value = line.partition(":")
        if separator and name.strip() == key:
            return value.strip()
    return None


def cpu_flags(cpuinfo: str | Path = CPUINFO) -> frozenset[str]:
    """This CPU's feature flags (``avx512f``, ``avx512_bf16``, ...); none where they cannot be read, so
    that every choice made from them falls back to the safe one."""
    return frozenset((_first_value("flags", cpuinfo) or "").split())


def cpu_model_name(cpuinfo: str | Path = CPUINFO) -> str:
    """The CPU's model name (``AMD EPYC 7B13``); the platform's processor where cpuinfo has none."""
    return _first_value("model name", cpuinfo) or platform.processor() or platform.machine()


def cpu_has_native_bf16(cpuinfo: str | Path = CPUINFO) -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512_BF16 or AMX): there bf16 is ~2.7x fp32 (a
    2048x576x1536 matmul, docs/models.md); elsewhere torch emulates it, slower than fp32."""
    return not cpu_flags(cpuinfo).isdisjoint(NATIVE_BF16_FLAGS)
