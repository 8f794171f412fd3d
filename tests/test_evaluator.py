"""The evaluator plays two frozen players, counts exactly the games asked for and reports them."""

import jax
import numpy as np
import pytest

from actors.evaluator import Evaluator, EvaluatorConfig, summarize
from actors.games import make_batch_game
from actors.games.smax_races import SmaxRacesConfig, fixed_size_menu
from agents import make_network

ROCK, PAPER = 0, 1


class Store:
    def __init__(self, players):
        self.players = players

    def latest_params(self, player_id, min_version=None):
        return self.players[player_id]


class Sink:
    def __init__(self):
        self.results = []

    def report_results(self, results):
        self.results.extend(results)


def always(network, params, action):
    """Parameters that play `action` with probability ~1 (a large bias on the policy head)."""
    params = jax.tree_util.tree_map(np.array, params)
    for module, leaves in params.items():
        if module.endswith("policy_action"):
            leaves["w"][:] = 0.0
            leaves["b"][:] = -50.0
            leaves["b"][action] = 50.0
    return params


def test_rock_paper_scissors_outcomes_are_counted_and_reported():
    game = make_batch_game("matrix_rps", 16)
    network = make_network(game.spec, dict(mlp_sizes=(8,), lstm_size=8))
    params = network.init(jax.random.PRNGKey(0), game.spec.side(0).zero_observation())
    store = Store({"paper": (3, always(network, params, PAPER)),
                   "rock": (5, always(network, params, ROCK))})
    sink = Sink()
    evaluator = Evaluator(game, network, store, sink)
    results = evaluator.evaluate("paper", "rock", num_games=37)
    summary = summarize(results)
    assert summary["games"] == 37 == len(sink.results) == len(results)
    assert summary["wins"] == 37 and summary["win_rate"] == 1.0
    assert {(r.home, r.away, r.outcome, r.length) for r in sink.results} == {
        ("paper", "rock", "win", 1)}
    mirror = summarize(evaluator.evaluate("rock", "rock", num_games=20))
    assert mirror["draws"] == 20
    assert len(sink.results) == 57
    assert evaluator.metrics()["games"] == 57


def test_smax_evaluation_plays_every_slot_its_quota():
    game = make_batch_game("smax_races", 4, config=SmaxRacesConfig(menu=fixed_size_menu(2),
                                                                   max_steps=8))
    network = make_network(game.spec, dict(embed_size=8, core_size=8, replica_size=8,
                                           pointer_size=4, value_size=8, attention_key_size=4), unit=True)
    params = network.init(jax.random.PRNGKey(0), game.spec.side(0).zero_observation())
    other = network.init(jax.random.PRNGKey(1), game.spec.side(0).zero_observation())
    evaluator = Evaluator(game, network, Store({"a": (0, params), "b": (0, other)}),
                          config=EvaluatorConfig(greedy=True))
    results = evaluator.evaluate("a", "b", num_games=10, races=("zerg", "protoss"))
    summary = summarize(results)
    assert summary["games"] == 10
    assert summary["wins"] + summary["draws"] + summary["losses"] == 10
    assert all(2 <= r.length <= 9 for r in results)
    assert (np.asarray(game.races) == [[2, 1]]).all()


def test_evaluator_node_plays_and_records_each_players_own_races(tmp_path):
    """The evaluator node plays every pair in the two players' races (not the game's default
    terran vs zerg), and league.db records the races the game itself was reset in."""
    from coordinator.coordinator import Coordinator
    from experiments.build import make_network as run_network
    from experiments.config import RunConfig
    from experiments.nodes import EvaluatorNode

    config = RunConfig.make(game="smax_races", races=2, evaluation_games=2, hidden_size=8, core_size=8,
                       run_dir=str(tmp_path))
    coordinator = Coordinator(config.league, config.run_dir)
    race = {p["player_id"]: p["race"] for p in coordinator.players()}
    assert set(race.values()) == {"terran", "protoss"}
    node = EvaluatorNode(config, coordinator, {})
    spec = node._evaluator.game.spec
    params = run_network(config, spec).init(jax.random.PRNGKey(0), spec.side(0).zero_observation())
    node._evaluator.params_source._learners = {}
    node._evaluator.params_source.latest_params = lambda player, min_version=None: (0, params)
    matchups = set()
    for _ in range(4):
        assert node.evaluate_next() == 2
    for game in coordinator.history.result_rows():
        assert game["source"] == "evaluator"
        assert (game["home_race"], game["away_race"]) == (race[game["home"]], race[game["away"]])
        matchups.add((game["home_race"], game["away_race"]))
    assert "protoss" in {r for m in matchups for r in m}


