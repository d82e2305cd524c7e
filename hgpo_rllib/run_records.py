"""The settings record of a resumable job, and the lock on its directory (a leaf module: standard
library and ``filelock``).

``rllib train file``, ``rllib evaluate`` and ``rllib sft`` each keep a JSON record of the settings a
job started with in its output directory. Rerunning the same command resumes the job; a rerun with
other settings is refused, naming what changed, instead of mixing two jobs' results in one directory.
Files are written atomically (a temporary file, then a rename), so a crash never leaves a half-written
record or table. A job holds :func:`exclusive_directory` while it writes, so a second job started on
the same directory is refused at once instead of interleaving its files with the first's.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

#: The lock file :func:`exclusive_directory` keeps in a job's directory.
LOCK_FILE = ".hgpo-rllib.lock"


def write_atomically(path: Path, text: str, *, scratch: Path | None = None) -> None:
    """Write ``text`` to a temporary file, then rename it over ``path``. The temporary file lies
    beside ``path``, or in ``scratch`` (on the same filesystem) where a process copying ``path``'s
    directory must not see it come and go."""
    name = f".{path.name}.partial" if scratch is None else f".{path.parent.name}-{path.name}.partial"
    tmp = (scratch or path.parent) / name
    tmp.write_text(text)
    os.replace(tmp, path)


def as_json(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` as they read back from JSON (tuples become lists, other objects their repr)."""
    return json.loads(json.dumps(dict(settings), default=repr))


def read_record(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; a corrupt or non-object file is a ValueError naming the file."""
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); it may be truncated") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(value).__name__}")
    return value


def changed_settings(
    saved: Mapping[str, Any], wanted: Mapping[str, Any], keys: Iterable[str] | None = None
) -> list[str]:
    """``"key was X, now Y"`` for every setting that differs (over ``keys``, default both records')."""
    wanted = as_json(wanted)
    names = sorted(set(saved) | set(wanted)) if keys is None else list(keys)
    return [
        f"{k} was {saved.get(k)!r}, now {wanted.get(k)!r}" for k in names if saved.get(k) != wanted.get(k)
    ]


def write_record(path: Path, settings: Mapping[str, Any]) -> None:
    """Write ``settings`` as the record at ``path`` (atomically)."""
    write_atomically(path, json.dumps(as_json(settings), indent=2))


@contextlib.contextmanager
def exclusive_directory(directory: Path, job: str) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` (created if missing) while ``job`` writes into it.

    A second job on the same directory, in this process or another, gets a FileExistsError at once
    naming the directory. The operating system drops the lock when its process dies, so a killed job
    never leaves the directory locked.
    """
    directory.mkdir(parents=True, exist_ok=True)
    lock = FileLock(directory / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise FileExistsError(
            f"{directory} is being written by another {job} right now; wait for it to finish, "
            "or choose another output directory"
        ) from None
    try:
        yield
    finally:
        lock.release()


def holds_other_files(directory: Path) -> bool:
    """Whether ``directory`` holds anything besides its lock file."""
    return directory.is_dir() and any(entry.name != LOCK_FILE for entry in directory.iterdir())
