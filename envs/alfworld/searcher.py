"""An ALFWorld demonstrator whose every choice follows from what the policy's prompt shows.

Why this shape: supervised fine-tuning learns the demonstrator's action *given the prompt*. A
demonstrator that remembers more than the prompt's K-step window (which receptacles it already
searched, where it saw an object ten steps ago) makes choices the policy cannot explain from its
input, and the policy learns their average: loops and invented places. :func:`decide` is a function
of the prompt alone (the task, the last K observation/command pairs, the current observation and
the admissible commands). It searches the receptacles that can hold what it needs in one fixed order
(receptacle type, then number), cyclically from where it stands, so it needs no memory; it never
looks at the game's hidden state. It therefore labels *any* state with the right next step, the
policy's own off-course states included (DAgger-style relabelling).

Its thoughts state the facts the choice rests on, in the order a model can produce them: the
wanted object's type first, then whether it is here, then the next place. For HiPER's plan-execute
format (docs/hiper.md) every step also names the subgoal of its phase (:func:`next_step`), again from
the prompt alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import alfworld.gen.constants as alfred
from alfworld.gen.goal_library import gdict

from envs.alfworld.env import NOTHING_HAPPENS, task_from_observation
from envs.alfworld.logic import TASK_TYPES
from envs.alfworld.scenes import LAMP_RECEPTACLE_TYPES, STATIC_RECEPTACLE_TYPES

#: Receptacle type -> object types it can hold, lower-cased as the game text writes them.
CAN_HOLD = {r.lower(): {o.lower() for o in objs} for r, objs in alfred.VAL_RECEPTACLE_OBJECTS.items()}
LAMP_PLACES = {r.lower() for r in LAMP_RECEPTACLE_TYPES}
FURNITURE = {r.lower() for r in STATIC_RECEPTACLE_TYPES}
#: Task type -> (verb, receptacle type of the tool) for the three tasks that change the object.
TREATMENTS = {
    "pick_clean_then_place_in_recep": ("clean", "sinkbasin"),
    "pick_heat_then_place_in_recep": ("heat", "microwave"),
    "pick_cool_then_place_in_recep": ("cool", "fridge"),
}
PAST_TENSE = {"clean": "clean", "heat": "hot", "cool": "cool"}
_PUT = re.compile(r"^(?:put|move) (.+?) (?:in/on|to) (.+)$")
_PLACE_OF = (  # commands that leave the agent at a named receptacle
    re.compile(r"^go to (.+)$"),
    re.compile(r"^(?:open|close) (.+)$"),
    re.compile(r"^take .+? from (.+)$"),
    _PUT,
    re.compile(r"^(?:clean|heat|cool|slice) .+? with (.+)$"),
)


def object_type(name: str) -> str:
    """``"apple 2"`` -> ``"apple"``."""
    return name.rsplit(" ", 1)[0]


def _place_key(place: str) -> tuple[str, int]:
    kind, _, number = place.rpartition(" ")
    return (kind, int(number)) if number.isdigit() else (place, 0)


@dataclass(frozen=True)
class Task:
    task_type: str  #: one of ``TASK_TYPES``
    obj: str  #: the object type to find, e.g. ``"mug"``
    target: str  #: receptacle type to put it in, or the lamp type for ``look_at_obj_in_light``


def _task_patterns() -> list[tuple[str, re.Pattern[str]]]:
    patterns = []
    for task_type in TASK_TYPES:
        for template in gdict[task_type]["templates"]:
            regex = re.escape(template).replace(r"\{obj\}", r"(?P<obj>\w+)")
            regex = regex.replace(r"\{recep\}", r"(?P<target>\w+)").replace(r"\{toggle\}", r"(?P<target>\w+)")
            patterns.append((task_type, re.compile(f"^{regex}$")))
    return patterns


_TASKS = _task_patterns()


def parse_task(text: str) -> Task:
    """``"put a clean mug in coffeemachine."`` -> Task(pick_clean_then_place_in_recep, mug, coffeemachine)."""
    sentence = text.strip().rstrip(".").strip()
    for task_type, pattern in _TASKS:
        if match := pattern.match(sentence):
            return Task(task_type, match["obj"], match["target"])
    raise ValueError(f"not an ALFWorld task: {text!r}")


@dataclass(frozen=True)
class View:
    """What the prompt shows: the task, the last K (observation, command) pairs, the current
    observation and the admissible commands."""

    task: Task
    window: Sequence[tuple[str, str]]
    observation: str
    admissible: Sequence[str]

    def events(self) -> list[tuple[str, str]]:
        """(command, the observation it produced), newest first, skipping commands that did nothing."""
        commands = [cmd for _, cmd in self.window]
        produced = [obs for obs, _ in self.window[1:]] + [self.observation]
        pairs = list(zip(commands, produced[: len(commands)], strict=True))
        return [(cmd, obs) for cmd, obs in reversed(pairs) if obs != NOTHING_HAPPENS]

    def location(self) -> str | None:
        """The receptacle the agent stands at: from its latest command that names one, else the one the
        engine offers to examine (it does so for the receptacle here)."""
        for command, _ in self.events():
            for pattern in _PLACE_OF:
                if match := pattern.match(command):
                    return match.groups()[-1]
        return next(iter(self._examinable_furniture()), None)

    def places(self) -> list[str]:
        """Every receptacle of the room, in search order (type, then number): those the agent can go
        to, and those it stands at (the engine lists no ``go to`` for them; receptacles that share an
        interaction pose are all "here")."""
        places = {match.groups()[-1] for a in self.admissible for p in _PLACE_OF if (match := p.match(a))}
        places |= set(self._examinable_furniture())
        here = self.location()
        return sorted(places | ({here} if here else set()), key=_place_key)

    def _examinable_furniture(self) -> list[str]:
        examined = (a[len("examine ") :] for a in self.admissible if a.startswith("examine "))
        return [name for name in examined if object_type(name) in FURNITURE]

    def at(self, place: str) -> bool:
        return f"go to {place}" not in self.admissible

    def holding(self) -> str | None:
        """The carried object: the engine offers to examine it (and no other object) wherever the agent
        is, and to put it where it may go."""
        for action in self.admissible:
            if action.startswith("examine ") and object_type(action[len("examine ") :]) not in FURNITURE:
                return action[len("examine ") :]
            if match := _PUT.match(action):
                return match[1]
        return None


class Step(NamedTuple):
    """One decision: :func:`decide`'s thought and command, and the subgoal of the phase it is in."""

    thought: str
    command: str
    subgoal: str