def kuhn_evaluator_with_a_nan_snapshot(tmp_path):
    """A Kuhn coordinator and evaluator node: the initial player (finite parameters, returned)
    and its snapshot any_main_agent_0#1 whose parameters are all NaN."""
    from coordinator.coordinator import Coordinator
    from experiments.build import initial_params
    from experiments.build import make_network as run_network
    from experiments.config import RunConfig
    from experiments.nodes import EvaluatorNode
    from league.rules import AddSnapshot

    config = RunConfig.make(game="kuhn_poker", hidden_size=8, core_size=8, run_dir=str(tmp_path))
    coordinator = Coordinator(config.league, config.run_dir)
    node = EvaluatorNode(config, coordinator, {})
    spec = node._evaluator.game.spec
    params = initial_params(run_network(config, spec), spec, 0, 3)
    coordinator.store_initial_params("any_main_agent_0", params)
    nan = jax.tree_util.tree_map(lambda x: np.full_like(np.asarray(x), np.nan), params)
    coordinator.params.save("any_main_agent_0#1", nan, 1)
    coordinator.league.apply(AddSnapshot("any_main_agent_0", "any_main_agent_0#1", 1, 0.0, "test"))
    return coordinator, node, params


def test_a_frozen_player_with_nan_parameters_is_withdrawn_by_the_exact_evaluator(tmp_path):
    """A snapshot of a learner whose updates were skipped as non-finite holds NaN: its exact
    payoffs are NaN, so the evaluator withdraws it (an event naming why) instead of reporting
    them (which stopped the run: the payoff refuses a NaN win rate)."""
    coordinator, node, _ = kuhn_evaluator_with_a_nan_snapshot(tmp_path)
    while node.exact_next():
        pass
    assert "any_main_agent_0#1" in coordinator.league.withdrawn
    events = coordinator.take_events()
    assert [(e["kind"], e["player_id"]) for e in events] == [("withdrawn", "any_main_agent_0#1")]
    assert "not finite" in events[0]["reason"]


def test_a_frozen_player_already_in_with_nan_parameters_is_withdrawn_when_the_next_one_meets_it(tmp_path):
    """A NaN player already in the exact meta-game (its payoffs reported before, e.g. by an
    older run): the next player's payoffs against it are NaN and against the others finite, so
    that opponent is withdrawn by name and the rest reported (before: dropped without a word)."""
    from league.rules import AddSnapshot

    coordinator, node, params = kuhn_evaluator_with_a_nan_snapshot(tmp_path)
    assert node.exact_next() == 1          # the initial player: nothing to play yet
    coordinator.report_exact("any_main_agent_0#1", {"any_main_agent_0#0": (0.5, 0.0)})   # in, as before
    coordinator.params.save("any_main_agent_0#2", params, 2)
    coordinator.league.apply(AddSnapshot("any_main_agent_0", "any_main_agent_0#2", 2, 0.0, "test"))
    assert node.exact_next() == 2          # #2 against #0 reported, #1 withdrawn
    assert coordinator.league.withdrawn.keys() == {"any_main_agent_0#1"}
    events = coordinator.take_events()
    assert [(e["kind"], e["player_id"]) for e in events] == [("withdrawn", "any_main_agent_0#1")]
    assert "not finite" in events[0]["reason"]


