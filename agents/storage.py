"""Writing files so that a kill never leaves half of one: the one atomic write every layer uses
(learner checkpoints, frozen players' parameters, replays, supervised starts)."""

from __future__ import annotations

import os
import threading


def write_atomic(path: str, data: bytes) -> str:
    """Writes `data` to `path` through a temporary file and `os.replace`: a kill leaves the old
    file or the new one, never half of one. Returns `path`."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path
