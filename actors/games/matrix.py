"""Symmetric zero-sum matrix games as one-step games of the batch protocol (actors/games/base.py).

The payoffs come from the league's matrix games (`actors.games.matrix_games`): rock-paper-scissors,
Blotto, random non-transitive games, and the disc game discretised to points of the unit disc.
Each game is one step: both sides pick an action (head `action`), side 0 receives the exact
payoff p = M[a0, a1] in [-1, 1] as its reward and side 1 receives -p. The outcome is a draw when
p == 0, else a win with probability (1 + p) / 2 and a loss otherwise, so its expectation is p
(the league's win rate (1 + p) / 2). Vectorised numpy over the batch; `MatrixFunctions` is the
same game as pure JAX functions of one game (`game.fns`, for the device path's rollout).
"""

from __future__ import annotations

import numpy as np

from actors.games import matrix_games
from actors.games.base import TimeStep, check_actions
from agents.specs import (
    MASK_KEY,
    ActionSpec,
    ArraySpec,
    DiscreteHead,
    GameSpec,
    ObservationSpec,
    SideSpec,
)

ACTION_HEAD = "action"


def disc_game(num_angles: int = 8, radii: tuple[float, ...] = (0.5, 1.0)) -> matrix_games.MatrixGame:
    """The disc game on a polar grid of points (plus the centre), phi(v, w) = v^T [[0,-1],[1,0]] w."""
    points = [np.zeros(2)]
    for r in radii:
        for k in range(num_angles):
            angle = 2 * np.pi * k / num_angles
            points.append(r * np.array([np.cos(angle), np.sin(angle)]))
    pts = np.stack(points)
    m = np.array([[matrix_games.disc_payoff(v, w) for w in pts] for v in pts])
    m = (m - m.T) / 2  # exact antisymmetry despite rounding
    names = tuple(f"({x:.2f},{y:.2f})" for x, y in pts)
    return matrix_games.MatrixGame("disc", m, names)


def make_game(name: str, **kwargs) -> matrix_games.MatrixGame:
    """'rps', 'blotto', 'random' (matrix_games.FINITE_GAMES) or 'disc'."""
    if name == "disc":
        return disc_game(**kwargs)
    if name not in matrix_games.FINITE_GAMES:
        raise ValueError(f"unknown matrix game {name!r}; choose from {matrix_games.GAMES}")
    return matrix_games.FINITE_GAMES[name](**kwargs)


def make_spec(game: matrix_games.MatrixGame) -> GameSpec:
    head = DiscreteHead(game.num_actions)
    fields = {"acting": ArraySpec((), np.bool_)}
    side = SideSpec(ObservationSpec(fields), ActionSpec({ACTION_HEAD: head}), num_units=1)
    return GameSpec(f"matrix_{game.name}", (side, side), 1, {"payoff": ArraySpec((2,), np.float32)})


class MatrixFunctions:
    """Pure, jittable reset/step of ONE play (the state is its PRNG key): the same rules as
    `MatrixGameBatch.step`."""

    def __init__(self, game: matrix_games.MatrixGame):
        import jax.numpy as jnp

        self.game = game
        self.config = (game.name, np.asarray(game.payoff_matrix, np.float64).tobytes())
        self.spec = make_spec(game)
        self._payoff = jnp.asarray(np.asarray(game.payoff_matrix, np.float32))

    def observe(self):
        import jax.numpy as jnp

        obs = {"acting": jnp.array(True), MASK_KEY: {ACTION_HEAD: jnp.ones(self.game.num_actions, bool)}}
        return (obs, obs)

    def reset(self, key):
        return key, self.observe()

    def step(self, key, actions):
        import jax
        import jax.numpy as jnp

        key, draw = jax.random.split(key)
        p = self._payoff[actions[0][ACTION_HEAD], actions[1][ACTION_HEAD]]
        win = jax.random.uniform(draw) < (1.0 + p) / 2.0
        outcome = jnp.where(p == 0, 0, jnp.where(win, 1, -1)).astype(jnp.int8)
        payoff = jnp.stack([p, -p]).astype(jnp.float32)
        return key, self.observe(), payoff, jnp.array(True), outcome, {"payoff": payoff}


class MatrixGameBatch:
    """B independent one-step plays of a symmetric zero-sum matrix game."""

    def __init__(self, game: matrix_games.MatrixGame | str, batch_size: int):
        self.game = make_game(game) if isinstance(game, str) else game
        self.batch_size = int(batch_size)
        self.spec = make_spec(self.game)
        self.payoff_matrix = np.asarray(self.game.payoff_matrix, np.float64)
        self._rng = np.random.default_rng(0)
        self.fns = MatrixFunctions(self.game)

    def _observations(self):
        b, n = self.batch_size, self.game.num_actions
        obs = {"acting": np.ones(b, bool), MASK_KEY: {ACTION_HEAD: np.ones((b, n), bool)}}
        return (obs, {"acting": obs["acting"].copy(), MASK_KEY: {ACTION_HEAD: obs[MASK_KEY][ACTION_HEAD].copy()}})

    def reset(self, seed: int) -> TimeStep:
        self._rng = np.random.default_rng(seed)
        b = self.batch_size
        return TimeStep(self._observations(), np.zeros((b, 2), np.float32), np.zeros(b, bool),
                        np.zeros(b, np.int8), {"payoff": np.zeros((b, 2), np.float32)})

    def step(self, actions) -> TimeStep:
        check_actions(self.spec, actions, self.batch_size)
        a0 = np.asarray(actions[0][ACTION_HEAD])
        a1 = np.asarray(actions[1][ACTION_HEAD])
        n = self.game.num_actions
        if np.any((a0 < 0) | (a0 >= n) | (a1 < 0) | (a1 >= n)):
            raise ValueError(f"actions must lie in [0, {n})")
        p = self.payoff_matrix[a0, a1]
        win = self._rng.random(self.batch_size) < (1.0 + p) / 2.0
        outcome = np.where(p == 0, 0, np.where(win, 1, -1)).astype(np.int8)
        payoff = np.stack([p, -p], axis=1).astype(np.float32)
        return TimeStep(self._observations(), payoff, np.ones(self.batch_size, bool), outcome,
                        {"payoff": payoff.copy()})
