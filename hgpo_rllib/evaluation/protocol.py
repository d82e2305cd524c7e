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
and Markdown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

import envs
from envs.common.facts import EvaluationFacts
from hgpo_rllib.evaluation.policy_loading import (
    CTOR_FILE,
    MODULE_DIR,
    MODULES_DIR,
    CheckpointPolicy,
    check_trained_env,
    load_checkpoint_config,
)
from hgpo_rllib.evaluation.rollout import (
    Policy,
    expert_policy,
    play,
    random_policy,
    read_played_episodes,
    task_seeds,
)
from hgpo_rllib.evaluation.team import play_team, summarize_team, team_runner
from hgpo_rllib.run_records import changed_settings, read_record, write_atomically, write_record

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

DEFAULT_SEEDS = (123, 456, 789)
#: Episodes per seed where an environment has no fixed list of evaluation games.
DEFAULT_EPISODES = 32
#: The output directory's settings record.
EVALUATION_RECORD = "evaluation.json"


def summarize(episodes: pd.DataFrame, facts: EvaluationFacts) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (split, policy, seed) metrics, and their mean ± std over seeds: success, steps and invalid
    rate, then the env's score columns and its success per category (``facts``)."""
    keys = ["split", "policy", "seed"] if "split" in episodes else ["policy", "seed"]
    per_seed = episodes.groupby(keys).agg(
        success=("won", "mean"), steps=("steps", "mean"), invalid_rate=("invalid_rate", "mean")
    )
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


#: A policy's player: (the split's env config, sampler seed, task seeds, a callback for each finished
#: game's record, a progress label) -> the episodes' records, in task order.
Player = Callable[
    [dict[str, Any], int, Sequence[int], Callable[[dict[str, Any]], None], str], list[dict[str, Any]]
]


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
    rest. A checkpoint of a multi-agent team (docs/drmas.md) plays each task ``samples`` times (avg@k and
    pass@k; :mod:`hgpo_rllib.evaluation.team`), without baselines; so does a team built from warm
    starts: ``team_config`` (its modules load them) with ``checkpoint`` the warm-start folder
    (``rllib evaluate`` of a team warm-start folder). ``reuse`` names outputs of earlier evaluations:
    where one has the same settings but for its splits, each (split, policy, seed) it finished is
    copied from it instead of played again (:func:`reusable_episodes`). A policy folder naming an env
    this process does not know plays ``env`` (received folders run no code, docs/reliability.md).
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
    if checkpoint is not None and (
        team_config is not None or is_team_checkpoint(Path(checkpoint).expanduser())
    ):
        if baselines:
            raise ValueError("a team is evaluated without baselines (--baselines '')")
        return _evaluate_team(
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
    if checkpoint is not None:
        trained = CheckpointPolicy(checkpoint, env_config=config, env=env)
        env = envs.env_name(str(trained.config.env))
        config = trained.env_config
        policies["checkpoint"] = trained.reseed
    assert env is not None  # checked above: a checkpoint or --env
    envs.env_creator(env)  # an unknown env: one line naming the known ones
    env_name = envs.env_name(env)
    envs.check_env_config(env_name, config)  # before the output directory is made
    facts = envs.env_facts(env_name, config).evaluation
    splits = _eval_splits(env_name, facts, split, config)
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
            )

        return play_split

    checkpoint_path = None if checkpoint is None else str(Path(checkpoint).expanduser().resolve())
    settings = {"env": env_name, "episodes": episodes, "env_config": config, "checkpoint": checkpoint_path}
    players = {name: player(make_policy) for name, make_policy in policies.items()}
    make_env = envs.env_creator(env_name)
    table, lines = _play_all(
        players, facts, make_env, splits, config, seeds, episodes, output, settings, reuse=reuse
    )
    return _write_tables(Path(output).expanduser(), env_name, lines, seeds, *summarize(table, facts))


def is_team_checkpoint(path: Path) -> bool:
    """An algorithm checkpoint of a multi-agent team (its modules are not just ``default_policy``)."""
    return (path / CTOR_FILE).is_file() and (path / MODULES_DIR).is_dir() and not (path / MODULE_DIR).is_dir()


