"""Reading league.db (coordinator/league_db.py): what a run, a command and the dashboard read.

`HistoryReader` opens it read-only (`HistoryReader(run_dir)`): a reader never writes, and
WAL mode lets it read while the coordinator writes (`coordinator.history.HistoryWriter`, which
reads the same way: a restarted coordinator resumes from what it wrote). `DashboardReader`
adds the dashboard's bulk queries and its consistent view (`snapshot`).
"""

from __future__ import annotations

import contextlib
import json
import threading
import zlib
from collections.abc import Iterator

import numpy as np

from coordinator.league_db import HistoryError, connect, resolve, unpack_array, unpack_state


class HistoryReader:
    """Reads one run's `league.db` (a run directory or the file). Thread-safe; one connection
    per instance."""

    def __init__(self, path: str):
        self._open(path, readonly=True)

    def _open(self, path: str, readonly: bool) -> None:
        self.path = resolve(path)
        self._db = connect(self.path, readonly)
        self._lock = threading.Lock()
        self.readonly = readonly
        # Read-only histories written before a column existed lack it (writers add it).
        self._has_score = self._has_column("games", "score")
        self._has_races = self._has_column("games", "home_race")
        self._has_scores = self._has_column("payoff_snapshots", "scores")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def load_league_state(self) -> dict | None:
        rows = self._read("SELECT state FROM league_state WHERE id = 1")
        if not rows:
            return None
        try:
            return unpack_state(rows[0][0])
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

    def average_nash(self) -> tuple[dict[str, float], int]:
        """(player -> weight, publications) of the mean of every Nash distribution the league
        published, over its frozen players less the withdrawn (`league.meta.average_nash`, as
        the coordinator's `average_nash_weights`); ({}, n) while none has weight on one."""
        from league import meta

        withdrawn = {e["player_id"] for e in self.events() if e["kind"] == "withdrawn"}
        # copies (learning agents have no parent), less the withdrawn (`Coordinator.withdraw`)
        frozen = {p["player_id"] for p in self.players() if p["parent"]} - withdrawn
        publications = self.nash_publications()
        return meta.average_nash(publications, frozen), len(publications)

    def latest_exploitability(self) -> tuple[float, dict[str, float]] | None:
        """(time, subject -> NashConv) of the evaluator's newest exact readings (the subjects
        measured together: "nash", "nash_average", each main agent), or None before the first."""
        if not self._has_table("exploitability"):
            return None
        rows = self._read("SELECT time, subject, nash_conv FROM exploitability "
                          "WHERE time = (SELECT max(time) FROM exploitability)")
        return (rows[0][0], {s: v for _, s, v in rows}) if rows else None

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


class DashboardReader(HistoryReader):
    """`HistoryReader` with the dashboard's queries (dashboard/server.py): one consistent view
    of the history (`snapshot`), whether anything changed (`data_version`), and the bulk reads
    its page is built from."""

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[DashboardReader]:
        """One consistent view of the history for every read inside the block (one read
        transaction: rows the league writes meanwhile are not seen). Read-only histories only."""
        if not self.readonly:
            raise ValueError("snapshot() is for read-only histories (DashboardReader(path))")
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