def test_evaluator_node_computes_exact_poker_payoffs_for_frozen_players(tmp_path):
    """Kuhn poker: the evaluator node turns each new frozen player into its exact tabular
    policy and reports its exact payoffs against the frozen players already in; the values
    are OpenSpiel's expected game scores of the two tabular policies, seats alternated."""
    from open_spiel.python.algorithms import expected_game_score

    from actors.games.poker import openspiel as poker
    from actors.games.poker import policy as poker_policy
    from coordinator.coordinator import Coordinator
    from experiments.build import initial_params
    from experiments.build import make_network as run_network
    from experiments.config import RunConfig
    from experiments.nodes import EvaluatorNode
    from league.rules import AddSnapshot

    config = RunConfig.make(game="kuhn_poker", hidden_size=8, core_size=8, run_dir=str(tmp_path))
    coordinator = Coordinator(config.league, config.run_dir)
    node = EvaluatorNode(config, coordinator, {})
    spec = node._evaluator.game.spec
    network = run_network(config, spec)
    params = {k: initial_params(network, spec, k, 3) for k in (0, 1)}
    coordinator.store_initial_params("any_main_agent_0", params[0])
    coordinator.params.save("any_main_agent_0#1", params[1], 1)
    coordinator.league.apply(AddSnapshot("any_main_agent_0", "any_main_agent_0#1", 1, 0.0, "test"))
    assert node.exact_next() == 1 and node.exact_next() == 2 and node.exact_next() == 0
    game = poker.load_game("kuhn_poker")
    a, b = (poker_policy.network_policy(game, network, params[k]) for k in (0, 1))
    v_ab = expected_game_score.policy_value(game.new_initial_state(), [a, b])[0]
    v_ba = expected_game_score.policy_value(game.new_initial_state(), [b, a])[0]
    scores = coordinator.league.payoff.score_matrix(["any_main_agent_0#1", "any_main_agent_0#0"])
    assert scores[0, 1] == pytest.approx(0.5 * (v_ba - v_ab), abs=1e-6)
    assert abs(scores[0, 1]) > 1e-4      # two different players
    assert node.metrics()["exact_players"] == 2

    # The exploitability curve: the Nash mixture's and the main agent's exact NashConv.
    stored = node._exact.params_source
    node._exact.params_source = type("Source", (), {"latest_params": lambda self, p, min_version=None: (
        stored.latest_params(p) if "#" in p else (0, params[1]))})()   # learning agents: params[1]
    weights = coordinator.publish_meta_game()["nash"]
    values = node.measure_exploitability()
    support = [(p, w) for p, w in weights.items() if w > 0]
    tables = {"any_main_agent_0#0": a}
    mixed = poker_policy.mix_policies(game, [tables.get(p, b) for p, _ in support], [w for _, w in support])
    assert values["nash"] == pytest.approx(poker.nash_conv(game, mixed), abs=1e-9)
    assert values["any_main_agent_0"] == pytest.approx(poker.nash_conv(game, b), abs=1e-9)
    rows = coordinator.history.exploitability_history()
    assert sorted(subject for _, subject, _ in rows) == ["any_main_agent_0", "nash", "nash_average"]
    # The average of the published mixtures over the frozen players (#0: a, #1: b): a second
    # publication all on #1, so the mean is (first restricted to #0 and #1, renormalised + #1) / 2.
    coordinator.history.add_nash({"any_main_agent_0#1": 1.0}, coordinator._clock() + 1.0)
    frozen = {p: w for p, w in support if "#" in p}
    first = {p: w / sum(frozen.values()) for p, w in frozen.items()}
    want = {p: (first.get(p, 0.0) + (p == "any_main_agent_0#1")) / 2 for p in ("any_main_agent_0#0", "any_main_agent_0#1")}
    assert coordinator.average_nash_weights() == pytest.approx({p: w for p, w in want.items() if w > 0})
    mixed = poker_policy.mix_policies(game, [a, b], [want["any_main_agent_0#0"], want["any_main_agent_0#1"]])
    assert node.measure_exploitability()["nash_average"] == pytest.approx(poker.nash_conv(game, mixed), abs=1e-9)


