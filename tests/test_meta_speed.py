"""The Nash solver at league scale (issue 55: the Nash over 1,000 players in < 2 s).

A random tournament's Nash support is about half the players: the worst case, once 12-15 s
in one LP over everyone. Every answer here is checked against references that share no code
with league.meta: a best response computed by hand, scipy's linprog on the textbook
formulation, and a tournament whose equilibrium is known in closed form."""

import time

import numpy as np
import pytest
import scipy.optimize

from league import meta
from league.meta import nash_distribution

TOLERANCE = 1e-9


def random_tournament(n: int, seed: int, kind: str = "gamma") -> np.ndarray:
    """Win rates W with W + W^T = 1 (benchmarks/league_bench.py's worst case is "gamma")."""
    rng = np.random.default_rng(seed)
    if kind == "gamma":  # strengths of each pair drawn at random: P[a beats b] = w_ab / (w_ab + w_ba)
        w = rng.gamma(1.0, 2.0, (n, n))
        return w / (w + w.T)
    if kind == "uniform":
        upper = rng.uniform(0, 1, (n, n))
    else:  # "binary": a tournament in the graph sense, each game won outright
        upper = (rng.uniform(0, 1, (n, n)) < 0.5).astype(float)
    return np.triu(upper, 1) + np.tril(1 - upper.T, -1) + 0.5 * np.eye(n)


def best_response_gain(w: np.ndarray, x: np.ndarray) -> float:
    """What the best pure response gains against x, from the win rates themselves:
    max_a sum_b x_b W[a, b] - 1/2 (the mixture's own expected score is 1/2)."""
    expected_win_rate = np.array([np.dot(row, x) for row in w])
    return float(expected_win_rate.max() - 0.5 * x.sum())


def textbook_nash(w: np.ndarray) -> np.ndarray:
    """The row player's maximin mixture by the classic positive-payoff LP (von Neumann's
    reduction): with B = W + 1 > 0, min 1^T u s.t. B^T u >= 1, u >= 0, and x = u / sum u."""
    n = len(w)
    result = scipy.optimize.linprog(
        np.ones(n), A_ub=-(w + 1.0).T, b_ub=-np.ones(n), bounds=(0, None), method="highs"
    )
    assert result.success, result.message
    return result.x / result.x.sum()


def assert_is_nash(w: np.ndarray, x: np.ndarray, tolerance: float = TOLERANCE):
    assert x.shape == (len(w),) and np.isfinite(x).all()
    assert x.min() >= 0.0 and x.sum() == pytest.approx(1.0, abs=1e-12)
    assert best_response_gain(w, x) <= tolerance
    # As the column player too: no column holds x below 1/2 by more than the tolerance.
    assert float((x @ w).min()) >= 0.5 - tolerance


def test_random_tournament_of_1000_players_solved_to_an_equilibrium_in_seconds():
    w = random_tournament(1000, seed=2)  # benchmarks/league_bench.py's matrix
    start, wall = time.process_time(), time.perf_counter()
    x = nash_distribution(w)
    elapsed, wall = time.process_time() - start, time.perf_counter() - wall
    assert_is_nash(w, x)
    support = np.flatnonzero(x > 0)
    assert 400 < support.size < 600  # the hard case: about half the players
    # At an equilibrium of a symmetric zero-sum game every support player scores exactly 1/2.
    np.testing.assert_allclose(w[support] @ x, 0.5, atol=TOLERANCE)
    # Target 2 s (benchmarks/league_bench.py measures it, in wall time); was 12-36 s. This
    # process's CPU time, so that the bound measures the solver, not whatever else shares
    # the machine (pytest's other worker, other jobs: at a load of 14 on 2 cores, 0.5 s of
    # CPU took 1.3 s); 6 s leaves room for a slower CI machine.
    assert elapsed < 6.0, f"Nash over 1,000 players took {elapsed:.1f} s of CPU ({wall:.1f} s wall)"


@pytest.mark.parametrize("kind, n", [("gamma", 450), ("uniform", 351), ("binary", 420)])
def test_large_nash_matches_the_textbook_linear_program(kind, n):
    """Beyond 300 players (the interior point path; beyond 400 it also screens): the same
    mixture as linprog on the textbook formulation. A generic random tournament has one
    equilibrium, so they must agree entry by entry."""
    w = random_tournament(n, seed=7, kind=kind)
    x = nash_distribution(w)
    assert_is_nash(w, x)
    np.testing.assert_allclose(x, textbook_nash(w), atol=1e-8)


