"""Pilot of a pretrained base's warm start (``rllib sft --model``), to size its recipe (docs/models.md).

Measures, on this machine: the demonstrator's play time per episode, the examples per won episode and
their prompt tokens in the base's tokenizer (before and after the cut to ``--max-prompt-tokens``), and
the training speed (tokens/s) of a few optimiser steps with a LoRA adapter and with full fine-tuning.

    python scripts/pilot_sft_pretrained.py --env webshop --demonstrator searcher --episodes 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import DataCollatorForSeq2Seq

from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.rl_module.model_sources import local_model_dir
from hgpo_rllib.warm_start.demonstrations import collect_demonstrations
from hgpo_rllib.warm_start.pretrained import base_model, base_tokenizer, based_lr, lora_settings
from hgpo_rllib.warm_start.sft_dataset import IGNORE_INDEX, tokenize_examples, won_steps
from hgpo_rllib.warm_start.sft_settings import SFTSettings


def play(sft: SFTSettings, record: dict[str, Any], episodes: int, folder: Path) -> tuple[list[dict], float]:
    """The demonstrations of ``episodes`` tasks and the seconds per episode (a 1-episode run's
    start-up, the env's data loading, taken off)."""

    def timed(count: int, name: str) -> tuple[list[dict], float]:
        start = time.perf_counter()
        records = collect_demonstrations(
            folder / name,
            record["env"],
            record["env_config"],
            episodes=count,
            history_length=sft.history_length,
            demonstrator=record["demonstrator"],
            seed=sft.seed,
        )
        return records, time.perf_counter() - start

    _, startup = timed(1, "one.jsonl")
    records, total = timed(episodes, "all.jsonl")
    return records, (total - startup) / max(episodes - 1, 1)


def train_speed(
    sft: SFTSettings, base_dir: Path, tokenizer: Any, rows: list[dict], full: bool, steps: int, batch: int
) -> dict[str, float]:
    """Tokens per second of ``steps`` optimiser steps (after one warm-up step) on batches of ``batch``
    of the longest examples (the recipe's worst case; shorter ones run faster per token), by the wall
    clock and per CPU second of this process (on a busy machine, CPU seconds times the cores it would
    have to itself estimate the idle speed)."""
    lm = base_model(base_dir, sft.dtype, lora_settings(sft.lora_rank, full), sft.seed)
    lm.train()
    optimizer = torch.optim.AdamW([p for p in lm.parameters() if p.requires_grad], lr=based_lr(full))
    collate = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=IGNORE_INDEX)
    tokenizer.padding_side = "right"
    longest = sorted(rows, key=lambda row: -len(row["input_ids"]))
    times, cpu_times, tokens = [], [], []
    for step in range(steps + 1):
        chosen = [longest[(step * batch + i) % len(longest)] for i in range(batch)]
        inputs = collate(chosen)
        start, cpu_start = time.perf_counter(), time.process_time()
        lm(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step:  # the first step warms up allocations and kernels
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
            tokens.append(int(inputs["attention_mask"].sum()))
    return {
        "seconds_per_step": round(statistics.mean(times), 2),
        "tokens_per_step": round(statistics.mean(tokens)),
        "tokens_per_second": round(sum(tokens) / sum(times), 1),
        "tokens_per_cpu_second": round(sum(tokens) / sum(cpu_times), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--env", required=True)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--demonstrator")
    parser.add_argument("-k", "--history-length", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--max-prompt-tokens", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="timed optimiser steps of each kind")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    sft = SFTSettings(
        env=args.env,
        episodes=args.episodes,
        demonstrator=args.demonstrator,
        history_length=args.history_length,
        max_prompt_tokens=args.max_prompt_tokens,
        base=args.model,
        dtype=args.dtype,
    )
    sft.check()
    record = sft.record()
    base_dir = local_model_dir(args.model)
    tokenizer = base_tokenizer(base_dir)
    with tempfile.TemporaryDirectory() as folder:
        records, per_episode = play(sft, record, args.episodes, Path(folder))
    steps = won_steps(records, sft, record)
    examples = tokenize_examples(tokenizer, steps, args.max_prompt_tokens)
    won = sum(r["won"] for r in records)
    result = {
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "episodes": args.episodes,
        "won": won,
        "seconds_per_episode": round(per_episode, 3),
        "examples_per_won_episode": round(len(examples) / won, 2),
        "mean_prompt_tokens": round(statistics.mean(examples.prompt_tokens), 1),
        "mean_example_tokens": round(statistics.mean(examples.lengths), 1),
        "cut_prompts": examples.cut_prompts,
        "max_answer_tokens": max(examples.answer_tokens),
    }
    print(json.dumps(result), flush=True)
    for full in (False, True):
        speed = train_speed(sft, base_dir, tokenizer, examples.rows, full, args.steps, args.batch_size)
        print(json.dumps({"full_finetune": full, **speed, "load_average": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()
