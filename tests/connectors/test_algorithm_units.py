"""HGPO's learner pieces without Ray actors: the advantage connector (full pipeline on the golden
vectors), config settings reaching it, prompts, the token layout and group sharding.

(Config validation: test_validation.py; the loss terms: test_token_loss.py; the metrics callback:
test_metrics_callback.py.)"""

from __future__ import annotations

from dataclasses import astuple, replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from helpers import golden_cases
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

import envs
from hgpo_rllib import HGPOConfig
from hgpo_rllib.advantages import gigpo_advantages, hgpo_advantages
from hgpo_rllib.advantages.step_table import EstimatorSettings, StepTable, estimate_advantages
from hgpo_rllib.algorithms.learner_group import shard_whole_groups
from hgpo_rllib.columns import (
    ADVANTAGES,
    GROUP_ID,
    LENGTH_CUT,
    OLD_LOGP,
    PROMPT_IDS,
    PROMPT_MASK,
    RESP_IDS,
    RESP_LOGP,
    RESP_MASK,
)
from hgpo_rllib.connectors.env_to_module.history_window import episode_prompt, episode_prompt_text
from hgpo_rllib.connectors.learner.group_advantages import GroupAdvantages

PAD = 0
WIDTH = 6  # response width as stored by the sampler (max_new_tokens)


# ------------------------------------------------------------------------------------ helpers
def make_episode(
    group_id: str,
    observations: list[str],
    rewards: list[float],
    valid: list[bool],
    *,
    done: bool = True,
    prompt_lens: list[int] | None = None,
    resp_lens: list[int] | None = None,
    commands: list[str] | None = None,
    length_cut: list[bool] | None = None,
) -> SingleAgentEpisode:
    """A finished episode as GroupedEnvRunner records it; ``observations`` has one more entry
    than the steps (the final observation). ``length_cut``: the module's per-step flags (an episode
    recorded before them has none)."""
    steps = len(rewards)
    prompt_lens = prompt_lens or [3] * steps
    resp_lens = resp_lens or [2] * steps
    commands = commands or [f"cmd {t}" for t in range(steps)]
    info = {"task": "the task", "admissible_actions": ["a", "b"], "command": "", GROUP_ID: group_id}
    episode = SingleAgentEpisode()
    episode.add_env_reset(observation=observations[0], infos=info)
    for t in range(steps):
        mask = (np.arange(WIDTH) < resp_lens[t]).astype(np.int64)
        episode.add_env_step(
            observation=observations[t + 1],
            action=np.where(mask == 1, 10 + t, PAD),
            reward=rewards[t],
            infos={**info, "is_action_valid": valid[t], "command": commands[t]},
            terminated=done and t == steps - 1,
            truncated=not done and t == steps - 1,
            extra_model_outputs={
                PROMPT_IDS: np.arange(1, prompt_lens[t] + 1, dtype=np.int32),
                RESP_MASK: mask,
                RESP_LOGP: -0.5 * mask.astype(np.float32),
                WEIGHTS_SEQ_NO: 3,
                **({} if length_cut is None else {LENGTH_CUT: length_cut[t]}),
            },
        )
    return episode


# The connector needs only the module's pad token id (TokenPolicyAPI.pad_token_id).
FAKE_MODULE = {DEFAULT_MODULE_ID: SimpleNamespace(unwrapped=lambda: SimpleNamespace(pad_token_id=PAD))}


def run_connector(episodes: list[SingleAgentEpisode], settings: EstimatorSettings) -> tuple[dict, dict]:
    metrics = MetricsLogger()
    connector = GroupAdvantages(settings=settings)
    batch = connector(rl_module=FAKE_MODULE, batch={}, episodes=episodes, metrics=metrics)
    return batch[DEFAULT_MODULE_ID], {k: float(v) for k, v in metrics.reduce()[DEFAULT_MODULE_ID].items()}


