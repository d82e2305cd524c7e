"""The contract every text environment of this package follows (one base class, three games).

``obs`` is the raw observation (HGPO's grouping anchor: no template, no history). The action is the
LLM's whole output; :func:`parse_action` (:func:`parse_plan_execute` with
``answer_format="plan_execute"``) extracts the command. A format-invalid output is not executed: the
state is unchanged, ``is_action_valid`` is False and the observation reports that nothing happened.
An exception inside the game engine ends the episode as truncated with ``info["env_error"]``, and the
next ``reset`` rebuilds the engine.
"""

from __future__ import annotations

import difflib
import inspect
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from envs.common.actions import (
    PLAN_EXECUTE,
    SUBGOAL_INFO,
    SWITCH_INFO,
    THINK_ACTION,
    ParsedAction,
    check_answer_format,
    parse_action,
    parse_plan_execute,
)
from envs.common.facts import EnvFacts
from envs.common.spaces import TextSpace

logger = logging.getLogger(__name__)


@dataclass
class Observation:
    """What a game returns after a reset or an executed command."""

    text: str
    admissible_actions: list[str]
    reward: float = 0.0
    terminated: bool = False
    won: bool = False
    extra_info: dict[str, Any] = field(default_factory=dict)


class TextEnv(gym.Env, ABC):
    """Base class: parsing, step limit, validity, error handling and the common ``info`` keys.

    Subclasses implement :meth:`_start_episode`, :meth:`_execute` and :meth:`_observation_unchanged`
    (and :meth:`_rebuild` if their engine can break). ``info`` always carries ``task``,
    ``task_type``, ``admissible_actions``, ``is_action_valid``, ``won``, ``command`` (the command
    parsed from the action, "" at reset) and ``step``; with ``answer_format="plan_execute"`` also
    ``switch`` and ``subgoal`` (the texts inside those tags, None when missing and at reset), what
    HiPER's advantage estimator reads per turn besides ``is_action_valid``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    #: Whether a valid output needs the ``<think>``/``<action>`` tags (the reference's format rule).
    default_require_tags: bool = True
    #: What generic code knows of the env (evaluation splits and columns, warm start, paper settings):
    #: :mod:`envs.common.facts`; the defaults fit a plain env.
    FACTS: ClassVar[EnvFacts] = EnvFacts()

    def __init__(
        self,
        *,
        max_steps: int,
        require_tags: bool | None = None,
        answer_format: str = THINK_ACTION,
        render_mode: str | None = None,
    ):
        TextEnv.check_settings(
            max_steps=max_steps,
            require_tags=require_tags,
            answer_format=answer_format,
            render_mode=render_mode,
        )
        self.max_steps = max_steps
        self.require_tags = self.default_require_tags if require_tags is None else bool(require_tags)
        self.answer_format = answer_format
        self.render_mode = render_mode
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self._task = ""
        self._task_type = ""
        self._current: Observation | None = None
        self._steps = 0
        self._needs_rebuild = False

    # ----------------------------------------------------------------- settings
    @classmethod
    def check_settings(
        cls,
        *,
        max_steps: int,
        require_tags: bool | None = None,
        answer_format: str = THINK_ACTION,
        render_mode: str | None = None,
        **_: Any,
    ) -> None:
        """Raise ValueError naming the first bad setting, building nothing. Subclasses check their
        own settings too (calling this one) and call it from ``__init__``, so a config is refused
        the same way before a run starts (:meth:`check_config`) as when the env is built."""
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        if require_tags is not None and not isinstance(require_tags, bool | np.bool_):
            raise ValueError(f"require_tags must be True, False or None (the default), got {require_tags!r}")
        check_answer_format(answer_format)
        if answer_format == PLAN_EXECUTE and require_tags is not None and not require_tags:
            raise ValueError(
                "require_tags=False is invalid with answer_format='plan_execute' (its three tags are "
                "the answer)"
            )
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")

    @classmethod
    def check_config(cls, env_config: Mapping[str, Any]) -> None:
        """Check an RLlib ``env_config`` against the constructor without building the env: a key it
        does not take (naming the closest one it does) or a bad value is a ValueError."""
        signature = inspect.signature(cls)
        params = signature.parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            for key in env_config:
                if key not in params:
                    close = difflib.get_close_matches(str(key), list(params), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise ValueError(
                        f"{cls.__name__} has no setting {key!r}{hint}; its settings: {', '.join(params)}"
                    )
        try:
            bound = signature.bind(**env_config)
        except TypeError as exc:
            raise ValueError(f"{cls.__name__}: {exc}") from None
        bound.apply_defaults()
        cls.check_settings(**bound.arguments)

    # ----------------------------------------------------------------- subclass hooks
    @abstractmethod
    def _start_episode(self, seed: int | None, options: dict[str, Any]) -> tuple[Observation, str, str]:
        """Start a task and return (first observation, task description, task type)."""

    @abstractmethod
    def _execute(self, command: str) -> Observation:
        """Run a parsed command in the game."""

    @abstractmethod
    def _observation_unchanged(self) -> str:
        """The observation shown after a format-invalid output (the game's "nothing happens")."""

    def _rebuild(self) -> None:
        """Recreate whatever engine state an exception may have broken (default: nothing)."""

    def expert_plan(self) -> list[str]:
        """The privileged expert's remaining commands from the current state (baselines, tests)."""
        raise NotImplementedError(f"{type(self).__name__} has no expert")

    def expert_action(self) -> str | None:
        """The expert's next command, or None when it has nothing left to do."""
        plan = self.expert_plan()
        return plan[0] if plan else None

    # ----------------------------------------------------------------- gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        if self._needs_rebuild:
            self._rebuild()
            self._needs_rebuild = False
        self._steps = 0
        first, self._task, self._task_type = self._start_episode(seed, dict(options or {}))
        self._current = first
        return first.text, self._info(first, ParsedAction("", True))

    def step(self, action: str):
        if self._current is None:
            raise RuntimeError("call reset() before step()")
        if self._current.terminated or self._steps >= self.max_steps or self._needs_rebuild:
            raise RuntimeError("the episode is over; call reset() before step()")
        if not isinstance(action, str):  # any text is legal; anything else is the caller's bug
            raise TypeError(f"the action must be the LLM's output text (a str), got {type(action).__name__}")
        if self.answer_format == PLAN_EXECUTE:
            parsed = parse_plan_execute(action)
        else:
            parsed = parse_action(action, require_tags=self.require_tags)
        self._steps += 1
        truncated = False
        env_error = None
        if parsed.is_valid:
            try:
                result = self._execute(parsed.command)
            except Exception as exc:  # the engine broke: end the episode, rebuild on reset
                logger.warning("environment error on %r: %r", parsed.command, exc)
                env_error = f"{type(exc).__name__}: {exc}"
                self._needs_rebuild = True
                result = Observation(self._current.text, [], terminated=False)
                truncated = True
        else:
            result = Observation(
                self._observation_unchanged(), self._current.admissible_actions, extra_info={}
            )
        self._current = result
        truncated = truncated or (not result.terminated and self._steps >= self.max_steps)
        info = self._info(result, parsed)
        if env_error is not None:
            info["env_error"] = env_error
        return result.text, float(result.reward), bool(result.terminated), truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi" and self._current is not None:
            return self._current.text
        return None

    # ----------------------------------------------------------------- helpers
    @property
    def task(self) -> str:
        return self._task

    def _info(self, obs: Observation, parsed: ParsedAction) -> dict[str, Any]:
        plan_execute = self.answer_format == PLAN_EXECUTE
        plan = {SWITCH_INFO: parsed.switch, SUBGOAL_INFO: parsed.subgoal} if plan_execute else {}
        return {
            "task": self._task,
            "task_type": self._task_type,
            "admissible_actions": list(obs.admissible_actions),
            "is_action_valid": parsed.is_valid,
            "won": bool(obs.won),
            "command": parsed.command,
            "step": self._steps,
            **plan,
            **obs.extra_info,
        }
