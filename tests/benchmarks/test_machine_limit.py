"""Checks of ``benchmarks/machine_limit.py`` without timing anything: the products an emulated dtype
times (cut to about ``--emulated-gflop`` each) and the decoder rate, weighted per token."""

from __future__ import annotations

import pytest
from helpers import benchmark_module

from hgpo_rllib.model_shape import ModelShape

bench = benchmark_module("machine_limit")

SMOLLM2 = ModelShape(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3, head_dim=64, vocab=49152)


def test_native_products_take_the_whole_micro_batch_and_emulated_ones_about_half_a_gflop() -> None:
    assert {m for name, m, _, _ in bench.products(SMOLLM2, 2048, False, 0.5) if "forward" in name} == {2048}
    emulated = bench.products(SMOLLM2, 2048, True, 0.5)
    forward = {name: m for name, m, _, _ in emulated if name.endswith("forward")}
    # 0.5e9 / (2 x in x out): q and o 753; k and v 2,260, so all 2,048; the MLP's 282; the head's 8, so 16.
    assert forward == {"q_proj/o_proj forward": 753, "k_proj/v_proj forward": 2048,
                       "gate_proj/up_proj forward": 282, "down_proj forward": 282,
                       "lm_head forward": 16}  # fmt: skip
    assert ("lm_head weight grad", 576, 16, 49152) in emulated


def test_the_decoder_rate_weights_each_product_by_its_flops_per_token() -> None:
    """Two products of 24 FLOPs per token (one for two matrices) at 1 and 3 GFLOP/s: 48 / (24 + 8);
    the head and the other dtype are left out."""
    rows = [
        {"dtype": "x", "matmul": "a/b forward", "tokens": 10, "m": 10, "k": 2, "n": 3, "gflops_per_s": 1.0},
        {"dtype": "x", "matmul": "c weight grad", "tokens": 5, "m": 4, "k": 5, "n": 3, "gflops_per_s": 3.0},
        {"dtype": "x", "matmul": "lm_head forward", "tokens": 5, "m": 5, "k": 4, "n": 9, "gflops_per_s": 9.0},
        {"dtype": "y", "matmul": "a/b forward", "tokens": 10, "m": 10, "k": 2, "n": 3, "gflops_per_s": 7.0},
    ]
    assert bench.decoder_rate(rows, "x") == pytest.approx(1.5, rel=1e-12)