def _settings(estimator: str, case: dict[str, Any]) -> EstimatorSettings:
    opts = case["options"]
    common = {"estimator": estimator, "gamma": case["gamma"], "invalid_action_penalty": 0.1}
    if estimator == "hgpo":
        return EstimatorSettings(
            **common,
            history_length=opts["history_length"],
            adv_mode=opts["mode"],
            length_weight_alpha=opts["length_weight_alpha"],
            base_group=opts["base_group"],
        )
    if estimator == "gigpo":
        return EstimatorSettings(**common, adv_mode=opts["mode"], step_advantage_w=opts["step_advantage_w"])
    mode = "mean_std_norm" if opts["norm_adv_by_std_in_grpo"] else "mean_norm"
    return EstimatorSettings(**common, adv_mode=mode)


def golden_episodes(case: dict[str, Any]) -> tuple[list[SingleAgentEpisode], np.ndarray]:
    """Episodes of a golden case (trajectories in first-seen order) and the expected advantages in
    the connector's row order (episode by episode, step by step)."""
    field = "expected_advantage_exact_arith" if case.get("numerically_fragile") else "expected_advantage"
    trajectories: dict[str, list[dict]] = {}
    for step in case["steps"]:
        trajectories.setdefault(step["traj_id"], []).append(step)
    episodes, expected = [], []
    for steps in trajectories.values():
        steps.sort(key=lambda s: s["step_idx"])
        episodes.append(
            make_episode(
                steps[0]["group_id"],
                [s["obs"] for s in steps] + ["<final observation>"],
                [s["reward"] for s in steps],
                [s["is_action_valid"] for s in steps],
                done=steps[-1]["done"],
            )
        )
        expected += [s[field] for s in steps]
    return episodes, np.array(expected)


# ------------------------------------------------------------------------- advantage connector
GOLDEN_CASES = [
    pytest.param(estimator, case, id=f"{estimator}-{case['name']}")
    for estimator in ("hgpo", "gigpo", "grpo")
    for case in golden_cases(estimator)
]


@pytest.mark.parametrize(("estimator", "case"), GOLDEN_CASES)
def test_connector_reproduces_golden_advantages(estimator: str, case: dict[str, Any]) -> None:
    """Episodes -> connector -> advantages equals the reference on raw rewards, validity and anchors
    (tolerance of the golden files): anchor = observation acted on, validity from the next info."""
    episodes, expected = golden_episodes(case)
    rows, _ = run_connector(episodes, _settings(estimator, case))
    got = rows[ADVANTAGES]
    assert got.shape == expected.shape
    assert np.all(np.abs(got - expected) <= 1e-4 * np.maximum(1.0, np.abs(expected))), (got, expected)


def test_connector_level_metrics_on_the_worked_example() -> None:
    """docs/hgpo_algorithm.md §4.5, groups counted by hand (test_advantages): level 1 has 21 steps of
    sizes summing to 71, level 2 16 steps (46), level 3 11 steps (23); the five steps on E, X, Z,
    Y, W are alone at every level. The level item statistics are computed by hand from the shared
    groups' returns (LEVEL_ITEMS below)."""
    case = next(c for c in golden_cases("hgpo") if c["name"] == "nested_depths_k2_msn")
    episodes, expected = golden_episodes(case)
    _, stats = run_connector(episodes, _settings("hgpo", case))
    assert stats["num_groups"] == 1 and stats["num_step_rows"] == 21
    assert stats["num_informative_groups"] == 1  # its episodes' returns differ
    assert stats["episodes_per_group_min"] == stats["episodes_per_group_max"] == 5
    for depth, rows, size_sum in ((1, 21, 71), (2, 16, 46), (3, 11, 23)):
        assert stats[f"level{depth}_group_size_mean"] == pytest.approx(size_sum / rows)
        assert stats[f"level{depth}_singleton_frac"] == pytest.approx(5 / rows)
    assert stats["all_levels_singleton_frac"] == pytest.approx(5 / 21)
    for depth, (count, abs_sum) in LEVEL_ITEMS.items():
        # every shared group's returns differ, so its items are z-scores: mean 0, population std 1
        # (the eps of §4.3 moves them by < 1e-4 relative)
        assert stats[f"level{depth}_advantage_mean"] == pytest.approx(0.0, abs=1e-9)
        assert stats[f"level{depth}_advantage_std"] == pytest.approx(1.0, rel=1e-4)
        assert stats[f"level{depth}_advantage_abs_mean"] == pytest.approx(abs_sum / count, rel=1e-4)
    # the step advantages themselves: the reference's (golden) values
    assert stats["advantage_abs_mean"] == pytest.approx(np.abs(expected).mean(), rel=1e-6)


