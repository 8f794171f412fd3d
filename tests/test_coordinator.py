"""The coordinator node over a real SQLite history and parameter store."""

import os
import sqlite3

import numpy as np
import pytest

from coordinator.coordinator import Coordinator, CoordinatorConfig
from coordinator.decisions import initial_player_id
from coordinator.history import HistoryWriter
from coordinator.history_reader import HistoryReader
from coordinator.league_db import HistoryError, pack_array, pack_state, unpack_state
from coordinator.param_store import ParamStore
from experiments.matrix_league import StrategyLearner
from league.payoff import Payoff
from league.players import LeagueConfig, SnapshotConfig

SNAPSHOTS = SnapshotConfig(main_agent_snapshot_steps=100, exploiter_min_steps=100,
                           main_exploiter_timeout_steps=200, league_exploiter_timeout_steps=200)
NEVER = CoordinatorConfig(meta_game_every_seconds=float("inf"), checkpoint_every_seconds=float("inf"))


def make(run_dir, races=("terran", "zerg"), initial_snapshots=False):
    config = LeagueConfig(races=races, snapshots=SNAPSHOTS, initial_snapshots=initial_snapshots)
    coordinator = Coordinator(config, str(run_dir), seed=3, config=NEVER)
    learners = {a: StrategyLearner(np.full(3, float(i))) for i, a in enumerate(coordinator.agent_ids())}
    coordinator.set_learners(learners)
    for a in learners:
        coordinator.store_initial_params(a, {"strategy": np.zeros(3)})
    return coordinator, learners


def test_request_match_names_opponent_races_and_where_params_live(tmp_path):
    coordinator, _ = make(tmp_path)
    match = coordinator.request_match("terran_main_exploiter_0")
    assert match.opponent_id in ("terran_main_agent_0", "zerg_main_agent_0")
    assert match.home_race == "terran" and match.away_race == match.opponent_id.split("_")[0]
    assert match.opponent_params == "learner" and match.branch == "main_agent"
    with pytest.raises(ValueError, match="unknown player id 'nobody'"):
        coordinator.request_match("nobody")


def test_results_update_payoff_and_history(tmp_path):
    coordinator, _ = make(tmp_path)
    results = [{"home": "terran_main_agent_0", "away": "zerg_main_agent_0", "outcome": o, "length": 5}
               for o in ("win", "win", "loss", "draw")]
    coordinator.report_results(results)
    payoff = coordinator.league.payoff
    # decay 0.99 per game: wins 0.99^3 + 0.99^2, losses 0.99, draws 1
    wins, losses, draws = 0.99**3 + 0.99**2, 0.99, 1.0
    assert payoff.win_rate("terran_main_agent_0", "zerg_main_agent_0") == pytest.approx(
        (wins + 0.5 * draws) / (wins + losses + draws), rel=1e-6)
    # league.db: one row of counts for the batch (issue 31: storage per batch, not per game)
    db = sqlite3.connect(tmp_path / "league.db")
    assert db.execute("SELECT count(*) FROM games").fetchone() == (0,)
    assert db.execute("SELECT home, away, wins, draws, losses, length FROM game_counts").fetchall() == [
        ("terran_main_agent_0", "zerg_main_agent_0", 2, 1, 1, 20)]
    with pytest.raises(ValueError, match="unknown outcome 'won'"):
        coordinator.report_results([{"home": "terran_main_agent_0", "away": "zerg_main_agent_0", "outcome": "won"}])
    assert coordinator.history.game_count() == 4  # a bad batch writes nothing
    coordinator.close()

    # --per_game_rows: a row per game
    config = LeagueConfig(races=("terran", "zerg"), snapshots=SNAPSHOTS, initial_snapshots=False)
    per_game = Coordinator(config, str(tmp_path / "per_game"), seed=3,
                           config=CoordinatorConfig(meta_game_every_seconds=float("inf"),
                                                    checkpoint_every_seconds=float("inf"), per_game_rows=True))
    per_game.report_results(results)
    rows = sqlite3.connect(tmp_path / "per_game" / "league.db").execute(
        "SELECT home, away, outcome, length FROM games ORDER BY id").fetchall()
    assert rows == [(r["home"], r["away"], r["outcome"], 5) for r in results]
    assert per_game.history.game_count() == 4


def test_poll_snapshots_into_the_store_and_resets_exploiters(tmp_path):
    coordinator, learners = make(tmp_path, races=("terran",))
    for learner in learners.values():
        learner.agent_steps = 250
    learners["terran_main_exploiter_0"].strategy_params = np.array([5.0, 5.0, 5.0])
    events = coordinator.poll()
    kinds = sorted((e["kind"], e["agent_id"]) for e in events)
    assert ("snapshot", "terran_main_agent_0") in kinds
    assert ("reset", "terran_main_exploiter_0") in kinds  # main exploiters always reset
    store = ParamStore(str(tmp_path))
    version, params = store.load("terran_main_exploiter_0#0")
    np.testing.assert_array_equal(params["strategy"], [5.0, 5.0, 5.0])  # frozen before the reset
    np.testing.assert_array_equal(learners["terran_main_exploiter_0"].strategy_params, np.zeros(3))
    history = HistoryReader(str(tmp_path))
    assert {p["player_id"] for p in history.players() if p["role"] == "historical"} >= {"terran_main_agent_0#0", "terran_main_exploiter_0#0"}
    assert any(e["kind"] == "reset" for e in history.events())
    assert not store.save("terran_main_exploiter_0#0", {"strategy": np.ones(3)}, 9)  # written once
    assert coordinator.poll() == []  # counted from the snapshot's step


def test_restart_resumes_players_and_payoff_even_without_a_final_checkpoint(tmp_path):
    coordinator, learners = make(tmp_path)
    for learner in learners.values():
        learner.agent_steps = 150
    coordinator.poll()  # snapshots: the state is checkpointed right after
    a, b = "terran_main_agent_0", "zerg_main_agent_0#0"
    coordinator.report_results([{"home": a, "away": b, "outcome": "win"}] * 3)  # after the checkpoint
    expected = coordinator.league.payoff.win_rate_matrix()
    players = dict(coordinator.league.players)
    # no close(): as after kill -9
    resumed = Coordinator(LeagueConfig(races=("terran", "zerg"), snapshots=SNAPSHOTS), str(tmp_path), seed=3, config=NEVER)
    assert resumed.league.players == players
    np.testing.assert_allclose(resumed.league.payoff.win_rate_matrix(), expected)
    assert resumed.history.game_count() == 3


