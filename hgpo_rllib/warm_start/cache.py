"""Named warm-start recipes and the cache that builds each once (``~/.cache/hgpo_rllib`` by default).

A recipe is the keyword arguments of :func:`~hgpo_rllib.warm_start.trainer.train_warm_start` plus,
optionally, ``dagger``: those of :func:`~hgpo_rllib.warm_start.dagger.train_dagger`. Its directory is
named after the digest of the recipe without ``dagger`` and of its env's demonstration format, so recipes
that differ only in their DAgger rounds share the warm start they start from, and a change of the
demonstrators' texts builds a new one instead of reusing one trained on the old texts. How a build runs
(``gradient_checkpointing``) is no part of the name, and ``prompt_turns`` is only when it is not one user
turn (:func:`recipe_identity`), so the recipes written before them keep their digests.

The package ships the CPU main job's warm start (:data:`SHIPPED_DIR`), so that run learns within
minutes of the install instead of after a 2-hour build; a run uses it when its recipe's directory
matches, and a finished build of the user's own in the cache comes first.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import envs
from hgpo_rllib.rl_module.model_sources import local_model_dir, model_parameters, model_sha256
from hgpo_rllib.rl_module.prompts import ONE_USER_TURN, check_prompt_turns
from hgpo_rllib.run_records import read_record
from hgpo_rllib.warm_start.dagger import DaggerSettings, train_dagger
from hgpo_rllib.warm_start.format import SFT_CONFIG
from hgpo_rllib.warm_start.phases import (
    SECONDS_PER_DAGGER_GAME,
    STATES_PER_DAGGER_GAME,
    BuildClock,
    Phase,
    dagger_phase,
    fit_seconds,
)
from hgpo_rllib.warm_start.sft_settings import SFTSettings
from hgpo_rllib.warm_start.trainer import train_warm_start

DEFAULT_CACHE_DIR = Path("~/.cache/hgpo_rllib")
#: Finished warm starts that ship inside the package, at their path inside a cache, their weights in
#: bf16 (``scripts/ship_warm_start.py`` writes them; runs load them in their own dtype).
SHIPPED_DIR = Path(__file__).parent / "shipped"
#: What a shipped warm start is: its recipe, how it was built, and its measured evaluation.
SHIPPED_RECORD = "hgpo_shipped.json"
#: Recipe keys that say how a build runs, not what it makes (the same weights up to float rounding).
BUILD_ONLY_KEYS = ("gradient_checkpointing",)


def warm_start_recipe(
    env: str,
    history_length: int | None = None,
    answer_format: str | None = None,
    base: str | None = None,
    prompt_turns: str = ONE_USER_TURN,
) -> dict[str, Any]:
    """The env's own recipe (``WarmStartFacts.recipe``: ALFWorld's CPU main job, WebShop's K = 4), or
    with ``base`` its recipe for that pretrained base (``WarmStartFacts.base_recipes``), for a prompt
    window of ``history_length`` (default: the recipe's), an answer format (``"plan_execute"``:
    HiPER's, docs/hiper.md) and ``prompt_turns`` (``"system_user"``: the task and instructions as a
    system turn): prompts and answers differ with each. The defaults give the recipe itself, with its
    digest."""
    facts = envs.env_facts(env).warm_start
    own = facts.recipe if base is None else facts.base_recipes.get(base)
    if own is None:
        has = "has no warm-start recipe (its WarmStartFacts.recipe is None)"
        if base is not None:
            has = f"has no warm-start recipe for the base {base!r} (its WarmStartFacts.base_recipes)"
        raise ValueError(f"{env!r} {has}")
    recipe = dict(own)
    own_history_length = recipe.get("history_length", SFTSettings.history_length)
    if history_length is not None and history_length != own_history_length:
        recipe["history_length"] = history_length
    if answer_format is not None:
        recipe["env_config"] = {**recipe.get("env_config", {}), "answer_format": answer_format}
    if check_prompt_turns(prompt_turns) != ONE_USER_TURN:
        recipe["prompt_turns"] = prompt_turns
    return recipe


def recipe_identity(recipe: dict[str, Any]) -> dict[str, Any]:
    """What names the recipe's warm start: the recipe without :data:`BUILD_ONLY_KEYS`, and without
    ``prompt_turns`` when it is one user turn (the default every recipe before it meant)."""
    identity = {k: v for k, v in recipe.items() if k not in BUILD_ONLY_KEYS}
    if identity.get("prompt_turns") == ONE_USER_TURN:
        del identity["prompt_turns"]
    return identity


def recipe_record(recipe: dict[str, Any]) -> dict[str, Any]:
    """The settings record the warm start of ``recipe`` has once built (what RL needs to prompt like it)."""
    return SFTSettings(**{k: v for k, v in recipe_identity(recipe).items() if k != "dagger"}).record()


def demonstration_format(env: str) -> int:
    """The version of ``env``'s demonstration texts (part of its warm starts' names)."""
    return envs.env_facts(env).warm_start.demonstration_format


def recipe_directory(recipe: dict[str, Any]) -> Path:
    """The recipe's finished warm start's path inside a cache (its last DAgger round, if any); a
    pretrained base's is named after the base's sha256 too (another GGUF file is another base)."""
    recipe = recipe_identity(recipe)
    dagger = recipe.pop("dagger", None)
    identity: list[Any] = [demonstration_format(recipe["env"]), recipe]
    if recipe.get("base") is not None:  # a pretrained base's adapter: of these very weights
        identity.append(model_sha256(local_model_dir(recipe["base"])))
    key = json.dumps(identity, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    base = Path("warm_starts") / f"{recipe['env']}-{digest}"
    if not dagger:
        return base
    rounds = DaggerSettings(**dagger)
    return base / f"dagger-{rounds.digest()}-{rounds.rounds}"


def warm_start_path(recipe: dict[str, Any], cache_dir: str | Path | None = None) -> Path:
    """Where the finished warm start of ``recipe`` is built in ``cache_dir``; builds nothing."""
    return Path(cache_dir or DEFAULT_CACHE_DIR).expanduser() / recipe_directory(recipe)


def shipped_warm_start(recipe: dict[str, Any], shipped_dir: Path | None = None) -> Path | None:
    """The package's own finished warm start of ``recipe``, if it ships one (same recipe and
    demonstration format, so the same digest)."""
    path = (shipped_dir or SHIPPED_DIR) / recipe_directory(recipe).relative_to("warm_starts")
    record = path / SHIPPED_RECORD
    if not (record.is_file() and is_finished(path)):
        return None
    shipped = read_record(record)
    same = json.dumps(recipe_identity(shipped["recipe"]), sort_keys=True) == json.dumps(
        recipe_identity(recipe), sort_keys=True
    )
    return path if same and shipped["demonstration_format"] == demonstration_format(recipe["env"]) else None


def find_warm_start(recipe: dict[str, Any], cache_dir: str | Path | None = None) -> Path:
    """Where a run of ``recipe`` starts from: the cache's own finished build, else the package's
    shipped copy, else the cache path that :func:`build_warm_start` builds."""
    built = warm_start_path(recipe, cache_dir)
    return built if is_finished(built) else shipped_warm_start(recipe) or built


def is_finished(path: Path) -> bool:
    record = path / SFT_CONFIG
    return record.is_file() and bool(read_record(record).get("finished"))


def build_warm_start(
    recipe: dict[str, Any], cache_dir: str | Path | None = None, *, use_shipped: bool = True
) -> Path:
    """The finished warm start of ``recipe``: :func:`find_warm_start`'s, built first (or finished,
    if an earlier build was interrupted) under ``cache_dir`` when there is none (or, without
    ``use_shipped``, when the cache has none)."""
    final = warm_start_path(recipe, cache_dir)
    found = find_warm_start(recipe, cache_dir) if use_shipped else final
    if is_finished(found):
        return found
    recipe = dict(recipe)
    dagger = recipe.pop("dagger", None)
    run = {key: recipe.pop(key) for key in BUILD_ONLY_KEYS if key in recipe}
    base = final.parent if dagger else final
    workers = os.cpu_count() or 1
    clock = build_phases(SFTSettings(**recipe), DaggerSettings(**dagger) if dagger else None, workers)
    print(f"Building the warm start {final} (first use only; interrupted builds resume) ...", flush=True)
    if not is_finished(base):
        train_warm_start(base, workers=workers, clock=clock, **run, **recipe)
    return train_dagger(base, reuse_finished=True, clock=clock, **run, **dagger) if dagger else base


def build_phases(sft: SFTSettings, dagger: DaggerSettings | None, workers: int = 1) -> BuildClock:
    """The clock of a build: the warm start of ``sft`` (demonstrations in ``workers`` processes, then
    SFT over their steps), then ``dagger``'s rounds, if any."""
    cost = envs.env_facts(sft.env, sft.env_config).warm_start.cost
    tokens, parameters = cost.tokens, None
    if sft.base is not None:  # another tokenizer, so a guess: the from-scratch count, within the cut
        tokens = min(tokens, sft.max_prompt_tokens + sft.max_new_tokens)
        parameters = model_parameters(local_model_dir(sft.base))
    examples = round(sft.episodes * cost.examples)
    phases = [
        Phase("demonstrations", sft.episodes * cost.seconds / max(workers, 1), "demonstrations"),
        Phase("SFT", fit_seconds([tokens] * examples, sft.epochs, parameters), "fit"),
    ]
    if dagger is None:
        return BuildClock(phases)
    for round_ in range(1, dagger.rounds + 1):
        # Every round's states so far plus as many demonstration steps.
        examples = round(2 * round_ * dagger.episodes * STATES_PER_DAGGER_GAME)
        phases += [
            Phase(dagger_phase(round_, "play"), dagger.episodes * SECONDS_PER_DAGGER_GAME, "play"),
            Phase(dagger_phase(round_, "SFT"), fit_seconds([cost.tokens] * examples, dagger.epochs), "fit"),
        ]
    return BuildClock(phases)
