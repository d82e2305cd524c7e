"""Config validation shared by the text-agent algorithms: every bad setting at once, each message naming
the setting, its value and what was expected, checked in the driver before any process starts.

RLlib's ``validate()`` raises on the first problem with generic text; a run of an LLM agent fails late
and expensively (after the model loads and the first wave samples), so everything that can be checked
from the config is checked here; the model and whether each GPU role fits its memory, in
:mod:`hgpo_rllib.algorithms.model_checks`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ray.rllib.env.multi_agent_env import MultiAgentEnv

import envs
from hgpo_rllib.advantages import ADV_MODES
from hgpo_rllib.algorithms.model_checks import model_errors
from hgpo_rllib.checks import is_bool, is_int, is_lr, is_number
from hgpo_rllib.env_runner.grouped_env_runner import GroupedEnvRunner
from hgpo_rllib.env_runner.grouped_multi_agent_env_runner import GroupedMultiAgentEnvRunner
from hgpo_rllib.rl_module.config import ALGORITHM_OWNED_KEYS, TINY_PRESET
from hgpo_rllib.rl_module.prompts import PROMPT_TURNS, SYSTEM_AND_USER

LEARNER_SHARDING = ("none", "fsdp")
WEIGHT_TRANSFERS = ("engine_dtype", "float32_state")


class SettingErrors:
    """Collects one message per invalid setting of ``config``."""

    def __init__(self, config: Any):
        self.config = config
        self.messages: list[str] = []

    def need(self, ok: bool, name: str, expected: str) -> None:
        if not ok:
            self.messages.append(f"{name}={getattr(self.config, name)!r} is invalid: expected {expected}")

    def add(self, message: str) -> None:
        self.messages.append(message)


def level_weight_errors(errors: SettingErrors, *, check_overflow: bool = True) -> None:
    """HGPO's level settings (``adv_mode``, ``length_weight_alpha``) of HGPO's config or of HiPER's
    critic-free high level; the level weights L**alpha (L <= K + 2) must also be finite floats, or
    the advantage computation overflows."""
    config = errors.config
    errors.need(config.adv_mode in ADV_MODES, "adv_mode", f"one of {ADV_MODES}")
    history_length, alpha = config.history_length, config.length_weight_alpha
    errors.need(is_number(alpha) and alpha >= 0, "length_weight_alpha", "a number >= 0")
    if not (check_overflow and is_int(history_length) and is_number(alpha)):
        return
    try:
        total = sum(float(length) ** alpha for length in range(1, history_length + 3))
    except OverflowError:
        total = math.inf
    if not math.isfinite(total):
        errors.add(
            f"length_weight_alpha={alpha!r} is invalid: the level weights "
            f"L**alpha overflow for history_length={history_length} (L up to {history_length + 2})"
        )


def _multi_agent_errors(errors: SettingErrors) -> None:
    """A team env (a ``MultiAgentEnv``, docs/drmas.md) needs RLlib's multi-agent settings, and they a
    team env; several learners of a team hold replicas (DDP): a sharded module's forward passes are
    collectives, and a learner whose groups hold no turn of a role would skip them in the learner
    connector's log-prob passes and hang the others (the update itself runs idle rows for it)."""
    c = errors.config
    team_env = issubclass(envs.env_class(c.envs_name(), c.env_config), MultiAgentEnv)
    if team_env and not c.is_multi_agent:
        errors.add(
            f"env={c.env!r} is a multi-agent system: map its roles to modules with "
            ".multi_agent(policies={...}, policy_mapping_fn=lambda agent_id, episode, **kw: ...) "
            "(one shared module or one per role)"
        )
    if c.is_multi_agent and not team_env:
        errors.add(
            f"multi_agent(policies={sorted(c.policies)}) is invalid with env={c.env!r}: it has one agent"
        )
    if c.is_multi_agent and c.num_learners > 1 and c.learner_sharding != "none":
        errors.add(
            f"learner_sharding={c.learner_sharding!r} is not supported with multi_agent() yet: several "
            "learners of a multi-agent system hold replicas (learner_sharding='none', DDP)"
        )


