"""The run directory's parameter store: frozen players' parameters, written once.

`<run_dir>/params/<player_id>.npz` holds one player's parameters (a nested dict of numpy
arrays, stored leaf by leaf with their key paths) and the learner version they came from. Files are
written atomically (temporary file, then rename) and never overwritten: a frozen player
stays frozen. Pure numpy, so the coordinator process needs no JAX.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Mapping

import numpy as np

from agents.storage import write_atomic  # noqa: F401 -- also this module's API

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


def params_from_npz_bytes(data: bytes) -> tuple[int, dict]:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        paths = json.loads(str(npz["__paths__"]))
        flat = {tuple(p): npz[f"leaf_{i}"] for i, p in enumerate(paths)}
        version = int(npz[_VERSION_KEY])
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
        write_atomic(path, params_to_npz_bytes(params, version))
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


def player_params(run_dir: str, player_id: str) -> tuple[int, dict]:
    """(version, params) of any player of a run, read from disk: a learning agent's learner
    checkpoint (learners/checkpoint.py), a frozen player's `params/` file, or, for a learning
    agent of a run that has not written a checkpoint yet, its newest frozen snapshot."""
    from coordinator.history import LeagueHistory
    from learners import checkpoint

    got = checkpoint.read_params(run_dir, player_id)
    if got is not None:
        return got
    store = ParamStore(run_dir)
    if player_id in store:
        return store.load(player_id)
    snapshots = [p["player_id"] for p in LeagueHistory(run_dir, readonly=True).players()
                 if p["parent"] == player_id and p["player_id"] in store]
    if not snapshots:
        raise KeyError(f"no parameters on disk for {player_id!r} in {run_dir}")
    return store.load(snapshots[-1])