def test_the_checkpoint_is_packed_and_written_with_the_league_free_and_never_older_over_newer(tmp_path):
    import threading

    coordinator, learners = make(tmp_path)
    others = []
    save_league_state = coordinator.history.save_league_state

    def while_writing(state, when=None):   # another thread's call on the league meanwhile
        other = threading.Thread(target=coordinator.match_distribution, args=("terran_main_agent_0",))
        other.start()
        other.join(timeout=5)
        others.append(not other.is_alive())   # it got the league's lock and finished
        save_league_state(state, when)

    coordinator.history.save_league_state = while_writing
    for learner in learners.values():
        learner.agent_steps = 150
    assert coordinator.poll()               # snapshots: checkpointed
    coordinator.withdraw("terran_main_agent_0#0", "test")
    coordinator.checkpoint()
    assert others == [True] * 3             # each made while the checkpoint was being written
    coordinator.history.save_league_state = save_league_state
    # two checkpoints taken in one order and written in the other: the newer one stays
    a, b = "terran_main_agent_0", "zerg_main_agent_0"
    with coordinator._lock:
        older = coordinator._store.snapshot(coordinator.league)
        coordinator.report_results([{"home": a, "away": b, "outcome": "win"}] * 2)
        newer = coordinator._store.snapshot(coordinator.league)
    coordinator._store.write(newer)
    coordinator._store.write(older)
    wins = coordinator.history.load_league_state()["league"]["payoff"]["wins"]
    np.testing.assert_array_equal(wins, newer["state"]["league"]["payoff"]["wins"])
    assert wins.sum() > 0 == older["state"]["league"]["payoff"]["wins"].sum()


def test_evaluation_matches_prefer_pairs_with_few_games(tmp_path):
    coordinator, _ = make(tmp_path, races=("terran",))
    ids = coordinator.agent_ids()
    played = {(ids[0], ids[1]), (ids[0], ids[2])}
    coordinator.report_results([{"home": h, "away": a, "outcome": "win"} for h, a in played])
    matches = coordinator.evaluation_matches(3)
    pairs = [(m["home"], m["away"]) for m in matches]
    assert len(pairs) == 3 and not set(pairs) & played
    assert all(h != a for h, a in pairs)


def test_evaluation_matches_carry_each_players_race(tmp_path):
    coordinator, _ = make(tmp_path, races=("terran", "zerg"))
    race = {p["player_id"]: p["race"] for p in coordinator.players()}
    matches = coordinator.evaluation_matches(100)
    assert {(m["home_race"], m["away_race"]) for m in matches} >= {
        ("terran", "zerg"), ("zerg", "terran"), ("zerg", "zerg")}   # both players take side 0
    for m in matches:
        assert (m["home_race"], m["away_race"]) == (race[m["home"]], race[m["away"]])


def test_results_in_the_wrong_races_are_refused_whole(tmp_path):
    coordinator, _ = make(tmp_path, races=("terran", "zerg"))
    good = {"home": "terran_main_agent_0", "away": "zerg_main_agent_0", "outcome": "win",
            "home_race": "terran", "away_race": "zerg"}
    bad = dict(good, away_race="terran")
    with pytest.raises(ValueError, match="away race 'terran'.*zerg player"):
        coordinator.report_results([good, bad])
    assert coordinator.history.game_count() == 0
    coordinator.report_results([good])
    assert [(g["home_race"], g["away_race"]) for g in coordinator.history.result_rows()] == [("terran", "zerg")]


def test_initial_copies_of_main_agents_are_stored_recorded_and_played(tmp_path):
    config = LeagueConfig(races=("terran",), snapshots=SNAPSHOTS)
    coordinator = Coordinator(config, str(tmp_path), seed=3, config=NEVER)
    frozen = "terran_main_agent_0#0"
    for i, agent in enumerate(coordinator.agent_ids()):
        coordinator.store_initial_params(agent, {"strategy": np.array([1.0, 2.0, 3.0]) * (i + 1)})
    _, params = coordinator.params.load(frozen)
    np.testing.assert_array_equal(params["strategy"], [1.0, 2.0, 3.0])
    assert "terran_main_exploiter_0#0" not in coordinator.params
    row = {p["player_id"]: p for p in coordinator.history.players()}[frozen]
    assert row["role"] == "historical" and row["parent"] == "terran_main_agent_0"
    assert [(e["kind"], e["player_id"], e["reason"]) for e in coordinator.history.events()] == [
        ("snapshot", frozen, "initial")]
    exploiter = coordinator.request_match("terran_league_exploiter_0")
    assert exploiter.opponent_id == frozen and exploiter.opponent_params == "store"
    coordinator.close()
    resumed = Coordinator(coordinator.league.config, str(tmp_path), seed=3, config=NEVER)
    assert resumed.league.historical_ids() == [frozen]


def test_meta_game_is_published(tmp_path):
    coordinator, _ = make(tmp_path, races=("terran",))
    coordinator.report_results([{"home": "terran_main_agent_0", "away": "terran_main_exploiter_0", "outcome": "win"}] * 5)
    published = coordinator.publish_meta_game()
    # The main exploiter is beaten; the two league exploiters never played, so their payoffs
    # are unknown and they stay out of the meta-game (read as draws, they would have shared
    # the Nash with the main agent): the main agent is the whole Nash.
    nash = published["nash"]
    assert nash["terran_main_agent_0"] == pytest.approx(1.0, abs=1e-7)
    for agent in ("terran_main_exploiter_0", "terran_league_exploiter_0", "terran_league_exploiter_1"):
        assert nash[agent] == pytest.approx(0.0, abs=1e-7)
    history = HistoryReader(str(tmp_path))
    _, players, wins, _, _ = history.latest_payoff()
    assert wins[players.index("terran_main_agent_0"), players.index("terran_main_exploiter_0")] == pytest.approx(sum(0.99**k for k in range(5)), rel=1e-5)
    assert history.nash_history() and history.ratings_history()


