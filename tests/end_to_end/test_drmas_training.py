"""Multi-agent systems train on RLlib's multi-agent API (docs/drmas.md): the KeyChest planner/executor
team, one LLM per role or one shared, in-process; and the WebShop example through ``rllib train file``
and ``rllib evaluate`` (``slow``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import TEAM_ROLES as ROLES
from helpers import TUNED, crashing_tuned_example, keychest_team_config, sft_args
from ray.rllib.policy.policy import PolicySpec
from safetensors.torch import load_file

from envs.common.spaces import TextSpace
from hgpo_rllib import cli
from hgpo_rllib.columns import group_id_of
from hgpo_rllib.env_runner.grouped_multi_agent_env_runner import GroupedMultiAgentEnvRunner
from hgpo_rllib.experiments.settings import RunSettings
from hgpo_rllib.experiments.teams import SHARED_MODULE_ID, team_config, team_warm_start_config

pytestmark = pytest.mark.usefixtures("ray_session")

WEBSHOP_ROLES = ("verifier", "searcher", "buyer")
TEXT = TextSpace()


#: What keychest_team_config fixes: 2 groups of 2 episodes, each of at most 3 * max_steps = 12 turns
#: (the team's max_turns); the planner opens every episode and the executor answers it, so each role
#: has at least one turn per episode.
EPISODES = 4
MAX_TURNS = 12


def assert_every_turn_trains_once(result: dict[str, Any], rows: dict[str, int]) -> None:
    """The learners' rows per role add up to the turns the runners sampled (every turn of the 4
    episodes is one row, trained once), and each role acted in every episode."""
    runners, learners = result["env_runners"], result["learners"]
    assert runners["num_episodes"] == EPISODES
    total = learners["__all_modules__"]["num_step_rows"]
    assert sum(rows.values()) == total == runners["num_env_steps_sampled"]
    assert 2 * EPISODES <= total <= MAX_TURNS * EPISODES
    assert all(count >= EPISODES for count in rows.values()), rows


def module_weights(algo: Any, module_id: str) -> dict[str, torch.Tensor]:
    module = algo.learner_group._learner.module[module_id]
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_one_llm_per_role_each_trained_on_its_own_turns_and_restored(tmp_path: Path) -> None:
    config = keychest_team_config(shared=False).rl_module(
        algorithm_config_overrides_per_module={"planner": {"lr": 1e-4}}
    )
    assert config.env_runner_cls is GroupedMultiAgentEnvRunner
    algo = config.build_algo()
    try:
        before = {role: module_weights(algo, role) for role in ROLES}
        result = algo.train()
        learners = result["learners"]
        runners = result["env_runners"]
        for role in ROLES:
            # Each module updated on its own role's rows, with its own optimizer and lr.
            others = [f"agent_{other}_num_step_rows" for other in ROLES if other != role]
            assert not any(key in learners[role] for key in others)
            assert learners[role]["num_optimizer_steps"] == 1
            assert np.isfinite(learners[role]["gradients_default_optimizer_global_norm"])
            after = module_weights(algo, role)
            assert any(not torch.equal(v, after[k]) for k, v in before[role].items())
            assert set(runners["invalid_action_rate_by_agent"]) >= {role}
        assert learners["planner"]["default_optimizer_learning_rate"] == pytest.approx(1e-4)
        assert learners["executor"]["default_optimizer_learning_rate"] == pytest.approx(1e-3)
        # Whole groups of team episodes: 2 groups of 2.
        assert learners["__all_modules__"]["num_groups"] == 2
        assert_every_turn_trains_once(result, {r: learners[r][f"agent_{r}_num_step_rows"] for r in ROLES})
        algo.save_to_path(str(tmp_path / "ckpt"))
        saved = {role: module_weights(algo, role) for role in ROLES}
    finally:
        algo.stop()
    restored = keychest_team_config(shared=False).build_algo()
    try:
        restored.restore_from_path(str(tmp_path / "ckpt"))
        for role in ROLES:
            weights = module_weights(restored, role)
            assert all(torch.equal(v, weights[k]) for k, v in saved[role].items())
        # The restored runner samples with the restored weights and trains on.
        assert restored.train()["learners"]["executor"]["num_optimizer_steps"] == 1
    finally:
        restored.stop()
    # `rllib evaluate` plays the team: 3 tasks, 2 samples each, with its own per-role prompts.
    out = tmp_path / "eval"
    args = [str(tmp_path / "ckpt"), "--seeds", "5", "--episodes", "3", "--samples", "2", "--output", str(out)]
    assert cli.main(["evaluate", *args, "--batch-size", "4"]) == 0
    episodes = pd.read_csv(out / "episodes.csv")
    assert (
        len(episodes) == 6 and episodes.groupby("task_seed")["sample"].apply(sorted).tolist() == [[0, 1]] * 3
    )
    assert episodes["task_seed"].tolist() == sorted(episodes["task_seed"])
    for role in ROLES:
        assert (episodes[f"turns_{role}"] > 0).all()
        assert episodes[f"invalid_rate_{role}"].between(0, 1).all()
    (row,) = pd.read_csv(out / "per_seed.csv").to_dict("records")
    assert row["success"] == 100 * episodes["won"].mean()
    assert row["pass_at_k"] == 100 * episodes.groupby("task_seed")["won"].max().mean()
    assert cli.main(["evaluate", *args]) == 0  # a rerun finds everything played


def test_one_shared_llm_serves_every_role() -> None:
    algo = keychest_team_config(shared=True).build_algo()
    try:
        assert set(algo.learner_group._learner.module.keys()) == {SHARED_MODULE_ID}
        result = algo.train()
        shared = result["learners"][SHARED_MODULE_ID]
        assert_every_turn_trains_once(result, {r: shared[f"agent_{r}_num_step_rows"] for r in ROLES})
        assert shared["num_optimizer_steps"] == 1
    finally:
        algo.stop()


@pytest.mark.slow  # 100-200 s each: Tune, a crash and a resume, three tiny LLMs; in-process above by default
@pytest.mark.parametrize("sharing", ["separate", "shared"])
def test_rllib_train_file_drmas_webshop_checkpoints_resumes_and_evaluates(
    sharing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's Dr. MAS command on CPU: the three WebShop roles, one LLM per role or one shared;
    a crash in iteration 2 resumes from the checkpoint of iteration 1, and `rllib evaluate` plays the
    final checkpoint's team on test goals."""
    path, marker = crashing_tuned_example(
        tmp_path, "drmas_webshop.py", stop_iteration=2, crash_at=2, checkpoint_freq=1
    )
    args = ["train", "file", str(path), "--llm-sharing", sharing, "--storage-path", str(tmp_path / "out")]
    args += ["--max-failures", "0"]
    assert cli.main(args) == 1 and marker.exists()
    assert cli.main([*args, "--resume"]) == 0
    (trial,) = [d for d in (tmp_path / "out").glob("drmas_webshop_*/*") if d.is_dir()]
    results = pd.read_json(trial / "result.json", lines=True)
    assert results["training_iteration"].tolist() == [1, 2]  # 2 from the checkpoint of 1
    learners = results["learners"].iloc[-1]
    modules = [SHARED_MODULE_ID] if sharing == "shared" else list(WEBSHOP_ROLES)
    assert set(learners) - {"__all_modules__"} == set(modules)
    acted = {}  # the verifier is asked every turn; a random model's answers rarely route further
    for role in WEBSHOP_ROLES:  # a role's turns train its own module (or the shared one)
        module = learners[SHARED_MODULE_ID if sharing == "shared" else role]
        acted[role] = module.get(f"agent_{role}_num_step_rows", 0)
        assert (module.get("num_optimizer_steps", 0) >= 1) == (acted[role] > 0 or sharing == "shared")
    assert acted["verifier"] > 0
    final = max(trial.glob("checkpoint_*"))
    out = tmp_path / "eval"
    evaluate = ["evaluate", str(final), "--seeds", "1", "--episodes", "2", "--output", str(out)]
    assert cli.main(evaluate) == 0
    episodes = pd.read_csv(out / "episodes.csv")
    assert len(episodes) == 2 and episodes["score"].between(0, 1).all()
    assert (episodes["split"] == "test").all()  # WebShop's test goals
    assert episodes["invalid_rate_verifier"].between(0, 1).all()
    assert (episodes["turns_verifier"] >= 1).all()  # asked first on every game turn


