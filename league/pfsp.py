"""Prioritised fictitious self-play (PFSP) weightings.

AlphaStar (Vinyals et al. 2019, Methods, "Prioritized fictitious self-play"):
given a learning agent A, a frozen opponent B is drawn from a candidate set C with

    P(B) = f(P[A beats B]) / sum_{C in C} f(P[A beats C])

where f: [0, 1] -> [0, inf) is a weighting. f_hard(x) = (1 - x)^p focuses on the
hardest opponents; f_var(x) = x (1 - x) on opponents around the agent's level.
The named weightings are those of the paper's published pseudocode.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

WEIGHTINGS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "squared": lambda x: (1.0 - x) ** 2,
    "linear": lambda x: 1.0 - x,
    "linear_capped": lambda x: np.minimum(0.5, 1.0 - x),
    "variance": lambda x: x * (1.0 - x),
}
"""f(x) for each named weighting; "hard" takes its exponent p separately."""

ALL_WEIGHTINGS = (*WEIGHTINGS, "hard")


def check_win_rates(win_rates: np.ndarray, what: str = "win rates") -> np.ndarray:
    """Returns `win_rates` as a float array; ValueError if any is NaN or outside [0, 1]."""
    rates = np.asarray(win_rates, dtype=np.float64)
    bad = ~((rates >= 0.0) & (rates <= 1.0))  # also catches NaN
    if bad.any():
        raise ValueError(
            f"{what} must lie in [0, 1]; got {rates[bad][:5].tolist()} "
            f"(at positions {np.flatnonzero(bad)[:5].tolist()})"
        )
    return rates


def pfsp_probabilities(
    win_rates, weighting: str = "squared", p: float | None = None
) -> np.ndarray:
    """Probabilities of picking each candidate, from the agent's win rates against them.

    P(B) = f(x_B) / sum_C f(x_C) (AlphaStar, Methods). Weightings: `squared` (1-x)^2,
    `linear` 1-x, `linear_capped` min(0.5, 1-x), `variance` x(1-x), `hard` (1-x)^p.
    When every weight is zero (the agent beats everyone, or x in {0, 1} under
    `variance`) the distribution falls back to uniform, as the paper's pseudocode does.
    """
    rates = check_win_rates(win_rates)
    if rates.ndim != 1 or rates.size == 0:
        raise ValueError(f"win_rates must be a non-empty 1-D array; got shape {rates.shape}")
    if weighting == "hard":
        if p is None or not np.isfinite(p) or p <= 0:
            raise ValueError(f"weighting 'hard' needs an exponent p > 0; got p={p!r}")
        weights = (1.0 - rates) ** float(p)
    elif weighting in WEIGHTINGS:
        if p is not None:
            raise ValueError(f"p is only used by weighting 'hard'; got p={p!r} with {weighting!r}")
        weights = WEIGHTINGS[weighting](rates)
    else:
        raise ValueError(
            f"unknown PFSP weighting {weighting!r}; allowed: {', '.join(ALL_WEIGHTINGS)}"
        )
    total = weights.sum()
    if total < 1e-10:
        return np.full(rates.shape, 1.0 / rates.size)
    return weights / total


def weighted_pfsp_probabilities(win_rates, shares, weighting: str = "squared",
                                p: float | None = None) -> np.ndarray:
    """PFSP over candidates that count toward the agent's result in unequal shares:

        P(c) = s_c f(x_c) / sum_d s_d f(x_d)

    with `shares` s_c >= 0 (e.g. SMAX army pairs against the heuristic: how often the agent
    picks the pair's army, so a pair it never plays is not trained on however badly it does
    there). `pfsp_probabilities` is the case of equal shares. When every product is zero the
    distribution falls back to the shares (then uniform)."""
    shares = np.asarray(shares, dtype=np.float64)
    weights = pfsp_probabilities(win_rates, weighting, p)   # checks the rates and the weighting
    if shares.shape != weights.shape or not np.all(np.isfinite(shares)) or (shares < 0).any():
        raise ValueError(f"shares must be finite, >= 0 and one per win rate ({weights.shape}); "
                         f"got {shares.tolist()}")
    for candidate in (weights * shares, shares):
        if candidate.sum() > 1e-10:
            return candidate / candidate.sum()
    return np.full(weights.shape, 1.0 / weights.size)