# The worked example's shared groups (§4.5: t0 = A B C D wins, t1 = A B C E and t4 = A B C D fail,
# t2 = X B C D Z and t3 = Y W C D win; returns at gamma 0.5), by level: (number of items, sum of |z|).
# A group's z-scores (population std) depend only on its returns' deviations from their mean:
#   {r, 0, 0}:        deviations 2, -1, -1 (r/3), std r sqrt(2)/3: sum |z| = 2 sqrt 2   (A; (A,B); (A,B,C))
#   {b, 0, b/2, 0}:   deviations 5, -3, 1, -3 (b/8), std b sqrt(44)/16: 24/sqrt 44 = 12/sqrt 11   (B; (B,C))
#   {1, .5, 1, 0}:    deviations 3, -1, 3, -5 (/8), std sqrt(11)/8: 12/sqrt 11   (D; (C,D))
#   {.5, 0, .25, .5, 0}: deviations 1, -1, 0, 1, -1 (/4), std sqrt .05: 1/sqrt .05 = sqrt 20   (C)
#   {1, .5, 0}:       deviations 1, 0, -1 (/2), std sqrt(1/6): sum |z| = 2 sqrt 1.5 = sqrt 6   ((B,C,D))
LEVEL_ITEMS = {
    1: (3 + 4 + 5 + 4, 2 * np.sqrt(2) + 12 / np.sqrt(11) + np.sqrt(20) + 12 / np.sqrt(11)),  # A, B, C, D
    2: (3 + 4 + 4, 2 * np.sqrt(2) + 12 / np.sqrt(11) + 12 / np.sqrt(11)),  # (A,B), (B,C), (C,D)
    3: (3 + 3, 2 * np.sqrt(2) + np.sqrt(6)),  # (A,B,C), (B,C,D)
}

# Each step's non-zero items by level, counted by hand on the worked example (21 steps):
#   levels {1}:       t0/A, t1/A, t4/A, t2/B ((X,B) alone), t3/C ((W,C) alone)
#   levels {1, 2}:    t0/B, t1/B, t4/B, t3/D ((W,C,D) alone), t2/D ((B,C,D)'s item is 0: .5 is its mean)
#   levels {1, 2, 3}: t0/C, t0/D, t1/C, t4/C, t4/D
#   level {2}:        t2/C (C's item is 0: .25 is its mean; (X,B,C) alone)
#   none:             t1/E, t2/X, t2/Z, t3/Y, t3/W
# "reference" weights levels 1, 2, 3 by L = 2, 3, 4; "paper" with base_group puts the base item
# (non-zero on every step: scores 1, 0, 1, 1, 0 have mean 13/21) at L = 1 and the levels at 2, 3, 4.
LEVEL_WEIGHT_MEANS = {
    "reference": (
        (5 * 1 + 5 * 2 / 5 + 5 * 2 / 9) / 21,
        (5 * 3 / 5 + 5 * 3 / 9 + 1) / 21,
        (5 * 4 / 9) / 21,
    ),
    "paper": (
        (5 * 2 / 3 + 5 * 2 / 6 + 5 * 2 / 10) / 21,
        (5 * 3 / 6 + 5 * 3 / 10 + 3 / 4) / 21,
        (5 * 4 / 10) / 21,
    ),
}
BASE_WEIGHT_MEAN = (5 * 1 + 5 / 3 + 5 / 6 + 5 / 10 + 1 / 4) / 21  # "paper" with base_group


