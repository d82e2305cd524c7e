"""HGPO's algorithm pieces without Ray actors: config validation, prompts, the advantage connector
(full pipeline on the golden vectors), token layout, group sharding and the loss terms."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from data_files import golden_cases
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

import envs
from hgpo_rllib import HGPOConfig
from hgpo_rllib.advantages import gigpo_advantages, hgpo_advantages, hgpo_level_stats
from hgpo_rllib.callbacks import HGPOMetricsCallback, episode_weighted_means
from hgpo_rllib.connectors.group_advantages import (
    ADVANTAGES,
    OLD_LOGP,
    PROMPT_MASK,
    RESP_IDS,
    EstimatorSettings,
    GroupAdvantages,
    StepTable,
    estimator_inputs,
)
from hgpo_rllib.connectors.history_window import episode_prompt_text
from hgpo_rllib.env_runner import GROUP_ID, PROMPT_IDS, RESP_LOGP, RESP_MASK
from hgpo_rllib.hgpo_learner import estimator_settings
from hgpo_rllib.learner_group import shard_whole_groups
from hgpo_rllib.memory import MODEL_CONFIGS_DIR
from hgpo_rllib.torch.hgpo_torch_learner import token_loss_terms

PAD = 0
WIDTH = 6  # response width as stored by the sampler (max_new_tokens)

#: A Qwen2.5-1.5B model directory holding only its config.json (enough for validate()).
QWEN_1_5B = str(MODEL_CONFIGS_DIR / "qwen2.5-1.5b")


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
) -> SingleAgentEpisode:
    """A finished episode as GroupedEnvRunner records it; ``observations`` has one more entry
    than the steps (the final observation)."""
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
            },
        )
    return episode


# The connector needs only the module's pad token id.
_TOKENIZER = SimpleNamespace(pad_token_id=PAD)
FAKE_MODULE = {DEFAULT_MODULE_ID: SimpleNamespace(unwrapped=lambda: SimpleNamespace(tokenizer=_TOKENIZER))}


def run_connector(episodes: list[SingleAgentEpisode], settings: EstimatorSettings) -> tuple[dict, dict]:
    metrics = MetricsLogger()
    connector = GroupAdvantages(settings=settings)
    batch = connector(rl_module=FAKE_MODULE, batch={}, episodes=episodes, metrics=metrics)
    return batch[DEFAULT_MODULE_ID], {k: float(v) for k, v in metrics.reduce()[DEFAULT_MODULE_ID].items()}


_golden_cases = golden_cases


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
    for case in _golden_cases(estimator)
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
    Y, W are alone at every level. Item statistics are those of the estimator's own items."""
    case = next(c for c in _golden_cases("hgpo") if c["name"] == "nested_depths_k2_msn")
    episodes, _ = golden_episodes(case)
    settings = _settings("hgpo", case)
    _, stats = run_connector(episodes, settings)
    assert stats["num_groups"] == 1 and stats["num_step_rows"] == 21
    assert stats["episodes_per_group_min"] == stats["episodes_per_group_max"] == 5
    for depth, rows, size_sum in ((1, 21, 71), (2, 16, 46), (3, 11, 23)):
        assert stats[f"level{depth}_group_size_mean"] == pytest.approx(size_sum / rows)
        assert stats[f"level{depth}_singleton_frac"] == pytest.approx(5 / rows)
    assert stats["all_levels_singleton_frac"] == pytest.approx(5 / 21)
    table = StepTable.from_episodes(episodes)
    returns, _ = estimator_inputs(table, settings)
    items = hgpo_level_stats(table.group_ids, table.traj_ids, table.step_idx, table.obs, returns).items
    for depth, level in enumerate(items, start=1):
        level = level[~np.isnan(level)]
        assert stats[f"level{depth}_advantage_mean"] == pytest.approx(0.0, abs=1e-9)  # groups centre
        assert stats[f"level{depth}_advantage_std"] == pytest.approx(level.std())
        assert stats[f"level{depth}_advantage_abs_mean"] == pytest.approx(np.abs(level).mean())
    assert stats["level1_advantage_abs_mean"] > 0
    assert stats["advantage_abs_mean"] > 0


