"""OpenSpiel poker: the pool follows OpenSpiel's rules and our adapter gives OpenSpiel's NashConv."""

import subprocess
import sys

import numpy as np
import pyspiel
import pytest
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import exploitability

from actors.games.base import BatchGame, random_legal_actions
from actors.games.poker import openspiel as poker
from agents.specs import MASK_KEY
from experiments import nashconv


@pytest.mark.parametrize("game_name, expected", [("kuhn_poker", 11 / 12), ("leduc_poker", 4.7472)])
def test_uniform_nash_conv_matches_openspiel(game_name, expected):
    game = pyspiel.load_game(game_name)
    ours = poker.nash_conv(game, poker.policy_from_callable(game, poker.uniform_policy_fn))
    theirs = exploitability.nash_conv(game, os_policy.UniformRandomPolicy(game))
    assert ours == pytest.approx(theirs, abs=1e-9)
    assert ours == pytest.approx(expected, abs=1e-4)


def first_legal(obs):
    mask = obs[MASK_KEY][poker.ACTION_HEAD]
    return np.eye(mask.shape[-1])[np.argmax(mask, axis=-1)]


@pytest.mark.parametrize("game_name", ["kuhn_poker", "leduc_poker"])
def test_adapter_of_a_deterministic_policy_matches_openspiel(game_name):
    game = pyspiel.load_game(game_name)

    def reference(state):
        return {state.legal_actions()[0]: 1.0}

    theirs = exploitability.nash_conv(game, os_policy.tabular_policy_from_callable(game, reference))
    ours = poker.nash_conv(game, poker.policy_from_callable(game, first_legal))
    assert ours == pytest.approx(theirs, abs=1e-9)
    assert ours > 1.0  # always checking/calling is very exploitable


def test_adapter_rejects_bad_policies():
    game = pyspiel.load_game("leduc_poker")  # folding without a bet to call is illegal there
    with pytest.raises(ValueError, match="illegal"):
        poker.policy_from_callable(game, lambda obs: np.ones(obs[MASK_KEY]["action"].shape))
    with pytest.raises(ValueError, match="shape"):
        poker.policy_from_callable(game, lambda obs: np.ones((2, 2)))
    with pytest.raises(ValueError, match="non-finite"):
        poker.policy_from_callable(game, lambda obs: np.full(obs[MASK_KEY]["action"].shape, np.nan))


def test_npz_params_through_the_cli_loader(tmp_path):
    game = pyspiel.load_game("kuhn_poker")
    tabular = os_policy.TabularPolicy(game)
    rng = np.random.default_rng(0)
    table = {}
    for key, index in tabular.state_lookup.items():
        probs = rng.random(game.num_distinct_actions()) * tabular.legal_actions_mask[index]
        table[key] = probs / probs.sum()
        tabular.action_probability_array[index] = table[key]
    path = tmp_path / "policy.npz"
    np.savez(path, **table)
    expected = exploitability.nash_conv(game, tabular)
    assert nashconv.measure("kuhn_poker", str(path)) == pytest.approx(expected, abs=1e-9)
    np.savez(tmp_path / "short.npz", **dict(list(table.items())[:3]))
    with pytest.raises(ValueError, match="lacks"):
        nashconv.measure("kuhn_poker", str(tmp_path / "short.npz"))


def test_cli_prints_uniform_nash_conv_last():
    out = subprocess.run([sys.executable, "-m", "experiments.nashconv", "--game=kuhn_poker",
                          "--policy=uniform"], capture_output=True, text=True, check=True)
    assert float(out.stdout.strip().splitlines()[-1]) == pytest.approx(11 / 12, abs=1e-6)


@pytest.mark.parametrize("game_name", ["kuhn_poker", "leduc_poker"])
def test_pool_follows_openspiel(game_name):
    batch = 16
    pool = poker.OpenSpielPool(game_name, batch)
    assert isinstance(pool, BatchGame)
    rng = np.random.default_rng(1)
    ts = pool.reset(seed=3)
    finished = 0
    seats_seen = set()
    for _ in range(60):
        states_before = [s.clone() for s in pool.states]
        seats = pool.seats.copy()  # the OpenSpiel player side 0 plays, per game
        seats_seen.update(seats.tolist())
        for side in range(2):
            pool.spec.side(side).check_observation(ts.observations[side], (batch,))
        for i, state in enumerate(states_before):
            p = state.current_player()
            side = p ^ int(seats[i])
            obs = ts.observations[side]
            assert obs["acting"][i] and not ts.observations[1 - side]["acting"][i]
            np.testing.assert_array_equal(obs["info_state"][i], state.information_state_tensor(p))
            assert np.flatnonzero(obs[MASK_KEY]["action"][i]).tolist() == state.legal_actions()
        actions = random_legal_actions(rng, pool.spec, ts.observations)
        ts = pool.step(actions)
        np.testing.assert_array_equal(ts.rewards[:, 0], -ts.rewards[:, 1])
        for i, state in enumerate(states_before):
            seat = int(seats[i])
            state.apply_action(int(actions[state.current_player() ^ seat]["action"][i]))
            assert ts.done[i] == (state.is_terminal() and not state.is_chance_node())
            if ts.done[i]:
                finished += 1
                returns = state.returns()
                np.testing.assert_allclose(ts.rewards[i], [returns[seat], returns[1 - seat]])
                assert ts.outcome[i] == np.sign(returns[seat])
            else:
                assert ts.rewards[i].tolist() == [0.0, 0.0]
    assert finished > batch
    assert seats_seen == {0, 1}  # side 0 plays both OpenSpiel players


def test_pool_without_random_seats_keeps_side_0_as_player_0():
    pool = poker.OpenSpielPool("kuhn_poker", 8, random_seats=False)
    pool.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(10):
        pool.step(random_legal_actions(rng, pool.spec, pool._observations()))
        assert not pool.seats.any()


def test_pool_rejects_illegal_actions():
    pool = poker.OpenSpielPool("leduc_poker", 2)
    pool.reset(0)
    fold = {"action": np.array([0, 0])}  # fold with no bet to call: illegal at the root
    with pytest.raises(ValueError, match="illegal"):
        pool.step((fold, fold))
