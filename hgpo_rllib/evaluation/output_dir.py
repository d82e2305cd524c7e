"""The output directory of an evaluation (``rllib evaluate``, :mod:`hgpo_rllib.evaluation.protocol`):
every (split, policy, seed) played once and written as it finishes, each game kept as it ends so an
interrupted evaluation resumes, the (split, policy, seed)s that earlier outputs of the same settings
finished copied instead of played again (``reuse``), and the tables over seeds. Also which splits an
evaluation plays (the env's :class:`~envs.common.facts.EvaluationFacts`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from envs.common.facts import EvaluationFacts
from hgpo_rllib.columns import LENGTH_CUT_RATE, PROMPT_CUT_RATE
from hgpo_rllib.evaluation.rollout import TRANSCRIPT, read_played_episodes, task_seeds
from hgpo_rllib.evaluation.throughput import Throughput
from hgpo_rllib.run_records import changed_settings, read_record, write_atomically, write_record

#: Episodes per seed where an environment has no fixed list of evaluation games.
DEFAULT_EPISODES = 32
#: The output directory's settings record.
EVALUATION_RECORD = "evaluation.json"
#: The output's folder of transcripts, one JSON-lines file per (split, policy, seed) that wrote any.
TRANSCRIPTS_DIR = "transcripts"
#: Episode columns of the turns whose answer was length-cut and whose prompt was cut (shares of the
#: episode's turns): empty for a policy that generates nothing (the baselines) and absent from the
#: ``episodes.csv`` of evaluations made before they were recorded.
CUT_RATE_COLUMNS = (LENGTH_CUT_RATE, PROMPT_CUT_RATE)
#: A policy's player: (the split's env config, sampler seed, task seeds, a callback for each finished
#: game's record, a progress label) -> the episodes' records, in task order.
Player = Callable[
    [dict[str, Any], int, Sequence[int], Callable[[dict[str, Any]], None], str], list[dict[str, Any]]
]


def play_all(
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
    *,
    throughput: Throughput,
) -> tuple[pd.DataFrame, list[str]]:
    """Every (split, player, seed) not already in ``output``'s ``episodes.csv``, each written there
    as it finishes; returns the table of the requested players and seeds, and a line per split
    (``facts`` are the evaluation facts of the game that ``make_game`` builds from its settings,
    ``game_config`` those settings when ``config`` also holds others). Meanwhile each game is kept as
    it ends (:func:`_resumed_games`), so an interrupted (split, player, seed) plays only the games it
    had not finished. One that an output in ``reuse``
    finished (:func:`reusable_episodes`) is copied from there. What is played here is timed into
    ``throughput``. Records that carry a transcript (``rollout.TRANSCRIPT``) leave it in
    ``transcripts/<policy>-seed<seed>[-<split>].jsonl``."""
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
                transcripts = out_dir / TRANSCRIPTS_DIR / f"{name}-seed{seed}{split}.jsonl"
                desc = f"{name} seed {seed}" + (f" {split_name}" if split_name else "")
                if copied.any():
                    source = earlier["source"][copied].iloc[0]  # the first output that has them
                    rows = earlier[copied & (earlier["source"] == source)].drop(columns="source")
                    print(f"{desc}: {len(rows)} episodes copied from {source}")
                else:
                    tasks = task_seeds(seed, n)
                    records = _resumed_games(
                        games, transcripts, play_split, split_config, seed, tasks, desc, throughput, name
                    )
                    rows = pd.DataFrame([{**label, "policy": name, "seed": seed, **r} for r in records])
                table = rows if table.empty else pd.concat([table, rows], ignore_index=True)
                write_atomically(out_dir / "episodes.csv", table.to_csv(index=False))
                games.unlink(missing_ok=True)  # now in episodes.csv
    return table[table["policy"].isin(list(players)) & table["seed"].isin(list(seeds))], lines


def mean_cut_rates(episodes: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group of ``keys``, the mean over episodes of each of :data:`CUT_RATE_COLUMNS` (as
    ``invalid_rate``, and as training reports them); NaN where no episode says (a baseline's, or
    episodes of an older output without the columns). A missing column reads as NaN, and so does an
    empty cell (``episodes.csv`` is read keeping empty strings: ``env_error``)."""
    rates = episodes.reindex(columns=list(CUT_RATE_COLUMNS)).apply(pd.to_numeric, errors="coerce")
    return rates.groupby([episodes[key] for key in keys]).mean()


