"""Deprecated path (0.2.0): see :mod:`hgpo_rllib.connectors.learner.group_advantages`, the column names
in :mod:`hgpo_rllib.columns` and the estimator glue in :mod:`hgpo_rllib.advantages.step_table`."""

from hgpo_rllib._imports import warn_moved_module
from hgpo_rllib.advantages import ADV_MODES, ESTIMATORS, WEIGHTINGS  # noqa: F401
from hgpo_rllib.advantages.step_table import EstimatorSettings, StepTable  # noqa: F401
from hgpo_rllib.columns import (  # noqa: F401
    ADVANTAGES,
    OLD_LOGP,
    OPTIONAL_TOKEN_COLUMNS,
    REF_LOGP,
    RESP_IDS,
    TOKEN_COLUMNS,
)
from hgpo_rllib.connectors.learner.group_advantages import GroupAdvantages  # noqa: F401
from hgpo_rllib.connectors.learner.token_rows import token_rows  # noqa: F401

warn_moved_module(__name__, "hgpo_rllib.connectors.learner.group_advantages")
