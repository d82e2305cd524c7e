"""The paper's evaluation protocol as one function and one command (``rllib evaluate``).

A policy plays ``episodes`` tasks for each evaluation seed (the paper reports mean ± std over seeds
123, 456 and 789, docs/hgpo_algorithm.md §7). Which splits are played and which columns are reported
beside success is the env's to say (its :class:`~envs.common.facts.EvaluationFacts`): ALFWorld is
evaluated on ``eval_out_of_distribution`` unless told otherwise (``split`` "in", "out" or "all"), by
default on every game of the split, with success per task category; WebShop on its test goals
(0-499), with its score. The tables name the split. A checkpoint's policy samples at its
``eval_temperature`` with the same history-window prompts it was trained on; two baselines come from
the same command: the privileged expert (ALFWorld's planner, WebShop's scripted buyer, KeyChest's
shortest path) and a uniform-random choice among the admissible actions. Tables are written as CSV
and Markdown. A team is evaluated by :mod:`hgpo_rllib.evaluation.team`; the output directory (resume,
reuse, tables) is :mod:`hgpo_rllib.evaluation.output_dir`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

import envs
from envs.common.facts import EvaluationFacts
from hgpo_rllib.evaluation.output_dir import (
    CUT_RATE_COLUMNS,
    Player,
    eval_splits,
    mean_cut_rates,
    play_all,
    write_tables,
)
from hgpo_rllib.evaluation.policy_loading import CheckpointPolicy, policy_weights
from hgpo_rllib.evaluation.rollout import Policy, expert_policy, play, random_policy
from hgpo_rllib.evaluation.team import evaluate_team, is_team_checkpoint
from hgpo_rllib.evaluation.throughput import Throughput

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

DEFAULT_SEEDS = (123, 456, 789)


def summarize(episodes: pd.DataFrame, facts: EvaluationFacts) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (split, policy, seed) metrics, and their mean ± std over seeds: success, steps, invalid
    rate and the shares of length-cut answers and cut prompts (NaN for the baselines), then the env's
    score columns and its success per category (``facts``)."""
    keys = ["split", "policy", "seed"] if "split" in episodes else ["policy", "seed"]
    per_seed = episodes.groupby(keys).agg(
        success=("won", "mean"), steps=("steps", "mean"), invalid_rate=("invalid_rate", "mean")
    )
    per_seed[list(CUT_RATE_COLUMNS)] = mean_cut_rates(episodes, keys)
    for column in facts.score_columns:
        per_seed[column] = episodes.groupby(keys)[column].mean()
    if facts.category_column is not None:
        by_category = episodes.pivot_table(
            index=keys, columns=facts.category_column, values="won", aggfunc="mean"
        )
        for category in facts.categories:
            per_seed[category] = by_category[category] if category in by_category else np.nan
    rate_columns = ["success", *facts.categories, *facts.score_columns]
    per_seed = per_seed.apply(lambda col: col * 100 if col.name in rate_columns else col)
    per_seed = per_seed.reset_index()
    grouped = per_seed.drop(columns="seed").groupby(keys[:-1], sort=False)
    summary = grouped.mean().round(2).astype(str) + " ± " + grouped.std(ddof=0).round(2).astype(str)
    return per_seed.round(3), summary.reset_index()


def evaluation_settings(
    env_name: str,
    episodes: int | None,
    env_config: dict[str, Any],
    checkpoint: Path | None,
    *,
    torch_dtype: str | None = None,
    inference_backend: str | None = None,
) -> dict[str, Any]:
    """The settings record of an evaluation of ``checkpoint`` (resolved; None: baselines only), but for
    its splits: the policy's path, for the reader, and its weights' digest where it has one
    (:func:`~hgpo_rllib.evaluation.policy_loading.policy_weights`), which decides the match instead
    (:func:`~hgpo_rllib.evaluation.output_dir.changed_evaluation`); the dtype and the engine the policy
    is played in where they are not its own (:attr:`CheckpointPolicy.overrides`; None: its own).

    Both overrides take part in the match: episodes played in bfloat16 are other answers than float32
    ones, and vLLM's sampling draws other answers than HF's even in the same dtype, so an output or a
    ``reuse`` of another dtype or engine is never mixed in. A record written before they were recorded
    has neither key and reads as None for both (``changed_settings`` compares ``saved.get``): it
    matches an evaluation in the policy's own dtype and engine, the only one there was then."""
    return {
        "env": env_name,
        "episodes": episodes,
        "env_config": env_config,
        "checkpoint": None if checkpoint is None else str(checkpoint),
        "policy_weights": None if checkpoint is None else policy_weights(checkpoint),
        "torch_dtype": torch_dtype,
        "inference_backend": inference_backend,
    }


