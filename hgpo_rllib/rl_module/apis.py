"""What the connectors ask of a token-level text policy, as an RLlib-style capability API.

RLlib's connectors check capabilities such as ``ValueFunctionAPI`` rather than concrete module classes
(``rllib/core/rl_module/apis/``); ours type against :class:`TokenPolicyAPI` the same way, so they import
neither the module nor torch. :class:`~hgpo_rllib.rl_module.LLMRLModule` implements it.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from hgpo_rllib.rl_module.prompts import HistoryPrompt, Rendering


class TokenPolicyAPI(abc.ABC):
    """A policy over tokens: prompts in, token ids out, and per-token log-probs of stored responses."""

    @property
    @abc.abstractmethod
    def pad_token_id(self) -> int:
        """The id that pads prompt and response rows."""

    @property
    @abc.abstractmethod
    def constrains_to_admissible(self) -> bool:
        """Whether each step's sampling is restricted to the tokens of its admissible actions."""

    @property
    @abc.abstractmethod
    def action_vocabulary(self) -> Sequence[str] | None:
        """The texts generation is restricted to (one token each with the tiny model), or None."""

    @abc.abstractmethod
    def encode_prompts(self, prompts: Sequence[HistoryPrompt | Rendering]) -> dict[str, Any]:
        """Rendered prompts -> ``prompt_ids`` / ``prompt_mask`` (the model's chat format, fitted to the
        prompt budget by :func:`~hgpo_rllib.rl_module.prompts.fit_prompts`, left-padded) and
        ``prompt_cut`` (which prompts did not fit whole)."""

    @abc.abstractmethod
    def allowed_ids(self, admissible: Sequence[Sequence[str]]) -> Any:
        """[B, A] token ids each row may emit, from its admissible actions (-1 pads)."""

    @abc.abstractmethod
    def compute_ref_logp(self, batch: dict[str, Any]) -> Any:
        """Per-token log-probs [N, T] of ``resp_ids`` under the frozen reference (no gradient)."""

    @abc.abstractmethod
    def engine_weights(self) -> dict[str, Any]:
        """The inference weights a weight sync sends the env runners' copy, which ``set_state`` loads."""
