"""WebShop goals, data loading and the purchase score against the original's outputs."""

from __future__ import annotations

import json
import random

import pytest
from helpers import webshop_golden

from envs.webshop import reward
from envs.webshop.data import CATALOG_DIR, DATA_DIR_ENV, data_file, load_shop, normalize_product, read_json
from envs.webshop.goals import NO_PRICE_LIMIT, complete_goal, sample_goal_index

DATA_DIR = CATALOG_DIR


@pytest.fixture(scope="module")
def golden_goals() -> dict:
    return webshop_golden("goals")


@pytest.fixture(scope="module")
def golden_rewards() -> dict:
    return webshop_golden("rewards")


@pytest.fixture(scope="module")
def catalog() -> dict[str, dict]:
    return {p["asin"]: p for p in read_json(data_file(DATA_DIR, "items_shuffle_1000.json"))}


# ---------------------------------------------------------------------------------------------- goals


def test_goal_list_is_the_originals(shop, golden_goals) -> None:
    rows = [
        [g["asin"], g["goal_options"], g["price_upper"], g["weight"], g["instruction_text"]]
        for g in shop.goals
    ]
    assert len(rows) == golden_goals["num_goals"] == 6910
    assert rows == golden_goals["all_goals"]
    assert [{"index": i, **g} for i, g in enumerate(shop.goals[:50])] == golden_goals["first_50_goals"]
    assert shop.cum_weights[-1] == pytest.approx(golden_goals["weighting"]["sum_of_weights"], abs=1e-9)


def test_range_prices_are_the_seeded_draws(shop, golden_goals) -> None:
    drawn = golden_goals["product_prices_of_range_priced_products"]
    assert {asin: shop.prices[asin] for asin in drawn} == drawn
    assert sum(len(p["pricing"]) == 2 for p in shop.products) == len(drawn)


def test_goal_sampling_reproduces_the_original_random_idx(shop, golden_goals) -> None:
    rng = random.Random(0)
    drawn = [sample_goal_index(shop.cum_weights, rng) for _ in range(100)]
    assert drawn == golden_goals["weighting"]["random_idx_first_100_after_random_seed_0"]


def test_complete_goal_fills_from_the_product_and_rejects_bad_goals(shop) -> None:
    goal = shop.goals[0]
    filled = complete_goal({"asin": goal["asin"], "instruction_text": "Buy it"}, shop.by_asin)
    assert filled["attributes"] == goal["attributes"] and filled["name"] == goal["name"]
    assert filled["price_upper"] == NO_PRICE_LIMIT and filled["goal_options"] == {}
    assert complete_goal(goal, shop.by_asin) == goal
    bad = [
        ({"instruction_text": "x"}, "lacks"),
        ({**goal, "colour": "red"}, "unknown goal keys"),
        ({**goal, "asin": "NOPE"}, "not in the catalog"),
        ({**goal, "attributes": []}, "non-empty list"),
        ({**goal, "goal_options": {"size": 3}}, "dict of str to str"),
        ({**goal, "price_upper": 0}, "positive number"),
        ({**goal, "instruction_text": "  "}, "empty"),
    ]
    for broken, message in bad:
        with pytest.raises(ValueError, match=message):
            complete_goal(broken, shop.by_asin)
    with pytest.raises(TypeError, match="must be a dict"):
        complete_goal(["not", "a", "dict"], shop.by_asin)


def test_missing_data_names_the_variable_and_the_path(monkeypatch, tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="items_shuffle_1000.json"):
        load_shop(tmp_path)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=f"nowhere.*{DATA_DIR_ENV}"):
        load_shop()


def test_the_shipped_catalog_is_the_default_and_a_users_folder_wins(monkeypatch, tmp_path, shop) -> None:
    """No data path: the packaged 1,000-product catalog. A folder of plain JSON files (the user's own
    copy, here three of the shipped products) replaces it, by argument or by the variable."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert load_shop() is shop
    catalog = read_json(data_file(DATA_DIR, "items_shuffle_1000.json"))[:3]
    attributes = read_json(data_file(DATA_DIR, "items_ins_v2_1000.json"))
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(catalog))
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(attributes))
    own = load_shop(tmp_path)
    assert [p["asin"] for p in own.products] == [r["asin"] for r in catalog]
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert load_shop() is own


def test_raw_records_load_like_the_processed_ones(shop, catalog) -> None:
    """A record as WebShop downloads it (price string, no derived fields) gives the same product."""
    attributes = read_json(data_file(DATA_DIR, "items_ins_v2_1000.json"))
    derived = {
        "Title",
        "Description",
        "BulletPoints",
        "Price",
        "options",
        "option_to_image",
        "Attributes",
        "MainImage",
        "Reviews",
        "Rating",
    }
    for product in shop.products[::25]:
        raw = {k: v for k, v in catalog[product["asin"]].items() if k not in derived}
        raw["pricing"] = "".join(f"${p:,}" for p in raw["pricing"])
        assert normalize_product(raw, attributes) == product


# --------------------------------------------------------------------------------------------- reward


def test_every_reward_case_equals_the_originals(golden_rewards, catalog) -> None:
    for case in golden_rewards["cases"]:
        product = catalog[case["purchased_asin"]]
        score, info = reward.get_reward(product, case["goal"], case["price"], case["options"], verbose=True)
        assert score == pytest.approx(case["reward"], abs=1e-6), case["id"]
        assert info.keys() == case["info"].keys(), case["id"]
        for key, value in case["info"].items():
            assert type(info[key]) is type(value), (case["id"], key)
            assert info[key] == pytest.approx(value, abs=1e-6), (case["id"], key)
        assert reward.get_reward(product, case["goal"], case["price"], case["options"]) == score


def test_reward_parts_equal_the_originals(golden_rewards, catalog) -> None:
    for value, normalized in golden_rewards["normalize_color_by_option_value"].items():
        assert reward.normalize_color(value) == normalized
    for case in golden_rewards["get_option_reward_unit_cases"]:
        values, goal_options = case["purchased_option_values"], case["goal_options"]
        assert reward.get_option_reward(values, goal_options.items()) == (
            case["r_option_goal_items"],
            case["num_matches_goal_items"],
        )
        assert reward.get_option_reward(values, list(goal_options.values())) == (
            case["r_option_goal_values"],
            case["num_matches_goal_values"],
        )
    nouns = golden_rewards["title_noun_tokens_by_asin"]
    for asin in sorted(nouns)[::10]:  # 100 names: spaCy takes a few ms each
        assert list(reward.noun_tokens(catalog[asin]["name"])) == nouns[asin], asin