def test_a_team_starts_from_a_warm_start_per_role(tmp_path: Path) -> None:
    """``--warm-start DIR`` on a team example: ``rllib sft --role R --output <dir>/R`` per role,
    each module, in the learner and in the runner that samples, holds exactly its own role's warm
    start, and ``rllib evaluate DIR`` plays the same folders; a missing or mismatched role is refused
    by name. (The micro warm starts of 2 demonstrations write byte noise, counted invalid like any
    output with control characters, so their invalid rates say nothing here: the weights do.)"""
    team = tmp_path / "team"
    for role in ROLES:
        args = sft_args(team / role, "--role", role)
        args[args.index("keychest")] = "keychest_team"
        assert cli.main(args) == 0
    settings = RunSettings(warm_start=str(team))
    config = team_config("keychest_team", {"max_steps": 4}, settings)
    config.env_runners(num_env_runners=0, num_envs_per_env_runner=4, create_local_env_runner=True)
    algo = config.training(group_size=2, groups_per_iteration=2).build_algo()
    try:
        for role in ROLES:
            warm_start = load_file(team / role / "model.safetensors")
            for modules in (algo.learner_group._learner.module, algo.env_runner.module):
                weights = modules[role].lm.state_dict()
                assert all(torch.equal(weights[k], v.to(weights[k].dtype)) for k, v in warm_start.items())
        result = algo.train()
        assert all(result["learners"][role]["num_optimizer_steps"] == 1 for role in ROLES)
        assert set(result["env_runners"]["invalid_action_rate_by_agent"]) == set(ROLES)
    finally:
        algo.stop()
    # `rllib evaluate` takes the team warm-start folder as it is (team success, per-agent invalid rates),
    # playing the modules of the config it reads from the folder: each role's own warm start.
    evaluated = team_warm_start_config(team).rl_module_spec.rl_module_specs
    assert {role: spec.model_config["model"] for role, spec in evaluated.items()} == {
        role: str(team / role) for role in ROLES
    }
    out = tmp_path / "evaluation"
    args = ["evaluate", str(team), "--seeds", "0", "--episodes", "2", "--output", str(out)]
    assert cli.main([*args, "--baselines", ""]) == 0
    episodes = pd.read_csv(out / "episodes.csv")
    assert len(episodes) == 2 and (episodes["policy"] == "checkpoint").all()
    assert episodes[[f"invalid_rate_{role}" for role in ROLES]].stack().between(0, 1).all()
    played = json.loads((out / "throughput.json").read_text())["policies"]["checkpoint"]
    assert played["episodes"] == 2 and played["generated_tokens"] is None  # a team's runner counts none
    assert team_warm_start_config(team / "planner") is None  # one role alone is no team
    with pytest.raises(
        ValueError, match="is no warm start; build it with rllib sft --env keychest_team --output"
    ):
        team_config("keychest_team", {}, dataclasses.replace(settings, llm_sharing="shared"))
    # the two roles' warm starts swapped
    (team / "planner").rename(team / "swap")
    (team / "executor").rename(team / "planner")
    (team / "swap").rename(team / "executor")
    with pytest.raises(
        ValueError, match="role 'executor'; this module needs env 'keychest_team', role 'planner'"
    ):
        team_config("keychest_team", {}, settings)