def test_meta_game_is_on_scores_when_games_report_them(tmp_path):
    """Poker: the main agent wins 3 of 4 games by 1 chip and loses one by 5: a win rate of
    3/4 but -1/2 chip per game. The meta-game is on chips, so its Nash is the exploiter."""
    coordinator, _ = make(tmp_path, races=("terran",))
    a, b = "terran_main_agent_0", "terran_main_exploiter_0"
    games = [{"home": a, "away": b, "outcome": "win", "score": 1.0}] * 3
    games += [{"home": a, "away": b, "outcome": "loss", "score": -5.0}]
    coordinator.report_results(games)
    assert coordinator.league.payoff.win_rate(a, b) > 0.7
    nash = coordinator.publish_meta_game()["nash"]
    assert nash[a] == pytest.approx(0.0, abs=1e-7) and nash[b] > 0.3
    history = HistoryReader(str(tmp_path))
    _, players, _, _, scores = history.latest_payoff()
    # three +1 games then a -5 one, each after a 0.99 decay of what came before
    decayed = 0.99 ** 3 + 0.99 ** 2 + 0.99
    assert scores[players.index(a), players.index(b)] == pytest.approx((decayed - 5.0) / (decayed + 1.0), rel=1e-5)
    assert history.latest_nash()[1] == pytest.approx({p: w for p, w in nash.items() if w > 0})
    # a non-finite score is refused whole, naming the fix; nothing is recorded
    bad = [{"home": a, "away": b, "outcome": "win", "score": 1.0},
           {"home": a, "away": b, "outcome": "win", "score": float("nan")}]
    with pytest.raises(ValueError, match="non-finite payoff"):
        coordinator.report_results(bad)
    assert coordinator.history.game_count() == 4
    # scores survive a restart, replayed from league.db's one row of counts for the batch:
    # the mean over the games' orders (`Payoff.update_counts`), not their sequence
    reference = Payoff(decay=coordinator.league.payoff.decay)
    for player in coordinator.league.payoff.players:
        reference.add_player(player)
    reference.update_counts(a, b, 3, 0, 1, -2.0)
    resumed = Coordinator(LeagueConfig(races=("terran",), snapshots=SNAPSHOTS), str(tmp_path), seed=3, config=NEVER)
    np.testing.assert_allclose(resumed.league.payoff.score_matrix(), reference.score_matrix(), rtol=1e-6)
    assert resumed.league.payoff.score_matrix()[0, 1] < 0


def test_corrupt_league_checkpoint_is_reported_and_left_alone(tmp_path):
    coordinator, _ = make(tmp_path)
    coordinator.close()
    db = sqlite3.connect(tmp_path / "league.db")
    db.execute("UPDATE league_state SET state = ?", (b"not zlib at all",))
    db.commit()
    with pytest.raises(HistoryError, match="corrupt"):
        Coordinator(LeagueConfig(races=("terran", "zerg"), snapshots=SNAPSHOTS), str(tmp_path), seed=3, config=NEVER)
    assert db.execute("SELECT state FROM league_state").fetchone()[0] == b"not zlib at all"


def test_missing_history_is_a_clear_error(tmp_path):
    with pytest.raises(HistoryError, match="no league history"):
        HistoryReader(str(tmp_path / "nothing"))


def test_a_new_history_appears_with_its_tables_and_ignores_a_half_made_one(tmp_path, monkeypatch):
    """league.db is made beside its path and renamed into place: a reader that finds the file
    finds its tables (CI once caught the dashboard's reader between the file and its schema),
    and the leftover of a start killed half-way is replaced."""
    import coordinator.league_db as history_module

    db = tmp_path / "league.db"
    (tmp_path / "league.db.new").write_bytes(b"half")
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        seen.append((os.path.exists(dst), HistoryReader(src).game_count()))
        real_replace(src, dst)

    monkeypatch.setattr(history_module.os, "replace", replace)
    HistoryWriter(str(db)).close()
    assert seen == [(False, 0)]
    assert HistoryReader(str(db)).game_count() == 0
    assert not (tmp_path / "league.db.new").exists()


def test_a_league_exploiter_resets_to_the_main_agents_newest_copy_when_asked(tmp_path, capsys):
    """`league_exploiter_reset_to="main_agent"`: the reset learner gets that copy's stored
    parameters and league.db's reset event names it; with the copy's file unreadable it gets
    its initial parameters and a warning says so."""
    import dataclasses

    snapshots = dataclasses.replace(SNAPSHOTS, league_exploiter_reset_probability=1.0,
                                    league_exploiter_reset_to="main_agent")
    coordinator = Coordinator(LeagueConfig(races=("terran",), snapshots=snapshots, initial_snapshots=False),
                              str(tmp_path), seed=3, config=NEVER)
    learners = {a: StrategyLearner(np.full(3, float(i))) for i, a in enumerate(coordinator.agent_ids())}
    coordinator.set_learners(learners)
    for a in learners:
        coordinator.store_initial_params(a, {"strategy": np.zeros(3)})
    main, exploiter = "terran_main_agent_0", "terran_league_exploiter_0"
    learners[main].strategy_params = np.array([7.0, 7.0, 7.0])
    for learner in learners.values():
        learner.agent_steps = 250
    coordinator.poll()
    # main agent's first copy (made this poll): the league exploiter's reset started from it
    np.testing.assert_array_equal(learners[exploiter].strategy_params, [7.0, 7.0, 7.0])
    resets = [e for e in HistoryReader(str(tmp_path)).events()
              if e["kind"] == "reset" and e["agent_id"] == exploiter]
    assert resets and resets[-1]["reason"] == f"from {main}#0"
    assert learners["terran_main_exploiter_0"].strategy_params.tolist() == [0.0, 0.0, 0.0]   # initial

    # a resumed coordinator (nothing cached) whose copy's file is damaged: the initial parameters
    _noise(coordinator.params.path(f"{main}#0"))
    resumed = Coordinator(coordinator.league.config, str(tmp_path), seed=3, config=NEVER)
    resumed.set_learners(learners)
    learners[exploiter].strategy_params = np.array([1.0, 2.0, 3.0])
    learners[exploiter].agent_steps = 500   # the main agent stays at 250: no newer copy
    resumed.poll()
    np.testing.assert_array_equal(learners[exploiter].strategy_params, np.zeros(3))
    assert f"{exploiter} resets to its initial parameters, not to {main}#0's" in capsys.readouterr().out


def test_initial_params_are_kept_for_resets(tmp_path):
    coordinator, _ = make(tmp_path, races=("terran",))
    version, params = ParamStore(str(tmp_path)).load(initial_player_id("terran_league_exploiter_0"))
    np.testing.assert_array_equal(params["strategy"], np.zeros(3))


def test_param_store_round_trips_haiku_style_keys_and_refuses_corrupt_files(tmp_path):
    store = ParamStore(str(tmp_path))
    params = {"unit_agent/~/encoder/linear_0": {"w": np.arange(6.0).reshape(2, 3), "b": np.zeros(3)}}
    assert store.save("p#0", params, version=12)
    version, loaded = ParamStore(str(tmp_path)).load("p#0")
    assert version == 12
    np.testing.assert_array_equal(loaded["unit_agent/~/encoder/linear_0"]["w"], params["unit_agent/~/encoder/linear_0"]["w"])
    (tmp_path / "params" / "q#0.npz").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="corrupt"):
        store.load("q#0")
    assert (tmp_path / "params" / "q#0.npz").read_bytes() == b"garbage"


