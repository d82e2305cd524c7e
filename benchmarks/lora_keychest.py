"""LoRA learns KeyChest: the tuned example with ``model_config["lora"] = {"r": 8}``, for a time budget.

Run: ``python benchmarks/lora_keychest.py [--minutes 15] [--r 8]``. Trains
``tuned_examples/hgpo_keychest.py``'s config (tiny random-init model, 16 groups x 8) with LoRA
adapters on every linear layer (the embeddings and LM head stay frozen at their random init) and
writes the success per iteration to ``docs/results/lora_keychest.csv``; prints the first and last
iterations' success and the iteration whose 3-iteration mean first reaches 50% / 80%.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import ray

from hgpo_rllib.experiments.experiment_file import load_experiment_file
from hgpo_rllib.help_text import doc_summary

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tuned_examples" / "hgpo_keychest.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=doc_summary(__doc__))
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--r", type=int, default=8)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "results" / "lora_keychest.csv")
    args = parser.parse_args()
    config = load_experiment_file(EXAMPLE).config.copy(copy_frozen=False)
    config.rl_module(model_config={**config.user_model_config(), "lora": {"r": args.r}})
    ray.init(num_cpus=2, include_dashboard=False)
    algo = config.build_algo()
    records, start = [], time.perf_counter()
    try:
        while time.perf_counter() - start < args.minutes * 60:
            result = algo.train()
            records.append(
                {
                    "iteration": len(records) + 1,
                    "seconds": round(time.perf_counter() - start, 1),
                    "success": result["env_runners"]["success_rate"],
                }
            )
            print(records[-1], flush=True)
    finally:
        algo.stop()
        ray.shutdown()
    curve = pd.DataFrame(records)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    curve.to_csv(args.output, index=False)
    smooth = curve.success.rolling(3).mean()
    print(
        f"LoRA r={args.r}: {len(curve)} iterations in {curve.seconds.iloc[-1]:.0f} s; success first 3: "
        f"{curve.success.head(3).round(3).tolist()}, last 3: {curve.success.tail(3).round(3).tolist()}"
    )
    for level in (0.5, 0.8):
        hit = curve[smooth >= level]
        where = f"iteration {hit.iteration.iloc[0]} ({hit.seconds.iloc[0]:.0f} s)" if len(hit) else "no"
        print(f"3-iteration mean >= {level:.0%}: {where}")


if __name__ == "__main__":
    main()
