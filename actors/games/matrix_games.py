"""Symmetric zero-sum games with exact payoffs, for testing the league's dynamics.

Pure numpy. A strategy is a mixed strategy over the actions of a finite game, or a
point of the unit disc for the disc game. `payoff(x, y)` in [-1, 1] is x's expected
payoff against y; the win probability of x over y is (1 + payoff) / 2 and
exploitability (in win-rate units, as `league.meta.exploitability`) is the best
response's payoff against a mixture, halved.

- Rock-paper-scissors: the classic 3-cycle.
- Disc game (Balduzzi et al. 2019, "Open-ended learning in symmetric zero-sum
  games", Sec. 3): phi(v, w) = v^T [[0, -1], [1, 0]] w for v, w in the unit disc.
  Self-play gradient ascent rotates around the disc; the mixture's mean m is all
  that matters to a best response: max_{|u|<=1} phi(u, m) = |m|.
- Colonel Blotto: allocate S soldiers over K fields; win a field with more
  soldiers; payoff = sign(fields won - fields lost).
- Random non-transitive: A = U - U^T with U uniform in [-1/2, 1/2].
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

DISC_MATRIX = np.array([[0.0, -1.0], [1.0, 0.0]])


@dataclass(frozen=True)
class MatrixGame:
    """A finite symmetric zero-sum game: `payoff_matrix[i, j]` is action i's payoff vs j."""

    name: str
    payoff_matrix: np.ndarray
    action_names: tuple[str, ...]

    def __post_init__(self):
        m = self.payoff_matrix
        if m.ndim != 2 or m.shape[0] != m.shape[1] or not np.allclose(m, -m.T):
            raise ValueError(f"{self.name}: payoff matrix must be square and antisymmetric")
        if np.abs(m).max() > 1.0:
            raise ValueError(f"{self.name}: payoffs must lie in [-1, 1]")

    @property
    def num_actions(self) -> int:
        return self.payoff_matrix.shape[0]

    def payoff(self, x: np.ndarray, y: np.ndarray) -> float:
        """Expected payoff x^T M y of mixed strategy x against y."""
        return float(x @ self.payoff_matrix @ y)

    def payoff_gradient(self, y: np.ndarray) -> np.ndarray:
        """d payoff(x, y) / dx = M y."""
        return self.payoff_matrix @ y

    def best_response_payoff(self, y: np.ndarray) -> float:
        """max_x payoff(x, y), attained by a pure strategy."""
        return float((self.payoff_matrix @ y).max())


def rock_paper_scissors() -> MatrixGame:
    m = np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]], dtype=np.float64)
    return MatrixGame("rock_paper_scissors", m, ("rock", "paper", "scissors"))


def blotto(soldiers: int = 5, fields: int = 3) -> MatrixGame:
    """Colonel Blotto with every allocation of `soldiers` over `fields` as an action."""
    allocations = [
        a for a in itertools.product(range(soldiers + 1), repeat=fields) if sum(a) == soldiers
    ]
    alloc = np.array(allocations)
    won = (alloc[:, None, :] > alloc[None, :, :]).sum(-1)
    lost = (alloc[:, None, :] < alloc[None, :, :]).sum(-1)
    m = np.sign(won - lost).astype(np.float64)
    return MatrixGame(f"blotto_{soldiers}_{fields}", m, tuple("-".join(map(str, a)) for a in allocations))


def random_nontransitive(num_actions: int = 10, seed: int = 0) -> MatrixGame:
    u = np.random.default_rng(seed).uniform(-0.5, 0.5, (num_actions, num_actions))
    return MatrixGame(f"random_{num_actions}", u - u.T, tuple(f"a{i}" for i in range(num_actions)))


def disc_payoff(v: np.ndarray, w: np.ndarray) -> float:
    """phi(v, w) = v^T [[0, -1], [1, 0]] w (Balduzzi et al. 2019)."""
    return float(v @ DISC_MATRIX @ w)


def disc_payoff_gradient(w: np.ndarray) -> np.ndarray:
    """d phi(v, w) / dv = [[0, -1], [1, 0]] w."""
    return DISC_MATRIX @ w


def disc_best_response_payoff(mean_point: np.ndarray) -> float:
    """max_{|u| <= 1} phi(u, m) = |m|: the disc game's exploitability of a mixture with mean m."""
    return float(np.linalg.norm(mean_point))


def project_to_disc(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v)
    return v / norm if norm > 1.0 else v


FINITE_GAMES = {
    "rps": rock_paper_scissors,
    "blotto": blotto,
    "random": random_nontransitive,
}
GAMES = (*FINITE_GAMES, "disc")
