"""KeyChest: a CPU-scale memory probe where equal observations hide different situations.

Why it exists: HGPO groups steps by their raw observation (docs/hgpo_algorithm.md §4.2). Its paper calls
the flaw of GiGPO's current-state groups "context inconsistency": two steps can share the current
observation while their histories, and so their best actions, differ. KeyChest makes that
unavoidable, yet stays small enough for a tiny random-init model to learn on CPU.

Rules:

* ``num_rooms`` rooms (default 5, names drawn from :data:`ROOM_NAMES`) form a random tree whose
  links are compass directions. The key lies in one room and a trapped chest in another.
* The agent starts in the chest room or behind it, and the key lies on the far side of the chest
  room. So every solution passes the chest room first without the key and later with it. The
  optimal solution (:meth:`KeyChestEnv.expert_plan`) takes 4 to 6 steps (:data:`MAX_OPTIMAL_STEPS`).
* A room's text depends only on the room and on whether the key still lies there. Carrying the key
  shows nowhere: there is no inventory command, and taking the key only removes "You see a key." from
  the key room. The chest room, and every room between it and the key, read the same on the way out
  and on the way back. Only the history tells the two apart.
* In the chest room the best action differs: with the key, "open chest" wins (reward 10, like
  ALFWorld's 10/0). Without it, the trap ends the episode as a loss, so a policy cannot probe the
  chest for free instead of remembering.
* Any other command (unknown, not admissible, garbage) leaves the state unchanged and the
  observation is "Nothing happens.", as in ALFWorld. Invalid outputs are treated the same way by
  :class:`~envs.common.text_env.TextEnv`. The admissible actions still list the room's exits.

Difficulty (20k episodes, ``max_steps=10``): a uniform random admissible policy wins 7.4% of the
episodes with the default 5 rooms (2 rooms: 30%, 3: 17%, 4: 10.4%, 6: 5.8%, 8: 4.4%); optimal
solutions take 4, 5 or 6 steps in 31%, 28% and 42% of the default layouts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from envs.common.actions import THINK_ACTION, plan_execute_blocks
from envs.common.text_env import Observation, TextEnv
from envs.keychest.facts import KEYCHEST_FACTS

ROOM_NAMES = ("hall", "kitchen", "cellar", "attic", "study", "garden", "library", "pantry")
DIRECTIONS = ("north", "south", "east", "west")
_OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}

TASK = "Take the key, then open the chest. Opening it without the key springs a trap."
TASK_TYPE = "keychest"
TAKE_KEY = "take key"
OPEN_CHEST = "open chest"
COMMANDS = (*(f"go {d}" for d in DIRECTIONS), TAKE_KEY, OPEN_CHEST)
NOTHING_HAPPENS = "Nothing happens."
WIN_TEXT = "You open the chest. You win."
TRAP_TEXT = "The chest is locked. A trap springs. You lose."
WIN_REWARD = 10.0
MAX_OPTIMAL_STEPS = 6

_WIN = Observation(WIN_TEXT, [], reward=WIN_REWARD, terminated=True, won=True)
_TRAP = Observation(TRAP_TEXT, [], terminated=True)


def describe_room(name: str, exits: Iterable[str], item: str | None) -> str:
    """The observation of a room: its name, its exits and the item lying there (if any)."""
    text = f"You are in the {name}. Exits: {', '.join(exits)}."
    return f"{text} You see a {item}." if item else text


def all_observation_texts() -> list[str]:
    """Every observation KeyChest can produce, for tokenizer corpora."""
    rooms = [
        describe_room(name, exits, item)
        for name in ROOM_NAMES
        for size in range(1, len(DIRECTIONS) + 1)
        for exits in combinations(DIRECTIONS, size)
        for item in (None, "key", "chest")
    ]
    return [*rooms, NOTHING_HAPPENS, WIN_TEXT, TRAP_TEXT]


@dataclass(frozen=True)
class Layout:
    """One episode's map: room names, exits (direction -> room, in :data:`DIRECTIONS` order)."""

    names: tuple[str, ...]
    exits: tuple[dict[str, int], ...]
    start: int
    chest: int
    key: int


