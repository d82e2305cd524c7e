"""HGPO end to end on KeyChest with the tiny random-init model (CPU, Ray local cluster).

Covers: two training iterations with every advertised metric and progress line, the estimator switch, grouped
sampling, whole groups per learner with two DDP learners, checkpoint round trips (in place and into
a new algorithm) and the restart of a crashed env runner.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    GROUP_SIZE,
    GROUPS,
    assert_policy_moved,
    assert_same_tree,
    keychest_config,
    learner_weights,
    max_abs_diff,
    optimizer_state,
    optimizer_steps,
)

from hgpo_rllib import HGPO
from hgpo_rllib.algorithms import text_agent_learner
from hgpo_rllib.columns import GROUP_ID, PROMPT_IDS, TASK_SEED
from hgpo_rllib.connectors.learner.group_advantages import GroupAdvantages
from hgpo_rllib.env_runner import GroupedEnvRunner
from hgpo_rllib.progress import reported_minibatches

pytestmark = pytest.mark.usefixtures("ray_session")

LR = 1e-3  # keychest_config's learning rate


# ------------------------------------------------------------------------------------------
def slow_minibatches(*args: Any, **kwargs: Any) -> Iterator[Any]:
    """The learner's minibatches, each step followed by 0.25 s (5 progress intervals): the learning
    phase lasts long enough for a progress line however fast the machine (the tiny model's update
    could end before the printing thread read the board once: CI saw no learning line)."""
    for minibatch in reported_minibatches(*args, **kwargs):
        yield minibatch
        time.sleep(0.25)


def test_two_iterations_report_every_metric(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(text_agent_learner, "reported_minibatches", slow_minibatches)  # the local learner
    algo = keychest_config().reporting(progress_interval_s=0.05).build_algo()
    try:
        initial = learner_weights(algo)
        results = [algo.train() for _ in range(2)]
        last = results[-1]
        runners, learner = last["env_runners"], last["learners"]["default_policy"]

        for key in (
            "success_rate",
            "invalid_action_rate",
            "episode_len_mean",
            "episode_return_mean",
            "generated_tokens_per_s",
            "num_generated_tokens",
            "success_rate_smoothed",
            "invalid_action_rate_smoothed",
            "length_cut_rate_smoothed",
            "prompt_cut_rate_smoothed",
            "episode_len_mean_smoothed",
            "episode_return_mean_smoothed",
        ):
            assert np.isfinite(runners[key]), key
        # RLlib's default window (100 episodes) holds both iterations (as many episodes each).
        both = [result["env_runners"]["episode_len_mean"] for result in results]
        assert runners["episode_len_mean_smoothed"] == pytest.approx(np.mean(both))
        assert 0 <= runners["success_rate_by_task"]["keychest"] <= 1
        assert 1 <= runners["episode_len_mean"] <= 4
        assert runners["num_episodes"] == GROUPS * GROUP_SIZE

        for key in (
            "advantage_mean",
            "advantage_std",
            "advantage_abs_mean",
            "advantage_min",
            "advantage_max",
            "advantage_zero_frac",
            "level1_group_size_mean",
            "level2_singleton_frac",
            "level3_group_size_mean",
            "all_levels_singleton_frac",
            "entropy",
            "policy_loss",
            "clip_frac",
            "dual_clip_frac",
            "ratio_mean",
            "advantage_estimator_s",
            "advantage_connector_s",
            "reference_logp_s",
            "gradients_default_optimizer_global_norm",
        ):
            assert np.isfinite(learner[key]), key
        assert learner["num_groups"] == GROUPS
        assert learner["episodes_per_group_min"] == learner["episodes_per_group_max"] == GROUP_SIZE
        assert learner["level1_group_size_mean"] >= GROUP_SIZE  # every first step shares the start
        assert learner["entropy"] > 0
        assert learner["kl"] > 0  # the policy moved away from the reference in iteration 1
        assert learner["logp_gap_vs_sampler"] < 1e-4  # sampler and learner score tokens alike
        assert learner["num_optimizer_steps"] >= 1
        for phase in ("sampling", "learner_update", "weight_sync"):
            assert last["iteration_seconds"][phase] > 0
        assert last["num_groups_sampled"] == GROUPS and runners["generated_tokens_per_s"] > 0
        assert "generated_tokens_per_s" not in last  # reported once, by the env runners (0.2.0)

        trained = learner_weights(algo)
        assert_policy_moved(initial, trained, lr=LR, optimizer_steps=optimizer_steps(*results))
        runner_weights = algo.env_runner_group.foreach_env_runner(
            lambda er: er.module.get_state(), local_env_runner=False
        )[0]
        assert not any(k.startswith("ref_lm.") for k in runner_weights)  # the reference stays on learners
        policy = {k: v for k, v in trained.items() if not k.startswith("ref_lm.")}
        assert max_abs_diff(policy, runner_weights) == 0.0  # the runners sample with the new weights
    finally:
        algo.stop()
    assert_progress_lines(capsys.readouterr().out.splitlines())


def assert_progress_lines(printed: list[str]) -> None:
    """The progress lines (every 0.05 s) of the second iteration (the first may wait for the board):
    the remote runner's episodes and tokens and the learner's minibatches reach them."""
    lines = [line for line in printed if line.startswith("iter 2 ")]
    sampling = [
        re.fullmatch(
            rf"iter 2 sampling: (\d+)/{GROUP_SIZE * GROUPS} episodes, ([\d,]+) tokens generated, "
            r"[\d,]+ tokens/s, \d+ s",
            line,
        )
        for line in lines
    ]
    assert any(match and int(match[1]) > 0 and match[2] != "0" for match in sampling), lines
    learning = [
        re.fullmatch(r"iter 2 learning: (preparing the batch|pass 1/1, minibatch \d/\d), \d+ s", line)
        for line in lines
    ]
    assert any(learning), lines
    assert all(m or n for m, n in zip(sampling, learning, strict=True)), lines


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_estimator_switch_runs_an_iteration(estimator: str) -> None:
    """(HGPO itself runs in the test above.) Local runner and learner: no actors to start."""
    algo = keychest_config(remote_runners=0, estimator=estimator, kl_coeff=0.0).build_algo()
    try:
        learner = algo.train()["learners"]["default_policy"]
        levels = {k for k in learner if k.startswith("level")}
        gigpo_levels = {"level1_group_size_mean", "level1_singleton_frac"}
        assert levels == (set() if estimator == "grpo" else gigpo_levels)
        assert learner["num_groups"] == GROUPS and np.isfinite(learner["advantage_abs_mean"])
        assert "kl" not in learner and "reference_logp_s" not in learner  # kl_coeff=0: no reference
        assert not hasattr(algo.learner_group._learner.module["default_policy"], "ref_lm")
    finally:
        algo.stop()


def test_an_algorithm_built_outside_tune_leaves_no_empty_log_directory() -> None:
    """Ray makes a dated directory in ~/ray_results for each algorithm built outside Tune; stopping
    removes it when empty and keeps it when something was written there."""
    from ray.train.constants import DEFAULT_STORAGE_PATH

    logdirs = []
    for write_a_file in (True, False):
        algo = keychest_config(remote_runners=0).build_algo()
        logdir = Path(algo.logdir)
        assert logdir.parent == Path(DEFAULT_STORAGE_PATH) and logdir.is_dir()
        if write_a_file:
            (logdir / "notes.txt").write_text("mine")
        algo.stop()
        logdirs.append(logdir)
    kept, removed = logdirs
    assert (kept / "notes.txt").read_text() == "mine"
    assert not removed.exists()


def test_grouped_runner_samples_whole_groups_in_lock_step() -> None:
    config = keychest_config(remote_runners=0)
    runner = GroupedEnvRunner(config=config, worker_index=1)
    calls = []
    generate = runner.module.forward_exploration
    runner.module.forward_exploration = lambda batch, **kw: (
        calls.append(len(batch[PROMPT_IDS])) or generate(batch, **kw)
    )
    episodes = runner.sample(num_episodes=3 * GROUP_SIZE)  # 2 groups per wave: a wave of 2, then 1

    groups: dict[str, list] = {}
    for ep in episodes:
        groups.setdefault(ep.get_infos(0)[GROUP_ID], []).append(ep)
        assert ep.is_done and len(ep.get_extra_model_outputs(PROMPT_IDS)) == len(ep)
    assert sorted(map(len, groups.values())) == [GROUP_SIZE] * 3
    seeds = [{ep.get_infos(0)[TASK_SEED] for ep in members} for members in groups.values()]
    assert all(len(s) == 1 for s in seeds) and len(set.union(*seeds)) == 3  # one task per group
    assert all(len({ep.get_observations(0) for ep in members}) == 1 for members in groups.values())
    # One generation per turn for all active members: wave 1 (4 envs) then wave 2 (2 envs).
    wave1 = [len(e) for e in episodes[: 2 * GROUP_SIZE]]
    wave2 = [len(e) for e in episodes[2 * GROUP_SIZE :]]
    expected = [sum(n > t for n in wave1) for t in range(max(wave1))]
    expected += [sum(n > t for n in wave2) for t in range(max(wave2))]
    assert calls == expected
    assert runner.get_metrics()["num_episodes"] == 3 * GROUP_SIZE

    with pytest.raises(ValueError, match="multiple of group_size"):
        runner.sample(num_episodes=GROUP_SIZE + 1)


def test_a_runner_with_system_turns_samples_prompts_that_open_with_the_task_as_a_system_turn() -> None:
    """prompt_turns='system_user' through RLlib's pipeline: every step's prompt ids, as the episode
    keeps them for the learner, are the system turn (the same at every step), then the user turn."""
    from envs.keychest.env import TASK

    runner = GroupedEnvRunner(
        config=keychest_config(remote_runners=0, prompt_turns="system_user"), worker_index=1
    )
    episodes = runner.sample(num_episodes=GROUP_SIZE)
    tokenizer = runner.module.tokenizer
    opening = f"<|im_start|>system\nTask: {TASK}<|im_end|>\n<|im_start|>user\n"
    steps = 0
    for episode in episodes:
        for step, ids in enumerate(episode.get_extra_model_outputs(PROMPT_IDS)):
            text = tokenizer.decode([i for i in ids.tolist() if i != tokenizer.pad_token_id])
            assert text.startswith(opening) and text.endswith("<|im_end|>\n<|im_start|>assistant\n"), text
            assert text[len(opening) :].startswith("History:\n" if step else "Now: "), text  # K = 2
            steps += 1
    assert steps > len(episodes)  # some steps show history
    with pytest.raises(ValueError, match="num_episodes"):
        runner.sample(num_timesteps=10)
    runner.stop()


def test_two_learners_each_receive_whole_groups() -> None:
    # Per learner: minibatches of 4 rows in 2 micro-batches, so DDP's no_sync path runs too.
    config = keychest_config(groups_per_iteration=5, minibatch_size=8, micro_batch_size=2)
    algo = config.learners(num_learners=2).build_algo()
    try:
        learner = algo.train()["learners"]["default_policy"]
        assert learner["num_groups"] == 5  # summed over both learners
        assert learner["episodes_per_group_min"] == learner["episodes_per_group_max"] == GROUP_SIZE
        states = algo.learner_group.foreach_learner(lambda lr: lr.module["default_policy"].get_state())
        weights = [r.get() for r in states.result_or_errors]
        assert len(weights) == 2 and max_abs_diff(weights[0], weights[1]) == 0.0  # DDP kept them equal
        # One of them says what both share (the emulated-bf16 note, the per-step gradient norms).
        firsts = algo.learner_group.foreach_learner(lambda lr: lr.first_learner)
        assert sorted(r.get() for r in firsts.result_or_errors) == [False, True]
    finally:
        algo.stop()


def test_checkpoints_restore_weights_and_optimizer_and_are_never_overwritten(tmp_path: Any) -> None:
    """``save``/``restore`` are the Trainable calls Tune makes to checkpoint and to resume a trial;
    ``from_checkpoint`` rebuilds a new algorithm from the pickled config."""
    algo = keychest_config().build_algo()
    try:
        algo.train()
        first = algo.save(str(tmp_path / "first")).checkpoint.path
        saved_weights, saved_optim = learner_weights(algo), optimizer_state(algo)
        second_result = algo.train()
        second = algo.save(str(tmp_path / "second")).checkpoint.path
        assert first != second
        assert_policy_moved(
            saved_weights, learner_weights(algo), lr=LR, optimizer_steps=optimizer_steps(second_result)
        )
        algo.restore(first)  # back to the first checkpoint, which the second save left intact
        assert algo.iteration == 1
        assert_same_tree(learner_weights(algo), saved_weights)
        assert_same_tree(optimizer_state(algo), saved_optim)
        assert algo.train()["training_iteration"] == 2
    finally:
        algo.stop()

    restored = HGPO.from_checkpoint(first)
    try:
        assert restored.iteration == 1
        assert_same_tree(learner_weights(restored), saved_weights)
        assert_same_tree(optimizer_state(restored), saved_optim)
        result = restored.train()
        assert result["training_iteration"] == 2
        assert result["learners"]["default_policy"]["num_groups"] == GROUPS
    finally:
        restored.stop()


def test_crashed_env_runner_is_restarted_and_training_goes_on() -> None:
    """RLlib restarts the dead runner's actor; HGPO waits for it within the iteration, and it comes
    back with the current weights (``restore_env_runners``) and its task generator's position."""
    algo = keychest_config().fault_tolerance(restart_failed_env_runners=True).build_algo()
    try:
        algo.train()
        runners = algo.env_runner_group
        sampled = algo.train()["num_env_steps_sampled_lifetime"]
        before = learner_weights(algo)
        runners.foreach_env_runner(lambda er: os._exit(1), local_env_runner=False)  # kill the process
        result = algo.train()
        assert runners.num_remote_worker_restarts() >= 1 and runners.num_healthy_remote_workers() == 1
        assert result["num_groups_sampled"] == GROUPS and result["num_consecutive_failed_iterations"] == 0
        assert result["learners"]["default_policy"]["num_groups"] == GROUPS
        assert result["num_env_steps_sampled_lifetime"] > sampled
        assert_policy_moved(before, learner_weights(algo), lr=LR, optimizer_steps=optimizer_steps(result))
        started = runners.foreach_env_runner(lambda er: er._num_groups_started, local_env_runner=False)
        assert started == [3 * GROUPS]  # the restarted runner went on from its 2nd iteration's tasks
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("env", "env_config"),
    [("alfworld", {"max_steps": 3, "source": "generated"}), ("webshop", {"max_steps": 3})],
)
def test_real_env_trains_two_iterations(env: str, env_config: dict[str, Any]) -> None:
    """The real ALFWorld engine on generated games and WebShop on the shipped catalog (no download),
    local runner and learner: whole groups sampled, an update that moves the policy."""
    config = keychest_config(remote_runners=0, max_prompt_tokens=512).environment(env, env_config=env_config)
    algo = config.build_algo()
    try:
        initial = learner_weights(algo)
        results = [algo.train() for _ in range(2)]
        runners, learner = results[-1]["env_runners"], results[-1]["learners"]["default_policy"]
        assert runners["num_episodes"] == GROUPS * GROUP_SIZE and 1 <= runners["episode_len_mean"] <= 3
        assert runners["num_env_steps_sampled_lifetime"] == results[-1]["num_env_steps_sampled_lifetime"] > 0
        assert learner["num_groups"] == GROUPS and learner["level1_group_size_mean"] >= GROUP_SIZE
        assert learner["logp_gap_vs_sampler"] < 1e-4 and learner["kl"] > 0  # moved from the reference
        assert_policy_moved(initial, learner_weights(algo), lr=LR, optimizer_steps=optimizer_steps(*results))
    finally:
        algo.stop()


