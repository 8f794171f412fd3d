"""The league's history in SQLite (`<run_dir>/league.db`): the one source of truth.

The coordinator writes; the dashboard, benchmarks and a restarted run read. WAL mode lets
readers work while the league writes. Schema (times are Unix seconds):

    players(player_id TEXT PRIMARY KEY, role, race, parent, step, wall_time)
        every learning agent and frozen (historical) player; wall_time = creation time
    games(id INTEGER PRIMARY KEY, time, home, away, outcome, length, branch, source, actor_id,
          score, home_race, away_race)
        every game result; outcome "win" | "draw" | "loss" from home's side;
        source "actor" | "evaluator"; branch = the matchmaking branch that chose the match;
        score = what the game paid home (chips in poker); home_race / away_race = the races
        the game was actually played in, as the game reports them (NULL for one-race games)
    game_counts(id INTEGER PRIMARY KEY, time, home, away, wins, draws, losses, score, length,
                branch, source, actor_id, home_race, away_race)
        games played at once against one opponent in the same races (a device learner's chunk,
        source "device"): one row with counts of home's wins, draws and losses; score and length
        are the sums over those games. Counted games are games like any other: `game_count`,
        the payoff, the ratings and the dashboard include them.
    events(id INTEGER PRIMARY KEY, time, kind, agent_id, player_id, step, reason)
        kind "snapshot" (player_id = the new frozen player) | "reset"
    payoff_snapshots(id INTEGER PRIMARY KEY, time, players TEXT, wins BLOB, draws BLOB)
        the decayed payoff counts over time: players = JSON list of ids; wins[a, b] (a's
        decayed wins over b) and draws as float32 [n, n] arrays, zlib-compressed
    nash(id INTEGER PRIMARY KEY, time, player_id, weight)
        the Nash distribution over all players at `time` (rows with weight > 0)
    ratings(id INTEGER PRIMARY KEY, time, player_id, elo, trueskill_mu, trueskill_sigma)
    learner_metrics(id INTEGER PRIMARY KEY, time, agent_id, name, value)
        learner scalars in long form: updates_per_s, frames_per_s, loss, entropy, kl,
        staleness, sample_reuse, version, steps, ...
    exploitability(id INTEGER PRIMARY KEY, time, subject, nash_conv)
        exact NashConv over time in games that have it (poker), by OpenSpiel: subject "nash"
        (the league's Nash mixture) or a main agent's id
    exploiter_gaps(id INTEGER PRIMARY KEY, time, player_id, parent, role, target, br_value,
                   exploiter_value, gap)
        poker: each exploiter snapshot's distance from a best response to its target, measured
        once when the snapshot's exact payoffs are computed. player_id = the frozen snapshot,
        parent = the exploiter it was copied from, role = the parent's role ("main_exploiter" |
        "league_exploiter"), target = a main agent's id (its current parameters then) or "nash"
        (the league's Nash mixture then); br_value = the exact value of OpenSpiel's best response
        to the target, exploiter_value = the snapshot's exact chips against it (both seats
        averaged), gap = br_value - exploiter_value (>= 0)
    heuristic(id INTEGER PRIMARY KEY, time, player_id, version, race, opponent_race, win_rate,
              games, wins, draws, losses)
        SMAX main agents against jaxmarl's scripted heuristic over time: player_id (race
        `race`, parameters of learner version `version`) played `games` games against the
        heuristic playing `opponent_race`; win_rate counts draws half
    league_state(id INTEGER PRIMARY KEY CHECK (id = 1), time, state BLOB)
        the latest League.state() checkpoint (zlib JSON), for resuming
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS players(player_id TEXT PRIMARY KEY, role TEXT NOT NULL, race TEXT NOT NULL,
    parent TEXT, step INTEGER NOT NULL, wall_time REAL NOT NULL);
CREATE TABLE IF NOT EXISTS games(id INTEGER PRIMARY KEY, time REAL NOT NULL, home TEXT NOT NULL,
    away TEXT NOT NULL, outcome TEXT NOT NULL CHECK (outcome IN ('win', 'draw', 'loss')),
    length INTEGER, branch TEXT, source TEXT, actor_id TEXT, score REAL, home_race TEXT,
    away_race TEXT);
CREATE INDEX IF NOT EXISTS games_pair ON games(home, away);
CREATE TABLE IF NOT EXISTS game_counts(id INTEGER PRIMARY KEY, time REAL NOT NULL,
    home TEXT NOT NULL, away TEXT NOT NULL, wins INTEGER NOT NULL CHECK (wins >= 0),
    draws INTEGER NOT NULL CHECK (draws >= 0), losses INTEGER NOT NULL CHECK (losses >= 0),
    score REAL, length INTEGER, branch TEXT, source TEXT, actor_id TEXT, home_race TEXT,
    away_race TEXT);
CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, time REAL NOT NULL, kind TEXT NOT NULL,
    agent_id TEXT NOT NULL, player_id TEXT, step INTEGER, reason TEXT);
CREATE TABLE IF NOT EXISTS payoff_snapshots(id INTEGER PRIMARY KEY, time REAL NOT NULL,
    players TEXT NOT NULL, wins BLOB NOT NULL, draws BLOB NOT NULL, scores BLOB);
CREATE TABLE IF NOT EXISTS nash(id INTEGER PRIMARY KEY, time REAL NOT NULL, player_id TEXT NOT NULL,
    weight REAL NOT NULL);
CREATE INDEX IF NOT EXISTS nash_time ON nash(time);
CREATE TABLE IF NOT EXISTS ratings(id INTEGER PRIMARY KEY, time REAL NOT NULL, player_id TEXT NOT NULL,
    elo REAL, trueskill_mu REAL, trueskill_sigma REAL);
CREATE INDEX IF NOT EXISTS ratings_time ON ratings(time);
CREATE TABLE IF NOT EXISTS learner_metrics(id INTEGER PRIMARY KEY, time REAL NOT NULL,
    agent_id TEXT NOT NULL, name TEXT NOT NULL, value REAL);
CREATE TABLE IF NOT EXISTS exploitability(id INTEGER PRIMARY KEY, time REAL NOT NULL,
    subject TEXT NOT NULL, nash_conv REAL NOT NULL);
CREATE TABLE IF NOT EXISTS exploiter_gaps(id INTEGER PRIMARY KEY, time REAL NOT NULL,
    player_id TEXT NOT NULL, parent TEXT, role TEXT, target TEXT NOT NULL, br_value REAL NOT NULL,
    exploiter_value REAL NOT NULL, gap REAL NOT NULL);
CREATE TABLE IF NOT EXISTS heuristic(id INTEGER PRIMARY KEY, time REAL NOT NULL,
    player_id TEXT NOT NULL, version INTEGER, race TEXT NOT NULL, opponent_race TEXT NOT NULL,
    win_rate REAL NOT NULL, games INTEGER NOT NULL, wins INTEGER NOT NULL, draws INTEGER NOT NULL,
    losses INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS league_state(id INTEGER PRIMARY KEY CHECK (id = 1), time REAL NOT NULL,
    state BLOB NOT NULL);
"""

