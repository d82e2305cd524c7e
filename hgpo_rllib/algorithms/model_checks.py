"""Config validation of the model a text-agent algorithm trains: ``model_config``'s keys and values,
the model directory's files, the prompt + response length against the model's positions, and
whether each GPU role fits its memory (:mod:`hgpo_rllib.experiments.memory_plan`); checked in the
driver before any process starts, each message naming what is wrong (the other settings:
:mod:`hgpo_rllib.algorithms.validation`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safetensors import safe_open
from transformers import Qwen2Config

from hgpo_rllib.checks import is_int
from hgpo_rllib.experiments import memory_plan
from hgpo_rllib.experiments.memory_items import GB
from hgpo_rllib.rl_module.config import TINY_MODEL_DEFAULTS, TINY_PRESET, LLMModuleConfig, read_model_config
from hgpo_rllib.rl_module.model_sources import local_model_dir
from hgpo_rllib.rl_module.models import tokenizer_errors

#: Upper bound on max_prompt_tokens + max_new_tokens whatever the model claims (a typo guard).
MAX_TOKENS = 1 << 20


def model_errors(config: Any) -> list[str]:
    """model_config keys and values, the model directory, and the prompt + response length
    against the model's positions: checked here, not later inside a runner."""
    try:
        module_config = LLMModuleConfig.from_model_config(config.model_config)
    except ValueError as exc:
        return [str(exc)]
    if module_config.model == TINY_PRESET:
        unknown = sorted(set(module_config.tiny_model) - set(Qwen2Config().to_dict()))
        if unknown:
            return [
                f"model_config['tiny_model'] has unknown key(s) {unknown}: they are not Qwen2Config settings"
            ]
        sizes = {**TINY_MODEL_DEFAULTS, **module_config.tiny_model}
        # The architecture's counts (the defaults' ints: widths, layers, heads, positions) are >= 1.
        counts = [key for key, default in TINY_MODEL_DEFAULTS.items() if is_int(default)]
        bad = [key for key in counts if not (is_int(sizes[key]) and sizes[key] >= 1)]
        if bad:
            got = {key: sizes[key] for key in bad}
            return [f"model_config['tiny_model'] {got} is invalid: these sizes must be ints >= 1"]
        positions = sizes["max_position_embeddings"]
    else:
        try:
            # In the driver, before any worker starts: a GGUF file is converted here, once.
            model_dir = local_model_dir(module_config.model)
            positions = read_model_config(model_dir).get("max_position_embeddings", MAX_TOKENS)
        except (FileNotFoundError, ValueError) as exc:
            return [str(exc)]
        broken = weight_file_errors(model_dir) or tokenizer_errors(model_dir, config.prompt_turns)
        if broken:
            return broken
    tokens = config.max_prompt_tokens + config.max_new_tokens
    if tokens > min(positions, MAX_TOKENS):
        return [
            f"max_prompt_tokens={config.max_prompt_tokens!r} is invalid: with max_new_tokens="
            f"{config.max_new_tokens} it exceeds the model's {positions} positions"
            + (f" (and the cap of {MAX_TOKENS})" if positions > MAX_TOKENS else "")
        ]
    return []


def weight_file_errors(model_dir: Path) -> list[str]:
    """The model directory's safetensors files that cannot be read (truncated or corrupt): their
    headers are checked here, in a second, instead of failing inside every trial's model load."""
    errors = []
    for path in sorted(model_dir.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as weights:
                weights.keys()
        except Exception as exc:  # safetensors raises its own error types
            errors.append(f"model_config['model']: {path} cannot be read ({exc}); it may be truncated")
    return errors


def memory_errors(config: Any) -> list[str]:
    """GPU roles that cannot fit their model (the memory plan), sized by this machine's GPU if it
    has one, else 80 GB; CPU-only configs have nothing to check."""
    if not memory_plan.has_gpu_roles(config):  # before torch is imported
        return []
    import torch

    gpu_gb = memory_plan.DEFAULT_GPU_MEMORY_GB
    if torch.cuda.is_available():
        gpu_gb = torch.cuda.get_device_properties(0).total_memory / GB
    try:
        plans = memory_plan.plan_for_config(config, gpu_gb, local_model_dir)
    except (ValueError, FileNotFoundError) as exc:  # e.g. a config.json without the model's sizes
        return [f"memory plan: {exc}"]
    return [f"memory plan: {e}" for e in memory_plan.fit_errors(plans)]
