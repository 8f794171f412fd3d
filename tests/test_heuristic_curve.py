"""Each SMAX main agent's win rate against the scripted heuristic over time (issue 14): the
evaluator measures it off the actors' path, league.db keeps it, the dashboard draws it.

As OpenAI Five tracked TrueSkill against fixed reference agents: evaluator_0 plays each main
agent's current parameters against jaxmarl's heuristic in every race of the run, every
`--evaluator.heuristic_every_seconds`. Expected values here are recomputed from the outcomes
of `actors.games.smax_races.scripted.play_detailed` (the heuristic's armies forced in turn) and
from SQL, not with the code under test.
"""

import os
import sqlite3

import numpy as np
import pytest

from coordinator.coordinator import Coordinator
from coordinator.history import LeagueHistory
from experiments.config import ConfigError, RunConfig
from league.players import learning_agents

# The system tier (docs/testing.md): SMAX main agents against the heuristic, and the dashboard in a browser.
pytestmark = pytest.mark.system

TINY = dict(hidden_size=16, core_size=16)
GAMES = 8
VERSION = 7


def charging(params):
    """Parameters whose units always move east, into the heuristic's fire (a large bias on the
    action type head): they lose some games and win none (random tiny networks, and units that
    stop, draw every game: the heuristic does not come to them)."""
    from actors.games.smax_races import ACTION_TYPES

    params = {module: {k: np.array(v) for k, v in leaves.items()} for module, leaves in params.items()}
    heads = [m for m in params if m.endswith("policy_action_type")]
    assert heads, sorted(params)
    for module in heads:
        params[module]["w"][:] = 0.0
        params[module]["b"][:] = -50.0
        params[module]["b"][ACTION_TYPES.index("move_east")] = 50.0
    return params


class LearnerGroup:
    """A learner group serving fixed parameters (version VERSION) for every learning agent."""

    def __init__(self, params):
        self._params = params

    def params(self, agent_id, min_version=None):
        return VERSION, self._params[agent_id]


