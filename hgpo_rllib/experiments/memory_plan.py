"""Memory plan: what each GPU of a run holds, computed from the model's ``config.json`` and the settings.

    rllib memory tuned_examples/hgpo_alfworld.py --preset paper-7b [--gpu-memory-gb 80]

A run fails late and expensively when a GPU runs out of memory (after the model loads, the first wave
samples and the first update starts), so ``HGPOConfig.validate()`` checks this plan first and names
the setting to change. The model's size comes from its ``config.json`` alone (a directory holding
only that file is enough), so the plan runs on any machine; a GGUF file, a short name or an adapter
folder is first resolved to its directory by the caller, as training resolves it.

Per role and GPU, in bytes, the plan holds the lines of :mod:`~hgpo_rllib.experiments.memory_items`
(learner, critic, env runner). **One shared GPU**: when the roles ask for fractions of a GPU that add
up to at most one (the learner's, the env runners' and the evaluation env runners'), Ray puts them on
one GPU, so the plan is one GPU's sum of their lines (each vLLM engine claims its share of the whole
GPU, as vLLM checks at start-up); Ray's fractions themselves only place the actors.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hgpo_rllib.experiments.memory_items import (
    GB,
    Item,
    LearnerSettings,
    activation_items,
    critic_items,
    env_runner_items,
    learner_items,
)
from hgpo_rllib.model_shape import LORA_ALL_LINEAR, ModelShape
from hgpo_rllib.rl_module.config import (
    POLICY_TRUNK,
    TINY_MODEL_DEFAULTS,
    TINY_PRESET,
    LLMModuleConfig,
)

DEFAULT_GPU_MEMORY_GB = 80.0
#: Architecture files of the models the paper presets use (public numbers; no weights).
MODEL_CONFIGS_DIR = Path(__file__).resolve().parents[1] / "model_configs"  # hgpo_rllib/model_configs
PRESET_MODELS = {"paper-1.5b": "qwen2.5-1.5b", "paper-7b": "qwen2.5-7b", "gpu-0.5b": "qwen2.5-0.5b"}
#: The role of a plan where every GPU role shares one GPU (fractional GPUs, e.g. ``--preset gpu-0.5b``).
SHARED_GPU_ROLE = "one GPU shared by the learner and env runners"
#: Maps ``model_config["model"]`` (or the critic's) to the local directory holding its config.json: the
#: caller's resolver of GGUF files, short names and adapter folders (rl_module.model_sources).
ModelDir = Callable[[str], str | os.PathLike]


@dataclasses.dataclass(frozen=True)
class RolePlan:
    """What one GPU of a role holds."""

    role: str
    num_gpus: int
    items: tuple[Item, ...]
    budget_bytes: int
    problems: tuple[str, ...] = ()
    hint: str = ""  #: the settings that would lower this role's memory

    @property
    def total_bytes(self) -> int:
        return sum(item.bytes for item in self.items)

    @property
    def host_bytes(self) -> int:
        """Host RAM per GPU of this role (offloaded state; not part of the GPU budget)."""
        return sum(item.host_bytes for item in self.items)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.budget_bytes and not self.problems


def num_llms(config: Any) -> int:
    """The LLMs a run trains: its modules (several in a multi-agent run, one per role or shared)."""
    return len(config.policies) if config.is_multi_agent else 1


def shape_for_config(config: Any, model_dir: ModelDir = Path) -> ModelShape:
    """The model's shape: its directory's config.json, or the tiny preset's Qwen2 settings."""
    mc = config.user_model_config()
    model = mc.get("model", TINY_PRESET)
    if model != TINY_PRESET:
        return ModelShape.from_model_dir(model_dir(model))
    vocab = int(mc.get("tokenizer_vocab_size", 1024))
    return ModelShape.from_config(
        {**TINY_MODEL_DEFAULTS, **mc.get("tiny_model", {}), "vocab_size": vocab, "model_type": "qwen2"},
        TINY_PRESET,
    )


