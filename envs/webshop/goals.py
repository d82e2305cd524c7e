"""WebShop's synthetic goals (``get_synthetic_goals``, ``human_goals=False``), their weights and sampling.

Each catalog product with an instruction yields one goal per combination of its option values (option
names sorted). The original draws each product's price cap with the module-level ``random`` and never
seeds it, so its goal texts change between runs. Here the caller passes the generator: the catalog
loader uses ``random.Random(42)`` right after drawing range prices with it, the same draw order as
seeding ``random`` with 42 before the original loads the products. Goals are then shuffled with
``random.Random(233)``, as the original shuffles after ``random.seed(233)``.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))
NO_PRICE_LIMIT = 1_000_000  # the price cap of goals whose product costs too much for PRICE_RANGE
GOAL_SHUFFLE_SEED = 233

GOAL_KEYS = (
    "asin",
    "category",
    "query",
    "name",
    "product_category",
    "instruction_text",
    "attributes",
    "price_upper",
    "goal_options",
    "weight",
)


def synthetic_goals(
    products: Sequence[Mapping[str, Any]], prices: Mapping[str, float], rng: random.Random
) -> list[dict[str, Any]]:
    """All synthetic goals in the original's order (shuffled with seed 233), weights included."""
    goals: list[dict[str, Any]] = []
    attribute_counts: Counter[str] = Counter()
    for product in products:
        instruction = product.get("instruction_text")
        if instruction is None:
            continue
        attributes = list(product["instruction_attributes"])
        if not attributes:
            raise ValueError(f"product {product['asin']} has an instruction but no instruction_attributes")
        price_range = [p for p in PRICE_RANGE if p > prices[product["asin"]]][:4]
        if len(price_range) >= 2:
            _, price_upper = sorted(rng.sample(price_range, 2))
            price_text = f", and price lower than {price_upper:.2f} dollars"
        else:
            price_upper, price_text = NO_PRICE_LIMIT, ""
        names = sorted(product["options"])
        for values in itertools.product(*(product["options"][name] for name in names)):
            goal_options = dict(zip(names, values, strict=True))
            option_text = ", and ".join(f"{name}: {value}" for name, value in goal_options.items())
            with_options = f" with {option_text}" if option_text else ""
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["Title"],
                    "product_category": product["product_category"],
                    "instruction_text": f"{instruction}{with_options}{price_text}",
                    "attributes": attributes,
                    "price_upper": price_upper,
                    "goal_options": goal_options,
                }
            )
            attribute_counts.update(attributes)
    for goal in goals:
        goal["weight"] = sum(1.0 / attribute_counts[a] for a in goal["attributes"]) / len(goal["attributes"])
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return goals


def cumulative_weights(goals: Sequence[Mapping[str, Any]]) -> list[float]:
    """``[0, w0, w0 + w1, ...]``, the table :func:`sample_goal_index` draws from."""
    return list(itertools.accumulate((goal["weight"] for goal in goals), initial=0.0))


def sample_goal_index(cum_weights: Sequence[float], rng: random.Random) -> int:
    """A goal index drawn as the original's ``random_idx`` draws it.

    The original bisects ``[0, cumsum...]`` and uses the position as the goal index, so goal ``i`` is
    drawn with the weight of goal ``i - 1`` (goal 0 never; the last goal also gets the rounding
    leftover). Kept as is: published success rates were measured on this distribution.
    """
    position = rng.uniform(0, cum_weights[-1])
    return min(bisect.bisect(cum_weights, position), len(cum_weights) - 2)


def _text(goal: Mapping[str, Any], key: str) -> str:
    value = goal[key]
    if not isinstance(value, str):
        raise TypeError(f"goal[{key!r}] must be a str, got {type(value).__name__}")
    return value


def complete_goal(goal: Mapping[str, Any], products: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Validate a user's goal dict and fill what its product implies; clear errors otherwise.

    Required: ``instruction_text``. With an ``asin`` of the catalog, ``category``, ``query``, ``name``,
    ``product_category`` and ``attributes`` default to that product's (``attributes`` to its
    instruction attributes); without one they are required. ``goal_options`` ({name: value}) defaults
    to none and ``price_upper`` to no limit.
    """
    if not isinstance(goal, Mapping):
        raise TypeError(f"goal must be a dict, got {type(goal).__name__}")
    unknown = sorted(set(goal) - set(GOAL_KEYS))
    if unknown:
        raise ValueError(f"unknown goal keys {unknown}; allowed: {list(GOAL_KEYS)}")
    filled: dict[str, Any] = {"goal_options": {}, "price_upper": NO_PRICE_LIMIT, "weight": 1.0}
    if goal.get("asin") is not None:
        asin = _text(goal, "asin")
        if asin not in products:
            raise ValueError(f"goal asin {asin!r} is not in the catalog")
        product = products[asin]
        filled.update(
            asin=asin,
            category=product["category"],
            query=product["query"],
            name=product["Title"],
            product_category=product["product_category"],
        )
        if product.get("instruction_attributes"):
            filled["attributes"] = list(product["instruction_attributes"])
    filled.update(goal)
    missing = [
        key
        for key in ("instruction_text", "query", "name", "product_category", "attributes")
        if key not in filled
    ]
    if missing:
        raise ValueError(f"goal lacks {missing} (give them, or the asin of a catalog product)")
    for key in ("instruction_text", "query", "name", "product_category"):
        _text(filled, key)
    if not filled["instruction_text"].strip():
        raise ValueError("goal['instruction_text'] is empty")
    filled["category"] = str(filled.get("category", ""))
    attributes = filled["attributes"]
    if isinstance(attributes, str) or not attributes or not all(isinstance(a, str) for a in attributes):
        raise ValueError(f"goal['attributes'] must be a non-empty list of str, got {attributes!r}")
    filled["attributes"] = list(attributes)
    options = filled["goal_options"]
    if not isinstance(options, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in options.items()
    ):
        raise ValueError(f"goal['goal_options'] must be a dict of str to str, got {options!r}")
    filled["goal_options"] = dict(options)
    price_upper = filled["price_upper"]
    if isinstance(price_upper, bool) or not isinstance(price_upper, int | float) or not price_upper > 0:
        raise ValueError(f"goal['price_upper'] must be a positive number, got {price_upper!r}")
    return {key: filled[key] for key in GOAL_KEYS if key in filled}
