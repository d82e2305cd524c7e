"""Experiment files: the convention of RLlib's former ``rllib train file``, with typed settings.

An experiment file declares the settings it accepts (``SETTINGS``, names of
:class:`~hgpo_rllib.experiments.settings.RunSettings` fields) and a function ``experiment(settings)``
that returns its run as a dict: ``config`` (an ``AlgorithmConfig``) and optionally ``stop`` (a Tune stop
dict), ``param_space`` (Tune search spaces merged into the config), ``points_to_evaluate`` (Tune's: a
list of settings dicts, one sample each, crossed with the grids of ``param_space``; for conditional
sweeps, e.g. alpha for HGPO only), ``name`` (a string, or a function of the final config, so that
``--config`` and ``--module`` changes show in it), ``checkpoint_freq`` and ``prepare`` (a function
``rllib train file`` calls once before the run starts, e.g. to build a warm start). A file without
``experiment`` defines the same names at module level instead and takes no settings.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from envs.file_import import import_file
from hgpo_rllib.experiments.settings import check_declared, settings_of
from hgpo_rllib.rl_module.config import LLMModuleConfig

DEFAULT_STOP = {"training_iteration": 10}
DEFAULT_CHECKPOINT_FREQ = 5
#: What ``experiment(settings)`` may return (the names a file without it defines at module level).
EXPERIMENT_KEYS = (
    "config",
    "stop",
    "param_space",
    "points_to_evaluate",
    "name",
    "checkpoint_freq",
    "prepare",
)


@dataclass
class Experiment:
    """What an experiment file defines."""

    config: Any
    stop: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_STOP))
    param_space: dict[str, Any] = field(default_factory=dict)
    #: The experiment's name, or a function of its final config that gives it.
    name: str | Callable[[Any], str] | None = None
    checkpoint_freq: int = DEFAULT_CHECKPOINT_FREQ
    source_sha256: str | None = None  # of the experiment file: --resume refuses an edited one
    #: Called once by ``rllib train file`` before the run starts (e.g. to build a warm start).
    prepare: Callable[[], Any] | None = None
    #: Settings dicts, one sample each (Tune's ``BasicVariantGenerator(points_to_evaluate=...)``).
    points_to_evaluate: list[dict[str, Any]] = field(default_factory=list)
    #: The declared settings' values the file was built with (the run record keeps them for --resume).
    settings: dict[str, Any] = field(default_factory=dict)

    def run_name(self) -> str | None:
        """The name, from the config as it is now (after ``--config`` and ``--module``)."""
        return self.name(self.config) if callable(self.name) else self.name


def import_experiment_module(path: str | os.PathLike) -> ModuleType:
    """Import an experiment file (its errors in one line naming the file and line)."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"experiment file not found: {file}")
    if file.suffix != ".py":
        raise ValueError(f"cannot import experiment file {file}: not a .py file")
    try:
        return import_file(file)
    except Exception as exc:  # the user's code: report where it failed, in one line
        raise ValueError(f"{_failing_line(exc, file)}: {type(exc).__name__}: {exc}") from exc


def declared_settings(module: ModuleType) -> tuple[str, ...]:
    """The settings an experiment file declares (none for a file that defines ``config`` itself)."""
    source = _source(module)
    if not hasattr(module, "experiment"):
        if hasattr(module, "SETTINGS"):
            raise ValueError(f"{source} declares SETTINGS but defines no `experiment(settings)` function")
        return ()
    if not callable(module.experiment):
        raise ValueError(f"{source}: `experiment` must be a function of the settings")
    return check_declared(getattr(module, "SETTINGS", ()), source)


