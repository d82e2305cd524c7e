"""Handing freed heap memory back: tensors of a few MB, once glibc's mmap threshold has risen past
them (as after an update's first large free), live on the heap, and those freed between live ones stay
resident until ``release_freed_memory`` returns their pages."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hgpo_rllib import host_memory

CHILD = """
import torch
from hgpo_rllib.host_memory import release_freed_memory

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

torch.ones(24 * 2**20 // 4)  # a large mmapped chunk freed: glibc raises its mmap threshold past 4 MB
held = [torch.ones(4 * 2**20 // 4) for _ in range(100)]  # 400 MB on the heap, one after another
before = rss_mb()
del held[::2]  # 200 MB freed in holes between live tensors: the heap's top cannot shrink
freed = rss_mb()
released = release_freed_memory()
print(before, freed, rss_mb(), released)
"""


def test_freed_heap_pages_stay_resident_until_released() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
    before, freed, after, released = out.split()
    assert float(freed) > float(before) - 20  # 200 MB freed, yet still resident
    assert float(after) < float(freed) - 180 and released == "True"


def test_without_malloc_trim_nothing_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """musl or macOS: the call is absent, and the learner goes on."""
    monkeypatch.setattr(host_memory, "_c_library", lambda: None)
    assert host_memory.release_freed_memory() is False
