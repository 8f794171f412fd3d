"""The league dashboard: payoff matrix, Nash distribution, ratings and learning health, live.

Reads the run's SQLite history through `coordinator.history_reader.DashboardReader`
(`<run_dir>/league.db`) and nothing else, read-only, one short read transaction per
refresh: it never blocks the league and keeps working after the run is gone. The page is
static files (`dashboard/static/`: index.html, dashboard.js, dashboard.css and plotly.js);
it fetches `data.json` every few seconds (less often when the league is large) with the
ETag it drew last in If-None-Match, answered with 304 Not Modified until the history
changes, and redraws. The figures follow AlphaStar's: the payoff matrix by agent type
(Extended Data Fig. 8), ratings of every player over training (Fig. 4a), the Nash
distribution over players as training progresses (Fig. 4c); plus OpenAI Five's
data-quality metrics per learner and, as OpenAI Five tracked TrueSkill against fixed reference
agents, each SMAX main agent's win rate against the scripted heuristic over time; in poker, the
exact NashConv over time and each exploiter snapshot's gap to a best response. A notice at
the top lists the frozen players withdrawn from matchmaking and the learners stalled now
(`league_notices`, from the history's events); withdrawn players are marked "✕ " in the charts.

    python -m experiments.dashboard --run_dir=runs/x [--port=8050] [--host=127.0.0.1]
    python -m experiments.dashboard --run_dir=runs/x --export=report.html   # one file, offline

From the league program: `server, url = serve(run_dir, port)` (a daemon thread). The command is
the entry point `experiments/dashboard.py`.

Watching a game: a click on a payoff-matrix cell opens `/watch?home=ROW&away=COLUMN&seed=0`
(static/watch.html), a game between those two players played on demand and animated frame by
frame; `dashboard/watch.py` plays it on a thread with the `watch` function given to `serve`
(`experiments.watch.watch`: this package sits below experiments and names no game). The
exported report has no server, so its cells open nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import sqlite3
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import numpy as np

from coordinator.history_reader import DashboardReader
from coordinator.league_db import DB_NAME, HistoryError
from dashboard.watch import Watcher
from league.payoff import Payoff
from league.players import HISTORICAL, LEAGUE_EXPLOITER, MAIN_AGENT, MAIN_EXPLOITER

STATIC = os.path.join(os.path.dirname(__file__), "static")
VENDORED_PLOTLY = os.path.join(STATIC, "plotly-cartesian-4.1.1.min.js")
# Display order of players within a race: the learning agents, then their snapshots.
ROLE_GROUPS = (MAIN_AGENT, MAIN_EXPLOITER, LEAGUE_EXPLOITER)
# Time series are thinned to at most this many time points (per learner and metric).
MAX_TIME_POINTS = 300
MAX_RATING_POINTS = 15_000
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

    `response(if_none_match)` gives (status, ETag, body): the ETag names this instance
    and the history's version (`DashboardReader.data_version`), so a client that has it
    gets 304 and nothing is built; the JSON is rebuilt only when the version changed.
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
        self._last_count_id = 0
        self._cached_etag: str | None = None
        self._cached: bytes | None = None
        # ETags: this instance's tag and the history's version, so that a page that outlives
        # its server (restarted, or now serving another run) gets the data afresh.
        self._etag_prefix = secrets.token_hex(4)

    def response(self, if_none_match: str | None = None) -> tuple[int, str | None, bytes]:
        """(HTTP status, ETag or None, body): 304 with no body if `if_none_match` (the
        request's If-None-Match header) names the current version; else 200 and the data,
        with an ETag when they are the league's (`status` "ok"; not while "waiting" for
        the league to start, nor on an "error")."""
        with self._lock:
            try:
                history = DashboardReader(self.path)
            except HistoryError as e:
                return 200, None, _message("waiting", f"waiting for the league to start ({e})")
            try:
                with history.snapshot():  # one consistent view of the history for the whole build
                    etag = f'"{self._etag_prefix}-' + "-".join(map(str, history.data_version())) + '"'
                    if etag_matches(if_none_match, etag):
                        return 304, etag, b""
                    if etag != self._cached_etag:
                        start = time.perf_counter()
                        data = self._build(history)
                        data.update(status="ok", build_s=round(time.perf_counter() - start, 4))
                        self._cached, self._cached_etag = json.dumps(data, separators=(",", ":")).encode(), etag
                    return 200, etag, self._cached
            except sqlite3.DatabaseError as e:
                return 200, None, _message("error", f"cannot read {self.path}: {e}")
            finally:
                history.close()

    def json_bytes(self) -> bytes:
        return self.response()[2]

    def data(self) -> dict:
        return json.loads(self.json_bytes())

    # -- the build -----------------------------------------------------------------

    def _build(self, history: DashboardReader) -> dict:
        players = history.players()
        players = [players[i] for i in display_order(players)]
        ids = [p["player_id"] for p in players]
        index = {p: i for i, p in enumerate(ids)}
        role_of = {p["player_id"]: p["role"] for p in players}

        games, wins, draws, self_losses = self._game_counts(history, ids)
        payoff = {"n": len(ids), "wins": _counts(wins), "draws": _counts(draws), "self_losses": self_losses.tolist(),
                  "decayed": None, "decayed_time": None}
        latest = history.latest_payoff()
        if latest:
            payoff["decayed"], payoff["decayed_time"] = _b64(_decayed_win_rates(latest, index)), latest[0]

        nash = self._nash(history, index)
        top = max(nash["latest"], key=lambda pw: pw[1]) if nash["latest"] else None
        events = history.events()
        notices = league_notices(events)
        withdrawn = {w["player"] for w in notices["withdrawn"]}
        times = [p["wall_time"] for p in players] + [e["time"] for e in events]
        last = history.last_activity_time()
        return {
            "run_dir": os.path.abspath(self.run_dir),
            "generated": time.time(),
            "headline": {
                "games": games,
                "players": len(ids),
                "learning_agents": sum(p["role"] != HISTORICAL for p in players),
                "snapshots": sum(e["kind"] == "snapshot" for e in events),
                "resets": sum(e["kind"] == "reset" for e in events),
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
                "withdrawn": [p in withdrawn for p in ids],
            },
            "notices": notices,
            "payoff": payoff,
            "nash": nash,
            "ratings": self._ratings(history, index),
            "exploitability": self._exploitability(history),
            "heuristic": self._heuristic(history),
            "exploiter_gaps": self._exploiter_gaps(history),
            "events": {k: [e[c] for e in events] for k, c in (("time", "time"), ("kind", "kind"), ("agent", "agent_id"),
                                                               ("player", "player_id"), ("step", "step"), ("reason", "reason"))},
            "learners": self._learner_metrics(history),
        }

    def _game_counts(self, history: DashboardReader, ids: list[str]) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """All games: their number, and in display order a's wins over b and the draws between
        them ([n, n]), and each player's losses in self-play (home == away) ([n]).

        Plain counts of every game, kept between builds in a stable order of first sight;
        only games newer than the last build are read. (Not a `Payoff`: its update is one
        game at a time, seconds for 500k games, and it folds a self-play loss into the
        wins; the page shows self-play from home's side.)
        """
        last = history.last_game_id()
        last_count = history.last_count_id()
        if last < self._last_game_id or last_count < self._last_count_id:  # a different history under the same path
            self._slot, self._wins, self._draws, self._self_losses, self._last_game_id = {}, None, None, None, 0
            self._last_count_id = 0
        slot = self._slot
        for name in ids:
            slot.setdefault(name, len(slot))
        for lo in range(self._last_game_id, last, GAMES_PER_READ):
            homes, aways, outcomes = history.game_columns(lo, min(lo + GAMES_PER_READ, last))
            if not homes:
                continue
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
        # Counted games (the device path's `game_counts` rows): a row's wins, draws and losses.
        for row in history.game_counts(self._last_count_id, last_count):
            home, away = (slot.setdefault(row[k], len(slot)) for k in ("home", "away"))
            self._grow(len(slot))
            self._wins[home, away] += row["wins"]
            if home == away:
                self._self_losses[home] += row["losses"]
            else:
                self._wins[away, home] += row["losses"]
                self._draws[away, home] += row["draws"]
            self._draws[home, away] += row["draws"]
            self._games += row["wins"] + row["draws"] + row["losses"]
        self._last_count_id = last_count
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
    def _nash(history: DashboardReader, index: dict[str, int]) -> dict:
        """Nash weights per player over (thinned) time, players in the support at any time."""
        times = _thin(history.nash_times())
        if not times:
            return {"times": [], "players": [], "weights": [], "latest": []}
        rows = history.nash_at(times)
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
    def _exploitability(history: DashboardReader) -> dict:
        """{subject: {"time": [...], "nash_conv": [...]}}: "nash", "nash_average" and each main agent."""
        out: dict = {}
        for when, subject, value in history.exploitability_history():
            series = out.setdefault(subject, {"time": [], "nash_conv": []})
            series["time"].append(when)
            series["nash_conv"].append(value)
        return out

    @staticmethod
    def _exploiter_gaps(history: DashboardReader) -> dict:
        """{exploiter role: {"time", "gap", "player", "target", "br_value", "exploiter_value": [...]}}:
        poker, each exploiter snapshot's gap to a best response against its target (the
        `exploiter_gaps` rows in order, one series per role); {} before the first."""
        out: dict = {}
        for row in history.exploiter_gaps():
            series = out.setdefault(row["role"], {k: [] for k in ("time", "gap", "player", "target", "br_value",
                                                                  "exploiter_value")})
            series["player"].append(row["player_id"])
            for key in ("time", "gap", "target", "br_value", "exploiter_value"):
                series[key].append(row[key])
        return out

    @staticmethod
    def _heuristic(history: DashboardReader) -> dict:
        """{main agent: {"race", "time": [...], "win_rate": [...], "version": [...], "games": [...],
        "by_race": {heuristic race: [...]}}}: per measurement (the rows of one time), the win
        rate against the scripted heuristic (draws half), the mean over the heuristic's races,
        and each race's (None where not measured); {} before the first measurement."""
        measurements: dict[tuple[str, float], list[dict]] = {}
        for row in history.heuristic_history():
            measurements.setdefault((row["player_id"], row["time"]), []).append(row)
        races = sorted({row["opponent_race"] for rows in measurements.values() for row in rows})
        out: dict = {}
        for (player, when), rows in measurements.items():
            series = out.setdefault(player, {"race": rows[0]["race"], "time": [], "win_rate": [], "version": [],
                                             "games": [], "by_race": {r: [] for r in races}})
            series["time"].append(when)
            series["win_rate"].append(float(np.mean([r["win_rate"] for r in rows])))
            series["version"].append(rows[0]["version"])
            series["games"].append(sum(r["games"] for r in rows))
            by_race = {r["opponent_race"]: r["win_rate"] for r in rows}
            for race in races:
                series["by_race"][race].append(by_race.get(race))
        return out

    @staticmethod
    def _ratings(history: DashboardReader, index: dict[str, int]) -> dict:
        """Elo and TrueSkill per player at (thinned) times, rows sorted by player then time.

        Times are thinned to about MAX_RATING_POINTS points in all (at least 20 times):
        drawing lines costs the browser about 4 ms per 1,000 points.

        Columns as base64 arrays: player (display index, int32), t (index into `times`,
        int32), elo, mu, sigma (float32, NaN if missing).
        """
        all_times = history.rating_times()
        per_time = history.rating_count() / max(1, len(all_times))
        times = _thin(all_times, int(np.clip(MAX_RATING_POINTS / max(per_time, 1), 20, MAX_TIME_POINTS)))
        column = {t: k for k, t in enumerate(times)}
        rows = [r for r in history.ratings_at(times) if r[1] in index]
        player = np.fromiter((index[r[1]] for r in rows), np.int32, len(rows))
        t = np.fromiter((column[r[0]] for r in rows), np.int32, len(rows))
        values = np.array([r[2:] for r in rows], np.float64).reshape(len(rows), 3)  # None -> NaN
        order = np.lexsort((t, player))
        out = {"times": times, "player": _b64(player[order]), "t": _b64(t[order])}
        for k, name in enumerate(("elo", "mu", "sigma")):
            out[name] = _b64(values[order, k].astype(np.float32))
        return out

    @staticmethod
    def _learner_metrics(history: DashboardReader) -> dict:
        """Per metric name, per learner: the mean value in each of MAX_TIME_POINTS time buckets."""
        series: dict[str, dict[str, dict]] = {}
        for name, agent, t, v in history.learner_metric_means(MAX_TIME_POINTS):
            s = series.setdefault(name, {}).setdefault(agent, {"t": [], "v": []})
            s["t"].append(t)
            s["v"].append(v)
        known = [m for m in LEARNER_METRIC_ORDER if m in series]
        return {"names": known + sorted(set(series) - set(known)), "series": series}


