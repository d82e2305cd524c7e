"""What a killed process leaves behind: SIGKILL (how hung runners are stopped, what the OOM killer
sends) runs no cleanup, so files a process writes for a while carry its owner, ``<host>-<pid>``, and
the next process of the same kind on the host removes those whose owner no longer runs.

Files that other programs make for the owner and name at random go in a record inside the owned
directory: :func:`recording_shared_files` lists the files in /dev/shm that the owner's child
processes use (vLLM's engine queues, ``psm_*``, hundreds of MB each, which a SIGKILL of a Ray actor
leaves: Ray kills the actor's whole process group, Python's resource tracker that would have unlinked
them included), and :func:`remove_orphans` removes them with the directory. A recorded file is kept
while any process still maps it or holds it open, or when it belongs to another user."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

#: Where POSIX shared memory lives (``shm_open``; Python's ``SharedMemory``).
SHARED_MEMORY = Path("/dev/shm")
#: In an owned directory: the names of the files in :data:`SHARED_MEMORY` that the owner's child
#: processes used, one per line (:func:`record_shared_files`).
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
        if owner_is_gone(owner) and not remove_recorded_shared_files(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


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


def recorded_shared_files(directory: Path) -> list[str]:
    """The names in ``directory``'s record (none without one)."""
    try:
        lines = (directory / SHARED_FILES_RECORD).read_text().split()
    except OSError:
        return []
    return [name for name in lines if RECORDED_NAMES.fullmatch(name)]


def record_shared_files(directory: str | Path, pid: int | None = None) -> list[str]:
    """Add to ``directory``'s record the shared-memory files (:data:`RECORDED_NAMES`) that the
    processes below ``pid`` (this process) use now; the names recorded."""
    directory = Path(directory)
    in_use = files_in_use(descendants(os.getpid() if pid is None else pid))
    names = sorted({*recorded_shared_files(directory), *filter(RECORDED_NAMES.fullmatch, in_use)})
    if names != recorded_shared_files(directory):
        _write_record(directory, names)
    return names


def _write_record(directory: Path, names: list[str]) -> None:
    partial = directory / f".{SHARED_FILES_RECORD}.partial"
    partial.write_text("".join(f"{name}\n" for name in names))
    partial.replace(directory / SHARED_FILES_RECORD)  # a kill never leaves half a record


@contextlib.contextmanager
def recording_shared_files(directory: str | Path, interval_s: float = 1.0) -> Iterator[None]:
    """Record (:func:`record_shared_files`) every ``interval_s`` while the block runs (a process
    starting an engine may be killed before it returns, by the OOM killer above all) and once at
    its end."""
    done = threading.Event()

    def poll() -> None:
        while not done.wait(interval_s):
            with contextlib.suppress(OSError):  # the directory removed meanwhile
                record_shared_files(directory)

    thread = threading.Thread(target=poll, name="record-shared-files", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        with contextlib.suppress(OSError):
            record_shared_files(directory)


def remove_recorded_shared_files(directory: Path) -> list[str]:
    """Delete the shared-memory files in ``directory``'s record, of a process that no longer runs,
    except those some process still maps or holds open, or that belong to another user; the names
    still in use (the record is narrowed to them)."""
    names = [name for name in recorded_shared_files(directory) if (SHARED_MEMORY / name).exists()]
    if not names:
        return []
    in_use = files_in_use(process_ids())
    kept = []
    for name in names:
        path = SHARED_MEMORY / name
        with contextlib.suppress(FileNotFoundError):
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
                continue  # not ours: never removed, nor kept in the record
            if name in in_use:
                kept.append(name)
            else:
                path.unlink()
    if kept:
        _write_record(directory, kept)
    return kept