@pytest.mark.slow  # a few minutes: vLLM engines per module (when vllm is installed), an evaluation runner
def test_the_team_rehearsal_trains_with_an_evaluation_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--preset rehearsal`` on the Dr. MAS WebShop example: the paper preset's structure at CPU
    size (bf16, vLLM runners, an evaluation runner, a checkpoint every iteration) with one small LLM
    per role on one learner."""
    args = ["train", "file", str(TUNED / "drmas_webshop.py"), "--preset", "rehearsal"]
    args += ["--storage-path", str(tmp_path)]
    assert cli.main([*args, "--stop", '{"training_iteration": 2}']) == 0
    (trial,) = [d for d in tmp_path.glob("drmas_webshop_*/*") if d.is_dir()]
    results = pd.read_json(trial / "result.json", lines=True)
    assert results["training_iteration"].tolist() == [1, 2]
    assert results["evaluation"].iloc[-1]["env_runners"]["num_episodes"] == 4
    config = results["config"].iloc[-1]
    assert config["num_learners"] == 1 and config["_model_config"]["torch_dtype"] == "bfloat16"
    assert set(results["learners"].iloc[-1]) >= set(WEBSHOP_ROLES)
    assert len(list(trial.glob("checkpoint_*"))) == 2


def test_two_learners_train_a_team_whose_module_one_learner_lacks() -> None:
    """Two DDP learners: a module with rows on one learner only is trained with the other learner
    joining its all-reduce on idle rows (no hang; the replicas stay equal), and a module no learner
    has rows of is left alone by both."""

    def first_group_executor_apart(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
        """Roles to their own modules, but the executor of the first rollout group (``...-g0``) to a
        module of its own: its rows then sit on one learner only, in the first iteration only
        (nested, so Ray pickles it by value: the learner actors cannot import this test module)."""
        if agent_id == "executor" and episode is not None and group_id_of(episode).endswith("-g0"):
            return "executor_g0"
        return str(agent_id)

    turns: list[tuple[str, dict[str, int]]] = []  # each sampled episode's group and turns per role

    def count_turns(*, episode: Any, **kwargs: Any) -> None:
        """Runs in the local env runner, in this process."""
        turns.append((group_id_of(episode), {role: len(episode.agent_episodes[role]) for role in ROLES}))

    def trained_rows() -> dict[str, int]:
        """Each module's rows in this iteration: its turns in the episodes sampled (the config fixes 4
        groups of 2), the executor's in group 0 apart."""
        assert len(turns) == 8 and len({group for group, _ in turns}) == 4
        rows = dict.fromkeys(("planner", "executor", "executor_g0"), 0)
        for group, counts in turns:
            rows["planner"] += counts["planner"]
            rows["executor_g0" if group.endswith("-g0") else "executor"] += counts["executor"]
        turns.clear()
        return rows

    config = (
        keychest_team_config(shared=False)
        .multi_agent(
            # The extra module's spaces are given: RLlib infers spaces from the roles' default mapping.
            policies={**{role: PolicySpec() for role in ROLES}, "executor_g0": PolicySpec(None, TEXT, TEXT)},
            policy_mapping_fn=first_group_executor_apart,
        )
        .env_runners(num_envs_per_env_runner=8)
        .learners(num_learners=2, num_cpus_per_learner=0.5)
        .training(groups_per_iteration=4, minibatch_size=8, micro_batch_size=4)
        .callbacks(on_episode_end=count_turns)
    )
    algo = config.build_algo()

    def weights(learner: Any) -> dict[str, float]:
        module = learner.module["executor_g0"].unwrapped()
        return {k: float(v.double().sum()) for k, v in module.state_dict().items()}

    try:
        first = algo.train()["learners"]
        rows = trained_rows()
        assert rows["executor_g0"] >= 2  # group 0's 2 episodes: 1 answer or more each
        for module_id, count in rows.items():
            role = module_id.split("_")[0]
            assert first[module_id][f"agent_{role}_num_step_rows"] == count
        # Every minibatch of executor_g0 idle on one of the 2 learners: half the learners' mean steps.
        assert first["executor_g0"]["idle_minibatches"] == first["executor_g0"]["num_optimizer_steps"] / 2
        assert first["planner"]["idle_minibatches"] == 0
        replicas = [r.get() for r in algo.learner_group.foreach_learner(weights)]
        assert replicas[0] == replicas[1]
        second = algo.train()["learners"]
        rows = trained_rows()  # groups 4-7: none of them is group 0
        assert rows["executor_g0"] == 0
        for module_id in ("planner", "executor"):
            assert second[module_id][f"agent_{module_id}_num_step_rows"] == rows[module_id]
        # RLlib reports a module that trained on no rows in this iteration as NaN.
        assert np.isnan(second["executor_g0"]["agent_executor_num_step_rows"])
        assert [
            r.get() for r in algo.learner_group.foreach_learner(weights)
        ] == replicas  # no rows anywhere: no step
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("training", "steps"),
    [
        ({"minibatch_size": 4, "micro_batch_size": 2}, lambda rows: -(-rows // 4)),
        ({"minibatches_per_module": 2}, lambda rows: min(2, rows)),
    ],
)
def test_each_module_steps_through_its_own_rows(training: dict[str, int], steps: Any) -> None:
    """Minibatches of a module's own rows, each once (RLlib's cyclic minibatches gave every module
    as many steps as the module with the most rows, repeating a smaller one's rows to fill them);
    or Dr. MAS's fixed number of steps per module (``minibatches_per_module``)."""
    algo = keychest_team_config(shared=False).training(**training).build_algo()
    try:
        learners = algo.train()["learners"]
    finally:
        algo.stop()
    rows = {role: learners[role][f"agent_{role}_num_step_rows"] for role in ROLES}
    assert rows["planner"] < rows["executor"]
    for role in ROLES:
        assert learners[role]["num_optimizer_steps"] == steps(rows[role])
        norms = np.atleast_1d(learners[role]["grad_norm_per_step"])
        assert len(norms) == steps(rows[role])
        # RLlib's own metric is the module's last step's, not a later step it was absent from.
        assert norms[-1] == pytest.approx(learners[role]["gradients_default_optimizer_global_norm"])
