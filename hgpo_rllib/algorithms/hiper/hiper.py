"""HiPER (Hierarchical Plan-Execute RL, Peng et al., arXiv 2602.16165) as an RLlib algorithm beside HGPO.

One LLM answers every turn with ``<switch>KEEP|SWITCH</switch><subgoal>..</subgoal><action>..</action>``
(the env setting ``answer_format="plan_execute"``); a SWITCH opens a new segment, i.e. a new subgoal.
A three-head critic gives Hierarchical Advantage Estimation (docs/hiper.md): low-level advantages
for the action tokens, high-level ones for the subgoal tokens of segment starts, termination ones
for the switch tokens.

The iteration is the text agents' (:class:`~hgpo_rllib.algorithms.text_agent.TextAgent`: the same env
runners, prompt connector, generation backends and token loss). What differs is the learner's
advantage piece (:class:`~hgpo_rllib.connectors.learner.hae_advantages.HAEAdvantages`) and the critic
(:class:`~hgpo_rllib.rl_module.critic_rl_module.LLMCriticRLModule`, its loss in
:class:`~hgpo_rllib.algorithms.hiper.torch.hiper_torch_learner.HiPERTorchLearner`). No rollout
groups: ``group_size`` 1, 128 episodes per iteration, as the authors ran it.

Example::

    from hgpo_rllib import HiPERConfig

    config = (
        HiPERConfig()
        .environment("alfworld", env_config={"max_steps": 50, "answer_format": "plan_execute"})
        .rl_module(model_config={"model": "/models/Qwen2.5-7B-Instruct",
                                 "critic": "/models/Qwen2.5-1.5B-Instruct"})
        .training(keep_penalty=-0.3, critic_lr=1e-5)
    )
"""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override
from ray.tune.registry import register_trainable
from transformers import AutoTokenizer

from envs.common.actions import PLAN_EXECUTE
from hgpo_rllib.advantages.hae import KEEP_PENALTY_MODES
from hgpo_rllib.algorithms.hiper.torch.hiper_torch_learner import HiPERTorchLearner
from hgpo_rllib.algorithms.text_agent import TextAgent, TextAgentConfig
from hgpo_rllib.algorithms.validation import SettingErrors, level_weight_errors
from hgpo_rllib.checks import is_bool, is_int, is_number
from hgpo_rllib.connectors.learner.hae_advantages import HAESettings
from hgpo_rllib.rl_module.config import POLICY_TRUNK, TINY_PRESET
from hgpo_rllib.rl_module.critic import check_critic_tokenizer
from hgpo_rllib.rl_module.critic_rl_module import LLMCriticRLModule
from hgpo_rllib.rl_module.model_sources import local_model_dir

#: ``HiPERConfig.training(high_level_baseline=...)``.
HIGH_LEVEL_BASELINES = ("critic", "groups")


