"""HGPO on ALFWorld: the main job. CPU default: a warm-started small model that learns in free text.

    rllib train file tuned_examples/hgpo_alfworld.py
    rllib train file tuned_examples/hgpo_alfworld.py --estimator gigpo -k 4
    rllib train file tuned_examples/hgpo_alfworld.py --model smollm2-135m-instruct   # a real model, LoRA
    rllib train file tuned_examples/hgpo_alfworld.py --preset paper-1.5b --model /models/Qwen2.5-1.5B-Instruct
    rllib train file tuned_examples/hgpo_alfworld.py --preset gpu-0.5b --model /models/Qwen2.5-0.5B-Instruct
    rllib train file tuned_examples/hgpo_alfworld.py --help       # the settings below, with defaults

On CPU the run starts from a warm start: a 3.5M-parameter model fine-tuned on the searcher's play of 800
training games, then two DAgger rounds (``rllib sft``, recipe
``envs.alfworld.facts.ALFWORLD_WARM_START`` at the run's K). The package ships it for K = 2 and K = 4
(bf16 weights, ``hgpo_rllib/warm_start/shipped``); another K builds its own when the run starts (about 2
hours on 2 idle cores, each phase announced with an ETA; resumable), cached under ``~/.cache/hgpo_rllib``
(``--cache``). It then trains for 30 minutes, generating free text
(``<think>...</think><action>...</action>``, no action constraint). ``--warm-start DIR`` starts from
another ``rllib sft`` model directory; ``--warm-start none`` runs the 2-minute pipeline demo instead (a
random-init tiny model restricted to single-token commands, success near 0); ``--model
smollm2-135m-instruct`` (or any model directory, cached model id or GGUF file) trains that real
pretrained model from its zero-shot play instead (LoRA, 2 groups of 2 games of up to 10 steps,
docs/models.md). The paper presets (2 GPUs
for 1.5B, 4 for 7B, each + 1 for evaluation) use the published settings (docs/hgpo_algorithm.md §5) and
need a local model directory; nothing is downloaded. Building the config builds nothing: ``rllib train
file`` calls ``prepare()`` when the run starts.
"""

from typing import Any

from hgpo_rllib import HGPOConfig
from hgpo_rllib.cli.scripts import run_as_script
from hgpo_rllib.experiments.cpu import real_model_cpu_config, tiny_cpu_config, warm_start_cpu_config
from hgpo_rllib.experiments.naming import run_name
from hgpo_rllib.experiments.paper import apply_paper_preset
from hgpo_rllib.experiments.settings import ESTIMATOR_SETTINGS, RunSettings
from hgpo_rllib.warm_start.cache import build_warm_start, find_warm_start, recipe_record, warm_start_recipe

SETTINGS = ("preset", "model", *ESTIMATOR_SETTINGS, "warm_start", "cache_dir")


def experiment(settings: RunSettings) -> dict[str, Any]:
    stop: dict[str, Any] = {"training_iteration": settings.iterations}
    recipe = warm_start_recipe("alfworld", settings.history_length)
    builds_warm_start = settings.preset == "cpu" and settings.warm_start is None
    if settings.preset != "cpu":
        settings.refuse(["warm_start", "cache_dir"], f"to --preset {settings.preset}: it starts from --model")
        config = apply_paper_preset(HGPOConfig(), "alfworld", settings)
    elif settings.model:
        settings.refuse(["warm_start", "cache_dir"], "with --model: the run starts from that model")
        config = real_model_cpu_config(
            "alfworld", {"split": "train", "max_steps": 10}, settings.model, settings
        )
    elif settings.demo:
        settings.refuse(["model", "cache_dir"], "to the pipeline demo (--warm-start none)")
        config = tiny_cpu_config("alfworld", {"split": "train", "max_steps": 15}, settings, max_new_tokens=8)
    else:
        if not builds_warm_start:
            settings.refuse(["cache_dir"], "with --warm-start DIR: that warm start is used as it is")
        warm_start = settings.warm_start or find_warm_start(recipe, settings.cache_dir)
        recorded = recipe_record(recipe) if builds_warm_start else None  # the directory may not exist yet
        config = warm_start_cpu_config(warm_start, settings.training(), settings=recorded)
        stop = {"time_total_s": 1800}

    def prepare() -> None:
        """Build (or finish building) the warm start of the recipe before the run starts, unless the
        package ships it or the cache holds it."""
        if builds_warm_start:
            build_warm_start(recipe, settings.cache_dir)

    return {
        "config": config,
        "stop": stop,
        "checkpoint_freq": settings.checkpoint_freq,
        "name": run_name(f"alfworld_{settings.name_tag}"),
        "prepare": prepare,
    }


if __name__ == "__main__":
    raise SystemExit(run_as_script(__file__))