def test_a_history_from_before_scores_is_read_and_upgraded(tmp_path):
    """league.db files written before the score columns existed: read-only readers see no
    scores; a writer adds the columns, and old rows read as NULL."""
    db = sqlite3.connect(tmp_path / "league.db")
    db.executescript("""
        CREATE TABLE players(player_id TEXT PRIMARY KEY, role TEXT NOT NULL, race TEXT NOT NULL,
            parent TEXT, step INTEGER NOT NULL, wall_time REAL NOT NULL);
        CREATE TABLE games(id INTEGER PRIMARY KEY, time REAL NOT NULL, home TEXT NOT NULL,
            away TEXT NOT NULL, outcome TEXT NOT NULL, length INTEGER, branch TEXT, source TEXT, actor_id TEXT);
        CREATE TABLE payoff_snapshots(id INTEGER PRIMARY KEY, time REAL NOT NULL,
            players TEXT NOT NULL, wins BLOB NOT NULL, draws BLOB NOT NULL);
        CREATE TABLE nash(id INTEGER PRIMARY KEY, time REAL NOT NULL, player_id TEXT NOT NULL,
            weight REAL NOT NULL);
        INSERT INTO games(time, home, away, outcome) VALUES (1.0, 'a', 'b', 'win');
        INSERT INTO nash(time, player_id, weight) VALUES (1.0, 'a', 1.0);
    """)
    db.execute("INSERT INTO payoff_snapshots(time, players, wins, draws) VALUES (1.0, ?, ?, ?)",
               ('["a", "b"]', pack_array(np.eye(2)[::-1]), pack_array(np.zeros((2, 2)))))
    db.commit()
    db.close()
    old = HistoryReader(str(tmp_path))
    assert old.games()[0]["score"] is None and old.latest_nash() == (1.0, {"a": 1.0})
    _, players, wins, _, scores = old.latest_payoff()
    assert players == ["a", "b"] and wins[0, 1] == 1.0 and scores is None
    upgraded = HistoryWriter(str(tmp_path))
    upgraded.add_games([{"home": "a", "away": "b", "outcome": "loss", "score": -2.0}])
    assert [g["score"] for g in upgraded.games()] == [None, -2.0]


def test_exact_payoffs_replace_sampling_for_frozen_pairs(tmp_path):
    """Frozen players' exact payoffs (poker) come in through `report_exact`: the coordinator
    asks for each frozen player once, evaluators sample exact pairs no more, the Nash is solved
    on the exact scores and a resumed coordinator keeps them."""
    config = LeagueConfig(races=("any",), main_exploiters_per_race=0, league_exploiters_per_race=1,
                          snapshots=SNAPSHOTS)
    coordinator = Coordinator(config, str(tmp_path), seed=1, config=NEVER)
    learners = {a: StrategyLearner(np.zeros(3)) for a in coordinator.agent_ids()}
    coordinator.set_learners(learners)
    for a in learners:
        coordinator.store_initial_params(a, {"strategy": np.zeros(3)})
    first = coordinator.exact_work()
    assert first == {"player": "any_main_agent_0#0", "against": []}
    coordinator.report_exact("any_main_agent_0#0", {})
    assert coordinator.exact_work() is None
    learners["any_main_agent_0"].steps = lambda: 10**6
    coordinator.poll()  # the main agent snapshots: a second frozen player
    second = coordinator.exact_work()
    assert second == {"player": "any_main_agent_0#1", "against": ["any_main_agent_0#0"]}
    coordinator.report_exact("any_main_agent_0#1", {"any_main_agent_0#0": (0.9, 1.25)})
    payoff = coordinator.league.payoff
    assert payoff.win_rate("any_main_agent_0#0", "any_main_agent_0#1") == pytest.approx(0.1)
    pairs = {frozenset((m["home"], m["away"])) for m in coordinator.evaluation_matches(100)}
    assert frozenset(("any_main_agent_0#0", "any_main_agent_0#1")) not in pairs and pairs
    nash = coordinator.publish_meta_game()["nash"]
    assert nash["any_main_agent_0#0"] == pytest.approx(0.0, abs=1e-9)   # beaten by #1 exactly
    coordinator.close()
    resumed = Coordinator(config, str(tmp_path), seed=1, config=NEVER)
    assert resumed.league.payoff.win_rate("any_main_agent_0#1", "any_main_agent_0#0") == pytest.approx(0.9)
    assert resumed.exact_work() is None


def test_published_trueskill_is_the_sequential_replay_of_every_reported_game(tmp_path):
    """Reports queue TrueSkill updates and the publisher applies them: the published ratings
    equal the `trueskill` package run over the games in the order they were reported."""
    import trueskill

    coordinator, _ = make(tmp_path, races=("terran",))
    a, b, c = "terran_main_agent_0", "terran_main_exploiter_0", "terran_league_exploiter_0"
    games = [(a, b, "win"), (b, c, "draw"), (c, a, "loss"), (a, b, "loss"), (a, c, "win")]
    for i in range(0, len(games), 2):
        coordinator.report_results([{"home": h, "away": w, "outcome": o} for h, w, o in games[i:i + 2]])
        coordinator.publish_meta_game()
    env = trueskill.TrueSkill(draw_probability=0.05)
    ratings = {p: env.create_rating() for p in (a, b, c)}
    for home, away, outcome in games:
        if outcome == "loss":
            ratings[away], ratings[home] = trueskill.rate_1vs1(ratings[away], ratings[home], env=env)
        else:
            ratings[home], ratings[away] = trueskill.rate_1vs1(ratings[home], ratings[away],
                                                               drawn=outcome == "draw", env=env)
    history = HistoryReader(str(tmp_path))
    last = max(t for t, *_ in history.ratings_history())
    published = {p: (mu, sigma) for t, p, _, mu, sigma in history.ratings_history() if t == last}
    for p, r in ratings.items():
        assert published[p] == pytest.approx((r.mu, r.sigma), abs=1e-5)  # the package approximates erfc


def test_actors_get_frozen_players_from_the_coordinator_and_keep_them(tmp_path):
    """Issue 16: no shared disk. An actor's ParamsSource reads no run directory: frozen
    players come from the coordinator (once each), learning agents from their learners."""
    from experiments.nodes import ParamsSource

    coordinator, learners = make(tmp_path / "coordinator_host", races=("terran",))
    for learner in learners.values():
        learner.agent_steps = 250
    learners["terran_main_agent_0"].strategy_params = np.array([1.0, 2.0, 3.0])
    coordinator.poll()  # snapshots terran_main_agent_0#0 into the coordinator's store

    calls = []

    class Remote:  # what another host holds: a handle whose calls reach the coordinator
        def frozen_params(self, player_id):
            calls.append(player_id)
            return coordinator.frozen_params(player_id)

    class Group:
        def params(self, agent_id, min_version=None):
            return 7, {"strategy": np.full(3, 9.0)}

    source = ParamsSource({"terran_main_agent_0": Group()}, Remote())
    for _ in range(3):
        version, params = source.latest_params("terran_main_agent_0#0")
        np.testing.assert_array_equal(params["strategy"], [1.0, 2.0, 3.0])
    assert calls == ["terran_main_agent_0#0"]  # fetched once, then cached
    assert source.latest_params("terran_main_agent_0#0", min_version=version + 1) is None
    assert source.latest_params("terran_main_agent_0")[0] == 7  # learning agents: the learner
    with pytest.raises(KeyError, match="no stored parameters for player 'nobody#3'"):
        source.latest_params("nobody#3")


