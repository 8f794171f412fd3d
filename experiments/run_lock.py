"""The run directory's lock: one program at a time writes a run directory.

A league holds `<run_dir>/run.lock` (an exclusive `flock`, with the holder's pid and what it
is in the file) from before it writes anything until it exits; tools that rewrite a stopped
run (`experiments.surgery`) take it too. The kernel drops the lock when the process dies, so a
killed run never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os

FILENAME = "run.lock"


class RunLocked(RuntimeError):
    """Another process holds the run directory; the message names it."""


def hold(run_dir: str, what: str):
    """Takes the lock of `run_dir` (created if needed) for this process; returns the open file
    that holds it (close it, or exit, to release). RunLocked if another process holds it."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, FILENAME)
    f = open(path, "a+")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise RunLocked(f"{run_dir} is in use by {holder}; stop it first (Ctrl-C lets a league "
                        "write its checkpoints) or wait for it to finish") from None
    f.seek(0)
    f.truncate()
    f.write(f"{what} (pid {os.getpid()})")
    f.flush()
    return f
