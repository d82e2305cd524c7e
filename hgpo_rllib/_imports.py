"""Lazy package exports and the 0.2.0 moves (a leaf module, standard library only).

Package ``__init__`` modules export their main classes lazily (PEP 562 ``__getattr__``), so that
importing a light sub-module (``hgpo_rllib.rl_module.config``, ``hgpo_rllib.advantages``) never loads
torch or RLlib through its parent package. Names and modules that moved in 0.2.0 stay importable from
their old paths, because checkpoints pickle class paths; using them warns once with the new path
(CHANGELOG.md lists every move).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

MOVED_IN = "0.2.0"


def lazy_getattr(
    package: str, exports: Mapping[str, str], moved: Mapping[str, str] | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``exports`` maps a name to the module that defines it (imported on
    first use); ``moved`` maps an old name of this package to its new module (imported, with a
    DeprecationWarning naming the new path)."""
    moved = dict(moved or {})

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        if name in moved:
            warnings.warn(
                f"{package}.{name} moved to {moved[name]}.{name} in hgpo-rllib {MOVED_IN}; "
                "import it from there (see CHANGELOG.md)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(moved[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def warn_moved_module(old: str, new: str) -> None:
    """Called by a re-export shim at an old module path when it is imported."""
    warnings.warn(
        f"{old} moved to {new} in hgpo-rllib {MOVED_IN}; import from {new} (see CHANGELOG.md)",
        DeprecationWarning,
        stacklevel=3,
    )
