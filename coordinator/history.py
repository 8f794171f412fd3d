"""Writing league.db (coordinator/league_db.py: its schema and file): `HistoryWriter`, the one
connection that writes it (the coordinator's), and `LeagueHistory`, the reader and the
writer in one class for callers that do both (tests, benchmarks, commands that repair a run).

The dashboard and the commands that only read use `coordinator.history_reader`. The names of
league.db's file and schema are importable from here as they were before they moved.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping

import numpy as np

from coordinator.history_reader import DashboardReader, HistoryReader
from coordinator.league_db import (
    BACKUP_NAME,
    DB_NAME,
    SCHEMA,
    HistoryError,
    HistoryFull,
    check_file,
    pack_array,
    pack_state,
    read_only_uri,
    remove_partial,
    unpack_array,
)

# league.db's names, importable from here as before they moved to league_db and history_reader
__all__ = ["BACKUP_NAME", "DB_NAME", "SCHEMA", "HistoryError", "HistoryFull", "check_file", "pack_array",
           "unpack_array", "HistoryReader", "DashboardReader", "HistoryWriter", "LeagueHistory"]

RETRY_SECONDS = 5.0      # how often held writes are tried again
HELD_LIMIT = 200_000     # writes held in memory at most; later ones are counted and dropped


def _cannot_write_now(error: sqlite3.Error) -> bool:
    """Whether SQLite refused a write for a reason that passes (a full disk, a lock held past
    the timeout, an I/O error of the disk), not for a damaged file or a bad statement."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is None:
        return "full" in str(error) or "locked" in str(error)
    return code & 0xFF in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR)


