"""The CPU's model name and flags, read from ``/proc/cpuinfo``: the run's bf16 default follows them,
and an unreadable file falls back to the safe choice."""

from __future__ import annotations

from pathlib import Path

from hgpo_rllib.cpu_features import cpu_flags, cpu_has_native_bf16, cpu_model_name

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16

processor\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16
"""


def test_the_first_cores_model_name_and_flags_are_read(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    assert cpu_model_name(cpuinfo) == "AMD EPYC 7B13"
    assert cpu_flags(cpuinfo) == {"fpu", "sse2", "avx2", "fma", "avx512f", "avx512_bf16"}
    assert "AuthenticAMD" not in cpu_flags(cpuinfo)  # only the flags line counts


def test_bf16_is_native_only_with_its_own_extension(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw\n")
    assert not cpu_has_native_bf16(cpuinfo)  # AVX-512 without its bf16 extension
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16\n")
    assert cpu_has_native_bf16(cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse amx_bf16\n")
    assert cpu_has_native_bf16(cpuinfo)


def test_an_unreadable_cpuinfo_has_no_flags_and_the_platforms_name(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert cpu_flags(missing) == frozenset() and not cpu_has_native_bf16(missing)
    assert cpu_model_name(missing)  # the platform's processor or machine, never empty
