"""What handing an update's freed heap memory back costs (``hgpo_rllib.host_memory``).

Run: ``python benchmarks/host_memory_release.py [--gb 4] [--repeats 5]``. Writes
``docs/results/host_memory_release.md``. Each repeat, in a fresh process, fills ``--gb`` GB of 4 MB
tensors on the heap (as an update's activations, once glibc's mmap threshold has risen past them),
frees them below a live one, then fills the same amount again: with the freed pages kept (glibc's
default) the second fill reuses resident pages; with ``release_freed_memory()`` between, the call
returns them and the second fill faults them in anew. The call and that difference, per GB, are the
release's cost; a CPU update of the real model frees about 8 GB (docs/reliability.md). Run it on idle
cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from machine import cpu_line, uptime
from results_file import write_result
from tqdm import tqdm

from hgpo_rllib.help_text import doc_summary

CHILD = """
import json, sys, time
import torch
from hgpo_rllib.host_memory import release_freed_memory

chunks, release = int(sys.argv[1]), sys.argv[2] == "released"

def rss_gb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**30

def fill():
    return [torch.ones(2**20) for _ in range(chunks)]  # 4 MB each, written

torch.ones(6 * 2**20)  # a 24 MB chunk freed: glibc's mmap threshold rises past 4 MB
held = fill()
live = torch.ones(2**20)  # above them: the heap's top cannot shrink
del held
start = time.perf_counter()
released = release_freed_memory() if release else False
call = time.perf_counter() - start
between = rss_gb()
start = time.perf_counter()
held = fill()
print(json.dumps({"call_s": call, "fill_s": time.perf_counter() - start, "rss_between_gb": between,
                  "released": released}))
"""
MODES = ("kept", "released")


def run(chunks: int, mode: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(chunks), mode], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"host_memory_release: the {mode} child failed: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--gb", type=float, default=4.0, help="GB freed and filled again (4)")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per mode (5)")
    args = parser.parse_args()
    chunks = int(args.gb * 256)
    before = uptime()
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for _ in tqdm(range(args.repeats), desc="repeats", unit="pair"):
        for mode in MODES:  # alternating, so a change of load falls on both
            runs[mode].append(run(chunks, mode))
    gb = chunks / 256
    rows = [
        "| freed pages | the call (s) | resident between (GB) | second fill (s) | per GB (s) |",
        "|---|--:|--:|--:|--:|",
    ]
    fills, calls = {}, {}
    for mode in MODES:
        fills[mode] = statistics.median(r["fill_s"] for r in runs[mode])
        call = calls[mode] = statistics.median(r["call_s"] for r in runs[mode])
        between = statistics.median(r["rss_between_gb"] for r in runs[mode])
        rows.append(f"| {mode} | {call:.3f} | {between:.2f} | {fills[mode]:.3f} | {fills[mode] / gb:.3f} |")
    cost = (calls["released"] + fills["released"] - fills["kept"]) / gb
    text = (
        f"CPU: {cpu_line()}.\n\n`uptime` before: {before}; after: {uptime()}.\n\n"
        f"{gb:.2f} GB in 4 MB tensors, medians of {args.repeats} fresh processes per mode:\n\n"
        + "\n".join(rows)
        + f"\n\nReleasing costs **{cost:.3f} s per GB**, the call and the page faults when the memory is "
        f"filled again: about {8 * cost:.1f} s for the 8 GB a real-model CPU update frees.\n"
    )
    print(text)
    write_result("host_memory_release", "Handing an update's freed heap memory back: its cost", text)


if __name__ == "__main__":
    main()
