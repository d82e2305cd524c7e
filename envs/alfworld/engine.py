"""ALFWorld's text engine: TextWorld's ``PddlEnv`` with alfworld's ``AlfredDemangler``.

This is what ``alfworld.agents.environment.AlfredTWEnv`` runs, minus its batching and game-file
handling: one game is loaded from its ``game.tw-pddl`` content (a dict), then reset and stepped.

Two costs are cut without changing what a game does:

* ``PddlEnv.load`` and ``PddlEnv.reset`` each translate the PDDL problem twice with Fast Downward's
  translator (plain, and optimised for TextWorld's ``replan``; 0.2-0.4 s each for a kitchen). Here
  one plain translation per game serves all four (``replan``, the only user of the optimised one,
  is never called), so a reset of a loaded game only reloads the translated task.
* TextWorld's own ``replan`` searches the whole kitchen (seconds). :meth:`AlfredEngine.expert_plan`
  plans on the current state restricted to the objects the goal mentions plus anything held
  (receptacles have no capacity in this domain, so other objects never matter): ~0.1 s.
* TextWorld's text generator parses every command template, feedback rule and fact query again at
  each use, for every admissible command of every step (two thirds of a step in a real-sized
  kitchen). :func:`_memoize_text_parsing` keeps each parse; the generator gets a fresh copy of a
  template's symbols (it annotates them), and the same parsed query (it only reads it).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from copy import deepcopy
from functools import cache
from types import SimpleNamespace
from typing import Any

import fast_downward
import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
from textworld.core import GameState
from textworld.envs import PddlEnv
from textworld.envs.pddl import textgen


class UnsolvableError(RuntimeError):
    """The planner finds no way to the goal from the current state."""


_GOAL_TYPE = re.compile(r"\(\s*objectType\s+\?\S+\s+(\S+?)\s*\)", re.IGNORECASE)
_DOMAIN_NAME = re.compile(r"\(:domain\s+([^\s)]+)\s*\)", re.IGNORECASE)


@contextmanager
def _preserve_argv() -> Iterator[None]:
    """``fast_downward.pddl2sas`` overwrites ``sys.argv`` (its translator reads options from it)."""
    argv = sys.argv
    try:
        yield
    finally:
        sys.argv = argv


@contextmanager
def _memoized_translation(memo: dict[tuple[str, str], Any]) -> Iterator[None]:
    """Route TextWorld's calls to ``fast_downward.pddl2sas`` through ``memo`` (plain translation only)."""
    original: Callable[..., Any] = fast_downward.pddl2sas

    def translate(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        key = (domain, problem)
        if key not in memo:
            memo[key] = original(domain, problem, verbose=verbose)
        return memo[key]

    fast_downward.pddl2sas = translate
    try:
        with _preserve_argv():
            yield
    finally:
        fast_downward.pddl2sas = original


#: TextWorld's own parsers, before :func:`_memoize_text_parsing` wraps them.
TEXTGEN_PARSERS = {"_parse_and_convert": textgen._parse_and_convert, "Rule": textgen.Rule}


@cache
def _memoize_text_parsing() -> None:
    """Make TextWorld's text generator parse each template and query once per process (see above)."""
    parse = TEXTGEN_PARSERS["_parse_and_convert"]
    parse_query = TEXTGEN_PARSERS["Rule"].parse_conjunctive_query
    symbols = cache(lambda text: parse(text, rule_name="symbols"))

    def parse_and_convert(text: str, rule_name: str, **kwargs: Any) -> Any:
        if rule_name != "symbols" or kwargs.get("trace"):
            return parse(text, rule_name=rule_name, **kwargs)
        return deepcopy(symbols(text))

    textgen._parse_and_convert = parse_and_convert
    textgen.Rule = SimpleNamespace(parse_conjunctive_query=cache(parse_query))


@cache
def _planner_lib() -> Any:
    """A private copy of Fast Downward for the expert planner (one per process; solving must not
    touch a game's state, which lives in that game's own copy)."""
    return fast_downward.load_lib()


class AlfredEngine:
    """One ALFWorld game at a time (``load`` a game dict, then ``reset`` / ``step``)."""

    def __init__(self) -> None:
        _memoize_text_parsing()
        self._pddl = PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True))
        self._env = AlfredDemangler(self._pddl, shuffle=False)
        self._memo: dict[tuple[str, str], Any] = {}
        self._game: Mapping[str, Any] | None = None
        self._plan: list[str] | None = None  # expert plan of the current state, once computed

    def load(self, game: Mapping[str, Any]) -> None:
        """Load a game (``pddl_domain``, ``grammar``, ``pddl_problem``); a no-op if already loaded."""
        keys = ("pddl_domain", "grammar", "pddl_problem")
        if self._game is not None and all(self._game[k] == game[k] for k in keys):
            return
        self._memo.clear()
        self._game = self._plan = None
        with _memoized_translation(self._memo):
            self._env.load(dict(game))
        self._game = game

    def reset(self) -> GameState:
        if self._game is None:
            raise RuntimeError("load a game before reset()")
        self._plan = None
        with _memoized_translation(self._memo):
            return self._env.reset()

    def step(self, command: str) -> GameState:
        self._plan = None
        return self._env.step(command)[0]

    def expert_plan(self) -> list[str]:
        """The planner's commands from the current state to the goal ([] once the goal holds)."""
        if self._plan is None:
            self._plan = self._solve()
        return list(self._plan)

    def _solve(self) -> list[str]:
        state = self._pddl._pddl_state
        if state.check_goal():
            return []
        problem = self._goal_restricted_problem()
        with _preserve_argv():
            _, sas = fast_downward.pddl2sas(self._game["pddl_domain"], problem, optimize=True)
        planner = _planner_lib()
        if not planner.solve_sas(sas.encode("utf-8"), False):
            raise UnsolvableError("the planner found no plan from the current state")
        operators = (fast_downward.Operator * planner.get_last_plan_length())()
        planner.get_last_plan(operators)
        return state.plan_to_templated_actions([op.name for op in operators], self._pddl._entity_infos)

    def _goal_restricted_problem(self) -> str:
        """The current state as a PDDL problem, keeping only the objects the goal can involve."""
        problem = self._game["pddl_problem"]
        goal_start = problem.lower().rindex("(:goal")
        types = {t.lower() for t in _GOAL_TYPE.findall(problem[goal_start:])}
        state = self._pddl._pddl_state
        facts = [(f.name, [v.name for v in f.arguments]) for f in state.facts if "@" not in f.name]
        relevant = {args[0] for name, args in facts if name == "objecttype" and args[1] in types}
        relevant |= {args[1] for name, args in facts if name == "holds"}
        objects = {o.name: o.type_name for o in state.task.objects}
        objects = {o: t for o, t in objects.items() if t != "object" or o in relevant}
        init = [f"({name} {' '.join(args)})" for name, args in facts if all(a in objects for a in args)]
        declared = [f"{o} - {t}" for o, t in objects.items()]
        domain = _DOMAIN_NAME.search(problem).group(1)
        sep = "\n  "
        return (
            f"(define (problem expert) (:domain {domain})\n"
            f" (:objects{sep}{sep.join(declared)})\n (:init{sep}{sep.join(init)})\n{problem[goal_start:]}"
        )