def _distances(exits: list[dict[str, int]]) -> list[list[int]]:
    """All-pairs path lengths in the room tree (BFS from every room; at most 8 rooms)."""
    dist = []
    for source in range(len(exits)):
        row = [-1] * len(exits)
        row[source] = 0
        queue = deque([source])
        while queue:
            room = queue.popleft()
            for other in exits[room].values():
                if row[other] < 0:
                    row[other] = row[room] + 1
                    queue.append(other)
        dist.append(row)
    return dist


def sample_layout(rng: np.random.Generator, num_rooms: int) -> Layout:
    """Draw a random room tree, then a (start, chest, key) placement whose solution needs memory.

    The placement puts the chest room on the path from the start to the key, so the agent meets the
    chest without the key first, and keeps the optimal length within :data:`MAX_OPTIMAL_STEPS`.
    """
    names = tuple(str(name) for name in rng.permutation(ROOM_NAMES)[:num_rooms])
    exits: list[dict[str, int]] = [{} for _ in range(num_rooms)]
    for new in range(1, num_rooms):
        free = [(room, d) for room in range(new) for d in DIRECTIONS if d not in exits[room]]
        room, direction = free[int(rng.integers(len(free)))]
        exits[room][direction] = new
        exits[new][_OPPOSITE[direction]] = room
    dist = _distances(exits)
    placements = [
        (start, chest, key)
        for chest in range(num_rooms)
        for key in range(num_rooms)
        if key != chest
        for start in range(num_rooms)
        if start != key
        and dist[start][key] == dist[start][chest] + dist[chest][key]
        and dist[start][chest] + 2 * dist[chest][key] + 2 <= MAX_OPTIMAL_STEPS
    ]
    start, chest, key = placements[int(rng.integers(len(placements)))]
    ordered = tuple({d: room_exits[d] for d in DIRECTIONS if d in room_exits} for room_exits in exits)
    return Layout(names, ordered, start, chest, key)