def league_notices(events: list[dict]) -> dict:
    """What the page's notice box lists, from the history's events (`DashboardReader.events`):

    "withdrawn": each frozen player taken out of matchmaking (its parameter file is damaged;
    for the rest of the run): {"player", "agent" (its parent), "step", "time", "reason"}, in
    the order withdrawn. "stalled": each learning agent whose learner has stopped learning and
    not recovered since: {"agent", "since" (the first "stalled" event after its last
    "recovered" one), "time" and "reason" (of its latest "stalled" event)}, by agent.
    """
    withdrawn: dict[str, dict] = {}
    stalled: dict[str, dict] = {}
    for e in events:
        if e["kind"] == "withdrawn" and e["player_id"] and e["player_id"] not in withdrawn:
            withdrawn[e["player_id"]] = {"player": e["player_id"], "agent": e["agent_id"], "step": e["step"],
                                         "time": e["time"], "reason": e["reason"] or ""}
        elif e["kind"] == "stalled":
            since = stalled[e["agent_id"]]["since"] if e["agent_id"] in stalled else e["time"]
            stalled[e["agent_id"]] = {"agent": e["agent_id"], "since": since, "time": e["time"], "reason": e["reason"] or ""}
        elif e["kind"] == "recovered":
            stalled.pop(e["agent_id"], None)
    return {"withdrawn": list(withdrawn.values()), "stalled": [stalled[a] for a in sorted(stalled)]}


