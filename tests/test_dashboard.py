"""The dashboard end to end: a real league run, the real server, a real headless Chromium.

The league is the matrix league (a few seconds), its history the coordinator's SQLite;
the browser is Debian's `chromium` (`apt-get install -y chromium`), driven over the
DevTools protocol. Every number checked against the page is computed here from SQL,
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
import urllib.request

import pytest

from coordinator.history import LeagueHistory
from experiments.dashboard import serve
from experiments.dashboard_browser import BrowserMissing, Chromium, find_chromium

CHARTS = ("chart-payoff", "chart-nash-now", "chart-nash-time", "chart-elo", "chart-trueskill",
          "chart-composition", "chart-events")
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
    history.close()
    return path


@pytest.fixture(scope="module")
def browser():
    try:
        find_chromium()
    except BrowserMissing as e:
        pytest.fail(str(e))  # the browser tests are part of CI: a missing browser is a failure
    with Chromium(width=1400, height=1000) as chromium:
        yield chromium


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


def load(browser, url):
    browser.blank()
    browser.navigate(url)
    browser.wait_for("window.dashboardRendered === true", timeout=30)


def text(browser, element_id):
    return browser.evaluate(f"document.getElementById({element_id!r}).textContent")


def test_page_draws_every_chart_without_console_errors(browser, dashboard):
    load(browser, dashboard)
    for chart in CHARTS:
        drawn = browser.evaluate(
            f"(() => {{ const gd = document.getElementById({chart!r});"
            " return !!gd.querySelector('.main-svg') && Array.isArray(gd.data) && gd.data.length > 0; })()"
        )
        assert drawn, f"{chart} is not drawn"
    learner_charts = browser.evaluate("[...document.querySelectorAll('.learner-chart')].map((d) => d.id + ':' + d.data.length)")
    assert sorted(learner_charts) == sorted(f"chart-learner-{name}:2" for name in LEARNER_METRICS)
    assert browser.evaluate("document.querySelectorAll('.main-svg').length") > len(CHARTS)
    assert "live" in text(browser, "status")
    assert browser.console_errors == []


def test_headline_numbers_equal_the_database(browser, dashboard, run_dir):
    load(browser, dashboard)
    (games,), = sql(run_dir, "SELECT count(*) FROM games")
    (players,), = sql(run_dir, "SELECT count(*) FROM players")
    (snapshots,), = sql(run_dir, "SELECT count(*) FROM events WHERE kind = 'snapshot'")
    assert games > 0 and int(text(browser, "games-played").replace(",", "")) == games
    assert int(text(browser, "players")) == players
    assert int(text(browser, "snapshots")) == snapshots
    # The Nash distribution now: the latest time's rows.
    (latest,), = sql(run_dir, "SELECT max(time) FROM nash")
    rows = sql(run_dir, "SELECT player_id, weight FROM nash WHERE time = ?", (latest,))
    top_weight = max(w for _, w in rows)
    assert text(browser, "top-nash-weight") == f"{top_weight:.3f}"
    shown = float(browser.evaluate("document.getElementById('top-nash-weight').dataset.value"))
    assert shown == pytest.approx(top_weight, abs=1e-6)
    assert text(browser, "top-nash-player") in {p for p, w in rows if w == top_weight}
    assert browser.console_errors == []


def test_payoff_hover_shows_the_win_rate_and_results_of_the_database(browser, dashboard, run_dir):
    load(browser, dashboard)
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
    position = browser.evaluate(f"""(() => {{
        const gd = document.getElementById('chart-payoff'), ids = gd.data[0].customdata.map((r) => r[0][4]);
        const row = ids.indexOf({a!r}), col = gd.data[0].customdata[0].map((c) => c[5]).indexOf({b!r});
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
        return {{row, col, z: gd.data[0].z[row][col],
                 x: box.left + xa._offset + xa.l2p(col), y: box.top + ya._offset + ya.l2p(row)}};
    }})()""")
    assert position["row"] >= 0 and position["col"] >= 0
    assert position["z"] == pytest.approx(rate, abs=1e-12)
    browser.hover(position["x"], position["y"])
    hover = browser.wait_for(
        "(() => { const t = document.querySelector('#chart-payoff .hoverlayer .hovertext'); return t && t.textContent; })()",
        timeout=5,
    )
    assert f"{a} vs {b}" in hover
    assert f"win rate {rate:.3f}" in hover
    assert f"games {played}: W {wins} / D {draws} / L {losses}" in hover
    assert browser.console_errors == []


def test_race_filter_and_decayed_payoff_redraw(browser, dashboard):
    load(browser, dashboard)
    options = browser.evaluate("[...document.getElementById('race-filter').options].map((o) => o.value)")
    assert options == ["all", "any|any"]  # the matrix league has one race
    size = browser.evaluate("""(() => {
        const f = document.getElementById('race-filter'); f.value = 'any|any'; f.dispatchEvent(new Event('change'));
        const s = document.getElementById('payoff-source'); s.value = 'decayed'; s.dispatchEvent(new Event('change'));
        const gd = document.getElementById('chart-payoff');
        return [gd.data[0].z.length, gd.data[0].z.flat().filter((v) => v !== null).length];
    })()""")
    n = len(browser.evaluate("current.players.id"))
    assert size[0] == n and size[1] > 0
    assert browser.console_errors == []


def test_waits_for_the_league_then_draws_it_live(browser, run_dir, tmp_path):
    empty = tmp_path / "not_started"
    empty.mkdir()
    server, url = serve(str(empty), 0)  # before the league has written league.db
    try:
        browser.blank()
        browser.navigate(url + "?refresh=0.3")
        browser.wait_for("document.getElementById('status').textContent.includes('waiting for the league to start')")
        assert browser.evaluate("window.dashboardRendered") is False
        shutil.copy(os.path.join(run_dir, "league.db"), empty / "league.db")
        browser.wait_for("window.dashboardRendered === true", timeout=20)
        (games,), = sql(run_dir, "SELECT count(*) FROM games")
        assert int(text(browser, "games-played").replace(",", "")) == games
        assert browser.console_errors == []
    finally:
        server.shutdown()
        server.server_close()


def test_export_is_one_offline_file_with_the_data(browser, run_dir, tmp_path):
    report = tmp_path / "report.html"
    done = run_module("experiments.dashboard", f"--run_dir={run_dir}", f"--export={report}")
    assert done.returncode == 0, done.stderr
    html = report.read_text()
    (games,), = sql(run_dir, "SELECT count(*) FROM games")
    data = json.loads(html.split('<script id="dashboard-data" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert data["headline"]["games"] == games
    assert "any_main_agent_0" in html
    # No element loads anything from elsewhere (plotly.js is inline) ...
    assert re.findall(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?!data:)[^\"' >]+", html) == []
    assert html.count("<script") == 3  # plotly.js, the data, the page's script
    browser.blank()
    browser.navigate(report.as_uri())
    browser.wait_for("window.dashboardRendered === true", timeout=30)
    assert int(text(browser, "games-played").replace(",", "")) == games
    # ... and the browser asked for nothing but the file itself.
    assert [u for u in browser.requests if not u.startswith(("file:", "data:"))] == []
    assert browser.console_errors == []


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