@pytest.mark.parametrize(
    ("weighting", "base_group"), [("reference", False), ("paper", True), ("adaptive", False)]
)
def test_connector_level_weight_metrics(weighting: str, base_group: bool) -> None:
    """level{d}_weight_mean is the mean weight of level d over all steps (0 where a step has no
    item there); with the base weight they add up to the share of steps with any item."""
    case = next(c for c in _golden_cases("hgpo") if c["name"] == "nested_depths_k2_msn")
    episodes, _ = golden_episodes(case)
    settings = replace(_settings("hgpo", case), weighting=weighting, base_group=base_group)
    batch, stats = run_connector(episodes, settings)
    table = StepTable.from_episodes(episodes)
    returns, scores = estimator_inputs(table, settings)
    levels = hgpo_level_stats(
        table.group_ids, table.traj_ids, table.step_idx, table.obs, returns,
        episode_scores=scores, history_length=2, weighting=weighting, base_group=base_group,
    )
    means = [stats[f"level{depth}_weight_mean"] for depth in (1, 2, 3)]
    np.testing.assert_allclose(means, levels.weights.mean(axis=1), rtol=1e-6)
    total = sum(means) + stats.get("base_weight_mean", 0.0)
    assert ("base_weight_mean" in stats) == base_group
    if weighting == "adaptive":  # weights sum to 1 on the 16 steps with a shared current-state group
        assert total == pytest.approx(16 / 21)
        assert means[1] + means[2] > 0  # the deeper levels are used, not just level 1
    else:  # the eps of §4.4 keeps each step's sum just below 1
        assert 0.5 < total < 1.0
    assert np.abs(batch[ADVANTAGES]).max() > 0


