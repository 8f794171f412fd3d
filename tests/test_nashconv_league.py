"""Exact NashConv of league players: the tabular policy of a recurrent network equals what the
actor plays, mixtures match OpenSpiel's policy aggregator, and `experiments.nashconv` reads a
run directory."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from open_spiel.python.algorithms import expected_game_score, policy_aggregator

from actors.actor import Actor, ActorConfig
from actors.games.poker import openspiel as poker
from actors.games.poker import policy as poker_policy
from agents import make_network
from coordinator.history import LeagueHistory
from coordinator.param_store import ParamStore
from experiments import nashconv
from experiments.config import RunConfig

HIDDEN = 16


def network_and_params(game_name, seeds, scale=3.0):
    """A small reference network and parameter sets far from uniform (weights scaled up so
    that the LSTM's memory visibly changes the probabilities)."""
    spec = poker.make_spec(poker.load_game(game_name))
    network = make_network(spec, hidden_size=HIDDEN, core_size=HIDDEN)
    obs = spec.side(0).zero_observation()
    params = [jax.tree_util.tree_map(lambda x: np.asarray(x) * scale,
                                     network.init(jax.random.PRNGKey(s), obs, opponent_observation=obs))
              for s in seeds]
    return network, params


class OneOpponent:
    def __init__(self):
        self.results = []

    def request_match(self, agent_id):
        return {"opponent_id": "opponent", "branch": "test"}

    def report_results(self, results):
        self.results.extend(results)


class TwoPlayers:
    def __init__(self, agent_params, opponent_params):
        self._params = {"agent": agent_params, "opponent": opponent_params}

    def latest_params(self, player_id, min_version=None):
        if min_version is not None and min_version > 1:
            return None
        return 1, self._params[player_id]


def play_and_record(game_name, network, params_agent, params_opponent, steps):
    """Runs the real Actor on an OpenSpielPool and records, at every decision, the information
    state and the probability the actor gave the action it sampled."""
    game = poker.OpenSpielPool(game_name, batch_size=8)
    actor = Actor("actor", "agent", game, network, OneOpponent(), TwoPlayers(params_agent, params_opponent),
                  None, "unused", ActorConfig(unroll_length=4, episodes_per_match=12, seed=3))
    policy = actor._policy
    decisions = []

    def spy(*args):
        out = policy(*args)
        actions = (out[0], out[1])
        for i, state in enumerate(game.states):
            player = state.current_player()
            side = player ^ int(game.seats[i])  # the pool deals seats at random
            a = int(actions[side].game["action"][i])
            prob = float(np.exp(actions[side].log_probs["action"][i]))
            decisions.append((side, state.information_state_string(player), a, prob))
        return out

    actor._policy = spy
    try:
        actor.run(num_steps=steps)
    finally:
        actor.close()
    return decisions, actor.metrics()


@pytest.mark.parametrize("game_name,steps", [("kuhn_poker", 60), ("leduc_poker", 40)])
def test_tabular_policy_is_what_the_actor_plays(game_name, steps):
    network, (pa, pb) = network_and_params(game_name, (1, 2))
    game = poker.load_game(game_name)
    report = {}
    tables = [poker_policy.network_policy(game, network, pa, report=report),
              poker_policy.network_policy(game, network, pb)]
    assert report["max_infostate_spread"] < 1e-5  # the actor's inputs are a function of the infostate
    decisions, metrics = play_and_record(game_name, network, pa, pb, steps)
    assert metrics["matches"] >= 2 and metrics["episodes"] >= 40  # game and match boundaries crossed
    errors, memoryless_errors = [], []
    # The same network with its memory cut (core reset before every step): must NOT match, or
    # the comparison could not tell a history-blind converter from the right one.
    step = poker_policy.make_step_fn(network)
    blind_walk = poker_policy.PolicyWalk(
        game, network, step=lambda prm, obs, st, first: step(prm, obs, st, jnp.ones_like(first)))
    blind = [poker_policy.network_policy(game, network, p, walk=blind_walk, check_tolerance=1.0)
             for p in (pa, pb)]
    for side, key, action, prob in decisions:  # tables[side]: the policy of side's parameters
        index = tables[side].state_lookup[key]
        errors.append(abs(tables[side].action_probability_array[index, action] - prob))
        memoryless_errors.append(abs(blind[side].action_probability_array[index, action] - prob))
    assert len(decisions) >= steps * 8
    assert max(errors) < 2e-5, max(errors)
    assert max(memoryless_errors) > 1e-3


def test_mixture_equals_openspiel_policy_aggregator():
    network, params = network_and_params("kuhn_poker", (4, 5, 6))
    game = poker.load_game("kuhn_poker")
    tables = [poker_policy.network_policy(game, network, p) for p in params]
    weights = [0.5, 0.2, 0.3]
    mixed = poker_policy.mix_policies(game, tables, weights)
    aggregated = policy_aggregator.PolicyAggregator(game).aggregate(
        [0, 1], [tables, tables], [weights, weights])
    for state in mixed.states:
        want = aggregated.action_probabilities(state)
        got = mixed.action_probabilities(state)
        assert set(want) == set(got)
        np.testing.assert_allclose([got[a] for a in want], list(want.values()), atol=1e-9)
    # A mixture is not the average of the behaviour policies: reach weighting matters here.
    averaged = poker_policy.mix_policies(game, tables, weights)
    averaged.action_probability_array[:] = sum(
        w * t.action_probability_array for w, t in zip(weights, tables))
    assert abs(poker.nash_conv(game, averaged) - poker.nash_conv(game, mixed)) > 1e-4


def test_expected_payoffs_is_the_seat_averaged_chip_value():
    network, params = network_and_params("kuhn_poker", (7, 8, 9))
    game = poker.load_game("kuhn_poker")
    tables = [poker_policy.network_policy(game, network, p) for p in params]
    payoff = poker_policy.expected_payoffs(game, tables)
    np.testing.assert_allclose(payoff, -payoff.T, atol=1e-12)
    for a in range(3):
        for b in range(3):
            v_ab = expected_game_score.policy_value(game.new_initial_state(), [tables[a], tables[b]])[0]
            v_ba = expected_game_score.policy_value(game.new_initial_state(), [tables[b], tables[a]])[0]
            assert payoff[a, b] == pytest.approx(0.5 * (v_ab - v_ba), abs=1e-9)


def random_tables(game, count, seed):
    from open_spiel.python import policy as os_policy

    rng = np.random.default_rng(seed)
    tables = []
    for _ in range(count):
        table = os_policy.TabularPolicy(game)
        probs = rng.dirichlet(np.ones(game.num_distinct_actions()), len(table.state_lookup))
        probs = probs * table.legal_actions_mask
        table.action_probability_array[:] = probs / probs.sum(-1, keepdims=True)
        tables.append(table)
    return tables


def win_probability_by_walk(game, policy0, policy1):
    """P[player 0 wins] + 1/2 P[tie] by a plain recursive walk with OpenSpiel's states."""
    def walk(state):
        if state.is_terminal():
            r = state.returns()[0]
            return 1.0 if r > 0 else 0.5 if r == 0 else 0.0
        if state.is_chance_node():
            return sum(p * walk(state.child(a)) for a, p in state.chance_outcomes())
        policy = (policy0, policy1)[state.current_player()]
        probs = policy.action_probabilities(state)
        return sum(p * walk(state.child(a)) for a, p in probs.items() if p > 0)

    return walk(game.new_initial_state())


@pytest.mark.parametrize("game_name", ["kuhn_poker", "leduc_poker"])
def test_exact_payoffs_against_openspiel_walks(game_name):
    """`TerminalPaths.payoffs`: exact seat-averaged chips against OpenSpiel's
    expected_game_score and exact win rates (draws half) against a plain tree walk."""
    game = poker.load_game(game_name)
    tables = random_tables(game, 3, seed=4)
    paths = poker_policy.TerminalPaths(game)
    reach = np.stack([paths.reaches(t) for t in tables])
    win, chips = paths.payoffs(reach[0], reach[1:])
    for k, b in enumerate(tables[1:]):
        v_ab = expected_game_score.policy_value(game.new_initial_state(), [tables[0], b])[0]
        v_ba = expected_game_score.policy_value(game.new_initial_state(), [b, tables[0]])[0]
        assert chips[k] == pytest.approx(0.5 * (v_ab - v_ba), abs=1e-9)
        if game_name == "kuhn_poker":  # the plain walk is slow on Leduc
            as0 = win_probability_by_walk(game, tables[0], b)
            as1 = 1.0 - win_probability_by_walk(game, b, tables[0])
            assert win[k] == pytest.approx(0.5 * (as0 + as1), abs=1e-9)
    # a player against itself: chips 0, win rate 1/2
    w_self, c_self = paths.payoffs(reach[0], reach[:1])
    assert c_self[0] == pytest.approx(0.0, abs=1e-12) and w_self[0] == pytest.approx(0.5, abs=1e-12)


def test_nashconv_wiring_reads_a_run_directory(tmp_path):
    """Wiring: a hand-made run directory (a learning main agent's learner checkpoint, two
    frozen players in the parameter store, Nash weights in league.db) is read into the right
    policies and weights. The values are checked against independent references elsewhere:
    the mixture against OpenSpiel's PolicyAggregator (`test_mixture_equals_openspiel_policy_
    aggregator`), the tabular conversion against the actor's own play
    (`test_tabular_policy_is_what_the_actor_plays`), NashConv by OpenSpiel itself."""
    from learners import checkpoint

    config = RunConfig.make(game="kuhn_poker", races=1, runner="inprocess", run_dir=str(tmp_path),
                       hidden_size=HIDDEN, core_size=HIDDEN)
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    network, (p_main, p_a, p_b) = network_and_params("kuhn_poker", (10, 11, 12))
    history = LeagueHistory(str(tmp_path))
    history.add_player("any_main_agent_0", "main_agent", "any", None, 0, 1.0)
    history.add_player("any_main_agent_0#0", "main_agent", "any", "any_main_agent_0", 10, 2.0)
    history.add_player("any_league_exploiter_0#0", "league_exploiter", "any", "any_league_exploiter_0", 10, 3.0)
    history.add_nash({"any_main_agent_0#0": 0.5, "any_main_agent_0": 0.5}, 3.5)
    history.add_nash({"any_main_agent_0#0": 0.25, "any_league_exploiter_0#0": 0.75}, 4.0)
    history.close()
    store = ParamStore(str(tmp_path))
    store.save("any_main_agent_0#0", p_a, 5)
    store.save("any_league_exploiter_0#0", p_b, 6)
    checkpoint.save(checkpoint.path(str(tmp_path), "any_main_agent_0"),
                    checkpoint.Checkpoint(9, 0, 0, p_main, {}))

    game = poker.load_game("kuhn_poker")
    tables = [poker_policy.network_policy(game, network, p) for p in (p_main, p_a, p_b)]
    main = nashconv.measure_run(str(tmp_path), "main")
    assert main.nash_conv == pytest.approx(poker.nash_conv(game, tables[0]), abs=1e-9)
    nash = nashconv.measure_run(str(tmp_path), "nash")
    assert nash.weights == {"any_main_agent_0#0": 0.25, "any_league_exploiter_0#0": 0.75}
    want = poker.nash_conv(game, poker_policy.mix_policies(game, tables[1:], [0.25, 0.75]))
    assert nash.nash_conv == pytest.approx(want, abs=1e-9)
    # The average of the two publications over the frozen players: the first, without the
    # learning agent, is all on any_main_agent_0#0; (1 + 0.25) / 2 and 0.75 / 2.
    average = nashconv.measure_run(str(tmp_path), "nash_average")
    assert average.weights == pytest.approx({"any_main_agent_0#0": 0.625, "any_league_exploiter_0#0": 0.375})
    want = poker.nash_conv(game, poker_policy.mix_policies(game, tables[1:], [0.625, 0.375]))
    assert average.nash_conv == pytest.approx(want, abs=1e-9)
    # A withdrawn player (damaged parameters) leaves the average, as it leaves the league.
    history = LeagueHistory(str(tmp_path))
    history.add_event("withdrawn", "any_league_exploiter_0", "any_league_exploiter_0#0", 10, "test")
    history.close()
    assert nashconv.measure_run(str(tmp_path), "nash_average").weights == {"any_main_agent_0#0": 1.0}
    one = nashconv.RunReader(str(tmp_path)).measure_player("any_league_exploiter_0#0")
    assert one.nash_conv == pytest.approx(poker.nash_conv(game, tables[2]), abs=1e-9)
    with pytest.raises(ValueError, match="has no player 'nobody'"):
        nashconv.RunReader(str(tmp_path)).measure_player("nobody")
    exact = nashconv.measure_run(str(tmp_path), "nash", weights="exact")
    assert sum(exact.weights.values()) == pytest.approx(1.0)

