"""Turn-based teams of LLM roles playing one text game, as RLlib multi-agent envs.

Dr. MAS (docs/drmas.md) trains systems of cooperating LLM agents whose turns are sequential: a router
decides who acts, and only some roles' outputs reach the environment. :class:`TeamTextEnv` is that
layer over one :class:`~envs.common.text_env.TextEnv` game; a subclass names the roles and the
orchestration (who acts next). :class:`~envs.common.planner_executor.PlannerExecutorTeam` is the
planner/executor shape shared by ALFWorld and KeyChest; WebShop's router/searcher/buyer shape is
:mod:`envs.webshop.team`. The roles' tag rules are :func:`~envs.common.actions.parse_tagged` and its
kin; the prompt helpers and the expert play (:func:`play_team`) here serve every team.

The contract, for every role (agent ids are the role names):

* Exactly one role acts per call: ``reset`` and ``step`` return an observation for the next role only.
  Every observation is the game's current raw observation (HGPO's grouping anchor), whoever reads it;
  what is particular to a role is in its ``info``.
* Any string is a legal action. It is parsed by the role's own tag rule; an unparseable output, or a
  parsed one the role may not use, is invalid and is not executed: the game state does not change
  (the game does not even count a step; the team's ``max_turns`` bounds a team that never answers
  well).
* ``info`` of a role (the entry of the role that acts next, and one for the role that just acted):
  the game's own keys from its latest reset or step (``score``, ``task_id``, ...), then ``task``,
  ``task_type``, ``admissible_actions`` (what this role may answer now), ``is_action_valid`` and
  ``command`` (this role's latest output: valid? and its parsed text; True and "" before it acted),
  ``won``, ``step`` (this role's turns so far), ``role``, ``team_context`` (the ``(role, text)``
  outputs of its teammates since the last game step) and ``game_step`` (game steps taken). A role's
  entry always describes the role's own latest output: RLlib's ``MultiAgentEpisode`` keeps an
  agent's info only together with an observation of that agent, so the entry right after a turn is
  kept when the same role acts again, and otherwise the entry at the role's next observation (or the
  final one) carries the same validity, as ``infos[t + 1]`` does in a single-agent episode.
* Rewards are 0 per turn. When the game ends (terminated, truncated by its ``max_steps`` or by an
  engine error, or the team's ``max_turns`` reached), every role that acted gets the game's summed
  reward in that step's ``rewards`` and the final observation (RLlib needs one to close a truncated
  agent), ``terminateds``/``truncateds`` carry ``"__all__"`` and every role, and the final infos add
  ``score`` (the game's own, else ``float(won)`` as the evaluation rollout reads it). Dr. MAS gives
  every turn the team outcome less that turn's invalid penalty; that rewrite belongs to the learner.
* An engine exception ends the episode as truncated with ``info["env_error"]`` (the game's
  :class:`~envs.common.text_env.TextEnv` rule; its next reset rebuilds the engine).
"""

from __future__ import annotations

import difflib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envs.common.facts import EnvFacts
from envs.common.prompts import PromptContext, format_history
from envs.common.spaces import TextSpace
from envs.common.text_env import TextEnv

#: Game settings a team does not take: each role answers in its own tags.
NOT_TEAM_SETTINGS = ("answer_format",)
#: RLlib's key for "every agent" in ``terminateds`` / ``truncateds``.
ALL = "__all__"


@dataclass(frozen=True)
class RoleTurn:
    """One role output as the team reads it.

    ``command`` is what ``info["command"]`` shows (the game command, the verdict word, the subgoal);
    ``game_command`` is set for a valid output that the game runs; ``note`` is a word for the
    teammates given after that command ran (the executor's report)."""

    command: str
    is_valid: bool
    game_command: str | None = None
    note: str | None = None


_NO_TURN = RoleTurn("", True)