@pytest.mark.parametrize(
    ("weighting", "base_group"), [("reference", False), ("paper", True), ("adaptive", False)]
)
def test_connector_level_weight_metrics(weighting: str, base_group: bool) -> None:
    """level{d}_weight_mean is the mean weight of level d over all steps (0 where a step has no
    item there); with the base weight they add up to the share of steps with any item. The fixed
    weightings' means are counted by hand (LEVEL_WEIGHT_MEANS)."""
    case = next(c for c in golden_cases("hgpo") if c["name"] == "nested_depths_k2_msn")
    episodes, _ = golden_episodes(case)
    settings = replace(_settings("hgpo", case), weighting=weighting, base_group=base_group)
    batch, stats = run_connector(episodes, settings)
    means = [stats[f"level{depth}_weight_mean"] for depth in (1, 2, 3)]
    total = sum(means) + stats.get("base_weight_mean", 0.0)
    assert ("base_weight_mean" in stats) == base_group
    if weighting == "adaptive":
        # weights sum to 1 on the 16 steps with a shared current-state group (zero items are kept);
        # the five steps with level 1 alone shared (t0/A, t1/A, t4/A, t2/B, t3/C) put all on it
        assert total == pytest.approx(16 / 21)
        assert means[0] >= 5 / 21 - 1e-9
        assert means[1] + means[2] > 0  # the deeper levels are used, not just level 1
    else:  # the eps of §4.4 keeps each step's sum just below 1
        np.testing.assert_allclose(means, LEVEL_WEIGHT_MEANS[weighting], rtol=1e-5)
        if base_group:
            assert stats["base_weight_mean"] == pytest.approx(BASE_WEIGHT_MEAN, rel=1e-5)
        assert total < (21 if base_group else 16) / 21
    assert np.abs(batch[ADVANTAGES]).max() > 0


def test_estimator_switch_changes_levels_and_values() -> None:
    case = next(c for c in golden_cases("hgpo") if c["name"] == "nested_depths_k2_msn")
    episodes, _ = golden_episodes(case)
    names = ("hgpo", "gigpo", "grpo")
    results = {e: run_connector(episodes, EstimatorSettings(estimator=e, gamma=0.5)) for e in names}
    levels = {e: {k for k in stats if k.startswith("level")} for e, (_, stats) in results.items()}
    assert levels["grpo"] == set()
    assert levels["gigpo"] == {"level1_group_size_mean", "level1_singleton_frac"}
    suffixes = ("group_size_mean", "singleton_frac", "advantage_mean", "advantage_std", "advantage_abs_mean")
    suffixes += ("weight_mean",)
    assert levels["hgpo"] == {f"level{d}_{suffix}" for d in (1, 2, 3) for suffix in suffixes}
    values = [results[e][0][ADVANTAGES] for e in names]
    assert not np.allclose(values[0], values[1]) and not np.allclose(values[1], values[2])


#: The estimators' options as HGPOConfig's defaults set them, spelled out (docs/hgpo_algorithm.md §5).
HGPO_DEFAULTS = {
    "history_length": 2,
    "mode": "mean_std_norm",
    "alpha": 1.0,
    "base_group": False,
    "weighting": "reference",
}
GIGPO_DEFAULTS = {"mode": "mean_std_norm", "step_advantage_w": 1.0}


def golden_columns(case: dict[str, Any]) -> tuple[list, list, list, list, np.ndarray, np.ndarray]:
    """The estimator inputs of a golden case, in the connector's row order (trajectories in first-seen
    order, steps in order), with the reference's own step returns and episode scores."""
    order = {traj: k for k, traj in enumerate(dict.fromkeys(s["traj_id"] for s in case["steps"]))}
    steps = sorted(case["steps"], key=lambda s: (order[s["traj_id"]], s["step_idx"]))
    columns = ("group_id", "traj_id", "step_idx", "obs")
    keys = [[s[c] for s in steps] for c in columns]
    return (*keys, np.array([s["step_return"] for s in steps]), np.array([s["episode_score"] for s in steps]))


