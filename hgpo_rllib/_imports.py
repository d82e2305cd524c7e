"""Lazy package exports (a leaf module, standard library only).

Package ``__init__`` modules export their main classes lazily (PEP 562 ``__getattr__``), so that
importing a light sub-module (``hgpo_rllib.rl_module.config``, ``hgpo_rllib.advantages``) never loads
torch or RLlib through its parent package. The module paths that old checkpoints pickle are served by
:mod:`hgpo_rllib.checkpoint_paths`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``exports`` maps a name to the module that defines it (imported on
    first use)."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