def smax_node(tmp_path, evaluator_id="evaluator_0", **settings):
    """(node, coordinator, {agent: params}) of a two-race SMAX league of tiny networks, the
    terran main agent charging."""
    from experiments.build import initial_params, make_game, make_network
    from experiments.nodes import EvaluatorNode

    config = RunConfig.make(game="smax_races", races=2, run_dir=str(tmp_path), **TINY,
                            **{"evaluator.games": 2, "evaluator.heuristic_games": GAMES, **settings})
    coordinator = Coordinator(config.league, config.run_dir)
    game = make_game(config, 1)
    network = make_network(config, game.spec)
    params = {p.player_id: initial_params(network, game.spec, k, 5)
              for k, p in enumerate(learning_agents(config.league))}
    params["terran_main_agent_0"] = charging(params["terran_main_agent_0"])
    groups = {agent: LearnerGroup(params) for agent in params}
    return EvaluatorNode(config, coordinator, groups, evaluator_id=evaluator_id), coordinator, params


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A node measuring every 1 us, after two measurements (one through `heuristic_next`)."""
    node, coordinator, params = smax_node(tmp_path_factory.mktemp("smax"),
                                          **{"evaluator.heuristic_every_seconds": 1e-6})
    first = node.heuristic_next()
    second = node.measure_against_heuristic()
    return node, coordinator, params, first, second


def test_each_main_agent_plays_the_heuristic_in_every_race_and_the_rows_are_its_outcomes(measured):
    from actors.games.smax_races import scripted

    node, coordinator, params, first, second = measured
    mains = {p["player_id"]: p["race"] for p in coordinator.players() if p["role"] == "main_agent"}
    assert sorted(mains) == ["protoss_main_agent_0", "terran_main_agent_0"]
    rows = coordinator.history.heuristic_history()
    assert first == len(second) == 4 and len(rows) == 8   # 2 main agents x 2 heuristic races, twice
    assert len({r["time"] for r in rows[:4]}) == 1          # one measurement, one time
    # Only main agents, each against both races, in its own race, with its learner's version.
    assert sorted((r["player_id"], r["opponent_race"]) for r in rows[:4]) == sorted(
        (m, race) for m in mains for race in ("terran", "protoss"))
    network, _, game_config = node._heuristic
    decided = 0
    for r in rows:
        assert r["race"] == mains[r["player_id"]] and r["version"] == VERSION and r["games"] == GAMES
        # The same games again, counted here: the player on side 0, z = 0, seed = the run's,
        # the heuristic's armies in turn (0, 1, 2, 0, ...).
        outcomes = scripted.play_detailed(network, params[r["player_id"]], (r["race"], r["opponent_race"]),
                                          GAMES, seed=node.config.seed, config=game_config,
                                          greedy=node.config.evaluator.heuristic_greedy,
                                          compositions=(None, np.arange(GAMES) % 3)).outcomes
        wins, draws, losses = (int(np.sum(outcomes == v)) for v in (1, 0, -1))
        assert (r["wins"], r["draws"], r["losses"]) == (wins, draws, losses)
        assert r["win_rate"] == pytest.approx((wins + 0.5 * draws) / GAMES)
        decided += wins != losses
    assert decided > 0  # some row tells a win from a loss, so a swap of the two would show
    charging_rows = [r for r in rows if r["player_id"] == "terran_main_agent_0"]
    assert all(r["wins"] == 0 for r in charging_rows)  # each agent plays its own parameters
    assert any(r["losses"] > 0 for r in charging_rows)
    assert node.metrics()["heuristic_measurements"] == 2


def test_the_heuristic_games_compile_once_for_every_measurement(measured):
    from actors.games.smax_races import scripted

    node = measured[0]
    network, _, game_config = node._heuristic
    # Four matchups, twice, plus the recomputations above: one shape, one executable.
    assert scripted._play_fn(network, game_config, node.config.evaluator.heuristic_greedy)._cache_size() == 1


def test_greedy_measurements_play_the_most_likely_actions(tmp_path):
    """`--evaluator.heuristic_greedy`: the measurement runs the greedy program (the most likely
    army, action type and target) and not the sampling one; the payoff games' setting is apart."""
    from actors.games.smax_races import scripted

    node, _, _ = smax_node(tmp_path, **{"evaluator.heuristic_greedy": True})
    assert not node.config.evaluator.greedy
    assert len(node.measure_against_heuristic()) == 4
    network, _, game_config = node._heuristic
    assert scripted._play_fn(network, game_config, True)._cache_size() == 1
    assert scripted._play_fn(network, game_config, False)._cache_size() == 0


def test_not_due_means_not_measured(tmp_path):
    node, coordinator, _ = smax_node(tmp_path, **{"evaluator.heuristic_every_seconds": 3600.0})
    assert node.heuristic_next() == 0
    assert coordinator.history.heuristic_history() == []


@pytest.mark.parametrize("case", ["every=0", "evaluator_1"])
def test_nothing_is_measured_when_turned_off_or_on_another_evaluator(tmp_path, case):
    every = 0.0 if case == "every=0" else 1e-6
    node, coordinator, _ = smax_node(tmp_path, evaluator_id="evaluator_1" if case == "evaluator_1" else "evaluator_0",
                                     **{"evaluator.heuristic_every_seconds": every})
    assert node.heuristic_next() == 0
    assert node.measure_against_heuristic() == []
    assert coordinator.history.heuristic_history() == []


def test_poker_has_no_heuristic_curve(tmp_path):
    from experiments.nodes import EvaluatorNode

    config = RunConfig.make(game="kuhn_poker", hidden_size=8, core_size=8, run_dir=str(tmp_path),
                            **{"evaluator.heuristic_every_seconds": 1e-6})
    coordinator = Coordinator(config.league, config.run_dir)
    node = EvaluatorNode(config, coordinator, {})
    assert node.heuristic_next() == 0 and node.measure_against_heuristic() == []
    assert coordinator.history.heuristic_history() == []


