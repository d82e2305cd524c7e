"""Seconds for the bytes of a weight sync to go from one actor to another: Ray's object store vs
Ray Direct Transport (RDT) over gloo, on one node and between two nodes.

Why (issue 29 item 3, docs/throughput.md): the weight sync sends the learner's weights in the engine's
dtype through the object store (the learner puts them once; each runner maps them). RDT
(``@ray.method(tensor_transport="gloo")``) is Ray's other route for CPU tensors: the producer keeps the
tensors and a gloo send/receive moves them when the consumer asks. This times only that hop, for
``--megabytes`` of bfloat16 in tensors of the 0.5B model's layer sizes, median of ``--repeats`` after
a warm-up: a producer actor makes fresh tensors (not timed) and hands out a reference; the timed span is
the consumer task's (its argument resolved, then one read of every tensor, a checksum), ended when it
answers.

Run: ``nice -n 10 python benchmarks/weight_transport.py [--megabytes 988] [--repeats 5]``. Writes
docs/results/weight_transport.csv and prints the table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import ray
import torch
from ray.experimental.collective import create_collective_group, destroy_collective_group
from results_file import write_rows  # benchmarks/ is on sys.path when run as a script
from weight_sync import LAYOUTS, RUNNER_NODE, start_ray

from hgpo_rllib.help_text import doc_summary

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "weight_transport.csv"
TENSOR_MB = 4  # the 0.5B model's linear layers are 1.6-8.7 MB in bfloat16
ROUTES = ("object-store", "rdt-gloo")


@ray.remote(num_cpus=1)
class Peer:
    """Both ends: an actor takes part in RDT only if its class has a method with a tensor transport
    (a receiver without one waits forever, ray issue 66264)."""

    def __init__(self, megabytes: int) -> None:
        self.count = max(1, megabytes // TENSOR_MB)
        self.tensors: dict[str, torch.Tensor] = {}

    def refresh(self) -> None:
        numel = TENSOR_MB * (1 << 20) // 2
        self.tensors = {f"w{i}": torch.randn(numel).to(torch.bfloat16) for i in range(self.count)}

    def object_store(self) -> ray.ObjectRef:
        arrays = {name: t.view(torch.int16).numpy() for name, t in self.tensors.items()}
        return ray.put(arrays)

    @ray.method(tensor_transport="gloo")
    def direct(self) -> dict[str, torch.Tensor]:
        return self.tensors

    def take(self, values: dict[str, Any]) -> float:
        """Ray resolves the argument first (a two-sided RDT transfer happens only for arguments)."""
        tensors = [torch.as_tensor(v).view(torch.int16) for v in values.values()]
        return float(sum(t.sum(dtype=torch.int64) for t in tensors))


def measure(route: str, layout: str, megabytes: int, repeats: int) -> dict[str, Any]:
    place = {"resources": {RUNNER_NODE: 1}} if layout == "two-node" else {}
    producer, consumer = Peer.remote(megabytes), Peer.options(**place).remote(megabytes)
    group = None
    if route == "rdt-gloo":
        group = create_collective_group([producer, consumer], backend="torch_gloo")
    seconds = []
    for i in range(repeats + 1):  # the first one warms up
        ray.get(producer.refresh.remote())
        ref = ray.get(producer.object_store.remote()) if route == "object-store" else producer.direct.remote()
        ray.wait([ref], fetch_local=False) if route == "object-store" else None
        start = time.perf_counter()
        ray.get(consumer.take.remote(ref))
        if i:
            seconds.append(time.perf_counter() - start)
        del ref
    if group is not None:
        destroy_collective_group(group)
    ray.kill(producer)
    ray.kill(consumer)
    median = statistics.median(seconds)
    nbytes = max(1, megabytes // TENSOR_MB) * TENSOR_MB * (1 << 20)
    return {
        "layout": layout,
        "route": route,
        "bytes": nbytes,
        "median_s": round(median, 3),
        "min_s": round(min(seconds), 3),
        "max_s": round(max(seconds), 3),
        "GB_per_s": round(nbytes / median / 1e9, 3),
        "repeats": repeats,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--megabytes", type=int, default=988)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    for layout in LAYOUTS:
        cluster = start_ray(layout)
        try:
            rows += [measure(route, layout, args.megabytes, args.repeats) for route in ROUTES]
        finally:
            ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
    print(f"\n{'layout':<10}{'route':<14}{'MB':>8}{'median s':>10}{'GB/s':>8}")
    for r in rows:
        megabytes = r["bytes"] / 1e6
        print(
            f"{r['layout']:<10}{r['route']:<14}{megabytes:>8.0f}{r['median_s']:>10.3f}{r['GB_per_s']:>8.2f}"
        )
    write_rows(args.output, rows)


if __name__ == "__main__":
    main()