def test_frozen_players_kept_in_memory_are_bounded_and_what_leaves_is_read_again(tmp_path, monkeypatch):
    """Issue 55 (memory): a league adds players for as long as it runs, so the coordinator's
    store and every evaluator's ParamsSource keep only their most recently used frozen players
    (an unbounded cache held each one: 0.6 MB a SMAX player); what leaves is read again, equal."""
    from experiments.nodes import ParamsSource

    monkeypatch.setattr(ParamStore, "CACHE_SIZE", 4)
    monkeypatch.setattr(ParamsSource, "CACHE_SIZE", 3)
    store = ParamStore(str(tmp_path))
    players = [f"p#{i}" for i in range(10)]
    for i, p in enumerate(players):
        store.save(p, {"w": np.full(2, float(i))}, version=i)
    reads = []

    class Remote:
        def frozen_params(self, player_id):
            reads.append(player_id)
            return store.load(player_id)

    source = ParamsSource({}, Remote())
    for p in players + players[:2]:
        store.load(p)
        source.latest_params(p)
    assert len(store._cache) == 4 and len(source._frozen) == 3
    assert reads == players + players[:2]          # p#0 and p#1 had left: fetched again
    source.latest_params("p#1")                    # the most recent: kept
    assert reads[-1] == "p#1" and len(reads) == 12
    for i in (0, 5, 9):                            # read back after leaving, equal to what was saved
        version, params = source.latest_params(f"p#{i}")
        assert version == i
        np.testing.assert_array_equal(params["w"], [float(i)] * 2)
    assert "p#0" in store._cache and "p#9" in store._cache
    store.load("p#9")                              # used again: p#0 is now the least recent
    store.load("p#7")
    assert "p#9" in store._cache and "p#0" not in store._cache   # the least recently used left


def _noise(path, seed=0):
    """4 KB of noise in the middle of a file that keeps its size (issue 31's damage)."""
    data = bytearray(open(path, "rb").read())
    middle = len(data) // 2
    noise = np.random.default_rng(seed).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    data[max(0, middle - 2048):middle + 2048] = noise[:len(data[max(0, middle - 2048):middle + 2048])]
    open(path, "wb").write(bytes(data))


def test_a_damaged_frozen_player_is_withdrawn_and_the_league_goes_on(tmp_path):
    """Issue 31: a frozen player whose file cannot be read is withdrawn from matchmaking, the
    evaluators' pairs and the Nash, said in an event (league.db and `take_events`), and stays
    withdrawn after a restart; asking for it again gives None, not an exception."""
    coordinator, learners = make(tmp_path)
    big = {"strategy": np.arange(5000, dtype=np.float32)}   # a file bigger than the noise
    for agent in coordinator.agent_ids():
        coordinator.store_initial_params(agent, big)
    for learner in learners.values():
        learner.strategy_params = np.arange(5000, dtype=np.float32)
        learner.agent_steps = 250
    coordinator.poll()
    frozen = coordinator.league.historical_ids()
    assert len(frozen) >= 1
    damaged = frozen[0]
    _noise(coordinator.params.path(damaged))
    assert coordinator.frozen_params(damaged) is None
    assert damaged in coordinator.league.withdrawn and damaged not in coordinator.league.historical_ids()
    assert damaged not in coordinator.league.snapshots_of("terran_main_agent_0")
    events = coordinator.take_events()
    assert [(e["kind"], e["player_id"]) for e in events] == [("withdrawn", damaged)]
    assert "corrupt" in events[0]["reason"] and damaged in events[0]["reason"]
    assert [(e["kind"], e["player_id"]) for e in coordinator.history.events()][-1] == ("withdrawn", damaged)
    assert coordinator.frozen_params(damaged) is None and not coordinator.take_events()   # once
    for agent in coordinator.agent_ids():
        assert damaged not in coordinator.match_distribution(agent)["opponents"]
        for _ in range(20):
            assert coordinator.request_match(agent).opponent_id != damaged
    assert all(damaged not in (m["home"], m["away"]) for m in coordinator.evaluation_matches(50))
    nash = coordinator.publish_meta_game()["nash"]
    assert nash[damaged] == 0.0 and sum(nash.values()) == pytest.approx(1.0)
    coordinator.close()
    resumed = Coordinator(coordinator.league.config, str(tmp_path), seed=3, config=NEVER)
    assert damaged in resumed.league.withdrawn and damaged not in resumed.league.historical_ids()
    assert resumed.frozen_params(damaged) is None


class _MeteredLearner(StrategyLearner):
    """A learner whose metrics a test sets: version, skipped and dispatched updates."""

    def __init__(self):
        super().__init__(np.zeros(3))
        self.m = {"version": 0, "updates_skipped": 0, "updates_dispatched": 0, "steps": 0}

    def metrics(self):
        return dict(self.m)


