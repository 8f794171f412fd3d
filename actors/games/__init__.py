"""Games: one two-sided zero-sum batch protocol over SMAX races, OpenSpiel poker and matrix games.

    from actors.games import make_batch_game
    game = make_batch_game("smax_races", batch_size=64, races=("terran", "zerg"))
    game = make_batch_game("leduc_poker", batch_size=256)      # JAX Kuhn/Leduc (jax_poker)
    game = make_batch_game("leduc_poker", 256, pool=True)      # the OpenSpiel pool instead
    game = make_batch_game("liars_dice", batch_size=256)       # other OpenSpiel 2p zero-sum games
    game = make_batch_game("matrix_rps", batch_size=1024)      # matrix_{rps,blotto,random,disc}

The protocol (`BatchGame`, `TimeStep`) is in `actors.games.base`; the observation and action
structures in `agents.specs`. Game modules are imported lazily: SMAX pulls in jaxmarl (~5 s).
"""

from __future__ import annotations

import importlib.util
import sys

from actors.games.base import DRAW, LOSS, WIN, BatchGame, TimeStep, random_legal_actions


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

__all__ = ["DRAW", "LOSS", "WIN", "BatchGame", "TimeStep", "make_batch_game", "random_legal_actions"]


def make_batch_game(name: str, batch_size: int, **kwargs) -> BatchGame:
    """A batch game by name: 'smax_races', 'matrix_<game>', else an OpenSpiel game name.

    'kuhn_poker' and 'leduc_poker' are the JAX games of `jax_poker` (equal to OpenSpiel's on
    every history; `pool=True` gives the OpenSpiel pool); other OpenSpiel games (and those two
    with parameters) run as an `OpenSpielPool`.
    """
    if name == "smax_races":
        from actors.games import smax_races

        config = kwargs.pop("config", smax_races.SmaxRacesConfig())
        return smax_races.SmaxRacesGame(batch_size, config, **kwargs)
    if name.startswith("matrix_"):
        from actors.games import matrix

        return matrix.MatrixGameBatch(matrix.make_game(name[len("matrix_"):], **kwargs), batch_size)
    pool = kwargs.pop("pool", False)
    if name in ("kuhn_poker", "leduc_poker") and not pool:
        from actors.games import jax_poker

        return jax_poker.JaxPokerGame(name, batch_size, **kwargs)
    from actors.games import poker

    return poker.OpenSpielPool(name, batch_size, **kwargs)
