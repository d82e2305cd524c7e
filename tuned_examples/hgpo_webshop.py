"""HGPO on WebShop (pure-Python text env over WebShop's 1,000-product catalog, shipped in the package).

    rllib train file tuned_examples/hgpo_webshop.py
    python tuned_examples/hgpo_webshop.py --preset paper-1.5b --model /models/Qwen2.5-1.5B-Instruct -k 4

Set ``WEBSHOP_DATA_DIR`` to a folder with your own WebShop data files (e.g. the full catalog) to use them.

The CPU default runs the pipeline with a tiny random-init model; ``HGPO_WARM_START=<dir>`` starts
instead from an ``rllib sft --env webshop -k K`` directory (its env settings and prompts; ``HGPO_K``
must be its K), learning in free text as the ALFWorld main job does. The paper presets use the
published settings (docs/hgpo_algorithm.md §5: mean_norm advantages, 30 steps, minibatch 64).
"""

from hgpo_rllib import HGPOConfig
from hgpo_rllib.cli.scripts import run_as_script
from hgpo_rllib.experiments.presets import (
    RunSettings,
    apply_paper_preset,
    tiny_cpu_config,
    warm_start_cpu_config,
)

settings = RunSettings.from_env()

if settings.preset == "cpu" and (settings.warm_start or "none").lower() == "none":
    config = tiny_cpu_config("webshop", {"max_steps": 10}, settings, adv_mode="mean_norm", max_new_tokens=12)
elif settings.preset == "cpu":
    config = warm_start_cpu_config(settings.warm_start, settings.training()).training(adv_mode="mean_norm")
else:
    config = apply_paper_preset(HGPOConfig(), "webshop", settings)
stop = {"training_iteration": settings.iterations}
checkpoint_freq = settings.checkpoint_freq
name = f"webshop_{settings.run_name}"

if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))
