"""Evaluating a multi-agent text system (a team of LLM roles, docs/drmas.md) from its checkpoint
(:func:`evaluate_team`, which ``rllib evaluate`` runs for a team checkpoint or a team of warm starts).

The team plays through the runner it was trained with (:class:`GroupedMultiAgentEnvRunner`: the same
roles-to-modules mapping, per-role prompts and connectors), at each module's ``eval_temperature``, on
the protocol's task seeds; each task ``samples`` times. Reported per split and seed: team success
(avg@k: the mean over all samples), pass@k (the share of tasks with at least one success among their
k samples; Dr. MAS reports both), WebShop's score where the env reports one, turns, each agent's
invalid-answer rate, and the shares of the team's turns whose answer was length-cut and whose prompt
was cut (counted from the modules' flags as in training).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule

import envs
from hgpo_rllib.columns import TASK_SEED
from hgpo_rllib.env_runner.grouped_multi_agent_env_runner import GroupedMultiAgentEnvRunner
from hgpo_rllib.env_runner.metrics_callback import episode_outcome
from hgpo_rllib.evaluation.output_dir import (
    CUT_RATE_COLUMNS,
    eval_splits,
    mean_cut_rates,
    play_all,
    write_tables,
)
from hgpo_rllib.evaluation.policy_loading import (
    CTOR_FILE,
    MODULE_DIR,
    MODULES_DIR,
    check_trained_env,
    load_checkpoint_config,
)
from hgpo_rllib.evaluation.rollout import cut_rates
from hgpo_rllib.evaluation.throughput import Throughput


def team_runner(
    config: AlgorithmConfig, env_config: dict[str, Any], checkpoint: Path | None, batch_size: int
) -> GroupedMultiAgentEnvRunner:
    """A local runner of ``config`` on ``env_config`` with ``batch_size`` sub-envs, sampling with the
    checkpoint's modules (their inference parts: no reference model), or with the modules ``config``
    builds when ``checkpoint`` is None (a team of warm starts)."""
    config = (
        config.copy(copy_frozen=False)
        .environment(env_config=env_config)
        .env_runners(num_envs_per_env_runner=batch_size, num_env_runners=0)
    )
    runner = GroupedMultiAgentEnvRunner(config=config)
    if checkpoint is None:
        return runner
    trained = MultiRLModule.from_checkpoint(checkpoint / MODULES_DIR)
    runner.module.set_state(
        {mid: trained[mid].get_state(inference_only=True) for mid in runner.module.keys()}
    )
    return runner


def team_records(episodes: Sequence[Any], samples: int) -> list[dict[str, Any]]:
    """One record per episode: task seed, sample index, team outcome, the shares of cut turns over
    all agents, each agent's turns and invalid rate (episodes in
    :meth:`GroupedMultiAgentEnvRunner.play_tasks`' order)."""
    records = []
    for index, episode in enumerate(episodes):
        outcome = episode_outcome(episode)
        first = next(iter(episode.agent_episodes.values())).get_infos()[0]
        record = {
            "task_seed": int(first[TASK_SEED]),
            "sample": index % samples,
            "task_type": outcome.task_type,
            "won": outcome.won,
            "score": outcome.won if outcome.score is None else outcome.score,
            "steps": sum(outcome.turns.values()),
            "invalid_rate": outcome.invalid_rate or 0.0,
            **cut_rates(outcome),
        }
        for agent, turns in outcome.turns.items():
            record[f"turns_{agent}"] = turns
            record[f"invalid_rate_{agent}"] = outcome.invalid[agent] / turns if turns else float("nan")
        records.append(record)
    return records


def play_team(
    runner: GroupedMultiAgentEnvRunner, task_seeds: Sequence[int], samples: int, seed: int
) -> list[dict[str, Any]]:
    """The team's records on ``task_seeds``, ``samples`` episodes each, the sampler seeded by ``seed``."""
    torch.manual_seed(seed)
    return team_records(runner.play_tasks(task_seeds, samples, explore=False), samples)


