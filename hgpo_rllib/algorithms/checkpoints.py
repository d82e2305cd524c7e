"""Checkpoint housekeeping of the text-agent algorithms
(:class:`~hgpo_rllib.algorithms.text_agent.TextAgent`).

A checkpoint records the env it trains on (:data:`ENV_RECORD`), so it plays (``rllib evaluate``) where
the env is not registered. A copy Tune saves into the temp dir names the process saving it
(:data:`SAVING_OWNER`), and the next algorithm started on the host removes the copies whose saver is
gone. A checkpoint that does not load (a crash or a full disk cut it short) falls back to the newest
older checkpoint of the same trial that does (:func:`load_or_older`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import envs
from hgpo_rllib.orphans import owner_tag, remove_orphans
from hgpo_rllib.run_records import write_record

logger = logging.getLogger(__name__)

#: In a checkpoint being saved in the temp dir: the saving process (:func:`hgpo_rllib.orphans.owner_tag`).
SAVING_OWNER = ".hgpo_saving_owner"
#: In each checkpoint: the env's name and ``module:Class`` (:func:`env_record`).
ENV_RECORD = "hgpo_env.json"


def env_record(config: Any) -> dict[str, str]:
    """The env a config trains on: its name and its class as ``module:Class`` (``file.py:Class`` for
    a class defined in an experiment file)."""
    return {"env": envs.env_name(config.env), "env_class": envs.env_class_path(config.env, config.env_config)}


def write_env_record(checkpoint_dir: str, config: Any) -> None:
    """The env's name and class into the checkpoint (:data:`ENV_RECORD`)."""
    write_record(Path(checkpoint_dir) / ENV_RECORD, env_record(config))


def mark_saving_owner(checkpoint_dir: str) -> None:
    """A checkpoint being saved into a new directory of the temp dir (Tune's trial save, copied to
    the trial's storage and deleted after) names its owner (:data:`SAVING_OWNER`): a trial killed
    meanwhile leaves the copy (a full set of weights) for :func:`remove_orphaned_checkpoint_copies`."""
    if Path(checkpoint_dir).parent == Path(tempfile.gettempdir()):
        (Path(checkpoint_dir) / SAVING_OWNER).write_text(owner_tag())


def load_or_older(load: Callable[[str], None], checkpoint_dir: str, iteration: Callable[[], int]) -> None:
    """``load(checkpoint_dir)``, falling back to the newest older checkpoint of the same trial that
    loads when this one does not, with a warning naming it and its ``iteration()``; raises the
    checkpoint's own error when none loads."""
    try:
        load(checkpoint_dir)
        return
    except Exception as error:  # any damage: truncated pickles, missing files, bad headers
        failure = error
    for older in older_checkpoints(Path(checkpoint_dir)):
        try:
            load(str(older))
        except Exception:
            continue
        logger.warning(
            "checkpoint %s cannot be loaded (%s: %s); resuming from %s (iteration %d) instead",
            checkpoint_dir,
            type(failure).__name__,
            failure,
            older.name,
            iteration(),
        )
        return
    raise failure


def older_checkpoints(checkpoint: Path) -> list[Path]:
    """The trial's checkpoints (Tune's ``checkpoint_<n>`` directories beside ``checkpoint``) older
    than it, newest first."""

    def number(path: Path) -> int | None:
        match = re.fullmatch(r"checkpoint_(\d+)", path.name)
        return int(match.group(1)) if match else None

    own = number(checkpoint)
    if own is None or not checkpoint.parent.is_dir():
        return []
    older = [(n, p) for p in checkpoint.parent.iterdir() if (n := number(p)) is not None and n < own]
    return [p for _, p in sorted(older, reverse=True)]


def remove_orphaned_checkpoint_copies(temp_dir: Path) -> list[Path]:
    """Delete the checkpoint copies in ``temp_dir`` (its ``tmp*`` directories with a
    :data:`SAVING_OWNER` file) whose saving process no longer runs on this host."""
    owned = []
    for marker in temp_dir.glob(f"tmp*/{SAVING_OWNER}"):
        with contextlib.suppress(OSError):  # removed meanwhile by its owner
            owned.append((marker.parent, marker.read_text()))
    return remove_orphans(owned)
