"""Matrix games as one-step games: exact payoffs, outcomes whose expectation is the payoff."""

import numpy as np
import pytest

from actors.games import matrix, matrix_games
from actors.games.base import BatchGame, random_legal_actions


def play(game, a0, a1, seed=0):
    g = matrix.MatrixGameBatch(game, len(a0))
    g.reset(seed)
    return g.step(({"action": np.asarray(a0)}, {"action": np.asarray(a1)}))


def test_rock_paper_scissors_exact():
    ts = play("rps", [0, 1, 2, 0, 0], [2, 0, 1, 1, 0])  # R>S, P>R, S>P, R<P, R=R
    np.testing.assert_array_equal(ts.rewards[:, 0], [1, 1, 1, -1, 0])
    np.testing.assert_array_equal(ts.rewards[:, 1], -ts.rewards[:, 0])
    np.testing.assert_array_equal(ts.outcome, [1, 1, 1, -1, 0])
    assert ts.done.all()


@pytest.mark.parametrize("name", ["rps", "blotto", "random", "disc"])
def test_rewards_are_wired_to_the_games_own_matrix(name):
    """Wiring: rewards, signals and observations come from the game's payoff matrix. The
    matrices' values are checked by hand in the tests around this one (rock-paper-scissors,
    the disc game, Blotto)."""
    g = matrix.MatrixGameBatch(name, 64)
    assert isinstance(g, BatchGame)
    ts = g.reset(1)
    acts = random_legal_actions(np.random.default_rng(2), g.spec, ts.observations)
    ts = g.step(acts)
    expected = g.game.payoff_matrix[acts[0]["action"], acts[1]["action"]]
    np.testing.assert_allclose(ts.rewards[:, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(ts.signals["payoff"][:, 1], -expected, rtol=1e-6)
    for side in range(2):
        g.spec.side(side).check_observation(ts.observations[side], (64,))


def test_outcome_expectation_is_the_payoff():
    game = matrix_games.random_nontransitive(4, seed=3)
    i, j = np.unravel_index(np.argmax(game.payoff_matrix), game.payoff_matrix.shape)
    p = game.payoff_matrix[i, j]
    n = 20000
    ts = play(game, np.full(n, i), np.full(n, j), seed=5)
    assert set(np.unique(ts.outcome)) <= {-1, 1}
    assert ts.outcome.mean() == pytest.approx(p, abs=4 / np.sqrt(n))


def test_blotto_payoff_by_hand():
    """Colonel Blotto, 5 soldiers on 3 fields: the sign of fields won minus fields lost.
    (3,2,0) vs (1,1,3): won, won, lost: +1; (5,0,0) vs (2,2,1): won, lost, lost: -1;
    (2,2,1) vs (3,1,1): lost, won, tied: 0."""
    game = matrix_games.blotto(5, 3)
    index = {name: i for i, name in enumerate(game.action_names)}
    assert len(index) == 21  # allocations of 5 over 3 fields: C(7, 2)
    for a, b, value in [("3-2-0", "1-1-3", 1), ("5-0-0", "2-2-1", -1), ("2-2-1", "3-1-1", 0)]:
        assert game.payoff_matrix[index[a], index[b]] == value
        assert game.payoff_matrix[index[b], index[a]] == -value


def test_disc_game_is_the_disc_payoff():
    game = matrix.disc_game(num_angles=4, radii=(1.0,))
    pts = [np.zeros(2), np.array([1.0, 0]), np.array([0, 1.0]), np.array([-1.0, 0]), np.array([0, -1.0])]
    for a, v in enumerate(pts):
        for b, w in enumerate(pts):
            assert game.payoff_matrix[a, b] == pytest.approx(matrix_games.disc_payoff(v, w), abs=1e-12)
    # (1,0) vs (0,1): phi = v^T [[0,-1],[1,0]] w = -1.
    assert game.payoff_matrix[1, 2] == pytest.approx(-1.0)


def test_rejects_out_of_range_actions():
    g = matrix.MatrixGameBatch("rps", 2)
    g.reset(0)
    with pytest.raises(ValueError):
        g.step(({"action": np.array([0, 3])}, {"action": np.array([0, 0])}))
    with pytest.raises(ValueError, match="unknown"):
        matrix.make_game("chess")


def test_registry_builds_matrix_and_poker_games():
    from actors.games import make_batch_game

    assert make_batch_game("matrix_rps", 4).game.num_actions == 3
    assert make_batch_game("kuhn_poker", 4).spec.side(0).network_heads() == {"action": 2}
