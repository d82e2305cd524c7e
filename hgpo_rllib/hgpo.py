"""HGPO (Hierarchy-of-Groups Policy Optimization, ICLR 2026) as an RLlib algorithm, with the GiGPO and
GRPO baselines behind one switch.

One iteration (docs/rllib_notes.md §5.1): the :class:`~hgpo_rllib.env_runner.GroupedEnvRunner` s sample
``groups_per_iteration`` complete rollout groups of ``group_size`` episodes (one task per group);
the learner connector turns every step into a token row with the configured estimator's advantage
(:mod:`hgpo_rllib.advantages`, on the whole batch before minibatching); the learner takes clipped
policy-gradient steps (:mod:`hgpo_rllib.torch.hgpo_torch_learner`); the new weights go to the runners.

Example::

    from hgpo_rllib import HGPOConfig

    config = (
        HGPOConfig()
        .environment("alfworld", env_config={"max_steps": 50})
        .env_runners(num_env_runners=2, num_envs_per_env_runner=64)
        .learners(num_learners=1, num_gpus_per_learner=1)
        .rl_module(model_config={"model": "/models/Qwen2.5-1.5B-Instruct", "torch_dtype": "bfloat16"})
        .training(estimator="hgpo", history_length=2, group_size=8, groups_per_iteration=16)
    )
    algo = config.build_algo()
    result = algo.train()

Model choice lives in ``.rl_module(model_config=...)``: ``model`` ("tiny-qwen2", a random-init
test model whose tokenizer is trained on the env's texts, or a local Hugging Face directory),
``torch_dtype``, ``inference_backend`` ("auto" | "hf" | "vllm"), ``vllm_engine_args`` (further
``vllm.LLM`` arguments), ``tiny_model`` overrides (see
:class:`~hgpo_rllib.rl_module.LLMRLModule`). Generation lengths, temperatures and ``kl_coeff`` are
training settings; HGPOConfig passes them to the module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import json
import logging
import math
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.connectors.common.tensor_to_numpy import TensorToNumpy
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
    WEIGHTS_SEQ_NO,
)
from ray.train.constants import DEFAULT_STORAGE_PATH
from ray.tune.registry import register_trainable

import envs
from hgpo_rllib.callbacks import HGPOMetricsCallback
from hgpo_rllib.connectors.decode_actions import TextActionsToEnv
from hgpo_rllib.connectors.group_advantages import ADV_MODES, ESTIMATORS, WEIGHTINGS
from hgpo_rllib.connectors.history_window import HistoryWindowPrompt
from hgpo_rllib.env_runner import RESP_MASK, TASK_GENERATOR, GroupedEnvRunner
from hgpo_rllib.learner_group import GroupShardingLearnerGroup
from hgpo_rllib.rl_module import TINY_PRESET, LLMModuleConfig, LLMRLModule, _is_int, _is_number
from hgpo_rllib.tokenizer import TINY_MODEL_DEFAULTS

#: Module settings owned by HGPOConfig (``training()`` / ``debugging(seed=...)``), not model_config.
_MODULE_KEYS_FROM_CONFIG = (
    "max_prompt_tokens", "max_new_tokens", "temperature", "eval_temperature", "kl_coeff", "seed"
)
LEARNER_SHARDING = ("none", "fsdp")
#: Algorithm-level metrics (results top level).
GENERATED_TOKENS_PER_S = "generated_tokens_per_s"
NUM_GROUPS_SAMPLED = "num_groups_sampled"
#: Env runner calls of this iteration (sampling and weight sync) that raised, died or timed out.
NUM_ENV_RUNNER_FAILURES = "num_env_runner_failures"
#: Iterations in a row, up to this one, whose sampling did not deliver ``groups_per_iteration``.
NUM_CONSECUTIVE_FAILED_ITERATIONS = "num_consecutive_failed_iterations"
#: Upper bound on max_prompt_tokens + max_new_tokens whatever the model claims (a typo guard).
MAX_TOKENS = 1 << 20
ITERATION_SECONDS = "iteration_seconds"
#: Algorithm state key: each remote env runner's task generator, by worker index.
TASK_GENERATORS = "task_generators"

logger = logging.getLogger(__name__)


@functools.cache
def _tokenizer_corpus(env_name: str) -> tuple[str, ...]:
    return tuple(envs.get_tokenizer_corpus(env_name))


class HGPOConfig(AlgorithmConfig):
    """Configuration of :class:`HGPO`; defaults are the paper's (docs/hgpo_algorithm.md §5).

    Besides :meth:`training`, the RLlib settings HGPO relies on: ``lr`` 1e-6, ``grad_clip`` 1.0
    (global norm), ``minibatch_size`` 256 rows per optimiser step (over all learners),
    ``num_epochs`` 1, no shuffling, ``gamma`` 0.95; env runners are
    :class:`~hgpo_rllib.env_runner.GroupedEnvRunner` s whose ``num_envs_per_env_runner`` must be a
    multiple of ``group_size`` (that many groups run in lock-step per wave); the driver keeps no
    model copy (``create_local_env_runner=False``), so ``num_env_runners`` must be >= 1 unless you
    set ``create_local_env_runner=True``. Evaluation runs with ``explore=False`` (the module samples
    at ``eval_temperature``) and groups of one episode.

    Fault tolerance (``.env_runners(sample_timeout_s=...)``, ``.fault_tolerance(...)``): one call
    to an env runner (sampling its share of groups, or a weight sync) may take ``sample_timeout_s``
    seconds (default 1800; None = no limit); a runner that raises, dies or runs out of time loses
    its share, which is sampled again on the other runners in the same iteration (or, with none
    left, on restarted ones, waiting at most ``env_runner_restore_timeout_s``).
    ``num_consecutive_env_runner_failures_tolerance`` (default 2) consecutive iterations that
    cannot complete their batch are tolerated; the next one raises with the runners' errors.
    """

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or HGPO)
        # Advantage estimation (docs/hgpo_algorithm.md §1.1-§4).
        self.estimator = "hgpo"
        self.history_length = 2
        self.adv_mode = "mean_std_norm"
        self.length_weight_alpha = 1.0
        self.base_group = False
        self.weighting = "reference"
        self.step_advantage_w = 1.0
        self.gamma = 0.95
        self.invalid_action_penalty = 0.1
        # Rollouts.
        self.group_size = 8
        self.groups_per_iteration = 16
        # Loss and optimiser (§5).
        self.clip_param = 0.2
        self.dual_clip = 3.0
        self.kl_coeff = 0.01
        self.entropy_coeff = 0.001
        self.weight_decay = 0.01
        self.recompute_old_logp = True
        self.lr = 1e-6
        self.grad_clip = 1.0
        self.grad_clip_by = "global_norm"
        self.minibatch_size = 256
        self.micro_batch_size = 16
        self.num_epochs = 1
        self.shuffle_batch_per_epoch = False
        self.learner_sharding = "none"
        self.learner_offload = False
        # Generation.
        self.max_prompt_tokens = 4096
        self.max_new_tokens = 512
        self.temperature = 1.0
        self.eval_temperature = 0.4
        # RLlib plumbing for text envs (docs/rllib_notes.md §1, §9).
        self.env_runner_cls = GroupedEnvRunner
        self.num_env_workers = 0
        self.num_env_runners = 1
        self.num_envs_per_env_runner = 8
        self.create_local_env_runner = False
        self.batch_mode = "complete_episodes"
        self.episodes_to_numpy = False  # prompts have different lengths per step
        self.add_default_connectors_to_env_to_module_pipeline = False
        self.add_default_connectors_to_module_to_env_pipeline = False
        self.add_default_connectors_to_learner_pipeline = False
        self.callbacks_class = HGPOMetricsCallback
        self.evaluation_config = {"explore": False}
        # Fault tolerance: an LLM iteration samples for minutes, so RLlib's 60 s would be too short.
        self.sample_timeout_s = 1800.0
        self.num_consecutive_env_runner_failures_tolerance = 2

    @override(AlgorithmConfig)
    def training(
        self,
        *,
        estimator: str = NotProvided,
        history_length: int = NotProvided,
        adv_mode: str = NotProvided,
        length_weight_alpha: float = NotProvided,
        base_group: bool = NotProvided,
        weighting: str = NotProvided,
        step_advantage_w: float = NotProvided,
        group_size: int = NotProvided,
        groups_per_iteration: int = NotProvided,
        invalid_action_penalty: float = NotProvided,
        clip_param: float = NotProvided,
        dual_clip: float = NotProvided,
        kl_coeff: float = NotProvided,
        entropy_coeff: float = NotProvided,
        weight_decay: float = NotProvided,
        micro_batch_size: int | None = NotProvided,
        recompute_old_logp: bool = NotProvided,
        max_prompt_tokens: int = NotProvided,
        max_new_tokens: int = NotProvided,
        temperature: float = NotProvided,
        eval_temperature: float = NotProvided,
        learner_sharding: str = NotProvided,
        learner_offload: bool = NotProvided,
        **kwargs: Any,
    ) -> HGPOConfig:
        """Sets HGPO's training settings (plus RLlib's: ``gamma``, ``lr``, ``minibatch_size``, ...).

        Args:
            estimator: Advantage estimator: "hgpo" (default), "gigpo" or "grpo"
                (docs/hgpo_algorithm.md §2-§4).
            history_length: K (default 2): past (observation, action) records shown in the prompt;
                HGPO groups steps on up to K+1 observations (the current one and K before it).
            adv_mode: "mean_std_norm" (default: (R - mean) / (std + eps)) or "mean_norm"
                (R - mean) inside each group, for every estimator (GRPO: Dr.GRPO without std).
            length_weight_alpha: HGPO's alpha (default 1.0): level weights L**alpha; 0 = uniform.
            base_group: HGPO: add the episode-level (GRPO) advantage as the lowest level (default
                False, as in the published runs).
            weighting: HGPO level weights, "reference" (default, verl-agent's L = d + 1),
                "paper" (Eq. 7's (k + 1)**alpha, quirk Q2) or "adaptive" (ours: per-step weights
                from the batch that minimise an estimate of the baseline's error; ignores
                length_weight_alpha, excludes base_group), see ``hgpo_advantages``.
            step_advantage_w: GiGPO's weight of the step advantage (default 1.0).
            group_size: n, episodes per rollout group, all on one task (default 8).
            groups_per_iteration: Rollout groups (tasks) per training iteration (default 16).
            invalid_action_penalty: Subtracted from a format-invalid step's return and episode
                score, after discounting (default 0.1, §1.1).
            clip_param: PPO ratio clip epsilon (default 0.2).
            dual_clip: For A < 0 the per-token loss is capped at -A * dual_clip (default 3.0).
            kl_coeff: Weight of the k3 KL to the frozen initial model (default 0.01); 0 disables the
                term and no reference model is built.
            entropy_coeff: Weight of the entropy bonus (default 0.001).
            weight_decay: AdamW weight decay (default 0.01).
            micro_batch_size: Rows per forward/backward pass (default 16); a minibatch is
                processed in such passes with gradient accumulation (exact token mean); also the
                chunk size of the reference and old log-prob passes. None = the whole minibatch at once.
            recompute_old_logp: The PPO ratio's old log-probs are the learner's own, computed on the
                whole batch before the update (default True, as verl); False uses the sampler's,
                which differ slightly with vLLM or bf16 and so clip spuriously. The sampler's are
                compared with the learner's in ``logp_gap_vs_sampler`` either way.
            max_prompt_tokens: Prompt budget in tokens (default 4096); longer prompts lose their
                beginning (left truncation).
            max_new_tokens: Longest response in tokens (default 512).
            temperature: Sampling temperature while training (default 1.0); the learner scores
                tokens at the same temperature.
            eval_temperature: Sampling temperature with ``explore=False`` (default 0.4; 0 = greedy).
            learner_sharding: "none" (default: every learner holds the whole model, DDP) or "fsdp"
                (FSDP2: the float32 master weights, gradients, AdamW state and the GPU reference
                sharded over ``num_learners`` >= 2 learners, each decoder layer gathered only while
                it runs; full fine-tuning only, not with ``model_config['lora']``), see
                :mod:`hgpo_rllib.fsdp`. The memory plan divides accordingly.
            learner_offload: With ``learner_sharding="fsdp"``: keep each learner's shards (float32
                master weights, gradients, reference) and AdamW state in host RAM and step AdamW
                there (FSDP2's ``CPUOffloadPolicy``, as the paper's 7B runs offload); the GPU holds
                the layers being gathered, activations and the head. Default False. Slower updates
                (host-device copies every layer, AdamW on the CPU); with CPU learners it changes nothing.

        ``minibatch_size`` (RLlib) is rows per optimiser step summed over all learners (default
        256, must divide evenly among ``num_learners``); ``num_epochs`` passes over the batch.
        """
        options = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "__class__")}
        super().training(**kwargs)
        for name, value in options.items():
            if value is not NotProvided:
                setattr(self, name, value)
        return self

    @override(AlgorithmConfig)
    def env_runners(self, *, num_env_workers: int = NotProvided, **kwargs: Any) -> HGPOConfig:
        """RLlib's env-runner settings, plus ``num_env_workers``: worker processes per env runner that
        reset and step its sub-envs concurrently (default 0: in the runner's own process).
        """
        super().env_runners(**kwargs)
        if num_env_workers is not NotProvided:
            self.num_env_workers = num_env_workers
        return self

    # ------------------------------------------------------------------------- RLlib wiring
    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=LLMRLModule)

    @override(AlgorithmConfig)
    def get_default_learner_class(self) -> type:
        if self.framework_str != "torch":
            raise ValueError(f"HGPO supports framework='torch' only, got {self.framework_str!r}")
        from hgpo_rllib.torch.hgpo_torch_learner import HGPOTorchLearner

        return HGPOTorchLearner

    @property
    @override(AlgorithmConfig)
    def _model_config_auto_includes(self) -> dict[str, Any]:
        """Generation settings, ``kl_coeff`` and seed go to the module; the tiny test model also
        gets the env's tokenizer corpus."""
        auto = {key: getattr(self, key) for key in _MODULE_KEYS_FROM_CONFIG if key != "seed"}
        if self.seed is not None:
            auto["seed"] = int(self.seed)
        user = self._user_model_config()
        if user.get("model", TINY_PRESET) == TINY_PRESET and "tokenizer_corpus" not in user:
            if self._envs_name() is not None:
                auto["tokenizer_corpus"] = list(_tokenizer_corpus(self._envs_name()))
        return super()._model_config_auto_includes | auto

    def _user_model_config(self) -> dict[str, Any]:
        mc = self._model_config
        return dict(mc) if isinstance(mc, dict) else dataclasses.asdict(mc)

    def _envs_name(self) -> str | None:
        """``config.env`` as a name of the ``envs`` package, or None if it is something else."""
        if not isinstance(self.env, str):
            return None
        try:
            return envs.get_env_spec(self.env).name
        except ValueError:
            return None

    def _prompt_connector(self) -> HistoryWindowPrompt:
        """The env's own prompt template; env_config entries that the template also takes as
        keyword arguments (e.g. KeyChest's ``require_tags``) are passed on, so prompt and env agree."""
        render = envs.get_prompt_renderer(self.env)
        params = inspect.signature(render).parameters
        render_kwargs = {
            k: v for k, v in dict(self.env_config).items()
            if k in params and params[k].kind is inspect.Parameter.KEYWORD_ONLY
        }
        return HistoryWindowPrompt(
            render_prompt=render, history_length=self.history_length, render_kwargs=render_kwargs
        )

    @override(AlgorithmConfig)
    def build_env_to_module_connector(self, env: Any = None, spaces: Any = None, device: Any = None) -> Any:
        pipeline = super().build_env_to_module_connector(env=env, spaces=spaces, device=device)
        pipeline.append(self._prompt_connector())
        return pipeline

    @override(AlgorithmConfig)
    def build_module_to_env_connector(self, env: Any = None, spaces: Any = None) -> Any:
        pipeline = super().build_module_to_env_connector(env=env, spaces=spaces)
        pipeline.append(TensorToNumpy())
        pipeline.append(TextActionsToEnv())
        return pipeline

    @override(AlgorithmConfig)
    def build_learner_group(
        self,
        *,
        env: Any = None,
        spaces: Any = None,
        rl_module_spec: Any = None,
        placement_group: Any = None,
    ) -> GroupShardingLearnerGroup:
        """RLlib's LearnerGroup, except that rollout groups are never split (docs/rllib_notes.md §5.5)."""
        if rl_module_spec is None:
            rl_module_spec = self.get_multi_rl_module_spec(env=env, spaces=spaces)
        return GroupShardingLearnerGroup(
            config=self.copy(), module_spec=rl_module_spec, placement_group=placement_group
        )

    @property
    def minibatch_size_per_learner(self) -> int | None:
        """``minibatch_size`` is global (the paper's ppo_mini_batch_size); each learner's share."""
        if not self.minibatch_size:
            return None
        return self.minibatch_size // max(1, self.num_learners)

    # ------------------------------------------------------------------------- validation
    @override(AlgorithmConfig)
    def validate(self) -> None:
        super().validate()
        for error in self._hgpo_errors() or self._memory_errors():
            self._value_error(f"HGPOConfig: {error}")

    def _memory_errors(self) -> list[str]:
        """GPU roles that cannot fit their model (hgpo_rllib/memory.py), sized by this machine's GPU if it
        has one, else 80 GB; CPU-only configs have nothing to check."""
        if not (self.num_gpus_per_learner > 0 or self.num_gpus_per_env_runner > 0):
            return []
        import torch

        from hgpo_rllib import memory

        gpu_gb = memory.DEFAULT_GPU_MEMORY_GB
        if torch.cuda.is_available():
            gpu_gb = torch.cuda.get_device_properties(0).total_memory / memory.GB
        try:
            plans = memory.plan_for_config(self, gpu_gb)
        except (ValueError, FileNotFoundError) as exc:  # e.g. a config.json without the model's sizes
            return [f"memory plan: {exc}"]
        return [f"memory plan: {e}" for e in memory.fit_errors(plans)]

    def _hgpo_errors(self) -> list[str]:
        """Every invalid HGPO setting, each message naming the setting and the value."""
        errors = []

        def need(ok: bool, name: str, expected: str) -> None:
            if not ok:
                errors.append(f"{name}={getattr(self, name)!r} is invalid: expected {expected}")

        need(self.estimator in ESTIMATORS, "estimator", f"one of {ESTIMATORS}")
        need(_is_int(self.history_length) and self.history_length >= 0, "history_length", "an int >= 0")
        need(self.adv_mode in ADV_MODES, "adv_mode", f"one of {ADV_MODES}")
        need(_is_number(self.length_weight_alpha) and self.length_weight_alpha >= 0,
             "length_weight_alpha", "a number >= 0")
        need(isinstance(self.base_group, (bool, np.bool_)), "base_group", "True or False")
        need(self.weighting in WEIGHTINGS, "weighting", f"one of {WEIGHTINGS}")
        need(not (self.base_group and self.weighting == "adaptive"), "base_group",
             "False with weighting='adaptive' (the base item scores episodes, not step returns)")
        need(_is_number(self.step_advantage_w) and self.step_advantage_w >= 0, "step_advantage_w",
             "a finite number >= 0")
        need(_is_int(self.group_size) and self.group_size >= 1, "group_size", "an int >= 1")
        min_groups = max(1, self.num_learners)  # every learner needs at least one whole group
        need(_is_int(self.groups_per_iteration) and self.groups_per_iteration >= min_groups,
             "groups_per_iteration", f"an int >= max(1, num_learners={self.num_learners})")
        need(_is_number(self.gamma) and 0 <= self.gamma <= 1, "gamma", "a number in [0, 1]")
        need(_is_number(self.invalid_action_penalty) and self.invalid_action_penalty >= 0,
             "invalid_action_penalty", "a number >= 0")
        need(_is_number(self.clip_param) and 0 < self.clip_param < 1, "clip_param", "a number in (0, 1)")
        need(_is_number(self.dual_clip) and self.dual_clip > 1, "dual_clip", "a number > 1")
        need(_is_number(self.kl_coeff) and self.kl_coeff >= 0, "kl_coeff", "a number >= 0")
        need(_is_number(self.entropy_coeff) and self.entropy_coeff >= 0, "entropy_coeff", "a number >= 0")
        need(_is_number(self.weight_decay) and self.weight_decay >= 0, "weight_decay", "a number >= 0")
        need(isinstance(self.recompute_old_logp, bool), "recompute_old_logp", "True or False")
        need(_is_lr(self.lr), "lr", "a number > 0, or a schedule [[0, lr0], [timestep, lr], ...]")
        need(self.grad_clip is None or (_is_number(self.grad_clip) and self.grad_clip > 0),
             "grad_clip", "None or a number > 0")
        need(self.minibatch_size is None or (_is_int(self.minibatch_size) and self.minibatch_size >= 1),
             "minibatch_size", "None or an int >= 1")
        if _is_int(self.minibatch_size) and self.num_learners > 1:
            need(self.minibatch_size % self.num_learners == 0, "minibatch_size",
                 f"a multiple of num_learners={self.num_learners} (rows per step over all learners)")
        need(self.micro_batch_size is None or (_is_int(self.micro_batch_size) and self.micro_batch_size >= 1),
             "micro_batch_size", "None or an int >= 1")
        if _is_int(self.micro_batch_size) and _is_int(self.minibatch_size) and self.minibatch_size >= 1:
            need(self.micro_batch_size <= self.minibatch_size_per_learner, "micro_batch_size",
                 f"<= the minibatch per learner ({self.minibatch_size_per_learner} rows)")
        need(_is_int(self.num_epochs) and self.num_epochs >= 1, "num_epochs", "an int >= 1")
        need(_is_int(self.num_env_workers) and self.num_env_workers >= 0, "num_env_workers", "an int >= 0")
        need(self.learner_sharding in LEARNER_SHARDING, "learner_sharding", f"one of {LEARNER_SHARDING}")
        if self.learner_sharding == "fsdp":
            need(_is_int(self.num_learners) and self.num_learners >= 2, "learner_sharding",
                 f"'none' with num_learners={self.num_learners}: 'fsdp' shards over >= 2 learners "
                 "(a single learner holds the whole model either way)")
            need(not self._user_model_config().get("lora"), "learner_sharding",
                 "'none' with model_config['lora']: only the small adapters train, each learner "
                 "holds them whole (sharding them would save almost nothing)")
        need(isinstance(self.learner_offload, bool), "learner_offload", "True or False")
        need(not self.learner_offload or self.learner_sharding == "fsdp", "learner_offload",
             f"False with learner_sharding={self.learner_sharding!r}: offloading moves FSDP2's shards to "
             "host RAM, so it needs learner_sharding='fsdp'")
        need(self.sample_timeout_s is None
             or (_is_number(self.sample_timeout_s) and 0 < self.sample_timeout_s < math.inf),
             "sample_timeout_s", "None (no limit) or a finite number of seconds > 0")
        need(_is_int(self.num_consecutive_env_runner_failures_tolerance)
             and self.num_consecutive_env_runner_failures_tolerance >= 0,
             "num_consecutive_env_runner_failures_tolerance", "an int >= 0")
        for name in ("max_prompt_tokens", "max_new_tokens"):
            need(_is_int(getattr(self, name)) and getattr(self, name) >= 1, name, "an int >= 1")
        need(_is_number(self.temperature) and self.temperature > 0, "temperature", "a number > 0")
        need(_is_number(self.eval_temperature) and self.eval_temperature >= 0,
             "eval_temperature", "a number >= 0 (0 = greedy)")
        if _is_int(self.group_size) and self.group_size >= 1:
            envs_ok = _is_int(self.num_envs_per_env_runner) and self.num_envs_per_env_runner >= 1
            need(envs_ok and self.num_envs_per_env_runner % self.group_size == 0, "num_envs_per_env_runner",
                 f"a multiple of group_size={self.group_size} (each runner steps whole groups in lock-step)")
        need(isinstance(self.env_runner_cls, type) and issubclass(self.env_runner_cls, GroupedEnvRunner),
             "env_runner_cls", "GroupedEnvRunner or a subclass (HGPO needs complete rollout groups)")
        need(str(self.gym_env_vectorize_mode).lower().endswith("sync")
             and "async" not in str(self.gym_env_vectorize_mode).lower(),
             "gym_env_vectorize_mode", "'sync' (GroupedEnvRunner steps the sub-envs itself)")
        need(self.episodes_to_numpy is False, "episodes_to_numpy",
             "False (per-step prompts have different lengths)")
        for name in ("add_default_connectors_to_env_to_module_pipeline",
                     "add_default_connectors_to_module_to_env_pipeline",
                     "add_default_connectors_to_learner_pipeline"):
            need(getattr(self, name) is False, name, "False (RLlib's default pieces cannot handle text)")
        need(self.evaluation_duration_unit == "episodes", "evaluation_duration_unit",
             "'episodes' (GroupedEnvRunner samples whole episodes)")
        if self.is_multi_agent:
            errors.append("multi-agent setups are invalid: HGPO trains one policy (single-agent text envs)")
        need(self.num_aggregator_actors_per_learner == 0, "num_aggregator_actors_per_learner",
             "0 (the learner connector must see whole rollout groups)")
        if self.num_env_runners == 0 and not self.in_evaluation:
            need(self.create_local_env_runner, "create_local_env_runner",
                 "True when num_env_runners=0 (someone has to sample)")
        if self._envs_name() is None:
            errors.append(
                f"env={self.env!r} is invalid: expected a name of the envs package "
                "('alfworld', 'webshop', 'keychest'), whose prompt template HGPO renders"
            )
        model = self._user_model_config().get("model", TINY_PRESET)
        if self.evaluation_interval and self.evaluation_num_env_runners == 0 and model != TINY_PRESET:
            errors.append(
                "evaluation_num_env_runners=0 is invalid with evaluation_interval="
                f"{self.evaluation_interval} and model_config['model']={model!r}: it would evaluate that "
                "model in the driver process (one CPU, HF generate); set "
                ".evaluation(evaluation_num_env_runners=1): evaluation env runners of their own, "
                "GPU-backed with num_gpus_per_env_runner"
            )
        clashes = sorted(set(self._user_model_config()) & set(_MODULE_KEYS_FROM_CONFIG))
        if clashes:
            errors.append(
                f"model_config sets {clashes}: set these with config.training(...) "
                "(seed: config.debugging(seed=...)) so module and algorithm agree"
            )
        else:
            errors.extend(self._model_errors())
        errors.extend(self._level_weight_errors())
        return errors

    def _model_errors(self) -> list[str]:
        """model_config keys and values, the model directory, and the prompt + response length
        against the model's positions: checked here, not later inside a runner."""
        try:
            module_config = LLMModuleConfig.from_model_config(self.model_config)
        except ValueError as exc:
            return [str(exc)]
        if module_config.model == TINY_PRESET:
            positions = {**TINY_MODEL_DEFAULTS, **module_config.tiny_model}["max_position_embeddings"]
        else:
            model_file = Path(module_config.model).expanduser() / "config.json"
            if not model_file.is_file():
                return [
                    f"model_config['model']={module_config.model!r} is invalid: expected {TINY_PRESET!r} "
                    f"or a local Hugging Face model directory, but {model_file} does not exist"
                ]
            positions = json.loads(model_file.read_text()).get("max_position_embeddings", MAX_TOKENS)
        tokens = self.max_prompt_tokens + self.max_new_tokens
        if tokens > min(positions, MAX_TOKENS):
            return [
                f"max_prompt_tokens={self.max_prompt_tokens!r} is invalid: with max_new_tokens="
                f"{self.max_new_tokens} it exceeds the model's {positions} positions"
                + (f" (and the cap of {MAX_TOKENS})" if positions > MAX_TOKENS else "")
            ]
        return []

    def _level_weight_errors(self) -> list[str]:
        """HGPO's level weights L**alpha (L <= K + 2) must be finite floats, or the advantage
        computation overflows."""
        if self.estimator != "hgpo" or not (
            _is_int(self.history_length) and _is_number(self.length_weight_alpha)
        ):
            return []
        try:
            lengths = range(1, self.history_length + 3)
            total = sum(float(length) ** self.length_weight_alpha for length in lengths)
        except OverflowError:
            total = math.inf
        if math.isfinite(total):
            return []
        return [
            f"length_weight_alpha={self.length_weight_alpha!r} is invalid: the level weights "
            f"L**alpha overflow for history_length={self.history_length} (L up to {self.history_length + 2})"
        ]


def _is_lr(lr: Any) -> bool:
    """A learning rate, or RLlib's piecewise-linear schedule over sampled env steps (from step 0)."""
    if _is_number(lr):
        return lr > 0
    if not isinstance(lr, (list, tuple)) or not lr:
        return False
    pairs_ok = all(
        isinstance(p, (list, tuple)) and len(p) == 2 and _is_int(p[0]) and _is_number(p[1]) and p[1] > 0
        for p in lr
    )
    return pairs_ok and lr[0][0] == 0 and all(a[0] < b[0] for a, b in itertools.pairwise(lr))


@dataclasses.dataclass
class _RunnerReply:
    """What a call on an env runner returns; an exception travels as its formatted traceback, so
    the driver can name the root cause (RLlib only logs the errors of failed runner calls)."""

    worker_index: int
    episodes: list = dataclasses.field(default_factory=list)
    metrics: dict | None = None
    task_generator: dict | None = None
    error: str | None = None


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


def _sample_on_runner(env_runner: GroupedEnvRunner, num_episodes: int) -> _RunnerReply:
    """Runs on an env runner: sample whole groups; return them with the runner's metrics and
    task-generator position (kept by the driver, see :meth:`HGPO.restore_env_runners`)."""
    try:
        episodes = env_runner.sample(num_episodes=num_episodes)
        metrics = env_runner.get_metrics()
    except Exception as exc:  # reported to the driver, which samples the groups elsewhere
        return _RunnerReply(env_runner.worker_index, error=_describe(exc))
    generator = env_runner.get_state(components=TASK_GENERATOR)[TASK_GENERATOR]
    return _RunnerReply(env_runner.worker_index, episodes, metrics, generator)


def _set_weights_on_runner(env_runner: GroupedEnvRunner, state: dict) -> _RunnerReply:
    """Runs on an env runner: load new weights; an exception comes back as text."""
    try:
        env_runner.set_state(state)
    except Exception as exc:
        return _RunnerReply(env_runner.worker_index, error=_describe(exc))
    return _RunnerReply(env_runner.worker_index)


def _deal(num_groups: int, worker_ids: Sequence[int]) -> dict[int, int]:
    """Groups per runner, as even as possible; runners with no group are left out."""
    base, extra = divmod(num_groups, len(worker_ids))
    shares = {i: base + (k < extra) for k, i in enumerate(worker_ids)}
    return {i: n for i, n in shares.items() if n}


class HGPO(Algorithm):
    """HGPO / GiGPO / GRPO for multi-turn LLM agents (see the module docstring)."""

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> HGPOConfig:
        return HGPOConfig()

    @override(Algorithm)
    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        self._num_consecutive_failed_iterations = 0
        self._task_generators: dict[int, dict] = {}

    @override(Algorithm)
    def cleanup(self) -> None:
        """Stop as RLlib does, then remove the log directory Ray 2.60 makes in ``~/ray_results`` for
        every algorithm built outside Tune if it is still empty (nothing writes there), so scripts
        and benchmarks leave no empty directories behind. Tune's trial directories stay, and
        ``rmdir`` itself refuses a directory something was written into."""
        super().cleanup()
        logdir = Path(self.logdir)
        if logdir.parent == Path(DEFAULT_STORAGE_PATH):
            with contextlib.suppress(OSError):  # not empty, or already gone
                logdir.rmdir()

    @override(Algorithm)
    def training_step(self) -> None:
        """Sample whole groups -> one learner update on all of them -> sync weights to runners."""
        with self._phase("sampling", ENV_RUNNER_SAMPLING_TIMER):
            replies, failures = self._sample_groups()
        episodes = [ep for reply in replies for ep in reply.episodes]
        num_groups = len(episodes) // self.config.group_size
        self.metrics.log_value(NUM_GROUPS_SAMPLED, num_groups, window=1)
        self._count_failures(num_groups, failures)
        if replies:
            self.metrics.aggregate([reply.metrics for reply in replies], key=ENV_RUNNER_RESULTS)
        if num_groups < max(1, self.config.num_learners):  # nothing to learn from; counted above
            return
        num_tokens = sum(int(m.sum()) for ep in episodes for m in ep.get_extra_model_outputs(RESP_MASK))
        sampling_s = self.metrics.peek((ITERATION_SECONDS, "sampling"))
        self.metrics.log_value(GENERATED_TOKENS_PER_S, num_tokens / max(sampling_s, 1e-9), window=1)

        update_kwargs: dict[str, Any] = {
            "num_epochs": self.config.num_epochs,
            "shuffle_batch_per_epoch": self.config.shuffle_batch_per_epoch,
        }
        # Minibatches only when the batch has more rows than one minibatch (RLlib's iterator would
        # otherwise repeat rows to fill it); never pass None (docs/rllib_notes.md §9 obstacle 9).
        if self.config.minibatch_size and self.config.minibatch_size < sum(map(len, episodes)):
            update_kwargs["minibatch_size"] = self.config.minibatch_size_per_learner
        with self._phase("learner_update", LEARNER_UPDATE_TIMER):
            learner_results = self.learner_group.update(
                episodes=episodes,
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
                    )
                },
                **update_kwargs,
            )
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)

        with self._phase("weight_sync", SYNCH_WORKER_WEIGHTS_TIMER):
            self._sync_weights()

    @contextlib.contextmanager
    def _phase(self, name: str, rllib_timer: str) -> Iterator[None]:
        """Time a phase into RLlib's timer (an EMA over iterations) and, unsmoothed, into
        ``iteration_seconds/<name>`` (this iteration's value)."""
        start = time.perf_counter()
        with self.metrics.log_time((TIMERS, rllib_timer)):
            yield
        self.metrics.log_value((ITERATION_SECONDS, name), time.perf_counter() - start, window=1)

    def _sample_groups(self) -> tuple[list[_RunnerReply], list[str]]:
        """Deal ``groups_per_iteration`` groups to the healthy runners and sample them in parallel.

        A runner that raises, dies or exceeds ``sample_timeout_s`` loses its share, which is dealt
        again to the other runners until the batch is complete. A runner that raised sits out the
        rest of the iteration; dead and hung (killed) ones are restarted by Ray. With no runner
        left, this waits for restarted ones (at most ``env_runner_restore_timeout_s``). Returns the
        successful replies and one line per failure (the root cause).
        """
        group_size = self.config.group_size
        runners = self.env_runner_group
        if runners.num_remote_env_runners() == 0:
            reply = _sample_on_runner(runners.local_env_runner, self.config.groups_per_iteration * group_size)
            return ([reply], []) if reply.error is None else ([], [f"local env runner: {reply.error}"])
        replies: list[_RunnerReply] = []
        failures: list[str] = []
        needed = self.config.groups_per_iteration
        usable = runners.healthy_env_runner_ids()
        raised: set[int] = set()
        deadline = time.monotonic() + self.config.env_runner_restore_timeout_s
        while needed:
            if not usable:
                usable = [i for i in self._wait_for_restarted_runners(deadline) if i not in raised]
                if not usable:
                    break
            shares = _deal(needed, usable)
            ids = list(shares)
            answers = runners.foreach_env_runner(
                func=[_sample_on_runner] * len(ids),
                kwargs=[{"num_episodes": shares[i] * group_size} for i in ids],
                local_env_runner=False,
                remote_worker_ids=ids,
                timeout_seconds=self.config.sample_timeout_s,
            )
            by_index = {answer.worker_index: answer for answer in answers}
            for i, answer in by_index.items():
                if answer.error is None:
                    replies.append(answer)
                    needed -= shares[i]
                    self._task_generators[i] = answer.task_generator
            failed = [i for i in ids if i not in by_index or by_index[i].error is not None]
            failures += self._runner_failures(failed, by_index, "sampling", take_out_raised=False)
            raised.update(i for i in failed if i in by_index)
            usable = [i for i in usable if i not in failed]
        return replies, failures

    def _wait_for_restarted_runners(self, deadline: float) -> list[int]:
        """Poll RLlib's ``restore_env_runners`` until a restarted runner is back (then return the
        healthy runners) or the deadline passes (then []); [] at once if none is restarting."""
        runners = self.env_runner_group
        while self.config.restart_failed_env_runners and time.monotonic() < deadline:
            if runners.num_healthy_remote_env_runners() == runners.num_remote_env_runners():
                return []  # nobody is restarting: the healthy ones all failed in this iteration
            if self.restore_env_runners(runners):
                return runners.healthy_env_runner_ids()
            time.sleep(1.0)
        return []

    def _sync_weights(self) -> None:
        """Send the learner's weights to every env runner and wait for all of them (RLlib's
        ``sync_weights`` does not wait). A runner that raises fails the iteration with its error;
        one that dies or hangs is taken out of service and re-synced before it samples again."""
        runners = self.env_runner_group
        state = self.learner_group.get_state(
            components=f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}", inference_only=True
        )[COMPONENT_LEARNER]
        state = {k: v for k, v in state.items() if k in (COMPONENT_RL_MODULE, WEIGHTS_SEQ_NO)}
        if runners.local_env_runner is not None:
            runners.local_env_runner.set_state(state)
        ids = runners.healthy_env_runner_ids()
        if not ids:
            return
        answers = runners.foreach_env_runner(
            func=_set_weights_on_runner,
            kwargs={"state": ray.put(state)},
            local_env_runner=False,
            remote_worker_ids=ids,
            timeout_seconds=self.config.sample_timeout_s,
        )
        by_index = {answer.worker_index: answer for answer in answers}
        failed = [i for i in ids if i not in by_index or by_index[i].error is not None]
        failures = self._runner_failures(failed, by_index, "weight sync", take_out_raised=True)
        self.metrics.log_value(NUM_ENV_RUNNER_FAILURES, len(failures), reduce="sum")
        errors = [f"env runner {i}: {by_index[i].error}" for i in failed if i in by_index]
        if errors:
            raise RuntimeError(
                "HGPO: the weight sync failed, the env runners would sample with stale weights:\n"
                + "\n".join(errors)
            )
        for failure in failures:
            logger.warning("HGPO: %s", failure)

    def _runner_failures(
        self, failed: list[int], answers: dict[int, _RunnerReply], call: str, *, take_out_raised: bool
    ) -> list[str]:
        """Describe each failed runner call; take hung runners (and, if asked, those that raised)
        out of service.

        Such a runner is killed and marked unhealthy: no call queues behind a hung one, and RLlib's
        ``restore_env_runners`` re-syncs the restarted actor (weights, connectors and, see below,
        task generator) before it samples again. A dead runner is already unhealthy.
        EnvRunnerGroup has no public call for this; its FaultTolerantActorManager (an RLlib
        DeveloperAPI) has.
        """
        manager = self.env_runner_group._worker_manager
        lines = []
        for i in failed:
            if i in answers:
                lines.append(f"env runner {i}: {call} raised:\n{answers[i].error}")
                if not take_out_raised:
                    continue
            elif manager.is_actor_healthy(i):
                limit = self.config.sample_timeout_s
                lines.append(f"env runner {i}: no {call} reply within sample_timeout_s={limit} s")
            else:
                lines.append(f"env runner {i}: its actor died during {call} (see the runner's log)")
                continue
            manager.set_actor_state(i, healthy=False)
            ray.kill(manager.actors()[i], no_restart=False)
        return lines

    def _count_failures(self, num_groups: int, failures: list[str]) -> None:
        """Log this iteration's failures; raise after too many incomplete iterations in a row."""
        self.metrics.log_value(NUM_ENV_RUNNER_FAILURES, len(failures), reduce="sum")
        if num_groups == self.config.groups_per_iteration:
            self._num_consecutive_failed_iterations = 0
        else:
            self._num_consecutive_failed_iterations += 1
        failed = self._num_consecutive_failed_iterations
        self.metrics.log_value(NUM_CONSECUTIVE_FAILED_ITERATIONS, failed, window=1)
        if not failed:
            for failure in failures:
                logger.warning("HGPO: recovered (groups sampled again elsewhere) from %s", failure)
            return
        causes = "\n".join(failures) or "no healthy env runner was left to sample on"
        tolerance = self.config.num_consecutive_env_runner_failures_tolerance
        summary = (
            f"HGPO: {num_groups} of {self.config.groups_per_iteration} rollout groups sampled, "
            f"{failed} incomplete iteration(s) in a row (tolerated: "
            f"num_consecutive_env_runner_failures_tolerance={tolerance}); the env runners' errors:\n{causes}"
        )
        if failed > tolerance:
            raise RuntimeError(summary)
        logger.warning(summary)

    @override(Algorithm)
    def restore_env_runners(self, env_runner_group: Any) -> list[int]:
        """RLlib's restore (weights and connector states of the restarted runners), plus each
        runner's last known task-generator position, so a restarted runner plays new tasks."""
        restored = super().restore_env_runners(env_runner_group)
        if env_runner_group is self.env_runner_group:
            self._push_task_generators(restored)
        return restored

    def _push_task_generators(self, worker_ids: Sequence[int]) -> None:
        ids = [i for i in worker_ids if i in self._task_generators]
        if ids:
            self.env_runner_group.foreach_env_runner(
                func="set_state",
                kwargs=[{"state": {TASK_GENERATOR: self._task_generators[i]}} for i in ids],
                local_env_runner=False,
                remote_worker_ids=ids,
                timeout_seconds=self.config.sample_timeout_s,
            )

    @override(Algorithm)
    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict:
        """RLlib's state plus the remote runners' task generators (a local runner's is part of
        its own state), so a restored algorithm does not replay the tasks already played."""
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._task_generators and self._check_component(TASK_GENERATORS, components, not_components):
            state[TASK_GENERATORS] = dict(self._task_generators)
        return state

    @override(Algorithm)
    def set_state(self, state: dict) -> None:
        super().set_state(state)
        if TASK_GENERATORS in state:
            self._task_generators = dict(state[TASK_GENERATORS])
            self._push_task_generators(self.env_runner_group.healthy_env_runner_ids())


register_trainable("HGPO", HGPO)
