"""HGPO on ALFWorld: the main job. CPU default: a tiny random-init model that finishes in minutes.

    rllib train file tuned_examples/hgpo_alfworld.py
    python tuned_examples/hgpo_alfworld.py --estimator gigpo -k 4
    python tuned_examples/hgpo_alfworld.py --preset paper-1.5b --model /models/Qwen2.5-1.5B-Instruct -k 2

The CPU default shows the whole pipeline (generated games, grouped rollouts, history-window
prompts, hierarchical advantages, updates, Tensorboard); a random-init model cannot solve ALFWorld,
so its success rate stays near 0. With ``HGPO_WARM_START=<dir>`` (a model directory written by
``rllib sft --env alfworld ...``) the CPU run starts from that model instead and generates free text
(``<think>...</think><action>...</action>``, no action constraint) for 30 minutes.
The paper presets (2 GPUs for 1.5B, 4 for 7B, each + 1 for evaluation) use the published settings
(docs/hgpo_algorithm.md §5) and need a local model directory; nothing is downloaded.
"""

import os

from hgpo_rllib import HGPOConfig
from hgpo_rllib.presets import (
    RunSettings,
    apply_paper_preset,
    run_as_script,
    tiny_cpu_config,
)
from hgpo_rllib.sft import warm_start_cpu_config

settings = RunSettings.from_env()

warm_start = os.environ.get("HGPO_WARM_START")  # a model directory written by `rllib sft`
stop = {"training_iteration": settings.iterations}
if settings.preset == "cpu" and warm_start:
    config = warm_start_cpu_config(warm_start, settings.training())
    stop = {"time_total_s": 1800}
elif settings.preset == "cpu":
    config = tiny_cpu_config("alfworld", {"split": "train", "max_steps": 15}, settings, max_new_tokens=8)
else:
    config = apply_paper_preset(HGPOConfig(), "alfworld", settings)
checkpoint_freq = settings.checkpoint_freq
name = f"alfworld_{settings.run_name}"

if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))