def test_a_learner_whose_updates_are_all_skipped_or_that_gets_no_experience_is_named(tmp_path):
    """Issue 31, "no silent stall": `stall_skipped_updates` skipped updates in a row, or no
    update for `stall_seconds`, gives a "stalled" event (take_events and league.db) naming the
    learner and why, once; a "recovered" event when it applies updates again."""
    now = [1000.0]
    config = LeagueConfig(races=("terran",), snapshots=SNAPSHOTS, initial_snapshots=False)
    coordinator = Coordinator(config, str(tmp_path), seed=3, clock=lambda: now[0],
                              config=CoordinatorConfig(meta_game_every_seconds=float("inf"),
                                                       checkpoint_every_seconds=float("inf"),
                                                       stall_skipped_updates=10, stall_seconds=60.0))
    learners = {a: _MeteredLearner() for a in coordinator.agent_ids()}
    coordinator.set_learners(learners)
    nan, idle = "terran_main_agent_0", "terran_main_exploiter_0"
    healthy = [a for a in learners if a not in (nan, idle)]
    learners[idle].m["updates_dispatched"] = 5   # it has learnt (compiled its first update), then stops

    def reading(seconds, **changes):
        now[0] += seconds
        for agent, learner in learners.items():
            learner.m["updates_dispatched"] += 5 if agent != idle else 0
            learner.m["version"] += 5 if agent not in (nan, idle) else 0
        for agent, m in changes.items():
            learners[agent].m.update(m(learners[agent].m))
        coordinator.record_learners()
        return [(e["kind"], e["agent_id"]) for e in coordinator.take_events()]

    assert reading(0) == []
    skip5 = {nan: lambda m: {"updates_skipped": m["updates_skipped"] + 5}}
    assert reading(10, **skip5) == []                      # 5 in a row
    assert reading(10, **skip5) == [("stalled", nan)]      # 10 in a row
    assert reading(10, **skip5) == []                      # said once
    assert reading(40) == [("stalled", idle)]              # 70 s (>= 60) without an update
    events = {e["agent_id"]: e for e in coordinator.history.events() if e["kind"] == "stalled"}
    assert "skipped as non-finite" in events[nan]["reason"] and "10 updates" in events[nan]["reason"]
    assert "no update for 70 s" in events[idle]["reason"]   # read at 70 s
    assert all(a not in events for a in healthy)
    back = {nan: lambda m: {"version": m["version"] + 1}, idle: lambda m: {"updates_dispatched": 1e6, "version": 1}}
    assert sorted(reading(10, **back)) == sorted([("recovered", nan), ("recovered", idle)])
    assert [e["kind"] for e in coordinator.history.events()][-2:] == ["recovered", "recovered"]

    # a run stopped while a learner was stalled: the next run records its recovery
    assert reading(10, **skip5) == [] and reading(10, **skip5) == [("stalled", nan)]
    coordinator.close()
    coordinator = Coordinator(config, str(tmp_path), seed=3, clock=lambda: now[0],
                              config=CoordinatorConfig(meta_game_every_seconds=float("inf"),
                                                       checkpoint_every_seconds=float("inf"),
                                                       stall_skipped_updates=10, stall_seconds=60.0))
    coordinator.set_learners(learners)
    assert reading(0) == []
    assert reading(10, **{nan: lambda m: {"version": m["version"] + 1}}) == [("recovered", nan)]


def test_a_device_learner_waiting_for_its_turn_in_a_round_is_not_named_stalled(tmp_path):
    """With `--device.main_agent_chunks` an exploiter's chunk comes once a round, after the
    main agents' (session 27's 40-minute run: 17 false "stalled" events for exploiters that
    waited ~185 s, at `stall_seconds` 180). Time spent waiting for its turn
    (`waiting_for_turn`) is not counted; a learner whose own turn brings no update is named."""
    now = [1000.0]
    config = LeagueConfig(races=("terran",), snapshots=SNAPSHOTS, initial_snapshots=False)
    coordinator = Coordinator(config, str(tmp_path), seed=3, clock=lambda: now[0],
                              config=CoordinatorConfig(meta_game_every_seconds=float("inf"),
                                                       checkpoint_every_seconds=float("inf"),
                                                       stall_seconds=60.0))
    learners = {a: _MeteredLearner() for a in coordinator.agent_ids()}
    coordinator.set_learners(learners)
    waiting = "terran_main_exploiter_0"
    learners[waiting].m["waiting_for_turn"] = 1.0
    learners[waiting].m["updates_dispatched"] = 5   # its first chunk is done: not compiling

    def reading(seconds):
        now[0] += seconds
        for agent, learner in learners.items():
            if agent != waiting:
                learner.m["updates_dispatched"] += 5
                learner.m["version"] += 5
        coordinator.record_learners()
        return [(e["kind"], e["agent_id"]) for e in coordinator.take_events()]

    assert reading(0) == []
    assert [reading(50) for _ in range(6)] == [[]] * 6   # 300 s without an update, all of it waiting
    learners[waiting].m["waiting_for_turn"] = 0.0        # its turn: no update comes
    assert reading(30) == []
    assert reading(40) == [("stalled", waiting)]         # 70 s of its own turn
    reason = [e for e in coordinator.history.events() if e["kind"] == "stalled"][-1]["reason"]
    assert "no update for 70 s" in reason
    coordinator.close()


def test_a_learner_compiling_its_first_chunk_is_not_named_stalled_but_one_that_stops_after_learning_is(tmp_path):
    """Issue 58, a quiet first hour: a fresh SMAX league's learners compile their first chunk
    for minutes (no update yet: `updates_dispatched` 0), and the old watch said "stalled: ...
    no update for 187 s" at `stall_seconds`. A learner without its first update since it
    started is compiling: named only after `stall_compile_seconds`, as "compiling for N min";
    one that has learnt and then gets no update is named at `stall_seconds` as before."""
    now = [1000.0]
    config = LeagueConfig(races=("terran",), snapshots=SNAPSHOTS, initial_snapshots=False)
    coordinator = Coordinator(config, str(tmp_path), seed=3, clock=lambda: now[0],
                              config=CoordinatorConfig(meta_game_every_seconds=float("inf"),
                                                       checkpoint_every_seconds=float("inf"),
                                                       stall_seconds=180.0, stall_compile_seconds=900.0))
    learners = {a: _MeteredLearner() for a in coordinator.agent_ids()}
    coordinator.set_learners(learners)
    slow, stops = "terran_main_agent_0", "terran_main_exploiter_0"   # compiles for 20 min; learns, then stops
    others = [a for a in learners if a not in (slow, stops)]

    def reading(seconds, learning):
        now[0] += seconds
        for agent in learning:
            learners[agent].m["updates_dispatched"] += 8
            learners[agent].m["version"] += 8
        coordinator.record_learners()
        return [(e["kind"], e["agent_id"]) for e in coordinator.take_events()]

    assert reading(0, []) == []                          # every learner compiling
    assert [reading(60, []) for _ in range(5)] == [[]] * 5   # 300 s without a first update: compiling
    assert reading(10, [stops, *others]) == []           # their first chunks are done
    assert [reading(60, others) for _ in range(2)] == [[]] * 2
    assert reading(60, others) == [("stalled", stops)]   # 490 s: 180 s since its last update
    assert [reading(60, others) for _ in range(6)] == [[]] * 6   # 850 s: the slow one still compiling
    assert reading(60, others) == [("stalled", slow)]    # 910 s >= 15 min without a first update
    reasons = {e["agent_id"]: e["reason"] for e in coordinator.history.events() if e["kind"] == "stalled"}
    assert reasons[stops].startswith("no update for 180 s")
    assert reasons[slow].startswith("compiling for 15 min")
    assert set(reasons) == {stops, slow}
    assert reading(60, [slow, stops, *others]) == [("recovered", slow), ("recovered", stops)]

    # a learner that restarts (its count from 0 again) compiles again: not named at 180 s
    learners[slow].m["updates_dispatched"] = 0
    assert [reading(60, [stops, *others]) for _ in range(5)] == [[]] * 5
    # a learner stalled when the run stopped is not "recovered" by the restart, only by an update
    assert [reading(60, others) for _ in range(3)][-1] == [("stalled", stops)]
    coordinator.close()
    for learner in learners.values():
        learner.m["updates_dispatched"] = 0   # every learner restarts with the league
    coordinator = Coordinator(config, str(tmp_path), seed=3, clock=lambda: now[0],
                              config=CoordinatorConfig(meta_game_every_seconds=float("inf"),
                                                       checkpoint_every_seconds=float("inf")))
    coordinator.set_learners(learners)
    assert [reading(60, []) for _ in range(5)] == [[]] * 5    # compiling: neither stalled nor recovered
    assert reading(10, [stops]) == [("recovered", stops)]
    coordinator.close()


