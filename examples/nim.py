"""Nim, your own game in a league: a worked example of the game protocol (docs/games.md).

Fifteen stones; the sides take turns removing 1, 2 or 3; who takes the last stone wins. Who moves
first is drawn per game, so the game is fair, and a player who leaves a multiple of 4 stones
wins every game it can. Run a league on it from this directory, with no edit to the project:

    python -m experiments.check_game --game=nim:make
    python -m experiments.league --game=nim:make --minutes=5
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from actors.games import Capabilities, Game
from agents.specs import (
    MASK_KEY,
    ActionSpec,
    ArraySpec,
    DiscreteHead,
    GameSpec,
    ObservationSpec,
    SideSpec,
)

STONES, MOST = 15, 3


class State(NamedTuple):
    stones: jax.Array  # int32: stones left
    player: jax.Array  # int32: the side to move, 0 or 1
    key: jax.Array  # the randomness of the games that follow (auto-reset)


class Nim:
    """The protocol's pure functions of ONE game (actors/games/base.py, `GameFunctions`)."""

    config = ("nim", STONES, MOST)  # hashable: equal configs share compiled programs

    def __init__(self):
        side = SideSpec(
            ObservationSpec({"stones": ArraySpec((STONES + 1,), np.float32),  # one-hot count
                             "acting": ArraySpec((), np.bool_)}),  # this side's turn
            ActionSpec({"take": DiscreteHead(MOST)}))  # value v takes v + 1 stones
        self.spec = GameSpec("nim", (side, side), max_steps=STONES)

    def observe(self, s: State):
        legal = jnp.arange(1, MOST + 1) <= s.stones

        def side(i):
            acting = s.player == i
            # The side not to move: one legal value (0), which the game ignores.
            mask = jnp.where(acting, legal, jnp.arange(MOST) == 0)
            return {"stones": jax.nn.one_hot(s.stones, STONES + 1), "acting": acting,
                    MASK_KEY: {"take": mask}}

        return side(0), side(1)

    def reset(self, key):
        key, first = jax.random.split(key)
        s = State(jnp.int32(STONES), jax.random.bernoulli(first).astype(jnp.int32), key)
        return s, self.observe(s)

    def step(self, s: State, actions):
        take = jnp.where(s.player == 0, actions[0]["take"], actions[1]["take"]) + 1
        stones = s.stones - jnp.minimum(take, s.stones)
        done = stones == 0
        payoff = jnp.where(s.player == 0, 1.0, -1.0)  # the mover took the last stone
        rewards = jnp.where(done, jnp.stack([payoff, -payoff]), 0.0).astype(jnp.float32)
        outcome = jnp.where(done, jnp.sign(rewards[0]), 0).astype(jnp.int8)
        key, fresh_key = jax.random.split(s.key)
        fresh, _ = self.reset(fresh_key)  # auto-reset: a finished game starts again at once
        going = State(stones, 1 - s.player, key)
        new = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, going)
        return new, self.observe(new), rewards, done, outcome, {}


class NimText:
    """Nim drawn as text for a person playing it (`Capabilities.text`, `python -m experiments.play`)."""

    def describe(self, s: State, side: int) -> str:
        stones = int(s.stones)
        return f"{stones} stones left: {'o' * stones}  (take 1 to {MOST}; who takes the last stone wins)"

    def action_name(self, s: State, side: int, head: str, value: int) -> str:
        return f"take {int(value) + 1}"

    def end(self, s: State, actions, side: int) -> str:
        mover = int(s.player)
        took = min(int(actions[mover]["take"]) + 1, int(s.stones))
        who = "you" if mover == side else "opponent"
        return f"{who} took {took}, the last stone{'s' if took > 1 else ''}: no stones left, {who} won"


class NimDraw:
    """Nim drawn for a person watching a game (`Capabilities.draw`, the dashboard's watch page):
    one SVG frame per move, the heap's stones (the ones this move takes ringed) and the move."""

    def frames(self, fns, states, actions, outcome):
        out = []
        for s, a in zip(states, actions):
            mover, stones = int(s.player), int(s.stones)
            took = min(int(a[mover]["take"]) + 1, stones)
            out.append(self.frame(stones, took, f"{stones} stones: side {mover} takes {took}"))
        if states:
            winner = int(states[-1].player)
            out.append(self.frame(0, 0, f"side {winner} took the last stone and won"))
        return out

    @staticmethod
    def frame(stones, taking, caption):
        ring = 'stroke="#dc2626" stroke-width="4"'   # the stones this move takes
        circles = "".join(f'<circle class="stone" cx="{30 + 36 * k}" cy="70" r="14" fill="#78716c" '
                          f'{ring if k >= stones - taking else ""}/>' for k in range(stones))
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="560" height="110">'
                f'<text x="10" y="28" font-size="16">{caption}</text>{circles}</svg>')


def make() -> Game:
    """`--game=nim:make`: the game, its capabilities and its settings."""
    return Game("nim", functions=Nim, capabilities=Capabilities(
        turn_based=True, text=lambda fns: NimText(), draw=NimDraw))
