"""The WebShop env: the original's episodes replayed, the text-env contract, quirks, expert, prompts."""

from __future__ import annotations

import random
import re

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from helpers import webshop_golden
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envs
from envs.common.prompts import PromptContext
from envs.webshop.data import CATALOG_DIR, DATA_DIR_ENV, load_shop
from envs.webshop.engine import WebShopSession
from envs.webshop.env import WebShopEnv
from envs.webshop.expert import play_episode, tagged
from envs.webshop.prompts import (
    WEBSHOP_TEMPLATE_NO_HIS,
    format_observation,
    render_prompt,
    tokenizer_corpus,
)

DATA_DIR = CATALOG_DIR


@pytest.fixture(scope="module")
def episodes() -> list[dict]:
    return webshop_golden("episodes")["episodes"]


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    return WebShopEnv(data_dir=DATA_DIR)


def _until_results(env: WebShopEnv, goal_index: int = 0) -> dict:
    """Reset to a goal and search its instruction; returns the results page's info."""
    env.reset(options={"goal_index": goal_index})
    return env.step(tagged(f"search[{env.current_goal['instruction_text']}]"))[4]


def _first_product(info: dict) -> str:
    return info["available_actions"]["clickables"][2]  # after "back to search" and "next >"


def _goal_on_first_page(env: WebShopEnv) -> dict:
    """Reset to the first goal with options whose product is on page 1 of its instruction's results."""
    for index, goal in enumerate(env.goals):
        clickables = _until_results(env, index)["available_actions"]["clickables"]
        if goal["goal_options"] and goal["asin"].lower() in clickables:
            return goal
    raise AssertionError("no goal product found on a first results page")


# ------------------------------------------------------------------------------ the original's episodes


def test_episodes_replay_exactly_in_the_engine(episodes) -> None:
    """Raw action strings, as the original's step takes them: every page, clickable and score."""
    shop = load_shop(DATA_DIR)
    for episode in episodes:
        goal = shop.goals[episode["goal_index"]]
        assert goal == episode["goal"]
        session = WebShopSession(shop, goal, str(episode["session"]), random.Random(0))
        assert session.observation == episode["reset_observation"]
        assert session.available_actions == episode["reset_available_actions"]
        for step in episode["steps"]:
            outcome = session.step(step["action"])
            where = (episode["title"], step["action"])
            assert session.observation == step["observation"], where
            assert session.available_actions == step["available_actions"], where
            assert (outcome.score, outcome.done) == (pytest.approx(step["reward"]), step["done"]), where
            if "verbose_info" in step:
                assert outcome.reward_info == step["verbose_info"], where


def test_episodes_through_the_env(episodes) -> None:
    """Tagged outputs through ``step``. The one difference: the shared parser lower-cases commands, so
    an upper-case ``SEARCH[...]`` runs here (the original ignores it); its page is then the one the
    next, lower-case search of that episode shows."""
    env = WebShopEnv(data_dir=DATA_DIR, max_steps=20)  # one episode takes 17 steps
    for episode in episodes:
        obs, info = env.reset(options={"goal_index": episode["goal_index"]})
        assert obs == episode["reset_observation"] and info["task"] == episode["instruction_text"]
        expected = [step["observation"] for step in episode["steps"]]
        for i, step in enumerate(episode["steps"]):
            if re.match(r"[A-Z]+\[", step["action"]):
                expected[i] = expected[i + 1]
        for step, want in zip(episode["steps"], expected, strict=True):
            obs, reward, terminated, truncated, info = env.step(tagged(step["action"]))
            assert obs == want, (episode["title"], step["action"])
            assert not truncated and terminated == step["done"]
        won = episode["final_reward"] == 1.0
        assert (reward, info["won"], info["score"]) == (10.0 if won else 0.0, won, episode["final_reward"])
        assert info["reward_info"] == episode["steps"][-1]["verbose_info"]


