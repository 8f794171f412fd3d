"""Games: one two-sided zero-sum batch protocol over SMAX races, OpenSpiel poker and matrix games.

    from actors.games import make_batch_game
    from actors.games.registry import DEFAULT_GAME
    game = make_batch_game(DEFAULT_GAME, batch_size=64, races=("terran", "zerg"))  # SMAX races
    game = make_batch_game("leduc_poker", batch_size=256)      # JAX Kuhn/Leduc
    game = make_batch_game("leduc_poker", 256, pool=True)      # the OpenSpiel pool instead
    game = make_batch_game("openspiel/liars_dice", 256)         # other OpenSpiel 2p zero-sum games
    game = make_batch_game("matrix_rps", batch_size=1024)      # matrix_{rps,blotto,random,disc}
    game = make_batch_game("pgx/connect_four", 256)            # pgx's two-player games
    game = make_batch_game("mygames.rps:make", 256)            # your own (docs/games.md): a Game,
                                                               # GameFunctions, a JaxMARL or pgx env

The protocols (`GameFunctions`, the pure game; `Game`, its declaration with `Capabilities`;
`BatchGame` and `TimeStep`, a batch of it) are in `actors.games.base`; every name resolves
through `actors.games.registry`; the observation and action
structures in `agents.specs`. Game modules are imported lazily: SMAX pulls in jaxmarl (~5 s).
`fingerprint(env)` digests an environment's settings for the configs of the jaxmarl and pgx
adapters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import sys
from collections.abc import Mapping

import numpy as np

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

    'kuhn_poker' and 'leduc_poker' are JAX games (equal to OpenSpiel's on every history; `pool=True` gives the OpenSpiel pool); an OpenSpiel name with parameters
    ('leduc_poker(suit_isomorphism=True)') is the OpenSpiel pool of that game.
    """
    from actors.games.functional import make_batch
    from actors.games.registry import resolve

    if "(" in name and "/" not in name:
        name = f"openspiel/{name}"
    return make_batch(resolve(name), batch_size, **kwargs)


def _canonical(x, depth: int = 0) -> str:
    """A text that tells envs of different settings apart (for an adapted env's `config`)."""
    if depth > 6:
        return type(x).__qualname__
    if x is None or isinstance(x, (str, bool, int, float, complex)):
        return repr(x)
    if isinstance(x, (np.ndarray, np.generic)) or all(hasattr(x, a) for a in ("__array__", "shape", "dtype")):
        try:   # numpy's and JAX's arrays (JAX is not imported here)
            a = np.asarray(x)
            return f"array{a.shape}{a.dtype}:{hashlib.sha256(a.tobytes()).hexdigest()[:16]}"
        except Exception:  # a typed PRNG key: its shape alone
            return f"array{tuple(x.shape)}"
    if isinstance(x, Mapping):
        items = sorted(f"{_canonical(k, depth + 1)}:{_canonical(v, depth + 1)}" for k, v in x.items())
        return f"{type(x).__qualname__}{{{','.join(items)}}}"
    if isinstance(x, (list, tuple, set, frozenset)):
        parts = [_canonical(v, depth + 1) for v in x]
        if isinstance(x, (set, frozenset)):
            parts.sort()
        return f"{type(x).__qualname__}[{','.join(parts)}]"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        fields = {f.name: getattr(x, f.name) for f in dataclasses.fields(x)}
        return f"{type(x).__qualname__}{_canonical(fields, depth + 1)}"
    if callable(x) and hasattr(x, "__qualname__"):  # functions, methods, classes: by name
        return f"{getattr(x, '__module__', '')}.{x.__qualname__}"
    if hasattr(x, "__dict__"):
        return f"{type(x).__qualname__}{_canonical(vars(x), depth + 1)}"
    return f"{type(x).__qualname__}:{x!r}"


def fingerprint(env) -> str:
    """A digest of every attribute of the environment `env` (its settings), so that two envs of
    one class and one name but different settings have different configs (the adapters')."""
    return hashlib.sha256(_canonical(vars(env)).encode()).hexdigest()
