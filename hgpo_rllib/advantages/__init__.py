"""Group-based advantage estimators, vectorised in numpy: GRPO, GiGPO and HGPO.

The maths follows ``docs/hgpo_algorithm.md`` (§1.1 returns and scores, §2 GRPO, §3 GiGPO, §4 HGPO),
which documents the reference ``langfengQ/verl-agent`` code and the HGPO paper (He et al., ICLR 2026),
and ``docs/hiper.md`` for HiPER's HAE (Peng et al., 2026).
Pure numpy: importing this package loads neither torch, transformers nor Ray, so the estimators can be
tested and reused alone.

- :mod:`~hgpo_rllib.advantages.returns`: discounted returns and episode scores (§1.1);
- :mod:`~hgpo_rllib.advantages.estimators`: GRPO, GiGPO and HGPO, and HGPO's levels (§2-§4);
- :mod:`~hgpo_rllib.advantages.history`: the hierarchy of history groups (§4.2-§4.3);
- :mod:`~hgpo_rllib.advantages.adaptive`: adaptive level weights (ours);
- :mod:`~hgpo_rllib.advantages.grouping`: input checks, key interning, group statistics;
- :mod:`~hgpo_rllib.advantages.hae`: HiPER's Hierarchical Advantage Estimation (with a critic);
- :mod:`~hgpo_rllib.advantages.multi_agent`: Dr. MAS's agent-wise normalisation and multi-agent GRPO;
- :mod:`~hgpo_rllib.advantages.step_table`: a batch of episodes as estimator inputs.
"""

from hgpo_rllib.advantages.estimators import (
    NORMALIZE_BY,
    HGPOLevels,
    gigpo_advantages,
    grpo_advantages,
    hgpo_advantages,
    hgpo_level_stats,
)
from hgpo_rllib.advantages.grouping import ADV_MODES, WEIGHTINGS
from hgpo_rllib.advantages.hae import (
    HAEResult,
    hae_advantages,
    hae_step_rewards,
    parse_switch,
    segment_group_advantages,
)
from hgpo_rllib.advantages.multi_agent import (
    AgentView,
    agent_turn_rewards,
    agent_wise_advantages,
    multi_agent_grpo_advantages,
    per_agent_view,
)
from hgpo_rllib.advantages.returns import discounted_returns, step_returns_and_scores
from hgpo_rllib.advantages.step_table import ESTIMATORS

__all__ = [
    "ADV_MODES",
    "AgentView",
    "ESTIMATORS",
    "HAEResult",
    "HGPOLevels",
    "NORMALIZE_BY",
    "WEIGHTINGS",
    "agent_turn_rewards",
    "agent_wise_advantages",
    "discounted_returns",
    "gigpo_advantages",
    "grpo_advantages",
    "hae_advantages",
    "hae_step_rewards",
    "hgpo_advantages",
    "hgpo_level_stats",
    "multi_agent_grpo_advantages",
    "parse_switch",
    "per_agent_view",
    "segment_group_advantages",
    "step_returns_and_scores",
]
