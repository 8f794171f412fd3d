"""The league dashboard: payoff matrix, Nash distribution, ratings and learning health, live.

Reads the run's SQLite history (`coordinator/history.py`, `<run_dir>/league.db`) and
nothing else, read-only, one short read transaction per refresh: it never blocks the
league and keeps working after the run is gone. One page of plotly charts fetches
`data.json` every few seconds (less often when the league is large) and redraws; the
figures follow AlphaStar's: the payoff matrix by agent type (Extended Data Fig. 8),
ratings of every player over training (Fig. 4a), the Nash distribution over players as
training progresses (Fig. 4c); plus OpenAI Five's data-quality metrics per learner.

    python -m experiments.dashboard --run_dir=runs/x [--port=8050] [--host=127.0.0.1]
    python -m experiments.dashboard --run_dir=runs/x --export=report.html   # one file, offline

From the league program: `server, url = serve(run_dir, port)` (a daemon thread).
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import numpy as np

from coordinator.history import DB_NAME, HistoryError, LeagueHistory, unpack_array
from experiments.dashboard_page import page_html
from league.players import HISTORICAL, LEAGUE_EXPLOITER, MAIN_AGENT, MAIN_EXPLOITER

# Display order of players within a race: the learning agents, then their snapshots.
ROLE_GROUPS = (MAIN_AGENT, MAIN_EXPLOITER, LEAGUE_EXPLOITER)
# Time series are thinned to at most this many time points (per learner and metric).
MAX_TIME_POINTS = 300
MAX_RATING_POINTS = 15_000
# The page refreshes every REFRESH_S, or every REFRESH_LOAD_FACTOR x (build + render)
# time if that is longer, so a large league costs the machine at most ~5% of a core.
REFRESH_S = 5.0
REFRESH_LOAD_FACTOR = 20.0
GAMES_PER_READ = 200_000
LEARNER_METRIC_ORDER = (
    "updates_per_s", "frames_per_s", "loss", "policy_loss", "value_loss", "upgo_loss",
    "entropy", "kl", "staleness", "sample_reuse",
)


_OUTCOMES = {"win": 0, "draw": 1, "loss": 2}


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()


def _counts(array: np.ndarray) -> dict:
    """Counts as base64 of the smallest unsigned type that holds them (the page decodes)."""
    dtype = np.uint16 if array.size == 0 or array.max() < 1 << 16 else np.uint32
    return {"dtype": np.dtype(dtype).name, "b64": _b64(array.astype(dtype))}


def _thin(times: list[float], limit: int = MAX_TIME_POINTS) -> list[float]:
    """At most `limit` of the sorted distinct times, evenly spread, always the last."""
    if len(times) <= limit:
        return times
    picks = np.unique(np.linspace(0, len(times) - 1, limit).round().astype(int))
    return [times[i] for i in picks]


def display_order(players: list[dict]) -> list[int]:
    """Indices of `players` by race (first seen first), role group, then creation time.

    Role groups: main agents, main exploiters, league exploiters, then the snapshots of
    each of those in the same order (a snapshot's group is its parent agent's role).
    """
    role_of = {p["player_id"]: p["role"] for p in players}
    races: dict[str, int] = {}
    for p in players:
        races.setdefault(p["race"], len(races))

    def group(p: dict) -> int:
        if p["role"] in ROLE_GROUPS:
            return ROLE_GROUPS.index(p["role"])
        parent_role = role_of.get(p["parent"])
        return len(ROLE_GROUPS) + (ROLE_GROUPS.index(parent_role) if parent_role in ROLE_GROUPS else len(ROLE_GROUPS))

    keys = [(races[p["race"]], group(p), p["wall_time"], p["player_id"]) for p in players]
    return sorted(range(len(players)), key=keys.__getitem__)


class DashboardData:
    """Builds the page's JSON from one run's history; caches it until the history changes.

    Game counts per pair are aggregated incrementally (only games newer than the last
    build are read), so refreshing a long run stays cheap.
    """

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.path = os.path.join(run_dir, DB_NAME) if not run_dir.endswith(".db") else run_dir
        self._lock = threading.Lock()
        self._slot: dict[str, int] = {}  # player id -> row of the running counts below
        self._wins = self._draws = self._self_losses = None
        self._games = 0
        self._last_game_id = 0
        self._cached_version: str | None = None
        self._cached: bytes | None = None

    def _connect(self) -> sqlite3.Connection:
        LeagueHistory(self.path, readonly=True).close()  # clear errors for a missing or foreign file
        return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30, check_same_thread=False)

    def json_bytes(self, have: str | None = None) -> bytes:
        """The page's data as JSON; `{"status": "unchanged"}` if the client `have`s this version."""
        with self._lock:
            try:
                db = self._connect()
            except HistoryError as e:
                return json.dumps({"status": "waiting", "message": f"waiting for the league to start ({e})"}).encode()
            try:
                db.execute("BEGIN")  # one consistent snapshot of the history for the whole build
                version = self._version(db)
                if have is not None and have == version:
                    return b'{"status": "unchanged", "version": "' + version.encode() + b'"}'
                if version != self._cached_version:
                    start = time.perf_counter()
                    data = self._build(db)
                    data.update(status="ok", version=version, build_s=round(time.perf_counter() - start, 4))
                    self._cached, self._cached_version = json.dumps(data, separators=(",", ":")).encode(), version
                return self._cached
            except sqlite3.DatabaseError as e:
                return json.dumps({"status": "error", "message": f"cannot read {self.path}: {e}"}).encode()
            finally:
                db.close()

    def data(self) -> dict:
        return json.loads(self.json_bytes())

    @staticmethod
    def _version(db: sqlite3.Connection) -> str:
        row = db.execute(
            "SELECT (SELECT count(*) FROM players), (SELECT max(id) FROM games), (SELECT max(id) FROM events),"
            " (SELECT max(id) FROM payoff_snapshots), (SELECT max(id) FROM nash), (SELECT max(id) FROM ratings),"
            " (SELECT max(id) FROM learner_metrics)"
        ).fetchone()
        return "-".join(str(v or 0) for v in row)

    # -- the build -----------------------------------------------------------------

    def _build(self, db: sqlite3.Connection) -> dict:
        rows = db.execute("SELECT player_id, role, race, parent, step, wall_time FROM players").fetchall()
        players = [dict(zip(("player_id", "role", "race", "parent", "step", "wall_time"), r)) for r in rows]
        players = [players[i] for i in display_order(players)]
        ids = [p["player_id"] for p in players]
        index = {p: i for i, p in enumerate(ids)}
        role_of = {p["player_id"]: p["role"] for p in players}

        games, wins, draws, self_losses = self._game_counts(db, ids)
        payoff = {"n": len(ids), "wins": _counts(wins), "draws": _counts(draws), "self_losses": self_losses.tolist(),
                  "decayed": None, "decayed_time": None}
        latest = db.execute("SELECT time, players, wins, draws FROM payoff_snapshots ORDER BY id DESC LIMIT 1").fetchone()
        if latest:
            payoff["decayed"], payoff["decayed_time"] = _b64(self._decayed_win_rates(latest, index)), latest[0]

        nash = self._nash(db, index)
        top = max(nash["latest"], key=lambda pw: pw[1]) if nash["latest"] else None
        events = db.execute("SELECT time, kind, agent_id, player_id, step, reason FROM events ORDER BY id").fetchall()
        times = [p["wall_time"] for p in players] + [e[0] for e in events]
        last = db.execute(
            "SELECT max(t) FROM (SELECT max(time) AS t FROM events UNION ALL SELECT max(time) FROM payoff_snapshots"
            " UNION ALL SELECT time FROM (SELECT time FROM games ORDER BY id DESC LIMIT 1)"
            " UNION ALL SELECT time FROM (SELECT time FROM learner_metrics ORDER BY id DESC LIMIT 1))"
        ).fetchone()[0]
        return {
            "run_dir": os.path.abspath(self.run_dir),
            "generated": time.time(),
            "headline": {
                "games": games,
                "players": len(ids),
                "learning_agents": sum(p["role"] != HISTORICAL for p in players),
                "snapshots": sum(e[1] == "snapshot" for e in events),
                "resets": sum(e[1] == "reset" for e in events),
                "top_nash_weight": top[1] if top else None,
                "top_nash_player": ids[top[0]] if top else None,
                "nash_time": nash["times"][-1] if nash["times"] else None,
                "start_time": min(times) if times else None,
                "last_time": max([*times, last or 0]) if times else last,
            },
            "players": {
                "id": ids,
                "role": [p["role"] for p in players],
                "race": [p["race"] for p in players],
                "parent": [p["parent"] for p in players],
                "parent_role": [role_of.get(p["parent"]) for p in players],
                "step": [p["step"] for p in players],
                "created": [p["wall_time"] for p in players],
            },
            "payoff": payoff,
            "nash": nash,
            "ratings": self._ratings(db, index),
            "events": {k: [e[i] for e in events] for i, k in enumerate(("time", "kind", "agent", "player", "step", "reason"))},
            "learners": self._learner_metrics(db),
        }

    def _game_counts(self, db, ids: list[str]) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """All games: their number, and in display order a's wins over b and the draws between
        them ([n, n]), and each player's losses in self-play (home == away) ([n]).

        Counts per ordered pair are kept between builds in a stable order of first sight and
        only games newer than the last build are read.
        """
        last = db.execute("SELECT coalesce(max(id), 0) FROM games").fetchone()[0]
        if last < self._last_game_id:  # a different history under the same path
            self._slot, self._wins, self._draws, self._self_losses, self._last_game_id = {}, None, None, None, 0
        slot = self._slot
        for name in ids:
            slot.setdefault(name, len(slot))
        # One string per chunk of games, split and counted here: several times faster than
        # SQLite's GROUP BY over text or fetching one Python tuple per game.
        for lo in range(self._last_game_id, last, GAMES_PER_READ):
            columns = db.execute(
                "SELECT group_concat(home, char(31)), group_concat(away, char(31)), group_concat(outcome, char(31))"
                " FROM games WHERE id > ? AND id <= ?", (lo, min(lo + GAMES_PER_READ, last)),
            ).fetchone()
            if not columns[0]:
                continue
            homes, aways, outcomes = (column.split("\x1f") for column in columns)
            for name in set(homes) | set(aways):
                slot.setdefault(name, len(slot))
            home = np.fromiter(map(slot.__getitem__, homes), np.int64, len(homes))
            away = np.fromiter(map(slot.__getitem__, aways), np.int64, len(homes))
            outcome = np.fromiter(map(_OUTCOMES.__getitem__, outcomes), np.int8, len(homes))
            self._grow(len(slot))
            win, draw, loss, same = outcome == 0, outcome == 1, outcome == 2, home == away
            np.add.at(self._wins, (home[win], away[win]), 1)
            np.add.at(self._wins, (away[loss & ~same], home[loss & ~same]), 1)  # a loss at home is away's win,
            np.add.at(self._self_losses, home[loss & same], 1)  # except in self-play, where it stays a loss
            np.add.at(self._draws, (home[draw], away[draw]), 1)
            np.add.at(self._draws, (away[draw & ~same], home[draw & ~same]), 1)
            self._games += len(homes)
        self._grow(len(slot))
        self._last_game_id = last
        order = np.fromiter((slot[p] for p in ids), np.int64, len(ids))
        grid = np.ix_(order, order)
        return self._games, self._wins[grid], self._draws[grid], self._self_losses[order]

    def _grow(self, n: int) -> None:
        if self._wins is None:
            self._wins, self._draws, self._self_losses, self._games = (
                np.zeros((0, 0), np.int64), np.zeros((0, 0), np.int64), np.zeros(0, np.int64), 0)
        if n <= self._wins.shape[0]:
            return
        size = max(n, 2 * self._wins.shape[0], 64)
        for name in ("_wins", "_draws"):
            old, new = getattr(self, name), np.zeros((size, size), np.int64)
            new[: old.shape[0], : old.shape[1]] = old
            setattr(self, name, new)
        self._self_losses = np.concatenate([self._self_losses, np.zeros(size - len(self._self_losses), np.int64)])

    @staticmethod
    def _decayed_win_rates(latest, index: dict[str, int]) -> np.ndarray:
        """The league's own payoff (decayed counts): (wins + draws/2) / games, as uint16."""
        _, snapshot_ids, wins_blob, draws_blob = latest
        snapshot_ids = json.loads(snapshot_ids)
        m = len(snapshot_ids)
        w, d = unpack_array(wins_blob, m).astype(np.float64), unpack_array(draws_blob, m).astype(np.float64)
        g = w + w.T + d
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(g > 0, (w + d / 2) / g, np.nan)
        n = len(index)
        out = np.full((n, n), 65535, np.uint16)  # win rate * 65534, 65535: never played
        pos = np.array([index.get(p, -1) for p in snapshot_ids])
        keep = np.flatnonzero(pos >= 0)
        out[np.ix_(pos[keep], pos[keep])] = np.where(np.isnan(rate), 65535, np.round(rate * 65534))[np.ix_(keep, keep)]
        return out

    @staticmethod
    def _nash(db, index: dict[str, int]) -> dict:
        """Nash weights per player over (thinned) time, players in the support at any time."""
        all_times = [t for (t,) in db.execute("SELECT DISTINCT time FROM nash ORDER BY time")]
        times = _thin(all_times)
        if not times:
            return {"times": [], "players": [], "weights": [], "latest": []}
        marks = ",".join("?" * len(times))
        rows = db.execute(f"SELECT time, player_id, weight FROM nash WHERE time IN ({marks})", times).fetchall()
        column = {t: k for k, t in enumerate(times)}
        support = sorted({index[p] for _, p, _ in rows if p in index})
        row_of = {i: r for r, i in enumerate(support)}
        weights = np.zeros((len(support), len(times)))
        for t, p, w in rows:
            if p in index:
                weights[row_of[index[p]], column[t]] = w
        latest = [(i, float(weights[r, -1])) for i, r in row_of.items() if weights[r, -1] > 0]
        return {"times": times, "players": support, "weights": np.round(weights, 6).tolist(), "latest": latest}

    @staticmethod
    def _ratings(db, index: dict[str, int]) -> dict:
        """Elo and TrueSkill per player at (thinned) times, rows sorted by player then time.

        Times are thinned to about MAX_RATING_POINTS points in all (at least 20 times):
        drawing lines costs the browser about 4 ms per 1,000 points.

        Columns as base64 arrays: player (display index, int32), t (index into `times`,
        int32), elo, mu, sigma (float32, NaN if missing).
        """
        all_times = [t for (t,) in db.execute("SELECT DISTINCT time FROM ratings ORDER BY time")]
        per_time = db.execute("SELECT count(*) FROM ratings").fetchone()[0] / max(1, len(all_times))
        times = _thin(all_times, int(np.clip(MAX_RATING_POINTS / max(per_time, 1), 20, MAX_TIME_POINTS)))
        marks = ",".join("?" * len(times))
        rows = db.execute(
            f"SELECT time, player_id, elo, trueskill_mu, trueskill_sigma FROM ratings WHERE time IN ({marks})", times
        ).fetchall() if times else []
        column = {t: k for k, t in enumerate(times)}
        rows = [r for r in rows if r[1] in index]
        player = np.fromiter((index[r[1]] for r in rows), np.int32, len(rows))
        t = np.fromiter((column[r[0]] for r in rows), np.int32, len(rows))
        values = np.array([r[2:] for r in rows], np.float64).reshape(len(rows), 3)  # None -> NaN
        order = np.lexsort((t, player))
        out = {"times": times, "player": _b64(player[order]), "t": _b64(t[order])}
        for k, name in enumerate(("elo", "mu", "sigma")):
            out[name] = _b64(values[order, k].astype(np.float32))
        return out

    @staticmethod
    def _learner_metrics(db) -> dict:
        """Per metric name, per learner: the mean value in each of MAX_TIME_POINTS time buckets."""
        start, end = db.execute("SELECT min(time), max(time) FROM learner_metrics").fetchone()
        if start is None:
            return {"names": [], "series": {}}
        bucket = max((end - start) / MAX_TIME_POINTS, 1e-9)
        rows = db.execute(
            "SELECT name, agent_id, max(time), avg(value) FROM learner_metrics"
            " GROUP BY name, agent_id, CAST((time - ?) / ? AS INTEGER) ORDER BY name, agent_id, 3",
            (start, bucket),
        ).fetchall()
        series: dict[str, dict[str, dict]] = {}
        for name, agent, t, v in rows:
            s = series.setdefault(name, {}).setdefault(agent, {"t": [], "v": []})
            s["t"].append(t)
            s["v"].append(v)
        known = [m for m in LEARNER_METRIC_ORDER if m in series]
        return {"names": known + sorted(set(series) - set(known)), "series": series}