class HistoryWriter(HistoryReader):
    """Writes one run's `league.db` (made when missing), and reads it back (a restarted
    coordinator resumes from it). Thread-safe; one connection per instance. A write SQLite
    cannot take now (a full disk, a lock) is held in memory, in order, and made later
    (`_write`)."""

    def __init__(self, path: str):
        self._open(path, readonly=False)

    def _open(self, path: str, readonly: bool) -> None:
        super()._open(path, readonly)
        # Writes SQLite refused for a passing reason (`_cannot_write_now`), oldest first, made
        # in one transaction once it takes them again; `dropped` counts those past HELD_LIMIT.
        self._held: list[tuple[str, tuple | list]] = []
        self._retry_at = 0.0
        self.dropped = 0

    def close(self) -> None:
        with self._lock:
            if self._held:
                self._retry_at = 0.0
                self._write_held()
            if self._held or self.dropped:
                print(f"warning: {len(self._held) + self.dropped} writes to {self.path} could not be made "
                      "(the disk stayed full or the file locked) and are lost", flush=True)
            self._db.close()

    def backup(self, destination: str) -> str:
        """An online copy of the history at `destination` (SQLite's backup API), written beside
        it and renamed into place: a backup interrupted half-way never replaces the last good
        one. It reads through a connection of its own in one step: in WAL mode its read
        transaction holds no writer back (this instance's writes go on meanwhile; a backup in
        several steps would restart after each of them). Returns `destination`."""
        partial = destination + ".partial"
        remove_partial(partial)
        source = sqlite3.connect(read_only_uri(self.path), uri=True, timeout=30)
        target = sqlite3.connect(partial)
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")   # a plain file: no -wal/-shm beside it
            target.close()
            check_file(partial)
            os.replace(partial, destination)
        finally:
            source.close()
            target.close()
            remove_partial(partial)
        return destination

    def _write(self, sql: str, rows: Iterable[tuple] | tuple = (), hold: bool = True) -> None:
        """Makes one write. When SQLite cannot take it now (a full disk, a lock held past the
        timeout: `_cannot_write_now`) the write is held in memory, in order, with a warning,
        and the held writes are made in one transaction by a later write once SQLite takes them
        (tried every RETRY_SECONDS): the league goes on, nothing half-written is read back.
        `hold=False`: HistoryFull instead (a write that must follow everything before it)."""
        rows = rows if isinstance(rows, tuple) else list(rows)
        with self._lock:
            if self._held and time.monotonic() >= self._retry_at:
                self._write_held()
            if not self._held:
                try:
                    self._execute([(sql, rows)])
                    return
                except sqlite3.OperationalError as e:
                    if not _cannot_write_now(e):
                        raise
                    self._retry_at = time.monotonic() + RETRY_SECONDS
                    print(f"warning: {self.path} cannot be written now ({e}); the league goes on and "
                          f"holds its writes in memory, trying again every {RETRY_SECONDS:g} s", flush=True)
            if not hold:
                raise HistoryFull(f"{self.path} cannot be written now; {len(self._held)} writes are held")
            if len(self._held) >= HELD_LIMIT:
                self.dropped += 1
                return
            self._held.append((sql, rows))

    def _execute(self, writes: list[tuple[str, tuple | list]]) -> None:
        with self._db:   # one transaction: all of them or none
            for sql, rows in writes:
                if isinstance(rows, tuple):
                    self._db.execute(sql, rows)
                else:
                    self._db.executemany(sql, rows)

    def _write_held(self) -> None:
        try:
            self._execute(self._held)
        except sqlite3.OperationalError as e:
            if not _cannot_write_now(e):
                raise
            self._retry_at = time.monotonic() + RETRY_SECONDS
            return
        print(f"{self.path}: written again ({len(self._held)} held writes made"
              + (f"; {self.dropped} past the {HELD_LIMIT} held are lost" if self.dropped else "") + ")", flush=True)
        self._held = []

    def held(self) -> int:
        """How many writes are held in memory (0: everything written is in the file)."""
        with self._lock:
            return len(self._held)

    # -- writing ---------------------------------------------------------------

    def add_player(self, player_id: str, role: str, race: str, parent: str | None, step: int, wall_time: float) -> None:
        self._write(
            "INSERT OR IGNORE INTO players VALUES (?, ?, ?, ?, ?, ?)",
            (player_id, role, race, parent, int(step), float(wall_time)),
        )

    def add_games(self, results: Iterable[Mapping]) -> None:
        now = time.time()
        self._write(
            "INSERT INTO games(time, home, away, outcome, length, branch, source, actor_id, score, "
            "home_race, away_race) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (r.get("time", now), r["home"], r["away"], r["outcome"], r.get("length"),
                 r.get("branch"), r.get("source", "actor"), r.get("actor_id"),
                 None if r.get("score") is None else float(r["score"]),
                 r.get("home_race"), r.get("away_race"))
                for r in results
            ],
        )

    def add_results(self, results: Iterable, per_game_rows: bool = True) -> None:
        """`league.results.GameResult`s: with `per_game_rows`, one `games` row for each single
        game and one `game_counts` row for each count of several; without, every result as a
        `game_counts` row (a single game is a count of one)."""
        results = list(results)
        single = [dict(r.as_dict(), outcome=r.outcome) for r in results if per_game_rows and r.games == 1]
        counted = [r.as_dict() for r in results if not per_game_rows or r.games != 1]
        if single:
            self.add_games(single)
        if counted:
            self.add_game_counts(counted)

    def add_game_counts(self, rows: Iterable[Mapping]) -> None:
        """Batches of games (`game_counts`): {"home", "away", "wins", "draws", "losses",
        optional "score" and "length" (sums), "branch", "source", "actor_id", races}."""
        now = time.time()
        self._write(
            "INSERT INTO game_counts(time, home, away, wins, draws, losses, score, length, branch, "
            "source, actor_id, home_race, away_race) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (r.get("time", now), r["home"], r["away"], int(r["wins"]), int(r["draws"]),
                 int(r["losses"]), None if r.get("score") is None else float(r["score"]),
                 r.get("length"), r.get("branch"), r.get("source", "device"), r.get("actor_id"),
                 r.get("home_race"), r.get("away_race"))
                for r in rows
            ],
        )

    def add_event(self, kind: str, agent_id: str, player_id: str | None, step: int, reason: str | None, when: float | None = None) -> None:
        self._write(
            "INSERT INTO events(time, kind, agent_id, player_id, step, reason) VALUES (?, ?, ?, ?, ?, ?)",
            (when or time.time(), kind, agent_id, player_id, int(step), reason),
        )

    def add_payoff_snapshot(self, players: list[str], wins: np.ndarray, draws: np.ndarray, when: float | None = None,
                            scores: np.ndarray | None = None) -> None:
        """Decayed wins and draws and (optional) the mean score per game, [n, n] each."""
        self._write(
            "INSERT INTO payoff_snapshots(time, players, wins, draws, scores) VALUES (?, ?, ?, ?, ?)",
            (when or time.time(), json.dumps(players), pack_array(wins), pack_array(draws),
             None if scores is None else pack_array(scores)),
        )

    def add_nash(self, weights: Mapping[str, float], when: float | None = None) -> None:
        when = when or time.time()
        self._write(
            "INSERT INTO nash(time, player_id, weight) VALUES (?, ?, ?)",
            [(when, p, float(w)) for p, w in weights.items() if w > 0],
        )

    def add_ratings(self, rows: Mapping[str, tuple[float, float, float]], when: float | None = None) -> None:
        """rows: player_id -> (elo, trueskill_mu, trueskill_sigma)."""
        when = when or time.time()
        self._write(
            "INSERT INTO ratings(time, player_id, elo, trueskill_mu, trueskill_sigma) VALUES (?, ?, ?, ?, ?)",
            [(when, p, *map(float, r)) for p, r in rows.items()],
        )

    def add_exploitability(self, values: Mapping[str, float], when: float | None = None) -> None:
        """Exact NashConv per subject ("nash": the Nash mixture; a main agent's id). A value that
        is not finite (a main agent whose parameters hold NaN) is not recorded: the column is
        NOT NULL, and SQLite stores NaN as NULL."""
        when = when or time.time()
        self._write("INSERT INTO exploitability(time, subject, nash_conv) VALUES (?, ?, ?)",
                    [(when, s, float(v)) for s, v in values.items() if math.isfinite(v)])

    def add_exploiter_gaps(self, rows: Iterable[Mapping], when: float | None = None) -> None:
        """Exploiter snapshots' gaps to a best response: dicts with the columns of
        `exploiter_gaps` (player_id, parent, role, target, br_value, exploiter_value, gap)."""
        when = when or time.time()
        self._write(
            "INSERT INTO exploiter_gaps(time, player_id, parent, role, target, br_value, exploiter_value, gap)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(when, r["player_id"], r.get("parent"), r.get("role"), r["target"], float(r["br_value"]),
              float(r["exploiter_value"]), float(r["gap"])) for r in rows],
        )

    def add_heuristic(self, rows: Iterable[Mapping], when: float | None = None) -> None:
        """Win rates against the scripted heuristic: dicts with the columns of `heuristic`
        (player_id, version, race, opponent_race, win_rate, games, wins, draws, losses)."""
        when = when or time.time()
        self._write(
            "INSERT INTO heuristic(time, player_id, version, race, opponent_race, win_rate, games, wins, draws,"
            " losses) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(when, r["player_id"], None if r.get("version") is None else int(r["version"]), r["race"],
              r["opponent_race"], float(r["win_rate"]), int(r["games"]), int(r["wins"]), int(r["draws"]),
              int(r["losses"])) for r in rows],
        )

    def add_learner_metrics(self, agent_id: str, metrics: Mapping[str, float], when: float | None = None) -> None:
        when = when or time.time()
        self._write(
            "INSERT INTO learner_metrics(time, agent_id, name, value) VALUES (?, ?, ?, ?)",
            [(when, agent_id, k, float(v)) for k, v in metrics.items() if np.isscalar(v) and np.isfinite(float(v))],
        )

    def save_league_state(self, state: dict, when: float | None = None) -> None:
        """The league's checkpoint (one row). Never held: it counts the games recorded before
        it, so HistoryFull while any write is held or when SQLite cannot take it now (the one
        in the file stays)."""
        self._write("INSERT OR REPLACE INTO league_state VALUES (1, ?, ?)", (when or time.time(), pack_state(state)),
                    hold=False)


class LeagueHistory(HistoryWriter, DashboardReader):
    """The writer and every reader over one connection: `LeagueHistory(path)` writes (as
    `HistoryWriter`), `LeagueHistory(path, readonly=True)` only reads (as `DashboardReader`).
    For callers that do both; a node that only writes or only reads takes its own class."""

    def __init__(self, path: str, readonly: bool = False):
        self._open(path, readonly)