def test_cyclic_tournament_nash_is_uniform():
    """401 players on a circle, each beating the next 200: every player is alike, and the
    unique equilibrium is uniform (known in closed form)."""
    n = 401
    gap = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n
    w = np.where(gap == 0, 0.5, np.where(gap <= n // 2, 1.0, 0.0))
    np.testing.assert_allclose(nash_distribution(w), np.full(n, 1 / n), atol=1e-12)


def test_games_with_many_equilibria_keep_the_linear_program_answer(monkeypatch):
    """Players duplicated (a tie between each pair of twins) give a whole set of equilibria:
    no certificate of uniqueness holds, and the answer is the one the LP path alone gives
    (the solver's result before the interior point method), still an equilibrium."""
    base = random_tournament(200, seed=3, kind="uniform")
    twins = np.repeat(np.arange(200), 2)
    w = base[np.ix_(twins, twins)]
    x = nash_distribution(w)
    assert_is_nash(w, x)
    monkeypatch.setattr(meta, "_interior_point_nash", lambda *args, **kwargs: None)
    np.testing.assert_array_equal(x, nash_distribution(w))


def test_equalizer_certificate_accepts_only_the_equilibrium_support():
    rps = np.array([[0.0, -0.5, 0.5], [0.5, 0.0, -0.5], [-0.5, 0.5, 0.0]])
    np.testing.assert_allclose(meta._equalizer_nash(rps, np.arange(3), 1e-9), [1 / 3] * 3, atol=1e-12)
    assert meta._equalizer_nash(rps, np.array([0, 1]), 1e-9) is None  # even support: singular
    assert meta._equalizer_nash(rps, np.array([0]), 1e-9) is None  # paper beats rock
    # A transitive triple (0 beats 1 and 2, 1 beats 2): everyone scores alike against
    # (1, -1, 1), not a mixture; the equilibrium is player 0 alone.
    transitive = np.array([[0.0, 0.25, 0.25], [-0.25, 0.0, 0.25], [-0.25, -0.25, 0.0]])
    assert meta._equalizer_nash(transitive, np.arange(3), 1e-9) is None
    np.testing.assert_allclose(meta._equalizer_nash(transitive, np.array([0]), 1e-9), [1, 0, 0])
    # Rock-paper-scissors plus a dominated fourth player: support {0, 1, 2} certifies.
    game = np.zeros((4, 4))
    game[:3, :3] = rps
    game[3, :3], game[:3, 3] = -0.25, 0.25
    np.testing.assert_allclose(meta._equalizer_nash(game, np.arange(3), 1e-9), [1 / 3] * 3 + [0], atol=1e-12)


def test_a_player_dropped_at_every_try_is_retried_once_not_until_the_recursion_limit(monkeypatch):
    """Session 36: a Kuhn league's meta-game (~330 players, many tied pairs) made the interior
    point method drop a player that the end found needed, at every try: it called itself on
    the whole game until Python's recursion limit and the coordinator died. Forced here: no
    certificate, every step inside the restriction window with half the players' slacks large
    (dropped), and an all-ties game (a dropped player gains 0, so it is needed). The retry
    drops no one and gives up (None: the caller falls back to the LP)."""
    calls = []
    solve = meta._interior_point_nash

    def counted(*args, **kwargs):
        calls.append(kwargs.get("restrict", True))
        return solve(*args, **kwargs)

    def step(game, x, s, v):
        s = s.copy()
        s[len(s) // 2:] = 1e6   # far from the support: `keep` drops them
        return x, s, 5e-4   # between _RESTRICT_ABOVE and _RESTRICT_BELOW, above _CERTIFY_BELOW

    monkeypatch.setattr(meta, "_interior_point_nash", counted)
    monkeypatch.setattr(meta, "_interior_point_step", step)
    monkeypatch.setattr(meta, "_equalizer_nash", lambda *args: None)
    assert counted(np.zeros((12, 12)), 1e-9) is None
    assert calls == [True, False]
    # and the whole solver still answers such a game (the LP's most even mixture of ties)
    np.testing.assert_allclose(meta.nash_distribution(np.full((12, 12), 0.5)), np.full(12, 1 / 12))
