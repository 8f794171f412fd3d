"""The league's checkpoint in league.db: a new league recorded, a stopped or killed one resumed.

The checkpoint (`League.state()` and the ids of the last game rows in its payoff) is written
after every snapshot or reset and every `checkpoint_every_seconds`; a restart replays only the
rows after it, and the frozen players added after it whose parameters were stored."""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from coordinator.history import HistoryFull, HistoryWriter
from coordinator.param_store import ParamStore
from league.league import League
from league.players import HISTORICAL, LeagueConfig
from league.rules import AddSnapshot


class LeagueStore:
    """Opens the league of a run (`open`) and checkpoints it (`save`, or `snapshot` under the
    league's lock and `write` after it), over its league.db and parameter store."""

    def __init__(self, history: HistoryWriter, params: ParamStore):
        self.history, self.params = history, params
        self._last_game_id = 0
        self._last_count_id = 0
        self._taken = self._written = 0        # snapshots taken / the newest written
        self._write_lock = threading.Lock()

    def open(self, config: LeagueConfig, seed: int, now: float) -> League:
        """The league league.db checkpointed, caught up with the rows after its checkpoint; or,
        in a new run, a new league whose players (and initial snapshots' events) are recorded."""
        state = self.history.load_league_state()
        if state is not None:
            league = League.from_state(state["league"])
            self._last_game_id = int(state["last_game_id"])
            self._last_count_id = int(state.get("last_count_id", 0))
            self._catch_up(league)
            return league
        league = League(config, np.random.default_rng(seed))
        for player in league.players.values():
            self.history.add_player(player.player_id, player.role, player.race, player.parent, 0, now)
            if player.role == HISTORICAL:
                self.history.add_event("snapshot", player.parent, player.player_id, 0, "initial", now)
        self.save(league)
        return league

    def _catch_up(self, league: League) -> None:
        """Re-applies what the history holds past the last league checkpoint (after kill -9)."""
        for row in self.history.players():
            if row["player_id"] not in league.players and row["role"] == HISTORICAL:
                if row["player_id"] not in self.params:
                    continue  # died between deciding and storing: the decision is re-made
                league.apply(AddSnapshot(row["parent"], row["player_id"], row["step"], row["wall_time"], "resumed"))
        for game in self.history.games(since_id=self._last_game_id):
            if game["home"] in league.players and game["away"] in league.players:
                league.record_result(game["home"], game["away"], game["outcome"], game["score"])
            self._last_game_id = game["id"]
        for row in self.history.game_counts(since_id=self._last_count_id):
            if row["home"] in league.players and row["away"] in league.players:
                league.record_counts(row["home"], row["away"], row["wins"], row["draws"], row["losses"], row["score"])
            self._last_count_id = row["id"]

    def save(self, league: League) -> None:
        """The league's checkpoint now (`snapshot` and `write`; the caller holds the lock)."""
        self.write(self.snapshot(league))

    def snapshot(self, league: League) -> dict | None:
        """What the next checkpoint writes: `League.state()` (a copy) and the ids of the newest
        rows, under the caller's lock (every game up to those rows is in the payoff: recorded
        under the same lock), so that `write` can pack and write it after the lock is released
        (a 1,000-player payoff takes ~0.1 s to pack, which held up every call on the league).
        None on a full disk (writes held in memory: `HistoryWriter._write`,
        `ParamStore.write_held`): league.db keeps the last checkpoint whose games and players
        are all on disk."""
        if self.params.write_held() or self.history.held():
            return None
        self._last_game_id = max(self._last_game_id, self.history.last_game_id())
        self._last_count_id = max(self._last_count_id, self.history.last_count_id())
        self._taken += 1
        return {"order": self._taken, "state": {"league": league.state(), "last_game_id": self._last_game_id,
                                               "last_count_id": self._last_count_id}}

    def write(self, snapshot: dict | None) -> None:
        """Writes a `snapshot` to league.db unless a later one was written already (two callers
        released the lock in the other order). A full disk or locked file: said by the history,
        tried again at the next checkpoint."""
        if snapshot is None:
            return
        with self._write_lock:
            if snapshot["order"] <= self._written:
                return
            with contextlib.suppress(HistoryFull):
                self.history.save_league_state(snapshot["state"])
                self._written = snapshot["order"]

    def backup(self, destination: str) -> str:
        """An online copy of league.db at `destination` (`HistoryWriter.backup`); returns its
        path, or "" when it failed (a full disk: the league goes on, the last good backup
        stays)."""
        try:
            return self.history.backup(destination)
        except Exception as e:
            print(f"warning: backing up league.db failed ({type(e).__name__}: {e}); the previous backup is kept",
                  flush=True)
            return ""