class HiPERConfig(TextAgentConfig):
    """Configuration of :class:`HiPER`: the shared text-agent settings plus HAE's and the critic's;
    defaults are the authors' ALFWorld script's (docs/hiper.md §Hyperparameters).

    The critic is a model choice, in ``.rl_module(model_config={"critic": ...})``: a model with the
    policy's tokenizer (it may be smaller than the policy), named as ``model_config["model"]`` takes
    it (a directory, cached model id, GGUF file or short name), ``"tiny-qwen2"``
    (a random-init critic, the default with the tiny policy; ``critic_tiny_model`` sizes it), or
    ``"policy"`` (three heads on the policy's own trunk; ours).
    """

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or HiPER)
        self.gamma = 1.0
        self.lam_turn = 1.0
        self.lam_seg = 0.95
        self.bootstrap_truncated = True
        self.keep_penalty = -0.3
        self.keep_penalty_mode = "normalized"
        self.keep_consistency_penalty = -0.3
        self.keep_consistency_requires_both = True
        self.norm_adv = True
        self.critic_lr = 1e-5
        self.value_clip = 0.5
        self.high_value_coef = 1.0
        self.term_value_coef = 1.0
        # The high level's baseline: the critic's high head, or (ours) HGPO's group baselines.
        self.high_level_baseline = "critic"
        self.adv_mode = "mean_std_norm"
        self.length_weight_alpha = 1.0
        # No rollout groups: every episode a task of its own (env.rollout.n = 1).
        self.group_size = 1
        self.groups_per_iteration = 128

    @override(TextAgentConfig)
    def training(
        self,
        *,
        lam_turn: float = NotProvided,
        lam_seg: float = NotProvided,
        bootstrap_truncated: bool = NotProvided,
        keep_penalty: float = NotProvided,
        keep_penalty_mode: str = NotProvided,
        keep_consistency_penalty: float = NotProvided,
        keep_consistency_requires_both: bool = NotProvided,
        norm_adv: bool = NotProvided,
        critic_lr: float = NotProvided,
        value_clip: float = NotProvided,
        high_value_coef: float = NotProvided,
        term_value_coef: float = NotProvided,
        high_level_baseline: str = NotProvided,
        adv_mode: str = NotProvided,
        length_weight_alpha: float = NotProvided,
        **kwargs: Any,
    ) -> HiPERConfig:
        """Sets HAE's and the critic's settings (and, through ``kwargs``, :meth:`TextAgentConfig.training`'s;
        ``gamma`` defaults to 1.0 here).

        Args:
            lam_turn: GAE lambda inside a segment (default 1.0).
            lam_seg: GAE lambda over segments (default 0.95).
            bootstrap_truncated: A truncated episode bootstraps from its own last values (the
                authors' quirk; default True, False on WebShop).
            keep_penalty: Reward of a KEEP turn (default -0.3; WebShop -3.5), see ``keep_penalty_mode``.
            keep_penalty_mode: "normalized" (default: keep_penalty / T per KEEP turn of a T-turn
                episode) or "fixed" (keep_penalty per KEEP turn).
            keep_consistency_penalty: Reward of a KEEP turn whose subgoal differs from the previous
                turn's (default -0.3).
            keep_consistency_requires_both: That penalty only when both subgoals exist (default True).
            norm_adv: Standardise each advantage type over the batch (default True).
            critic_lr: The critic's learning rate (default 1e-5; the policy's is ``lr``).
            value_clip: Clip of the value loss (default 0.5).
            high_value_coef: Weight of the high-level head's loss (default 1.0).
            term_value_coef: Weight of the termination head's loss (default 1.0).
            high_level_baseline: "critic" (default: HAE's high level, GAE over segments with the
                high head) or "groups" (ours, docs/hiper.md §A critic-free high level: HGPO's
                hierarchical group baselines over the segment starts of each rollout group, K =
                ``history_length``; needs ``group_size`` >= 2). The high head still trains.
            adv_mode: With "groups": HGPO's "mean_std_norm" (default) or "mean_norm".
            length_weight_alpha: With "groups": HGPO's alpha (default 1.0), level weights L**alpha.
        """
        super().training(**kwargs)
        return self._set_provided(locals())

    @override(TextAgentConfig)
    def get_default_learner_class(self) -> type:
        if self.framework_str != "torch":
            raise ValueError(f"HiPER supports framework='torch' only, got {self.framework_str!r}")
        return HiPERTorchLearner

    @override(TextAgentConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=LLMCriticRLModule)

    @property
    @override(TextAgentConfig)
    def _model_config_auto_includes(self) -> dict[str, Any]:
        """The tiny policy gets a tiny critic unless the user names one."""
        auto = super()._model_config_auto_includes
        user = self.user_model_config()
        if user.get("model", TINY_PRESET) == TINY_PRESET and "critic" not in user:
            auto = auto | {"critic": TINY_PRESET}
        return auto

    def hae_settings(self) -> HAESettings:
        """The options of :class:`~hgpo_rllib.connectors.learner.hae_advantages.HAEAdvantages`."""
        return HAESettings(
            gamma=self.gamma,
            lam_turn=self.lam_turn,
            lam_seg=self.lam_seg,
            bootstrap_truncated=self.bootstrap_truncated,
            invalid_action_penalty=self.invalid_action_penalty,
            keep_penalty=self.keep_penalty,
            keep_penalty_mode=self.keep_penalty_mode,
            keep_consistency_penalty=self.keep_consistency_penalty,
            keep_consistency_requires_both=self.keep_consistency_requires_both,
            norm_adv=self.norm_adv,
            high_level_baseline=self.high_level_baseline,
            history_length=self.history_length,
            adv_mode=self.adv_mode,
            length_weight_alpha=self.length_weight_alpha,
        )

    @override(TextAgentConfig)
    def setting_errors(self) -> list[str]:
        errors = SettingErrors(self)
        need = errors.need
        for name in ("lam_turn", "lam_seg"):
            value = getattr(self, name)
            need(is_number(value) and 0 <= value <= 1, name, "a number in [0, 1]")
        need(is_number(self.gamma) and 0 <= self.gamma <= 1, "gamma", "a number in [0, 1]")
        for name in ("bootstrap_truncated", "keep_consistency_requires_both", "norm_adv"):
            need(is_bool(getattr(self, name)), name, "True or False")
        for name in ("keep_penalty", "keep_consistency_penalty"):
            need(is_number(getattr(self, name)), name, "a finite number (negative penalises)")
        need(
            self.keep_penalty_mode in KEEP_PENALTY_MODES, "keep_penalty_mode", f"one of {KEEP_PENALTY_MODES}"
        )
        for name in ("critic_lr", "value_clip"):
            need(is_number(getattr(self, name)) and getattr(self, name) > 0, name, "a number > 0")
        for name in ("high_value_coef", "term_value_coef"):
            need(is_number(getattr(self, name)) and getattr(self, name) >= 0, name, "a number >= 0")
        need(
            self.high_level_baseline in HIGH_LEVEL_BASELINES,
            "high_level_baseline",
            f"one of {HIGH_LEVEL_BASELINES}",
        )
        if self.high_level_baseline == "groups":
            need(
                is_int(self.group_size) and self.group_size >= 2,
                "group_size",
                "an integer >= 2 with high_level_baseline='groups' (its baselines compare rollouts)",
            )
            level_weight_errors(errors)
        if self.is_multi_agent:
            errors.add("multi_agent() is not supported by HiPER yet: its critic and HAE serve one policy")
        env_config = self.env_config if isinstance(self.env_config, dict) else {}
        if env_config.get("answer_format") != PLAN_EXECUTE:
            errors.add(
                f"env_config['answer_format']={env_config.get('answer_format')!r} is invalid for HiPER: "
                f"expected {PLAN_EXECUTE!r} (the policy writes a switch, a subgoal and an action each turn)"
            )
        user = self.user_model_config()
        model, critic = user.get("model", TINY_PRESET), user.get("critic")
        critic_dir = critic not in (None, TINY_PRESET, POLICY_TRUNK)  # a model directory of its own
        if model != TINY_PRESET and not critic:
            errors.add(
                "model_config['critic'] is missing: HiPER needs a critic, a model with the policy's "
                "tokenizer (the authors ran Qwen2.5-1.5B-Instruct for a 7B policy)"
            )
        if model == TINY_PRESET and critic_dir:
            errors.add(
                f"model_config['critic']={critic!r} is invalid with the tiny policy: expected "
                f"{TINY_PRESET!r} (the tiny policy's tokenizer is built at run time; a critic must share it)"
            )
        elif critic_dir:
            try:
                # Both by any name the module loads (a short name, GGUF file or cached id: converted
                # or resolved here, in the driver, before any learner builds the critic).
                policy = AutoTokenizer.from_pretrained(local_model_dir(model), local_files_only=True)
                check_critic_tokenizer(critic, policy)
            except (OSError, ValueError) as exc:
                errors.add(str(exc))
        return super().setting_errors() + errors.messages


class HiPER(TextAgent):
    """HiPER for multi-turn LLM agents (see the module docstring)."""

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> HiPERConfig:
        return HiPERConfig()


register_trainable("HiPER", HiPER)
