"""Receptacles of real ALFWorld rooms: the count of each receptacle type in some ALFRED floor plans.

Read off the first observation of real ALFWorld games ("You are in the middle of a room. Looking
quickly around you, you see a cabinet 6, ..., and a toaster 1."), which lists every receptacle of
the scene; the floor plan is the number that ends the game's task folder (``...-Microwave-10/``).
Source: published trajectories of the json_2.1.1 games (valid_seen, valid_unseen and train games)
found in public repositories; one game per floor plan suffices, as every game of a floor plan lists
the same receptacles. The four valid_unseen floor plans (10, 219, 308, 424) are all here.

The scene builder (:mod:`envs.alfworld.scenes`) uses these counts as they are for these floor plans
and draws the counts of the others from them, per room type.
"""

from __future__ import annotations

REAL_RECEPTACLE_COUNTS: dict[int, dict[str, int]] = {
    # kitchens
    10: {
        "Cabinet": 6,
        "CoffeeMachine": 1,
        "CounterTop": 3,
        "Drawer": 3,
        "Fridge": 1,
        "GarbageCan": 1,
        "Microwave": 1,
        "Shelf": 3,
        "SinkBasin": 1,
        "StoveBurner": 4,
        "Toaster": 1,
    },
    11: {
        "Cabinet": 10,
        "CoffeeMachine": 1,
        "CounterTop": 3,
        "DiningTable": 1,
        "Drawer": 6,
        "Fridge": 1,
        "GarbageCan": 1,
        "Microwave": 1,
        "SinkBasin": 1,
        "StoveBurner": 4,
        "Toaster": 1,
    },
    14: {
        "Cabinet": 8,
        "CoffeeMachine": 1,
        "CounterTop": 2,
        "Fridge": 1,
        "GarbageCan": 1,
        "Microwave": 1,
        "SinkBasin": 1,
        "StoveBurner": 4,
        "Toaster": 1,
    },
    21: {
        "Cabinet": 4,
        "CoffeeMachine": 1,
        "CounterTop": 1,
        "DiningTable": 3,
        "Drawer": 1,
        "Fridge": 1,
        "GarbageCan": 1,
        "Microwave": 1,
        "SideTable": 1,
        "SinkBasin": 1,
        "StoveBurner": 4,
        "Toaster": 1,
    },
    # living rooms
    203: {
        "ArmChair": 1,
        "CoffeeTable": 1,
        "DiningTable": 1,
        "Drawer": 7,
        "GarbageCan": 1,
        "Ottoman": 1,
        "SideTable": 1,
        "Sofa": 1,
    },
    213: {
        "ArmChair": 2,
        "CoffeeTable": 1,
        "DiningTable": 1,
        "Drawer": 12,
        "Dresser": 1,
        "GarbageCan": 1,
        "SideTable": 3,
        "Sofa": 1,
    },
    219: {
        "ArmChair": 1,
        "Cabinet": 4,
        "Drawer": 5,
        "Dresser": 1,
        "GarbageCan": 1,
        "Safe": 1,
        "Shelf": 12,
        "SideTable": 1,
        "Sofa": 1,
    },
    222: {
        "ArmChair": 1,
        "CoffeeTable": 1,
        "Drawer": 7,
        "GarbageCan": 1,
        "SideTable": 3,
        "Sofa": 2,
        "TVStand": 1,
    },
    224: {
        "ArmChair": 1,
        "Cabinet": 1,
        "Drawer": 21,
        "Dresser": 1,
        "GarbageCan": 1,
        "SideTable": 5,
        "Sofa": 1,
    },
    # bedrooms
    308: {"Bed": 1, "Desk": 2, "Drawer": 6, "GarbageCan": 1, "LaundryHamper": 1, "Safe": 1, "Shelf": 6},
    316: {"Bed": 1, "Desk": 1, "Drawer": 2, "GarbageCan": 1, "Shelf": 1, "SideTable": 1},
    321: {"ArmChair": 1, "Bed": 1, "DiningTable": 1, "Drawer": 2, "GarbageCan": 1, "SideTable": 2},
    # bathrooms
    413: {
        "BathtubBasin": 1,
        "Cabinet": 4,
        "CounterTop": 1,
        "Drawer": 4,
        "Dresser": 1,
        "GarbageCan": 1,
        "HandTowelHolder": 1,
        "SinkBasin": 2,
        "Toilet": 1,
        "ToiletPaperHanger": 1,
        "TowelHolder": 1,
    },
    424: {
        "Cabinet": 4,
        "CounterTop": 1,
        "GarbageCan": 1,
        "HandTowelHolder": 2,
        "SinkBasin": 2,
        "Toilet": 1,
        "ToiletPaperHanger": 1,
        "TowelHolder": 1,
    },
}
