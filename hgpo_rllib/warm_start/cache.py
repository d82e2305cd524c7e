"""Named warm-start recipes and the cache that builds each once (``~/.cache/hgpo_rllib`` by default).

A recipe is the keyword arguments of :func:`~hgpo_rllib.warm_start.trainer.train_warm_start` plus,
optionally, ``dagger``: those of :func:`~hgpo_rllib.warm_start.dagger.train_dagger`. Its directory is
named after the digest of the recipe without ``dagger`` and of :data:`DEMONSTRATION_FORMAT`, so recipes
that differ only in their DAgger rounds share the warm start they start from, and a change of the
demonstrators' texts builds a new one instead of reusing one trained on the old texts.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from hgpo_rllib.run_records import read_record
from hgpo_rllib.warm_start.dagger import DaggerSettings, train_dagger
from hgpo_rllib.warm_start.format import SFT_CONFIG
from hgpo_rllib.warm_start.trainer import SFTSettings, train_warm_start

#: The CPU main job's warm start (issue 11): the searcher's play of 800 training games, 1.5 epochs of
#: the default model with loss on the prompt too, then one DAgger round on 96 more games.
ALFWORLD_WARM_START: dict[str, Any] = {
    "env": "alfworld",
    "episodes": 800,
    "epochs": 1.5,
    "demonstrator": "searcher",
    "train_on_prompt": True,
    "dagger": {"rounds": 1, "episodes": 96},
}
#: Part of every cached warm start's name: bump it when a demonstrator's thoughts or commands change.
DEMONSTRATION_FORMAT = 3
DEFAULT_CACHE_DIR = Path("~/.cache/hgpo_rllib")


def alfworld_recipe(history_length: int = 2) -> dict[str, Any]:
    """:data:`ALFWORLD_WARM_START` for a prompt window of ``history_length`` (its prompts differ with K)."""
    if history_length == SFTSettings.history_length:
        return dict(ALFWORLD_WARM_START)  # the same digest as always
    return {**ALFWORLD_WARM_START, "history_length": history_length}


def recipe_record(recipe: dict[str, Any]) -> dict[str, Any]:
    """The settings record the warm start of ``recipe`` has once built (what RL needs to prompt like it)."""
    return SFTSettings(**{k: v for k, v in recipe.items() if k != "dagger"}).record()


def warm_start_path(recipe: dict[str, Any], cache_dir: str | Path | None = None) -> Path:
    """Where the finished warm start of ``recipe`` lives (its last DAgger round, if any); builds nothing."""
    recipe = dict(recipe)
    dagger = recipe.pop("dagger", None)
    key = json.dumps([DEMONSTRATION_FORMAT, recipe], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    base = Path(cache_dir or DEFAULT_CACHE_DIR).expanduser() / "warm_starts" / f"{recipe['env']}-{digest}"
    if not dagger:
        return base
    rounds = DaggerSettings(**dagger)
    return base / f"dagger-{rounds.digest()}-{rounds.rounds}"


def is_finished(path: Path) -> bool:
    record = path / SFT_CONFIG
    return record.is_file() and bool(read_record(record).get("finished"))


def build_warm_start(recipe: dict[str, Any], cache_dir: str | Path | None = None) -> Path:
    """The finished warm start of ``recipe``, built first (or finished, if an earlier build was
    interrupted) under ``cache_dir``; returns :func:`warm_start_path`."""
    final = warm_start_path(recipe, cache_dir)
    if is_finished(final):
        return final
    recipe = dict(recipe)
    dagger = recipe.pop("dagger", None)
    base = final.parent if dagger else final
    if not is_finished(base):
        print(f"Building the warm start {base} (first use only; interrupted builds resume) ...", flush=True)
        train_warm_start(base, workers=os.cpu_count() or 1, **recipe)
    return train_dagger(base, reuse_finished=True, **dagger) if dagger else base