def changed_evaluation(saved: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """What differs between an output's settings record ``saved`` and ``settings`` (lines of
    :func:`~hgpo_rllib.run_records.changed_settings`; none: the same evaluation). A policy with a
    weights digest (``policy_weights``: a policy folder's) is matched by it, wherever it lies: its path
    (``checkpoint``) stays in the record for the reader but decides nothing, so a shipped warm start's
    evaluation serves every checkout and other weights never match. One without (an algorithm
    checkpoint, a team, baselines alone) is matched by its path, as every evaluation was before
    digests were recorded; a record of then (no ``policy_weights``) thus matches no policy folder's
    evaluation, since it cannot vouch for the weights that lay at its path."""
    keys = set(saved) | set(settings)
    if settings.get("policy_weights") is not None:
        keys.discard("checkpoint")
    return changed_settings(saved, settings, sorted(keys))


def reusable_episodes(outputs: Sequence[str | Path], settings: dict[str, Any]) -> pd.DataFrame:
    """The finished episodes of those ``outputs`` (earlier evaluations' directories) whose settings
    record is ``settings`` but for its splits (:func:`changed_evaluation`), with a ``source`` column
    naming the directory. An evaluation of one split (a warm start's shipping check,
    ``scripts/ship_warm_start.py``) thus serves a later one of both; a directory of other settings
    (other weights, step limit or number of games) contributes nothing, and says so in a line."""
    found = []
    for output in outputs:
        directory = Path(output).expanduser()
        record, episodes = directory / EVALUATION_RECORD, directory / "episodes.csv"
        if not record.is_file():
            raise FileNotFoundError(
                f"reuse: {directory} is no evaluation output (it has no {EVALUATION_RECORD})"
            )
        saved = {k: v for k, v in read_record(record).items() if k != "splits"}
        if changed := changed_evaluation(saved, settings):
            print(f"{directory}: another evaluation ({'; '.join(changed)}); nothing reused from it")
        elif episodes.is_file():
            found.append(pd.read_csv(episodes, keep_default_na=False).assign(source=str(directory)))
    if not found:
        return pd.DataFrame(columns=["policy", "seed", "split", "source"])
    return pd.concat(found, ignore_index=True)


def _resumed_games(
    games: Path,
    transcripts: Path,
    play_split: Player,
    split_config: dict[str, Any],
    seed: int,
    tasks: list[int],
    desc: str,
    throughput: Throughput,
    policy: str,
) -> list[dict[str, Any]]:
    """``tasks`` played by ``play_split``, each finished game appended to the JSON-lines file ``games``
    as it ends; games an interrupted run left there are not played again (nor counted in
    ``throughput``, which times the play as ``policy``'s). The sampler of a resumed
    run is seeded anew (from ``seed`` and the number of games already played), so a resumed evaluation
    is as random as a whole one but not the same draw. A record's transcript goes to ``transcripts``
    first, so every saved game has its own; one of a game that was not saved (the run stopped
    between the two writes) is dropped at the resume, as the game is played again."""
    played = read_played_episodes(games)
    remaining = [task for task in tasks if task not in played]
    if played:
        desc += f" ({len(played)} of {len(tasks)} games saved before)"
        seed = int(np.random.SeedSequence([seed, len(played)]).generate_state(1)[0])
    kept = read_played_episodes(transcripts)
    if set(kept) - set(played):
        write_atomically(
            transcripts, "".join(json.dumps(kept[task]) + "\n" for task in kept if task in played)
        )
    with games.open("a") as saved:

        def keep(record: dict[str, Any]) -> None:
            if TRANSCRIPT in record:
                transcripts.parent.mkdir(exist_ok=True)
                turns = record.pop(TRANSCRIPT)
                # Strict JSON for any reader (jq, a browser): a baseline's NaN cut rates are nulls.
                nulled = {key: None if value != value else value for key, value in record.items()}
                text = json.dumps({**nulled, **turns}, allow_nan=False)
                with transcripts.open("a") as file:
                    file.write(text + "\n")
            saved.write(json.dumps(record) + "\n")
            saved.flush()

        def play() -> list[dict[str, Any]]:
            return play_split(split_config, seed, remaining, keep, desc)

        records = throughput.timed(policy, play) if remaining else []
    new: dict[int, list[dict[str, Any]]] = {}
    for record in records:  # a team plays each task ``samples`` times
        new.setdefault(record["task_seed"], []).append(record)
    return [record for task in tasks for record in ([played[task]] if task in played else new[task])]


def write_tables(
    out_dir: Path,
    env_name: str,
    lines: list[str],
    seeds: Sequence[int],
    per_seed: pd.DataFrame,
    summary: pd.DataFrame,
    throughput: Throughput,
) -> pd.DataFrame:
    """``per_seed.csv``, ``summary.csv``, ``summary.md`` (headed by ``lines``, ending with this run's
    ``throughput``) and the throughput record; returns ``summary``."""
    write_atomically(out_dir / "per_seed.csv", per_seed.to_csv(index=False))
    write_atomically(out_dir / "summary.csv", summary.to_csv(index=False))
    played = "".join(f"{line}\n" for line in lines)
    speed = "".join(f"{line}\n" for line in throughput.lines())
    write_atomically(
        out_dir / "summary.md",
        f"# {env_name} evaluation\n\n{played}\n## Mean ± std over seeds {list(seeds)}\n\n"
        f"{summary.to_markdown(index=False)}\n\n## Per seed\n\n{per_seed.to_markdown(index=False)}\n\n"
        f"## Played in this run (batch size {throughput.batch_size})\n\n{speed}",
    )
    throughput.write(out_dir)
    return summary


def eval_splits(
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
    unfinished; :func:`changed_evaluation`: a policy folder moved since, or the checkout, is the same);
    returns the episodes already played there. A directory of anything else is refused and left
    untouched."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--output {out_dir} is a file; give a directory for the tables")
    record = out_dir / EVALUATION_RECORD
    if record.is_file():
        changed = changed_evaluation(read_record(record), settings)
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