# -- the page and the server -------------------------------------------------------------


VENDORED_PLOTLY = os.path.join(os.path.dirname(__file__), "dashboard_static", "plotly-cartesian-4.1.1.min.js")


def plotly_js() -> str:
    """plotly.js: the vendored cartesian bundle (1.5 MB, see dashboard_static/README.md),
    else the full bundle of the Python plotly package (4.8 MB, slower to start)."""
    if os.path.exists(VENDORED_PLOTLY):
        with open(VENDORED_PLOTLY, encoding="utf-8") as f:
            return f.read()
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def export(run_dir: str, path: str) -> str:
    """Writes one self-contained HTML file (plotly.js and the data inlined); returns its path."""
    data = DashboardData(run_dir)
    payload = data.json_bytes().decode()
    status = json.loads(payload).get("status")
    if status != "ok":
        raise HistoryError(json.loads(payload).get("message", f"no league history in {run_dir}"))
    html = page_html(plotly_inline=plotly_js(), data_json=payload, refresh_s=REFRESH_S, load_factor=REFRESH_LOAD_FACTOR)
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
    return path


class _Handler(BaseHTTPRequestHandler):
    server_version = "LeagueDashboard"
    data: DashboardData  # set on the subclass made by `serve`
    _page: bytes = b""
    _plotly: bytes = b""

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urlparse(self.path)
        if url.path in ("/", "/index.html"):
            self._send(200, self._page, "text/html; charset=utf-8")
        elif url.path == "/data.json":
            have = parse_qs(url.query).get("have", [None])[0]
            self._send(200, self.data.json_bytes(have), "application/json", cache="no-store")
        elif url.path == "/plotly.min.js":
            self._send(200, self._plotly, "application/javascript; charset=utf-8", cache="max-age=86400")
        else:
            self._send(404, b"not found", "text/plain")

    def _send(self, code: int, body: bytes, content_type: str, cache: str = "no-cache") -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", cache)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away mid-response

    def log_message(self, format, *args) -> None:  # quiet: the league owns the terminal
        pass