def summarize_team(episodes: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (split, policy, seed): avg@k (success), pass@k, score, turns, invalid rates, the shares
    of length-cut answers and cut prompts; and their mean ± std over seeds."""
    keys = [k for k in ("split", "policy", "seed") if k in episodes]
    invalid = [c for c in episodes if c.startswith("invalid_rate")]
    per_task = episodes.groupby([*keys, "task_seed"])["won"].max().groupby(keys).mean()
    per_seed = episodes.groupby(keys).agg(
        success=("won", "mean"),
        score=("score", "mean"),
        steps=("steps", "mean"),
        **{c: (c, "mean") for c in invalid},
    )
    per_seed[list(CUT_RATE_COLUMNS)] = mean_cut_rates(episodes, keys)
    per_seed.insert(1, "pass_at_k", per_task)
    per_seed[["success", "pass_at_k", "score"]] *= 100
    per_seed = per_seed.reset_index()
    grouped = per_seed.drop(columns="seed").groupby(keys[:-1], sort=False)
    summary = grouped.mean().round(2).astype(str) + " ± " + grouped.std(ddof=0).round(2).astype(str)
    return per_seed.round(3), summary.reset_index()


def is_team_checkpoint(path: Path) -> bool:
    """An algorithm checkpoint of a multi-agent team (its modules are not just ``default_policy``)."""
    return (path / CTOR_FILE).is_file() and (path / MODULES_DIR).is_dir() and not (path / MODULE_DIR).is_dir()


def evaluate_team(
    checkpoint: Path,
    warm_started: AlgorithmConfig | None,
    *,
    env: str | None,
    split: str | None,
    seeds: Sequence[int],
    episodes: int | None,
    output: str | Path,
    env_config: dict[str, Any],
    batch_size: int,
    samples: int,
    reuse: Sequence[str | Path],
) -> pd.DataFrame:
    """:func:`~hgpo_rllib.evaluation.protocol.evaluate` for a team checkpoint, or for the team
    ``warm_started`` from the warm-start folder ``checkpoint``: the team plays every task ``samples``
    times."""
    config = warm_started or load_checkpoint_config(checkpoint)
    env_name = envs.env_name(str(config.env))
    check_trained_env(checkpoint, env or env_name, env_name, dict(config.env_config))
    merged = {**dict(config.env_config), **env_config}
    envs.check_env_config(env_name, merged)
    team_class = envs.env_class(env_name, merged)
    facts = envs.env_facts(env_name, merged).evaluation  # a built-in team's are its game's
    splits = eval_splits(env_name, facts, split, merged)
    game_config = {k: v for k, v in merged.items() if k not in team_class.team_settings()}
    runners: dict[str | None, Any] = {}
    throughput = Throughput(batch_size)

    def play_split(
        split_config: dict[str, Any], seed: int, tasks: Sequence[int], *_: object
    ) -> list[dict[str, Any]]:
        # A team's tasks come back all at once (``samples`` episodes each): none is reported early.
        key = split_config.get("split")
        if key not in runners:
            trained = None if warm_started else checkpoint  # warm starts: the config's own modules
            started = time.perf_counter()
            runners[key] = team_runner(config, split_config, trained, batch_size)
            throughput.exclude(time.perf_counter() - started)  # loading the modules is not play
        return play_team(runners[key], tasks, samples, seed)

    settings = {
        "env": env_name,
        "episodes": episodes,
        "samples": samples,
        "env_config": merged,
        "checkpoint": str(checkpoint),
    }
    players = {"checkpoint": play_split}
    try:
        table, lines = play_all(
            players,
            facts,
            lambda game_settings: team_class.game_class(**game_settings),
            splits,
            merged,
            seeds,
            episodes,
            output,
            settings,
            game_config,
            reuse,
            throughput=throughput,
        )
    finally:
        for runner in runners.values():
            runner.stop()
    out_dir = Path(output).expanduser()
    return write_tables(out_dir, env_name, lines, seeds, *summarize_team(table), throughput)