def test_estimator_switch_changes_levels_and_values() -> None:
    case = next(c for c in _golden_cases("hgpo") if c["name"] == "nested_depths_k2_msn")
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
    equal to the estimator called directly with the same option, and different from the default."""
    case = next(c for c in _golden_cases("hgpo") if c["name"] == "nested_depths_k2_msn")
    episodes, _ = golden_episodes(case)
    config = _valid_config().training(gamma=0.5, **training)
    got = run_connector(episodes, estimator_settings(config))[0][ADVANTAGES]
    table = StepTable.from_episodes(episodes)
    returns, scores = estimator_inputs(table, estimator_settings(config))
    keys = (table.group_ids, table.traj_ids, table.step_idx, table.obs, returns, scores)
    if config.estimator == "gigpo":
        direct = gigpo_advantages(*keys[:1], *keys[3:], mode="mean_std_norm", **estimator_kwargs)
    else:
        direct = hgpo_advantages(*keys, **{"history_length": 2, "mode": "mean_std_norm", **estimator_kwargs})
    np.testing.assert_allclose(got, direct.astype(np.float32), rtol=1e-6)
    default = run_connector(episodes, estimator_settings(_valid_config().training(
        gamma=0.5, estimator=config.estimator)))[0][ADVANTAGES]
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

    def render(task, history, observation, admissible, step_index, history_length, **kw):
        calls.append((task, history, observation, admissible, step_index, history_length, kw))
        return "prompt"

    episode = make_episode("g", ["o0", "o1", "o2", "o3"], [0.0, 0.0, 0.0], [True] * 3,
                           commands=["go north", "take key", "open chest"])
    assert episode_prompt_text(episode, render, 2, {"require_tags": True}) == "prompt"
    task, history, observation, admissible, step_index, k, kw = calls[0]
    assert (task, observation, admissible, step_index, k, kw) == (
        "the task", "o3", ["a", "b"], 3, 2, {"require_tags": True}
    )
    assert history == [("o0", "go north"), ("o1", "take key"), ("o2", "open chest")]


def test_keychest_prompt_connector_uses_env_template_and_env_config() -> None:
    config = HGPOConfig().environment("keychest", env_config={"require_tags": True})
    config.training(history_length=1)
    connector = config._prompt_connector()
    assert connector.render_prompt is envs.get_prompt_renderer("keychest")
    assert connector.render_kwargs == {"require_tags": True} and connector.history_length == 1


# ------------------------------------------------------------------------------- config
def _valid_config() -> HGPOConfig:
    return HGPOConfig().environment("keychest").env_runners(num_envs_per_env_runner=8)


def test_default_config_is_the_papers_and_valid() -> None:
    config = _valid_config()
    config.validate()
    assert (config.lr, config.weight_decay, config.grad_clip) == (1e-6, 0.01, 1.0)
    assert config.grad_clip_by == "global_norm"
    assert (config.minibatch_size, config.num_epochs, config.gamma, config.group_size) == (256, 1, 0.95, 8)
    assert (config.clip_param, config.dual_clip) == (0.2, 3.0)
    assert (config.kl_coeff, config.entropy_coeff) == (0.01, 0.001)
    assert (config.max_prompt_tokens, config.max_new_tokens, config.temperature) == (4096, 512, 1.0)
    assert (config.estimator, config.history_length, config.adv_mode, config.eval_temperature) == (
        "hgpo", 2, "mean_std_norm", 0.4
    )
    model_config = config.model_config
    assert model_config["kl_coeff"] == 0.01 and model_config["max_new_tokens"] == 512
    assert model_config["tokenizer_corpus"] == envs.get_tokenizer_corpus("keychest")
    no_corpus = _valid_config().rl_module(model_config={"model": "/some/hf/dir"}).model_config
    assert "tokenizer_corpus" not in no_corpus and no_corpus["model"] == "/some/hf/dir"


BAD_SETTINGS = [
    ({"estimator": "ppo"}, "estimator"),
    ({"history_length": -1}, "history_length"),
    ({"adv_mode": "std"}, "adv_mode"),
    ({"length_weight_alpha": -1.0}, "length_weight_alpha"),
    ({"base_group": "yes"}, "base_group"),
    ({"weighting": "uniform"}, "weighting"),
    ({"weighting": "adaptive", "base_group": True}, "base_group"),
    ({"group_size": 0}, "group_size"),
    ({"groups_per_iteration": 0}, "groups_per_iteration"),
    ({"gamma": 1.5}, "gamma"),
    ({"invalid_action_penalty": -0.1}, "invalid_action_penalty"),
    ({"clip_param": 0.0}, "clip_param"),
    ({"dual_clip": 1.0}, "dual_clip"),
    ({"kl_coeff": -0.01}, "kl_coeff"),
    ({"entropy_coeff": -1.0}, "entropy_coeff"),
    ({"weight_decay": -1.0}, "weight_decay"),
    ({"lr": 0.0}, "lr"),
    ({"lr": [[0, 1e-3], [0, 1e-4]]}, "lr"),  # a schedule's steps increase
    ({"minibatch_size": 0}, "minibatch_size"),
    ({"micro_batch_size": 0}, "micro_batch_size"),
    ({"num_epochs": 0}, "num_epochs"),
    ({"max_prompt_tokens": 0}, "max_prompt_tokens"),
    ({"max_new_tokens": 2.5}, "max_new_tokens"),
    ({"temperature": 0.0}, "temperature"),
    ({"eval_temperature": -0.1}, "eval_temperature"),
    ({"recompute_old_logp": 1}, "recompute_old_logp"),
    ({"group_size": 3}, "num_envs_per_env_runner"),
    # Non-finite numbers would turn the weights into NaN without an error.
    *[({name: value}, name) for value in (np.inf, -np.inf, np.nan) for name in (
        "length_weight_alpha", "step_advantage_w", "invalid_action_penalty", "kl_coeff", "entropy_coeff",
        "weight_decay", "lr", "temperature", "grad_clip", "dual_clip", "gamma", "clip_param",
    )],
    ({"lr": [[0, 1e-3], [100, np.inf]]}, "lr"),
    ({"step_advantage_w": -1.0}, "step_advantage_w"),
    ({"micro_batch_size": 32, "minibatch_size": 16}, "micro_batch_size"),
    ({"max_prompt_tokens": 10**9}, "max_prompt_tokens"),
    ({"max_prompt_tokens": 32_700}, "max_prompt_tokens"),  # + 512 new tokens > the tiny model's 32768
    ({"length_weight_alpha": 1e4, "history_length": 4}, "length_weight_alpha"),  # 6.0**1e4 overflows
]


def test_validate_accepts_a_learning_rate_schedule() -> None:
    config = _valid_config().training(lr=[[0, 1e-3], [40_000, 1e-4]])
    config.validate()
    assert config.lr == [[0, 1e-3], [40_000, 1e-4]]
    with pytest.raises(ValueError, match=r"HGPOConfig: lr=\[\[0, 0.001\], \[0, 0.0001\]\]"):
        _valid_config().training(lr=[[0, 1e-3], [0, 1e-4]]).validate()


def test_validate_accepts_numpy_scalars() -> None:
    """Tune's search spaces hand numpy scalars to the config."""
    config = _valid_config().training(
        history_length=np.int64(2), group_size=np.int64(2), gamma=np.float32(0.9),
        length_weight_alpha=np.float64(0.5), base_group=np.bool_(True), max_prompt_tokens=np.int32(512),
    )
    config.validate()
    assert config.model_config["max_prompt_tokens"] == 512


