"""Checks of ``benchmarks/tree_attention.py`` (the GPU measurement of prefix trees, run here small on
CPU): its micro-batches share what each scenario says, and its two paths agree in float32."""

from __future__ import annotations

import argparse

import numpy as np
import torch
from helpers import benchmark_module

bench = benchmark_module("tree_attention")


def test_micro_batch_shares_the_opening_and_copies_whole_prompts() -> None:
    rng = np.random.default_rng(0)
    batch = bench.micro_batch(rng, 8, 100, 10, 0.6, 4, 1000)
    prompts = [ids[mask == 1] for ids, mask in zip(batch["prompt_ids"], batch["prompt_mask"], strict=True)]
    assert all(np.array_equal(p[:60], prompts[0][:60]) for p in prompts)
    assert all(np.array_equal(prompts[n], prompts[n - n % 4]) for n in range(8))
    assert not np.array_equal(prompts[0], prompts[4])
    assert all(90 <= len(p) <= 110 for p in prompts)
    assert (batch["resp_mask"].sum(axis=1) >= 7).all()


def test_both_paths_agree_in_float32_and_the_packing_computes_fewer_tokens() -> None:
    config = bench.model_config("tiny")
    torch.manual_seed(0)
    model = bench.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    args = argparse.Namespace(
        rows=8, prompt_tokens=48, response_tokens=6, seed=0, dtype=torch.float32, warmups=0, repeats=1
    )
    float32, _ = bench.agreement_rows(model, args, torch.device("cpu"), pair_cost=1e-3)
    assert float32["logp_max_abs_diff_paths"] < 1e-5
    assert float32["grad_rel_diff_paths"] < 1e-5
    timing = bench.scenario_rows(model, args, torch.device("cpu"), pair_cost=1e-3)
    trees = {row["scenario"]: row for row in timing if row["path"] == "prefix trees"}
    assert trees["opening 60%, fours"]["computed_tokens"] < 0.5 * trees["opening 60%, fours"]["real_tokens"]
    assert "nothing shared" not in trees  # the cost rule keeps rows that share nothing plain
