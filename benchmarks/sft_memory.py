"""Peak memory of an ``rllib sft`` fit with and without ``--gradient-checkpointing``.

Run: ``python benchmarks/sft_memory.py [--model smollm2-135m-instruct] [--batch-size 4] [--tokens 1000]
[--steps 2]``; the table goes to ``docs/results/sft_memory.md`` (``--name``, ``--results-dir``). Each
side runs in a fresh process: it builds the model as ``rllib sft`` does (the from-scratch tiny model of
the warm starts, :data:`~hgpo_rllib.warm_start.sft_settings.MODEL_DEFAULTS` with a 2,048-token
vocabulary; or with ``--model`` the pretrained base with LoRA adapters of rank 16, in ``--dtype``) and
fits it with :func:`~hgpo_rllib.warm_start.trainer.fit` for ``--steps`` optimiser steps on random
batches of ``--batch-size`` examples of ``--tokens`` tokens (loss on their second half, as on an
answer). The table gives the process's peak resident memory (``ru_maxrss``), the part of it above the
memory once the model was loaded (what the fit itself took: activations, gradients, AdamW state), the
seconds a step took and the fit's mean loss (the same on both sides, up to float rounding).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import hgpo_rllib  # noqa: F401  first: it sets OpenMP's short spin before torch loads (docs/throughput.md)
from hgpo_rllib.help_text import doc_summary

# isort: split
import torch
from machine import cpu_line, uptime
from results_file import RESULTS_DIR, write_result  # benchmarks/ is on sys.path as a script

import envs
from hgpo_rllib.rl_module.model_sources import local_model_dir
from hgpo_rllib.rl_module.tokenizer import build_tiny_model, build_tiny_tokenizer
from hgpo_rllib.warm_start.pretrained import base_model, base_tokenizer, lora_settings
from hgpo_rllib.warm_start.sft_dataset import IGNORE_INDEX, Examples
from hgpo_rllib.warm_start.sft_settings import MODEL_DEFAULTS, SFTSettings
from hgpo_rllib.warm_start.trainer import fit

MIB = 1024 * 1024


def resident_mib() -> float:
    """This process's resident memory now (Linux's /proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / MIB


def model_and_tokenizer(model: str | None, dtype: str) -> tuple[Any, Any]:
    """What ``rllib sft`` fits: the tiny model from scratch (its tokenizer filled up to the warm starts'
    vocabulary with whole tokens, so the head is the size theirs is), or the base with LoRA adapters."""
    if model is None:
        tokenizer = build_tiny_tokenizer(envs.get_tokenizer_corpus("keychest"), SFTSettings.vocab_size)
        tokenizer.add_tokens([f"filler{i}" for i in range(SFTSettings.vocab_size - len(tokenizer))])
        return build_tiny_model(tokenizer, MODEL_DEFAULTS, seed=0).train(), tokenizer
    directory = local_model_dir(model)
    return base_model(directory, dtype, lora_settings(None, False), seed=0), base_tokenizer(directory)


def measure(args: argparse.Namespace) -> dict[str, float]:
    """One side of the comparison, in this process."""
    lm, tokenizer = model_and_tokenizer(args.model, args.dtype)
    generator = torch.Generator().manual_seed(0)
    half, count = args.tokens // 2, args.steps * args.batch_size
    rows = []
    for _ in range(count):
        ids = torch.randint(3, len(tokenizer), (args.tokens,), generator=generator).tolist()
        labels = [IGNORE_INDEX] * half + ids[half:]
        rows.append({"input_ids": ids, "attention_mask": [1] * args.tokens, "labels": labels})
    examples = Examples(rows, [half] * count, [False] * count, [args.tokens - half] * count)
    loaded = resident_mib()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        summary = fit(
            lm,
            tokenizer,
            examples,
            Path(out),
            epochs=1.0,
            batch_size=args.batch_size,
            lr=1e-4,
            seed=0,
            save_steps=10**6,
            max_minutes=None,
            gradient_checkpointing=args.gradient_checkpointing,
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {
        "peak_mib": round(peak),
        "fit_mib": round(peak - loaded),
        "seconds_per_step": round((time.perf_counter() - start) / summary["optimizer_steps"], 1),
        "train_loss": summary["train_loss"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--model", help="a pretrained base (default: the tiny model from scratch)")
    parser.add_argument("--dtype", default="float32", help="the base's dtype")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=1000, help="tokens per example")
    parser.add_argument("--steps", type=int, default=2, help="optimiser steps per side")
    parser.add_argument("--name", default="sft_memory", help="the result file docs/results/<name>.md")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--gradient-checkpointing", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_side:  # a child: print its measurement
        print(json.dumps(measure(args)))
        return
    root = Path(__file__).resolve().parents[1]
    model = args.model or "the tiny model from scratch (4 layers, hidden 256, 2,048-token vocabulary)"
    lines = [
        f"Model: {model}, batch {args.batch_size} x {args.tokens} tokens, {args.steps} optimiser steps per "
        f"side, each side in a fresh process. CPU: {cpu_line()}; at the start: {uptime()}",
        "",
        "| gradient checkpointing | peak RSS (MiB) | above the loaded model (MiB) | s/step | mean loss |",
        "|---|---|---|---|---|",
    ]
    for checkpointing in (False, True):
        command = [sys.executable, __file__, *sys.argv[1:], "--one-side"]
        command += ["--gradient-checkpointing"] if checkpointing else []
        out = subprocess.run(command, cwd=root, capture_output=True, text=True, check=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        lines.append(
            f"| {'yes' if checkpointing else 'no'} | {result['peak_mib']:,} | {result['fit_mib']:,} | "
            f"{result['seconds_per_step']} | {result['train_loss']:.6f} |"
        )
    table = "\n".join(lines)
    print(table)
    write_result(args.name, "SFT memory with and without gradient checkpointing", table, args.results_dir)


if __name__ == "__main__":
    main()