def test_the_progress_line_says_compiling_until_the_first_update(tmp_path):
    """Issue 58: the progress line said `learner updates 0.0/s` for the minutes a fresh league
    compiles; it says `compiling` until a learner's first update, then the rate, naming how
    many still compile."""
    import io

    from experiments.config import RunConfig
    from experiments.supervisor import Supervisor

    now = [1000.0]
    config = LeagueConfig(races=("terran",), snapshots=SNAPSHOTS, initial_snapshots=False)
    coordinator = Coordinator(config, str(tmp_path), seed=3, clock=lambda: now[0], config=NEVER)
    learners = {a: _MeteredLearner() for a in coordinator.agent_ids()}
    coordinator.set_learners(learners)

    def line():
        out = io.StringIO()
        Supervisor(RunConfig.make(game="matrix_rps"), coordinator, out).report(fresh=True)
        return out.getvalue()

    first_line = line()
    assert "learner updates compiling  " in first_line    # no reading yet
    assert "/min" not in first_line   # players a minute only once a minute is in (it read 25165824/min)
    now[0] += 60.0
    assert "learner updates compiling  " in line(), line()   # two readings, no update: not "0.0/s"
    first = "terran_main_agent_0"
    learners[first].m["updates_dispatched"] = 60
    now[0] += 60.0
    assert f"learner updates 0.5/s ({len(learners) - 1} compiling)" in line(), line()
    for learner in learners.values():
        learner.m["updates_dispatched"] += 120
    now[0] += 60.0
    text = line()
    assert "compiling" not in text and "learner updates " in text and "/s (slowest " in text, text
    coordinator.close()


def test_updates_per_second_are_over_the_last_two_minutes_and_the_progress_line_names_the_slowest(tmp_path):
    """A device learner's updates come a chunk at a time (here 320 every 30 s): over single
    10 s readings its rate read 0 two times in three; over the last two minutes it reads the
    32/3 per second it learns. The progress line shows the slowest learner beside the total."""
    import io

    from experiments.config import RunConfig
    from experiments.supervisor import Supervisor

    now = [1000.0]
    config = LeagueConfig(races=("terran",), snapshots=SNAPSHOTS, initial_snapshots=False)
    coordinator = Coordinator(config, str(tmp_path), seed=3, clock=lambda: now[0], config=NEVER)
    learners = {a: _MeteredLearner() for a in coordinator.agent_ids()}
    coordinator.set_learners(learners)
    chunked, steady = "terran_main_agent_0", "terran_main_exploiter_0"
    rates = []
    for k in range(1, 25):
        now[0] += 10.0
        for agent, learner in learners.items():
            learner.m["updates_dispatched"] += 320 * (k % 3 == 0) if agent == chunked else 200
        metrics = coordinator.record_learners()
        rates.append(metrics[chunked].get("updates_per_second"))
    assert all(r == pytest.approx(320 / 30) for r in rates[12:]), rates   # once two minutes are in
    assert metrics[steady]["updates_per_second"] == pytest.approx(20.0)
    out = io.StringIO()
    Supervisor(RunConfig.make(game="matrix_rps"), coordinator, out).report()
    assert f"(slowest {chunked} 10.7/s)" in out.getvalue(), out.getvalue()
    assert "heuristic" not in out.getvalue()
    # --device.scripted_slots: the main agent's training games against the heuristic, named
    learners[chunked].m["heuristic_win_rate"] = 0.75
    out = io.StringIO()
    Supervisor(RunConfig.make(game="matrix_rps"), coordinator, out).report(fresh=True)
    assert "vs heuristic (training games): terran 0.75" in out.getvalue(), out.getvalue()
    assert "drawn" not in out.getvalue()
    learners[chunked].m["heuristic_draw_rate"] = 0.3   # and its draws, where there are any
    out = io.StringIO()
    Supervisor(RunConfig.make(game="matrix_rps"), coordinator, out).report(fresh=True)
    assert "vs heuristic (training games): terran 0.75 (30% drawn)" in out.getvalue(), out.getvalue()
    learners[chunked].m["heuristic_forced_win_rate"] = 0.25   # --heuristic_forced_slots' games
    out = io.StringIO()   # a game without tasks of its scripted opponent says nothing of them
    Supervisor(RunConfig.make(game="matrix_rps"), coordinator, out).report(fresh=True)
    assert "forced" not in out.getvalue(), out.getvalue()
    # SMAX's words for them (`ScriptedOpponent.progress`)
    smax = RunConfig.make(init="none")
    out = io.StringIO()
    Supervisor(smax, coordinator, out).report(fresh=True)
    assert "vs heuristic (training games): terran 0.75 (30% drawn) forced armies 0.25" in out.getvalue()
    del learners[chunked].m["heuristic_win_rate"]   # every heuristic slot forced
    out = io.StringIO()
    Supervisor(smax, coordinator, out).report(fresh=True)
    assert "vs heuristic (training games): terran forced armies 0.25" in out.getvalue(), out.getvalue()
    learners[chunked].m["heuristic_forced_handicap"] = 0.4   # --heuristic_forced_handicap
    out = io.StringIO()
    Supervisor(smax, coordinator, out).report(fresh=True)
    assert "vs heuristic (training games): terran forced armies 0.25 (handicap 40%)" in out.getvalue()


def test_a_nash_conv_that_is_not_finite_is_not_recorded(tmp_path):
    """A main agent whose parameters hold NaN has a NaN NashConv: it is left out of league.db
    (whose column is NOT NULL: SQLite stores NaN as NULL), and the evaluator goes on."""
    coordinator, _ = make(tmp_path)
    coordinator.record_exploitability({"nash": 0.25, "terran_main_agent_0": float("nan")})
    assert [(s, v) for _, s, v in coordinator.history.exploitability_history()] == [("nash", 0.25)]


