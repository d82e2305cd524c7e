"""Shipping a finished warm start inside the package (``scripts/ship_warm_start.py``).

The copy keeps what a run loads (model config, tokenizer, the settings and policy records) and the
weights in bf16 (half the bytes; runs load them in their own dtype, so a CPU run computes in float32
from the bf16-rounded values). Its evaluation is measured on the shipped copy itself, so the number
it records is the number a user starting from it gets.
"""

from __future__ import annotations

import datetime
import json
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from safetensors.torch import load_file, save_file
from scipy.stats import binomtest

from hgpo_rllib.evaluation.protocol import evaluate
from hgpo_rllib.run_records import read_record, write_record
from hgpo_rllib.warm_start.cache import (
    SHIPPED_DIR,
    SHIPPED_RECORD,
    demonstration_format,
    recipe_directory,
)
from hgpo_rllib.warm_start.format import SFT_CONFIG

#: The files of a model directory that a run reads (the rest are training leftovers: Trainer
#: checkpoints, demonstrations, DAgger states, the DAgger rounds inside the warm start); its weights
#: are ``*.safetensors`` (a model's, or a pretrained base's LoRA adapter's).
_LOADED_SUFFIXES = (".json", ".jinja")


def copy_in_bf16(built: Path, target: Path) -> None:
    """``built``'s loaded files into the new directory ``target``, floating-point weights in bf16."""
    target.mkdir(parents=True)
    for path in sorted(built.iterdir()):
        if path.is_file() and path.suffix in _LOADED_SUFFIXES:
            shutil.copy2(path, target / path.name)
    weight_files = sorted(built.glob("*.safetensors"))
    if not weight_files:
        raise FileNotFoundError(f"{built} holds no safetensors weights to ship")
    for file in weight_files:
        weights = {
            name: tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
            for name, tensor in load_file(file).items()
        }
        save_file(weights, target / file.name, metadata={"format": "pt"})


def episodes_summary(episodes_csv: Path) -> dict[str, Any]:
    """Games, games won, success with its 95% interval (Wilson's, over the games played), mean steps
    and invalid-action rate of an evaluation's episodes."""
    episodes = pd.read_csv(episodes_csv)
    won = int(episodes["won"].sum())
    interval = binomtest(won, len(episodes)).proportion_ci(confidence_level=0.95, method="wilson")
    return {
        "games": len(episodes),
        "won": won,
        "success": round(float(episodes["won"].mean()), 4),
        "success_95": [round(float(interval.low), 4), round(float(interval.high), 4)],
        "mean_steps": round(float(episodes["steps"].mean()), 2),
        "invalid_rate": round(float(episodes["invalid_rate"].mean()), 4),
    }


def _git_commit(directory: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def ship_warm_start(
    recipe: dict[str, Any],
    built: Path,
    *,
    evaluation: dict[str, Any],
    output: Path,
    build_command: str,
    shipped_dir: Path = SHIPPED_DIR,
) -> Path:
    """Copy the finished warm start ``built`` of ``recipe`` into ``shipped_dir`` (its path as in a
    cache), evaluate the copy (``evaluation``: keywords of :func:`~hgpo_rllib.evaluation.evaluate`
    without the checkpoint and output; tables to ``output``) and write its record; returns it."""
    if not (built / SFT_CONFIG).is_file() or not read_record(built / SFT_CONFIG).get("finished"):
        raise ValueError(f"{built} holds no finished warm start to ship")
    target = shipped_dir / recipe_directory(recipe).relative_to("warm_starts")
    if (target / SHIPPED_RECORD).exists():
        raise FileExistsError(f"{target} is shipped already; remove it to ship a new build")
    if target.exists():  # an earlier call stopped before its record: copy again, resume the evaluation
        shutil.rmtree(target)
    copy_in_bf16(built, target)
    evaluate(target, output=output, baselines=[], **evaluation)
    records = [read_record(d / SFT_CONFIG) for d in (built.parent, built) if (d / SFT_CONFIG).is_file()]
    write_record(
        target / SHIPPED_RECORD,
        {
            "recipe": recipe,
            "demonstration_format": demonstration_format(recipe["env"]),
            "directory": str(recipe_directory(recipe)),
            "built_with": build_command,
            "commit": _git_commit(Path(__file__).parent),
            "shipped_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {platform.python_version()}",
            "build_records": records,
            "weights": "bfloat16",
            "evaluation": {**evaluation, **episodes_summary(Path(output) / "episodes.csv")},
        },
    )
    return target


def shipped_bytes(path: Path) -> int:
    """The shipped directory's size in bytes."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def describe(path: Path) -> str:
    """One paragraph on a shipped warm start, for the script's output."""
    record = read_record(path / SHIPPED_RECORD)
    result = record["evaluation"]
    return (
        f"{path} ({shipped_bytes(path) / 2**20:.1f} MiB): won {result['won']} of {result['games']} "
        f"games ({result['success']:.1%}, 95% interval {result['success_95'][0]:.1%}-"
        f"{result['success_95'][1]:.1%}), {result['mean_steps']} steps per game, invalid actions "
        f"{result['invalid_rate']:.1%}; record: {json.dumps(record['evaluation'])}"
    )
