"""Framework-agnostic learner logic of the text-agent algorithms: the learner connector pipeline
(docs/rllib_notes.md §3.2, §5.4).

As PPO appends its GAE piece in ``PPOLearner.build()``, a text-agent learner appends, after any user pieces:

1. the algorithm's advantage piece (:meth:`TextAgentLearner.advantage_connector`): complete rollout
   groups -> token rows + advantages (numpy), computed on the learner's whole batch before RLlib
   minibatches it (docs/hgpo_algorithm.md §1.1 step 6);
2. RLlib's ``NumpyToTensor`` (onto the learner's device);
3. :class:`RecomputeOldLogp` when ``recompute_old_logp`` (the default): the learner's own log-probs
   before the update as the PPO ratio's denominator, no gradient;
4. :class:`ReferenceLogp` when ``kl_coeff > 0``: frozen reference log-probs, no gradient.
"""

from __future__ import annotations

import abc

from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.learner.learner import Learner
from ray.rllib.utils.annotations import OverrideToImplementCustomLogic, override

from hgpo_rllib.connectors.learner.frozen_logp import RecomputeOldLogp, ReferenceLogp


class TextAgentLearner(Learner, abc.ABC):
    """Adds the advantage and frozen log-prob pieces to the learner connector; the loss lives in the
    framework subclass."""

    @override(Learner)
    def build(self) -> None:
        super().build()
        if self._learner_connector is None:  # only with aggregator actors, which validation rejects
            raise ValueError(
                "a text-agent learner needs the Learner's connector pipeline (no aggregator actors)"
            )
        self._learner_connector.append(self.advantage_connector())
        self._learner_connector.append(NumpyToTensor(as_learner_connector=True, device=self._device))
        if self.config.recompute_old_logp:
            self._learner_connector.append(RecomputeOldLogp(chunk_rows=self.config.micro_batch_size))
        if self.config.kl_coeff > 0:
            self._learner_connector.append(ReferenceLogp(chunk_rows=self.config.micro_batch_size))

    @OverrideToImplementCustomLogic
    @abc.abstractmethod
    def advantage_connector(self) -> ConnectorV2:
        """The piece that turns complete episodes into the token batch with advantages."""