@pytest.mark.parametrize(
    ("training", "estimator_kwargs"),
    [
        ({"weighting": "paper"}, {"weighting": "paper"}),
        ({"base_group": True}, {"base_group": True}),
        ({"length_weight_alpha": 2.0, "history_length": 1}, {"alpha": 2.0, "history_length": 1}),
        ({"estimator": "gigpo", "step_advantage_w": 0.25}, {"step_advantage_w": 0.25}),
    ],
    ids=["weighting", "base_group", "alpha-K", "step_advantage_w"],
)
def test_config_settings_reach_the_advantage_computation(
    training: dict[str, Any], estimator_kwargs: dict[str, Any]
) -> None:
    """HGPOConfig.training(...) -> the learner's estimator settings -> the connector's advantages,
    equal to the public estimator called directly, with every option spelled out, on the reference's
    own returns and scores; and different from the defaults, which reproduce the golden vector."""
    case = next(c for c in golden_cases("hgpo") if c["name"] == "nested_depths_k2_msn")
    assert case["gamma"] == 0.5 and not case.get("numerically_fragile")
    episodes, golden = golden_episodes(case)
    keys = golden_columns(case)
    config = _valid_config().training(gamma=0.5, **training)
    got = run_connector(episodes, config.estimator_settings())[0][ADVANTAGES]
    default_config = _valid_config().training(gamma=0.5, estimator=config.estimator)
    default = run_connector(episodes, default_config.estimator_settings())[0][ADVANTAGES]
    if config.estimator == "gigpo":
        group_ids, _, _, obs, returns, scores = keys
        direct = gigpo_advantages(group_ids, obs, returns, scores, **{**GIGPO_DEFAULTS, **estimator_kwargs})
        direct_default = gigpo_advantages(group_ids, obs, returns, scores, **GIGPO_DEFAULTS)
    else:
        direct = hgpo_advantages(*keys, **{**HGPO_DEFAULTS, **estimator_kwargs})
        direct_default = hgpo_advantages(*keys, **HGPO_DEFAULTS)
        np.testing.assert_allclose(direct_default, golden, rtol=1e-5, atol=1e-6)  # the case's own options
    np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(default, direct_default, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, default)


def test_connector_rejects_incomplete_episodes() -> None:
    ongoing = SingleAgentEpisode()
    ongoing.add_env_reset(observation="a", infos={GROUP_ID: "g"})
    ongoing.add_env_step(observation="b", action=np.zeros(WIDTH, np.int64), reward=0.0, infos={})
    chunk = ongoing.cut()
    chunk.add_env_step(
        observation="c", action=np.zeros(WIDTH, np.int64), reward=0.0, infos={}, terminated=True
    )
    for episode in (ongoing, chunk):
        with pytest.raises(ValueError, match="not a complete episode"):
            StepTable.from_episodes([episode])