def text_agent_errors(config: Any) -> list[str]:
    """Every invalid shared setting of a :class:`~hgpo_rllib.algorithms.text_agent.TextAgentConfig`."""
    errors = SettingErrors(config)
    need = errors.need
    c = config
    need(is_int(c.history_length) and c.history_length >= 0, "history_length", "an int >= 0")
    need(is_int(c.group_size) and c.group_size >= 1, "group_size", "an int >= 1")
    for name in ("num_env_runners", "num_learners", "evaluation_num_env_runners"):
        need(is_int(getattr(c, name)) and getattr(c, name) >= 0, name, "an int >= 0")
    need(c.seed is None or (is_int(c.seed) and c.seed >= 0), "seed", "None or an int >= 0")
    need(is_int(c.train_batch_size) and c.train_batch_size >= 1, "train_batch_size", "an int >= 1")
    for name in (
        "num_gpus_per_learner",
        "num_cpus_per_learner",
        "num_gpus_per_env_runner",
        "num_cpus_per_env_runner",
    ):
        value = getattr(c, name)
        need(value == "auto" or (is_number(value) and value >= 0), name, "a number >= 0")
    need(
        is_int(c.metrics_num_episodes_for_smoothing) and c.metrics_num_episodes_for_smoothing >= 1,
        "metrics_num_episodes_for_smoothing",
        "an int >= 1",
    )
    need(
        is_number(c.progress_interval_s) and c.progress_interval_s >= 0,
        "progress_interval_s",
        "a number >= 0 (0: no progress lines)",
    )
    need(
        c.evaluation_interval is None or (is_int(c.evaluation_interval) and c.evaluation_interval >= 0),
        "evaluation_interval",
        "None or an int >= 0 (0 or None: no evaluation)",
    )
    if not (is_int(c.num_learners) and c.num_learners >= 0):
        return errors.messages  # the checks below divide by it
    min_groups = max(1, c.num_learners)  # every learner needs at least one whole group
    need(
        is_int(c.groups_per_iteration) and c.groups_per_iteration >= min_groups,
        "groups_per_iteration",
        f"an int >= max(1, num_learners={c.num_learners})",
    )
    need(is_number(c.gamma) and 0 <= c.gamma <= 1, "gamma", "a number in [0, 1]")
    need(
        is_number(c.invalid_action_penalty) and c.invalid_action_penalty >= 0,
        "invalid_action_penalty",
        "a number >= 0",
    )
    need(is_number(c.clip_param) and 0 < c.clip_param < 1, "clip_param", "a number in (0, 1)")
    need(is_number(c.dual_clip) and c.dual_clip > 1, "dual_clip", "a number > 1")
    need(is_number(c.kl_coeff) and c.kl_coeff >= 0, "kl_coeff", "a number >= 0")
    need(is_number(c.entropy_coeff) and c.entropy_coeff >= 0, "entropy_coeff", "a number >= 0")
    need(is_number(c.weight_decay) and c.weight_decay >= 0, "weight_decay", "a number >= 0")
    need(
        is_bool(c.recompute_old_logp)
        or (isinstance(c.recompute_old_logp, str) and c.recompute_old_logp == "auto"),
        "recompute_old_logp",
        "True, False or 'auto'",
    )
    need(
        is_number(c.old_logp_gap_threshold) and c.old_logp_gap_threshold >= 0,
        "old_logp_gap_threshold",
        "a number >= 0 (mean absolute log-prob gap per token)",
    )
    need(is_bool(c.length_buckets), "length_buckets", "True or False")
    need(is_bool(c.skip_zero_advantage_rows), "skip_zero_advantage_rows", "True or False")
    need(is_bool(c.async_sampling), "async_sampling", "True or False")
    need(
        c.learner_matmul_gflops is None
        or (is_number(c.learner_matmul_gflops) and c.learner_matmul_gflops >= 0),
        "learner_matmul_gflops",
        "None (measured when the learner starts) or a number >= 0",
    )
    need(
        is_number(c.behaviour_weight_cap) and c.behaviour_weight_cap >= 1,
        "behaviour_weight_cap",
        "a number >= 1",
    )
    if c.async_sampling is True and not c.in_evaluation:  # evaluation samples on its own runners
        need(
            c.recompute_old_logp is True,
            "recompute_old_logp",
            "True with async_sampling=True (not 'auto': the off-policy correction weighs the "
            "learner's own log-probs against the sampler's, a version older)",
        )
        need(
            is_int(c.num_env_runners) and c.num_env_runners >= 1,
            "num_env_runners",
            ">= 1 with async_sampling=True (remote env runners sample while the learner trains)",
        )
    need(is_lr(c.lr), "lr", "a number > 0, or a schedule [[0, lr0], [timestep, lr], ...]")
    need(
        c.grad_clip is None or (is_number(c.grad_clip) and c.grad_clip > 0),
        "grad_clip",
        "None or a number > 0",
    )
    need(
        c.minibatch_size is None or (is_int(c.minibatch_size) and c.minibatch_size >= 1),
        "minibatch_size",
        "None or an int >= 1",
    )
    if is_int(c.minibatch_size) and c.num_learners > 1:
        need(
            c.minibatch_size % c.num_learners == 0,
            "minibatch_size",
            f"a multiple of num_learners={c.num_learners} (rows per step over all learners)",
        )
    need(
        c.micro_batch_size is None or (is_int(c.micro_batch_size) and c.micro_batch_size >= 1),
        "micro_batch_size",
        "None or an int >= 1",
    )
    if is_int(c.micro_batch_size) and is_int(c.minibatch_size) and c.minibatch_size >= 1:
        need(
            c.micro_batch_size <= c.minibatch_size_per_learner,
            "micro_batch_size",
            f"<= the minibatch per learner ({c.minibatch_size_per_learner} rows)",
        )
    need(
        c.minibatches_per_module is None
        or (is_int(c.minibatches_per_module) and c.minibatches_per_module >= 1),
        "minibatches_per_module",
        "None or an int >= 1",
    )
    if c.minibatches_per_module and c.num_learners > 1:
        errors.add(
            f"minibatches_per_module={c.minibatches_per_module} needs one learner, not num_learners="
            f"{c.num_learners}: several learners step in lock-step on minibatches of minibatch_size rows"
        )
    need(is_int(c.num_epochs) and c.num_epochs >= 1, "num_epochs", "an int >= 1")
    need(is_int(c.num_env_workers) and c.num_env_workers >= 0, "num_env_workers", "an int >= 0")
    need(c.weight_transfer in WEIGHT_TRANSFERS, "weight_transfer", f"one of {WEIGHT_TRANSFERS}")
    _sharding_errors(errors)
    need(
        c.sample_timeout_s is None or (is_number(c.sample_timeout_s) and 0 < c.sample_timeout_s < math.inf),
        "sample_timeout_s",
        "None (no limit) or a finite number of seconds > 0",
    )
    need(
        is_int(c.num_consecutive_env_runner_failures_tolerance)
        and c.num_consecutive_env_runner_failures_tolerance >= 0,
        "num_consecutive_env_runner_failures_tolerance",
        "an int >= 0",
    )
    for name in ("max_prompt_tokens", "max_new_tokens"):
        need(is_int(getattr(c, name)) and getattr(c, name) >= 1, name, "an int >= 1")
    need(c.prompt_turns in PROMPT_TURNS, "prompt_turns", f"one of {PROMPT_TURNS}")
    need(
        is_int(c.min_new_tokens)
        and c.min_new_tokens >= 0
        and (not is_int(c.max_new_tokens) or c.min_new_tokens <= c.max_new_tokens),
        "min_new_tokens",
        "an int in [0, max_new_tokens]",
    )
    need(is_number(c.temperature) and c.temperature > 0, "temperature", "a number > 0")
    need(
        is_number(c.eval_temperature) and c.eval_temperature >= 0,
        "eval_temperature",
        "a number >= 0 (0 = greedy)",
    )
    _rllib_plumbing_errors(errors)
    if c.envs_name() is None:
        errors.add(
            f"env={c.env!r} is invalid: expected a built-in env ('alfworld', 'webshop', 'keychest'), "
            "a name registered with ray.tune.registry.register_env or gymnasium.register, or a "
            "'module:Class' path of a TextEnv subclass"
        )
    else:
        try:
            envs.check_env_config(c.envs_name(), c.env_config)
        except ValueError as exc:
            errors.add(f"env_config={dict(c.env_config)!r} is invalid for {c.envs_name()}: {exc}")
        else:
            _multi_agent_errors(errors)
            _prompt_turns_errors(errors)
    vocabulary = c.user_model_config().get("action_vocabulary") or ()
    if (
        isinstance(c.env_config, Mapping)
        and c.env_config.get("answer_format") == envs.PLAN_EXECUTE
        and c.user_model_config().get("constrain_to_admissible") is True
        and not envs.subgoals_of_blocks(vocabulary)
    ):
        errors.add(
            "model_config['constrain_to_admissible']=True is invalid with env_config['answer_format']="
            f"{envs.PLAN_EXECUTE!r} unless model_config['action_vocabulary'] holds whole blocks "
            "(envs.plan_execute_blocks): it limits each answer to one admissible action, so no answer "
            "could carry the <switch> and <subgoal> tags"
        )
    model = c.user_model_config().get("model", TINY_PRESET)
    if c.evaluation_interval and c.evaluation_num_env_runners == 0 and model != TINY_PRESET:
        errors.add(
            "evaluation_num_env_runners=0 is invalid with evaluation_interval="
            f"{c.evaluation_interval} and model_config['model']={model!r}: it would evaluate that "
            "model in the driver process (one CPU, HF generate); set "
            ".evaluation(evaluation_num_env_runners=1): evaluation env runners of their own, "
            "GPU-backed with num_gpus_per_env_runner"
        )
    clashes = sorted(set(c.user_model_config()) & set(ALGORITHM_OWNED_KEYS))
    if clashes:
        errors.add(
            f"model_config sets {clashes}: set these with config.training(...) "
            "(seed: config.debugging(seed=...)) so module and algorithm agree"
        )
    else:
        errors.messages += model_errors(c)
    return errors.messages


