"""What a killed process leaves behind: SIGKILL (how hung runners are stopped, what the OOM killer
sends) runs no cleanup, so files a process writes for a while carry its owner, ``<host>-<pid>``, and
the next process of the same kind on the host removes those whose owner no longer runs."""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path


def host_tag() -> str:
    """This host's name in file-name characters (scratch space such as /dev/shm may be shared)."""
    return re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname())


def owner_tag(pid: int | None = None) -> str:
    """``<host>-<pid>``: who writes a file (this process unless ``pid`` is given)."""
    return f"{host_tag()}-{os.getpid() if pid is None else pid}"


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def owner_is_gone(owner: str) -> bool:
    """Whether ``owner`` (an :func:`owner_tag`) is a process of this host that no longer runs;
    another host's owner is never judged gone."""
    host, _, pid = owner.rpartition("-")
    return host == host_tag() and pid.isdigit() and not is_running(int(pid))


def remove_orphans(paths_and_owners: list[tuple[Path, str]]) -> list[Path]:
    """Delete each path whose owner is gone; the deleted paths."""
    removed = []
    for path, owner in paths_and_owners:
        if owner_is_gone(owner):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