def _evaluate_team(
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
    """:func:`evaluate` for a team checkpoint, or for the team ``warm_started`` from the warm-start
    folder ``checkpoint``: the team plays every task ``samples`` times."""
    config = warm_started or load_checkpoint_config(checkpoint)
    env_name = envs.env_name(str(config.env))
    check_trained_env(checkpoint, env or env_name, env_name, dict(config.env_config))
    merged = {**dict(config.env_config), **env_config}
    envs.check_env_config(env_name, merged)
    team_class = envs.env_class(env_name, merged)
    facts = envs.env_facts(env_name, merged).evaluation  # a built-in team's are its game's
    splits = _eval_splits(env_name, facts, split, merged)
    game_config = {k: v for k, v in merged.items() if k not in team_class.team_settings()}
    runners: dict[str | None, Any] = {}

    def play_split(
        split_config: dict[str, Any], seed: int, tasks: Sequence[int], *_: object
    ) -> list[dict[str, Any]]:
        # A team's tasks come back all at once (``samples`` episodes each): none is reported early.
        key = split_config.get("split")
        if key not in runners:
            trained = None if warm_started else checkpoint  # warm starts: the config's own modules
            runners[key] = team_runner(config, split_config, trained, batch_size)
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
        table, lines = _play_all(
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
        )
    finally:
        for runner in runners.values():
            runner.stop()
    return _write_tables(Path(output).expanduser(), env_name, lines, seeds, *summarize_team(table))


def _play_all(
    players: dict[str, Player],
    facts: EvaluationFacts,
    make_game: Callable[[dict[str, Any]], Any],
    splits: tuple[str | None, ...],
    config: dict[str, Any],
    seeds: Sequence[int],
    episodes: int | None,
    output: str | Path,
    settings: dict[str, Any],
    game_config: dict[str, Any] | None = None,
    reuse: Sequence[str | Path] = (),
) -> tuple[pd.DataFrame, list[str]]:
    """Every (split, player, seed) not already in ``output``'s ``episodes.csv``, each written there
    as it finishes; returns the table of the requested players and seeds, and a line per split
    (``facts`` are the evaluation facts of the game that ``make_game`` builds from its settings,
    ``game_config`` those settings when ``config`` also holds others). Meanwhile each game is kept as
    it ends (:func:`_resumed_games`), so an interrupted (split, player, seed) plays only the games it
    had not finished. One that an output in ``reuse``
    finished (:func:`reusable_episodes`) is copied from there."""
    out_dir = Path(output).expanduser()
    earlier = reusable_episodes(reuse, settings)  # (a bad ``reuse`` is refused before output is made)
    table = _open_output(out_dir, {**settings, "splits": list(splits)})
    if splits != (None,) and "split" not in table:
        table["split"] = pd.Series(dtype=object)  # a new output: no episodes yet
    lines = []
    for split_name in splits:
        label = {} if split_name is None else {"split": split_name}
        split_config = {**facts.env_config, **config, **label}
        size = _split_size(facts, make_game, {**facts.env_config, **(game_config or config), **label})
        n = episodes or size or DEFAULT_EPISODES
        if split_name is not None:
            games = f" ({size} games{', all played' if size == n else ''})" if size else ""
            lines.append(f"- split `{split_name}`{games}: {n} episodes per seed and policy")
        for name, play_split in players.items():
            for seed in seeds:
                done = (table["policy"] == name) & (table["seed"] == seed)
                if label:
                    done &= table["split"] == split_name
                if done.any():
                    continue  # finished by an earlier run into the same directory
                copied = (earlier["policy"] == name) & (earlier["seed"] == seed)
                if label:
                    copied &= earlier["split"] == split_name
                split = f"-{split_name}" if split_name else ""
                games = out_dir / f".games-{name}-seed{seed}{split}.jsonl"
                desc = f"{name} seed {seed}" + (f" {split_name}" if split_name else "")
                if copied.any():
                    source = earlier["source"][copied].iloc[0]  # the first output that has them
                    rows = earlier[copied & (earlier["source"] == source)].drop(columns="source")
                    print(f"{desc}: {len(rows)} episodes copied from {source}")
                else:
                    records = _resumed_games(games, play_split, split_config, seed, task_seeds(seed, n), desc)
                    rows = pd.DataFrame([{**label, "policy": name, "seed": seed, **r} for r in records])
                table = rows if table.empty else pd.concat([table, rows], ignore_index=True)
                write_atomically(out_dir / "episodes.csv", table.to_csv(index=False))
                games.unlink(missing_ok=True)  # now in episodes.csv
    return table[table["policy"].isin(list(players)) & table["seed"].isin(list(seeds))], lines


def reusable_episodes(outputs: Sequence[str | Path], settings: dict[str, Any]) -> pd.DataFrame:
    """The finished episodes of those ``outputs`` (earlier evaluations' directories) whose settings
    record is ``settings`` but for its splits, with a ``source`` column naming the directory. An
    evaluation of one split (a warm start's shipping check, ``scripts/ship_warm_start.py``) thus
    serves a later one of both; a directory of other settings (another checkpoint, step limit or
    number of games) contributes nothing, and says so in a line."""
    found = []
    for output in outputs:
        directory = Path(output).expanduser()
        record, episodes = directory / EVALUATION_RECORD, directory / "episodes.csv"
        if not record.is_file():
            raise FileNotFoundError(
                f"reuse: {directory} is no evaluation output (it has no {EVALUATION_RECORD})"
            )
        saved = {k: v for k, v in read_record(record).items() if k != "splits"}
        if changed := changed_settings(saved, settings):
            print(f"{directory}: another evaluation ({'; '.join(changed)}); nothing reused from it")
        elif episodes.is_file():
            found.append(pd.read_csv(episodes, keep_default_na=False).assign(source=str(directory)))
    if not found:
        return pd.DataFrame(columns=["policy", "seed", "split", "source"])
    return pd.concat(found, ignore_index=True)


def _resumed_games(
    games: Path, play_split: Player, split_config: dict[str, Any], seed: int, tasks: list[int], desc: str
) -> list[dict[str, Any]]:
    """``tasks`` played by ``play_split``, each finished game appended to the JSON-lines file ``games``
    as it ends; games an interrupted run left there are not played again. The sampler of a resumed
    run is seeded anew (from ``seed`` and the number of games already played), so a resumed evaluation
    is as random as a whole one but not the same draw."""
    played = read_played_episodes(games)
    remaining = [task for task in tasks if task not in played]
    if played:
        desc += f" ({len(played)} of {len(tasks)} games saved before)"
        seed = int(np.random.SeedSequence([seed, len(played)]).generate_state(1)[0])
    with games.open("a") as saved:

        def keep(record: dict[str, Any]) -> None:
            saved.write(json.dumps(record) + "\n")
            saved.flush()

        records = play_split(split_config, seed, remaining, keep, desc) if remaining else []
    new: dict[int, list[dict[str, Any]]] = {}
    for record in records:  # a team plays each task ``samples`` times
        new.setdefault(record["task_seed"], []).append(record)
    return [record for task in tasks for record in ([played[task]] if task in played else new[task])]


def _write_tables(
    out_dir: Path,
    env_name: str,
    lines: list[str],
    seeds: Sequence[int],
    per_seed: pd.DataFrame,
    summary: pd.DataFrame,
) -> pd.DataFrame:
    """``per_seed.csv``, ``summary.csv`` and ``summary.md`` (headed by ``lines``); returns ``summary``."""
    write_atomically(out_dir / "per_seed.csv", per_seed.to_csv(index=False))
    write_atomically(out_dir / "summary.csv", summary.to_csv(index=False))
    played = "".join(f"{line}\n" for line in lines)
    write_atomically(
        out_dir / "summary.md",
        f"# {env_name} evaluation\n\n{played}\n## Mean ± std over seeds {list(seeds)}\n\n"
        f"{summary.to_markdown(index=False)}\n\n## Per seed\n\n{per_seed.to_markdown(index=False)}\n",
    )
    return summary


def _eval_splits(
    env_name: str, facts: EvaluationFacts, split: str | None, user_config: dict[str, Any]
) -> tuple[str | None, ...]:
    """The env splits to evaluate on (None: the env declares none): the ``split`` choice's, else the
    one ``user_config`` names, else the env's default choice's, else its evaluation env_config's."""
    if split is not None:
        if not facts.splits:
            raise ValueError(
                f"--split applies to envs with split choices (EvaluationFacts.splits), not {env_name}"
            )
        if split not in facts.splits:
            raise ValueError(f"split must be one of {sorted(facts.splits)}, got {split!r}")
        return tuple(facts.splits[split])
    if not facts.splits and "split" not in facts.env_config:
        return (None,)  # an env that declares no split: a split its env_config names plays unlabelled
    if "split" in user_config:
        return (user_config["split"],)
    if facts.splits:
        return tuple(facts.splits[facts.default_split])
    return (facts.env_config["split"],)


def _split_size(
    facts: EvaluationFacts, make_game: Callable[[dict[str, Any]], Any], env_config: dict[str, Any]
) -> int | None:
    """Games in the env's fixed evaluation list, if it has one (ALFWorld's evaluation splits)."""
    if not facts.fixed_games:
        return None
    env = make_game(env_config)
    try:
        return env.unwrapped.num_games
    finally:
        env.close()


def _open_output(out_dir: Path, settings: dict[str, Any]) -> pd.DataFrame:
    """Create ``out_dir`` or reopen one that an earlier run of the same evaluation left (possibly
    unfinished); returns the episodes already played there. A directory of anything else is refused
    and left untouched."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--output {out_dir} is a file; give a directory for the tables")
    record = out_dir / EVALUATION_RECORD
    if record.is_file():
        changed = changed_settings(read_record(record), settings)
        if changed:
            raise FileExistsError(
                f"{out_dir} holds results of another evaluation ({'; '.join(changed)}); "
                "choose a new --output directory"
            )
        episodes = out_dir / "episodes.csv"
        if episodes.is_file():
            return pd.read_csv(episodes, keep_default_na=False)
        return pd.DataFrame(columns=["policy", "seed"])
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} already holds other files; choose a new --output directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_record(record, settings)
    return pd.DataFrame(columns=["policy", "seed"])