def serve(run_dir: str, port: int, host: str = "127.0.0.1") -> tuple[ThreadingHTTPServer, str]:
    """Serves the dashboard of `run_dir` on a daemon thread; returns (server, url) at once.

    The history is opened per request, read-only, so this may start before the league
    has written `league.db` (the page then says it is waiting). `port=0` picks a free
    port. Stop with `server.shutdown(); server.server_close()`.
    """
    handler = type("DashboardHandler", (_Handler,), {
        "data": DashboardData(run_dir),
        "_page": page_html(plotly_src="plotly.min.js", refresh_s=REFRESH_S, load_factor=REFRESH_LOAD_FACTOR).encode(),
        "_plotly": plotly_js().encode(),
    })
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="dashboard", daemon=True)
    thread.start()
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return server, f"http://{shown}:{server.server_address[1]}/"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m experiments.dashboard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_dir", required=True, help="the league run's directory (holds league.db)")
    parser.add_argument("--port", type=int, default=8050, help="port to serve on (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--export", default=None, metavar="REPORT.html",
                        help="write one self-contained HTML file and exit instead of serving")
    args = parser.parse_args(argv)
    try:
        LeagueHistory(args.run_dir, readonly=True).close()
        if args.export:
            path = export(args.run_dir, args.export)
            print(f"dashboard written to {os.path.abspath(path)}")
            return 0
        server, url = serve(args.run_dir, args.port, args.host)
    except HistoryError as e:
        print(f"dashboard: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"dashboard: cannot serve on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 2
    print(f"league dashboard of {os.path.abspath(args.run_dir)} at {url}  (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
