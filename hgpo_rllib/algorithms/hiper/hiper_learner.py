"""HiPER's learner logic: the HAE piece of the learner connector (docs/hiper.md §HAE)."""

from __future__ import annotations

from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID

from hgpo_rllib.algorithms.text_agent_learner import TextAgentLearner
from hgpo_rllib.connectors.learner.hae_advantages import HAEAdvantages


class HiPERLearner(TextAgentLearner):
    """HAE over the learner's whole batch, the critic read without gradient at each turn's positions."""

    @override(TextAgentLearner)
    def skips_zero_advantage_rows(self, module_id: ModuleID) -> bool:
        """Never: the critic's value loss trains on every row, whatever its policy advantage."""
        return False

    @override(TextAgentLearner)
    def advantage_connector(self) -> HAEAdvantages:
        return HAEAdvantages(settings=self.config.hae_settings(), chunk_rows=self.config.micro_batch_size)