@pytest.mark.parametrize(
    ("model_config", "message"),
    [
        ({"tokenizer_vocab_sise": 400},
         r"model_config has unknown key\(s\) \['tokenizer_vocab_sise'\].*'tokenizer_vocab_size'"),
        ({"torch_dtype": "fp8"}, r"model_config\['torch_dtype'\]='fp8'"),
        ({"model": "/no/such/model"},
         r"model_config\['model'\]='/no/such/model' .*/no/such/model/config.json does not exist"),
    ],
)
def test_validate_checks_model_config_before_sampling(model_config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=rf"HGPOConfig: {message}"):
        _valid_config().rl_module(model_config=model_config).validate()


def test_validate_checks_prompt_length_against_a_model_directory(tmp_path: Any) -> None:
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 2048}')
    config = _valid_config().rl_module(model_config={"model": str(tmp_path)})
    with pytest.raises(ValueError, match=r"max_prompt_tokens=4096 .* exceeds the model's 2048 positions"):
        config.validate()
    config.training(max_prompt_tokens=1024, max_new_tokens=512).validate()


@pytest.mark.parametrize(("settings", "name"), BAD_SETTINGS, ids=[f"{n}-{s}" for s, n in BAD_SETTINGS])
def test_validate_names_the_bad_setting(settings: dict[str, Any], name: str) -> None:
    config = _valid_config().training(**settings)
    with pytest.raises(ValueError, match=rf"HGPOConfig: {name}="):
        config.validate()


@pytest.mark.parametrize(
    ("change", "name"),
    [
        (lambda c: c.environment("CartPole-v1"), "env"),
        (lambda c: c.env_runners(num_env_runners=0), "create_local_env_runner"),
        (lambda c: c.env_runners(episodes_to_numpy=True), "episodes_to_numpy"),
        (lambda c: c.env_runners(gym_env_vectorize_mode="async"), "gym_env_vectorize_mode"),
        (lambda c: c.learners(num_learners=3), "minibatch_size"),
        (lambda c: c.evaluation(evaluation_duration_unit="timesteps"), "evaluation_duration_unit"),
        (lambda c: c.learners(num_learners=2).training(groups_per_iteration=1), "groups_per_iteration"),
        (lambda c: c.multi_agent(policies={"a", "b"}, policy_mapping_fn=lambda *a, **k: "a"), "multi-agent"),
        (lambda c: c.rl_module(model_config={"temperature": 0.7}), "model_config"),
        (lambda c: c.rl_module(model_config={"model": QWEN_1_5B})
         .evaluation(evaluation_interval=5), "evaluation_num_env_runners=0"),
        (lambda c: c.env_runners(add_default_connectors_to_module_to_env_pipeline=True),
         "add_default_connectors_to_module_to_env_pipeline"),
    ],
)
def test_validate_names_bad_rllib_settings(change: Any, name: str) -> None:
    with pytest.raises(ValueError, match=rf"HGPOConfig: {name}"):
        change(_valid_config()).validate()


