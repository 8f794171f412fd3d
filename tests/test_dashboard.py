"""The dashboard end to end: a real league run, the real server, a real headless Chromium.

The league is the matrix league (a few seconds), its history the coordinator's SQLite;
the browser is Debian's `chromium` (`apt-get install -y chromium`), driven by Playwright
(tests/browser.py). Every number checked against the page is computed here from SQL,
not with the dashboard's code.
"""

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib

import numpy as np
import pytest

from coordinator.history import LeagueHistory
from dashboard.server import DashboardData, league_notices, serve
from tests.browser import BrowserMissing, Tab, chromium, find_chromium

# The system tier (docs/testing.md): the dashboard in a real browser.
pytestmark = pytest.mark.system

CHARTS = ("chart-payoff", "chart-nash-now", "chart-nash-time", "chart-exploitability", "chart-elo",
          "chart-trueskill", "chart-composition", "chart-events")
LEARNER_METRICS = {"updates_per_s": 8.5, "frames_per_s": 8800.0, "loss": 0.7, "entropy": 1.1, "kl": 0.02,
                   "staleness": 1.5, "sample_reuse": 2.0}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_module(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A short real league run, plus a few learner metrics rows (the matrix league has no learners)."""
    path = str(tmp_path_factory.mktemp("league_run"))
    done = run_module("experiments.matrix_league", "--game=rps", "--iterations=60", "--compare_seeds=0", f"--run_dir={path}")
    assert done.returncode == 0, done.stderr[-3000:]
    history = LeagueHistory(path)
    start = time.time()
    for k in range(5):
        for agent in ("any_main_agent_0", "any_main_exploiter_0"):
            history.add_learner_metrics(agent, {name: value * (1 + 0.1 * k) for name, value in LEARNER_METRICS.items()},
                                        when=start + k)
        history.add_exploitability({"nash": 0.5 / (k + 1), "nash_average": 0.4 / (k + 1),
                                    "any_main_agent_0": 0.9 - 0.1 * k}, when=start + k)
    history.add_exploiter_gaps(GAPS, when=start + 2)
    history.close()
    return path


# Exploiter snapshots' gaps to a best response (poker), written into the run above.
GAPS = [{"player_id": f"any_{role}_0#{k}", "parent": f"any_{role}_0", "role": role, "target": target,
         "br_value": 0.4, "exploiter_value": 0.4 - gap, "gap": gap}
        for k, (role, target, gap) in enumerate((("main_exploiter", "any_main_agent_0", 0.3),
                                                 ("league_exploiter", "nash", 0.2),
                                                 ("main_exploiter", "any_main_agent_0", 0.1)))]


@pytest.fixture(scope="module")
def browser():
    try:
        find_chromium()
    except BrowserMissing as e:
        pytest.fail(str(e))  # the browser tests are part of CI: a missing browser is a failure
    with chromium() as b:
        yield b


@pytest.fixture
def tab(browser):
    with Tab(browser, width=1400, height=1000) as t:
        yield t


@pytest.fixture(scope="module")
def dashboard(run_dir):
    server, url = serve(run_dir, 0)
    yield url
    server.shutdown()
    server.server_close()


def sql(run_dir, query, args=()):
    db = sqlite3.connect(f"file:{os.path.join(run_dir, 'league.db')}?mode=ro", uri=True)
    try:
        return db.execute(query, args).fetchall()
    finally:
        db.close()


def get(url, headers=None):
    """(status, headers, body) of a GET; a 304 is an answer, not an error."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_page_draws_every_chart_without_console_errors(tab, dashboard):
    tab.load(dashboard)
    for chart in CHARTS:
        drawn = tab.page.evaluate(
            f"(() => {{ const gd = document.getElementById({chart!r});"
            " return !!gd.querySelector('.main-svg') && Array.isArray(gd.data) && gd.data.length > 0; })()"
        )
        assert drawn, f"{chart} is not drawn"
    learner_charts = tab.page.evaluate("[...document.querySelectorAll('.learner-chart')].map((d) => d.id + ':' + d.data.length)")
    assert sorted(learner_charts) == sorted(f"chart-learner-{name}:2" for name in LEARNER_METRICS)
    assert tab.page.evaluate("document.querySelectorAll('.main-svg').length") > len(CHARTS)
    shown = tab.page.evaluate("Object.fromEntries(document.getElementById('chart-exploitability').data"
                              ".map((t) => [t.name, t.y]))")
    assert shown == {"Nash mixture (latest)": [0.5 / (k + 1) for k in range(5)],
                     "average Nash mixture": [0.4 / (k + 1) for k in range(5)],
                     "any_main_agent_0": [0.9 - 0.1 * k for k in range(5)]}
    assert tab.page.evaluate("getComputedStyle(document.getElementById('exploitability-card')).display") != "none"
    assert "live" in tab.text("status")
    # The page is the static files: style sheet applied, each file fetched once.
    assert tab.page.evaluate("getComputedStyle(document.querySelector('header')).display") == "flex"
    asked = [u.removeprefix(dashboard) for u in tab.requests]
    assert sorted(a for a in asked if a != "data.json") == ["", "dashboard.css", "dashboard.js", "plotly.min.js"]
    assert "data.json" in asked
    assert tab.console_errors == []


def test_exploiter_gaps_chart_shows_league_dbs_rows_and_is_hidden_without_them(tab, dashboard, run_dir, tmp_path):
    tab.load(dashboard)
    assert tab.page.evaluate("getComputedStyle(document.getElementById('exploiter-gaps-card')).display") != "none"
    shown = tab.page.evaluate("Object.fromEntries(document.getElementById('chart-exploiter-gaps').data"
                              ".map((t) => [t.name, t.y]))")
    assert shown == {"main exploiters (target: the main agent)": [g for _, g in sql(
                         run_dir, "SELECT id, gap FROM exploiter_gaps WHERE role = 'main_exploiter' ORDER BY id")],
                     "league exploiters (target: the Nash mixture)": [0.2]}
    assert tab.console_errors == []
    # The same run without gap rows (a non-poker run, or before the first exploiter snapshot).
    shutil.copy(os.path.join(run_dir, "league.db"), tmp_path / "league.db")
    db = sqlite3.connect(tmp_path / "league.db")
    db.execute("DELETE FROM exploiter_gaps")
    db.commit()
    db.close()
    server, url = serve(str(tmp_path), 0)
    try:
        tab.load(url)
        assert tab.page.evaluate("getComputedStyle(document.getElementById('exploiter-gaps-card')).display") == "none"
        assert tab.page.evaluate("(document.getElementById('chart-exploiter-gaps').data || []).length") == 0
        assert tab.console_errors == []
    finally:
        server.shutdown()
        server.server_close()


def test_data_json_has_the_exploiter_gaps_by_role(run_dir, tmp_path):
    data = DashboardData(run_dir).data()["exploiter_gaps"]
    times = [t for (t,) in sql(run_dir, "SELECT time FROM exploiter_gaps ORDER BY id")]
    assert data == {
        "main_exploiter": {"time": [times[0], times[2]], "gap": [0.3, 0.1],
                           "player": ["any_main_exploiter_0#0", "any_main_exploiter_0#2"],
                           "target": ["any_main_agent_0"] * 2, "br_value": [0.4, 0.4],
                           "exploiter_value": [0.4 - 0.3, 0.4 - 0.1]},
        "league_exploiter": {"time": [times[1]], "gap": [0.2], "player": ["any_league_exploiter_0#1"],
                             "target": ["nash"], "br_value": [0.4], "exploiter_value": [0.4 - 0.2]},
    }
    # A league.db from before the table (or a run without exploiter gaps): no entry to draw.
    shutil.copy(os.path.join(run_dir, "league.db"), tmp_path / "league.db")
    db = sqlite3.connect(tmp_path / "league.db")
    db.execute("DROP TABLE exploiter_gaps")
    db.commit()
    db.close()
    assert DashboardData(str(tmp_path)).data()["exploiter_gaps"] == {}


def test_headline_numbers_equal_the_database(tab, dashboard, run_dir):
    tab.load(dashboard)
    (games,), = sql(run_dir, "SELECT count(*) FROM games")
    (players,), = sql(run_dir, "SELECT count(*) FROM players")
    (learning,), = sql(run_dir, "SELECT count(*) FROM players WHERE role != 'historical'")
    (snapshots,), = sql(run_dir, "SELECT count(*) FROM events WHERE kind = 'snapshot'")
    (resets,), = sql(run_dir, "SELECT count(*) FROM events WHERE kind = 'reset'")
    assert games > 0 and int(tab.text("games-played").replace(",", "")) == games
    assert int(tab.text("players")) == players
    assert int(tab.text("learning-agents")) == learning
    assert int(tab.text("snapshots")) == snapshots
    assert int(tab.text("resets")) == resets
    # The Nash distribution now: the latest time's rows.
    (latest,), = sql(run_dir, "SELECT max(time) FROM nash")
    rows = sql(run_dir, "SELECT player_id, weight FROM nash WHERE time = ?", (latest,))
    top_weight = max(w for _, w in rows)
    assert tab.text("top-nash-weight") == f"{top_weight:.3f}"
    shown = float(tab.page.evaluate("document.getElementById('top-nash-weight').dataset.value"))
    assert shown == pytest.approx(top_weight, abs=1e-6)
    assert tab.text("top-nash-player") in {p for p, w in rows if w == top_weight}
    assert tab.console_errors == []


def test_payoff_hover_shows_the_win_rate_and_results_of_the_database(tab, dashboard, run_dir):
    tab.load(dashboard)
    # The pair of distinct players with the most games, counted in both seatings.
    rows = sql(run_dir, """
        SELECT home, away, sum(outcome = 'win'), sum(outcome = 'draw'), sum(outcome = 'loss') FROM games
        WHERE home != away GROUP BY home, away""")
    results = {}
    for home, away, home_wins, draws, home_losses in rows:
        # Keyed by the pair in name order, counted from the first name's side.
        a, b, won, lost = (home, away, home_wins, home_losses) if home < away else (away, home, home_losses, home_wins)
        tally = results.setdefault((a, b), [0, 0, 0])
        tally[0] += won
        tally[1] += draws
        tally[2] += lost
    (a, b), (wins, draws, losses) = max(results.items(), key=lambda kv: sum(kv[1]))
    played = wins + draws + losses
    rate = (wins + draws / 2) / played
    position = tab.page.evaluate(f"""(() => {{
        const gd = document.getElementById('chart-payoff'), ids = gd.data[0].customdata.map((r) => r[0][4]);
        const row = ids.indexOf({a!r}), col = gd.data[0].customdata[0].map((c) => c[5]).indexOf({b!r});
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
        return {{row, col, z: gd.data[0].z[row][col],
                 x: box.left + xa._offset + xa.l2p(col), y: box.top + ya._offset + ya.l2p(row)}};
    }})()""")
    assert position["row"] >= 0 and position["col"] >= 0
    assert position["z"] == pytest.approx(rate, abs=1e-12)
    tab.page.mouse.move(position["x"], position["y"])
    hover = tab.wait_for(
        "(() => { const t = document.querySelector('#chart-payoff .hoverlayer .hovertext'); return t && t.textContent; })()",
        timeout_s=5,
    )
    assert f"{a} vs {b}" in hover
    assert f"win rate {rate:.3f}" in hover
    assert f"games {played}: W {wins} / D {draws} / L {losses}" in hover
    assert tab.console_errors == []


def test_filters_and_decayed_payoff_redraw_with_the_leagues_own_win_rates(tab, dashboard, run_dir):
    tab.load(dashboard)
    options = tab.page.evaluate("[...document.getElementById('race-filter').options].map((o) => o.value)")
    assert options == ["all", "any|any"]  # the matrix league has one race
    ids = tab.page.evaluate("current.players.id")
    roles = dict(sql(run_dir, "SELECT player_id, role FROM players"))
    tab.page.select_option("#race-filter", "any|any")
    tab.page.select_option("#payoff-source", "decayed")

    def matrix():
        return tab.page.evaluate("""(() => {
            const t = document.getElementById('chart-payoff').data[0];
            return {rows: t.customdata.map((r) => r[0][4]), cols: t.customdata[0].map((c) => c[5]), z: t.z};
        })()""")

    shown = matrix()
    assert shown["rows"] == ids and shown["cols"] == ids
    # The league's decayed payoff, from the latest snapshot's raw blobs: (w + d/2) / games,
    # blank where never played; the page has it to 1/65534.
    (players, wins_blob, draws_blob), = sql(run_dir, "SELECT players, wins, draws FROM payoff_snapshots ORDER BY id DESC LIMIT 1")
    snapshot = json.loads(players)
    m = len(snapshot)
    w = np.frombuffer(zlib.decompress(wins_blob), np.float32).reshape(m, m).astype(np.float64)
    d = np.frombuffer(zlib.decompress(draws_blob), np.float32).reshape(m, m).astype(np.float64)
    position = {p: k for k, p in enumerate(snapshot)}
    checked = 0
    for r, row in enumerate(shown["rows"]):
        for c, col in enumerate(shown["cols"]):
            i, j = position.get(row), position.get(col)
            games = 0.0 if i is None or j is None else w[i, j] + w[j, i] + d[i, j]
            if games == 0:
                assert shown["z"][r][c] is None, (row, col)
            else:
                assert shown["z"][r][c] == pytest.approx((w[i, j] + d[i, j] / 2) / games, abs=1 / 65534), (row, col)
                checked += 1
    assert checked > 0
    # Rows: learning agents only; columns stay every player.
    tab.page.select_option("#payoff-rows", "learning")
    shown = matrix()
    assert shown["rows"] == [p for p in ids if roles[p] != "historical"] and shown["cols"] == ids
    assert tab.console_errors == []


def test_waits_for_the_league_then_draws_it_live_asking_with_its_etag(tab, run_dir, tmp_path):
    empty = tmp_path / "not_started"
    empty.mkdir()
    server, url = serve(str(empty), 0)  # before the league has written league.db
    try:
        tab.page.goto(url + "?refresh=0.3")
        tab.wait_for("document.getElementById('status').textContent.includes('waiting for the league to start')")
        assert tab.page.evaluate("window.dashboardRendered") is False
        shutil.copy(os.path.join(run_dir, "league.db"), empty / "league.db")
        tab.wait_for("window.dashboardRendered === true", timeout_s=20)
        (games,), = sql(run_dir, "SELECT count(*) FROM games")
        assert int(tab.text("games-played").replace(",", "")) == games
        # Unchanged history: the page asks with If-None-Match and gets 304 Not Modified.
        tab.wait_for("document.getElementById('status').textContent.includes('no new data')", timeout_s=10)
        data = [status for u, status in tab.responses if u.startswith(url + "data.json")]
        assert 200 in data and 304 in data and set(data) <= {200, 304}
        # The league plays on: the next answer is 200 with the new data, drawn.
        history = LeagueHistory(str(empty))
        history.add_games([{"home": "any_main_agent_0", "away": "any_main_exploiter_0", "outcome": "win"}] * 3)
        history.close()
        tab.wait_for(f"document.getElementById('games-played').dataset.value === '{games + 3}'", timeout_s=10)
        assert tab.console_errors == []
    finally:
        server.shutdown()
        server.server_close()


def test_data_answers_304_to_its_etag_and_200_with_a_new_etag_after_the_db_changes(run_dir, tmp_path):
    shutil.copy(os.path.join(run_dir, "league.db"), tmp_path / "league.db")
    server, url = serve(str(tmp_path), 0)
    try:
        status, headers, body = get(url + "data.json")
        etag = headers["ETag"]
        assert status == 200 and re.fullmatch(r'"[0-9a-f]{8}(-[0-9]+){8}"', etag) and headers["Cache-Control"] == "no-cache"
        data = json.loads(body)
        (games,), = sql(str(tmp_path), "SELECT count(*) FROM games")
        assert data["status"] == "ok" and data["headline"]["games"] == games
        # A matching If-None-Match (alone, in a list, weak or "*"): 304, no body.
        for tags in (etag, f'"x", {etag}', f"W/{etag}", "*"):
            status, headers, body = get(url + "data.json", {"If-None-Match": tags})
            assert (status, headers["ETag"], body) == (304, etag, b""), tags
        # Unchanged, asked for without a tag: the same bytes, not rebuilt.
        assert get(url + "data.json")[2] == get(url + "data.json")[2]
        assert json.loads(get(url + "data.json")[2])["generated"] == data["generated"]
        # The db changes: 200, a new ETag, the new data; the new ETag then gets 304.
        history = LeagueHistory(str(tmp_path))
        history.add_games([{"home": "any_main_agent_0", "away": "any_main_exploiter_0", "outcome": "draw"}])
        history.close()
        status, headers, body = get(url + "data.json", {"If-None-Match": etag})
        assert status == 200 and headers["ETag"] != etag
        assert json.loads(body)["headline"]["games"] == games + 1
        assert get(url + "data.json", {"If-None-Match": headers["ETag"]})[0] == 304
        # The page's files have ETags too.
        for path in ("", "dashboard.js", "dashboard.css", "plotly.min.js"):
            status, headers, body = get(url + path)
            assert status == 200 and body and headers["ETag"], path
            assert get(url + path, {"If-None-Match": headers["ETag"]})[:1] == (304,), path
        assert get(url + "nothing.js")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_data_while_waiting_has_no_etag(tmp_path):
    server, url = serve(str(tmp_path), 0)
    try:
        status, headers, body = get(url + "data.json", {"If-None-Match": "*"})
        assert status == 200 and headers["ETag"] is None and headers["Cache-Control"] == "no-store"
        assert json.loads(body)["status"] == "waiting"
    finally:
        server.shutdown()
        server.server_close()


def test_export_is_one_offline_file_with_the_data(tab, run_dir, tmp_path):
    report = tmp_path / "report.html"
    done = run_module("experiments.dashboard", f"--run_dir={run_dir}", f"--export={report}")
    assert done.returncode == 0, done.stderr
    html = report.read_text()
    (games,), = sql(run_dir, "SELECT count(*) FROM games")
    data = json.loads(html.split('<script id="dashboard-data" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert data["headline"]["games"] == games
    assert "any_main_agent_0" in html
    # No element loads anything from elsewhere (style sheet, scripts and plotly.js are inline) ...
    assert re.findall(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?!data:)[^\"' >]+", html) == []
    assert html.count("<script") == 3  # the data, the page's script, plotly.js
    assert html.count("<style>") == 1
    tab.page.goto(report.as_uri())
    tab.wait_for("window.dashboardRendered === true", timeout_s=30)
    assert int(tab.text("games-played").replace(",", "")) == games
    assert "report exported" in tab.text("status")
    for chart in CHARTS:
        assert tab.page.evaluate(f"document.getElementById({chart!r}).data.length > 0"), chart
    # ... and the browser asked for nothing but the file itself.
    assert [u for u in tab.requests if not u.startswith(("file:", "data:"))] == []
    assert tab.console_errors == []


def test_cli_rejects_a_run_dir_without_history(tmp_path):
    for bad in (tmp_path / "missing", tmp_path):
        done = run_module("experiments.dashboard", f"--run_dir={bad}")
        assert done.returncode != 0
        assert "no league history" in done.stderr and str(bad) in done.stderr
        assert "Traceback" not in done.stderr


def test_cli_serves_and_prints_the_url(run_dir):
    proc = subprocess.Popen([sys.executable, "-m", "experiments.dashboard", f"--run_dir={run_dir}", "--port=0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = line.split(" at ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "data.json", timeout=30) as response:
            assert json.load(response)["status"] == "ok"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert b'id="chart-payoff"' in response.read()
    finally:
        proc.terminate()
        proc.wait(10)


def test_history_readers_of_the_dashboard_equal_sql(run_dir, tmp_path):
    shutil.copy(os.path.join(run_dir, "league.db"), tmp_path / "league.db")
    history = LeagueHistory(str(tmp_path), readonly=True)
    try:
        games = sql(str(tmp_path), "SELECT id, home, away, outcome FROM games ORDER BY id")
        homes, aways, outcomes = history.game_columns(3, 10)
        assert list(zip(homes, aways, outcomes)) == [g[1:] for g in games if 3 < g[0] <= 10]
        assert history.game_columns(games[-1][0]) == ([], [], [])
        times = sql(str(tmp_path), "SELECT DISTINCT time FROM nash ORDER BY time")
        assert history.nash_times() == [t for (t,) in times]
        picked = [times[0][0], times[-1][0]]
        assert history.nash_at(picked) == sql(str(tmp_path), "SELECT time, player_id, weight FROM nash"
                                              " WHERE time IN (?, ?) ORDER BY time, id", tuple(picked))
        times = [t for (t,) in sql(str(tmp_path), "SELECT DISTINCT time FROM ratings ORDER BY time")]
        assert history.rating_times() == times and history.rating_count() == sql(str(tmp_path), "SELECT count(*) FROM ratings")[0][0]
        assert history.ratings_at(times[-1:]) == sql(str(tmp_path), "SELECT time, player_id, elo, trueskill_mu,"
                                                     " trueskill_sigma FROM ratings WHERE time = ? ORDER BY id", (times[-1],))
        # Learner metrics: 5 times per learner; in 300 buckets each time is its own bucket.
        means = history.learner_metric_means(300)
        assert len(means) == 5 * 2 * len(LEARNER_METRICS)
        loss = [(agent, v) for name, agent, _, v in means if name == "loss"]
        assert loss == [(agent, pytest.approx(0.7 * (1 + 0.1 * k))) for agent in ("any_main_agent_0", "any_main_exploiter_0")
                        for k in range(5)]
        # One bucket: the mean over all times.
        one = {(name, agent): v for name, agent, _, v in history.learner_metric_means(1)}
        assert one["loss", "any_main_agent_0"] == pytest.approx(0.7 * 1.2)
        # A snapshot does not see rows written meanwhile; data_version does after it.
        version = history.data_version()
        with history.snapshot():
            writer = LeagueHistory(str(tmp_path))
            writer.add_games([{"home": "any_main_agent_0", "away": "any_main_agent_0", "outcome": "loss"}])
            writer.close()
            assert history.data_version() == version
        assert history.data_version()[1] == version[1] + 1
        assert history.last_activity_time() == max(
            sql(str(tmp_path), "SELECT max(time) FROM games")[0][0], sql(str(tmp_path), "SELECT max(time) FROM events")[0][0] or 0,
            sql(str(tmp_path), "SELECT max(time) FROM learner_metrics")[0][0], sql(str(tmp_path), "SELECT max(time) FROM payoff_snapshots")[0][0])
    finally:
        history.close()
    with pytest.raises(ValueError, match="read-only"):
        with LeagueHistory(str(tmp_path)).snapshot():
            pass


# -- the page's layout with one measurement and with many (issue 31, item 9) -----------------
# A three-race league of every role with their snapshots, one measurement a minute of everything
# (Nash, ratings, the heuristic curve, learner metrics); a screenshot of each under tmp_path.
RACES = ("terran", "protoss", "zerg")
ROLES = ("main_agent", "main_exploiter", "league_exploiter")
START = 1_760_000_000.0
FRACTIONAL_SECONDS = re.compile(r"\d:\d\d\.\d")  # a time tick such as 08:53:19.9995


def write_layout_league(path: str, measurements: int) -> None:
    history = LeagueHistory(path)
    learning = [f"{race}_{role}_0" for race in RACES for role in ROLES]
    for race in RACES:
        for role in ROLES:
            history.add_player(f"{race}_{role}_0", role, race, None, 0, START)
    snapshots = []
    for k in range(measurements):
        when = START + 60.0 * k
        for race in RACES:
            for role in ROLES:
                agent, snapshot = f"{race}_{role}_0", f"{race}_{role}_0_v{k}"
                history.add_player(snapshot, "historical", race, agent, 100 * k, when)
                history.add_event("snapshot", agent, snapshot, 100 * k, "steps", when=when)
                snapshots.append(snapshot)
        players = learning + snapshots
        weights = np.random.default_rng(k).random(len(players))
        history.add_nash(dict(zip(players, weights / weights.sum())), when=when)
        history.add_ratings({p: (1000.0 + 10 * i + k, 25.0 + 0.1 * i, 3.0) for i, p in enumerate(players)}, when=when)
        history.add_heuristic([
            {"player_id": f"{race}_main_agent_0", "version": k, "race": race, "opponent_race": opponent,
             "win_rate": (k + i) % 9 / 8, "games": 8, "wins": (k + i) % 9, "draws": 0, "losses": 8 - (k + i) % 9}
            for i, (race, opponent) in enumerate((r, o) for r in RACES for o in RACES)], when=when)
        for agent in learning:
            history.add_learner_metrics(agent, {"loss": 1.0 / (k + 1), "entropy": 1.1}, when=when)
    history.add_games([{"home": learning[i % 9], "away": (learning + snapshots)[(7 * i) % (9 + len(snapshots))],
                        "outcome": ("win", "draw", "loss")[i % 3], "time": START + i} for i in range(100)])
    history.close()


LAYOUT_JS = """(() => {
    const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    const charts = {};
    for (const gd of document.querySelectorAll('.js-plotly-plot')) {
        if (!gd.offsetParent) continue;  // a hidden card
        const modebar = gd.querySelector('.modebar');
        const xaxis = gd._fullLayout.xaxis;
        charts[gd.id] = {
            modebar: modebar ? box(modebar) : null,
            labels: [...gd.querySelectorAll('.legend, .gtitle, .cbtitle, .annotation')]
                .map((e) => [e.getAttribute('class'), e.textContent, box(e)]),
            time_ticks: xaxis && xaxis.type === 'date' ? [...gd.querySelectorAll('.xtick text')].map((t) => t.textContent) : null,
        };
    }
    const texts = (selector) => [...document.querySelectorAll(selector)]
        .filter((t) => t.textContent && getComputedStyle(t).display !== 'none').map((t) => [t.textContent, box(t)]);
    return {charts, composition: {ticks: texts('#chart-composition .xtick text, #chart-composition .ytick text'),
                                  bars: texts('#chart-composition text.bartext')}};
})()"""


def overlap(a, b, slack=0.5):
    """Whether boxes [left, top, right, bottom] share more than `slack` pixels each way."""
    return min(a[2], b[2]) - max(a[0], b[0]) > slack and min(a[3], b[3]) - max(a[1], b[1]) > slack


@pytest.fixture(scope="module", params=[1, 12], ids=["one_measurement", "many_measurements"])
def layout(request, browser, tmp_path_factory):
    """The page's geometry with one measurement and with many; its screenshot in tmp_path."""
    path = tmp_path_factory.mktemp(f"layout_{request.param}")
    write_layout_league(str(path), request.param)
    server, url = serve(str(path), 0)
    try:
        with Tab(browser, width=1400, height=1000) as tab:
            tab.load(url)
            geometry = tab.page.evaluate(LAYOUT_JS)
            screenshot = path / f"dashboard_{request.param}_measurements.png"
            tab.page.screenshot(path=str(screenshot), full_page=True)
            assert tab.console_errors == []
    finally:
        server.shutdown()
        server.server_close()
    assert screenshot.stat().st_size > 0
    return geometry


def test_time_axes_read_in_whole_seconds(layout):
    time_charts = {chart: ticks for chart, ticks in layout["charts"].items() if ticks["time_ticks"] is not None}
    assert {"chart-heuristic", "chart-nash-time", "chart-elo", "chart-events"} <= set(time_charts)
    for chart, ticks in time_charts.items():
        labels = ticks["time_ticks"]
        assert len(labels) >= 2, (chart, labels)
        assert not [t for t in labels if FRACTIONAL_SECONDS.search(t)], (chart, labels)


def test_titles_legends_and_colour_bars_clear_the_plot_toolbar(layout):
    checked = 0
    for chart, parts in layout["charts"].items():
        assert parts["modebar"] is not None, chart
        for kind, text, box in parts["labels"]:
            assert not overlap(box, parts["modebar"]), (chart, kind, text, box, parts["modebar"])
            checked += 1
    assert checked >= 5  # legends, colour bar titles, learner chart titles


def test_composition_labels_do_not_overlap(layout):
    for kind in ("ticks", "bars"):
        labels = layout["composition"][kind]
        assert labels, kind
        for i, (text_a, a) in enumerate(labels):
            for text_b, b in labels[i + 1:]:
                assert not overlap(a, b), (kind, text_a, a, text_b, b)


# -- notices: withdrawn players and stalled learners (issue 31, items 2 and 3) ---------------------
DAMAGED = "zerg_main_agent_0_v1"
DAMAGE = f"cannot read runs/x/params/{DAMAGED}.npz: bad CRC-32 for file 'w.npy'"
STALL = "every update skipped as non-finite 20 times in a row"


def write_notice_league(path: str, recovered: bool) -> None:
    """Two learning agents and three snapshots of the first, one of them (DAMAGED) withdrawn;
    the main agent's learner stalls (and, if `recovered`, updates again later); the exploiter's
    learner stalls and stays stalled when `recovered` (so the list tells the two apart)."""
    history = LeagueHistory(path)
    agent, exploiter = "zerg_main_agent_0", "zerg_main_exploiter_0"
    history.add_player(agent, "main_agent", "zerg", None, 0, START)
    history.add_player(exploiter, "main_exploiter", "zerg", None, 0, START)
    snapshots = [f"{agent}_v{k}" for k in range(3)]
    for k, snapshot in enumerate(snapshots):
        history.add_player(snapshot, "historical", "zerg", agent, 100 * k, START + 60 * k)
        history.add_event("snapshot", agent, snapshot, 100 * k, "steps", when=START + 60 * k)
    players = [agent, exploiter, *snapshots]
    history.add_games([{"home": players[i % 2], "away": players[(3 * i) % 5], "outcome": ("win", "draw", "loss")[i % 3],
                        "time": START + i} for i in range(60)])
    history.add_nash({p: w for p, w in zip(players, (0.1, 0.2, 0.3, 0.25, 0.15))}, when=START + 120)
    history.add_ratings({p: (1000.0 + i, 25.0, 3.0) for i, p in enumerate(players)}, when=START + 120)
    history.add_event("withdrawn", agent, DAMAGED, 100, DAMAGE, when=START + 130)
    history.add_event("stalled", agent, None, 250, STALL, when=START + 140)
    if recovered:
        history.add_event("recovered", agent, None, 260, "updating again", when=START + 150)
        history.add_event("stalled", exploiter, None, 300, "no experience for 120 s", when=START + 160)
    history.close()


@pytest.fixture(params=[False, True], ids=["stalled", "recovered"])
def notice_league(request, tmp_path):
    write_notice_league(str(tmp_path), recovered=request.param)
    server, url = serve(str(tmp_path), 0)
    yield url, request.param
    server.shutdown()
    server.server_close()


NOTICES_JS = """(() => { const box = document.getElementById('notices');
    return {visible: !!box && getComputedStyle(box).display !== 'none' && box.getBoundingClientRect().height > 0,
            items: box ? [...box.querySelectorAll('li')].map((li) => [li.className, li.textContent]) : null}; })()"""


def test_notices_list_withdrawn_players_and_stalled_learners_and_the_charts_mark_them(tab, notice_league):
    url, recovered = notice_league
    tab.load(url)
    notices = tab.page.evaluate(NOTICES_JS)
    assert notices["visible"]
    withdrawn, stalled = notices["items"][0], notices["items"][1:]
    assert withdrawn == ["withdrawn", f"{DAMAGED} withdrawn from matchmaking: {DAMAGE}"]
    since = tab.page.evaluate(f"new Date({(START + (160 if recovered else 140)) * 1000}).toLocaleString('en-GB')")
    if recovered:  # the main agent updates again: only the exploiter is listed
        assert stalled == [["stalled", f"zerg_main_exploiter_0 stalled since {since}: no experience for 120 s"]]
    else:
        assert stalled == [["stalled", f"zerg_main_agent_0 stalled since {since}: {STALL}"]]
    # The withdrawn player is marked in the payoff matrix's labels and the Nash charts; no other is.
    marked = f"✕ {DAMAGED}"
    payoff = tab.page.evaluate("(() => { const l = document.getElementById('chart-payoff')._fullLayout;"
                               " return [l.xaxis.ticktext, l.yaxis.ticktext]; })()")
    for ticks in payoff:
        assert marked in ticks and DAMAGED not in ticks
        assert [t for t in ticks if t.startswith("✕")] == [marked]
    assert marked in tab.page.evaluate("[...document.querySelectorAll('#chart-payoff .xtick text, #chart-payoff .ytick text')]"
                                       ".map((t) => t.textContent)")
    assert marked in tab.page.evaluate("document.getElementById('chart-nash-now').data[0].y")
    assert marked in tab.page.evaluate("document.getElementById('chart-nash-time').data.map((t) => t.name)")
    # The events chart: withdrawals and stalls (and recoveries) as series of their own.
    series = dict(tab.page.evaluate("document.getElementById('chart-events').data.map((t) => [t.name, t.y])"))
    assert series["withdrawn players"] == ["zerg_main_agent_0"]
    assert series["learner stalled"] == (["zerg_main_agent_0", "zerg_main_exploiter_0"] if recovered else ["zerg_main_agent_0"])
    assert series.get("learner recovered") == (["zerg_main_agent_0"] if recovered else None)
    assert tab.console_errors == []


def test_no_notice_without_withdrawals_or_stalls_and_it_follows_the_league_live(tab, run_dir, tmp_path):
    shutil.copy(os.path.join(run_dir, "league.db"), tmp_path / "league.db")
    server, url = serve(str(tmp_path), 0)
    try:
        tab.page.goto(url + "?refresh=0.3")
        tab.wait_for("window.dashboardRendered === true", timeout_s=30)
        notices = tab.page.evaluate(NOTICES_JS)
        assert notices == {"visible": False, "items": []}
        assert not [t for t in tab.page.evaluate("document.getElementById('chart-payoff')._fullLayout.xaxis.ticktext")
                    if t.startswith("✕")]
        # A learner stalls: listed at the next refresh; it recovers: the notice goes away.
        history = LeagueHistory(str(tmp_path))
        history.add_event("stalled", "any_main_agent_0", None, 10, "no experience for 120 s")
        tab.wait_for("document.querySelectorAll('#notice-list li').length === 1", timeout_s=10)
        assert tab.page.evaluate(NOTICES_JS)["visible"]
        assert "any_main_agent_0 stalled since" in tab.text("notice-list")
        history.add_event("recovered", "any_main_agent_0", None, 20, "updating again")
        history.close()
        tab.wait_for("document.getElementById('notices').hidden === true", timeout_s=10)
        assert tab.page.evaluate(NOTICES_JS) == {"visible": False, "items": []}
        assert tab.console_errors == []
    finally:
        server.shutdown()
        server.server_close()


def test_data_json_notices_follow_the_events(tmp_path):
    write_notice_league(str(tmp_path), recovered=True)
    data = DashboardData(str(tmp_path)).data()
    assert data["notices"]["withdrawn"] == [{"player": DAMAGED, "agent": "zerg_main_agent_0", "step": 100,
                                             "time": START + 130, "reason": DAMAGE}]
    assert data["notices"]["stalled"] == [{"agent": "zerg_main_exploiter_0", "since": START + 160, "time": START + 160,
                                           "reason": "no experience for 120 s"}]
    assert dict(zip(data["players"]["id"], data["players"]["withdrawn"])) == {
        p: p == DAMAGED for p in data["players"]["id"]}
    # Stalled again after recovering, twice: stalled since the first of those, with the latest reason.
    events = [{"time": t, "kind": k, "agent_id": "a", "player_id": None, "step": 0, "reason": r} for t, k, r in (
        (1.0, "stalled", "x"), (2.0, "recovered", "ok"), (3.0, "stalled", "y"), (4.0, "stalled", "z"))]
    assert league_notices(events) == {"withdrawn": [], "stalled": [{"agent": "a", "since": 3.0, "time": 4.0, "reason": "z"}]}
    assert league_notices(events + [{**events[1], "time": 5.0}]) == {"withdrawn": [], "stalled": []}