def played_line(policy: CheckpointPolicy) -> str:
    """The line of ``summary.md`` saying what the checkpoint played in (every episode of the output
    did: the settings record holds the overrides)."""
    own = "not its own" if any(value is not None for value in policy.overrides.values()) else "its own"
    engine = policy.engine
    return f"- the checkpoint plays in {engine['torch_dtype']} with {engine['inference_backend']} ({own})"


def evaluate(
    checkpoint: str | Path | None,
    *,
    env: str | None = None,
    split: str | None = None,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    episodes: int | None = None,
    output: str | Path,
    baselines: Sequence[str] | None = None,
    env_config: dict[str, Any] | None = None,
    batch_size: int = 16,
    samples: int = 1,
    team_config: AlgorithmConfig | None = None,
    reuse: Sequence[str | Path] = (),
    torch_dtype: str | None = None,
    inference_backend: str | None = None,
    transcripts: bool = False,
) -> pd.DataFrame:
    """Evaluate a checkpoint (and/or the baselines) and write tables to ``output``.

    Returns the mean ± std summary. ``env`` (any name :mod:`envs.registry` resolves; default: the
    checkpoint's own) must be the env the checkpoint was trained on. ``baselines`` default to the
    expert (where the env has one) and random. ``split`` (one of the env's ``EvaluationFacts.splits``:
    ALFWorld's "in" | "out" | "all"; default: the split ``env_config`` names, else the env's default
    choice, ALFWorld's "out") selects the evaluation split(s); ``episodes`` (default: the whole split
    where the env has fixed games, as ALFWorld has, else 32) is per seed and split. WebShop plays its
    ``test`` goals unless ``env_config`` says otherwise. Each finished (split, policy, seed) is written
    at once (atomically) to ``episodes.csv``, and each game as it ends to a hidden file beside it; a
    rerun of the same evaluation into the same ``output`` skips what is already there and plays the
    rest. ``batch_size`` episodes are in flight at once (continuous batching: :func:`play`). What this
    call plays is timed per policy: episodes per hour and generated tokens per second go to
    ``summary.md``, ``throughput.json`` and a printed line (:mod:`~hgpo_rllib.evaluation.throughput`).
    A checkpoint of a multi-agent team (docs/drmas.md) plays each task ``samples`` times (avg@k and
    pass@k; :mod:`hgpo_rllib.evaluation.team`), without baselines; so does a team built from warm
    starts: ``team_config`` (its modules load them) with ``checkpoint`` the warm-start folder
    (``rllib evaluate`` of a team warm-start folder). ``reuse`` names outputs of earlier evaluations:
    where one has the same settings but for its splits (a policy folder: the same weights, wherever it
    lay), each (split, policy, seed) it finished is copied from it instead of played again
    (:func:`~hgpo_rllib.evaluation.output_dir.reusable_episodes`). A policy folder naming an env
    this process does not know plays ``env`` (received folders run no code, docs/reliability.md).
    ``torch_dtype`` ("float32", "bfloat16" or "cpu": bfloat16 where the CPU has it natively) and
    ``inference_backend`` ("hf" or "vllm") play the checkpoint in another dtype or engine than its own
    (None: its own); they are part of the evaluation's settings (:func:`evaluation_settings`), and
    ``summary.md`` and ``throughput.json`` say what the policy played in. ``transcripts``: each game
    played here (not copied by ``reuse``) is also written with its turns, observation, answer and
    reward, to ``transcripts/<policy>-seed<seed>[-<split>].jsonl`` (not part of the settings).
    """
    if (episodes is not None and episodes < 1) or not seeds or batch_size < 1 or samples < 1:
        raise ValueError("episodes, batch_size and samples must be >= 1 and at least one seed is needed")
    if any(seed < 0 for seed in seeds) or len(set(seeds)) < len(seeds):
        raise ValueError(f"seeds must be distinct and >= 0, got {list(seeds)}")
    unknown = sorted(set(baselines or ()) - {"expert", "random"})
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; choose from ['expert', 'random']")
    if checkpoint is None and (env is None or (baselines is not None and not baselines)):
        raise ValueError("nothing to evaluate: give a checkpoint, or an env and at least one baseline")
    if checkpoint is None and (torch_dtype is not None or inference_backend is not None):
        raise ValueError("--dtype and --inference-backend choose how a checkpoint plays: give one")
    if checkpoint is not None and (
        team_config is not None or is_team_checkpoint(Path(checkpoint).expanduser())
    ):
        if baselines:
            raise ValueError("a team is evaluated without baselines (--baselines '')")
        if torch_dtype is not None or inference_backend is not None:
            raise ValueError(
                "a team plays in its modules' own dtype and engine (no --dtype, --inference-backend)"
            )
        if transcripts:
            raise ValueError("--transcripts writes single-agent episodes; a team's are not recorded")
        return evaluate_team(
            Path(checkpoint).expanduser().resolve(),
            team_config,
            env=env,
            split=split,
            seeds=seeds,
            episodes=episodes,
            output=output,
            env_config=env_config or {},
            batch_size=batch_size,
            samples=samples,
            reuse=reuse,
        )
    if samples != 1:
        raise ValueError("samples (k per task, avg@k / pass@k) applies to team checkpoints only")
    config = dict(env_config or {})
    policies: dict[str, Callable[[int], Policy]] = {}
    throughput = Throughput(batch_size)
    trained = None
    if checkpoint is not None:
        trained = CheckpointPolicy(
            checkpoint,
            env_config=config,
            env=env,
            torch_dtype=torch_dtype,
            inference_backend=inference_backend,
        )
        env = envs.env_name(str(trained.config.env))
        config = trained.env_config
        policies["checkpoint"] = trained.reseed
        throughput.token_counts = {"checkpoint": lambda: trained.generated_tokens}
        throughput.engines = {"checkpoint": trained.engine}
    assert env is not None  # checked above: a checkpoint or --env
    envs.env_creator(env)  # an unknown env: one line naming the known ones
    env_name = envs.env_name(env)
    envs.check_env_config(env_name, config)  # before the output directory is made
    facts = envs.env_facts(env_name, config).evaluation
    splits = eval_splits(env_name, facts, split, config)
    # A TextEnv (checked above) has an expert where its class overrides expert_plan.
    has_expert = envs.env_class(env_name, config).expert_plan is not envs.TextEnv.expert_plan
    if baselines is None:
        baselines = ["expert", "random"] if has_expert else ["random"]
    if "expert" in baselines:
        if not has_expert:
            raise ValueError(f"{env_name} has no expert (its class does not define expert_plan)")
        policies["expert"] = lambda seed: expert_policy
    if "random" in baselines:
        policies["random"] = random_policy

    def player(make_policy: Callable[[int], Policy]) -> Player:
        def play_split(
            split_config: dict[str, Any],
            seed: int,
            tasks: Sequence[int],
            on_episode_end: Callable[[dict[str, Any]], None],
            desc: str,
        ) -> list[dict[str, Any]]:
            return play(
                env_name,
                split_config,
                make_policy(seed),
                tasks,
                batch_size=batch_size,
                desc=desc,
                on_episode_end=on_episode_end,
                with_transcripts=transcripts,
            )

        return play_split

    checkpoint_path = None if checkpoint is None else Path(checkpoint).expanduser().resolve()
    overrides = {} if trained is None else trained.overrides
    settings = evaluation_settings(env_name, episodes, config, checkpoint_path, **overrides)
    players = {name: player(make_policy) for name, make_policy in policies.items()}
    make_env = envs.env_creator(env_name)
    table, lines = play_all(
        players,
        facts,
        make_env,
        splits,
        config,
        seeds,
        episodes,
        output,
        settings,
        reuse=reuse,
        throughput=throughput,
    )
    if trained is not None:
        lines.append(played_line(trained))
    out_dir = Path(output).expanduser()
    return write_tables(out_dir, env_name, lines, seeds, *summarize(table, facts), throughput)