def test_scripted_buyer_wins_most_of_the_first_200_goals(env) -> None:
    scores = [play_episode(env, options={"goal_index": i}).infos[-1]["score"] for i in range(200)]
    assert sum(score == 1.0 for score in scores) >= 190  # measured: 194


# ------------------------------------------------------------------------------------- env contract


def test_reset_with_a_seed_is_deterministic(env) -> None:
    first = [env.reset(seed=7)] + [env.reset() for _ in range(3)]
    again = [env.reset(seed=7)] + [env.reset() for _ in range(3)]
    other = WebShopEnv(data_dir=DATA_DIR)
    third = [other.reset(seed=7)] + [other.reset() for _ in range(3)]
    assert first == again == third
    assert len({info["goal_index"] for _, info in first}) > 1


def test_seeded_resets_draw_goals_by_the_original_weights() -> None:
    env = WebShopEnv(data_dir=DATA_DIR, split="all", goal_sampling="weighted")
    golden = webshop_golden("goals")["weighting"]
    drawn = [env.reset(seed=0)[1]["goal_index"]] + [env.reset()[1]["goal_index"] for _ in range(99)]
    assert drawn == golden["random_idx_first_100_after_random_seed_0"]


@pytest.mark.parametrize("sampling", ["uniform", "weighted"])
def test_test_and_train_splits_are_verl_agents(sampling: str) -> None:
    test = gym.make("hgpo/WebShop-v0", split="test", goal_sampling=sampling, data_dir=DATA_DIR)
    train = gym.make("hgpo/WebShop-v0", goal_sampling=sampling, data_dir=DATA_DIR)  # default: train
    assert train.unwrapped.split == "train"
    drawn_test = [test.reset(seed=s)[1]["goal_index"] for s in range(1500)]
    drawn_train = [train.reset(seed=s)[1]["goal_index"] for s in range(1500)]
    assert 0 <= min(drawn_test) and max(drawn_test) < 500 <= min(drawn_train) and max(drawn_train) < 6910
    spread = 0.8 if sampling == "uniform" else 0.3  # distinct goals among 1,500 draws (uniform: ~0.95)
    assert len(set(drawn_test)) > spread * 500 and len(set(drawn_train)) > spread * 1500 * 0.8
    assert test.unwrapped.current_goal is test.unwrapped.goals[drawn_test[-1]]
    # an explicit goal index is played whatever the split
    assert test.reset(options={"goal_index": 4000})[1]["goal_index"] == 4000


def test_uniform_and_weighted_draws_differ_as_they_should() -> None:
    uniform = WebShopEnv(data_dir=DATA_DIR, split="all")
    weighted = WebShopEnv(data_dir=DATA_DIR, split="all", goal_sampling="weighted")
    draws = 20_000
    uniform.reset(seed=0)
    weighted.reset(seed=0)
    u = [uniform._draw_goal_index() for _ in range(draws)]  # what a reset draws, without the page
    w = [weighted._draw_goal_index() for _ in range(draws)]
    weights = [g["weight"] for g in uniform.goals]
    heavy = sorted(range(len(weights)), key=weights.__getitem__)[-700:]  # the 10% heaviest goals
    # the original draws goal i with the weight of goal i - 1
    in_heavy = {i + 1 for i in heavy}
    share_u = sum(i in in_heavy for i in u) / draws
    share_w = sum(i in in_heavy for i in w) / draws
    assert abs(share_u - 0.1) < 0.015 and share_w > share_u + 0.05


def test_split_and_sampling_are_validated() -> None:
    with pytest.raises(ValueError, match="split"):
        WebShopEnv(data_dir=DATA_DIR, split="valid")
    with pytest.raises(ValueError, match="goal_sampling"):
        WebShopEnv(data_dir=DATA_DIR, goal_sampling="human")


