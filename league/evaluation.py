"""What the evaluators measure next: the pairs of players with the fewest games between them
(sampled evaluation), and the frozen player whose exact payoffs are missing (poker's exact
meta-game). Pure numpy over the payoff's matrices; the coordinator answers the evaluators'
calls with them (coordinator/evaluations.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def least_played_pairs(ids: Sequence[str], games, exact, rng: np.random.Generator,
                       count: int) -> list[tuple[str, str]]:
    """The `count` pairs of distinct players with the fewest (decayed) `games` [n, n] between
    them, as (home, away); pairs marked `exact` [n, n] need no games and are never chosen.
    Ties are broken at random, and either player may be home (side 0): a side that a game
    favours biases no pair's cell."""
    n = len(ids)
    if n < 2:
        return []
    games = np.where(np.asarray(exact, dtype=bool), np.inf, np.asarray(games, dtype=np.float64))
    upper = np.triu_indices(n, 1)
    pair_games = games[upper] + rng.uniform(0, 1e-3, len(upper[0]))  # random tie-breaks
    order = [k for k in np.argsort(pair_games)[:count] if np.isfinite(pair_games[k])]
    return [(ids[upper[0][k]], ids[upper[1][k]])[:: 1 if rng.random() < 0.5 else -1] for k in order]


def missing_exact(frozen: Sequence[str], exact) -> dict | None:
    """The oldest of the `frozen` players (oldest first) whose exact payoffs are missing (its
    diagonal entry of `exact` [n, n] unset), and the frozen players whose exact payoffs are in
    (it is needed against each of them): {"player", "against"}; None when every one's are in."""
    exact = np.asarray(exact, dtype=bool)
    done = [p for i, p in enumerate(frozen) if exact[i, i]]
    todo = [p for i, p in enumerate(frozen) if not exact[i, i]]
    return {"player": todo[0], "against": done} if todo else None