def decide(view: View) -> tuple[str, str]:
    """The next (thought, command) for what the prompt shows."""
    thought, command, _ = next_step(view)
    return thought, command


def next_step(view: View) -> Step:
    """:func:`decide`'s step and its phase's subgoal, which follow the task's parts: "find the T"
    while searching for an object of type T (the lamp too), "take the O" once an O is here, "heat the
    O with the microwave" (clean, cool: likewise) on the way to the tool and there, "put the O in the
    R" on the way to the target R and there, "use the L" once the lamp L is here."""
    task, held, here = view.task, view.holding(), view.location()
    if held is None:
        return _find(view, task.obj, here)
    if task.task_type == "look_at_obj_in_light":
        lamp = next((a for a in view.admissible if a.startswith(f"use {task.target} ")), None)
        if lamp:
            return Step(
                f"I have the {held}. The {lamp[4:]} is here, so I turn it on.", lamp, f"use the {lamp[4:]}"
            )
        need = f"I have the {held} and need a {task.target}."
        return Step(*_search(view, need, LAMP_PLACES, here), f"find the {task.target}")
    home = _home(view)
    if task.task_type in TREATMENTS and not _treated(view, held, home):
        verb, tool_type = TREATMENTS[task.task_type]
        subgoal = f"{verb} the {held} with the {tool_type}"
        treat = next((a for a in view.admissible if a.startswith(f"{verb} {held} with {tool_type} ")), None)
        if treat:
            return Step(
                f"I have the {held}. I {verb} it with the {treat.split(' with ')[1]} here.", treat, subgoal
            )
        tool = _first(view, tool_type)
        return Step(f"I have the {held}. I {verb} it at the {tool}.", f"go to {tool}", subgoal)
    state = (
        f"The {held} is {PAST_TENSE[TREATMENTS[task.task_type][0]]}"
        if task.task_type in TREATMENTS
        else f"I have the {held}"
    )
    subgoal = f"put the {held} in the {task.target}"
    if not view.at(home):
        return Step(f"{state}. It goes to the {home}.", f"go to {home}", subgoal)
    if f"open {home}" in view.admissible:
        return Step(f"{state}. The {home} is closed, so I open it.", f"open {home}", subgoal)
    puts: dict[str, str] = {}  # receptacle: the first command that puts the held object there
    for action in view.admissible:
        if (match := _PUT.match(action)) and match[1] == held:
            puts.setdefault(match[2], action)
    if home in puts:
        return Step(f"{state}. I am at the {home}, so I put it here.", puts[home], subgoal)
    # The target does not take what is held: an object of another type, taken by a policy whose
    # states DAgger labels (the searcher's own play only takes the task's object).
    if puts:
        return Step(
            f"The {home} does not take the {held}, so I put it down here.", next(iter(puts.values())), subgoal
        )
    place = _next_place(view, set(), here)
    return Step(
        f"The {home} does not take the {held}, so I take it to the {place}.", f"go to {place}", subgoal
    )