def test_lr_schedule_is_applied_and_evaluation_runs_during_training() -> None:
    schedule = [[0, 1e-3], [200, 1e-5]]
    config = keychest_config(lr=schedule, weighting="paper", base_group=True, step_advantage_w=0.5)
    config.evaluation(evaluation_interval=1, evaluation_duration=3, evaluation_num_env_runners=1)
    algo = config.build_algo()
    try:
        connectors = algo.learner_group._learner._learner_connector.connectors
        (advantages,) = [c for c in connectors if isinstance(c, GroupAdvantages)]
        assert (advantages.settings.weighting, advantages.settings.base_group) == ("paper", True)
        assert advantages.settings.step_advantage_w == 0.5
        results = [algo.train() for _ in range(2)]
        rates = [r["learners"]["default_policy"]["default_optimizer_learning_rate"] for r in results]
        steps = [r["num_env_steps_sampled_lifetime"] for r in results]
        assert 1e-3 > rates[0] > rates[1] > 1e-5
        np.testing.assert_allclose(rates, np.interp(steps, *zip(*schedule, strict=True)), rtol=1e-5)
        for result in results:
            evaluation = result["evaluation"]["env_runners"]
            assert evaluation["num_episodes"] == 3 and 0 <= evaluation["success_rate"] <= 1
    finally:
        algo.stop()
