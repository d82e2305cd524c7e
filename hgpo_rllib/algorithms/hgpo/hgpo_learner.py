"""HGPO's learner logic: the group-relative advantage piece of the learner connector
(docs/rllib_notes.md §5.4)."""

from __future__ import annotations

from ray.rllib.utils.annotations import override

from hgpo_rllib.algorithms.text_agent_learner import TextAgentLearner
from hgpo_rllib.connectors.learner.group_advantages import GroupAdvantages


class HGPOLearner(TextAgentLearner):
    """GRPO / GiGPO / HGPO advantages over the learner's whole batch (:mod:`hgpo_rllib.advantages`)."""

    @override(TextAgentLearner)
    def advantage_connector(self) -> GroupAdvantages:
        return GroupAdvantages(settings=self.config.estimator_settings())
