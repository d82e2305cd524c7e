"""The class paths that checkpoints of hgpo-rllib 0.1.0 pickle, and where each class lives now: one
table, served by an import hook (a leaf module, standard library only).

RLlib saves an algorithm's classes by their dotted paths (``class_and_ctor_args.pkl``). A checkpoint of
0.1.0 names six modules that moved in 0.2.0 and whose files 0.3.0 removed (its other two paths,
``hgpo_rllib.env_runner.GroupedEnvRunner`` and ``hgpo_rllib.rl_module.LLMRLModule``, are still those
packages' exports). ``import hgpo_rllib`` installs :class:`CheckpointPathFinder`; unpickling
``hgpo_rllib.hgpo.HGPO`` imports ``hgpo_rllib`` first, so the hook is in place in every process that
restores a checkpoint (the driver, Tune's trial actor, ``rllib evaluate``), whoever calls the unpickler.
Each old module imports as an empty module that holds the table's names for it, resolved on use with a
DeprecationWarning naming the new path. Code imports from the new paths (CHANGELOG.md, 0.3.0): these
names are for old pickles only.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

#: ``module.name`` a checkpoint of 0.1.0 pickles -> ``module.name`` of the same object now.
PICKLED_PATHS = {
    "hgpo_rllib.hgpo.HGPO": "hgpo_rllib.algorithms.hgpo.hgpo.HGPO",
    "hgpo_rllib.hgpo.HGPOConfig": "hgpo_rllib.algorithms.hgpo.hgpo.HGPOConfig",
    "hgpo_rllib.callbacks.HGPOMetricsCallback": (
        "hgpo_rllib.env_runner.metrics_callback.EpisodeMetricsCallback"
    ),
    "hgpo_rllib.learner_group.GroupShardingLearnerGroup": (
        "hgpo_rllib.algorithms.learner_group.GroupShardingLearnerGroup"
    ),
    "hgpo_rllib.torch.hgpo_torch_learner.HGPOTorchLearner": (
        "hgpo_rllib.algorithms.hgpo.torch.hgpo_torch_learner.HGPOTorchLearner"
    ),
    "hgpo_rllib.connectors.history_window.HistoryWindowPrompt": (
        "hgpo_rllib.connectors.env_to_module.history_window.HistoryWindowPrompt"
    ),
    "hgpo_rllib.connectors.decode_actions.TextActionsToEnv": (
        "hgpo_rllib.connectors.module_to_env.text_actions.TextActionsToEnv"
    ),
}


def _by_module(paths: dict[str, str]) -> dict[str, dict[str, str]]:
    modules: dict[str, dict[str, str]] = {}
    for old, new in paths.items():
        module, name = old.rsplit(".", 1)
        modules.setdefault(module, {})[name] = new
    return modules


#: Old module -> {name it held: that name's path now}.
OLD_MODULES = _by_module(PICKLED_PATHS)
#: Old packages that only held old modules (``hgpo_rllib.torch`` is not ``torch``).
OLD_PACKAGES = ("hgpo_rllib.torch",)
#: The release that moved these paths (their files were removed in 0.3.0).
MOVED_IN = "0.2.0"


def resolve(old: str) -> Any:
    """The object a checkpoint names by its 0.1.0 path ``old``, with a DeprecationWarning naming its
    path now."""
    new = PICKLED_PATHS[old]
    warnings.warn(
        f"{old} moved to {new} in hgpo-rllib {MOVED_IN}; the old path resolves only for the "
        "checkpoints that name it (saving one again writes the new path)",
        DeprecationWarning,
        stacklevel=3,
    )
    module, name = new.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def _module_getattr(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        if name in names:
            return resolve(f"{module}.{name}")
        raise AttributeError(
            f"module {module!r} has no attribute {name!r}: it is a path of hgpo-rllib 0.1.0 kept only "
            f"for checkpoints (CHANGELOG.md lists where its names went)"
        )

    return __getattr__


class CheckpointPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports each module of :data:`OLD_MODULES` and :data:`OLD_PACKAGES` as a module holding only
    the table's names; finds nothing else."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in OLD_MODULES or fullname in OLD_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname in OLD_PACKAGES)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        module.__doc__ = (
            f"{module.__name__} of hgpo-rllib 0.1.0, for old checkpoints (hgpo_rllib.checkpoint_paths)"
        )
        module.__getattr__ = _module_getattr(module.__name__, OLD_MODULES.get(module.__name__, {}))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once per process): the table decides these paths."""
    if not any(isinstance(finder, CheckpointPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, CheckpointPathFinder())
