"""Importing a user's code by path: ``module:attr`` names whose module is an importable name or a
``.py`` file's path (an experiment file, a ``file.py:Class`` env), each file imported once per
process under a module name that encodes its path (:func:`file_module_name`), so any process on the
machine can tell the file from a class (:func:`module_file`).
"""

from __future__ import annotations

import base64
import functools
import importlib
import importlib.util
from pathlib import Path
from typing import Any

#: Module names of files imported by path (experiment files, ``file.py:Class`` envs): the prefix and
#: the file's absolute path in base32, so any process on the machine can tell the file from a class.
FILE_MODULE_PREFIX = "_hgpo_file_"


def file_module_name(file: Path) -> str:
    encoded = base64.b32encode(str(file.resolve()).encode()).decode().rstrip("=").lower()
    return f"{FILE_MODULE_PREFIX}{encoded}"


def module_file(module_name: str) -> Path | None:
    """The file a :func:`file_module_name` module was imported from, else None."""
    if not module_name.startswith(FILE_MODULE_PREFIX):
        return None
    encoded = module_name[len(FILE_MODULE_PREFIX) :].upper()
    return Path(base64.b32decode(encoded + "=" * (-len(encoded) % 8)).decode())


def import_file(file: Path) -> Any:
    """Import a ``.py`` file by path as a new module (not in ``sys.modules``: Ray's pickler then
    ships its functions and classes by value, so workers need not find the file)."""
    spec = importlib.util.spec_from_file_location(file_module_name(file), file)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {file} (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_object(path: str) -> Any:
    """``module:attr``, where the module is an importable name or a ``.py`` file's path."""
    module_name, sep, attr = path.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{path!r} is not a 'module:Class' path")
    if module_name.endswith(".py"):
        module = _imported_file(Path(module_name).expanduser().resolve())
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # a name typed on a command line: one line, not an import traceback
            raise ValueError(
                f"{path!r}: cannot import {module_name} ({type(exc).__name__}: {exc}); pass a module "
                "on the Python path or a file.py:Class path"
            ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{module_name} has no {attr!r}") from None


@functools.cache
def _imported_file(file: Path) -> Any:
    if not file.is_file():
        raise ValueError(f"no such file: {file}")
    return import_file(file)
