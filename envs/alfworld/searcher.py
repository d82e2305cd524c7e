"""A demonstrator that searches for objects it has not seen, using only what the agent sees.

The planner (``ALFWorldEnv.expert_plan()``) knows where every object is and walks straight to it,
so its demonstrations never show looking for anything. :class:`Searcher` follows the planner only
while the planner's next object (the next ``take O from R`` or ``use O`` of its plan) is one the
agent has already seen in an observation; otherwise it fetches a seen object of the same type, or
searches: it goes to (and opens) the receptacles it has not looked into yet, those that can hold
that type of object first (ALFRED's own object/receptacle table, common-sense knowledge). Its
memory is rebuilt from the episode's observations and executed commands alone, and its thoughts
name only what the task and the observations show.

Only the environment's public API is used (``info["admissible_actions"]``, ``expert_plan()`` and the
observation texts), so it works with either command grammar (``put O in/on R`` or ``move O to R``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import alfworld.gen.constants as alfred

#: Receptacle type -> object types it can hold, lower-cased as the game text writes them.
_CAN_HOLD = {r.lower(): {o.lower() for o in objs} for r, objs in alfred.VAL_RECEPTACLE_OBJECTS.items()}
_SEEN_OBJECT = re.compile(r"\ban? ([a-z]+ \d+)")
_PUT = re.compile(r"^(?:put|move) (.+?) (?:in/on|in|on|to) (.+)$")


def object_type(name: str) -> str:
    """``"apple 2"`` -> ``"apple"``."""
    return name.rsplit(" ", 1)[0]


@dataclass
class Memory:
    """What the agent knows after the steps so far, from observations and its own commands."""

    location: str = ""
    seen: dict[str, str] = field(default_factory=dict)  # object -> receptacle it was last seen in/on
    looked_into: set[str] = field(default_factory=set)  # receptacles whose contents were shown
    closed: set[str] = field(default_factory=set)
    holding: set[str] = field(default_factory=set)
    placed: set[str] = field(default_factory=set)  # objects the agent put somewhere itself

    @classmethod
    def from_history(cls, observations: Sequence[str], commands: Sequence[str]) -> Memory:
        """``observations[j + 1]`` is what ``commands[j]`` produced."""
        memory = cls()
        for command, observation in zip(commands, observations[1:], strict=True):
            memory.update(command, observation)
        return memory

    def update(self, command: str, observation: str) -> None:
        text = observation.lower()
        if command.startswith("go to ") and text.startswith("you arrive"):
            self.location = command[len("go to ") :]
            self._record_contents(text)
        elif command.startswith("open ") and text.startswith("you open"):
            self.closed.discard(command[len("open ") :])
            self._record_contents(text)
        elif command.startswith("take ") and text.startswith("you pick up"):
            taken = command[len("take ") :].split(" from ")[0]
            self.holding.add(taken)
            self.seen.pop(taken, None)
        elif (put := _PUT.match(command)) and text.startswith(("you put", "you move")):
            self.holding.discard(put[1])
            self.placed.add(put[1])
            self.seen[put[1]] = put[2]

    def _record_contents(self, text: str) -> None:
        if f"the {self.location} is closed" in text:
            self.closed.add(self.location)
            return
        self.looked_into.add(self.location)
        if "you see" in text:
            for name in _SEEN_OBJECT.findall(text.split("you see", 1)[1]):
                self.seen[name] = self.location

    def knows(self, obj: str) -> bool:
        return obj in self.seen or obj in self.holding


def _next_object(plan: Sequence[str], holding: bool) -> tuple[str, str] | None:
    """The first object the plan interacts with: (``"take"`` or ``"use"``, object), or None.

    While the agent carries something it cannot take another object, so only ``use`` counts.
    """
    for command in plan:
        if command.startswith("take ") and " from " in command and not holding:
            return "take", command[len("take ") :].split(" from ")[0]
        if command.startswith("use "):
            return "use", command[len("use ") :]
    return None


def _plan_thought(command: str, memory: Memory) -> str:
    """Why the next planned command, in terms of what the agent has seen and carries."""
    carried = ", ".join(sorted(memory.holding))
    if command.startswith("go to "):
        place = command[len("go to ") :]
        wanted = sorted(o for o, r in memory.seen.items() if r == place and o not in memory.placed)
        if carried:
            return f"I carry the {carried}. The next place for it is the {place}, so I go there."
        if wanted:
            return f"I saw the {wanted[0]} at the {place}, so I go there to get it."
        return f"I go to the {place}, the next place my task needs."
    if command.startswith("open "):
        return f"The {command[len('open '):]} is closed, so I open it."
    if command.startswith("take "):
        return _take_thought(command[len("take ") :].split(" from ")[0])
    if put := _PUT.match(command):
        return f"I carry the {put[1]} and I am at the {put[2]}, so I put it here."
    if command.startswith(("clean ", "heat ", "cool ")):
        verb, rest = command.split(" ", 1)
        obj, _, tool = rest.partition(" with ")
        return f"The task needs the {obj} {verb}ed ({verb} it with the {tool}), and I am at the {tool}."
    if command.startswith("use "):
        return f"The {command[len('use '):]} is here; I turn it on to look at what I carry under it."
    return f"The next step of my task is to {command}."


def _take_thought(obj: str) -> str:
    """Restating the wanted type first lets the model decide to take once it has written that type,
    by matching it against the observation (it cannot decide at the thought's first token)."""
    return f"I need a {object_type(obj)}. The {obj} is here, so I take it."


def _where(memory: Memory) -> str:
    return f"at the {memory.location}" if memory.location else "in the middle of the room"


class Searcher:
    """ALFWorld demonstrator: ``act(env, observations, commands, admissible)`` -> (thought, command).

    One instance plays one episode at a time (a new episode starts when ``commands`` is empty). The
    planner is asked again only after the searcher has left its plan (planning is the slow part).
    """

    def __init__(self) -> None:
        self._plan: list[str] | None = None
        self._looking_for: tuple[str, str] | None = None  # (take | use, object type)

    def act(
        self, env: Any, observations: Sequence[str], commands: Sequence[str], admissible: Sequence[str]
    ) -> tuple[str, str]:
        memory = Memory.from_history(observations, commands)
        if not commands:
            self._plan, self._looking_for = None, None
        elif self._plan and commands[-1] == self._plan[0]:
            self._plan.pop(0)
        else:
            self._plan = None
        if self._looking_for is not None:
            verb, kind = self._looking_for
            found = any(object_type(o) == kind for o in memory.holding) if verb == "take" else (
                commands[-1].startswith(f"use {kind}") and observations[-1].lower().startswith("you turn on")
            )
            if not found and (step := self._fetch_or_search(verb, kind, memory, admissible)):
                return step
            self._looking_for = None
        if self._plan is None:
            self._plan = list(env.unwrapped.expert_plan())
        if not self._plan:
            return "The task is done.", "look"
        target = _next_object(self._plan, bool(memory.holding))
        if target is not None and not memory.knows(target[1]):
            self._looking_for = (target[0], object_type(target[1]))
            if step := self._fetch_or_search(*self._looking_for, memory, admissible):
                return step
            self._looking_for = None
        return _plan_thought(self._plan[0], memory), self._plan[0]

    @staticmethod
    def _fetch_or_search(
        verb: str, kind: str, memory: Memory, admissible: Sequence[str]
    ) -> tuple[str, str] | None:
        """Fetch a seen object of type ``kind``, or search for one; None when nowhere is left to look."""
        for obj, place in memory.seen.items():
            if object_type(obj) == kind and obj not in memory.placed:
                return _fetch(verb, obj, place, memory, admissible)
        return _search(kind, memory, admissible)


def _fetch(verb: str, obj: str, place: str, memory: Memory, admissible: Sequence[str]) -> tuple[str, str]:
    """Go back to a seen object of the wanted type, then take (or switch on) that one."""
    if memory.location != place:
        thought = f"I need a {object_type(obj)}. I saw the {obj} at the {place} earlier, so I go back there."
        return thought, f"go to {place}"
    command = f"take {obj} from {place}" if verb == "take" else f"use {obj}"
    if command not in admissible and f"open {place}" in admissible:
        return f"The {place} is closed, so I open it.", f"open {place}"
    if verb == "take":
        return _take_thought(obj), command
    return f"The {obj} is here; I turn it on to look at what I carry under it.", command


def _search(kind: str, memory: Memory, admissible: Sequence[str]) -> tuple[str, str] | None:
    """Open the closed receptacle here, or go to the next one not looked into yet."""
    here = memory.location
    if here in memory.closed and f"open {here}" in admissible:
        return f"I need a {kind}. The {here} is closed, so I open it to look inside.", f"open {here}"
    places = [a[len("go to ") :] for a in admissible if a.startswith("go to ")]
    unexplored = [p for p in places if p not in memory.looked_into and p != here]
    likely = [p for p in unexplored if kind in _CAN_HOLD.get(object_type(p), {kind})]
    for place in likely or unexplored:
        why = "could hold one and " if likely else ""
        return (
            f"I need a {kind} and have not seen one yet. I am {_where(memory)}; the {place} {why}is not "
            "checked yet, so I go there.",
            f"go to {place}",
        )
    return None
