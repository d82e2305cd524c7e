"""This machine's matmul rate at a model's shapes: the denominator of the learner's peak fraction.

Plain torch (no RLlib): ``benchmarks/machine_limit.py`` times every matmul shape of a model with it,
and the learner probes its model's main shape once when it starts (:func:`probe_gflops`), in the one
dtype it computes in. Half precision on a CPU without native bfloat16 (:func:`emulated`) is converted
by torch, ~40x slower than float32 here (AMD EPYC, AVX2: 1.3 against 52 GFLOP/s at SmolLM2-135M's
MLP shape), so the probe then times fewer tokens (:func:`probe_tokens`): the rate hardly depends on
them, and 2048 tokens would take ~10-20 s.
"""

from __future__ import annotations

import functools
import math
import statistics
import time

import torch

from hgpo_rllib.cpu_features import cpu_has_native_bf16
from hgpo_rllib.model_shape import ModelShape

#: Tokens of the learner's probe: a micro-batch of 4 rows of 512 tokens.
PROBE_TOKENS = 2048
#: The fewest tokens a probe or an emulated benchmark product times.
MIN_PROBE_TOKENS = 16
#: A CPU probe's product is cut to about this many GFLOP (SmolLM2-135M's 3.6 keeps 2048 tokens; a
#: 1.5B model's MLP takes ~145): ~0.1 s each at this CPU's float32 rate.
CPU_PROBE_GFLOP = 4.0
#: An emulated probe's product (:func:`emulated`): ~0.2 s each at ~1.3 GFLOP/s, 4 of them with the warm-up.
EMULATED_PROBE_GFLOP = 0.25
#: Each timed repeat runs the product enough times to last about this long (timer noise).
_REPEAT_SECONDS = 0.02


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def emulated(dtype: torch.dtype, device: str | torch.device = "cpu") -> bool:
    """Whether torch emulates ``dtype``'s matmuls on ``device``: bfloat16 (and float16, which no CPU
    without native bfloat16 has either) on a CPU without AVX512_BF16 or AMX
    (:func:`~hgpo_rllib.cpu_features.cpu_has_native_bf16`)."""
    half = dtype in (torch.bfloat16, torch.float16)
    return half and torch.device(device).type == "cpu" and not cpu_has_native_bf16()


def emulation_note(dtype: torch.dtype, device: str | torch.device, doing: str) -> str | None:
    """The line to print where ``doing`` ("the policy plays", "the learner trains") runs in ``dtype``
    on a ``device`` that emulates it (:func:`emulated`): silently, it would only be slow; None elsewhere."""
    if not emulated(dtype, device):
        return None
    name = str(dtype).removeprefix("torch.")
    return (
        f"note: this CPU has no native bfloat16 (AVX512_BF16 or AMX): {doing} in {name} emulated, "
        "slower than in float32"
    )


def fitted_tokens(weights: int, tokens: int, gflop: float) -> int:
    """Tokens of a product over ``weights`` (``k x n``) of about ``gflop`` GFLOP (2 x tokens x
    weights FLOPs), within [:data:`MIN_PROBE_TOKENS`, ``tokens``]."""
    return max(MIN_PROBE_TOKENS, min(tokens, int(gflop * 1e9 / (2 * weights))))


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


def probe_tokens(shape: ModelShape, dtype: torch.dtype, device: str | torch.device) -> int:
    """The tokens of the learner's probe: :data:`PROBE_TOKENS` on a GPU; on a CPU as many as keep the
    product near :data:`CPU_PROBE_GFLOP` (:data:`EMULATED_PROBE_GFLOP` where ``dtype`` is emulated)."""
    if torch.device(device).type != "cpu":
        return PROBE_TOKENS
    gflop = EMULATED_PROBE_GFLOP if emulated(dtype, device) else CPU_PROBE_GFLOP
    return fitted_tokens(shape.hidden * shape.intermediate, PROBE_TOKENS, gflop)


def probe_gflops(shape: ModelShape, dtype: torch.dtype, device: str) -> float:
    """The rate at ``shape``'s main matmul (the MLP's ``[tokens, hidden] x [hidden, intermediate]``
    over :func:`probe_tokens` tokens) in ``dtype`` alone, the learner's compute dtype: 3 repeats after
    a warm-up, measured once per process and thread count (~0.3 s at SmolLM2-135M on 2 CPU cores in
    float32, ~1 s emulated bfloat16)."""
    tokens = probe_tokens(shape, dtype, device)
    return _probe(tokens, shape.hidden, shape.intermediate, dtype, device, torch.get_num_threads())


@functools.cache
def _probe(
    tokens: int, hidden: int, intermediate: int, dtype: torch.dtype, device: str, threads: int
) -> float:
    return matmul_gflops(tokens, hidden, intermediate, dtype, device, repeats=3)
