"""The 120 ALFRED floor plans, read from the layout files shipped in the alfworld wheel.

``alfworld/gen/layouts/FloorPlan{N}-openable.json`` maps real receptacle ids to the agent pose from
which ALFRED interacts with them; ``-objects.json`` lists the object types present in the scene and
``-layout.npy`` its navigable grid points. A receptacle type listed in ``-objects.json`` but absent
from ``-openable.json`` (e.g. a toaster or a garbage can) gets one instance at a grid point chosen
from the floor plan number, so every scene is fixed and reproducible.

Receptacles that share an interaction pose get distinct locations (the camera pitch is shifted),
unlike the original data (alfworld issue #131, where ``go to`` cannot move between them). To keep
a step within the speed budget, scenes keep at most :data:`MAX_RECEPTACLES` receptacles, dropping
surplus instances of the most frequent types (cabinets, drawers, shelves) first.
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

MAX_RECEPTACLES = 24
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


def _synthetic_id(rtype: str, x: float, z: float) -> str:
    base = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}.get(rtype)
    coords = f"{x:+06.2f}|+00.90|{z:+06.2f}"
    return f"{base}|{coords}|{rtype}" if base else f"{rtype}|{coords}"


def _cap(receptacles: list[Receptacle]) -> list[Receptacle]:
    """Keep at most MAX_RECEPTACLES, taking instances round-robin over types (each type stays)."""
    by_type: dict[str, list[Receptacle]] = defaultdict(list)
    for r in receptacles:
        by_type[r.type].append(r)
    kept: list[Receptacle] = []
    for rank in range(max(len(v) for v in by_type.values())):
        kept += [v[rank] for _, v in sorted(by_type.items()) if rank < len(v)]
    kept_ids = {r.id for r in kept[:MAX_RECEPTACLES]}
    return [r for r in receptacles if r.id in kept_ids]


@cache
def load_floor_plan(number: int) -> FloorPlan:
    """Read floor plan ``number`` (deterministic: no randomness beyond the number itself)."""
    name = f"FloorPlan{number}"
    poses: dict[str, list[float]] = json.loads((_LAYOUTS / f"{name}-openable.json").read_text())
    present = set(json.loads((_LAYOUTS / f"{name}-objects.json").read_text()))
    with (_LAYOUTS / f"{name}-layout.npy").open("rb") as f:
        grid = tuple((float(x), float(z)) for x, z in np.load(f))
    rng = random.Random(name)
    entries = [(rid, _receptacle_type(rid), pose) for rid, pose in sorted(poses.items())]
    known = {rtype for _, rtype, _ in entries}
    for rtype in sorted((present & STATIC_RECEPTACLE_TYPES) - known):
        x, z = rng.choice(grid)
        entries.append((_synthetic_id(rtype, x, z), rtype, [x, z, 90 * rng.randrange(4), 30]))
    used: set[str] = set()
    receptacles = []
    for rid, rtype, (x, z, rotation, horizon) in entries:
        horizon = int(horizon)
        while (loc := pose_location(x, z, rotation, horizon)) in used:
            horizon += 15
        used.add(loc)
        receptacles.append(Receptacle(rid, rtype, loc))
    return FloorPlan(
        number=number,
        room=room_of(number),
        receptacles=tuple(_cap(receptacles)),
        object_types=frozenset(present & PICKUPABLE_TYPES),
        lamp_types=frozenset(present & LAMP_TYPES),
        grid=grid,
    )
