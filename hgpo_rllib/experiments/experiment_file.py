"""Experiment files: the convention of RLlib's former ``rllib train file``.

An experiment file is a Python file that defines ``config`` (an ``AlgorithmConfig``) and optionally
``stop`` (a Tune stop dict), ``param_space`` (Tune search spaces merged into the config),
``points_to_evaluate`` (Tune's: a list of settings dicts, one sample each, crossed with the grids of
``param_space``; for conditional sweeps, e.g. alpha for HGPO only), ``name``,
``checkpoint_freq`` and ``prepare`` (a function ``rllib train file`` calls once before the run starts,
e.g. to build a warm start, so that importing the file builds nothing).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from envs.registry import import_file

DEFAULT_STOP = {"training_iteration": 10}
DEFAULT_CHECKPOINT_FREQ = 5


@dataclass
class Experiment:
    """What an experiment file defines."""

    config: Any
    stop: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_STOP))
    param_space: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    checkpoint_freq: int = DEFAULT_CHECKPOINT_FREQ
    source_sha256: str | None = None  # of the experiment file: --resume refuses an edited one
    #: Called once by ``rllib train file`` before the run starts (e.g. to build a warm start).
    prepare: Callable[[], Any] | None = None
    #: Settings dicts, one sample each (Tune's ``BasicVariantGenerator(points_to_evaluate=...)``).
    points_to_evaluate: list[dict[str, Any]] = field(default_factory=list)


def load_experiment_file(path: str | os.PathLike) -> Experiment:
    """Import an experiment file and read its ``config``, ``stop``, ``param_space``, ``name``,
    ``checkpoint_freq`` and ``prepare``."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"experiment file not found: {file}")
    if file.suffix != ".py":
        raise ValueError(f"cannot import experiment file {file}: not a .py file")
    try:
        module = import_file(file)
    except Exception as exc:  # the user's code: report where it failed, in one line
        raise ValueError(f"{_failing_line(exc, file)}: {type(exc).__name__}: {exc}") from exc
    config = getattr(module, "config", None)
    if not isinstance(config, AlgorithmConfig):
        raise ValueError(f"{file} must define `config`, an AlgorithmConfig (got {type(config).__name__})")
    stop = getattr(module, "stop", None) or dict(DEFAULT_STOP)
    param_space = getattr(module, "param_space", None) or {}
    if not isinstance(stop, dict) or not isinstance(param_space, dict):
        raise ValueError(f"{file}: `stop` and `param_space` must be dicts")
    checkpoint_freq = getattr(module, "checkpoint_freq", DEFAULT_CHECKPOINT_FREQ)
    if not isinstance(checkpoint_freq, int) or checkpoint_freq < 0:
        raise ValueError(f"{file}: `checkpoint_freq` must be an int >= 0, got {checkpoint_freq!r}")
    sha256 = hashlib.sha256(file.read_bytes()).hexdigest()
    name = getattr(module, "name", None)
    prepare = getattr(module, "prepare", None)
    if prepare is not None and not callable(prepare):
        raise ValueError(f"{file}: `prepare` must be a function, got {type(prepare).__name__}")
    points = getattr(module, "points_to_evaluate", None) or []
    if not isinstance(points, list) or not all(isinstance(point, dict) for point in points):
        raise ValueError(f"{file}: `points_to_evaluate` must be a list of dicts")
    return Experiment(config, dict(stop), dict(param_space), name, checkpoint_freq, sha256, prepare, points)


def apply_config_overrides(config: Any, overrides: dict[str, Any]) -> None:
    """``--config``: settings (attributes of the config) merged into the file's ``config`` in place.

    ``model_config`` is merged key by key into the file's model_config (not replaced); other
    settings go through ``AlgorithmConfig.update_from_dict`` (so ``evaluation_*`` keys and
    ``env_config`` take RLlib's own paths).
    """
    known = {k for k in vars(config) if not k.startswith("_")} | {"model_config"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"--config: unknown setting(s) {unknown}; expected attributes of {type(config).__name__}, "
            "e.g. lr, num_env_runners, model_config"
        )
    model_config = overrides.get("model_config", {})
    if not isinstance(model_config, dict):
        raise ValueError(f"--config: model_config must be a JSON object, got {model_config!r}")
    config.update_from_dict({k: v for k, v in overrides.items() if k != "model_config"})
    if model_config:
        config.rl_module(model_config={**config.user_model_config(), **model_config})


def _failing_line(exc: BaseException, file: Path) -> str:
    """``file:line`` of the innermost frame in ``file`` (a SyntaxError carries its own line)."""
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        return f"{file}:{exc.lineno}"
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == file]
    return f"{file}:{lines[-1]}" if lines else str(file)


def check_param_space(config: Any, param_space: dict[str, Any]) -> None:
    """Every ``param_space`` key must be a setting of ``config``: Tune would silently add a typo
    (``histroy_length``) as a new attribute and run every trial with the default."""
    known = set(config.to_dict())
    for key in param_space:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"param_space key {key!r} is not a setting of {type(config).__name__}{hint}")
