"""The policy with HiPER's three-head critic beside it, as one RLlib module with ``ValueFunctionAPI``.

The critic exists on learners only (env runners generate and need no values): it is a non-inference
attribute, left out of the weights synced to env runners and kept in checkpoints. Its values are
``[N, T, 3]`` per response token (:class:`~hgpo_rllib.rl_module.critic.ThreeHeadCritic`), not RLlib's
usual one value per timestep: a text agent's timestep is a whole response.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.rl_module.apis import ValueFunctionAPI

from hgpo_rllib.columns import PROMPT_IDS, PROMPT_MASK, RESP_IDS, RESP_MASK, VALUE_POSITIONS
from hgpo_rllib.rl_module.config import POLICY_TRUNK
from hgpo_rllib.rl_module.critic import ThreeHeadCritic, build_critic, read_values, trunk_of
from hgpo_rllib.rl_module.llm_rl_module import LLMRLModule


class LLMCriticRLModule(LLMRLModule, ValueFunctionAPI):
    """:class:`LLMRLModule` plus ``critic`` (learners only) and :meth:`compute_values`."""

    def _setup_learner_model(self) -> None:
        super()._setup_learner_model()
        cfg = self.llm_config
        if cfg.critic is None:
            raise ValueError(
                "LLMCriticRLModule needs model_config['critic'] (a model directory, 'tiny-qwen2' or 'policy')"
            )
        if cfg.critic == POLICY_TRUNK:  # heads on the policy's own trunk (ours; docs/hiper.md §Critic)
            self.critic = ThreeHeadCritic(trunk_of(self.lm), self.lm.config.hidden_size, cfg.seed)
            return
        # float32 master weights like the policy's; the forward runs under the same autocast.
        self.critic = build_critic(
            cfg.critic, actor_tokenizer=self.tokenizer, tiny_model=cfg.critic_tiny_model, seed=cfg.seed
        )
        if cfg.gradient_checkpointing:
            self.critic.trunk.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )

    @property
    def shares_trunk(self) -> bool:
        """True when the critic's heads sit on the policy's own trunk (``critic="policy"``)."""
        return self.llm_config.critic == POLICY_TRUNK

    def critic_parameters(self) -> list[torch.nn.Parameter]:
        """The weights only the critic's loss trains (with its own optimizer and ``critic_lr``): all of
        a separate critic; the heads alone on a shared trunk, which the policy's optimizer steps."""
        policy = {id(p) for p in self.lm.parameters()}
        return [p for p in self.critic.parameters() if id(p) not in policy]

    def trained_models(self) -> list[torch.nn.Module]:
        """The policy's (and reference's) models and a separate critic's trunk: a sharded learner
        shards the critic's decoder layers too, so its weights, gradients and AdamW state split like
        the policy's."""
        return super().trained_models() + ([] if self.shares_trunk else [self.critic.trunk])

    def get_non_inference_attributes(self) -> list[str]:
        return [*super().get_non_inference_attributes(), "critic"]

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The policy's log-probs and entropies and, for rows that name value positions (HiPER's
        batch), the critic's values there, ``values`` ``[N, 3]``: in one forward, so DDP sees both."""
        out = super()._forward_train(batch, **kwargs)
        if VALUE_POSITIONS in batch:
            out["values"] = read_values(self.compute_values(batch), batch[VALUE_POSITIONS])
        return out

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        """Values ``[N, T, 3]`` (low, high, termination) at every response index of the rows."""
        mixed = self.compute_dtype != torch.float32
        with torch.autocast(batch[RESP_IDS].device.type, dtype=self.compute_dtype, enabled=mixed):
            values = self.critic(batch[PROMPT_IDS], batch[PROMPT_MASK], batch[RESP_IDS], batch[RESP_MASK])
        return values.float()
