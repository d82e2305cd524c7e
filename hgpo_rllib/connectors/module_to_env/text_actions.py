"""Module-to-env: the generated texts go to ``env.step``; token ids stay in the episode.

``Columns.ACTIONS`` keeps the right-padded response token ids (the episode's action record and what
the learner trains on); ``Columns.ACTIONS_FOR_ENV`` carries the decoded strings, which the env parses
itself (docs/rllib_notes.md §4). RLlib's ``TensorToNumpy`` runs first, so everything here is numpy or lists.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override

from hgpo_rllib.columns import ACTION_TEXT


class TextActionsToEnv(ConnectorV2):
    """Sets ``ACTIONS_FOR_ENV`` to the module's decoded ``action_text`` list."""

    @override(ConnectorV2)
    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: Any, **kwargs: Any) -> dict:
        batch[Columns.ACTIONS_FOR_ENV] = list(batch[ACTION_TEXT])
        return batch
