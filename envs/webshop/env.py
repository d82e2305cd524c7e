"""Gymnasium env ``hgpo/WebShop-v0``: WebShop's text mode over its data files, in pure Python.

``gymnasium.make("hgpo/WebShop-v0", data_dir=..., max_steps=15)``. The observation is the page's
``[SEP]``-joined text exactly as the original's ``observation_mode="text"`` gives it; the action is the
LLM's whole output (``<think>...</think><action>search[...]</action>``). The reward is verl-agent's:
10 when "buy now" scores 1.0, else 0; ``info["score"]`` carries the raw score (WebShop's "score").

Goals: a plain ``reset(seed=s)`` draws a goal of the env's ``split``, deterministically in ``s`` (later
unseeded resets continue the same stream). The splits are verl-agent's: ``test`` = goals 0-499,
``train`` = goals 500 onward (the default; evaluation uses ``test``), ``all`` = every goal. Goals are
drawn uniformly within the split, as verl-agent draws them; ``goal_sampling="weighted"`` draws by the
original WebShop's weights instead (``split="all"`` with ``"weighted"`` is exactly the original's
draw). ``reset(options={"goal_index": i})`` plays ``env.unwrapped.goals[i]`` whatever the split;
``options={"goal": {...}}`` plays a goal dict of the user's (see :func:`~envs.webshop.goals.complete_goal`).

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

from envs.common.actions import THINK_ACTION
from envs.common.text_env import Observation, TextEnv
from envs.webshop.data import ATTRIBUTES_FILE, CATALOG_FILE, Shop, load_shop
from envs.webshop.engine import StepOutcome, WebShopSession
from envs.webshop.expert import ScriptedBuyer
from envs.webshop.facts import WEBSHOP_FACTS
from envs.webshop.goals import complete_goal, cumulative_weights, sample_goal_index

WIN_SCORE = 1.0
WIN_REWARD = 10.0
_RESET_OPTIONS = ("goal_index", "goal")
#: verl-agent evaluates on the first 500 goals and trains on the rest.
TEST_GOALS = 500
SPLITS = ("train", "test", "all")
GOAL_SAMPLING = ("uniform", "weighted")


class WebShopEnv(TextEnv):
    """WebShop's text environment (see the module doc); one episode is one :class:`WebShopSession`."""

    FACTS = WEBSHOP_FACTS

    def __init__(
        self,
        *,
        split: str = "train",
        goal_sampling: str = "uniform",
        data_dir: str | os.PathLike[str] | None = None,
        max_steps: int = 15,
        require_tags: bool | None = None,
        answer_format: str = THINK_ACTION,
        render_mode: str | None = None,
        catalog_file: str = CATALOG_FILE,
        attributes_file: str = ATTRIBUTES_FILE,
    ):
        super().__init__(
            max_steps=max_steps,
            require_tags=require_tags,
            answer_format=answer_format,
            render_mode=render_mode,
        )
        self.check_settings(max_steps=max_steps, split=split, goal_sampling=goal_sampling)
        self.shop: Shop = load_shop(data_dir, catalog_file=catalog_file, attributes_file=attributes_file)
        n = len(self.shop.goals)
        if n <= TEST_GOALS and split != "all":
            raise ValueError(f"split {split!r} needs more than {TEST_GOALS} goals; this catalog has {n}")
        self.split, self.goal_sampling = split, goal_sampling
        #: The goal indices of the split: [start, stop).
        self.goal_range = {"test": range(TEST_GOALS), "train": range(TEST_GOALS, n), "all": range(n)}[split]
        self._split_cum_weights: list[float] | None = None
        self.session: WebShopSession | None = None
        self.goal_index: int | None = None
        self._rng: random.Random | None = None
        self._buyer: ScriptedBuyer | None = None

    @classmethod
    def check_settings(cls, *, split: str = "train", goal_sampling: str = "uniform", **common: Any) -> None:
        super().check_settings(**common)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if goal_sampling not in GOAL_SAMPLING:
            raise ValueError(f"goal_sampling must be one of {GOAL_SAMPLING}, got {goal_sampling!r}")

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
                index = self._draw_goal_index()
            elif not (
                isinstance(index, Integral)
                and not isinstance(index, bool)
                and 0 <= index < len(self.shop.goals)
            ):
                raise ValueError(f"goal_index must be an int in [0, {len(self.shop.goals)}), got {index!r}")
            self.goal_index, goal = int(index), self.shop.goals[index]
        session_id = "custom" if self.goal_index is None else str(self.goal_index)
        self.session = WebShopSession(self.shop, goal, session_id, self._rng)
        self._buyer = ScriptedBuyer(goal)
        first = self._observe(StepOutcome(executed=True))
        return first, goal["instruction_text"], goal.get("category", "")

    def _draw_goal_index(self) -> int:
        goals = self.goal_range
        if self.goal_sampling == "uniform":
            return goals.start + self._rng.randrange(len(goals))
        if self._split_cum_weights is None:
            self._split_cum_weights = cumulative_weights(self.shop.goals[goals.start : goals.stop])
        return goals.start + sample_goal_index(self._split_cum_weights, self._rng)

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
