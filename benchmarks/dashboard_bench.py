"""Dashboard speed on a 1,000-player league: JSON build and the page's render in Chromium.

A synthetic history of a three-race league grown to 1,000 players is written through
`LeagueHistory`'s write methods (players, 500k games, snapshots and resets, payoff
snapshot, Nash and ratings at 200 times, learner metrics). Measured, cold (a new server
and cache each time, the browser already started):
- build: `DashboardData.json_bytes()` in Python;
- render: from navigating to the page until every chart is drawn in headless Chromium,
  driven by Playwright (tests/browser.py) (page load, plotly.js parse, data.json fetch and
  build, decode, all Plotly draws).
Target on this machine: render < 3 s.

    python -m benchmarks.dashboard_bench [--players=1000] [--repeats=3]

Last line: `RESULT dashboard render_1000_s=<x> ratio=<x/3> target=1.0`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from coordinator.history import LeagueHistory
from dashboard.server import DashboardData, serve
from league.players import HISTORICAL, LEAGUE_EXPLOITER, MAIN_AGENT, MAIN_EXPLOITER
from tests.browser import Tab, chromium

LIMIT_S = 3.0
RACES = ("terran", "protoss", "zerg")
LEARNER_METRICS = ("updates_per_s", "frames_per_s", "loss", "entropy", "kl", "staleness", "sample_reuse", "version")


def synthetic_history(run_dir: str, num_players: int = 1000, games: int = 500_000, publishes: int = 200,
                      metric_times: int = 1000, seed: int = 0) -> str:
    """Writes a league-like history of `num_players` players into run_dir/league.db."""
    rng = np.random.default_rng(seed)
    history = LeagueHistory(run_dir)
    t0 = time.time() - 10 * 3600.0
    span = 10 * 3600.0
    learners = [(f"{race}_{role}_{k}", role, race) for race in RACES
                for role, count in ((MAIN_AGENT, 1), (MAIN_EXPLOITER, 1), (LEAGUE_EXPLOITER, 2)) for k in range(count)]
    ids, created, parents = [], [], []
    for agent, role, race in learners:
        history.add_player(agent, role, race, None, 0, t0)
        ids.append(agent)
        created.append(t0)
        parents.append(None)
    snapshot_times = np.sort(rng.uniform(t0, t0 + span, num_players - len(learners)))
    counts = dict.fromkeys((a for a, _, _ in learners), 0)
    for when in snapshot_times:
        agent, role, race = learners[rng.choice(len(learners), p=_parent_weights(learners))]
        player = f"{agent}#{counts[agent]}"
        counts[agent] += 1
        step = int((when - t0) * 1000)
        history.add_player(player, HISTORICAL, race, agent, step, float(when))
        history.add_event("snapshot", agent, player, step, "steps" if role == MAIN_AGENT else "win_rate", when=float(when))
        if role != MAIN_AGENT and rng.random() < (1.0 if role == MAIN_EXPLOITER else 0.25):
            history.add_event("reset", agent, None, step, None, when=float(when) + 1e-3)
        ids.append(player)
        created.append(float(when))
        parents.append(agent)
    n = len(ids)
    created = np.array(created)
    strength = np.arange(n) / n * 4 + rng.normal(0, 0.5, n)  # later snapshots are stronger

    # Games: learners against anyone existing (actors) and random pairs (evaluators).
    times = np.sort(rng.uniform(t0, t0 + span, games))
    for start in range(0, games, 50_000):
        batch = times[start:start + 50_000]
        m = len(batch)
        exists = np.searchsorted(np.sort(created), batch, side="right")  # players created by then (ids sorted by time after learners)
        away = (rng.random(m) * exists).astype(int)
        home = np.where(rng.random(m) < 0.5, rng.integers(0, len(learners), m), (rng.random(m) * exists).astype(int))
        p_win = 1 / (1 + np.exp(-(strength[home] - strength[away])))
        u = rng.random(m)
        outcome = np.where(u < 0.05, "draw", np.where(u < 0.05 + 0.95 * p_win, "win", "loss"))
        history.add_games(
            {"time": float(t), "home": ids[h], "away": ids[a], "outcome": str(o), "length": 100,
             "branch": "pfsp", "source": "actor" if h < len(learners) else "evaluator"}
            for t, h, a, o in zip(batch, home, away, outcome)
        )

    # The league's decayed payoff at the end, Nash and ratings over time.
    logit = strength[:, None] - strength[None, :]
    wins = (20.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    history.add_payoff_snapshot(ids, wins, np.zeros((n, n), np.float32), when=t0 + span)
    for when in np.linspace(t0 + span / publishes, t0 + span, publishes):
        alive = np.flatnonzero(created <= when)
        support = rng.choice(alive, size=min(len(alive), int(rng.integers(10, 60))), replace=False)
        weights = rng.dirichlet(np.ones(len(support)))
        history.add_nash({ids[i]: float(w) for i, w in zip(support, weights)}, when=float(when))
        elo = 1200 + 400 * strength[alive] / 4 * (when - t0) / span + rng.normal(0, 10, len(alive))
        history.add_ratings({ids[i]: (float(e), 25 + (e - 1200) / 40, 8.333 / (1 + (when - t0) / 3600))
                             for i, e in zip(alive, elo)}, when=float(when))
    for when in np.linspace(t0, t0 + span, metric_times):
        for agent, _, _ in learners:
            values = rng.random(len(LEARNER_METRICS))
            history.add_learner_metrics(agent, dict(zip(LEARNER_METRICS, values * [10, 9000, 1, 2, 0.1, 3, 2, 1e4])), when=float(when))
    history.close()
    return run_dir


def _parent_weights(learners) -> np.ndarray:
    w = np.array([3.0 if role == MAIN_AGENT else 1.0 for _, role, _ in learners])
    return w / w.sum()


def measure_render(run_dir: str, tab: Tab) -> tuple[float, dict]:
    """Seconds from navigating to a fresh server (cold cache) until every chart is drawn."""
    server, url = serve(run_dir, 0)
    try:
        tab.page.goto("about:blank")
        start = time.perf_counter()
        tab.page.goto(url, wait_until="commit")
        tab.wait_for("window.dashboardRendered === true", timeout_s=120, polling_ms=10)
        elapsed = time.perf_counter() - start
        timings = tab.page.evaluate("window.dashboardTimings")
    finally:
        server.shutdown()
        server.server_close()
    if tab.console_errors:
        raise RuntimeError(f"console errors while rendering: {tab.console_errors}")
    return elapsed, timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", type=int, default=1000)
    parser.add_argument("--games", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as run_dir:
        start = time.perf_counter()
        synthetic_history(run_dir, args.players, args.games)
        size_mb = os.path.getsize(os.path.join(run_dir, "league.db")) / 1e6
        print(f"synthetic history: {args.players} players, {args.games} games, {size_mb:.0f} MB, "
              f"written in {time.perf_counter() - start:.1f} s")
        builds = []
        for _ in range(args.repeats):
            data = DashboardData(run_dir)
            t = time.perf_counter()
            payload = data.json_bytes()
            builds.append(time.perf_counter() - t)
        print(f"JSON build (cold): median {statistics.median(builds):.3f} s, {len(payload) / 1e6:.1f} MB")
        renders = []
        with chromium() as browser, Tab(browser, width=1400, height=1000) as tab:
            for k in range(args.repeats):
                elapsed, timings = measure_render(run_dir, tab)
                renders.append(elapsed)
                phases = ", ".join(f"{key} {value:.0f}" for key, value in timings.items())
                print(f"render {k}: {elapsed:.3f} s  (in the page, ms: {phases})")
    render = statistics.median(renders)
    print(f"median render of {args.players} players: {render:.3f} s (limit {LIMIT_S:.0f} s)")
    print(f"RESULT dashboard render_{args.players}_s={render:.3f} ratio={render / LIMIT_S:.3f} target=1.0")


if __name__ == "__main__":
    main()