def test_info_keys_and_admissible_actions(env) -> None:
    obs, info = env.reset(options={"goal_index": 5})
    goal = env.goals[5]
    assert info["task"] == goal["instruction_text"] and info["task_type"] == goal["category"]
    assert info["admissible_actions"] == ["search[<your query>]", "click[search]"]
    assert info["goal_index"] == 5 and info["score"] == 0.0 and not info["won"]
    info = env.step(tagged(f"search[{goal['query']}]"))[4]
    assert info["is_action_admissible"] and info["is_action_valid"] and info["command"].startswith("search[")
    clickables = info["available_actions"]["clickables"]
    assert info["admissible_actions"] == [f"click[{c}]" for c in clickables]
    assert clickables[:2] == ["back to search", "next >"] and len(clickables) == 12
    for action in ("click[search]", "no tags at all"):
        info = env.step(tagged(action) if "[" in action else action)[4]
        assert not info["is_action_admissible"] and info["available_actions"]["clickables"] == clickables
        assert info["is_action_valid"] == ("[" in action)


def test_gymnasium_make_and_check_env(monkeypatch) -> None:
    """No data path: the shipped catalog is played."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    env = gym.make("hgpo/WebShop-v0", max_steps=15)
    assert isinstance(env.unwrapped, WebShopEnv) and env.unwrapped.max_steps == 15
    assert env.unwrapped.shop is load_shop(DATA_DIR) and len(env.unwrapped.goals) == 6910
    check_env(env.unwrapped)


_GARBAGE = st.one_of(
    st.text(max_size=300),
    st.builds(lambda unit, n: unit * n, st.text(min_size=1, max_size=3), st.integers(1, 40_000)),
    st.builds(
        lambda inner: f"<think>x</think><action>{inner}</action>",
        st.one_of(st.text(max_size=40), st.sampled_from(["click[nope]", "click[]", "search[]", "go", "]["])),
    ),
    st.builds(lambda inner: f"<action>search[{inner}]</action>", st.text(max_size=20)),  # no <think>
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_GARBAGE, st.integers(0, 2))
def test_garbage_never_raises_and_changes_nothing(env, action: str, depth: int) -> None:
    info = _until_results(env)
    if depth:
        env.step(tagged(f"click[{_first_product(info)}]"))
    if depth == 2:
        env.step(tagged("click[description]"))
    before = env.session.observation
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs == before and reward == 0.0 and not terminated and not truncated
    assert not info["is_action_admissible"] and "env_error" not in info


def test_huge_and_control_character_outputs(env) -> None:
    _until_results(env)
    before = env.session.observation
    for action in ["x" * 100_000, "\x00\x01<think>\x07</think><action>\x1b[2J</action>", "", "\u4e2d" * 50]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert (obs, reward, terminated, truncated) == (before, 0.0, False, False)


def test_an_engine_exception_truncates_with_env_error(env, monkeypatch) -> None:
    _until_results(env)

    def broken(keywords):
        raise RuntimeError("index lost")

    monkeypatch.setattr(env.session, "_find_products", broken)
    obs, reward, terminated, truncated, info = env.step(tagged("search[red shoes]"))
    assert truncated and not terminated and reward == 0.0
    assert info["env_error"] == "RuntimeError: index lost" and not info["is_action_admissible"]
    assert _until_results(env)["is_action_admissible"]  # the next episode works
    # The original crashes on search[<a> ...] (it never passes its attribute table): same here.
    info = env.step(tagged("search[<a> machine wash]"))[4]
    assert "crashes the original" in info["env_error"]


def test_reset_options_are_validated(env) -> None:
    for options in (
        {"goal_index": -1},
        {"goal_index": 6910},
        {"goal_index": True},
        {"goal_index": "3"},
        {"seed": 3},
        {"goal_index": 1, "goal": env.goals[1]},
    ):
        with pytest.raises(ValueError):
            env.reset(options=options)
    with pytest.raises(ValueError, match="lacks"):
        env.reset(options={"goal": {"instruction_text": "buy socks"}})


def test_a_users_goal_is_played(env) -> None:
    target = env.goals[3]
    goal = {"asin": target["asin"], "instruction_text": "Find the streaming player", "price_upper": 500.0}
    episode = play_episode(env, options={"goal": goal})
    assert episode.infos[0]["task"] == "Find the streaming player" and episode.infos[0]["goal_index"] is None
    assert episode.observations[0].split(" [SEP] ")[2] == "Find the streaming player"
    assert episode.infos[-1]["won"] and episode.infos[-1]["score"] == 1.0


# --------------------------------------------------------------------------------------------- quirks


def test_search_from_any_page_and_empty_pages_past_five(env) -> None:
    env.step(tagged(f"click[{_first_product(_until_results(env))}]"))
    assert env.session.page.name == "item"
    obs = env.step(tagged("search[red shoes]"))[0]
    assert "Page 1 (Total results: 50)" in obs
    for _ in range(5):
        obs = env.step(tagged("click[next >]"))[0]
    assert obs.endswith("Page 6 (Total results: 50) [SEP] < Prev [SEP] Next >")
    assert env.step(tagged("click[Next >]"))[4]["is_action_admissible"]  # case-insensitive argument
    assert not env.step(tagged("click[next]"))[4]["is_action_admissible"]  # must be exact


def test_item_page_navigation(env) -> None:
    goal = _goal_on_first_page(env)
    product = env.shop.by_asin[goal["asin"]]
    item = env.step(tagged(f"click[{goal['asin'].lower()}]"))[0]
    name, value = next(iter(goal["goal_options"].items()))
    assert env.step(tagged(f"click[{value}]"))[0] == item  # an option click re-renders the page
    description = env.step(tagged("click[description]"))[0]
    header = description.split(" [SEP] ")[:4]
    assert header == ["Instruction:", goal["instruction_text"], "Back to Search", "< Prev"]
    expected = [product["Description"].strip()] if product["Description"] else []
    assert description.split(" [SEP] ")[4:] == expected
    assert not env.step(tagged("click[features]"))[4]["is_action_admissible"]  # not on a sub-page
    assert env.step(tagged("click[< prev]"))[0] == item  # sub-page -> item page, options kept
    assert env.session.options == {name: value}
    features = env.step(tagged("click[features]"))[0]
    assert features.split(" [SEP] ")[:4] == header
    assert all(bullet.strip() in features for bullet in product["BulletPoints"])
    assert env.step(tagged("click[< prev]"))[0] == item
    assert "Total results" in env.step(tagged("click[< prev]"))[0]  # item -> results: options dropped
    assert env.session.options == {}
    assert env.step(tagged("click[back to search]"))[0].startswith("WebShop [SEP] Instruction:")


def test_special_keywords(env) -> None:
    env.reset(options={"goal_index": 0})
    beauty = sum(p["category"] == "beauty" for p in env.shop.products)
    assert f"(Total results: {beauty})" in env.step(tagged("search[<c> beauty]"))[0]
    env.reset(seed=11)
    random_page = env.step(tagged("search[<r>]"))[0]
    env.reset(seed=11)
    assert env.step(tagged("search[<r>]"))[0] == random_page
    query = env.current_goal["query"]
    same_query = sum(p["query"] == query for p in env.shop.products)
    assert f"(Total results: {same_query})" in env.step(tagged(f"search[<q> {query}]"))[0]


def test_keywords_leak_into_the_page_kind(env) -> None:
    """The original reads the page kind from a URL holding the keywords (kept: see engine doc)."""
    env.reset(options={"goal_index": 0})
    info = env.step(tagged("search[search_results decorative pillows]"))[4]
    env.step(tagged(f"click[{_first_product(info)}]"))
    assert "[SEP] Page 0 (Total results: " in env.step(tagged("click[< prev]"))[0]


# -------------------------------------------------------------------------------------------- prompts


def test_first_prompt_is_verl_agents_no_history_template(env) -> None:
    obs, info = env.reset(options={"goal_index": 0})
    prompt = render_prompt(PromptContext(info["task"], [], obs, info["admissible_actions"], 0, 2))
    # verl-agent's WebShop template, written out (trailing spaces and the non-breaking hyphen kept).
    assert prompt == (
        "\nYou are an expert autonomous agent operating in the WebShop e\u2011commerce environment. \n"
        f"Your task is to: {info['task']}.\n"
        "Your current observation is: 'Search'.\n"
        "Your admissible actions of the current situation are: \n"
        "[\n'search[<your query>]',\n'click[search]',\n].\n\n"
        "Now it's your turn to take one action for the current step.\n"
        "You should first reason step-by-step about the current situation, then think carefully which "
        "admissible action best advances the shopping goal. This reasoning process MUST be enclosed within "
        "<think> </think> tags. \n"
        "Once you've finished your reasoning, you should choose an admissible action for current step and "
        "present it within <action> </action> tags.\n"
    )


def test_later_prompts_show_the_last_k_records(env) -> None:
    episode = play_episode(env, options={"goal_index": 1})
    task, steps = episode.infos[0]["task"], len(episode.answers)
    history = [(episode.observations[t], episode.infos[t + 1]["command"]) for t in range(steps)]
    actions = episode.infos[-2]["admissible_actions"]
    prompt = render_prompt(PromptContext(task, history[:-1], episode.observations[-2], actions, steps - 1, 2))
    assert f"Prior to this step, you have already taken {steps - 1} step(s)." in prompt
    assert "Below are the most recent 2 observations" in prompt and f"You are now at step {steps} " in prompt
    last = format_observation(history[-2][0], task)
    assert f"[Observation {steps - 1}: '{last}', Action {steps - 1}: '{history[-2][1]}']" in prompt
    assert "[Observation 1:" not in prompt and "'click[buy now]',\n" in prompt
    assert render_prompt(PromptContext(task, history, episode.observations[-1], [], steps, 0)).startswith(
        WEBSHOP_TEMPLATE_NO_HIS[:60]
    )
    long_history = [("x" * 20_000, "click[x]")] * 3  # the HGPO recipe keeps even very long histories
    assert "Prior to this step" in render_prompt(PromptContext(task, long_history, "obs", [], 3, 2))


def test_observation_formatting_drops_the_header(env) -> None:
    info = _until_results(env)
    formatted = format_observation(env.session.observation, info["task"])
    assert formatted.startswith("'Back to Search' [SEP] 'Page 1 (Total results: 50)' [SEP] 'Next >'")
    assert format_observation("Thank you [SEP] x", info["task"]) == "Thank you [SEP] x"


def test_tokenizer_corpus_plays_the_shipped_catalog(monkeypatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    corpus = envs.get_tokenizer_corpus("webshop")
    assert corpus == tokenizer_corpus(DATA_DIR)
    assert WEBSHOP_TEMPLATE_NO_HIS in corpus and all(isinstance(text, str) and text for text in corpus)
    assert len(corpus) > 100 and any("<action>click[buy now]</action>" in t for t in corpus)
    assert any(t.startswith("\nYou are an expert") and "Prior to this step" in t for t in corpus)
    assert envs.get_prompt_renderer("hgpo/WebShop-v0") is render_prompt


def test_an_over_long_search_is_cut_but_stays_a_search(env) -> None:
    from envs.common.actions import MAX_COMMAND_CHARS, parse_action

    env.reset(options={"goal_index": 0})
    words = " ".join(["shampoo"] * 200)  # 1,599 characters of keywords
    parsed = parse_action(tagged(f"search[{words}]"))
    assert len(parsed.command) <= MAX_COMMAND_CHARS and parsed.command.endswith("]")
    _, _, _, _, info = env.step(tagged(f"search[{words}]"))
    assert info["is_action_admissible"] and info["available_actions"]["clickables"][0] == "back to search"