@pytest.mark.parametrize("flag, value, message", [
    ("evaluator.heuristic_every_seconds", -1.0, "--evaluator.heuristic_every_seconds must be >= 0; got -1.0"),
    ("evaluator.heuristic_games", 0, "--evaluator.heuristic_games must be at least 1; got 0"),
])
def test_bad_settings_are_refused_with_the_flag(flag, value, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.make(game="smax_races", **{flag: value})
    RunConfig.make(game="smax_races", **{flag: value + 1})  # the boundary is allowed


ROWS = [  # two measurements of two main agents, each against two heuristic races
    (100.0, "terran_main_agent_0", 3, "terran", "terran", 4, 3, 1),
    (100.0, "terran_main_agent_0", 3, "terran", "zerg", 1, 1, 6),
    (100.0, "zerg_main_agent_0", 2, "zerg", "terran", 0, 8, 0),
    (100.0, "zerg_main_agent_0", 2, "zerg", "zerg", 2, 0, 6),
    (400.0, "terran_main_agent_0", 9, "terran", "terran", 8, 0, 0),
    (400.0, "terran_main_agent_0", 9, "terran", "zerg", 5, 2, 1),
    (400.0, "zerg_main_agent_0", 8, "zerg", "terran", 1, 1, 6),
    (400.0, "zerg_main_agent_0", 8, "zerg", "zerg", 3, 2, 3),
]


def write_rows(history, rows=ROWS):
    for when in sorted({r[0] for r in rows}):
        history.add_heuristic([
            {"player_id": p, "version": v, "race": race, "opponent_race": opp, "win_rate": (w + 0.5 * d) / (w + d + lo),
             "games": w + d + lo, "wins": w, "draws": d, "losses": lo}
            for t, p, v, race, opp, w, d, lo in rows if t == when], when=when)


def test_history_round_trip_and_old_histories(tmp_path):
    history = LeagueHistory(str(tmp_path))
    write_rows(history)
    back = history.heuristic_history()
    history.close()
    assert [(r["time"], r["player_id"], r["version"], r["race"], r["opponent_race"], r["wins"], r["draws"],
             r["losses"], r["games"]) for r in back] == [(*r, sum(r[5:])) for r in ROWS]
    assert [r["win_rate"] for r in back] == [pytest.approx((r[5] + 0.5 * r[6]) / sum(r[5:])) for r in ROWS]

    # A league.db from before the table: read-only it reads as no rows; a writer adds the table.
    old = tmp_path / "old"
    old.mkdir()
    LeagueHistory(str(old)).close()
    db = sqlite3.connect(os.path.join(old, "league.db"))
    db.execute("DROP TABLE heuristic")
    db.commit()
    db.close()
    reader = LeagueHistory(str(old), readonly=True)
    assert reader.heuristic_history() == [] and len(reader.data_version()) == 8
    reader.close()
    writer = LeagueHistory(str(old))
    write_rows(writer, ROWS[:1])
    assert [r["wins"] for r in writer.heuristic_history()] == [4]
    writer.close()


def test_a_new_measurement_changes_the_data_version(tmp_path):
    history = LeagueHistory(str(tmp_path))
    before = history.data_version()
    write_rows(history, ROWS[:2])
    assert history.data_version() != before
    history.close()


@pytest.fixture
def run_with_curve(tmp_path):
    history = LeagueHistory(str(tmp_path))
    for race in ("terran", "zerg"):
        history.add_player(f"{race}_main_agent_0", "main_agent", race, None, 0, 50.0)
    write_rows(history)
    history.close()
    return str(tmp_path)


def expected_curve():
    """{agent: [(time, mean win rate over the heuristic's races)]}, from ROWS."""
    out = {}
    for t, p, *_ in ROWS:
        rates = [(w + 0.5 * d) / (w + d + lo) for t2, p2, _, _, _, w, d, lo in ROWS if (t2, p2) == (t, p)]
        if (t, float(np.mean(rates))) not in out.setdefault(p, []):
            out[p].append((t, float(np.mean(rates))))
    return out


def test_the_dashboard_data_hold_one_series_per_main_agent(run_with_curve, tmp_path_factory):
    from dashboard.server import DashboardData

    data = DashboardData(run_with_curve).data()
    curve = data["heuristic"]
    assert {p: list(zip(s["time"], s["win_rate"])) for p, s in curve.items()} == {
        p: [(t, pytest.approx(v)) for t, v in points] for p, points in expected_curve().items()}
    zerg = curve["zerg_main_agent_0"]
    assert zerg["race"] == "zerg" and zerg["version"] == [2, 8] and zerg["games"] == [16, 16]
    assert zerg["by_race"] == {"terran": [0.5, pytest.approx(1.5 / 8)], "zerg": [0.25, 0.5]}
    # No rows, no series (the page then hides the chart).
    empty = str(tmp_path_factory.mktemp("empty"))
    history = LeagueHistory(empty)
    history.add_player("terran_main_agent_0", "main_agent", "terran", None, 0, 50.0)
    history.close()
    assert DashboardData(empty).data()["heuristic"] == {}


@pytest.mark.parametrize("with_rows", [True, False])
def test_the_page_draws_the_curve_only_when_measured(tmp_path, with_rows):
    from dashboard.server import serve
    from tests.browser import BrowserMissing, Tab, chromium, find_chromium

    try:
        find_chromium()
    except BrowserMissing as e:
        pytest.fail(str(e))  # as tests/test_dashboard.py: the browser tests are part of CI
    history = LeagueHistory(str(tmp_path))
    for race in ("terran", "zerg"):
        history.add_player(f"{race}_main_agent_0", "main_agent", race, None, 0, 50.0)
    if with_rows:
        write_rows(history)
    history.close()
    server, url = serve(str(tmp_path), 0)
    try:
        with chromium() as browser, Tab(browser, width=1400, height=1000) as tab:
            tab.load(url)
            shown = tab.page.evaluate("getComputedStyle(document.getElementById('heuristic-card')).display")
            # A SMAX run has no exact exploitability: that card stays hidden.
            exploitability_shown = tab.page.evaluate(
                "getComputedStyle(document.getElementById('exploitability-card')).display")
            traces = tab.page.evaluate("(() => { const gd = document.getElementById('chart-heuristic');"
                                       " return gd.querySelector('.main-svg') ? gd.data.map((t) => [t.name, t.x, t.y]) : null; })()")
            assert tab.console_errors == []
    finally:
        server.shutdown()
        server.server_close()
    assert exploitability_shown == "none"
    if not with_rows:
        assert shown == "none" and traces is None
        return
    assert shown != "none"
    drawn = {name: list(zip(x, y)) for name, x, y in traces}
    assert drawn == {p: [(t * 1000, pytest.approx(v)) for t, v in points] for p, points in expected_curve().items()}


def test_the_evaluator_measures_the_runs_agent_its_parameters_averaged_with_its_newest_snapshots(tmp_path):
    """The curve is the run's agent's (`RUN_DIR:result:RACE`): a main agent's current parameters
    averaged leaf by leaf with its newest frozen snapshots' (at most AVERAGE_NEWEST of them),
    worked here as a plain numpy mean; without a snapshot, its current parameters."""
    import jax

    from experiments.agent_ref import AVERAGE_NEWEST

    node, coordinator, params = smax_node(tmp_path)
    main = "terran_main_agent_0"
    players = coordinator.players()
    row = next(p for p in players if p["player_id"] == main)
    assert node.run_agent_params(row, players)[1] is params[main]      # no snapshot yet
    rng = np.random.default_rng(0)
    count = AVERAGE_NEWEST + 2
    held = {f"{main}#{k}": jax.tree_util.tree_map(lambda x: rng.normal(size=np.shape(x)).astype(np.float32),
                                                  params[main]) for k in range(1, count + 1)}
    held[main] = params[main]
    node._params_source.latest_params = lambda pid: (VERSION, held[pid])
    snapshots = [{"player_id": f"{main}#{k}", "role": "historical", "race": "terran", "parent": main,
                  "step": 10 * k} for k in range(1, count + 1)]
    version, averaged = node.run_agent_params(row, players + snapshots[::-1])   # any order
    newest = [held[s["player_id"]] for s in snapshots[-AVERAGE_NEWEST:]] + [params[main]]
    want = jax.tree_util.tree_map(lambda *leaves: sum(np.asarray(x, np.float64) for x in leaves) / len(leaves),
                                  *newest)
    assert version == VERSION
    for got, expected in zip(jax.tree_util.tree_leaves(averaged), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
