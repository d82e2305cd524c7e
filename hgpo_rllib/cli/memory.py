"""``python -m hgpo_rllib.memory <experiment.py> [--preset P]``: print the memory plan of an experiment's
GPU roles (:mod:`hgpo_rllib.experiments.memory_plan`) and exit 1 if one does not fit."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from hgpo_rllib.experiments.experiment_file import load_experiment_file
from hgpo_rllib.experiments.memory_plan import (
    DEFAULT_GPU_MEMORY_GB,
    MODEL_CONFIGS_DIR,
    PRESET_MODELS,
    fit_errors,
    format_plan,
    plan_for_config,
    shape_for_config,
)
from hgpo_rllib.experiments.presets import ENV_VARS


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hgpo_rllib.memory", description=__doc__.split("\n")[0])
    parser.add_argument("experiment", help="experiment file defining `config` (tuned_examples/...)")
    parser.add_argument("--preset", help="HGPO_PRESET for the experiment file (cpu, paper-1.5b, paper-7b)")
    parser.add_argument(
        "--model",
        help="model directory with a config.json (default for paper presets: "
        "the shipped architecture of the preset's Qwen2.5 model)",
    )
    parser.add_argument(
        "--critic",
        help="HiPER's critic model directory (default for paper presets: the shipped architecture of "
        "Qwen2.5-1.5B, the authors' critic)",
    )
    parser.add_argument("--gpu-memory-gb", type=float, default=DEFAULT_GPU_MEMORY_GB)
    args = parser.parse_args(argv)
    # The experiment file reads its switches from the environment (experiments/presets.py).
    if args.preset:
        os.environ[ENV_VARS["preset"]] = args.preset
    preset = os.environ.get(ENV_VARS["preset"], "cpu")
    if args.model:
        os.environ[ENV_VARS["model"]] = args.model
    elif preset in PRESET_MODELS and not os.environ.get(ENV_VARS["model"]):
        os.environ[ENV_VARS["model"]] = str(MODEL_CONFIGS_DIR / PRESET_MODELS[preset])
    if args.critic:
        os.environ[ENV_VARS["critic"]] = args.critic
    elif preset in PRESET_MODELS and not os.environ.get(ENV_VARS["critic"]):
        os.environ[ENV_VARS["critic"]] = str(MODEL_CONFIGS_DIR / PRESET_MODELS["paper-1.5b"])
    config = load_experiment_file(args.experiment).config
    plans = plan_for_config(config, args.gpu_memory_gb)
    if not plans:
        print("no role of this config uses a GPU (CPU run): nothing to plan")
        return 0
    size = shape_for_config(config).num_params() / 1e9
    print(f"model: {config.user_model_config().get('model')} ({size:.2f}B parameters)")
    print(format_plan(plans))
    errors = fit_errors(plans)
    for error in errors:
        print(f"error: {error}")
    return 1 if errors else 0