def evaluation_gpus(config: Any) -> float:
    """GPUs of each evaluation env runner (0 without evaluation env runners; RLlib makes them when
    ``evaluation_num_env_runners`` > 0, even with ``evaluation_interval`` 0)."""
    if not config.evaluation_num_env_runners:
        return 0
    return (config.evaluation_config or {}).get("num_gpus_per_env_runner", config.num_gpus_per_env_runner)


def shares_one_gpu(config: Any) -> bool:
    """Whether the run's GPU roles ask for fractions of a GPU that add up to at most one, so Ray
    places them on one GPU (``--preset gpu-0.5b``)."""
    shares = [
        (max(1, config.num_learners), config.num_gpus_per_learner),
        (max(1, config.num_env_runners), config.num_gpus_per_env_runner),
        (config.evaluation_num_env_runners, evaluation_gpus(config)),
    ]
    used = [(count, gpus) for count, gpus in shares if gpus > 0]
    return any(gpus < 1 for _, gpus in used) and 0 < sum(count * gpus for count, gpus in used) <= 1


def has_gpu_roles(config: Any) -> bool:
    """Whether the learner or the env runners ask for GPUs (a CPU run has nothing to plan)."""
    return config.num_gpus_per_learner > 0 or config.num_gpus_per_env_runner > 0


def plan_for_config(
    config: Any, gpu_memory_gb: float = DEFAULT_GPU_MEMORY_GB, model_dir: ModelDir = Path
) -> list[RolePlan]:
    """Per-role plans of an HGPOConfig's GPU roles (roles without GPUs are left out, and a config
    without any reads no model); one plan of their sum when they share one GPU
    (:func:`shares_one_gpu`). ``model_dir`` maps the policy's and the critic's ``model`` to the
    directory holding their config.json (by default the name is that directory)."""
    if not has_gpu_roles(config):
        return []
    model_dir = functools.cache(model_dir)  # each role reads the shape: a GGUF file is hashed once
    plans = _role_plans(config, gpu_memory_gb, model_dir)
    if not shares_one_gpu(config):
        return plans
    runners = [p for p in plans if p.role == "env runner"]
    if runners and evaluation_gpus(config) > 0:  # the evaluation runner holds what a runner holds
        evaluation = _runner_plan(config, gpu_memory_gb, model_dir, config.evaluation_config or {})
        plans.append(dataclasses.replace(evaluation, role="evaluation env runner"))
    items = tuple(
        dataclasses.replace(item, name=f"{plan.role}: {item.name}") for plan in plans for item in plan.items
    )
    problems = tuple(f"{plan.role}: {problem}" for plan in plans for problem in plan.problems)
    hint = "; ".join(dict.fromkeys(plan.hint for plan in plans))  # the learner's levers, the runners'
    return [RolePlan(SHARED_GPU_ROLE, 1, items, int(gpu_memory_gb * GB), problems, hint)]


def _role_plans(config: Any, gpu_memory_gb: float, model_dir: ModelDir) -> list[RolePlan]:
    shape = shape_for_config(config, model_dir)
    mc = LLMModuleConfig.from_model_config(config.user_model_config())
    budget = int(gpu_memory_gb * GB)
    plans = []
    if config.num_gpus_per_learner > 0:
        sharded = config.learner_sharding == "fsdp"
        settings = LearnerSettings(
            torch_dtype=mc.torch_dtype,
            lora_r=mc.lora["r"] if mc.lora else None,
            lora_target_modules=mc.lora["target_modules"] if mc.lora else LORA_ALL_LINEAR,
            gradient_checkpointing=mc.gradient_checkpointing,
            logprob_chunk_tokens=mc.logprob_chunk_tokens,
            reference=config.kl_coeff > 0,
            reference_on_cpu=mc.reference_on_cpu,
            micro_batch_rows=config.micro_batch_size or config.minibatch_size_per_learner or 1,
            prompt_tokens=config.max_prompt_tokens,
            response_tokens=config.max_new_tokens,
            num_shards=max(1, config.num_learners) if sharded else 1,
            offload=sharded and config.learner_offload,
            num_models=num_llms(config),
        )
        levers = [
            "" if mc.lora else "model_config['lora']",
            "" if mc.gradient_checkpointing else "model_config['gradient_checkpointing']=True",
            "model_config['reference_on_cpu']=True"
            if settings.reference and not mc.lora and not mc.reference_on_cpu
            else "",
            "" if mc.logprob_chunk_tokens else "model_config['logprob_chunk_tokens']=1024",
            "learner_offload=True" if sharded and not config.learner_offload else "",
            f"a smaller micro_batch_size (now {settings.micro_batch_rows}) or max_prompt_tokens",
        ]
        items = learner_items(shape, settings)
        if mc.critic == POLICY_TRUNK:  # heads on the policy's trunk: a second pass's activations
            (acts, _head) = activation_items(shape, settings)
            items.append(dataclasses.replace(acts, name=f"critic {acts.name}", note="the trunk's value pass"))
        elif mc.critic is not None and mc.critic != TINY_PRESET:
            items += critic_items(ModelShape.from_model_dir(model_dir(mc.critic)), settings)
        plans.append(
            RolePlan(
                "learner",
                max(1, config.num_learners),
                tuple(items),
                budget,
                hint="set " + ", ".join(x for x in levers if x),
            )
        )
    if config.num_gpus_per_env_runner > 0:
        plans.append(_runner_plan(config, gpu_memory_gb, model_dir))
    return plans


