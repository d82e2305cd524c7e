"""Where ``rllib train file`` writes: one experiment directory per run of a name (``<name>``,
``<name>_run2``, ...; never shared, never overwritten), the run record that ``--resume`` checks, and
the names of the trials' directories."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from hgpo_rllib.experiments.naming import estimator_run_name
from hgpo_rllib.run_records import changed_settings, read_record

#: What ``rllib train file`` started a run with, in its experiment directory (checked by --resume).
RUN_RECORD = "rllib_train_args.json"


def check_resume(experiment_dir: Path, record: dict[str, Any]) -> None:
    """``--resume`` continues the run as it was started: Tune would silently ignore a new stop,
    checkpoint frequency or experiment file, so a change is refused instead."""
    saved = experiment_dir / RUN_RECORD
    if not saved.is_file():
        return  # a run started before run records existed
    changed = changed_settings(read_record(saved), record, keys=record)
    if changed:
        raise ValueError(
            f"--resume cannot change a run's settings ({'; '.join(changed)}); resume with the original "
            "flags and file, or start a new run with --name"
        )


def trial_name(trial: Any) -> str:
    """Name a trial from its settings, as the authors' scripts do (e.g. ``k2_hgpo_alpha1.0_base0_<id>``);
    other algorithms by their name and K (``hiper_k2_<id>``)."""
    cfg = trial.config
    if "estimator" not in cfg:
        return f"{trial.trainable_name.lower()}_k{cfg.get('history_length', '?')}_{trial.trial_id}"
    name = estimator_run_name(
        cfg.get("history_length", "?"),
        cfg.get("estimator", "hgpo"),
        cfg.get("length_weight_alpha", "?"),
        cfg.get("base_group", False),
    )
    return f"{name}_{trial.trial_id}"


def experiment_runs(storage: Path, name: str) -> dict[int, Path]:
    """The runs of experiment ``name`` under ``storage`` by number: 1 is ``name``, n is ``name_run<n>``."""
    runs = {1: storage / name} if (storage / name).exists() else {}
    for path in storage.glob(f"{glob.escape(name)}_run*"):
        suffix = path.name[len(name) + len("_run") :]
        if suffix.isdigit():
            runs[int(suffix)] = path
    return dict(sorted(runs.items()))


def claim_experiment_dir(storage: Path, name: str) -> Path:
    """Create the directory of a new run of ``name``: ``name``, else ``name_run<n>`` after the latest
    run; a directory another run creates meanwhile is skipped, never shared."""
    runs = experiment_runs(storage, name)
    number = max(runs, default=0) + 1
    while True:
        path = storage / (name if number == 1 else f"{name}_run{number}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            number += 1


def check_run_name(name: str) -> None:
    """An experiment name is one folder under the storage path, never a path of its own."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"--name {name!r} is not a name: give one folder name, without '/' or '..'")
