"""Where an ALFWorld warm start goes wrong: its greedy command at each of the searcher's states.

Run: ``python benchmarks/alfworld_step_accuracy.py MODEL_DIR [--split S] [--episodes 12]``.
The searcher plays ``--episodes`` games of the split; at every step of its won games the warm start
reads the same prompt and answers greedily; the table gives, per command kind (go, open, take, ...),
how often its command equals the searcher's. An episode needs every ``take`` right, so one kind at
0% explains a success rate of 0 where the overall accuracy does not.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections import Counter
from pathlib import Path

import pandas as pd
import torch
from results_file import write_result  # benchmarks/ is on sys.path when run as a script
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from hgpo_rllib import sft
from hgpo_rllib.rl_module import chat_prompt

ACTION = re.compile(r"<action>(.*?)</action>")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", help="an `rllib sft` model directory")
    parser.add_argument("--split", default="eval_out_of_distribution")
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=7, help="task seeds of the demonstrations")
    args = parser.parse_args()
    settings = sft.warm_start_config(args.model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        records = sft.collect_demonstrations(
            Path(tmp) / sft.DEMONSTRATIONS, "alfworld", {**settings.env_config, "split": args.split},
            episodes=args.episodes, history_length=settings.history_length, demonstrator="searcher",
            seed=args.seed,
        )
    steps = [step for record in records if record["won"] for step in record["steps"]]
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(args.model_dir).eval()
    right, total = Counter(), Counter()
    for start in tqdm(range(0, len(steps), args.batch_size), desc="greedy answers", unit="batch"):
        batch = steps[start : start + args.batch_size]
        inputs = tokenizer([chat_prompt(tokenizer, s["prompt"]) for s in batch], return_tensors="pt",
                           padding=True, add_special_tokens=False)
        with torch.no_grad():
            generated = model.generate(**inputs, max_new_tokens=settings.max_new_tokens, do_sample=False)
        new_tokens = generated[:, inputs["input_ids"].shape[1] :]
        answers = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        for step, answer in zip(batch, answers, strict=True):
            wanted = ACTION.search(step["response"])[1]
            got = ACTION.search(answer)
            kind = wanted.split()[0]
            total[kind] += 1
            right[kind] += bool(got) and got[1] == wanted
    table = pd.DataFrame(
        [{"command": kind, "steps": total[kind], "greedy = searcher": f"{right[kind] / total[kind]:.0%}"}
         for kind in sorted(total, key=total.get, reverse=True)]
        + [{"command": "all", "steps": sum(total.values()),
            "greedy = searcher": f"{sum(right.values()) / sum(total.values()):.0%}"}]
    ).to_markdown(index=False)
    print(table)
    name = Path(args.model_dir).name
    write_result(f"alfworld_step_accuracy_{name}", f"Greedy commands of `{name}` at the searcher's states "
                 f"({args.split}, {args.episodes} games)", table)


if __name__ == "__main__":
    main()