def _runner_plan(
    config: Any, gpu_memory_gb: float, model_dir: ModelDir, overrides: Mapping[str, Any] | None = None
) -> RolePlan:
    """An env runner's plan; ``overrides``: an evaluation runner's ``evaluation_config``."""
    shape = shape_for_config(config, model_dir)
    mc = LLMModuleConfig.from_model_config(config.user_model_config())
    budget = int(gpu_memory_gb * GB)
    items, problems = env_runner_items(
        shape,
        torch_dtype=mc.torch_dtype,
        vllm=mc.inference_backend in ("auto", "vllm"),
        gpu_bytes=budget,
        vllm_utilization=mc.vllm_gpu_memory_utilization,
        num_envs=(overrides or {}).get("num_envs_per_env_runner", config.num_envs_per_env_runner),
        seq_tokens=config.max_prompt_tokens + config.max_new_tokens,
        num_models=num_llms(config),
    )
    hint = (
        "use fewer num_envs_per_env_runner, a smaller model or a lower "
        "model_config['vllm_gpu_memory_utilization']"
    )
    return RolePlan("env runner", max(1, config.num_env_runners), tuple(items), budget, tuple(problems), hint)


def fit_errors(plans: Sequence[RolePlan]) -> list[str]:
    """One message per role that does not fit, naming the settings that would make it fit."""
    errors = []
    for plan in plans:
        errors += list(plan.problems)
        if plan.total_bytes > plan.budget_bytes:
            biggest = max(plan.items, key=lambda item: item.bytes)
            errors.append(
                f"the {plan.role} needs {plan.total_bytes / GB:.1f} GB per GPU but has "
                f"{plan.budget_bytes / GB:.0f} GB (largest: {biggest.name}, {biggest.bytes / GB:.1f} GB): "
                f"{plan.hint}"
            )
    return errors


def format_plan(plans: Sequence[RolePlan]) -> str:
    lines = []
    for plan in plans:
        width = max([34, *(len(item.name) for item in plan.items)])
        lines.append(f"{plan.role} ({plan.num_gpus} GPU{'s' if plan.num_gpus > 1 else ''}), per GPU:")
        for item in plan.items:
            lines.append(f"  {item.name:<{width}} {item.bytes / GB:8.2f} GB  {item.note}")
        verdict = "fits" if plan.fits else "DOES NOT FIT"
        total = f"{plan.total_bytes / GB:8.2f} GB  of {plan.budget_bytes / GB:.0f} GB"
        lines.append(f"  {'total':<{width}} {total}: {verdict}")
        if plan.host_bytes:
            lines.append(
                f"  {'host RAM per ' + plan.role:<{width}} {plan.host_bytes / GB:8.2f} GB  "
                "offloaded shards and AdamW state, outside the GPU budget"
            )
        lines += [f"  ! {problem}" for problem in plan.problems]
    return "\n".join(lines)
