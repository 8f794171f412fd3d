"""A batch of any functional game (`GameFunctions`, actors/games/base.py): its pure reset and
step vmapped over the batch and jitted, behind the batch protocol that actors and evaluators
drive (`BatchGame`). A user's game needs nothing more than its functions to play everywhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from actors.games.base import BatchGame, Game, GameFunctions, TimeStep, check_actions

# Games of one configuration share their compiled reset and step: co-located actors and
# evaluators would otherwise each compile and hold their own.
_COMPILED: dict = {}


def compiled(fns: GameFunctions):
    """(jit(vmap(reset)), jit(vmap(step))) of `fns`, shared by equal configurations."""
    key = (type(fns).__module__, type(fns).__qualname__, fns.config)
    try:
        hash(key)
    except TypeError as e:
        raise TypeError(f"{type(fns).__qualname__}.config must be hashable (it names the game's "
                        f"compiled programs); got {type(fns.config).__name__}") from e
    if key not in _COMPILED:
        _COMPILED[key] = (jax.jit(jax.vmap(fns.reset)), jax.jit(jax.vmap(fns.step)))
    return _COMPILED[key]


class FunctionalBatchGame:
    """B independent games of `fns`, stepped as one jitted, vmapped call."""

    def __init__(self, fns: GameFunctions, batch_size: int):
        self.fns = fns
        self.spec = fns.spec
        self.batch_size = int(batch_size)
        self._reset, self._step = compiled(fns)
        self.state = None

    def reset(self, seed: int) -> TimeStep:
        keys = jax.random.split(jax.random.PRNGKey(seed), self.batch_size)
        self.state, obs = self._reset(keys)
        b = self.batch_size
        zeros = jnp.zeros((b, 2), jnp.float32)
        signals = {name: jnp.zeros((b, *s.shape), s.dtype) for name, s in self.spec.signal_fields.items()}
        return TimeStep(obs, zeros, jnp.zeros(b, bool), jnp.zeros(b, jnp.int8), signals)

    def step(self, actions) -> TimeStep:
        check_actions(self.spec, actions, self.batch_size)
        actions = tuple({k: jnp.asarray(np.asarray(v)) for k, v in a.items()} for a in actions)
        self.state, obs, rewards, done, outcome, signals = self._step(self.state, actions)
        return TimeStep(obs, rewards, done, outcome, signals)


def make_batch(game: Game, batch_size: int, **kwargs) -> BatchGame:
    """A batch of `batch_size` games of `game`: its own `make_batch`, else its functions here."""
    if game.make_batch is not None:
        return game.make_batch(batch_size, **kwargs)
    return FunctionalBatchGame(game.functions(), batch_size, **kwargs)
