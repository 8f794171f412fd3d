"""Meta-solvers: the mixture over a league's players that it publishes and trains against,
chosen by name, as OpenSpiel's `psro_v2/meta_strategies.py` (`META_STRATEGY_METHODS`).

A meta-solver maps the win-rate matrix W of the symmetric zero-sum meta-game (W[a, b] =
P[a beats b], draws half; payoff A = W - 1/2) to a probability vector over its players.
`solve_meta_game` is what the coordinator publishes every `meta_game_every_seconds`
(coordinator/meta_game.py): the solver's mixture over the players whose payoffs are all known,
on the games' mean scores, and the players' Elo ratings. Pure numpy; the solvers themselves
live in `league.meta`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from league import meta

MetaSolver = Callable[[np.ndarray], np.ndarray]


def nash_solver(win_rates: np.ndarray) -> np.ndarray:
    """PSRO's meta-solver (Lanctot et al. 2017): the most evenly spread Nash mixture of the
    meta-game (`league.meta.nash_distribution`)."""
    return meta.nash_distribution(win_rates)


def uniform_solver(win_rates: np.ndarray) -> np.ndarray:
    """Every player alike: fictitious self-play's meta-strategy (Heinrich, Lanctot & Silver
    2015; the matchmakers' `fsp` branch, `league.matchmaking`)."""
    n = len(np.asarray(win_rates))
    if n == 0:
        raise ValueError("the meta-game has no players")
    return np.full(n, 1.0 / n)


META_SOLVERS: Mapping[str, MetaSolver] = {"nash": nash_solver, "uniform": uniform_solver}


def meta_solver(name: str) -> MetaSolver:
    """The meta-solver called `name` (`META_SOLVERS`)."""
    if name not in META_SOLVERS:
        raise ValueError(f"unknown meta-solver {name!r}; known: {', '.join(META_SOLVERS)}")
    return META_SOLVERS[name]


EXACT_GAMES = 32.0
"""The weight, in games, of an exact payoff in the Elo fit (`elo_with_exact`)."""


@dataclass(frozen=True)
class MetaGameSolution:
    """The solver's mixture over every player (0 for players outside the solved game) and the
    indices of the players the game was solved over (ascending)."""

    weights: np.ndarray
    evaluated: np.ndarray


def solve_meta_game(scores, known, withdrawn, solver: str = "nash") -> MetaGameSolution:
    """The meta-solver's mixture over the players that are not `withdrawn` and whose payoffs
    against each other are all `known` (`meta.fully_known_players`: players still waiting for
    an evaluation get weight 0 until they have one), on the mean scores `scores[a, b]` (what a
    game paid a against b; `meta.scores_as_win_rates`). All arguments are [n, n] or [n]."""
    scores = np.asarray(scores, dtype=np.float64)
    known, withdrawn = np.asarray(known, dtype=bool), np.asarray(withdrawn, dtype=bool)
    n = len(scores)
    if scores.shape != (n, n) or known.shape != (n, n) or withdrawn.shape != (n,):
        raise ValueError(f"scores and known must be [n, n] and withdrawn [n]; got {scores.shape}, "
                         f"{known.shape}, {withdrawn.shape}")
    solve = meta_solver(solver)
    weights = np.zeros(n)
    active = np.flatnonzero(~withdrawn)
    evaluated = active[meta.fully_known_players(known[np.ix_(active, active)])]
    if evaluated.size:
        weights[evaluated] = solve(meta.scores_as_win_rates(scores[np.ix_(evaluated, evaluated)]))
    return MetaGameSolution(weights, evaluated)


def elo_with_exact(wins, draws, exact, win_rates, exact_games: float = EXACT_GAMES) -> np.ndarray:
    """Elo ratings (`meta.elo_ratings`) of the decayed counts `wins` and `draws`, where the
    pairs marked `exact` count as `exact_games` games at their exact win rate instead."""
    exact = np.asarray(exact, dtype=bool)
    return meta.elo_ratings(np.where(exact, exact_games * np.asarray(win_rates), wins),
                            np.where(exact, 0.0, draws))
