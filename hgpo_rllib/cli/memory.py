"""``rllib memory <experiment.py> [--preset P]``: print the memory plan of an experiment's GPU roles
(:mod:`hgpo_rllib.experiments.memory_plan`) and exit 1 if one does not fit."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from typing import Any

from hgpo_rllib.experiments.experiment_file import (
    declared_settings,
    import_experiment_module,
    load_experiment_file,
)
from hgpo_rllib.experiments.memory_plan import (
    DEFAULT_GPU_MEMORY_GB,
    MODEL_CONFIGS_DIR,
    PRESET_MODELS,
    fit_errors,
    format_plan,
    plan_for_config,
    shape_for_config,
)
from hgpo_rllib.experiments.settings import PRESETS
from hgpo_rllib.rl_module.model_sources import local_model_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rllib memory``."""
    parser.add_argument("experiment", help="experiment file defining `config` (tuned_examples/...)")
    parser.add_argument("--preset", choices=PRESETS, help="the experiment file's --preset (default: cpu)")
    parser.add_argument(
        "--model",
        help="the model as --model of the experiment names it: a directory with a config.json, a .gguf "
        "file, a short name or an adapter folder (default for paper presets: the shipped architecture "
        "of the preset's Qwen2.5 model)",
    )
    parser.add_argument(
        "--critic",
        help="HiPER's critic model, named as --model (default for paper presets: the shipped "
        "architecture of Qwen2.5-1.5B, the authors' critic)",
    )
    parser.add_argument("--gpu-memory-gb", type=float, default=DEFAULT_GPU_MEMORY_GB)


def run(args: argparse.Namespace) -> int:
    module = import_experiment_module(args.experiment)
    settings = _settings(args, declared_settings(module))
    config = load_experiment_file(args.experiment, settings, module=module).config
    model_dir = functools.cache(local_model_dir)  # the plan and the size line resolve the model once
    plans = plan_for_config(config, args.gpu_memory_gb, model_dir)
    if not plans:
        print("no role of this config uses a GPU (CPU run): nothing to plan")
        return 0
    size = shape_for_config(config, model_dir).num_params() / 1e9
    print(f"model: {config.user_model_config().get('model')} ({size:.2f}B parameters)")
    print(format_plan(plans))
    errors = fit_errors(plans)
    for error in errors:
        print(f"error: {error}")
    return 1 if errors else 0


def _settings(args: argparse.Namespace, declared: Sequence[str]) -> dict[str, Any]:
    """The experiment file's settings for the plan: the preset, and for a paper preset its model (and
    HiPER's critic) defaulting to the shipped architectures; only those the file declares."""
    values: dict[str, Any] = {"preset": args.preset, "model": args.model, "critic": args.critic}
    if args.preset in PRESET_MODELS:
        values["model"] = values["model"] or str(MODEL_CONFIGS_DIR / PRESET_MODELS[args.preset])
        values["critic"] = values["critic"] or str(MODEL_CONFIGS_DIR / PRESET_MODELS["paper-1.5b"])
    return {name: value for name, value in values.items() if value is not None and name in declared}
