"""The run directory's parameter store: frozen players' parameters, written once.

`<run_dir>/params/<player_id>.npz` holds one player's parameters (a nested dict of numpy
arrays, flattened to "/"-joined keys) and the learner version they came from. Files are
written atomically (temporary file, then rename) and never overwritten: a frozen player
stays frozen. Pure numpy, so the coordinator process needs no JAX.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Mapping

import numpy as np

_VERSION_KEY = "__version__"


def flatten(params: Mapping, prefix: str = "") -> dict[str, np.ndarray]:
    flat = {}
    for key, value in params.items():
        if "/" in str(key):
            raise ValueError(f"parameter key {key!r} contains '/', which the store uses as separator")
        path = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, path))
        else:
            flat[path] = np.asarray(value)
    return flat


def unflatten(flat: Mapping[str, np.ndarray]) -> dict:
    tree: dict = {}
    for path, value in flat.items():
        node = tree
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def params_to_npz_bytes(params: Mapping, version: int) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **flatten(params), **{_VERSION_KEY: np.asarray(version)})
    return buffer.getvalue()


def params_from_npz_bytes(data: bytes) -> tuple[int, dict]:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        flat = {k: npz[k] for k in npz.files}
    version = int(flat.pop(_VERSION_KEY))
    return version, unflatten(flat)


class ParamStore:
    """Frozen parameters by player id, on disk, with an in-memory cache."""

    def __init__(self, run_dir: str):
        self.directory = os.path.join(run_dir, "params")
        os.makedirs(self.directory, exist_ok=True)
        self._cache: dict[str, tuple[int, dict]] = {}
        self._lock = threading.Lock()

    def path(self, player_id: str) -> str:
        if "/" in player_id or player_id.startswith("."):
            raise ValueError(f"player id {player_id!r} cannot name a parameter file")
        return os.path.join(self.directory, f"{player_id}.npz")

    def __contains__(self, player_id: str) -> bool:
        return os.path.exists(self.path(player_id))

    def save(self, player_id: str, params: Mapping, version: int) -> bool:
        """Writes a player's parameters once; returns False (writing nothing) if they exist."""
        path = self.path(player_id)
        if os.path.exists(path):
            return False
        data = params_to_npz_bytes(params, version)
        tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return True

    def load(self, player_id: str) -> tuple[int, dict]:
        with self._lock:
            if player_id in self._cache:
                return self._cache[player_id]
        path = self.path(player_id)
        try:
            with open(path, "rb") as f:
                loaded = params_from_npz_bytes(f.read())
        except FileNotFoundError:
            raise KeyError(f"no stored parameters for player {player_id!r} (looked for {path})") from None
        except Exception as e:
            raise ValueError(
                f"stored parameters {path} are corrupt ({type(e).__name__}: {e}); "
                "restore the file from a backup, or remove the player's run directory to start over"
            ) from None
        with self._lock:
            self._cache[player_id] = loaded
        return loaded