def test_the_evaluator_node_stops_without_waiting_for_its_evaluation_in_flight(tmp_path):
    """`stop()` while an evaluation is still running (its first program compiling, here held):
    `run` returns within a couple of seconds; an error of the evaluation while running is
    raised by `run` (the supervisor names the node)."""
    import threading
    import time

    from coordinator.coordinator import Coordinator
    from experiments.config import RunConfig
    from experiments.nodes import EvaluatorNode

    config = RunConfig.make(game="kuhn_poker", runner="inprocess", hidden_size=8, core_size=8,
                            run_dir=str(tmp_path))
    coordinator = Coordinator(config.league, config.run_dir)
    node = EvaluatorNode(config, coordinator, {})
    inside, release = threading.Event(), threading.Event()

    def held():
        inside.set()
        release.wait(60)
        return 0

    node.evaluate_next = held
    node.exact_next = lambda: 0
    runner = threading.Thread(target=node.run, daemon=True)
    try:
        runner.start()
        assert inside.wait(30)
        t0 = time.time()
        node.stop()
        runner.join(10)
        assert not runner.is_alive() and time.time() - t0 < 3
    finally:
        release.set()

    def broken():
        raise RuntimeError("the evaluation failed")

    node.evaluate_next = broken
    with pytest.raises(RuntimeError, match="the evaluation failed"):
        node.run()
    coordinator.close()


def test_the_progress_line_names_the_runs_agent_with_its_latest_nashconv(tmp_path):
    """Poker: the progress line names the run's agent (`RUN_DIR:result`, the Nash mixture the
    latest readings found less exploitable: the latest or the average) with the evaluator's
    latest exact NashConv of it beside the main agents' alone; nothing before the first reading."""
    from coordinator.coordinator import Coordinator
    from experiments.config import RunConfig
    from experiments.supervisor import result_agent

    config = RunConfig.make(game="kuhn_poker", runner="inprocess", run_dir=str(tmp_path))
    coordinator = Coordinator(config.league, config.run_dir)
    try:
        assert result_agent(coordinator.summary()["exploitability"]) == ""
        coordinator.record_exploitability({"nash": 0.0123, "nash_average": 0.02, "any_main_agent_0": 0.33})
        coordinator.record_exploitability({"nash": 0.0045, "nash_average": 0.01, "any_main_agent_0": 0.25})
        line = result_agent(coordinator.summary()["exploitability"])
        assert "the run's agent (RUN_DIR:result, the latest Nash mixture): NashConv 0.0045" in line
        assert "main agents alone: any 0.250" in line and "0.01" not in line
        coordinator.record_exploitability({"nash": 0.31, "nash_average": 0.2345, "any_main_agent_0": 1.5})
        line = result_agent(coordinator.summary()["exploitability"])
        assert "the run's agent (RUN_DIR:result, the average Nash mixture): NashConv 0.2345" in line
        assert "0.31" not in line and "main agents alone: any 1.500" in line
    finally:
        coordinator.close()


def test_a_core_share_rests_a_node_so_that_it_works_that_share_of_the_time():
    """--evaluator.core_share s: after w seconds of work the node rests w (1 - s) / s, so over
    work and rests it works s of the time (worked by hand: s = 0.25, 2 s of work, 6 s of rest)."""
    from experiments.config import ConfigError, RunConfig
    from experiments.nodes.base import CoreShare

    now = [0.0]
    share = CoreShare(0.25, clock=lambda: now[0])
    for work in (2.0, 0.5, 1.5):
        rest = share.worked(work)
        assert rest == pytest.approx(3 * work)
        now[0] += work + rest
    assert share.measured() == pytest.approx(0.25)
    assert CoreShare(1.0).worked(5.0) == 0.0          # 1: no rest
    for bad in (0.0, 1.5):
        with pytest.raises(ConfigError, match="core_share must be in"):
            RunConfig.make(game="matrix_rps", **{"evaluator.core_share": bad})
