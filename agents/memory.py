"""Memory that a process has freed, handed back to the operating system.

glibc's malloc keeps freed blocks for reuse (in one arena per thread), so a process keeps the
peak of what it once allocated: compiling an XLA program, building a game's environment or
loading a supervised start can leave memory that nothing uses again. `malloc_trim` returns what
is not pinned between live blocks. Measured by hand on the default SMAX league at 57 minutes
(issue 55): a trim gave back 88 MB of the driver, 70 of the evaluator and 19 of the learner
group; the driver's ~0.5 GB came from compiling at its checks (`agents.parameter_shapes` now
avoids it), not from what a trim returns.

Every long-lived process of a league calls `release_periodically()` once (the driver after its
checks, each node when it is built, each `jax.distributed` follower): a daemon thread releases
every `EVERY_SECONDS`. On a C library without `malloc_trim` (macOS, musl) nothing is released.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time

EVERY_SECONDS = 60.0

_started = False
_lock = threading.Lock()


def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):   # not glibc
        return None


_TRIM = _malloc_trim()


def release_freed_memory() -> bool:
    """Hands malloc's free pages back to the OS; whether the C library could (glibc's
    `malloc_trim`)."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def release_periodically(every_seconds: float = EVERY_SECONDS) -> None:
    """Releases now, then every `every_seconds` on a daemon thread; once per process (later
    calls do nothing), so that every node of a process can call it."""
    global _started
    with _lock:
        if _started:
            return
        _started = True
    release_freed_memory()

    def loop():
        while True:
            time.sleep(every_seconds)
            release_freed_memory()

    threading.Thread(target=loop, daemon=True, name="release-freed-memory").start()
