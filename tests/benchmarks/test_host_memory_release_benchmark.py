"""Checks of ``benchmarks/host_memory_release.py``'s scenario, which is also the check of
``hgpo_rllib.host_memory`` on glibc: 4 MB tensors, once glibc's mmap threshold has risen past them (as
after an update's first large free), live on the heap, and 200 MB of them freed below a live one stay
resident until ``release_freed_memory`` returns their pages."""

from __future__ import annotations

from helpers import benchmark_module

bench = benchmark_module("host_memory_release")


def test_freed_heap_pages_stay_resident_until_released() -> None:
    kept, released = (bench.run(chunks=50, mode=mode) for mode in bench.MODES)
    assert kept["released"] is False and released["released"] is True
    # 200 MB freed: resident without the call, returned with it.
    assert released["rss_between_gb"] < kept["rss_between_gb"] - 0.18
