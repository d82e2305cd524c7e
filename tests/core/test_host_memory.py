"""Handing freed heap memory back where the C library cannot: nothing happens. On glibc, what it
returns is checked with the benchmark's scenario (tests/benchmarks/test_host_memory_release_benchmark.py)."""

from __future__ import annotations

import pytest

from hgpo_rllib import host_memory


def test_without_malloc_trim_nothing_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """musl or macOS: the call is absent, and the learner goes on."""
    monkeypatch.setattr(host_memory, "_c_library", lambda: None)
    assert host_memory.release_freed_memory() is False
