"""A trained policy ready to play: from an algorithm checkpoint or a warm-start directory.

:class:`CheckpointPolicy` puts the policy's RLModule behind the very prompt connector it was trained with
(same template, K, chat format and ``env_config``), samples at its ``eval_temperature`` and returns the
decoded answers. :func:`export_merged` writes a plain Hugging Face model directory from a checkpoint.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec

from envs.common.spaces import TextSpace
from hgpo_rllib.algorithms.hgpo.hgpo import HGPOConfig
from hgpo_rllib.columns import ACTION_TEXT
from hgpo_rllib.evaluation.rollout import EpisodeSlot
from hgpo_rllib.rl_module.llm_rl_module import LLMRLModule
from hgpo_rllib.warm_start.format import SFT_CONFIG, is_warm_start, read_settings

#: Where an algorithm checkpoint keeps the policy module (RLlib's checkpoint layout).
MODULE_DIR = Path("learner_group") / "learner" / "rl_module" / "default_policy"
CTOR_FILE = "class_and_ctor_args.pkl"


def config_for_warm_start(model_dir: str | Path, settings: Mapping[str, Any] | None = None) -> HGPOConfig:
    """The config (env, prompt settings, model) of a warm-start directory, from its settings record or,
    for one that is still to be built, from ``settings`` (the record it will have)."""
    path = Path(model_dir).expanduser().resolve()
    settings = read_settings(path) if settings is None else settings
    return (
        HGPOConfig()
        .environment(settings["env"], env_config=settings["env_config"])
        .rl_module(model_config={"model": str(path)})
        .training(
            history_length=settings["history_length"],
            max_prompt_tokens=settings["max_prompt_tokens"],
            max_new_tokens=settings["max_new_tokens"],
        )
    )


def inference_module(config: AlgorithmConfig) -> LLMRLModule:
    """The policy module of ``config``, for inference (no reference model, no optimizer)."""
    spec = RLModuleSpec(
        module_class=LLMRLModule,
        observation_space=TextSpace(),
        action_space=TextSpace(),
        inference_only=True,
        model_config=config.model_config,
    )
    return spec.build().eval()


def _config_from_ctor_args(ctor_args_and_kwargs: Any) -> AlgorithmConfig:
    args, kwargs = ctor_args_and_kwargs
    config = kwargs.get("config", args[0] if args else None)
    if isinstance(config, dict):
        config = AlgorithmConfig.from_state(config)
    if not isinstance(config, AlgorithmConfig):
        raise ValueError("the checkpoint holds no algorithm config")
    return config


class CheckpointPolicy:
    """A trained policy: an algorithm checkpoint's RLModule behind its own prompt connector, or a
    warm-start model directory of ``rllib sft`` behind the prompt settings it was trained with."""

    def __init__(self, checkpoint: str | Path, env_config: dict[str, Any] | None = None):
        """``env_config`` entries override the checkpoint's; prompts and the caller's env both use
        the merged ``self.env_config``, so the two cannot disagree (e.g. on ``require_tags``)."""
        path = Path(checkpoint).expanduser().resolve()
        if is_warm_start(path):
            config = config_for_warm_start(path)
            module = inference_module(config)
        else:
            ctor_file, module_dir = path / CTOR_FILE, path / MODULE_DIR
            if not ctor_file.is_file() or not module_dir.is_dir():
                raise FileNotFoundError(
                    f"{path} is not an algorithm checkpoint (no {CTOR_FILE}) nor an `rllib sft` "
                    f"model directory (no {SFT_CONFIG})"
                )
            with ctor_file.open("rb") as f:
                config = _config_from_ctor_args(pickle.load(f)["ctor_args_and_kwargs"])
            module = RLModule.from_checkpoint(module_dir, inference_only=True)
            module.eval()
        self.env_config = {**dict(config.env_config), **(env_config or {})}
        self.config = config.copy(copy_frozen=False).environment(env_config=self.env_config)
        self.module = module
        self.prompt_pipeline = self.config.build_env_to_module_connector()

    def reseed(self, seed: int) -> CheckpointPolicy:
        """Seed the sampler for one evaluation seed."""
        torch.manual_seed(seed)
        return self

    def __call__(self, slots: list[EpisodeSlot]) -> list[str]:
        episodes = [slot.episode for slot in slots]
        batch = self.prompt_pipeline(rl_module=self.module, batch={}, episodes=episodes, explore=False)
        return list(self.module.forward_inference(batch)[ACTION_TEXT])


def export_merged(checkpoint: str | Path, output_dir: str | Path) -> Path:
    """Write a merged Hugging Face model directory (weights, config, tokenizer) from a checkpoint.

    ``checkpoint`` is an algorithm checkpoint directory (as ``rllib evaluate`` takes). The result
    loads with ``AutoModelForCausalLM.from_pretrained`` and serves with vLLM like any base model.
    """
    out = Path(output_dir).expanduser()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"export_merged: {out} exists and is not empty")
    module = CheckpointPolicy(checkpoint).module
    lm = module.lm.merge_and_unload() if isinstance(module.lm, PeftModel) else module.lm
    lm.save_pretrained(out)
    module.tokenizer.save_pretrained(out)
    return out
