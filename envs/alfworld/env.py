"""ALFWorld as a Gymnasium text environment (``gymnasium.make("hgpo/ALFWorld-v0", split=..., max_steps=50)``).

The game engine is the real one of alfworld 0.4.2 (TextWorld's PDDL engine with alfworld's
demangler, see :mod:`envs.alfworld.engine`). Games come from one of two sources:

* ``generated`` (no download): procedurally generated from the material the alfworld wheel ships
  (:mod:`envs.alfworld.games`: ALFRED floor plans, goal library, object tables), all six task
  types, planner-checked, with the splits defined there. Command grammar (``grammar``): alfworld
  0.4.2's by default (``move X to Y``, ``You arrive at cabinet 8.``, ``help``), or the original
  json_2.1.1 one (``"2.1.1"``: ``put X in/on Y``, ``You arrive at loc N.``; :mod:`envs.alfworld.logic`).
* ``data``: the standard ALFWorld game files under ``data_dir`` (default ``$ALFWORLD_DATA``, else
  ``~/.cache/alfworld``, where ``alfworld-download`` puts them), listed by alfworld's own
  ``AlfredTWEnv`` and played as they are (their own grammar); ``train`` / ``eval_in_distribution`` /
  ``eval_out_of_distribution`` map to ``train`` / ``valid_seen`` / ``valid_unseen``. With
  ``source="auto"`` (default) they are used when present (or when ``data_dir`` is given), else games
  are generated.

``reset(seed=s)`` always gives the same task for the same ``s``. The evaluation splits (and data mode)
are fixed lists of ``env.unwrapped.num_games`` games in a seeded order that mixes task types; seed
``s`` plays game ``s mod num_games``. As in verl-agent, ``help`` is playable but never listed among
the admissible actions. The reward is 10 when the episode is won (the reference's ``10 * won``), else 0.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from textworld.core import GameState

from envs.alfworld.dataset import has_game_files, list_games, load_game
from envs.alfworld.engine import AlfredEngine, UnsolvableError
from envs.alfworld.facts import ALFWORLD_FACTS
from envs.alfworld.games import SPLITS, Game, generate_game, num_games
from envs.alfworld.logic import DEFAULT_GRAMMAR, HELP_COMMAND, TASK_CATEGORY, TASK_TYPES, check_grammar
from envs.common.actions import THINK_ACTION, ParsedAction
from envs.common.text_env import Observation, TextEnv

SOURCES = ("auto", "generated", "data")
WIN_REWARD = 10.0
NOTHING_HAPPENS = "Nothing happens."
_TASK_PREFIX = "Your task is to: "
_MAX_ATTEMPTS = 8  # derived seeds tried before a generated game is declared impossible


def task_from_observation(observation: str) -> str:
    """The task description as the reference extracts it: the text after ``Your task is to: ``."""
    start = observation.find(_TASK_PREFIX)
    return observation[start + len(_TASK_PREFIX) :].strip() if start != -1 else ""


def _default_data_dir() -> str:
    return os.path.expanduser(os.environ.get("ALFWORLD_DATA") or "~/.cache/alfworld")


class ALFWorldEnv(TextEnv):
    """ALFWorld household tasks; ``info`` adds ``task_category`` (Pick, Look, Clean, Heat, Cool, Pick2),
    ``task_id`` and ``is_action_admissible`` to the common keys.

    Args:
        split: ``train``, ``eval_in_distribution`` or ``eval_out_of_distribution``.
        max_steps: steps before the episode is truncated.
        source: ``auto``, ``generated`` or ``data`` (see the module docstring).
        data_dir: root of the standard ALFWorld files (the folder that holds ``json_2.1.1``).
        task_types: the task types to draw from (default: all six).
        grammar: command grammar of generated games, ``"0.4.2"`` (default) or ``"2.1.1"``.
        require_tags, answer_format: the answer's format (:mod:`envs.common.actions`).
    """

    FACTS = ALFWORLD_FACTS

    def __init__(
        self,
        split: str = "train",
        max_steps: int = 50,
        *,
        source: str = "auto",
        data_dir: str | os.PathLike[str] | None = None,
        task_types: Sequence[str] = TASK_TYPES,
        grammar: str = DEFAULT_GRAMMAR,
        require_tags: bool | None = None,
        answer_format: str = THINK_ACTION,
        render_mode: str | None = None,
    ):
        super().__init__(
            max_steps=max_steps,
            require_tags=require_tags,
            answer_format=answer_format,
            render_mode=render_mode,
        )
        self.check_settings(max_steps=max_steps, split=split, source=source, task_types=task_types)
        self.split = split
        self.task_types = tuple(task_types)
        self.grammar = check_grammar(grammar)
        root = data_dir if data_dir is not None else _default_data_dir()
        use_data = source == "data" or (source == "auto" and (data_dir is not None or has_game_files(root)))
        self.source = "data" if use_data else "generated"
        self._data_games = list_games(root, split, self.task_types) if use_data else ()
        self._engine = AlfredEngine()
        self._game: Game | None = None

    @classmethod
    def check_settings(
        cls,
        *,
        split: str = "train",
        source: str = "auto",
        task_types: Sequence[str] = TASK_TYPES,
        **common: Any,
    ) -> None:
        super().check_settings(**common)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        if isinstance(task_types, str) or not task_types or not set(task_types) <= set(TASK_TYPES):
            raise ValueError(f"task_types must be a non-empty subset of {TASK_TYPES}, got {task_types!r}")

    @property
    def num_games(self) -> int | None:
        """Games in this split's fixed list (``reset(seed=s)`` plays ``s mod num_games``); None for
        generated ``train``, where every seed is a new game."""
        if self.source == "data":
            return len(self._data_games)
        return num_games(self.split, self.task_types)

    # ----------------------------------------------------------------- TextEnv hooks
    def _start_episode(self, seed: int | None, options: dict[str, Any]) -> tuple[Observation, str, str]:
        if options:
            raise ValueError(f"ALFWorldEnv.reset takes no options, got {sorted(options)}")
        task_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        if self.source == "data":
            first = self._play(load_game(self._data_games[task_seed % len(self._data_games)]))
        else:
            first = self._play_generated(task_seed)
        return first, task_from_observation(first.text), self._game.goal.task_type

    def _execute(self, command: str) -> Observation:
        admissible = command in self._current.admissible_actions
        result = self._observation(self._engine.step(command))
        result.extra_info["is_action_admissible"] = admissible
        return result

    def _observation_unchanged(self) -> str:
        return NOTHING_HAPPENS

    def _rebuild(self) -> None:
        self._engine = AlfredEngine()
        self._game = None

    def _info(self, obs: Observation, parsed: ParsedAction) -> dict[str, Any]:
        info = super()._info(obs, parsed)
        info.setdefault("is_action_admissible", False)
        info["task_category"] = TASK_CATEGORY.get(self._task_type, self._task_type)
        info["task_id"] = self._game.task_id if self._game is not None else ""
        return info

    # ----------------------------------------------------------------- public extras
    def expert_plan(self) -> list[str]:
        """The planner's remaining commands from the current state ([] once the task is done)."""
        if self._game is None:
            raise RuntimeError("call reset() before expert_plan()")
        return self._engine.expert_plan()

    # ----------------------------------------------------------------- helpers
    def _play(self, game: Game) -> Observation:
        self._game = None
        self._engine.load(game.data)
        first = self._observation(self._engine.reset())
        self._game = game
        return first

    def _play_generated(self, task_seed: int) -> Observation:
        """The first solvable attempt of ``task_seed`` (re-checked only when the game changes)."""
        for attempt in range(_MAX_ATTEMPTS):
            game = generate_game(self.split, task_seed, self.task_types, attempt, self.grammar)
            already_checked = self._game is not None and self._game.task_id == game.task_id
            first = self._play(game)
            if already_checked:
                return first
            try:
                if not first.won and self._engine.expert_plan():
                    return first
            except UnsolvableError:
                pass
        raise RuntimeError(f"no solvable game for seed {task_seed} after {_MAX_ATTEMPTS} attempts")

    @staticmethod
    def _observation(state: GameState) -> Observation:
        won = bool(state["won"])
        return Observation(
            text=state.feedback,
            admissible_actions=[c for c in state["admissible_commands"] if c != HELP_COMMAND],
            reward=WIN_REWARD if won else 0.0,
            terminated=won,
            won=won,
        )