class KeyChestEnv(TextEnv):
    """Gymnasium env ``hgpo/KeyChest-v0``: fetch the key, come back, open the chest (see module doc).

    The state is (room, has key); every transition is precomputed at reset, so a step is a dict
    lookup (the CPU learning benchmark needs >= 20k steps/s). Bare commands such as "take key" are
    valid by default so a tiny model can answer; ``require_tags=True`` applies the reference's
    ``<think>``/``<action>`` rule, ``answer_format="plan_execute"`` HiPER's three-tag one.
    ``num_layouts`` draws maps from a fixed pool of that many (layout i
    of the pool is always the same map, as a game set fixes its games); None draws a fresh map per seed.
    """

    default_require_tags = False
    FACTS = KEYCHEST_FACTS

    def __init__(
        self,
        *,
        num_rooms: int = 5,
        num_layouts: int | None = None,
        max_steps: int = 10,
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
        self.check_settings(max_steps=max_steps, num_rooms=num_rooms, num_layouts=num_layouts)
        self.num_rooms = num_rooms
        self.num_layouts = num_layouts
        self.layout: Layout | None = None
        self._state = 0  # room * 2 + has_key
        self._rooms: list[Observation] = []  # per state
        self._nothing: list[Observation] = []  # per state: "Nothing happens." with its actions
        self._transitions: list[dict[str, tuple[int, Observation]]] = []  # per state

    @classmethod
    def check_settings(cls, *, num_rooms: int = 5, num_layouts: int | None = None, **common: Any) -> None:
        super().check_settings(**common)
        if (
            not isinstance(num_rooms, int)
            or isinstance(num_rooms, bool)
            or not (2 <= num_rooms <= len(ROOM_NAMES))
        ):
            raise ValueError(f"num_rooms must be an int in [2, {len(ROOM_NAMES)}], got {num_rooms!r}")
        if num_layouts is not None and (
            not isinstance(num_layouts, int) or isinstance(num_layouts, bool) or num_layouts < 1
        ):
            raise ValueError(f"num_layouts must be None or an int >= 1, got {num_layouts!r}")

    def _start_episode(self, seed: int | None, options: dict[str, Any]) -> tuple[Observation, str, str]:
        if options:
            raise ValueError(f"KeyChest takes no reset options, got {sorted(options)}")
        rng = self.np_random
        if self.num_layouts is not None:  # a fixed pool of maps, like a game set: layout i of the pool
            rng = np.random.default_rng(int(self.np_random.integers(self.num_layouts)))
        self.layout = sample_layout(rng, self.num_rooms)
        self._compile(self.layout)
        self._state = 2 * self.layout.start
        return self._rooms[self._state], TASK, TASK_TYPE

    def _compile(self, layout: Layout) -> None:
        """Precompute each state's observation and its command -> (next state, observation) table."""
        rooms: list[Observation] = []
        for state in range(2 * len(layout.names)):
            room, has_key = divmod(state, 2)
            key_here = room == layout.key and not has_key
            item = "key" if key_here else "chest" if room == layout.chest else None
            admissible = [f"go {d}" for d in layout.exits[room]]
            if key_here:
                admissible.append(TAKE_KEY)
            if room == layout.chest:
                admissible.append(OPEN_CHEST)
            rooms.append(Observation(describe_room(layout.names[room], layout.exits[room], item), admissible))
        self._rooms = rooms
        self._nothing = [Observation(NOTHING_HAPPENS, obs.admissible_actions) for obs in rooms]
        self._transitions = []
        for state, obs in enumerate(rooms):
            room, has_key = divmod(state, 2)
            table = {
                f"go {d}": (2 * other + has_key, rooms[2 * other + has_key])
                for d, other in layout.exits[room].items()
            }
            if TAKE_KEY in obs.admissible_actions:
                table[TAKE_KEY] = (state + 1, rooms[state + 1])
            if room == layout.chest:
                table[OPEN_CHEST] = (state, _WIN if has_key else _TRAP)
            self._transitions.append(table)

    def _execute(self, command: str) -> Observation:
        move = self._transitions[self._state].get(command)
        if move is None:
            return self._nothing[self._state]
        self._state, obs = move
        return obs

    def _observation_unchanged(self) -> str:
        return NOTHING_HAPPENS

    def expert_plan(self) -> list[str]:
        """The shortest command list that wins from the current state (BFS); [] once the episode ended."""
        if self._current is None or self._current.terminated:
            return []
        parents: dict[int, tuple[int, str] | None] = {self._state: None}
        queue = deque([self._state])
        while queue:
            state = queue.popleft()
            for command, (nxt, obs) in self._transitions[state].items():
                if obs.won:
                    plan = [command]
                    while parents[state] is not None:
                        state, step = parents[state]
                        plan.append(step)
                    return plan[::-1]
                if not obs.terminated and nxt not in parents:
                    parents[nxt] = (state, command)
                    queue.append(nxt)
        raise AssertionError("every KeyChest layout is solvable")


#: The expert's two phases as plan-execute subgoals (HiPER, docs/hiper.md): fetch the key, then go
#: back and open the chest.
KEY_SUBGOAL = "take the key"
CHEST_SUBGOAL = "open the chest"
#: The whole-block vocabulary of a one-token-per-block plan-execute policy (tuned_examples/
#: hiper_keychest.py): both switch blocks, these two subgoals, one action block per command.
PLAN_EXECUTE_BLOCKS = tuple(plan_execute_blocks([KEY_SUBGOAL, CHEST_SUBGOAL], COMMANDS))


def expert_subgoal(env: KeyChestEnv, command: str) -> str:
    """The subgoal of the expert's phase in ``env``'s current state: its plan from here still takes
    the key, or it has the key and heads for the chest. (``command``, the expert's next one, is part
    of the plan already.) The subgoal a prompt then shows says whether the key is carried, which the
    observations hide: exactly what a plan-execute policy's memory is for."""
    return KEY_SUBGOAL if TAKE_KEY in env.expert_plan() else CHEST_SUBGOAL
