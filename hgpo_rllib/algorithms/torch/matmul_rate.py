"""This machine's matmul rate at a model's shapes: the denominator of the learner's peak fraction.

Plain torch (no RLlib): ``benchmarks/machine_limit.py`` times every matmul shape of a model with it,
and the learner probes its model's main shape once when it starts (:func:`probe_gflops`).
"""

from __future__ import annotations

import functools
import math
import statistics
import time

import torch

from hgpo_rllib.learner_flops import ModelShape

#: Tokens of the learner's probe: a micro-batch of 4 rows of 512 tokens.
PROBE_TOKENS = 2048
#: Each timed repeat runs the product enough times to last about this long (timer noise).
_REPEAT_SECONDS = 0.02


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_gflops(
    m: int, k: int, n: int, dtype: torch.dtype, device: str | torch.device = "cpu", repeats: int = 5
) -> float:
    """GFLOP/s (2 m k n per product) of ``[m, k] x [k, n]`` in ``dtype``: the median of ``repeats``
    timed repeats after a warm-up call, on torch's current threads."""
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(m, k, generator=generator, device=device).to(dtype)
    b = torch.randn(k, n, generator=generator, device=device).to(dtype)
    out = torch.empty(m, n, dtype=dtype, device=device)
    start = time.perf_counter()
    torch.matmul(a, b, out=out)  # warm-up: kernel choice, weight packing, caches
    _sync(device)
    calls = max(1, math.ceil(_REPEAT_SECONDS / max(time.perf_counter() - start, 1e-9)))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            torch.matmul(a, b, out=out)
        _sync(device)
        seconds.append((time.perf_counter() - start) / calls)
    return 2 * m * k * n / statistics.median(seconds) / 1e9


def probe_gflops(shape: ModelShape, dtype: torch.dtype, device: str) -> float:
    """The rate at ``shape``'s main matmul (the MLP's ``[tokens, hidden] x [hidden, intermediate]``
    over :data:`PROBE_TOKENS` tokens), 3 repeats; measured once per process and thread count."""
    return _probe(shape.hidden, shape.intermediate, dtype, device, torch.get_num_threads())


@functools.cache
def _probe(hidden: int, intermediate: int, dtype: torch.dtype, device: str, threads: int) -> float:
    return matmul_gflops(PROBE_TOKENS, hidden, intermediate, dtype, device, repeats=3)