class TeamTextEnv(MultiAgentEnv, ABC):
    """Several roles playing one :class:`TextEnv` game in turns (see the module doc for the contract).

    A subclass sets :attr:`ROLES` and :attr:`game_class` and implements :meth:`_first_role`,
    :meth:`_parse` (a role's tag rule and what it may do), :meth:`_next_role` (the orchestration),
    :meth:`_admissible` and :meth:`expert_action`. Settings: the game's own (but ``answer_format``)
    plus ``max_turns``, the bound on agent turns (default ``3 * max_steps``).
    """

    ROLES: ClassVar[tuple[str, ...]]
    game_class: ClassVar[type[TextEnv]]
    #: A built-in team's are its game's :meth:`~envs.common.facts.EnvFacts.of_team`.
    FACTS: ClassVar[EnvFacts] = EnvFacts()
    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, *, max_turns: int | None = None, **game_settings: Any):
        type(self).check_config({"max_turns": max_turns, **game_settings})
        super().__init__()
        self.game = self.game_class(**game_settings)
        self.max_turns = 3 * self.game.max_steps if max_turns is None else max_turns
        self.possible_agents = list(self.ROLES)
        self.agents = list(self.ROLES)
        self.observation_spaces = {role: TextSpace() for role in self.ROLES}
        self.action_spaces = {role: TextSpace() for role in self.ROLES}
        self._next: str | None = None
        self._done = True
        self._game_obs = ""
        self._game_info: dict[str, Any] = {}
        self._game_reward = 0.0
        self.game_step = 0  #: game steps taken in this episode
        self._turns = dict.fromkeys(self.ROLES, 0)
        self._last = dict.fromkeys(self.ROLES, _NO_TURN)
        self._messages: list[tuple[str, str]] = []

    # ----------------------------------------------------------------- settings
    @classmethod
    def team_settings(cls) -> list[str]:
        """The team's own settings: the keyword-only parameters of its constructor."""
        params = inspect.signature(cls.__init__).parameters.values()
        return [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]

    @classmethod
    def game_settings(cls) -> list[str]:
        """The game's settings the team passes on."""
        params = inspect.signature(cls.game_class).parameters
        return [name for name in params if name not in NOT_TEAM_SETTINGS]

    @classmethod
    def check_settings(cls, *, max_turns: int | None = None, **_: Any) -> None:
        """Raise ValueError naming the first bad team setting (the game checks its own)."""
        if max_turns is not None and (
            not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1
        ):
            raise ValueError(f"max_turns must be None or a positive int, got {max_turns!r}")

    @classmethod
    def check_config(cls, env_config: Mapping[str, Any]) -> None:
        """Check an RLlib ``env_config`` without building anything, as
        :meth:`TextEnv.check_config <envs.common.text_env.TextEnv.check_config>` does: an unknown
        key (naming the closest known one) or a bad value is a one-line ValueError."""
        team, game = cls.team_settings(), cls.game_settings()
        for key in env_config:
            if key not in team and key not in game:
                close = difflib.get_close_matches(str(key), team + game, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(
                    f"{cls.__name__} has no setting {key!r}{hint}; its settings: {', '.join(team + game)}"
                )
        cls.check_settings(**{k: v for k, v in env_config.items() if k in team})
        cls.game_class.check_config({k: v for k, v in env_config.items() if k in game})

    # ----------------------------------------------------------------- subclass hooks
    @abstractmethod
    def _first_role(self) -> str:
        """The role that acts first in an episode."""

    @abstractmethod
    def _parse(self, role: str, output: str) -> RoleTurn:
        """Read ``role``'s output by its tag rule; only a valid turn the role may take is executed."""

    @abstractmethod
    def _next_role(self, role: str, turn: RoleTurn) -> str:
        """The orchestration: note ``role``'s ``turn`` (called after the game ran it, if it did, and
        also on the turn that ends the episode) and name the role that acts next."""

    @abstractmethod
    def _admissible(self, role: str) -> list[str]:
        """What ``role`` may answer now (its ``info["admissible_actions"]``)."""

    @abstractmethod
    def expert_action(self, role: str) -> str:
        """A competent teammate's whole answer, in tags, for ``role`` in the current state (tests,
        warm starts)."""

    def _role_info(self, role: str) -> dict[str, Any]:
        """Keys a team adds to every info of ``role`` (default: none)."""
        return {}

    def team_reward(self, reward: float, info: dict[str, Any]) -> float:
        """The team's reward for one game step (every role that acted gets the episode's sum): the
        game's own reward."""
        return reward

    # ----------------------------------------------------------------- RLlib API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed, options=options)
        self._game_obs, self._game_info = self.game.reset(seed=seed, options=options)
        self._game_reward = 0.0
        self.game_step = 0
        self._turns = dict.fromkeys(self.ROLES, 0)
        self._last = dict.fromkeys(self.ROLES, _NO_TURN)
        self._messages = []
        self._done = False
        self._start_episode()
        self._next = self._first_role()
        return {self._next: self._game_obs}, {self._next: self._info(self._next)}

    def step(self, action_dict: Mapping[str, Any]):
        if self._done or self._next is None:
            raise RuntimeError("the episode is over (or never started); call reset() before step()")
        role = self._next
        if set(action_dict) != {role}:
            raise ValueError(f"it is the {role}'s turn: expected only its action, got {sorted(action_dict)}")
        output = action_dict[role]
        if not isinstance(output, str):  # any text is legal; anything else is the caller's bug
            raise TypeError(f"the action must be the LLM's output text (a str), got {type(output).__name__}")
        turn = self._parse(role, output)
        self._turns[role] += 1
        self._last[role] = turn
        self._messages.append((role, turn.command))
        terminated = truncated = False
        if turn.game_command is not None:
            self._game_obs, reward, terminated, truncated, self._game_info = self.game.step(
                f"<think></think><action>{turn.game_command}</action>"
            )
            self._game_reward += self.team_reward(float(reward), self._game_info)
            self.game_step += 1
            self._messages = []
        if turn.note is not None:
            self._messages.append((role, turn.note))
        self._next = self._next_role(role, turn)
        if not terminated:
            truncated = truncated or sum(self._turns.values()) >= self.max_turns
        if terminated or truncated:
            return self._final_step(terminated)
        infos = {role: self._info(role), self._next: self._info(self._next)}
        return {self._next: self._game_obs}, {role: 0.0}, {ALL: False}, {ALL: False}, infos

    def render(self) -> str | None:
        return self.game.render()

    def close(self) -> None:
        self.game.close()

    # ----------------------------------------------------------------- helpers
    def _start_episode(self) -> None:
        """Reset the orchestration's own state (default: nothing)."""

    def _final_step(self, terminated: bool):
        self._done = True
        self._next = None
        acted = [role for role in self.ROLES if self._turns[role] > 0]
        infos = {role: self._info(role) for role in acted}
        for info in infos.values():
            info.setdefault("score", float(info["won"]))
        flags = {ALL: terminated, **dict.fromkeys(self.ROLES, terminated)}
        cut = {ALL: not terminated, **dict.fromkeys(self.ROLES, not terminated)}
        observations = dict.fromkeys(acted, self._game_obs)
        return observations, dict.fromkeys(acted, self._game_reward), flags, cut, infos

    def _team_context(self, role: str) -> tuple[tuple[str, str], ...]:
        return tuple((other, text) for other, text in self._messages if other != role)

    def _info(self, role: str) -> dict[str, Any]:
        turn = self._last[role]
        return {
            **self._game_info,
            "admissible_actions": self._admissible(role),
            "is_action_valid": turn.is_valid,
            "command": turn.command,
            "step": self._turns[role],
            "role": role,
            "team_context": self._team_context(role),
            "game_step": self.game_step,
            **self._role_info(role),
        }


# --------------------------------------------------------------------------- prompts
def team_prompt_context(
    observation: str, info: Mapping[str, Any], history: Sequence[tuple[str, str]], history_length: int
) -> PromptContext:
    """The prompt context of the role ``info`` belongs to: its admissible answers, team context and
    subgoal from ``info``; ``history`` holds the episode's game steps (observation, executed command),
    and ``step`` counts them."""
    return PromptContext(
        task=info["task"],
        history=list(history),
        observation=observation,
        admissible_actions=info["admissible_actions"],
        step=info["game_step"],
        history_length=history_length,
        current_subgoal=info.get("subgoal"),
        role=info["role"],
        team_context=tuple(info["team_context"]),
    )


def role_prompt(context: PromptContext, *, intro: str, answer: str, show: Callable[[str], str] = str) -> str:
    """A role's prompt: its ``intro``, the task, the history window (:func:`format_history` of the
    game steps), the current observation (``show`` formats observations), its admissible answers when
    it has any, what its teammates said since the last game step, and its ``answer`` instruction."""
    c = context
    lines = [intro, f"Your task is to: {c.task}"]
    records, shown = format_history([(show(obs), command) for obs, command in c.history], c.history_length)
    if c.step > 0 and shown:
        lines += [
            f"Prior to this step, your team has taken {c.step} step(s). Below are the most recent {shown} "
            "observations and the corresponding actions taken:",
            records,
        ]
    lines.append(f"Your current observation is: {show(c.observation)}")
    if c.admissible_actions:
        actions = ", ".join(f"'{action}'" for action in c.admissible_actions)
        lines.append(f"Your admissible actions of the current situation are: [{actions}].")
    if c.team_context:
        lines.append("Your teammates said since the last step:")
        lines += [f"- {role}: {text}" for role, text in c.team_context]
    lines.append(answer)
    return "\n".join(lines)


def check_role(context: PromptContext, roles: Sequence[str]) -> str:
    """``context.role``, refused in one line when the template has no such role."""
    if context.role not in roles:
        raise ValueError(f"a team prompt needs context.role in {tuple(roles)}, got {context.role!r}")
    return context.role


# --------------------------------------------------------------------------- expert episodes
@dataclass
class TeamEpisode:
    """One episode played through ``reset``/``step``: the reset's (observations, infos), each step's
    (actions, observations, rewards, terminateds, truncateds, infos), and the prompt context each
    acting role saw (history window 2)."""

    reset: tuple[dict[str, Any], dict[str, Any]]
    steps: list[tuple[dict[str, Any], ...]] = field(default_factory=list)
    contexts: list[PromptContext] = field(default_factory=list)


def play_team(
    env: TeamTextEnv, answer: Callable[[str], str] | None = None, **reset_kwargs: Any
) -> TeamEpisode:
    """Play one episode; each turn's answer is ``answer(role)`` (default: ``env.expert_action``)."""
    answer = answer or env.expert_action
    observations, infos = env.reset(**reset_kwargs)
    episode = TeamEpisode((observations, infos))
    history: list[tuple[str, str]] = []
    done = False
    while not done:
        ((role, observation),) = observations.items()
        info = infos[role]
        episode.contexts.append(team_prompt_context(observation, info, history, 2))
        actions = {role: answer(role)}
        observations, rewards, terminateds, truncateds, infos = env.step(actions)
        episode.steps.append((actions, observations, rewards, terminateds, truncateds, infos))
        if infos[role]["game_step"] > info["game_step"]:
            history.append((observation, infos[role]["command"]))
        done = terminateds[ALL] or truncateds[ALL]
    return episode


def team_corpus(episodes: Sequence[TeamEpisode], render: Callable[[PromptContext], str]) -> list[str]:
    """Every prompt, answer and observation of ``episodes`` (tokenizer text)."""
    texts: list[str] = []
    for episode in episodes:
        for context, (actions, *_) in zip(episode.contexts, episode.steps, strict=True):
            texts += [context.observation, render(context), *actions.values()]
        texts += list(episode.steps[-1][1].values())
    return list(dict.fromkeys(texts))
