"""HGPO on ALFWorld: the main job. CPU default: a warm-started small model that learns in free text.

    rllib train file tuned_examples/hgpo_alfworld.py
    python tuned_examples/hgpo_alfworld.py --estimator gigpo -k 4
    python tuned_examples/hgpo_alfworld.py --preset paper-1.5b --model /models/Qwen2.5-1.5B-Instruct -k 2

On CPU the run starts from a warm start: a 3.5M-parameter model fine-tuned on the searcher's play of
800 training games, then one DAgger round (``rllib sft``, recipe ``hgpo_rllib.sft.ALFWORLD_WARM_START``),
built on the first run (about 2 hours on 2 cores, with progress bars; resumable) and cached under
``~/.cache/hgpo_rllib``. It then trains for 30 minutes, generating free text
(``<think>...</think><action>...</action>``, no action constraint). ``HGPO_WARM_START=<dir>`` starts
from another ``rllib sft`` model directory; ``HGPO_WARM_START=none`` runs the 2-minute pipeline demo
instead (a random-init tiny model restricted to single-token commands, success near 0).
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
from hgpo_rllib.sft import ALFWORLD_WARM_START, cached_warm_start, warm_start_cpu_config

settings = RunSettings.from_env()

# A model directory written by `rllib sft`, or "none" for the random-init pipeline demo.
warm_start = os.environ.get("HGPO_WARM_START", "")
stop = {"training_iteration": settings.iterations}
if settings.preset == "cpu" and warm_start.lower() == "none":
    config = tiny_cpu_config("alfworld", {"split": "train", "max_steps": 15}, settings, max_new_tokens=8)
elif settings.preset == "cpu":
    config = warm_start_cpu_config(warm_start or cached_warm_start(ALFWORLD_WARM_START), settings.training())
    stop = {"time_total_s": 1800}
else:
    config = apply_paper_preset(HGPOConfig(), "alfworld", settings)
checkpoint_freq = settings.checkpoint_freq
name = f"alfworld_{settings.run_name}"

if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))