def _message(status: str, message: str) -> bytes:
    return json.dumps({"status": status, "message": message}).encode()


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an If-None-Match header names `etag` (RFC 9110 13.1.2: a list of entity tags
    or "*", compared weakly)."""
    if not if_none_match:
        return False
    tags = [t.strip() for t in if_none_match.split(",")]
    return any(t == "*" or t.removeprefix("W/") == etag for t in tags)


def _decayed_win_rates(latest, index: dict[str, int]) -> np.ndarray:
    """The league's own payoff (the decayed counts of the latest payoff snapshot) as
    `Payoff.win_rate_matrix` computes it, in display order, as uint16: win rate * 65534,
    65535 for a pair never played (or a player not in the snapshot)."""
    _, snapshot_ids, wins, draws, _ = latest
    payoff = Payoff.from_state({"decay": 1.0, "players": snapshot_ids, "wins": wins, "draws": draws})
    rate = payoff.win_rate_matrix()
    played = sum(payoff.count_matrices()) > 0  # wins + draws + losses
    n = len(index)
    out = np.full((n, n), 65535, np.uint16)
    pos = np.array([index.get(p, -1) for p in snapshot_ids], np.int64)
    keep = np.flatnonzero(pos >= 0)
    grid = np.ix_(keep, keep)
    out[np.ix_(pos[keep], pos[keep])] = np.where(played[grid], np.round(rate[grid] * 65534), 65535)
    return out


# -- the page and the server -------------------------------------------------------------


def plotly_js() -> str:
    """plotly.js: the vendored cartesian bundle (1.5 MB, see dashboard/static/README.md),
    else the full bundle of the Python plotly package (4.8 MB, slower to start)."""
    if os.path.exists(VENDORED_PLOTLY):
        with open(VENDORED_PLOTLY, encoding="utf-8") as f:
            return f.read()
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _static(name: str) -> str:
    with open(os.path.join(STATIC, name), encoding="utf-8") as f:
        return f.read()


# The files of the page as the server sends them: URL path -> (file, content type, Cache-Control).
PAGE_FILES = {
    "/index.html": ("index.html", "text/html; charset=utf-8", "no-cache"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8", "no-cache"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8", "no-cache"),
    "/plotly.min.js": (None, "text/javascript; charset=utf-8", "max-age=86400"),  # plotly_js()
    "/watch": ("watch.html", "text/html; charset=utf-8", "no-cache"),  # a game, watched (dashboard/watch.py)
    "/watch.js": ("watch.js", "text/javascript; charset=utf-8", "no-cache"),
}


def page_html(data_json: str) -> str:
    """index.html with its style sheet, scripts and `data_json` inlined: one file that
    loads nothing from elsewhere."""
    def element(tag: str, text: str) -> str:
        if f"</{tag}" in text.lower():
            raise ValueError(f"cannot inline text holding '</{tag}' in a <{tag}> element")
        return f"<{tag}>\n{text}</{tag}>"

    # "</" would end the script element early; "<\/" is the same string in JSON.
    data = '<script id="dashboard-data" type="application/json">' + data_json.replace("</", "<\\/") + "</script>"
    inline = {
        '<link rel="stylesheet" href="dashboard.css">': lambda: element("style", _static("dashboard.css")),
        '<script src="dashboard.js"></script>': lambda: data + "\n" + element("script", _static("dashboard.js")),
        '<script src="plotly.min.js"></script>': lambda: element("script", plotly_js()),
    }
    html = _static("index.html")
    for tag in inline:
        if html.count(tag) != 1:
            raise RuntimeError(f"{STATIC}/index.html must hold {tag} exactly once")
    return re.sub("|".join(map(re.escape, inline)), lambda m: inline[m.group()](), html)


def export(run_dir: str, path: str) -> str:
    """Writes one self-contained HTML file (page, plotly.js and the data inlined); returns its path."""
    payload = DashboardData(run_dir).json_bytes().decode()
    data = json.loads(payload)
    if data.get("status") != "ok":
        raise HistoryError(data.get("message", f"no league history in {run_dir}"))
    with open(path, "w", encoding="utf-8") as f:
        f.write(page_html(payload))
    return path


class _Handler(BaseHTTPRequestHandler):
    server_version = "LeagueDashboard"
    data: DashboardData  # set on the subclass made by `serve`
    watcher: Watcher     # likewise
    files: dict[str, tuple[bytes, str, str, str]] = {}  # URL path -> (body, content type, Cache-Control, ETag)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = urlparse(self.path).path
        path = "/index.html" if path == "/" else path
        if path == "/data.json":
            status, etag, body = self.data.response(self.headers.get("If-None-Match"))
            self._send(status, body, "application/json", "no-cache" if etag else "no-store", etag)
        elif path == "/watch.json":
            status, answer = self.watcher.request(parse_qs(urlparse(self.path).query))
            self._send(status, json.dumps(answer, separators=(",", ":")).encode(), "application/json", "no-store")
        elif path in self.files:
            body, content_type, cache, etag = self.files[path]
            if etag_matches(self.headers.get("If-None-Match"), etag):
                self._send(304, b"", content_type, cache, etag)
            else:
                self._send(200, body, content_type, cache, etag)
        else:
            self._send(404, b"not found", "text/plain", "no-store")

    def _send(self, code: int, body: bytes, content_type: str, cache: str, etag: str | None = None) -> None:
        try:
            self.send_response(code)
            if etag:
                self.send_header("ETag", etag)
            self.send_header("Cache-Control", cache)
            if code != 304:  # a 304 has no body and no content headers
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if code != 304:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away mid-response

    def log_message(self, format, *args) -> None:  # quiet: the league owns the terminal
        pass


def serve(run_dir: str, port: int, host: str = "127.0.0.1",
          watch=None) -> tuple[ThreadingHTTPServer, str]:
    """Serves the dashboard of `run_dir` on a daemon thread; returns (server, url) at once.

    The history is opened per request, read-only, so this may start before the league
    has written `league.db` (the page then says it is waiting). `port=0` picks a free
    port. `watch`: the function that plays a watched game (`experiments.watch.watch`;
    dashboard/watch.py); None: the watch page says this server plays no games. Stop with
    `server.shutdown(); server.server_close()`.
    """
    files = {}
    for url_path, (name, content_type, cache) in PAGE_FILES.items():
        body = (_static(name) if name else plotly_js()).encode()
        files[url_path] = (body, content_type, cache, '"' + hashlib.sha256(body).hexdigest()[:20] + '"')
    handler = type("DashboardHandler", (_Handler,), {"data": DashboardData(run_dir), "files": files,
                                                     "watcher": Watcher(run_dir, watch)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="dashboard", daemon=True)
    thread.start()
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return server, f"http://{shown}:{server.server_address[1]}/"


def main(argv: list[str] | None = None, watch=None) -> int:
    """The command (`experiments/dashboard.py`); `watch` as `serve`'s."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m experiments.dashboard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_dir", required=True, help="the league run's directory (holds league.db)")
    parser.add_argument("--port", type=int, default=8050, help="port to serve on (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--export", default=None, metavar="REPORT.html",
                        help="write one self-contained HTML file and exit instead of serving")
    args = parser.parse_args(argv)
    try:
        DashboardReader(args.run_dir).close()
        if args.export:
            path = export(args.run_dir, args.export)
            print(f"dashboard written to {os.path.abspath(path)}")
            return 0
        server, url = serve(args.run_dir, args.port, args.host, watch)
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
