"""HiPER's torch learner: the shared token-level clipped loss on HAE's per-token advantages, plus the
three-head critic's clipped value loss with its own optimizer and learning rate (docs/hiper.md §Critic).

The critic's loss per head is verl's clipped value loss, ``0.5 * max((V - G)^2, (V_clip - G)^2)`` with
``V_clip = V_old + clip(V - V_old, -value_clip, value_clip)``, averaged over the minibatch's rows that
have a value for that head; the total is ``L_low + high_value_coef * L_high + term_value_coef * L_term``.
A separate critic's loss only moves its weights, and the policy's only the policy's; with heads on the
policy's trunk (``critic="policy"``) the value loss also reaches the trunk, which the policy's optimizer
steps.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID

from hgpo_rllib.algorithms.hiper.hiper_learner import HiPERLearner
from hgpo_rllib.algorithms.torch.text_agent_torch_learner import TextAgentTorchLearner
from hgpo_rllib.columns import OLD_VALUES, VALUE_POSITIONS, VALUE_TARGETS
from hgpo_rllib.rl_module.critic import VALUE_HEADS

CRITIC_OPTIMIZER = "critic"


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, targets: torch.Tensor, clip: float
) -> torch.Tensor:
    """verl's per-element clipped value loss (same shapes in, same shape out)."""
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * torch.maximum((values - targets) ** 2, (clipped - targets) ** 2)


class HiPERTorchLearner(HiPERLearner, TextAgentTorchLearner):
    """The policy's update as HGPO's (on HiPER's tokens) and the critic's, in one backward pass."""

    @override(TextAgentTorchLearner)
    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        """AdamW for the policy (``lr``) and another for the critic (``critic_lr``)."""
        module = self._module[module_id]
        critic = {id(p) for p in module.unwrapped().critic_parameters()}
        trainable = [p for p in self.get_parameters(module) if p.requires_grad]
        for name, params, lr in (
            ("default_optimizer", [p for p in trainable if id(p) not in critic], config.lr),
            (CRITIC_OPTIMIZER, [p for p in trainable if id(p) in critic], config.critic_lr),
        ):
            fused = bool(params) and all(p.is_cuda for p in params)
            optimizer = torch.optim.AdamW(params, weight_decay=config.weight_decay, fused=fused or None)
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=optimizer,
                params=params,
                lr_or_lr_schedule=lr,
            )

    @override(TorchLearner)
    def before_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().before_gradient_based_update(timesteps=timesteps)
        self._value_sums = torch.zeros(len(VALUE_HEADS))
        self._value_rows = torch.zeros(len(VALUE_HEADS))

    @override(TextAgentTorchLearner)
    def _uncompiled_update(self, batch: dict[str, Any], **kwargs: Any) -> tuple[Any, Any, dict]:
        """Counts each head's rows in the minibatch first: every micro-batch divides by them."""
        positions = batch[DEFAULT_MODULE_ID][VALUE_POSITIONS]
        self._minibatch_value_rows = (positions >= 0).sum(dim=0).clamp(min=1).float()
        return super()._uncompiled_update(batch, **kwargs)

    @override(TextAgentTorchLearner)
    def compute_loss_for_module(
        self, *, module_id: ModuleID, config: Any, batch: dict[str, Any], fwd_out: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        policy_loss = super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        has_value = (batch[VALUE_POSITIONS] >= 0).float()
        per_head = clipped_value_loss(
            fwd_out["values"], batch[OLD_VALUES], batch[VALUE_TARGETS], config.value_clip
        )
        head_losses = (per_head * has_value).sum(dim=0) / self._minibatch_value_rows.to(per_head.device)
        coefs = torch.tensor([1.0, config.high_value_coef, config.term_value_coef], device=per_head.device)
        with torch.no_grad():
            self._value_sums += (per_head * has_value).sum(dim=0).cpu()
            self._value_rows += has_value.sum(dim=0).cpu()
        return policy_loss + (coefs * head_losses).sum()

    @override(TextAgentTorchLearner)
    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        for head, name in enumerate(VALUE_HEADS):
            if self._value_rows[head] > 0:
                loss = float(self._value_sums[head] / self._value_rows[head])
                self.metrics.log_value((DEFAULT_MODULE_ID, f"value_{name}_loss"), loss, window=1)
