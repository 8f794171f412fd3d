"""Meta-game solutions, population metrics and ratings against values worked by hand."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from league.meta import (
    average_nash,
    elo_ratings,
    elo_win_probability,
    exploitability,
    fully_known_players,
    nash_distribution,
    relative_population_performance,
    trueskill_ratings,
)

RPS = np.array([[0.5, 0.0, 1.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.5]])


def test_rock_paper_scissors_nash_is_uniform_and_pure_rock_is_exploitable():
    np.testing.assert_allclose(nash_distribution(RPS), [1 / 3] * 3, atol=1e-7)
    assert exploitability(RPS, [1 / 3] * 3) == pytest.approx(0.0, abs=1e-9)
    assert exploitability(RPS, [1.0, 0.0, 0.0]) == pytest.approx(0.5)  # paper beats rock
    assert exploitability(RPS, [0.5, 0.5, 0.0]) == pytest.approx(0.25)  # paper: 0.5*0.5 + 0.5*0


def test_a_player_that_beats_everyone_is_the_whole_nash():
    w = np.array([[0.5, 0.9, 0.8], [0.1, 0.5, 0.7], [0.2, 0.3, 0.5]])
    np.testing.assert_allclose(nash_distribution(w), [1, 0, 0], atol=1e-7)


def brute_force_exploitability(w, x):
    """max over pure responses a of sum_b x_b (W[a, b] - 1/2), by explicit loops."""
    best = -np.inf
    for a in range(len(w)):
        best = max(best, sum(x[b] * (w[a][b] - 0.5) for b in range(len(w))))
    return best


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 7), st.integers(0, 10**6))
def test_nash_of_random_symmetric_games_is_unexploitable(n, seed):
    rng = np.random.default_rng(seed)
    upper = rng.uniform(0, 1, (n, n))
    w = np.triu(upper, 1) + np.tril(1 - upper.T, -1) + 0.5 * np.eye(n)  # W + W^T = 1
    nash = nash_distribution(w)
    assert nash.min() >= 0 and nash.sum() == pytest.approx(1.0)
    assert exploitability(w, nash) == pytest.approx(brute_force_exploitability(w, nash), abs=1e-9)
    assert exploitability(w, nash) == pytest.approx(0.0, abs=1e-7)
    other = rng.dirichlet(np.ones(n))
    assert exploitability(w, other) >= -1e-9
    assert exploitability(w, other) == pytest.approx(brute_force_exploitability(w, other))


def test_average_nash_worked_by_hand():
    """Each publication restricted to the frozen players and renormalised, then the plain mean
    over the publications with weight on them: a -> 2/3, b -> 1/3; b -> 1; (only the learning
    agent L: skipped); a -> 1/4, c -> 3/4."""
    publications = [{"a": 0.5, "b": 0.25, "L": 0.25}, {"b": 1.0}, {"L": 1.0}, {"a": 0.2, "c": 0.6, "L": 0.2}]
    got = average_nash(publications, frozen={"a", "b", "c"})
    assert got == pytest.approx({"a": (2 / 3 + 1 / 4) / 3, "b": (1 / 3 + 1) / 3, "c": (3 / 4) / 3})
    assert sum(got.values()) == pytest.approx(1.0)
    assert average_nash([{"L": 1.0}], frozen={"a"}) == {}
    assert average_nash([], frozen={"a"}) == {}


def test_relative_population_performance_worked_by_hand():
    # payoff [[.3, .1], [-.2, .4]]: P mixes 3/4, 1/4; value 0.75*0.3 - 0.25*0.2 = 0.175
    assert relative_population_performance([[0.8, 0.6], [0.3, 0.9]]) == pytest.approx(0.175, abs=1e-9)
    assert relative_population_performance([[1.0, 0.0], [0.0, 1.0]]) == pytest.approx(0.0, abs=1e-9)
    # symmetric: Q against P is the negative
    assert relative_population_performance(1 - np.array([[0.8, 0.6], [0.3, 0.9]]).T) == pytest.approx(-0.175, abs=1e-9)


def test_elo_of_a_three_to_one_record_is_400_log10_3_apart():
    wins = np.array([[0.0, 75.0], [25.0, 0.0]])
    ratings = elo_ratings(wins, prior_games=0.0, anchor=1000)
    assert ratings[0] - ratings[1] == pytest.approx(400 * np.log10(3), abs=1e-2)
    assert ratings.mean() == pytest.approx(1000)
    assert elo_win_probability(ratings[0], ratings[1]) == pytest.approx(0.75, abs=1e-4)


def test_elo_orders_a_transitive_league_and_stays_finite_when_someone_never_loses():
    wins = np.array([[0, 10, 10], [0, 0, 10], [0, 0, 0]], dtype=float)
    ratings = elo_ratings(wins)
    assert np.isfinite(ratings).all() and ratings[0] > ratings[1] > ratings[2]


def test_trueskill_moves_winner_up_and_loser_down_symmetrically():
    ratings = trueskill_ratings([("a", "b", "win")])
    (mu_a, s_a), (mu_b, _s_b) = ratings["a"], ratings["b"]
    assert mu_a > 25 > mu_b and mu_a - 25 == pytest.approx(25 - mu_b) and s_a < 25 / 3
    flipped = trueskill_ratings([("b", "a", "loss")])
    assert flipped["a"][0] == pytest.approx(mu_a)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: nash_distribution([[0.5, 1.2], [-0.2, 0.5]]), "must lie in \\[0, 1\\]"),
        (lambda: nash_distribution([[0.5, np.nan], [0.5, 0.5]]), "must lie in \\[0, 1\\]"),
        (lambda: nash_distribution([[0.5, 0.5]]), "square"),
        (lambda: exploitability(RPS, [0.5, 0.5]), "probability vector of length 3"),
        (lambda: trueskill_ratings([("a", "b", "won")]), "unknown outcome"),
    ],
)
def test_meta_bad_input_names_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_nash_of_blotto_meta_game_is_unexploitable():
    allocs = [a for a in itertools.product(range(4), repeat=3) if sum(a) == 3]
    w = np.array([[0.5 + 0.5 * np.sign(sum(x > y for x, y in zip(a, b)) - sum(x < y for x, y in zip(a, b))) for b in allocs] for a in allocs])
    assert exploitability(w, nash_distribution(w)) == pytest.approx(0.0, abs=1e-7)


def test_among_many_nash_mixtures_the_most_even_is_returned():
    # Nobody has played anybody: every mixture is a Nash mixture; the league's is uniform.
    np.testing.assert_allclose(nash_distribution(np.full((4, 4), 0.5)), [0.25] * 4, atol=1e-9)
    # Two interchangeable strongest players (a tie between them) share the weight equally.
    w = np.array([[0.5, 0.5, 0.9], [0.5, 0.5, 0.8], [0.1, 0.2, 0.5]])
    np.testing.assert_allclose(nash_distribution(w), [0.5, 0.5, 0.0], atol=1e-7)


def test_scores_as_win_rates_is_the_win_rate_for_outcome_scores_and_keeps_chip_nash():
    from league import meta
    from league.payoff import Payoff

    payoff = Payoff()
    for p in "abc":
        payoff.add_player(p)
    for h, a, o in [("a", "b", "win"), ("a", "b", "draw"), ("b", "c", "loss"), ("c", "a", "win")]:
        payoff.update(h, a, o)
    np.testing.assert_allclose(meta.scores_as_win_rates(payoff.score_matrix()),
                               payoff.win_rate_matrix(), atol=1e-6)
    # chips: rock-paper-scissors with stakes 1, 2, 3 -> Nash (1/2, 1/3, 1/6) after rescaling
    chips = np.array([[0, -1, 2], [1, 0, -3], [-2, 3, 0]], float)
    w = meta.scores_as_win_rates(chips)
    assert w.min() >= 0 and w.max() <= 1
    np.testing.assert_allclose(meta.nash_distribution(w), [1 / 2, 1 / 3, 1 / 6], atol=1e-6)
    with pytest.raises(ValueError, match="finite"):
        meta.scores_as_win_rates([[0, np.nan], [np.nan, 0]])


def test_closed_form_trueskill_follows_the_trueskill_package_over_many_games():
    """league.meta's closed-form 1-vs-1 update against the `trueskill` package's factor graph
    (the independent reference), over 1,500 random games in sequence, draws included."""
    import random

    import trueskill

    env = trueskill.TrueSkill(draw_probability=0.05)
    rng = random.Random(0)
    players = list("abcde")
    games = [(rng.choice(players), rng.choice(players), rng.choice(["win", "draw", "loss"])) for _ in range(1500)]
    ours = trueskill_ratings(games, players)
    ref = {p: env.create_rating() for p in players}
    for home, away, outcome in games:
        if home == away:
            continue
        if outcome == "loss":
            ref[away], ref[home] = trueskill.rate_1vs1(ref[away], ref[home], env=env)
        else:
            ref[home], ref[away] = trueskill.rate_1vs1(ref[home], ref[away], drawn=outcome == "draw", env=env)
    for p in players:
        assert ours[p] == pytest.approx((ref[p].mu, ref[p].sigma), abs=1e-5)


def test_only_players_whose_payoffs_are_all_known_enter_the_meta_game():
    """Worked by hand. Players 0-3 know each other; 4 and 5 joined and were evaluated against
    nobody: 5 (newest) goes first, then 4. Then player 1 misses two pairs and 3 one: 1 goes
    and the rest is complete. A pair known in one order is known (payoffs are antisymmetric)."""
    known = np.zeros((6, 6), bool)
    known[:4, :4] = True
    np.testing.assert_array_equal(fully_known_players(known), [0, 1, 2, 3])
    known = np.ones((5, 5), bool)
    known[1, 2] = known[2, 1] = known[1, 3] = known[3, 1] = False
    np.testing.assert_array_equal(fully_known_players(known), [0, 2, 3, 4])
    upper = np.triu(np.ones((4, 4), bool))
    np.testing.assert_array_equal(fully_known_players(upper), [0, 1, 2, 3])
    tie = np.ones((3, 3), bool)
    tie[1, 2] = tie[2, 1] = False
    np.testing.assert_array_equal(fully_known_players(tie), [0, 1])
    with pytest.raises(ValueError, match="square"):
        fully_known_players(np.ones((2, 3), bool))
