"""HGPO (Hierarchy-of-Groups Policy Optimization, ICLR 2026) as an RLlib algorithm, with the GiGPO and
GRPO baselines behind one switch.

One iteration, in code (docs/rllib_notes.md §5.1):

1. :meth:`TextAgent.training_step` deals ``groups_per_iteration`` tasks to the
   :class:`~hgpo_rllib.env_runner.GroupedEnvRunner` s
   (:class:`~hgpo_rllib.algorithms.runner_pool.RunnerPool`), which play ``group_size`` rollouts of
   each in lock-step; every step's prompt comes from
   :class:`~hgpo_rllib.connectors.env_to_module.history_window.HistoryWindowPrompt` and its response
   from :class:`~hgpo_rllib.rl_module.LLMRLModule`.
2. The :class:`~hgpo_rllib.algorithms.learner_group.GroupShardingLearnerGroup` deals whole groups to the
   learners; each learner's connector (:class:`HGPOLearner`) turns the steps into token rows with the
   estimator's advantage (:class:`~hgpo_rllib.connectors.learner.group_advantages.GroupAdvantages` over
   :mod:`hgpo_rllib.advantages`, on the whole batch before minibatching), then recomputes the old and
   reference log-probs (:mod:`hgpo_rllib.connectors.learner.frozen_logp`).
3. :class:`~hgpo_rllib.algorithms.torch.text_agent_torch_learner.TextAgentTorchLearner` takes clipped
   policy-gradient steps (:mod:`hgpo_rllib.algorithms.torch.token_loss`).
4. The new weights go to every runner (a blocking sync).

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
"""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.utils.annotations import override
from ray.tune.registry import register_trainable

from hgpo_rllib.advantages import ESTIMATORS, NORMALIZE_BY, WEIGHTINGS
from hgpo_rllib.advantages.step_table import EstimatorSettings
from hgpo_rllib.algorithms.hgpo.torch.hgpo_torch_learner import HGPOTorchLearner
from hgpo_rllib.algorithms.text_agent import TextAgent, TextAgentConfig
from hgpo_rllib.algorithms.validation import SettingErrors, level_weight_errors
from hgpo_rllib.checks import is_bool, is_number


class HGPOConfig(TextAgentConfig):
    """Configuration of :class:`HGPO`: the shared text-agent settings (:class:`TextAgentConfig`) plus
    the advantage estimator's; defaults are the paper's (docs/hgpo_algorithm.md §5)."""

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or HGPO)
        # Advantage estimation (docs/hgpo_algorithm.md §1.1-§4).
        self.estimator = "hgpo"
        self.adv_mode = "mean_std_norm"
        self.length_weight_alpha = 1.0
        self.base_group = False
        self.weighting = "reference"
        self.step_advantage_w = 1.0
        self.normalize_by = EstimatorSettings.normalize_by  # "agent": Dr. MAS

    @override(TextAgentConfig)
    def training(
        self,
        *,
        estimator: str = NotProvided,
        adv_mode: str = NotProvided,
        length_weight_alpha: float = NotProvided,
        base_group: bool = NotProvided,
        weighting: str = NotProvided,
        step_advantage_w: float = NotProvided,
        normalize_by: str = NotProvided,
        **kwargs: Any,
    ) -> HGPOConfig:
        """Sets HGPO's estimator settings (and, through ``kwargs``, :meth:`TextAgentConfig.training`'s).

        Args:
            estimator: Advantage estimator: "hgpo" (default), "gigpo" or "grpo"
                (docs/hgpo_algorithm.md §2-§4).
            adv_mode: "mean_std_norm" (default: (R - mean) / (std + eps)) or "mean_norm"
                (R - mean) inside each group, for every estimator (GRPO: Dr.GRPO without std).
            length_weight_alpha: HGPO's alpha (default 1.0): level weights L**alpha; 0 = uniform.
                HGPO groups steps on up to K+1 observations (``history_length`` K, the prompt's window).
            base_group: HGPO: add the episode-level (GRPO) advantage as the lowest level (default
                False, as in the published runs).
            weighting: HGPO level weights, "reference" (default, verl-agent's L = d + 1),
                "paper" (Eq. 7's (k + 1)**alpha, quirk Q2) or "adaptive" (ours: per-step weights
                from the batch that minimise an estimate of the baseline's error; ignores
                length_weight_alpha, excludes base_group), see ``hgpo_advantages``.
            step_advantage_w: GiGPO's weight of the step advantage (default 1.0).
            normalize_by: Multi-agent systems (``.multi_agent(...)``, docs/drmas.md): "agent"
                (default, Dr. MAS: each agent's turns normalised with its own statistics in each
                group; GiGPO/HGPO group each agent's turns on their own) or "trajectory" (one
                baseline over all agents' turns: the Dr. MAS authors' vanilla multi-agent GRPO).
                Single-agent runs ignore it.
        """
        super().training(**kwargs)
        return self._set_provided(locals())

    @override(TextAgentConfig)
    def get_default_learner_class(self) -> type:
        if self.framework_str != "torch":
            raise ValueError(f"HGPO supports framework='torch' only, got {self.framework_str!r}")
        return HGPOTorchLearner

    def estimator_settings(self) -> EstimatorSettings:
        """The options :func:`~hgpo_rllib.advantages.step_table.estimate_advantages` takes."""
        return EstimatorSettings(
            estimator=self.estimator,
            gamma=self.gamma,
            invalid_action_penalty=self.invalid_action_penalty,
            history_length=self.history_length,
            adv_mode=self.adv_mode,
            length_weight_alpha=self.length_weight_alpha,
            base_group=self.base_group,
            weighting=self.weighting,
            step_advantage_w=self.step_advantage_w,
            normalize_by=self.normalize_by,
        )

    @override(TextAgentConfig)
    def setting_errors(self) -> list[str]:
        errors = SettingErrors(self)
        need = errors.need
        need(self.estimator in ESTIMATORS, "estimator", f"one of {ESTIMATORS}")
        level_weight_errors(errors, check_overflow=self.estimator == "hgpo")
        need(is_bool(self.base_group), "base_group", "True or False")
        need(self.weighting in WEIGHTINGS, "weighting", f"one of {WEIGHTINGS}")
        need(
            not (self.base_group and self.weighting == "adaptive"),
            "base_group",
            "False with weighting='adaptive' (the base item scores episodes, not step returns)",
        )
        need(self.normalize_by in NORMALIZE_BY, "normalize_by", f"one of {NORMALIZE_BY}")
        need(
            is_number(self.step_advantage_w) and self.step_advantage_w >= 0,
            "step_advantage_w",
            "a finite number >= 0",
        )
        return super().setting_errors() + errors.messages


class HGPO(TextAgent):
    """HGPO / GiGPO / GRPO for multi-turn LLM agents (see the module docstring)."""

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> HGPOConfig:
        return HGPOConfig()


register_trainable("HGPO", HGPO)