def test_evaluation_of_the_tiny_model_or_on_env_runners_is_valid() -> None:
    _valid_config().evaluation(evaluation_interval=5).validate()  # tiny model in the driver: fine
    big = _valid_config().rl_module(model_config={"model": QWEN_1_5B})
    big.evaluation(evaluation_interval=5, evaluation_num_env_runners=1).validate()


def test_all_validation_errors_are_reported_together() -> None:
    errors = _valid_config().training(estimator="x", gamma=2.0)._hgpo_errors()
    assert [e.split("=")[0] for e in errors] == ["estimator", "gamma"]


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


# ---------------------------------------------------------------------------------- loss
def test_token_loss_terms_match_the_per_element_formulas() -> None:
    torch.manual_seed(0)
    logp = -torch.rand(4, 5) * 3
    old_logp = logp + torch.randn(4, 5)  # ratios far outside the clip range, both ways
    ref_logp = logp + torch.randn(4, 5) * 0.5
    advantages = torch.tensor([1.5, -2.0, 0.0, -0.3])
    terms = token_loss_terms(
        logp=logp, old_logp=old_logp, advantages=advantages, ref_logp=ref_logp, clip_param=0.2, dual_clip=3.0
    )
    for i in range(4):
        a = float(advantages[i])
        for t in range(5):
            r = float(torch.exp(logp[i, t] - old_logp[i, t]))
            pg = max(-a * r, -a * min(max(r, 0.8), 1.2))
            if a < 0:
                pg = min(pg, -a * 3.0)
            d = float(ref_logp[i, t] - logp[i, t])
            assert float(terms.pg[i, t]) == pytest.approx(pg, rel=1e-5, abs=1e-6)
            assert float(terms.kl[i, t]) == pytest.approx(np.exp(d) - d - 1, rel=1e-5, abs=1e-6)
            assert float(terms.ratio[i, t]) == pytest.approx(r, rel=1e-5)
    assert terms.dual_clipped.sum() > 0 and terms.clipped.sum() > 0
    assert torch.all(terms.dual_clipped[0] == 0)  # only negative advantages are dual-clipped
    without_ref = token_loss_terms(
        logp=logp, old_logp=old_logp, advantages=advantages, ref_logp=None, clip_param=0.2, dual_clip=3.0
    )
    assert without_ref.kl is None



# ------------------------------------------------------------------------------------------
def test_episode_weighted_means_weigh_iterations_by_their_episodes_and_skip_missing_values() -> None:
    means = episode_weighted_means([(8, {"success_rate": 0.5, "score_mean": float("nan")}),
                                    (24, {"success_rate": 0.0, "score_mean": 0.25})])
    assert means == {"success_rate": 0.125, "score_mean": 0.25}
    assert episode_weighted_means([]) == {}


def test_smoothed_metrics_cover_the_last_window_of_episodes_across_iterations() -> None:
    callback = HGPOMetricsCallback()
    algorithm = SimpleNamespace(config=SimpleNamespace(metrics_num_episodes_for_smoothing=16))
    smoothed = []
    for success in (1.0, 0.0, 0.5, 0.25):
        runners = {"num_episodes": 8, "success_rate": success, "episode_len_mean": 10 * success}
        result = {"env_runners": runners}
        callback.on_train_result(algorithm=algorithm, result=result, metrics_logger=None)
        assert result["env_runners"]["success_rate"] == success  # the per-iteration value stays
        smoothed.append(result["env_runners"]["success_rate_smoothed"])
    assert smoothed == [1.0, 0.5, 0.25, 0.375]  # the last 16 episodes = the last 2 iterations
    assert result["env_runners"]["episode_len_mean_smoothed"] == 3.75
    empty = {"env_runners": {"num_episodes": 0}}  # an iteration without finished episodes changes nothing
    callback.on_train_result(algorithm=algorithm, result=empty, metrics_logger=None)
    assert empty == {"env_runners": {"num_episodes": 0}}
