"""Handing the host memory a CPU update freed back to the system.

A CPU learner's update allocates its activations on the C heap and frees them when it ends; glibc keeps
freed heap pages mapped for reuse, so the process stays resident at the update's peak, and higher as
the batches' sizes vary. The real-model WebShop table's driver (its local learner) held 11.7 GB
resident of which 2.2 GB were live; ``malloc_trim`` handed 8 GB back (docs/reliability.md,
"Host memory after an update"), room the env runner and vLLM share with it between updates.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _c_library() -> Any | None:
    """The process's C library where it has ``malloc_trim`` (glibc); None elsewhere (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        library = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return library if library is not None and hasattr(library, "malloc_trim") else None


def release_freed_memory() -> bool:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim(0)``); whether any were.
    Where the C library has no such call, nothing happens (False)."""
    library = _c_library()
    return library is not None and bool(library.malloc_trim(0))