def _prompt_turns_errors(errors: SettingErrors) -> None:
    """A system/user split needs the env's template split into turns (a team's is not)."""
    c = errors.config
    if c.prompt_turns == SYSTEM_AND_USER:
        try:
            envs.get_prompt_turns_renderer(c.envs_name(), c.env_config)
        except ValueError as exc:
            errors.add(f"prompt_turns={c.prompt_turns!r} is invalid: {exc}")


def _sharding_errors(errors: SettingErrors) -> None:
    c, need = errors.config, errors.need
    need(c.learner_sharding in LEARNER_SHARDING, "learner_sharding", f"one of {LEARNER_SHARDING}")
    if c.learner_sharding == "fsdp":
        need(
            is_int(c.num_learners) and c.num_learners >= 2,
            "learner_sharding",
            f"'none' with num_learners={c.num_learners}: 'fsdp' shards over >= 2 learners "
            "(a single learner holds the whole model either way)",
        )
        need(
            not c.user_model_config().get("lora"),
            "learner_sharding",
            "'none' with model_config['lora']: only the small adapters train, each learner "
            "holds them whole (sharding them would save almost nothing)",
        )
    need(is_bool(c.learner_offload), "learner_offload", "True or False")
    need(
        not c.learner_offload or c.learner_sharding == "fsdp",
        "learner_offload",
        f"False with learner_sharding={c.learner_sharding!r}: offloading moves FSDP2's shards to "
        "host RAM, so it needs learner_sharding='fsdp'",
    )


