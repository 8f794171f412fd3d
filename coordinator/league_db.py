"""league.db (`<run_dir>/league.db`), the league's history in SQLite: the one source of truth.

Its schema, its file (made whole, checked, opened) and the encodings of its columns. The
coordinator writes it through one `coordinator.history.HistoryWriter`; the dashboard, the
commands and a restarted run read it (`coordinator.history_reader`). WAL mode lets readers
work while the league writes. Schema (times are Unix seconds):

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
        the meta-game's mixture over all players at `time` (rows with weight > 0): its Nash
        distribution, or the mixture of the coordinator's `meta_solver` (league/meta_solvers.py)
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
        the latest League.state() checkpoint (`pack_state`: JSON and the arrays' bytes), for resuming
"""

from __future__ import annotations

import json
import os
import pathlib
import sqlite3
import struct
import zlib

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


def pack_array(array: np.ndarray) -> bytes:
    return zlib.compress(np.ascontiguousarray(array, dtype=np.float32).tobytes(), 1)


def unpack_array(blob: bytes, n: int) -> np.ndarray:
    return np.frombuffer(zlib.decompress(blob), dtype=np.float32).reshape(n, n)


# league_state's encoding since its arrays are stored as bytes: MAGIC, the length of the JSON
# part (4 bytes, little-endian), the JSON part (zlib), then each array's bytes, each after its
# length (8 bytes). The JSON names an array {"__blob__": k, "dtype", "shape", "zlib"}: its bytes
# are zlib-compressed unless a sample of them does not compress (dense floats: zlib spent 0.79 s
# on a 1,000-player league's 24 MB to save ~8%), then stored as they are with their CRC-32
# ("zlib": false, "crc32"; zlib's own checksum catches damage to the others). An entry without
# "zlib" is compressed, as every array was before. Checkpoints
# written before (zlib JSON, arrays as lists: a payoff of 650 players with exact entries took
# 0.76 s, and the league is checkpointed at every snapshot and reset) are read as they were.
STATE_MAGIC = b"LGST2\n"


# An array is compressed when zlib takes its first SAMPLE_BYTES to at most COMPRESSIBLE of their size.
SAMPLE_BYTES, COMPRESSIBLE = 1 << 16, 0.8


def _array_entry(data: np.ndarray, blobs: list) -> dict:
    """Appends the array's stored bytes to `blobs`; returns its entry in the JSON part."""
    raw = data.tobytes()
    entry = {"__blob__": len(blobs), "dtype": data.dtype.str, "shape": list(data.shape)}
    if len(zlib.compress(raw[:SAMPLE_BYTES], 1)) > COMPRESSIBLE * min(len(raw), SAMPLE_BYTES):
        blobs.append(raw)
        return {**entry, "zlib": False, "crc32": zlib.crc32(raw)}
    blobs.append(zlib.compress(raw, 1))
    return {**entry, "zlib": True}


def _array_from_entry(entry: dict, blobs: list) -> np.ndarray:
    data = blobs[entry["__blob__"]]
    if entry.get("zlib", True):
        data = zlib.decompress(data)
    elif zlib.crc32(data) != entry["crc32"]:
        raise ValueError("an array of the checkpoint does not match its CRC-32 (damaged)")
    return np.frombuffer(data, dtype=np.dtype(entry["dtype"])).reshape(entry["shape"]).copy()