def load_experiment_file(
    path: str | os.PathLike,
    settings: Mapping[str, Any] | None = None,
    module: ModuleType | None = None,
) -> Experiment:
    """Import an experiment file (or take the already imported ``module``) and build its run with
    ``settings`` (values of its declared settings; the others keep their defaults)."""
    file = Path(path)
    module = module or import_experiment_module(file)
    declared = declared_settings(module)
    values = dict(settings or {})
    if not declared and values:
        raise ValueError(f"{file} declares no settings; it cannot take {sorted(values)}")
    if declared:
        run_settings = settings_of(declared, **values)
        try:
            defined = module.experiment(run_settings)
        except ValueError:
            raise  # a refused combination of settings: already one line
        except Exception as exc:
            raise ValueError(f"{_failing_line(exc, file)}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(defined, Mapping):
            raise ValueError(f"{file}: experiment(settings) must return a dict, got {type(defined).__name__}")
        unknown = sorted(set(defined) - set(EXPERIMENT_KEYS))
        if unknown:
            raise ValueError(
                f"{file}: experiment(settings) returned unknown key(s) {unknown}; known: "
                f"{list(EXPERIMENT_KEYS)}"
            )
        recorded = {name: getattr(run_settings, name) for name in declared}
    else:
        defined = {key: getattr(module, key) for key in EXPERIMENT_KEYS if hasattr(module, key)}
        recorded = {}
    experiment = _experiment(file, dict(defined))
    experiment.settings = recorded
    return experiment


def _experiment(file: Path, defined: dict[str, Any]) -> Experiment:
    """Check what a file defined and make it an :class:`Experiment`."""
    config = defined.get("config")
    if not isinstance(config, AlgorithmConfig):
        raise ValueError(f"{file} must define `config`, an AlgorithmConfig (got {type(config).__name__})")
    stop = defined.get("stop") or dict(DEFAULT_STOP)
    param_space = defined.get("param_space") or {}
    if not isinstance(stop, dict) or not isinstance(param_space, dict):
        raise ValueError(f"{file}: `stop` and `param_space` must be dicts")
    checkpoint_freq = defined.get("checkpoint_freq", DEFAULT_CHECKPOINT_FREQ)
    if not isinstance(checkpoint_freq, int) or checkpoint_freq < 0:
        raise ValueError(f"{file}: `checkpoint_freq` must be an int >= 0, got {checkpoint_freq!r}")
    name = defined.get("name")
    if name is not None and not (isinstance(name, str) or callable(name)):
        raise ValueError(f"{file}: `name` must be a string or a function of the config, got {name!r}")
    prepare = defined.get("prepare")
    if prepare is not None and not callable(prepare):
        raise ValueError(f"{file}: `prepare` must be a function, got {type(prepare).__name__}")
    points = defined.get("points_to_evaluate") or []
    if not isinstance(points, list) or not all(isinstance(point, dict) for point in points):
        raise ValueError(f"{file}: `points_to_evaluate` must be a list of dicts")
    sha256 = hashlib.sha256(file.read_bytes()).hexdigest()
    return Experiment(config, dict(stop), dict(param_space), name, checkpoint_freq, sha256, prepare, points)


def _source(module: ModuleType) -> str:
    return getattr(module, "__file__", None) or module.__name__


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


def parse_module_setting(text: str) -> tuple[str, str, Any]:
    """``--module MODULE.KEY=VALUE``: the module id, the key, and the value (JSON where it parses,
    e.g. ``1e-5`` or ``{"r": 8}``, else the text as it is, e.g. a path)."""
    target, sep, raw = text.partition("=")
    module_id, dot, key = target.rpartition(".")
    if not sep or not dot or not module_id or not key:
        raise ValueError(f"--module {text!r}: expected MODULE.KEY=VALUE, e.g. planner.lr=1e-5")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return module_id, key, value


def apply_module_overrides(config: Any, settings: Sequence[str]) -> None:
    """``--module MODULE.KEY=VALUE`` (repeatable): per-module settings, in place. A ``model_config``
    key (:class:`~hgpo_rllib.rl_module.config.LLMModuleConfig`'s, e.g. ``model``, ``lora``) goes to that
    module's ``RLModuleSpec``, where it wins over the shared ``model_config``; an ``AlgorithmConfig``
    setting (``lr``, ``micro_batch_size``, ...) goes through RLlib's
    ``algorithm_config_overrides_per_module``, which ``get_config_for_module`` applies."""
    modules = sorted(config.policies) if config.is_multi_agent else [DEFAULT_MODULE_ID]
    algorithm_keys = {k for k in vars(config) if not k.startswith("_")}
    model_keys = set(LLMModuleConfig.__dataclass_fields__)
    model_config: dict[str, dict[str, Any]] = {}
    overrides = {mid: dict(o) for mid, o in config.algorithm_config_overrides_per_module.items()}
    for text in settings:
        module_id, key, value = parse_module_setting(text)
        if module_id not in modules:
            raise ValueError(f"--module {text!r}: no module {module_id!r}; this config's modules: {modules}")
        if key in model_keys:
            model_config.setdefault(module_id, {})[key] = value
        elif key in algorithm_keys:
            overrides.setdefault(module_id, {})[key] = value
        else:
            raise ValueError(
                f"--module {text!r}: {key!r} is neither a model_config key nor a setting of "
                f"{type(config).__name__} (e.g. model, lora, lr, micro_batch_size)"
            )
    if overrides:
        config.multi_agent(algorithm_config_overrides_per_module=overrides)
    if not model_config:
        return
    if not config.is_multi_agent:
        config.rl_module(model_config={**config.user_model_config(), **model_config[DEFAULT_MODULE_ID]})
        return
    current = config._rl_module_spec
    specs = dict(current.rl_module_specs) if isinstance(current, MultiRLModuleSpec) else {}
    for module_id, keys in model_config.items():
        spec = specs.get(module_id) or (current if isinstance(current, RLModuleSpec) else RLModuleSpec())
        own = dict(spec.model_config or {}) if isinstance(spec.model_config, dict) else {}
        specs[module_id] = dataclasses.replace(spec, model_config={**own, **keys})
    if isinstance(current, RLModuleSpec):  # one spec for every module: each keeps it
        specs = {mid: specs.get(mid, current) for mid in modules}
    config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))


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
