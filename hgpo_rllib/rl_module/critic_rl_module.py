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
from hgpo_rllib.rl_module.critic import build_critic, read_values
from hgpo_rllib.rl_module.llm_rl_module import LLMRLModule


class LLMCriticRLModule(LLMRLModule, ValueFunctionAPI):
    """:class:`LLMRLModule` plus ``critic`` (learners only) and :meth:`compute_values`."""

    def _setup_learner_model(self) -> None:
        super()._setup_learner_model()
        cfg = self.llm_config
        if cfg.critic is None:
            raise ValueError(
                "LLMCriticRLModule needs model_config['critic'] (a model directory or 'tiny-qwen2')"
            )
        # float32 master weights like the policy's; the forward runs under the same autocast.
        self.critic = build_critic(
            cfg.critic, actor_tokenizer=self.tokenizer, tiny_model=cfg.critic_tiny_model, seed=cfg.seed
        )
        if cfg.gradient_checkpointing:
            self.critic.trunk.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )

    def trained_models(self) -> list[torch.nn.Module]:
        """The policy's (and reference's) models and the critic's trunk: a sharded learner shards the
        critic's decoder layers too, so its weights, gradients and AdamW state split like the policy's."""
        return [*super().trained_models(), self.critic.trunk]

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
