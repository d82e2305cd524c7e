"""How long torch's OpenMP threads spin while they wait, alone on the cores and beside a trainer.

Run: ``python benchmarks/openmp_waiting.py`` (``--quick``: fewer tokens). Prints a markdown table, kept
in ``docs/results/openmp_waiting.md``. Each setting times, in fresh processes, Hugging Face ``generate``
of a tiny random Qwen2 (the CPU warm starts' shape: 4 layers, width 256, vocab 2,048) on a WebShop-sized
batch (16 prompts of 1,300 tokens), and training steps of the same model (batches of 8 x 1,300 tokens,
as ``rllib sft`` takes): each alone, then both at once (an evaluation beside an SFT build or a
learner). libgomp's default (a waiting thread spins ~300,000 times before it sleeps) is fine alone, but
beside another busy process each of generate's many small ops waits for a thread the scheduler gave
away; ``hgpo_rllib`` therefore sets ``GOMP_SPINCOUNT`` unless the user did (docs/throughput.md). Run it
on otherwise idle cores: anything else running is a third process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

from results_file import write_result
from tqdm import tqdm

from hgpo_rllib.help_text import doc_summary

#: (name, environment overrides); "default" removes what hgpo_rllib would set.
SETTINGS: list[tuple[str, dict[str, str]]] = [
    ("libgomp default", {}),
    ("GOMP_SPINCOUNT=10000", {"GOMP_SPINCOUNT": "10000"}),
    ("GOMP_SPINCOUNT=3000", {"GOMP_SPINCOUNT": "3000"}),
    ("GOMP_SPINCOUNT=1000", {"GOMP_SPINCOUNT": "1000"}),
    ("OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("1 thread (default spin)", {"OMP_NUM_THREADS": "1"}),
]
OPENMP_VARS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS")


def tiny_model() -> Any:
    """A random Qwen2 of the CPU warm starts' shape (weights do not change the timing)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )
    return Qwen2ForCausalLM(config)


def time_generate(new_tokens: int, repeats: int) -> list[float]:
    """Seconds of each ``generate`` call after a warm-up call, in this process."""
    import torch

    model = tiny_model().eval()
    ids = torch.randint(10, 2000, (16, 1300))
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            start = time.perf_counter()
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=True,
                pad_token_id=0,
            )
            times.append(time.perf_counter() - start)
    return times[1:]


def train_steps(steps: int | None) -> None:
    """Training steps (forward, backward, AdamW), each one's seconds printed as it ends; forever if
    ``steps`` is None (the trainer beside generate, stopped when generate is done)."""
    import torch

    model = tiny_model().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(10, 2000, (8, 1300))
    done = 0
    while steps is None or done < steps:
        start = time.perf_counter()
        model(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
        done += 1


def worker(workload: str, overrides: dict[str, str], steps: int | None = None) -> subprocess.Popen:
    """A fresh process running ``workload`` under ``overrides`` (and no other OpenMP setting)."""
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_VARS}
    env.update(overrides)
    command = [sys.executable, __file__, "--worker", workload, *sys.argv[1:]]
    if steps:
        command += ["--steps", str(steps)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def seconds_of(process: subprocess.Popen, workload: str) -> list[float]:
    """The seconds a worker printed, one per line (the first training step is a warm-up: dropped)."""
    output = process.communicate()[0]
    if process.returncode not in (0, -signal.SIGTERM):
        raise SystemExit(f"the {workload} worker failed (exit {process.returncode})")
    times = [json.loads(line)["seconds"] for line in output.strip().splitlines()]
    return times[1:] if workload == "train" else times


def measure(overrides: dict[str, str], repeats: int) -> dict[str, float]:
    """Median seconds per generate call and per training step: each alone, then both at once (the
    trainer runs for as long as generate does)."""
    generate_alone = seconds_of(worker("generate", overrides), "generate")
    train_alone = seconds_of(worker("train", overrides, steps=3 * repeats + 1), "train")
    trainer = worker("train", overrides)
    generate_beside = seconds_of(worker("generate", overrides), "generate")
    trainer.send_signal(signal.SIGTERM)
    train_beside = seconds_of(trainer, "train")
    if not train_beside:
        raise SystemExit("the trainer finished no step beside generate: raise --repeats")
    times = {
        "generate alone": generate_alone,
        "generate beside": generate_beside,
        "train alone": train_alone,
        "train beside": train_beside,
    }
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--quick", action="store_true", help="32 new tokens instead of 100")
    parser.add_argument("--repeats", type=int, default=3, help="timed generate calls per process")
    parser.add_argument("--worker", choices=["generate", "train"], help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    new_tokens = 32 if args.quick else 100
    if args.worker == "generate":
        for seconds in time_generate(new_tokens, args.repeats):
            print(json.dumps({"seconds": seconds}))
        return
    if args.worker == "train":
        train_steps(args.steps)
        return
    import torch

    rows = []
    for name, overrides in tqdm(SETTINGS, desc="settings", unit="setting"):
        rows.append((name, measure(overrides, args.repeats)))
        tqdm.write(f"  {name}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rows[-1][1].items()))
    base = rows[0][1]
    lines = [
        f"generate: 16 prompts x 1,300 tokens, {new_tokens} new; training steps: 8 x 1,300 tokens; "
        f"torch {torch.__version__}; medians per process (generate: {args.repeats} calls).",
        "",
        "| waiting | generate alone (s) | vs default | beside training (s) | slowdown "
        "| training step alone (s) | vs default | beside generate (s) | slowdown |",
        "|:--|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, m in rows:
        cells = [
            f"{m[w + ' alone']:.2f} | {m[w + ' alone'] / base[w + ' alone']:.2f}x | "
            f"{m[w + ' beside']:.2f} | {m[w + ' beside'] / m[w + ' alone']:.1f}x"
            for w in ("generate", "train")
        ]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    table = "\n".join(lines)
    print(table)
    write_result("openmp_waiting", "OpenMP waiting: alone and beside another busy process", table)


if __name__ == "__main__":
    main()
