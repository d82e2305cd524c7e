"""Framework-agnostic HGPO learner logic: the learner connector pipeline (docs/rllib_notes.md §3.2, §5.4).

As PPO appends its GAE piece in ``PPOLearner.build()``, HGPO appends, after any user pieces:

1. :class:`GroupAdvantages`: complete rollout groups -> token rows + advantages (numpy), computed on
   the learner's whole batch before RLlib minibatches it (docs/hgpo_algorithm.md §1.1 step 6);
2. RLlib's ``NumpyToTensor`` (onto the learner's device);
3. :class:`RecomputeOldLogp` when ``recompute_old_logp`` (the default): the learner's own log-probs
   before the update as the PPO ratio's denominator, no gradient;
4. :class:`ReferenceLogp` when ``kl_coeff > 0``: frozen reference log-probs, no gradient.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
from ray.rllib.core.learner.learner import Learner
from ray.rllib.utils.annotations import override

from hgpo_rllib.connectors.group_advantages import EstimatorSettings, GroupAdvantages
from hgpo_rllib.connectors.reference_logp import RecomputeOldLogp, ReferenceLogp


def estimator_settings(config: Any) -> EstimatorSettings:
    """The estimator options of an ``HGPOConfig``."""
    return EstimatorSettings(
        estimator=config.estimator,
        gamma=config.gamma,
        invalid_action_penalty=config.invalid_action_penalty,
        history_length=config.history_length,
        adv_mode=config.adv_mode,
        length_weight_alpha=config.length_weight_alpha,
        base_group=config.base_group,
        weighting=config.weighting,
        step_advantage_w=config.step_advantage_w,
    )


class HGPOLearner(Learner):
    """Adds the HGPO pieces to the learner connector; the loss lives in the framework subclass."""

    @override(Learner)
    def build(self) -> None:
        super().build()
        if self._learner_connector is None:  # only with aggregator actors, which HGPO rejects
            raise ValueError("HGPO needs the Learner's connector pipeline (no aggregator actors)")
        self._learner_connector.append(GroupAdvantages(settings=estimator_settings(self.config)))
        self._learner_connector.append(NumpyToTensor(as_learner_connector=True, device=self._device))
        if self.config.recompute_old_logp:
            self._learner_connector.append(RecomputeOldLogp(chunk_rows=self.config.micro_batch_size))
        if self.config.kl_coeff > 0:
            self._learner_connector.append(ReferenceLogp(chunk_rows=self.config.micro_batch_size))