DB_NAME = "league.db"


class HistoryError(RuntimeError):
    """The history database is missing, unreadable or not a league history."""


class HistoryFull(HistoryError):
    """league.db cannot be written now (a full disk, or locked past the timeout): a write that
    must not wait in memory (the league's checkpoint) was not made."""


RETRY_SECONDS = 5.0      # how often held writes are tried again
HELD_LIMIT = 200_000     # writes held in memory at most; later ones are counted and dropped


def _cannot_write_now(error: sqlite3.Error) -> bool:
    """Whether SQLite refused a write for a reason that passes (a full disk, a lock held past
    the timeout, an I/O error of the disk), not for a damaged file or a bad statement."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is None:
        return "full" in str(error) or "locked" in str(error)
    return code & 0xFF in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR)


def pack_array(array: np.ndarray) -> bytes:
    return zlib.compress(np.ascontiguousarray(array, dtype=np.float32).tobytes(), 1)


def unpack_array(blob: bytes, n: int) -> np.ndarray:
    return np.frombuffer(zlib.decompress(blob), dtype=np.float32).reshape(n, n)


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return {"__array__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _from_jsonable(value):
    if isinstance(value, dict):
        if "__array__" in value:
            return np.asarray(value["__array__"], dtype=value["dtype"])
        return {k: _from_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_jsonable(v) for v in value]
    return value


BACKUP_NAME = DB_NAME + ".backup"


def _read_only(path: str) -> str:
    """The URI that opens `path` read-only (any character in the path quoted)."""
    return pathlib.Path(path).absolute().as_uri() + "?mode=ro"


def check_file(path: str) -> None:
    """HistoryError with one paragraph naming the file, what is wrong and the fix, when the
    SQLite file at `path` is damaged (SQLite's quick_check: page structure, record formats);
    nothing is written to it. A missing file is fine (a new run creates it)."""
    if not os.path.exists(path):
        return
    try:
        db = sqlite3.connect(_read_only(path), uri=True, timeout=30)
        try:
            problems = [row[0] for row in db.execute("PRAGMA quick_check(5)").fetchall()]
            db.execute("SELECT count(*) FROM players").fetchone()
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        problems = [str(e)]
    if problems != ["ok"]:
        run_dir = os.path.dirname(os.path.abspath(path))
        backup = os.path.join(run_dir, BACKUP_NAME)
        fix = (f"restore the coordinator's last backup ({backup}, written every few minutes) with "
               f"`python -m experiments.restore_history --run_dir={run_dir}` (it sets the damaged file "
               "aside) and rerun" if os.path.exists(backup) and os.path.abspath(path) != backup else
               "there is no backup of it: put back a copy of your own, or start a new run directory "
               "(--init can start its agents from this run's files)")
        raise HistoryError(
            f"the league history {path} is damaged ({'; '.join(problems)}). Nothing was written to it. "
            f"To go on, {fix}.")


def _remove_partial(partial: str) -> None:
    """A half-written database beside the real one, and its WAL files, from a write cut short."""
    for leftover in (partial, partial + "-wal", partial + "-shm"):
        if os.path.exists(leftover):
            os.remove(leftover)


def _create(path: str) -> None:
    """A new history with its schema, written beside `path` and renamed into place: a reader
    that finds the file (the dashboard, a test waiting for the run) always finds its tables."""
    partial = path + ".new"
    _remove_partial(partial)
    db = sqlite3.connect(partial)
    try:
        db.executescript(SCHEMA)
        db.commit()
    finally:
        db.close()
    os.replace(partial, path)


class LeagueHistory:
    """Writes and reads one run's `league.db`. Thread-safe; one connection per instance."""

    def __init__(self, path: str, readonly: bool = False):
        if os.path.isdir(path):
            path = os.path.join(path, DB_NAME)
        self.path = path
        if readonly:
            if not os.path.exists(path):
                raise HistoryError(
                    f"no league history at {path}: pass the --run_dir of a league run "
                    f"(it holds {DB_NAME} once the run has started)"
                )
            uri = f"file:{path}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)
            try:
                self._db.execute("SELECT count(*) FROM players").fetchone()
            except sqlite3.DatabaseError as e:
                raise HistoryError(f"{path} is not a league history ({e}); pass a run directory made by a league run") from None
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            if not os.path.exists(path):
                _create(path)
            self._db = sqlite3.connect(path, check_same_thread=False, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            self._add_missing_columns()
            self._db.commit()
        self._lock = threading.Lock()
        self.readonly = readonly
        # Writes SQLite refused for a passing reason (`_cannot_write_now`), oldest first, made
        # in one transaction once it takes them again; `dropped` counts those past HELD_LIMIT.
        self._held: list[tuple[str, tuple | list]] = []
        self._retry_at = 0.0
        self.dropped = 0
        # Read-only histories written before a column existed lack it (writers add it above).
        self._has_score = self._has_column("games", "score")
        self._has_races = self._has_column("games", "home_race")
        self._has_scores = self._has_column("payoff_snapshots", "scores")

    def _add_missing_columns(self) -> None:
        """Histories written before a column existed get it (NULL in old rows)."""
        for table, column, kind in (("games", "score", "REAL"), ("games", "home_race", "TEXT"),
                                    ("games", "away_race", "TEXT"), ("payoff_snapshots", "scores", "BLOB")):
            columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in columns:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

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
        _remove_partial(partial)
        source = sqlite3.connect(_read_only(self.path), uri=True, timeout=30)
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
            _remove_partial(partial)
        return destination

    def result_rows(self) -> list[dict]:
        """Every recorded result, single games and counts alike, oldest first within each
        table: {"time", "home", "away", "wins", "draws", "losses", "games", "branch", "source",
        "actor_id", "home_race", "away_race"}."""
        rows = []
        for g in self.games():
            rows.append({**{k: g.get(k) for k in ("time", "home", "away", "branch", "source", "actor_id",
                                                  "home_race", "away_race")},
                         "wins": int(g["outcome"] == "win"), "draws": int(g["outcome"] == "draw"),
                         "losses": int(g["outcome"] == "loss"), "games": 1})
        for c in self.game_counts():
            rows.append({**{k: c[k] for k in ("time", "home", "away", "wins", "draws", "losses", "branch",
                                              "source", "actor_id", "home_race", "away_race")},
                         "games": c["wins"] + c["draws"] + c["losses"]})
        return rows

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

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

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

    def game_counts(self, since_id: int = 0, upto_id: int | None = None) -> list[dict]:
        """The `game_counts` rows with since_id < id (<= upto_id), oldest first."""
        keys = ("id", "time", "home", "away", "wins", "draws", "losses", "score", "length", "branch",
                "source", "actor_id", "home_race", "away_race")
        if not self._has_table("game_counts"):
            return []
        upto = "" if upto_id is None else f" AND id <= {int(upto_id)}"
        rows = self._read(f"SELECT {', '.join(keys)} FROM game_counts WHERE id > ?{upto} ORDER BY id",
                          (since_id,))
        return [dict(zip(keys, r)) for r in rows]

    def last_count_id(self) -> int:
        if not self._has_table("game_counts"):
            return 0
        return self._read("SELECT coalesce(max(id), 0) FROM game_counts")[0][0]

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
        blob = zlib.compress(json.dumps(_jsonable(state)).encode(), 1)
        self._write("INSERT OR REPLACE INTO league_state VALUES (1, ?, ?)", (when or time.time(), blob), hold=False)

    # -- reading ---------------------------------------------------------------

    def load_league_state(self) -> dict | None:
        rows = self._read("SELECT state FROM league_state WHERE id = 1")
        if not rows:
            return None
        try:
            return _from_jsonable(json.loads(zlib.decompress(rows[0][0])))
        except (zlib.error, ValueError) as e:
            raise HistoryError(
                f"the league checkpoint in {self.path} is corrupt ({e}); restore the run directory "
                "from a backup or start a new run with another --run_dir"
            ) from None

    def players(self) -> list[dict]:
        rows = self._read("SELECT player_id, role, race, parent, step, wall_time FROM players ORDER BY wall_time, rowid")
        keys = ("player_id", "role", "race", "parent", "step", "wall_time")
        return [dict(zip(keys, r)) for r in rows]

    def _has_table(self, table: str) -> bool:
        return bool(self._read("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))[0][0])

    def _has_column(self, table: str, column: str) -> bool:
        return any(row[1] == column for row in self._db.execute(f"PRAGMA table_info({table})"))

    def games(self, since_id: int = 0) -> list[dict]:
        score = "score" if self._has_score else "NULL"
        races = "home_race, away_race" if self._has_races else "NULL, NULL"
        rows = self._read(
            f"SELECT id, time, home, away, outcome, length, branch, source, actor_id, {score}, {races} "
            "FROM games WHERE id > ? ORDER BY id",
            (since_id,),
        )
        keys = ("id", "time", "home", "away", "outcome", "length", "branch", "source", "actor_id", "score",
                "home_race", "away_race")
        return [dict(zip(keys, r)) for r in rows]

    def last_game_id(self) -> int:
        return self._read("SELECT coalesce(max(id), 0) FROM games")[0][0]

    def game_count(self) -> int:
        """Every game recorded: one per `games` row plus the counts of `game_counts`."""
        if not self._has_table("game_counts"):  # a history written before counted games
            return self._read("SELECT count(*) FROM games")[0][0]
        return self._read("SELECT (SELECT count(*) FROM games) + "
                          "(SELECT coalesce(sum(wins + draws + losses), 0) FROM game_counts)")[0][0]

    def events(self) -> list[dict]:
        rows = self._read("SELECT time, kind, agent_id, player_id, step, reason FROM events ORDER BY id")
        return [dict(zip(("time", "kind", "agent_id", "player_id", "step", "reason"), r)) for r in rows]

    def latest_payoff(self) -> tuple[float, list[str], np.ndarray, np.ndarray, np.ndarray | None] | None:
        """(time, players, wins, draws, mean scores or None for old histories) of the latest
        payoff snapshot, or None before the first."""
        scores = "scores" if self._has_scores else "NULL"
        rows = self._read(f"SELECT time, players, wins, draws, {scores} FROM payoff_snapshots ORDER BY id DESC LIMIT 1")
        if not rows:
            return None
        when, players, wins, draws, scores = rows[0]
        players = json.loads(players)
        n = len(players)
        return (when, players, unpack_array(wins, n), unpack_array(draws, n),
                None if scores is None else unpack_array(scores, n))

    def latest_nash(self) -> tuple[float, dict[str, float]] | None:
        """(time, player -> weight) of the newest Nash distribution, or None before the first."""
        rows = self._read("SELECT time, player_id, weight FROM nash WHERE time = (SELECT max(time) FROM nash)")
        if not rows:
            return None
        return rows[0][0], {p: w for _, p, w in rows}

    def nash_history(self) -> list[tuple[float, str, float]]:
        return self._read("SELECT time, player_id, weight FROM nash ORDER BY time, id")

    def nash_publications(self) -> list[dict[str, float]]:
        """Every published Nash distribution in order, each as player -> weight (weights > 0)."""
        out: dict[float, dict[str, float]] = {}
        for when, player, weight in self.nash_history():
            out.setdefault(when, {})[player] = weight
        return list(out.values())

    def ratings_history(self) -> list[tuple[float, str, float, float, float]]:
        return self._read("SELECT time, player_id, elo, trueskill_mu, trueskill_sigma FROM ratings ORDER BY time, id")

    def exploitability_history(self) -> list[tuple[float, str, float]]:
        """(time, subject, NashConv) rows in order; none for histories from before the table."""
        if not self._has_table("exploitability"):
            return []
        return self._read("SELECT time, subject, nash_conv FROM exploitability ORDER BY id")

    def exploiter_gaps(self) -> list[dict]:
        """The `exploiter_gaps` rows in order, as dicts of its columns (without id); none for
        histories from before the table."""
        if not self._has_table("exploiter_gaps"):
            return []
        keys = ("time", "player_id", "parent", "role", "target", "br_value", "exploiter_value", "gap")
        rows = self._read(f"SELECT {', '.join(keys)} FROM exploiter_gaps ORDER BY id")
        return [dict(zip(keys, r)) for r in rows]

    def heuristic_history(self) -> list[dict]:
        """The `heuristic` rows in order, as dicts of its columns (without id); none for
        histories from before the table."""
        if not self._has_table("heuristic"):
            return []
        keys = ("time", "player_id", "version", "race", "opponent_race", "win_rate", "games", "wins", "draws",
                "losses")
        rows = self._read(f"SELECT {', '.join(keys)} FROM heuristic ORDER BY id")
        return [dict(zip(keys, r)) for r in rows]

    def learner_metrics(self) -> list[tuple[float, str, str, float]]:
        return self._read("SELECT time, agent_id, name, value FROM learner_metrics ORDER BY time, id")

    # -- reading for the dashboard ----------------------------------------------

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[LeagueHistory]:
        """One consistent view of the history for every read inside the block (one read
        transaction: rows the league writes meanwhile are not seen). Read-only histories only."""
        if not self.readonly:
            raise ValueError("snapshot() is for read-only histories (LeagueHistory(path, readonly=True))")
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the view starts here, not at the first read
        try:
            yield self
        finally:
            with self._lock:
                self._db.rollback()

    def data_version(self) -> tuple[int, ...]:
        """Changes whenever a row is added to any table but league_state: the number of
        players and the largest id of games, events, payoff snapshots, Nash, ratings and
        learner metrics, and the sum of the largest ids of exploitability, heuristic, counted
        games and exploiter gaps (each only grows; one number keeps the tuple's length) (0 for
        an empty or missing table)."""
        row = self._read(
            "SELECT (SELECT count(*) FROM players), (SELECT max(id) FROM games), (SELECT max(id) FROM events),"
            " (SELECT max(id) FROM payoff_snapshots), (SELECT max(id) FROM nash), (SELECT max(id) FROM ratings),"
            " (SELECT max(id) FROM learner_metrics)"
        )[0]
        measured = sum(self._read(f"SELECT coalesce(max(id), 0) FROM {table}")[0][0]
                       for table in ("exploitability", "heuristic", "game_counts", "exploiter_gaps")
                       if self._has_table(table))
        return (*(v or 0 for v in row), measured)

    def game_columns(self, after_id: int = 0, upto_id: int | None = None) -> tuple[list[str], list[str], list[str]]:
        """(home, away, outcome) of the games with after_id < id <= upto_id, as three
        aligned columns: each fetched as one joined string and split here, several times
        faster than SQLite's GROUP BY over text or one Python tuple per game."""
        if upto_id is None:
            upto_id = self.last_game_id()
        columns = self._read(
            "SELECT group_concat(home, char(31)), group_concat(away, char(31)), group_concat(outcome, char(31))"
            " FROM games WHERE id > ? AND id <= ?", (after_id, upto_id),
        )[0]
        if not columns[0]:
            return [], [], []
        homes, aways, outcomes = (column.split("\x1f") for column in columns)
        return homes, aways, outcomes

    def nash_times(self) -> list[float]:
        """The distinct times of the Nash distributions, oldest first."""
        return [t for (t,) in self._read("SELECT DISTINCT time FROM nash ORDER BY time")]

    def nash_at(self, times: list[float]) -> list[tuple[float, str, float]]:
        """(time, player_id, weight) of the Nash distributions at `times`."""
        if not times:
            return []
        marks = ",".join("?" * len(times))
        return self._read(f"SELECT time, player_id, weight FROM nash WHERE time IN ({marks}) ORDER BY time, id",
                          tuple(times))

    def rating_times(self) -> list[float]:
        """The distinct times at which ratings were recorded, oldest first."""
        return [t for (t,) in self._read("SELECT DISTINCT time FROM ratings ORDER BY time")]

    def rating_count(self) -> int:
        """The number of rating rows (one per player and time)."""
        return self._read("SELECT count(*) FROM ratings")[0][0]

    def ratings_at(self, times: list[float]) -> list[tuple[float, str, float, float, float]]:
        """(time, player_id, elo, trueskill_mu, trueskill_sigma) at `times`."""
        if not times:
            return []
        marks = ",".join("?" * len(times))
        return self._read(
            f"SELECT time, player_id, elo, trueskill_mu, trueskill_sigma FROM ratings WHERE time IN ({marks})"
            " ORDER BY time, id", tuple(times))

    def learner_metric_means(self, buckets: int) -> list[tuple[str, str, float, float]]:
        """(name, agent_id, last time, mean value) per metric, learner and time bucket: the
        span from the first to the last learner metric cut into `buckets` equal buckets.
        Ordered by name, agent and time."""
        start, end = self._read("SELECT min(time), max(time) FROM learner_metrics")[0]
        if start is None:
            return []
        width = max((end - start) / buckets, 1e-9)
        return self._read(
            "SELECT name, agent_id, max(time), avg(value) FROM learner_metrics"
            " GROUP BY name, agent_id, min(CAST((time - ?) / ? AS INTEGER), ?) ORDER BY name, agent_id, 3",
            (start, width, buckets - 1),
        )

    def last_activity_time(self) -> float | None:
        """The time of the newest event, payoff snapshot, game or learner metric."""
        return self._read(
            "SELECT max(t) FROM (SELECT max(time) AS t FROM events UNION ALL SELECT max(time) FROM payoff_snapshots"
            " UNION ALL SELECT time FROM (SELECT time FROM games ORDER BY id DESC LIMIT 1)"
            " UNION ALL SELECT time FROM (SELECT time FROM learner_metrics ORDER BY id DESC LIMIT 1))"
        )[0][0]
