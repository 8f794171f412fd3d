"""The meta-solver registry (league/meta_solvers.py), as OpenSpiel's meta-strategies: solvers by
name, each against a game worked by hand; the coordinator publishes the one its config names."""

import numpy as np
import pytest

from coordinator.coordinator import Coordinator, CoordinatorConfig
from league import meta
from league.meta_solvers import META_SOLVERS, elo_with_exact, meta_solver, solve_meta_game
from league.players import LeagueConfig, SnapshotConfig

# Rock, paper, scissors as win rates: each beats the next one round, the unique Nash is uniform.
RPS = np.array([[0.5, 0.0, 1.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.5]])
# Player 0 beats both others: it is the whole Nash.
DOMINANT = np.array([[0.5, 0.9, 0.8], [0.1, 0.5, 0.7], [0.2, 0.3, 0.5]])
# Chips, antisymmetric: x = (1/2, 1/3, 1/6) equalises every column of [[0, -1, 2], [1, 0, -3],
# [-2, 3, 0]] (row 0: -1/3 + 1/3 = 0; row 1: 1/2 - 1/2 = 0; row 2: -1 + 1 = 0), so it is the Nash.
CHIPS = np.array([[0.0, -1.0, 2.0], [1.0, 0.0, -3.0], [-2.0, 3.0, 0.0]])


def test_the_registry_names_nash_and_uniform_and_refuses_an_unknown_name():
    assert set(META_SOLVERS) == {"nash", "uniform"}
    with pytest.raises(ValueError, match="unknown meta-solver 'alpharank'; known: nash, uniform"):
        meta_solver("alpharank")
    with pytest.raises(ValueError, match="unknown meta-solver"):
        CoordinatorConfig(meta_solver="prd")


def test_nash_by_name_is_the_worked_nash_and_the_same_as_before():
    np.testing.assert_allclose(meta_solver("nash")(RPS), [1 / 3] * 3, atol=1e-7)
    np.testing.assert_allclose(meta_solver("nash")(DOMINANT), [1, 0, 0], atol=1e-7)
    np.testing.assert_allclose(meta_solver("nash")(meta.scores_as_win_rates(CHIPS)), [1 / 2, 1 / 3, 1 / 6], atol=1e-6)
    for w in (RPS, DOMINANT):   # what the coordinator called before the registry
        np.testing.assert_array_equal(meta_solver("nash")(w), meta.nash_distribution(w))


def test_uniform_is_fictitious_self_plays_mixture():
    np.testing.assert_allclose(meta_solver("uniform")(DOMINANT), [1 / 3] * 3)


def test_the_meta_game_leaves_out_withdrawn_and_unevaluated_players():
    """Rock-paper-scissors among players 0-2 (scores = 2 * win rate - 1), player 3 withdrawn
    (it beats everyone), player 4 not yet evaluated against player 0: both get weight 0."""
    scores = np.zeros((5, 5))
    scores[:3, :3] = 2 * RPS - 1
    scores[3, :] = 1.0
    scores[:, 3] = -1.0
    scores[3, 3] = 0.0
    known = np.ones((5, 5), dtype=bool)
    known[4, 0] = known[0, 4] = False
    withdrawn = np.array([False, False, False, True, False])
    solution = solve_meta_game(scores, known, withdrawn)
    np.testing.assert_allclose(solution.weights, [1 / 3, 1 / 3, 1 / 3, 0, 0], atol=1e-7)
    np.testing.assert_array_equal(solution.evaluated, [0, 1, 2])
    uniform = solve_meta_game(scores, known, withdrawn, solver="uniform")
    np.testing.assert_allclose(uniform.weights, [1 / 3, 1 / 3, 1 / 3, 0, 0])
    with pytest.raises(ValueError, match=r"\[n, n\]"):
        solve_meta_game(scores, known[:4], withdrawn)


def test_exact_pairs_count_as_32_games_at_their_exact_win_rate_in_elo():
    wins = np.array([[0.0, 3.0], [1.0, 0.0]])
    draws = np.zeros((2, 2))
    exact = np.array([[False, True], [True, False]])
    rates = np.array([[0.5, 0.75], [0.25, 0.5]])
    np.testing.assert_allclose(elo_with_exact(wins, draws, exact, rates),
                               meta.elo_ratings(np.array([[0.0, 24.0], [8.0, 0.0]]), draws))


def test_the_coordinator_publishes_the_mixture_of_its_solver(tmp_path):
    snapshots = SnapshotConfig(main_agent_snapshot_steps=100, exploiter_min_steps=100,
                               main_exploiter_timeout_steps=200, league_exploiter_timeout_steps=200)
    config = LeagueConfig(races=("terran",), snapshots=snapshots, initial_snapshots=False)
    games = [{"home": "terran_main_agent_0", "away": "terran_main_exploiter_0", "outcome": "win"}] * 5
    published = {}
    for solver in ("nash", "uniform"):
        coordinator = Coordinator(config, str(tmp_path / solver), seed=3,
                                  config=CoordinatorConfig(meta_game_every_seconds=float("inf"),
                                                           checkpoint_every_seconds=float("inf"), meta_solver=solver))
        coordinator.report_results(games)
        published[solver] = coordinator.publish_meta_game()["nash"]
        assert coordinator.nash_weights() == pytest.approx({p: w for p, w in published[solver].items() if w > 0})
        coordinator.close()
    # the two league exploiters never played: out of the game; the main agent beat the exploiter
    assert published["nash"] == pytest.approx({"terran_main_agent_0": 1.0, "terran_main_exploiter_0": 0.0,
                                                "terran_league_exploiter_0": 0.0, "terran_league_exploiter_1": 0.0})
    assert published["uniform"] == pytest.approx({"terran_main_agent_0": 0.5, "terran_main_exploiter_0": 0.5,
                                                  "terran_league_exploiter_0": 0.0, "terran_league_exploiter_1": 0.0})
