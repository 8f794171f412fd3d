"""Games: one two-sided zero-sum batch protocol over SMAX races, OpenSpiel poker and matrix games.

    from actors.games import make_batch_game
    from actors.games.registry import DEFAULT_GAME
    game = make_batch_game(DEFAULT_GAME, batch_size=64, races=("terran", "zerg"))  # SMAX races
    game = make_batch_game("leduc_poker", batch_size=256)      # JAX Kuhn/Leduc (jax_poker)
    game = make_batch_game("leduc_poker", 256, pool=True)      # the OpenSpiel pool instead
    game = make_batch_game("openspiel/liars_dice", 256)         # other OpenSpiel 2p zero-sum games
    game = make_batch_game("matrix_rps", batch_size=1024)      # matrix_{rps,blotto,random,disc}
    game = make_batch_game("pgx/connect_four", 256)            # pgx's two-player games
    game = make_batch_game("mygames.rps:make", 256)            # your own (docs/games.md)

The protocols (`GameFunctions`, the pure game; `Game`, its declaration with `Capabilities`;
`BatchGame` and `TimeStep`, a batch of it) are in `actors.games.base`; every name resolves
through `actors.games.registry`; the observation and action
structures in `agents.specs`. Game modules are imported lazily: SMAX pulls in jaxmarl (~5 s).
"""

from __future__ import annotations

import importlib.util
import sys

from actors.games.base import (
    DRAW,
    LOSS,
    WIN,
    BatchGame,
    Capabilities,
    Game,
    GameFunctions,
    TimeStep,
    random_legal_actions,
)


def _register_jaxmarl_packages() -> None:
    """jaxmarl's package `__init__`s import every environment it has (~4 s, matplotlib, a JAX
    computation), print "Submoduled environments not found" from every process and reset
    sys.stdout/stderr (mabrax); SMAX needs none of it. The two packages are registered
    unexecuted, so `jaxmarl.environments.smax` imports alone (a process that imported jaxmarl
    itself keeps it; `jaxmarl.make` is not used here)."""
    for name in ("jaxmarl", "jaxmarl.environments"):
        if name in sys.modules:
            return
        spec = importlib.util.find_spec(name)
        if spec is None:
            return
        sys.modules[name] = importlib.util.module_from_spec(spec)


_register_jaxmarl_packages()

__all__ = ["DRAW", "LOSS", "WIN", "BatchGame", "Capabilities", "Game", "GameFunctions", "TimeStep",
           "make_batch_game", "random_legal_actions"]


def make_batch_game(name: str, batch_size: int, **kwargs) -> BatchGame:
    """A batch of `batch_size` games of `name`, any form of `actors.games.registry.resolve`
    (a built-in of `registry.BUILTINS`, 'kuhn_poker', 'matrix_rps', 'pgx/connect_four', 'package.module:factory',
    'openspiel/liars_dice', ...); UnknownGame if it names none.

    'kuhn_poker' and 'leduc_poker' are the JAX games of `jax_poker` (equal to OpenSpiel's on
    every history; `pool=True` gives the OpenSpiel pool); an OpenSpiel name with parameters
    ('leduc_poker(suit_isomorphism=True)') is the OpenSpiel pool of that game.
    """
    from actors.games.functional import make_batch
    from actors.games.registry import resolve

    if "(" in name and "/" not in name:
        name = f"openspiel/{name}"
    return make_batch(resolve(name), batch_size, **kwargs)
