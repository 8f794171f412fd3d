"""Files of parameters: the one atomic write every layer uses (learner checkpoints, frozen
players' parameters, replays, supervised starts: a kill never leaves half of a file) and the one
file format of parameters (npz, `params_to_npz_bytes`).

In memory, parameters are nested dicts of arrays (haiku's) everywhere; they are converted only
at files: frozen players and supervised starts as npz (`coordinator.param_store`,
`experiments.build.load_supervised`), learner checkpoints with their optimiser state as flax
msgpack (`learners.checkpoint`). Frozen players' parameters read back are kept in memory up to
a bound (`Recent`): a league adds players for as long as it runs.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np


class Recent:
    """At most `size` values by key, the least recently used leaving first (thread-safe): frozen
    players' parameters, which never change, kept in memory so that they are not read again. A
    league adds players for as long as it runs, so an unbounded cache grows with it (SMAX: 0.6 MB
    a player); whatever leaves is read again on its next use."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"a cache of {size} entries holds nothing")
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, default=None):
        with self._lock:
            if key not in self._items:
                return default
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


def write_atomic(path: str, data: bytes, previous: str | None = None) -> str:
    """Writes `data` to `path` through a temporary file and `os.replace`: a kill leaves the old
    file or the new one, never half of one. `previous`: the file at `path` is moved there, once
    the new one is written whole (a full disk leaves both as they were). A write that fails
    (ENOSPC) removes its temporary file and raises. Returns `path`."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if previous is not None and os.path.exists(path):
            os.replace(path, previous)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return path


def disk_full(error: BaseException) -> bool:
    """Whether `error` says the disk (or the user's quota) is full: a write worth retrying once
    space returns."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


_VERSION_KEY = "__version__"


def flatten(params: Mapping, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], np.ndarray]:
    """{path of keys: array} for a nested dict of arrays (haiku keys may contain '/')."""
    flat = {}
    for key, value in params.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping):
            flat.update(flatten(value, path))
        else:
            flat[path] = np.asarray(value)
    return flat


def unflatten(flat: Mapping[tuple[str, ...], np.ndarray]) -> dict:
    tree: dict = {}
    for path, value in flat.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


def params_to_npz_bytes(params: Mapping, version: int) -> bytes:
    """npz with leaves `leaf_<i>`, their key paths as JSON in `__paths__`, and the version."""
    flat = flatten(params)
    arrays = {f"leaf_{i}": value for i, value in enumerate(flat.values())}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, __paths__=np.array(json.dumps([list(p) for p in flat])),
             **{_VERSION_KEY: np.asarray(version)})
    return buffer.getvalue()


_AST_RACE = "AST constructor recursion depth mismatch"
_AST_RETRIES = 5
_npz_lock = threading.Lock()


def read_npz(source: bytes | str) -> dict[str, np.ndarray]:
    """Every array of an npz file (its bytes, or its path), read whole; the one npz reader.

    numpy parses each array's header with `ast.literal_eval`, and CPython 3.11 keeps the AST
    constructor's recursion depth in interpreter-wide state: a garbage collection that switches
    to another thread using `ast` in the middle of it makes sound bytes raise
    `SystemError: AST constructor recursion depth mismatch` (cpython gh-106905). Reads here take
    one lock (the project's own reads never race each other) and a read that still meets that
    error from someone else's `ast` is retried, so an intact file is never called damaged."""
    attempts = 0
    while True:
        try:
            with _npz_lock, np.load(io.BytesIO(source) if isinstance(source, bytes) else source,
                                    allow_pickle=False) as npz:
                return {key: npz[key] for key in npz.files}
        except SystemError as e:
            attempts += 1
            if _AST_RACE not in str(e) or attempts == _AST_RETRIES:
                raise


def params_from_npz_bytes(data: bytes) -> tuple[int, dict]:
    """(version, params) of `params_to_npz_bytes`'s bytes; ValueError naming the problem if they
    are not such a file or are damaged (the zip's CRC catches changed bytes)."""
    try:
        npz = read_npz(data)
        paths = json.loads(str(npz["__paths__"]))
        flat = {tuple(p): npz[f"leaf_{i}"] for i, p in enumerate(paths)}
        version = int(npz[_VERSION_KEY])
    except Exception as e:
        raise ValueError(f"not a readable parameter file ({type(e).__name__}: {e})") from e
    return version, unflatten(flat)
