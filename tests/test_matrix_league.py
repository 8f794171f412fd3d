"""The matrix-game league does what the papers report (Balduzzi et al. 2019; AlphaStar)."""

import subprocess
import sys

import numpy as np
import pytest

from actors.games import matrix_games
from experiments.matrix_league import MatrixLeagueConfig, StrategySpace, run


def angle_travelled(points):
    angles = np.unwrap(np.arctan2([p[1] for p in points], [p[0] for p in points]))
    return abs(angles[-1] - angles[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_self_play_cycles_on_the_disc_game_while_the_league_nash_mixture_falls(seed):
    sp = run(MatrixLeagueConfig(game="disc", matchmaker="self_play", iterations=400, seed=seed))
    late = sp[300:]
    # Self-play: the agent keeps circling the disc, always fully exploitable by a best response.
    assert min(r.main_exploitability for r in late) > 0.45
    assert all(b.main_exploitability >= a.main_exploitability - 1e-9 for a, b in zip(sp, sp[1:]))
    assert angle_travelled([r.main_strategy for r in late]) > 2 * np.pi
    league = run(MatrixLeagueConfig(game="disc", matchmaker="league", iterations=200, seed=seed))
    start = league[0].nash_exploitability
    assert start > 0.1
    assert league[-1].nash_exploitability < 0.02 < start
    assert league[-1].league_size > 10


def test_exploitability_of_mixtures_is_exact():
    rng = np.random.default_rng(0)
    space = StrategySpace("rps", rng)
    assert space.exploitability(np.array([1 / 3] * 3)) == pytest.approx(0.0)
    assert space.exploitability(np.array([1.0, 0, 0])) == pytest.approx(0.5)
    disc = StrategySpace("disc", rng)
    assert disc.exploitability(np.array([0.3, 0.4])) == pytest.approx(0.25)  # |m| / 2
    # the disc best response really attains |m|: u = A m / |A m|
    m = np.array([0.3, 0.4])
    u = matrix_games.DISC_MATRIX @ m / np.linalg.norm(m)
    assert matrix_games.disc_payoff(u, m) == pytest.approx(0.5)


def test_matrix_games_are_antisymmetric_with_known_values():
    b = matrix_games.blotto(5, 3)
    assert b.num_actions == 21
    i, j = b.action_names.index("2-2-1"), b.action_names.index("5-0-0")
    assert b.payoff_matrix[i, j] == 1.0  # wins two fields, loses one
    assert matrix_games.rock_paper_scissors().payoff(np.eye(3)[1], np.eye(3)[0]) == 1.0
    r = matrix_games.random_nontransitive(6, seed=3)
    np.testing.assert_allclose(r.payoff_matrix, -r.payoff_matrix.T)


def test_cli_prints_progress_and_rejects_bad_flags():
    ok = subprocess.run(
        [sys.executable, "-m", "experiments.matrix_league", "--game=rps", "--iterations=5", "--compare_seeds=1"],
        capture_output=True, text=True, timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("Nash mixture exploitability") >= 5
    assert "| league |" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "experiments.matrix_league", "--game=chess"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode != 0 and "chess" in bad.stderr