def _rllib_plumbing_errors(errors: SettingErrors) -> None:
    """RLlib settings the text pipeline depends on (docs/rllib_notes.md §9)."""
    c, need = errors.config, errors.need
    if is_int(c.group_size) and c.group_size >= 1:
        envs_ok = is_int(c.num_envs_per_env_runner) and c.num_envs_per_env_runner >= 1
        need(
            envs_ok and c.num_envs_per_env_runner % c.group_size == 0,
            "num_envs_per_env_runner",
            f"a multiple of group_size={c.group_size} (each runner steps whole groups in lock-step)",
        )
    runner = GroupedMultiAgentEnvRunner if c.is_multi_agent else GroupedEnvRunner
    need(
        isinstance(c.env_runner_cls, type) and issubclass(c.env_runner_cls, runner),
        "env_runner_cls",
        f"{runner.__name__} or a subclass (the estimators need complete rollout groups)",
    )
    mode = str(c.gym_env_vectorize_mode).lower()
    need(
        mode.endswith("sync") and "async" not in mode,
        "gym_env_vectorize_mode",
        "'sync' (GroupedEnvRunner steps the sub-envs itself)",
    )
    need(c.episodes_to_numpy is False, "episodes_to_numpy", "False (per-step prompts have different lengths)")
    for name in (
        "add_default_connectors_to_env_to_module_pipeline",
        "add_default_connectors_to_module_to_env_pipeline",
        "add_default_connectors_to_learner_pipeline",
    ):
        need(getattr(c, name) is False, name, "False (RLlib's default pieces cannot handle text)")
    need(
        c.evaluation_duration_unit == "episodes",
        "evaluation_duration_unit",
        "'episodes' (GroupedEnvRunner samples whole episodes)",
    )
    need(
        c.num_aggregator_actors_per_learner == 0,
        "num_aggregator_actors_per_learner",
        "0 (the learner connector must see whole rollout groups)",
    )
    if c.num_env_runners == 0 and not c.in_evaluation:
        need(
            c.create_local_env_runner,
            "create_local_env_runner",
            "True when num_env_runners=0 (someone has to sample)",
        )
