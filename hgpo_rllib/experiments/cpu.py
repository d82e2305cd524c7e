"""The CPU presets of the tuned examples: the tiny random-init pipeline demos, RL of a real pretrained
model (``--model``) and RL from a warm start, on 2 cores (docs/usage.md, docs/models.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import envs
from hgpo_rllib.algorithms.hgpo.hgpo import HGPOConfig
from hgpo_rllib.algorithms.hiper.hiper import HiPERConfig
from hgpo_rllib.evaluation.policy_loading import config_for_warm_start, read_policy_settings
from hgpo_rllib.experiments.settings import RunSettings
from hgpo_rllib.rl_module.models import cpu_dtype, cpu_inference_backend
from hgpo_rllib.warm_start.cache import find_warm_start, is_finished, warm_start_recipe

#: Training settings of the tiny-model CPU demos (single-agent and team): fast lr, no KL reference.
CPU_DEMO_TRAINING = {
    "lr": 1e-3,
    "minibatch_size": 64,
    "micro_batch_size": 16,
    "max_prompt_tokens": 1024,
    "kl_coeff": 0.0,
}


def tiny_cpu_config(env_name: str, env_config: dict[str, Any], settings: RunSettings, **training: Any) -> Any:
    """The CPU default of the ALFWorld and WebShop examples: a tiny random-init model, 2 groups of 4.

    It shows the whole pipeline in minutes; a random model cannot solve these tasks. Bare commands
    count as well-formed (``require_tags=False``) and sampling is restricted to the tokens of each
    step's admissible actions, so the model acts from the first step.
    """
    group_size, groups = 4, 2
    return (
        HGPOConfig()
        .environment(env_name, env_config={"require_tags": False, **env_config})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=group_size * groups)
        .rl_module(model_config={"constrain_to_admissible": True})
        .training(
            **{
                **settings.training(),
                "group_size": group_size,
                "groups_per_iteration": groups,
                **CPU_DEMO_TRAINING,
                **training,
            }
        )
        .debugging(seed=0)
    )


def tiny_hiper_config(env_name: str, env_config: dict[str, Any], settings: RunSettings) -> Any:
    """HiPER's CPU pipeline demo: a tiny random-init policy and critic, 8 episodes per iteration.

    It runs every piece (plan-execute prompts, the critic, HAE, both updates, checkpoints) in minutes;
    a model that knows no language writes invalid answers, so nothing is learned about the task.
    """
    return (
        HiPERConfig()
        .environment(env_name, env_config={**env_config, "answer_format": "plan_execute"})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=8)
        .training(
            history_length=settings.history_length,
            groups_per_iteration=8,
            lr=1e-3,
            critic_lr=1e-3,
            minibatch_size=64,
            micro_batch_size=16,
            max_prompt_tokens=1024,
            max_new_tokens=24,
            kl_coeff=0.0,
        )
        .debugging(seed=0)
    )


#: The real-model CPU preset's training (docs/models.md, "Iteration times"): LoRA adapters of rank 16 on
#: every linear layer (the optimiser holds the adapters' state, not the model's, and runners receive
#: merged weights); no KL term, which would cost a reference forward pass per row on 2 cores, and no
#: entropy bonus (the paper's 0.001): without either, the rows of groups whose episodes all returned the
#: same (most groups of a weak policy on sparse rewards) carry no gradient and the learner skips them
#: (``skip_zero_advantage_rows``); prompts of at most 768 tokens (the oldest history records go first)
#: and answers of at most 64 tokens.
REAL_MODEL_CPU_TRAINING = {
    "lr": 5e-5,
    "minibatch_size": 64,
    "micro_batch_size": 4,
    "max_prompt_tokens": 768,
    "max_new_tokens": 64,
    "kl_coeff": 0.0,
    "entropy_coeff": 0.0,
}
REAL_MODEL_LORA = {"r": 16}


def real_model_cpu_config(
    env_name: str, env_config: dict[str, Any], model: str, settings: RunSettings, **training: Any
) -> Any:
    """RL of a real pretrained model (``--model smollm2-135m-instruct``, a model directory, cached
    model id or GGUF file) on 2 cores: 2 groups of 2 episodes, free text in the env's own answer format,
    bf16 where the CPU computes it natively (else float32), sampled with vLLM's CPU build where it is
    installed and the CPU has AVX-512 (else HF ``generate``). Where the env has a recipe for the
    base at the run's K and its warm start is built or shipped, RL starts from that adapter, prompting
    as it learned; else from the base itself, zero-shot."""
    warm_start = base_warm_start(env_name, model, settings.history_length)
    prompts: dict[str, Any] = {}
    if warm_start is not None:
        learned = read_policy_settings(warm_start)
        env_config = {**learned["env_config"], **env_config}
        prompts = {key: learned[key] for key in ("max_prompt_tokens", "max_new_tokens")}
        print(f"Starting from {model}'s {env_name} warm start {warm_start} (docs/models.md)")
        model = str(warm_start)
    group_size, groups = 2, 2
    return (
        HGPOConfig()
        .environment(env_name, env_config=env_config)
        .env_runners(num_env_runners=1, num_envs_per_env_runner=group_size * groups)
        .rl_module(
            model_config={
                "model": model,
                "torch_dtype": cpu_dtype(),
                "inference_backend": cpu_inference_backend(),
                "lora": REAL_MODEL_LORA,
            }
        )
        .training(
            **{
                **settings.training(),
                "group_size": group_size,
                "groups_per_iteration": groups,
                **REAL_MODEL_CPU_TRAINING,
                **prompts,
                **training,
            }
        )
        .debugging(seed=0)
        .reporting(metrics_num_episodes_for_smoothing=4 * group_size * groups)
    )


def base_warm_start(env_name: str, model: str, history_length: int) -> Path | None:
    """The finished warm start (built in the cache, else shipped) of the env's recipe for the base
    ``model`` at ``history_length``, if the env has such a recipe and it is built; else None."""
    if model not in envs.env_facts(env_name).warm_start.base_recipes:
        return None
    found = find_warm_start(warm_start_recipe(env_name, history_length, base=model))
    return found if is_finished(found) else None


def warm_start_cpu_config(
    warm_start: str | Path,
    training: dict[str, Any],
    settings: Mapping[str, Any] | None = None,
    algorithm: Any = None,
) -> Any:
    """RL from a warm start on CPU: free-text generation (no admissible-action or vocabulary
    constraint), 2 groups of 4, the warm start's env and prompt settings (read from the directory, or
    given as ``settings`` when it is still to be built). ``training`` holds the estimator settings; its
    history length must be the warm start's K (the prompts it learned). A small learning rate and a KL
    penalty to the warm start keep RL near it: 30 minutes of HGPO took the ALFWorld warm start from
    18.75% to 25.0% on unseen games with these, to 2.08% at lr 1e-4 without KL (docs/results.md).
    ``algorithm``: the fresh config to fill (default ``HGPOConfig()``; HiPER ignores the groups)."""
    config = config_for_warm_start(warm_start, settings, algorithm)
    if training.get("history_length", config.history_length) != config.history_length:
        raise ValueError(
            f"history_length={training['history_length']} differs from the warm start's K="
            f"{config.history_length} in {warm_start}; use the same K (-k) or another warm start"
        )
    group_size, groups = 4, 2
    return (
        config.env_runners(num_env_runners=1, num_envs_per_env_runner=group_size * groups)
        .training(
            **training,
            group_size=group_size,
            groups_per_iteration=groups,
            lr=1e-5,
            minibatch_size=64,
            micro_batch_size=8,
            kl_coeff=0.05,
        )
        .debugging(seed=0)
        # The progress table's smoothed metrics cover the last 4 iterations (8 tasks).
        .reporting(metrics_num_episodes_for_smoothing=4 * group_size * groups)
    )
