"""The run directory's parameter store: frozen players' parameters, written once.

`<run_dir>/params/<player_id>.npz` holds one player's parameters (a nested dict of numpy
arrays, stored leaf by leaf with their key paths) and the learner version they came from. Files are
written atomically (temporary file, then rename) and never overwritten: a frozen player
stays frozen. Pure numpy, so the coordinator process needs no JAX.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from agents.storage import (
    Recent,
    disk_full,
    params_from_npz_bytes,
    params_to_npz_bytes,
    write_atomic,
)


class ParamStore:
    """Frozen parameters by player id, on disk, the `CACHE_SIZE` most recently read kept in
    memory (the learner groups and evaluators keep their own: `experiments.nodes`). On a full disk a
    player's parameters are held in memory (`unwritten`) and written by a later `save` or
    `write_held` once there is space."""

    CACHE_SIZE = 32

    def __init__(self, run_dir: str):
        self.directory = os.path.join(run_dir, "params")
        os.makedirs(self.directory, exist_ok=True)
        self._cache = Recent(self.CACHE_SIZE)   # player id -> (version, params)
        self._held: dict[str, tuple[int, Mapping]] = {}
        self._warned = False
        self._lock = threading.Lock()

    def path(self, player_id: str) -> str:
        if "/" in player_id or player_id.startswith("."):
            raise ValueError(f"player id {player_id!r} cannot name a parameter file")
        return os.path.join(self.directory, f"{player_id}.npz")

    def __contains__(self, player_id: str) -> bool:
        return player_id in self._held or os.path.exists(self.path(player_id))

    def unwritten(self) -> list[str]:
        """Players whose parameters are held in memory, not yet on disk."""
        with self._lock:
            return list(self._held)

    def save(self, player_id: str, params: Mapping, version: int) -> bool:
        """Writes a player's parameters once; returns False (writing nothing) if they exist. On
        a full disk they are held in memory (a warning the first time) and True is returned."""
        if player_id in self:
            return False
        with self._lock:
            self._held[player_id] = (int(version), params)
        self.write_held()
        return True

    def write_held(self) -> int:
        """Writes the parameters held for a full disk, oldest first, until one fails; returns
        how many are still held."""
        with self._lock:
            for player_id, (version, params) in list(self._held.items()):
                try:
                    write_atomic(self.path(player_id), params_to_npz_bytes(params, version))
                except OSError as e:
                    if not disk_full(e):
                        raise
                    if not self._warned:
                        print(f"warning: {self.directory}: {e.strerror}; frozen players' parameters are "
                              "held in memory until there is space", flush=True)
                    self._warned = True
                    return len(self._held)
                del self._held[player_id]
            if self._warned:
                print(f"{self.directory}: written again (every held player's parameters are on disk)", flush=True)
            self._warned = False
            return 0

    def load(self, player_id: str) -> tuple[int, dict]:
        with self._lock:
            if player_id in self._held:   # not on disk yet (a full disk)
                return self._held[player_id]
        cached = self._cache.get(player_id)
        if cached is not None:
            return cached
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
        self._cache.put(player_id, loaded)
        return loaded


def player_params(run_dir: str, player_id: str) -> tuple[int, dict]:
    """(version, params) of any player of a run, read from disk: a learning agent's learner
    checkpoint (learners/checkpoint.py), a frozen player's `params/` file, or, for a learning
    agent of a run that has not written a checkpoint yet, its newest frozen snapshot."""
    from coordinator.history_reader import HistoryReader
    from learners import checkpoint

    got = checkpoint.read_params(run_dir, player_id)
    if got is not None:
        return got
    store = ParamStore(run_dir)
    if player_id in store:
        return store.load(player_id)
    snapshots = [p["player_id"] for p in HistoryReader(run_dir).players()
                 if p["parent"] == player_id and p["player_id"] in store]
    if not snapshots:
        raise KeyError(f"no parameters on disk for {player_id!r} in {run_dir}")
    return store.load(snapshots[-1])