def test_the_progress_line_shows_the_main_agents_first_and_latest_win_rate_against_the_builtin_ai(tmp_path):
    """Issue 57: evaluator_0's measurements against the game's scripted opponent reach the
    progress line as each main agent's first -> latest win rate over the opponent's races
    (weighted by games, draws half), and a resumed coordinator keeps the first from league.db."""
    import io

    from experiments.config import RunConfig
    from experiments.supervisor import Supervisor

    config = LeagueConfig(races=("terran", "zerg"), snapshots=SNAPSHOTS, initial_snapshots=False)
    coordinator = Coordinator(config, str(tmp_path), seed=3, config=NEVER)
    coordinator.set_learners({a: _MeteredLearner() for a in coordinator.agent_ids()})

    def rows(player, rates):   # (opponent race, wins, draws, games) -> evaluator rows
        return [{"player_id": player, "version": 1, "race": player.split("_")[0], "opponent_race": race,
                 "win_rate": (wins + 0.5 * draws) / games, "games": games, "wins": wins, "draws": draws,
                 "losses": games - wins - draws} for race, wins, draws, games in rates]

    def line(c):
        out = io.StringIO()
        Supervisor(RunConfig.make(game="matrix_rps"), c, out).report()
        return out.getvalue()

    assert "built-in AI" not in line(coordinator)    # nothing measured: nothing said
    coordinator.record_heuristic(rows("terran_main_agent_0", [("terran", 10, 0, 20), ("zerg", 2, 4, 20)]))
    coordinator.record_heuristic(rows("terran_main_agent_0", [("terran", 15, 0, 20), ("zerg", 10, 0, 60)]))
    # first: (10 + 2 + 2) / 40 = 0.35; latest: (15 + 10) / 80 = 0.3125
    assert ("the run's agent (RUN_DIR:result:RACE) vs built-in AI (evaluator, first -> latest): terran 0.35 -> 0.31"
            in line(coordinator)), line(coordinator)
    coordinator.close()
    resumed = Coordinator(config, str(tmp_path), seed=3, config=NEVER)
    resumed.set_learners({a: _MeteredLearner() for a in resumed.agent_ids()})
    resumed.record_heuristic(rows("terran_main_agent_0", [("terran", 20, 0, 20)]))
    assert "terran 0.35 -> 1.00" in line(resumed), line(resumed)
    resumed.close()


def test_the_league_checkpoint_keeps_its_arrays_exactly_and_reads_the_older_encoding():
    import json
    import zlib

    from league.league import League

    league = League(LeagueConfig(), np.random.default_rng(0))
    agents = league.learning_agent_ids()
    league.record_counts(agents[0], agents[1], 3.0, 1.0, 2.0, 1.0)
    league.payoff.set_exact(agents[0], agents[2], 0.625, 0.25)
    state = {"league": league.state(), "last_game_id": 7}
    back = unpack_state(pack_state(state))
    payoff, restored = state["league"]["payoff"], back["league"]["payoff"]
    for key in ("wins", "draws", "scores", "exact_pairs", "exact_rates", "exact_scores"):
        assert restored[key].dtype == payoff[key].dtype and restored[key].shape == payoff[key].shape
        np.testing.assert_array_equal(restored[key], payoff[key])
    again = League.from_state(back["league"])
    np.testing.assert_array_equal(again.payoff.score_matrix(), league.payoff.score_matrix())
    assert back["last_game_id"] == 7
    # a checkpoint written before arrays were packed as bytes held them as JSON lists
    wins = np.array([[0.0, 2.5], [1.0, 0.0]], np.float32)
    older = zlib.compress(json.dumps({"payoff": {"wins": {"__array__": wins.tolist(), "dtype": "float32"}}}).encode())
    np.testing.assert_array_equal(unpack_state(older)["payoff"]["wins"], wins)
    # a cut or damaged checkpoint is zlib.error or ValueError (the reader turns either into
    # HistoryError naming the file)
    packed = pack_state({"wins": wins})
    for damaged in (packed[:-3], packed[:8], packed[:-20] + bytes(20)):
        with pytest.raises((ValueError, zlib.error)):
            unpack_state(damaged)


def test_checkpoint_arrays_that_do_not_compress_are_stored_as_they_are_and_still_checked():
    import json
    import struct
    import zlib

    from coordinator.league_db import STATE_MAGIC

    dense = np.random.default_rng(0).uniform(0, 1, (300, 300))       # a tournament's payoff: noise
    sparse = np.zeros((300, 300), np.float32)                         # a real league's: mostly zeros
    sparse[3, :5] = [1, 2, 3, 4, 5]
    packed = pack_state({"dense": dense, "sparse": sparse})
    assert dense.nbytes <= len(packed) < dense.nbytes + sparse.nbytes // 10   # dense raw, sparse zlib'd
    back = unpack_state(packed)
    for key, array in (("dense", dense), ("sparse", sparse)):
        assert back[key].dtype == array.dtype
        np.testing.assert_array_equal(back[key], array)
    # a flipped byte inside the stored (uncompressed) array is caught by its CRC-32
    at = packed.index(dense.tobytes()[:64]) + dense.nbytes // 2
    damaged = packed[:at] + bytes([packed[at] ^ 0xFF]) + packed[at + 1:]
    with pytest.raises(ValueError, match="CRC-32"):
        unpack_state(damaged)
    # a checkpoint of the same encoding written before the "zlib" key (every array compressed)
    head = zlib.compress(json.dumps({"dense": {"__blob__": 0, "dtype": dense.dtype.str,
                                               "shape": list(dense.shape)}}).encode())
    blob = zlib.compress(dense.tobytes())
    before = STATE_MAGIC + struct.pack("<I", len(head)) + head + struct.pack("<Q", len(blob)) + blob
    np.testing.assert_array_equal(unpack_state(before)["dense"], dense)


def test_a_learner_whose_chunks_come_further_apart_than_the_window_reads_its_chunk_rate():
    """An exploiter's one chunk a round beside main agents' nine (`--device.main_agent_chunks`)
    can come further apart than the rate's two-minute window: over the window alone it read 0
    between chunks ("slowest ... 0.0/s"). Here 32 updates every 200 s, read every 10 s: from the
    second chunk on, every reading lies between 32/200 (over the whole of its latest chunk) and
    32/120 (one chunk in the window), never 0; once it stops, its rate falls with the time since
    the reading before its last chunk."""
    from coordinator.learner_watch import UpdateRates

    rates = UpdateRates(window=120.0)
    read = [rates.add("x", 32.0 * (t // 200), float(t)) for t in range(0, 1210, 10)]
    assert all(32 / 200 - 1e-9 <= r <= 32 / 120 + 1e-9 for r in read[40:]), read[40:]
    later = [rates.add("x", 32.0 * 6, float(t)) for t in range(1210, 3000, 10)]
    assert later[-1] == pytest.approx(32 / (2990 - 1190))
    assert all(a >= b for a, b in zip(later[12:], later[13:]))
    # a steady learner reads as before: over the last two minutes
    steady = [rates.add("y", 5.0 * t, float(t)) for t in range(0, 600, 10)]
    assert steady[-1] == pytest.approx(5.0)
