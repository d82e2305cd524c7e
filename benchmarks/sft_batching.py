"""Warm-start fitting with random batches against batches of similar lengths (``rllib sft``'s sampler).

Run: ``python benchmarks/sft_batching.py DIR [--time-batches 12]`` on an ``rllib sft`` output
directory (its demonstrations and settings; finished or not). A batch is padded to its longest
example, so random batches of WebShop's K = 4 prompts (a few hundred to thousands of tokens) are
mostly padding; transformers' ``LengthGroupedSampler`` (``train_sampling_strategy="group_by_length"``)
draws batches of similar lengths. The table gives, per sampler over one epoch: the padded tokens,
the share that is padding, the time :func:`hgpo_rllib.warm_start.phases.fit_seconds` predicts, and
the time measured by fitting a sample of its batches (forward, backward and an AdamW step of the
directory's model shape, from scratch), median per step and the epoch it implies (mean x steps).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from pathlib import Path

import pandas as pd
import torch
from transformers import DataCollatorForSeq2Seq
from transformers.trainer_pt_utils import LengthGroupedSampler

from hgpo_rllib.help_text import doc_summary
from hgpo_rllib.rl_module.tokenizer import build_tiny_model
from hgpo_rllib.run_records import read_record
from hgpo_rllib.warm_start.format import SFT_CONFIG
from hgpo_rllib.warm_start.phases import fit_seconds
from hgpo_rllib.warm_start.sft_dataset import IGNORE_INDEX, demonstration_examples
from hgpo_rllib.warm_start.sft_settings import SFTSettings
from hgpo_rllib.warm_start.trainer import play_demonstrations


def batches(sampler: torch.utils.data.Sampler, batch_size: int) -> list[list[int]]:
    order = list(sampler)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def time_steps(lm: torch.nn.Module, collate: DataCollatorForSeq2Seq, rows: list[list[dict]]) -> list[float]:
    """Seconds of forward, backward and optimiser step for each batch of ``rows`` (after one warm-up)."""
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-4)
    seconds = []
    for batch_rows in [rows[0], *rows]:
        batch = collate(batch_rows)
        start = time.perf_counter()
        lm(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        seconds.append(time.perf_counter() - start)
    return seconds[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("directory", type=Path, help="an `rllib sft` output directory")
    parser.add_argument("--time-batches", type=int, default=12, help="batches fitted per sampler (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    record = read_record(args.directory / SFT_CONFIG)
    sft = SFTSettings(**{f.name: record[f.name] for f in dataclasses.fields(SFTSettings) if f.name in record})
    tokenizer, examples = demonstration_examples(
        play_demonstrations(args.directory, sft, record), sft, record
    )
    tokenizer.padding_side = "right"
    lengths = examples.lengths
    generator = torch.Generator().manual_seed(args.seed)
    samplers = {
        "random": torch.utils.data.RandomSampler(range(len(lengths)), generator=generator),
        "similar lengths": LengthGroupedSampler(sft.batch_size, lengths=lengths, generator=generator),
    }
    collate = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=IGNORE_INDEX)
    torch.manual_seed(args.seed)
    lm = build_tiny_model(tokenizer, record["model"], sft.seed)
    rows = []
    for name, sampler in samplers.items():
        epoch = batches(sampler, sft.batch_size)
        widths = [max(lengths[i] for i in batch) for batch in epoch]
        padded = sum(len(batch) * width for batch, width in zip(epoch, widths, strict=True))
        row = {
            "sampler": name,
            "steps": len(epoch),
            "padded tokens (M)": round(padded / 1e6, 2),
            "padding %": round(100 * (1 - sum(lengths) / padded), 1),
            "predicted epoch (min)": round(
                sum(fit_seconds([w] * len(b), 1.0) for b, w in zip(epoch, widths, strict=True)) / 60, 1
            ),
        }
        if args.time_batches:
            sample = random.Random(args.seed).sample(epoch, min(args.time_batches, len(epoch)))
            seconds = time_steps(lm, collate, [[examples[i] for i in batch] for batch in sample])
            row["measured s/step (median)"] = round(statistics.median(seconds), 2)
            row["measured epoch (min)"] = round(statistics.mean(seconds) * len(epoch) / 60, 1)
        rows.append(row)
    table = pd.DataFrame(rows).set_index("sampler")
    print(
        f"{args.directory}: {len(lengths)} examples of {min(lengths)}-{max(lengths)} tokens "
        f"(mean {statistics.mean(lengths):.0f}), batches of {sft.batch_size}, "
        f"{torch.get_num_threads()} torch threads\n"
    )
    print(table.to_markdown())


if __name__ == "__main__":
    main()
