"""The 120 ALFRED floor plans, read from the layout files shipped in the alfworld wheel.

``alfworld/gen/layouts/FloorPlan{N}-openable.json`` maps real receptacle ids to the agent pose from
which ALFRED interacts with them; ``-objects.json`` lists the object types present in the scene and
``-layout.npy`` its navigable grid points. The layout files list only some of a scene's receptacles
(floor plan 10: 3 of its 6 cabinets, none of its 4 stove burners), so the count of each receptacle
type is completed like the real scenes: as the real ALFWorld rooms have it where known
(:mod:`envs.alfworld.real_rooms`, which holds the four held-out floor plans), else drawn from the
counts of that type in the real rooms of the same room type (never below the layout's own count).
An added instance stands at a grid point next to an instance of its type (a new type: anywhere).
Everything is seeded by the floor plan number, so every scene is fixed and reproducible.

Receptacles that share an interaction pose share a location, as in the real games.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import alfworld.gen.constants as alfred
import numpy as np

from envs.alfworld.real_rooms import REAL_RECEPTACLE_COUNTS

STATIC_RECEPTACLE_TYPES = frozenset(alfred.RECEPTACLES) - frozenset(alfred.MOVABLE_RECEPTACLES)
#: Object types that some receptacle can hold (what ALFRED can pick up), without sliced variants.
PICKUPABLE_TYPES = frozenset(
    t for held in alfred.VAL_RECEPTACLE_OBJECTS.values() for t in held if not t.endswith("Sliced")
)
LAMP_TYPES = frozenset(alfred.VAL_ACTION_OBJECTS["Toggleable"])
#: Furniture a lamp may stand on (lamps are not pickupable, so ALFRED's tables do not list them).
LAMP_RECEPTACLE_TYPES = frozenset(
    {"Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand", "CounterTop"}
)
_LAYOUTS = files("alfworld.gen") / "layouts"
_GRID = 0.25  # ALFRED's navigation grid step (metres)
_NEIGHBOURHOOD = 1.0  # metres: how far from an instance of its type an added receptacle stands


@dataclass(frozen=True)
class Receptacle:
    id: str  #: ALFRED object id, e.g. ``Cabinet|+00.68|+00.50|-02.20`` or ``Sink|...|SinkBasin``
    type: str  #: e.g. ``Cabinet``, ``SinkBasin``
    location: str  #: ALFRED pose id ``loc|x|z|rotation|horizon``


@dataclass(frozen=True)
class FloorPlan:
    number: int
    room: str  #: Kitchen, LivingRoom, Bedroom or Bathroom
    receptacles: tuple[Receptacle, ...]
    object_types: frozenset[str]  #: pickupable object types present in the scene
    lamp_types: frozenset[str]
    grid: tuple[tuple[float, float], ...]  #: navigable (x, z) points

    @property
    def receptacle_types(self) -> frozenset[str]:
        return frozenset(r.type for r in self.receptacles)


def pose_location(x: float, z: float, rotation: int, horizon: int) -> str:
    """ALFRED's location id of an agent pose: grid cell, quarter turns, camera pitch."""
    return f"loc|{round(x / _GRID)}|{round(z / _GRID)}|{round(rotation / 90) % 4}|{horizon}"


def room_of(number: int) -> str:
    return next(room for room, numbers in alfred.SCENE_TYPE.items() if number in numbers)


@cache
def floor_plan_numbers() -> tuple[int, ...]:
    names = (p.name for p in _LAYOUTS.iterdir() if p.name.endswith("-openable.json"))
    return tuple(sorted(int(n.removeprefix("FloorPlan").removesuffix("-openable.json")) for n in names))


def _receptacle_type(receptacle_id: str) -> str:
    parts = receptacle_id.split("|")
    return parts[-1] if len(parts) == 5 else parts[0]  # "Sink|x|y|z|SinkBasin" is a SinkBasin


def _synthetic_id(rtype: str, x: float, z: float, index: int) -> str:
    """An ALFRED-style id for an added receptacle (unique through ``index``)."""
    base = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}.get(rtype)
    coords = f"{x:+06.2f}|+{0.90 + 0.01 * index:05.2f}|{z:+06.2f}"
    return f"{base}|{coords}|{rtype}" if base else f"{rtype}|{coords}"


@cache
def real_count_samples(room: str) -> dict[str, tuple[int, ...]]:
    """Per receptacle type, its instance counts in the real rooms of ``room`` type that have it."""
    samples: dict[str, list[int]] = defaultdict(list)
    for number, counts in sorted(REAL_RECEPTACLE_COUNTS.items()):
        if room_of(number) == room:
            for rtype, count in counts.items():
                samples[rtype].append(count)
    return {rtype: tuple(v) for rtype, v in samples.items()}


def _receptacle_counts(number: int, room: str, known: dict[str, int], present: set[str], rng: random.Random):
    """How many receptacles of each type the scene has (see the module doc)."""
    if number in REAL_RECEPTACLE_COUNTS:
        return dict(REAL_RECEPTACLE_COUNTS[number])
    samples = real_count_samples(room)
    return {
        rtype: max(known.get(rtype, 0), rng.choice(samples[rtype]) if rtype in samples else 1)
        for rtype in sorted(present | set(known))
    }


@cache
def load_floor_plan(number: int) -> FloorPlan:
    """Read floor plan ``number`` (deterministic: no randomness beyond the number itself)."""
    name = f"FloorPlan{number}"
    poses: dict[str, list[float]] = json.loads((_LAYOUTS / f"{name}-openable.json").read_text())
    present = set(json.loads((_LAYOUTS / f"{name}-objects.json").read_text()))
    with (_LAYOUTS / f"{name}-layout.npy").open("rb") as f:
        grid = tuple((float(x), float(z)) for x, z in np.load(f))
    rng = random.Random(f"{name}/receptacles")
    room = room_of(number)
    by_type: dict[str, list[tuple[str, list[float]]]] = defaultdict(list)
    for rid, pose in sorted(poses.items()):
        by_type[_receptacle_type(rid)].append((rid, pose))
    known = {rtype: len(v) for rtype, v in by_type.items()}
    counts = _receptacle_counts(number, room, known, present & STATIC_RECEPTACLE_TYPES, rng)
    receptacles = []
    for rtype, count in sorted(counts.items()):
        instances = by_type.get(rtype, [])[:count]
        for index in range(len(instances), count):
            if instances:
                ax, az, rotation, _ = rng.choice(instances)[1]
                near = [(x, z) for x, z in grid if max(abs(x - ax), abs(z - az)) <= _NEIGHBOURHOOD]
                x, z = rng.choice(near or grid)
            else:
                (x, z), rotation = rng.choice(grid), 90 * rng.randrange(4)
            instances.append((_synthetic_id(rtype, x, z, index), [x, z, rotation, 30]))
        for rid, (x, z, rotation, horizon) in instances:
            receptacles.append(Receptacle(rid, rtype, pose_location(x, z, rotation, int(horizon))))
    return FloorPlan(
        number=number,
        room=room,
        receptacles=tuple(receptacles),
        object_types=frozenset(present & PICKUPABLE_TYPES),
        lamp_types=frozenset(present & LAMP_TYPES),
        grid=grid,
    )