def _jsonable(value, blobs: list):
    if isinstance(value, np.ndarray):
        return _array_entry(np.ascontiguousarray(value), blobs)
    if isinstance(value, dict):
        return {k: _jsonable(v, blobs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, blobs) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def pack_state(state: dict) -> bytes:
    """The league's checkpoint (`League.state()` with its bookkeeping) in the encoding above."""
    blobs: list[bytes] = []
    head = zlib.compress(json.dumps(_jsonable(state, blobs)).encode(), 1)
    return b"".join([STATE_MAGIC, struct.pack("<I", len(head)), head]
                    + [struct.pack("<Q", len(b)) + b for b in blobs])


def unpack_state(blob: bytes) -> dict:
    """`pack_state`'s inverse, and the reader of the older encoding (zlib JSON, arrays as lists);
    zlib.error or ValueError for a damaged blob."""
    if not blob.startswith(STATE_MAGIC):
        return _from_jsonable(json.loads(zlib.decompress(blob)), [])
    try:
        at = len(STATE_MAGIC)
        (size,) = struct.unpack_from("<I", blob, at)
        head, at = blob[at + 4:at + 4 + size], at + 4 + size
        blobs = []
        while at < len(blob):
            (size,) = struct.unpack_from("<Q", blob, at)
            blobs.append(blob[at + 8:at + 8 + size])
            at += 8 + size
        return _from_jsonable(json.loads(zlib.decompress(head)), blobs)
    except struct.error as e:
        raise ValueError(f"the checkpoint is cut short ({e})") from None


def _from_jsonable(value, blobs: list):
    if isinstance(value, dict):
        if "__blob__" in value:
            try:
                return _array_from_entry(value, blobs)
            except (KeyError, IndexError, TypeError) as e:
                raise ValueError(f"an array of the checkpoint is malformed ({type(e).__name__}: {e})") from None
        if "__array__" in value:
            return np.asarray(value["__array__"], dtype=value["dtype"])
        return {k: _from_jsonable(v, blobs) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_jsonable(v, blobs) for v in value]
    return value


BACKUP_NAME = DB_NAME + ".backup"


def read_only_uri(path: str) -> str:
    """The URI that opens `path` read-only (any character in the path quoted)."""
    return pathlib.Path(path).absolute().as_uri() + "?mode=ro"


def check_file(path: str) -> None:
    """HistoryError with one paragraph naming the file, what is wrong and the fix, when the
    SQLite file at `path` is damaged (SQLite's quick_check: page structure, record formats);
    nothing is written to it. A missing file is fine (a new run creates it)."""
    if not os.path.exists(path):
        return
    try:
        db = sqlite3.connect(read_only_uri(path), uri=True, timeout=30)
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


def remove_partial(partial: str) -> None:
    """A half-written database beside the real one, and its WAL files, from a write cut short."""
    for leftover in (partial, partial + "-wal", partial + "-shm"):
        if os.path.exists(leftover):
            os.remove(leftover)


def _create(path: str) -> None:
    """A new history with its schema, written beside `path` and renamed into place: a reader
    that finds the file (the dashboard, a test waiting for the run) always finds its tables."""
    partial = path + ".new"
    remove_partial(partial)
    db = sqlite3.connect(partial)
    try:
        db.executescript(SCHEMA)
        db.commit()
    finally:
        db.close()
    os.replace(partial, path)



def resolve(path: str) -> str:
    """The league.db of a run directory, or `path` itself."""
    return os.path.join(path, DB_NAME) if os.path.isdir(path) else path


def connect(path: str, readonly: bool) -> sqlite3.Connection:
    """A connection to the history at `path` (shared by threads: callers hold a lock).
    Read-only: HistoryError when there is none or it is not a league history. Writable: made
    (`_create`) when missing, in WAL mode, with the columns of newer schemas added."""
    if readonly:
        if not os.path.exists(path):
            raise HistoryError(
                f"no league history at {path}: pass the --run_dir of a league run "
                f"(it holds {DB_NAME} once the run has started)"
            )
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, timeout=30)
        try:
            db.execute("SELECT count(*) FROM players").fetchone()
        except sqlite3.DatabaseError as e:
            raise HistoryError(f"{path} is not a league history ({e}); pass a run directory made by a league run") from None
        return db
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if not os.path.exists(path):
        _create(path)
    db = sqlite3.connect(path, check_same_thread=False, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    _add_missing_columns(db)
    db.commit()
    return db


def _add_missing_columns(db: sqlite3.Connection) -> None:
    """Histories written before a column existed get it (NULL in old rows)."""
    for table, column, kind in (("games", "score", "REAL"), ("games", "home_race", "TEXT"),
                                ("games", "away_race", "TEXT"), ("payoff_snapshots", "scores", "BLOB")):
        columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if column not in columns:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
