"""What a killed process leaves behind: SIGKILL (how hung runners are stopped, what the OOM killer
sends) runs no cleanup, so files a process writes for a while carry its owner, ``<host>-<pid>``, and
the next process of the same kind on the host removes those whose owner no longer runs.

Files that other programs make for the owner and name at random go in a record beside the owned
path (:func:`shared_files_record`): :func:`recording_shared_files` lists the files in /dev/shm that
the processes the owner starts use (vLLM's engine queues, ``psm_*``, hundreds of MB each, which a
SIGKILL of a Ray actor leaves: Ray kills the actor's whole process group, Python's resource tracker
that would have unlinked them included), and :func:`remove_orphans` removes them with the path. A
recorded file is kept while any process still maps it or holds it open, and a file of another user
is never removed. The record is a hidden file beside the path, not in it, so that a process that
removes the path without reading the record (an older version of this package on the same host)
leaves the record for the next one."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import stat
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

#: Where POSIX shared memory lives (``shm_open``; Python's ``SharedMemory``).
SHARED_MEMORY = Path("/dev/shm")
#: The end of a record's name (:func:`shared_files_record`).
SHARED_FILES_RECORD = "shared_memory_files"
#: The shared-memory files recorded: Python's ``SharedMemory`` segments (``psm_<hex>``, what vLLM's
#: message queues, object storage and tensor arena use) and vLLM's own (``vllm_*``).
RECORDED_NAMES = re.compile(r"psm_[0-9a-f]+|vllm_[A-Za-z0-9_.-]+")


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
    """Delete each path whose owner is gone, with the shared-memory files its record lists; the
    deleted paths. A path whose recorded files are still in use stays, its record narrowed to them,
    for a later call."""
    removed = []
    for path, owner in paths_and_owners:
        if owner_is_gone(owner) and not release_shared_files(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def shared_files_record(path: str | Path) -> Path:
    """Where the shared-memory files of ``path``'s owner are recorded: ``.<name>.shared_memory_files``
    beside it, one name per line."""
    path = Path(path)
    return path.with_name(f".{path.name}.{SHARED_FILES_RECORD}")


def recorded_paths(directory: Path, pattern: str) -> list[Path]:
    """The paths matching ``pattern`` in ``directory`` that have a record, whether the path itself is
    still there or not (removed without its record)."""
    suffix = f".{SHARED_FILES_RECORD}"
    return [
        record.with_name(record.name[1 : -len(suffix)]) for record in directory.glob(f".{pattern}{suffix}")
    ]


# ------------------------------------------------------------------ shared memory of child processes
def process_ids() -> list[int]:
    """Every process this one can see (/proc)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for child in process_ids():
        with contextlib.suppress(OSError, ValueError, IndexError):  # gone meanwhile
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            stat_line = Path(f"/proc/{child}/stat").read_text()
            children.setdefault(int(stat_line.rsplit(")", 1)[1].split()[1]), []).append(child)
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop()
        found.append(child)
        queue += children.get(child, [])
    return found


def files_in_use(pids: Iterable[int], directory: Path = SHARED_MEMORY) -> set[str]:
    """Names of the files directly in ``directory`` that the processes ``pids`` map or hold open
    (not those already unlinked). Processes this user may not inspect, or that end meanwhile, are
    skipped."""
    names = set()
    for pid in pids:
        paths = []
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                fields = line.split(maxsplit=5)
                paths += fields[5:]
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    paths.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        for path in paths:
            if not path.endswith(" (deleted)") and Path(path).parent == directory:
                names.add(Path(path).name)
    return names


def recorded_shared_files(path: str | Path) -> list[str]:
    """The names in ``path``'s record (none without one)."""
    try:
        lines = shared_files_record(path).read_text().split()
    except OSError:
        return []
    return [name for name in lines if RECORDED_NAMES.fullmatch(name)]


def record_shared_files(path: str | Path, pids: Iterable[int]) -> list[str]:
    """Add to ``path``'s record the shared-memory files (:data:`RECORDED_NAMES`) that the processes
    ``pids`` use now; the names recorded."""
    in_use = filter(RECORDED_NAMES.fullmatch, files_in_use(pids))
    names = sorted({*recorded_shared_files(path), *in_use})
    if names != recorded_shared_files(path):
        _write_record(path, names)
    return names


def _write_record(path: str | Path, names: list[str]) -> None:
    record = shared_files_record(path)
    partial = record.with_name(f"{record.name}.partial")
    partial.write_text("".join(f"{name}\n" for name in names))
    partial.replace(record)  # a kill never leaves half a record


@contextlib.contextmanager
def recording_shared_files(path: str | Path, interval_s: float = 1.0) -> Iterator[None]:
    """Record, in ``path``'s record, the shared-memory files of the processes this one starts while
    the block runs (an engine's, not those of processes started before it, such as another engine):
    :func:`record_shared_files` every ``interval_s`` (a process starting an engine may be killed
    before it returns, by the OOM killer above all) and once at the block's end."""
    earlier = set(descendants(os.getpid()))
    done = threading.Event()

    def record() -> None:
        with contextlib.suppress(OSError):
            record_shared_files(path, set(descendants(os.getpid())) - earlier)

    def poll() -> None:
        while not done.wait(interval_s):
            record()

    thread = threading.Thread(target=poll, name="record-shared-files", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        record()


def release_shared_files(path: str | Path, wait_s: float = 0.0) -> list[str]:
    """Delete the shared-memory files in ``path``'s record that no process maps or holds open,
    waiting up to ``wait_s`` for those still in use to be released; never a file of another user.
    Returns the names still in use, to which the record is narrowed (without any, it is deleted)."""
    deadline = time.monotonic() + wait_s
    while True:
        names = []
        for name in recorded_shared_files(path):
            with contextlib.suppress(FileNotFoundError):
                info = (SHARED_MEMORY / name).lstat()
                if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid():
                    names.append(name)  # else not ours: never removed, nor kept in the record
        in_use = files_in_use(process_ids()) if names else set()
        for name in names:
            if name not in in_use:
                with contextlib.suppress(FileNotFoundError):
                    (SHARED_MEMORY / name).unlink()
        kept = [name for name in names if name in in_use]
        if not kept or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    record = shared_files_record(path)
    if kept:
        _write_record(path, kept)
    else:
        record.unlink(missing_ok=True)
        record.with_name(f"{record.name}.partial").unlink(missing_ok=True)  # of a kill mid-write
    return kept