def test_token_rows_are_left_padded_and_trimmed() -> None:
    episodes = [
        make_episode("g", ["a", "b", "c"], [0.0, 1.0], [True, True], prompt_lens=[2, 5], resp_lens=[1, 3]),
        make_episode("g", ["a", "d"], [0.0], [False], prompt_lens=[4], resp_lens=[2]),
    ]
    rows, _ = run_connector(episodes, EstimatorSettings())
    assert rows[PROMPT_IDS].tolist() == [[0, 0, 0, 1, 2], [1, 2, 3, 4, 5], [0, 1, 2, 3, 4]]
    assert rows[PROMPT_MASK].tolist() == [[0, 0, 0, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert rows[RESP_IDS].shape == (3, 3)  # the all-padding response columns 3..5 are trimmed
    assert rows[RESP_MASK].tolist() == [[1, 0, 0], [1, 1, 1], [1, 1, 0]]
    assert rows[RESP_IDS].tolist()[1] == [11, 11, 11]
    assert rows[OLD_LOGP].dtype == np.float32 and rows[OLD_LOGP][1].tolist() == [-0.5] * 3
    assert rows[WEIGHTS_SEQ_NO].tolist() == [3, 3, 3]
    assert rows[ADVANTAGES].shape == (3,)


# --------------------------------------------------------------------------------- prompts
def test_prompt_history_pairs_each_observation_with_the_command_executed_on_it() -> None:
    calls = []

    def render(context, **kw):
        calls.append((*astuple(context), kw))
        return "prompt"

    episode = make_episode(
        "g",
        ["o0", "o1", "o2", "o3"],
        [0.0, 0.0, 0.0],
        [True] * 3,
        commands=["go north", "take key", "open chest"],
    )
    assert episode_prompt_text(episode, render, 2, {"require_tags": True}) == "prompt"
    task, history, observation, admissible, step_index, k, subgoal, role, team, kw = calls[0]
    assert (task, observation, admissible, step_index, k, subgoal, role, team, kw) == (
        "the task",
        "o3",
        ["a", "b"],
        3,
        2,
        None,  # no plan-execute infos, no subgoal
        None,  # a single-agent env: no role, no team context
        (),
        {"require_tags": True},
    )
    assert history == [("o0", "go north"), ("o1", "take key"), ("o2", "open chest")]


@pytest.mark.parametrize(("steps", "shown"), [(0, [2]), (1, [2]), (2, [2, 1]), (3, [2, 1])])
def test_the_prompt_is_rendered_with_fewer_and_fewer_of_the_oldest_records(
    steps: int, shown: list[int]
) -> None:
    """Down to one record, never none: a template's no-history form may lack the task (ALFWorld's)."""

    def render(context, **kw):
        return f"{context.task} {context.history[-context.history_length :] if context.step else []}"

    episode = make_episode("g", [f"o{t}" for t in range(steps + 1)], [0.0] * steps, [True] * steps)
    if steps == 0:
        episode = SingleAgentEpisode()
        episode.add_env_reset(observation="o0", infos={"task": "T", "admissible_actions": []})
    prompt = episode_prompt(episode, render, 2)
    history = [(f"o{t}", f"cmd {t}") for t in range(steps)]
    task = "T" if steps == 0 else "the task"
    assert prompt.renderings == tuple(f"{task} {history[-k:] if steps else []}" for k in shown)
    assert episode_prompt_text(episode, render, 2) == prompt.renderings[0]


def test_a_length_cut_turn_counts_as_an_invalid_action_for_the_reward() -> None:
    """No action can be read reliably from a cut answer: it gets the invalid-action penalty."""
    cut = make_episode("g", ["a", "b", "c", "d"], [0.0, 0.0, 1.0], [True, False, True], length_cut=[1, 0, 1])
    old = make_episode("g", ["a", "b"], [1.0], [True])  # recorded before the flag: nothing is cut
    table = StepTable.from_episodes([cut, old])
    assert table.is_action_valid.tolist() == [False, False, False, True]
    returns = estimate_advantages(table, EstimatorSettings(estimator="grpo", invalid_action_penalty=0.1))
    assert returns.step_returns.tolist() == pytest.approx([0.9025 - 0.1, 0.95 - 0.1, 1.0 - 0.1, 1.0])


def test_groups_whose_rewards_differ_are_counted_apart_from_penalised_ones() -> None:
    """Group g: no episode wins, one answers out of format (informative through its penalty alone);
    group h: one of two wins (its rewards differ); group i: both win."""
    episodes = [
        make_episode("g", ["a", "b"], [0.0], [True]),
        make_episode("g", ["a", "b", "c"], [0.0, 0.0], [False, True]),
        make_episode("h", ["a", "b"], [10.0], [True]),
        make_episode("h", ["a", "b"], [0.0], [True]),
        make_episode("i", ["a", "b"], [10.0], [True]),
        make_episode("i", ["a", "b", "c"], [0.0, 10.0], [True, True]),
    ]
    _, stats = run_connector(episodes, EstimatorSettings(estimator="grpo", adv_mode="mean_norm"))
    assert (stats["num_groups"], stats["num_informative_groups"]) == (3, 2)
    assert stats["num_reward_differing_groups"] == 1


def test_keychest_prompt_connector_uses_env_template_and_env_config() -> None:
    config = HGPOConfig().environment("keychest", env_config={"require_tags": True})
    config.training(history_length=1)
    connector = config.prompt_connector()
    assert connector.render_prompt is envs.get_prompt_renderer("keychest")
    assert connector.render_kwargs == {"require_tags": True} and connector.history_length == 1


def _valid_config() -> HGPOConfig:
    return HGPOConfig().environment("keychest").env_runners(num_envs_per_env_runner=8)


# ------------------------------------------------------------------------------ sharding
def test_shard_whole_groups_keeps_groups_together_and_balances() -> None:
    lengths = {"a": [5, 5, 5], "b": [1, 1, 1], "c": [2, 2, 2], "d": [3, 3, 3], "e": [1, 1, 1]}
    episodes = [
        make_episode(g, ["o"] * (n + 1), [0.0] * n, [True] * n) for g, ns in lengths.items() for n in ns
    ]
    shards = shard_whole_groups(episodes, 2)
    owner = {}
    for k, shard in enumerate(shards):
        for ep in shard:
            assert owner.setdefault(ep.get_infos(0)[GROUP_ID], k) == k  # a group never straddles
    assert sorted(len(e) for s in shards for e in s) == sorted(len(e) for e in episodes)
    assert sorted(sum(map(len, s)) for s in shards) == [18, 18]
