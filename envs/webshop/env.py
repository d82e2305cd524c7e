"""Gymnasium env ``hgpo/WebShop-v0``: WebShop's text mode over its data files, in pure Python.

``gymnasium.make("hgpo/WebShop-v0", data_dir=..., max_steps=15)``. The observation is the page's
``[SEP]``-joined text exactly as the original's ``observation_mode="text"`` gives it; the action is the
LLM's whole output (``<think>...</think><action>search[...]</action>``). The reward is verl-agent's:
10 when "buy now" scores 1.0, else 0; ``info["score"]`` carries the raw score (WebShop's "score").

Goals: ``reset(options={"goal_index": i})`` plays ``env.unwrapped.goals[i]``; ``options={"goal": {...}}``
plays a goal dict of the user's (see :func:`~envs.webshop.goals.complete_goal`); a plain
``reset(seed=s)`` draws a goal by the original's weights, deterministically in ``s`` (later unseeded
resets continue the same stream).

``info`` adds to the common keys: ``is_action_admissible`` (the command was a search or a clickable
click), ``score``, ``available_actions`` (the original's ``{has_search_bar, clickables}``),
``goal_index`` (None for a user's goal) and, on purchase, ``reward_info`` (the score's breakdown).

Deviation forced by the shared parser: commands are lower-cased, so ``SEARCH[...]`` or
``Click[Buy Now]`` work here while the original ignores an upper-case action name; whitespace is
collapsed, so a newline inside ``search[...]`` no longer voids it.
"""

from __future__ import annotations

import os
import random
from numbers import Integral
from typing import Any

from envs.common.text_env import Observation, TextEnv
from envs.webshop.data import ATTRIBUTES_FILE, CATALOG_FILE, Shop, load_shop
from envs.webshop.engine import StepOutcome, WebShopSession
from envs.webshop.expert import ScriptedBuyer
from envs.webshop.goals import complete_goal, sample_goal_index

WIN_SCORE = 1.0
WIN_REWARD = 10.0
_RESET_OPTIONS = ("goal_index", "goal")


class WebShopEnv(TextEnv):
    """WebShop's text environment (see the module doc); one episode is one :class:`WebShopSession`."""

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        max_steps: int = 15,
        require_tags: bool | None = None,
        render_mode: str | None = None,
        catalog_file: str = CATALOG_FILE,
        attributes_file: str = ATTRIBUTES_FILE,
    ):
        super().__init__(max_steps=max_steps, require_tags=require_tags, render_mode=render_mode)
        self.shop: Shop = load_shop(data_dir, catalog_file=catalog_file, attributes_file=attributes_file)
        self.session: WebShopSession | None = None
        self.goal_index: int | None = None
        self._rng: random.Random | None = None
        self._buyer: ScriptedBuyer | None = None

    @property
    def goals(self) -> list[dict[str, Any]]:
        """The synthetic goals, in the original's order (shared dicts: do not modify)."""
        return list(self.shop.goals)

    @property
    def current_goal(self) -> dict[str, Any] | None:
        return None if self.session is None else self.session.goal

    # ------------------------------------------------------------------------------ TextEnv hooks
    def _start_episode(self, seed: int | None, options: dict[str, Any]) -> tuple[Observation, str, str]:
        unknown = sorted(set(options) - set(_RESET_OPTIONS))
        if unknown or len(options) > 1:
            raise ValueError(
                f"reset options take at most one of {list(_RESET_OPTIONS)}, got {sorted(options)}"
            )
        if seed is not None or self._rng is None:
            self._rng = random.Random(seed if seed is not None else int(self.np_random.integers(2**63)))
        if "goal" in options:
            self.goal_index, goal = None, complete_goal(options["goal"], self.shop.by_asin)
        else:
            index = options.get("goal_index")
            if index is None:
                index = sample_goal_index(self.shop.cum_weights, self._rng)
            elif not (isinstance(index, Integral) and not isinstance(index, bool)
                      and 0 <= index < len(self.shop.goals)):
                raise ValueError(f"goal_index must be an int in [0, {len(self.shop.goals)}), got {index!r}")
            self.goal_index, goal = int(index), self.shop.goals[index]
        session_id = "custom" if self.goal_index is None else str(self.goal_index)
        self.session = WebShopSession(self.shop, goal, session_id, self._rng)
        self._buyer = ScriptedBuyer(goal)
        first = self._observe(StepOutcome(executed=True))
        return first, goal["instruction_text"], goal.get("category", "")

    def expert_action(self) -> str | None:
        """The scripted buyer's next command (it knows the goal product and options).

        The buyer tracks what it already did, so call this once per step, then step.
        """
        if self._buyer is None or self._current is None or self._current.terminated:
            return None
        return self._buyer.act(self.session.available_actions)

    def _execute(self, command: str) -> Observation:
        return self._observe(self.session.step(command))

    def _observation_unchanged(self) -> str:
        return self.session.observation

    def step(self, action: str):
        obs, reward, terminated, truncated, info = super().step(action)
        # A format-invalid output or an engine error executed nothing: fill the WebShop keys.
        for key, value in self._extra_info(StepOutcome(executed=False)).items():
            info.setdefault(key, value)
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------------------------ helpers
    def _extra_info(self, outcome: StepOutcome) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "is_action_admissible": outcome.executed,
            "score": outcome.score,
            "available_actions": self.session.available_actions,
            "goal_index": self.goal_index,
        }
        if outcome.reward_info is not None:
            extra["reward_info"] = outcome.reward_info
        return extra

    def _observe(self, outcome: StepOutcome) -> Observation:
        won = outcome.done and outcome.score == WIN_SCORE
        return Observation(
            self.session.observation,
            self.session.admissible_actions(),
            reward=WIN_REWARD if won else 0.0,
            terminated=outcome.done,
            won=won,
            extra_info=self._extra_info(outcome),
        )