def _find(view: View, kind: str, here: str | None) -> Step:
    """Take an object of type ``kind`` that is here, open the closed receptacle here, or go on."""
    need = f"I need a {kind}."
    # A pick-two task never takes back the object it already put at its target.
    skip = _home(view) if view.task.task_type == "pick_two_obj_and_place" else None
    for action in view.admissible:
        if action.startswith(f"take {kind} ") and not action.endswith(f" from {skip}"):
            obj = action[len("take ") :].split(" from ")[0]
            if object_type(obj) == kind:
                return Step(f"{need} The {obj} is here, so I take it.", action, f"take the {obj}")
    kinds = {r for r, held in CAN_HOLD.items() if kind in held}
    # Closed receptacles here (several may share the spot) are opened, in search order.
    closed = sorted((a[len("open ") :] for a in view.admissible if a.startswith("open ")), key=_place_key)
    for place in closed:
        if object_type(place) in kinds:
            return Step(f"{need} The {place} is closed, so I open it.", f"open {place}", f"find the {kind}")
    return Step(*_search(view, need, kinds, here), f"find the {kind}")


def _search(view: View, need: str, kinds: set[str], here: str | None) -> tuple[str, str]:
    """Go to the next receptacle of the given types after ``here`` in search order (cyclically)."""
    place = _next_place(view, kinds, here)
    if here is None:
        return f"{need} I start with the {place}.", f"go to {place}"
    return f"{need} There is none at the {here}. Next I check the {place}.", f"go to {place}"


def _next_place(view: View, kinds: set[str], here: str | None) -> str:
    """The next receptacle of the given types (any, if none is elsewhere) after ``here`` in search
    order, cyclically; the first one if the agent's place is unknown."""
    elsewhere = [p for p in view.places() if not view.at(p)]
    candidates = [p for p in elsewhere if object_type(p) in kinds] or elsewhere
    if here is None:
        return candidates[0]
    later = [p for p in candidates if _place_key(p) > _place_key(here)]
    return (later or candidates)[0]


def _first(view: View, kind: str) -> str:
    """The first receptacle of a type (where the task's object goes, or its tool)."""
    of_kind = [p for p in view.places() if object_type(p) == kind]
    if not of_kind:
        raise ValueError(f"the room has no {kind}; admissible: {list(view.admissible)}")
    return of_kind[0]


def _home(view: View) -> str:
    return _first(view, view.task.target)


def _treated(view: View, held: str, home: str) -> bool:
    """Whether the held object was cleaned/heated/cooled: the window shows it was (after it was last
    picked up), or the agent has reached the target, which it only heads for once it was."""
    for _, observation in view.events():
        if observation.startswith(f"You pick up the {held}"):
            return False
        if observation.startswith(("You clean the", "You heat the", "You cool the")):
            return True
    return view.at(home)


class Searcher:
    """:class:`~hgpo_rllib.warm_start.demonstrations.Demonstrator` over :func:`decide`, seeing the
    last ``history_length`` steps as the prompt does (the task is read from the first observation, as
    the env does)."""

    def __init__(self, history_length: int = 2):
        if history_length < 1:
            raise ValueError(f"the searcher needs at least one step of history, got {history_length}")
        self.history_length = history_length

    def view(self, observations: Sequence[str], commands: Sequence[str], admissible: Sequence[str]) -> View:
        """What the prompt shows of the episode so far."""
        start = max(0, len(commands) - self.history_length)
        window = list(zip(observations[start:-1], commands[start:], strict=True))
        return View(parse_task(task_from_observation(observations[0])), window, observations[-1], admissible)

    def act(
        self, env: Any, observations: Sequence[str], commands: Sequence[str], admissible: Sequence[str]
    ) -> tuple[str, str]:
        return decide(self.view(observations, commands, admissible))

    def subgoal(
        self,
        env: Any,
        observations: Sequence[str],
        commands: Sequence[str],
        admissible: Sequence[str],
        command: str,
    ) -> str:
        """The subgoal of :func:`next_step` in this state (``command`` is its command)."""
        return next_step(self.view(observations, commands, admissible)).subgoal
