"""Every game the league can play, by one name (`--game=...`):

    NAME                      a built-in: smax_races, kuhn_poker, leduc_poker, matrix_<rps|disc|blotto|random>
    package.module:factory    your own game: `factory()` returns a `Game`, a `GameFunctions`
                              (actors/games/base.py; docs/games.md), a JaxMARL `MultiAgentEnv`
                              or a pgx `Env` (instances, adapted; named by the module path)
    pgx/<env_id>              a two-player pgx game (pgx/tic_tac_toe, pgx/connect_four, pgx/othello, ...)
    jaxmarl/<env_id>          a two-agent (or two-team) JaxMARL MultiAgentEnv
    openspiel/<name>          a two-player zero-sum OpenSpiel game (with parameters:
                              openspiel/leduc_poker(suit_isomorphism=True)): the replay path only
    an installed package's    registered in the entry-point group `league.games` (name = a
    entry point               factory, as package.module:factory)

`resolve(name)` returns the `Game`, or raises `UnknownGame` naming these forms; `describe(name)`
says which adapter wrapped an environment a factory returned (None where none did). Each process
resolves the name itself (a runner ships the string, never the object), so an adapted
environment plays on every runner. Registrations are data: nothing here imports a game until it
is built (SMAX pulls in jaxmarl, ~5 s), and an environment is recognised by its classes' names,
so neither jaxmarl nor pgx is imported to tell what a factory returned.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import sys

from actors.games.base import Capabilities, Game, GameFunctions, UnknownGame

__all__ = ["UnknownGame", "describe", "module_path", "names", "resolve"]

ENTRY_POINT_GROUP = "league.games"

FORMS = ("NAME (a built-in: {builtins})",
         "package.module:factory (your own game; docs/games.md)",
         "pgx/<env_id> (pgx/tic_tac_toe, pgx/connect_four, pgx/othello, ...)",
         "jaxmarl/<env_id> (a JaxMARL environment of two agents or two teams)",
         "openspiel/<name> (an OpenSpiel game, on the replay path)",
         "a name registered by an installed package in the entry-point group 'league.games'")




# -- the built-ins ---------------------------------------------------------------------------

SMAX_RACES = ("terran", "protoss", "zerg")  # actors.games.smax_races.RACES (a test checks)

# Per-game values that differ from the run's defaults, measured on this machine (BENCHMARKS.md,
# "Poker"): applied to every field not given. Poker: entropy 0.1 (at 0.01 the policies
# saturate on "always bet/call" within ~100 updates). Leduc: learning rate 2e-3 and 32 unrolls
# per update roughly halve the NashConv reached in 4 minutes. Leduc on the device path (issue
# 26, "Strong agents at the new speed"): a two-layer MLP instead of MLP + LSTM (the observation
# is the whole information state), snapshots every 200k steps (a league of ~70 players after
# 5 minutes, not ~260), exploiters with entropy 0.01 and league exploiters playing the Nash
# mixture (PSRO's best-response target): the Nash mixture after 5 minutes 1.44 against 2.21,
# 2.3x the learnt steps/s (2 seeds, same run). Kuhn, the same four changes (snapshots every
# 40k steps): the Nash mixture after 10 minutes 0.0077 and 0.0333 against 0.0498 and 0.1300,
# 3.5x the learnt steps/s (2 seeds, same run; BENCHMARKS.md, "Kuhn at 10 minutes"). Leduc
# without UPGO (issue 26, session 20): UPGO's "Q >= V" test reads the luck of the opponent's
# reply and hidden card, keeps the lucky returns and bootstraps the others, and holds a learner
# at "always raise"; alone against a league's Nash mixture an exploiter learner then loses
# (-0.21 chips after 3,000 updates; +0.55 without UPGO, best response 0.625, 2 seeds), and the
# league's Nash mixture after 6 minutes reads 0.72 and 0.66 against 1.34 and 1.34 (2 seeds, same
# run; BENCHMARKS.md, "Leduc without UPGO"). Leduc's exploiters live 1M steps between copies (main
# exploiters 2M; ~1,000 updates, where 200k gave ~200 and a learner alone needs ~1,500-2,000
# to near a best response) and learn at 5e-3 (the main agents at 2e-3; alone, +0.44 after 1,000
# updates against +0.30): after 30 minutes the Nash mixture read 0.376 and 0.478 against 0.512 and
# 0.511 (2 seeds each, session 21 against session 20; BENCHMARKS.md, "Leduc: exploiters that
# live longer"). Leduc's learners follow NeuRD (`policy_loss="neurd"`, issue 26, session 24): in
# the shared MLP the softmax policy gradient saturates (with the exact gradient, +0.02 chips
# against the 2-hour league's mixture where a best response wins 0.132; NeuRD 0.87 of it). Its
# exploiters explore 20% of the time (NeuRD's importance-sampled advantages need mu bounded
# below), learn from batches of 128 and live 10M steps (main exploiters 20M): a learner alone
# reaches +0.057 at 37M steps where V-trace stays under +0.03. The league's average Nash mixture
# after 30 minutes read 0.156 and 0.183 (2 seeds) against 0.236, 0.286 and 0.292 before
# (BENCHMARKS.md, "Leduc with NeuRD learners"). Leduc's chunks are 32 updates, as Kuhn's: over
# 10 minutes (seed 0, issue 55) 95.3k recorded games/s against 83.0k at 8, the Nash mixture's
# NashConv 0.326 against 0.687 and the average's 0.254 against 0.299; at 64: 96.6k games/s but
# 0.862 and 0.375 (BENCHMARKS.md, "Leduc at 32 updates a chunk").
# SMAX games last up to ~100 steps: 32 updates of 15 steps per chunk let each game slot finish
# several games before the chunk ends (running games are dropped at its end).
# The laptop cadences of the first leagues (AlphaStar's 2e9 steps scaled down), kept by the games
# measured with them (a game that sets none gets cadences in learner updates: experiments.config).
LAPTOP_SNAPSHOTS = {"league.snapshots.main_agent_snapshot_steps": 4_000,
                    "league.snapshots.exploiter_min_steps": 4_000,
                    "league.snapshots.main_exploiter_timeout_steps": 8_000,
                    "league.snapshots.league_exploiter_timeout_steps": 4_000}
# The SMAX league's measured best (BENCHMARKS.md, "Against the built-in opponent"): main agents
# get 9 chunks a round to each exploiter's 1 (three quarters of the machine), 3 of their 4
# opponent slots play the game's scripted AI, and the KL to the supervised start weighs 0.1.
# The default league before: 0.514 against the scripted AI after 60 minutes (0 of 9 matchups at
# 0.80); with these and OpenAI Five's per-unit reward 0.841 and 0.774 (6 and 4 of 9) on two
# seeds; with the size-fair reward (the default since) 0.728 and 0.813 (2 and 4 of 9).
# Main agents play without z (z = 0, AlphaStar's unconditioned policy: the one the evaluator and
# benchmarks.builtin_opponent play) and the KL to the start covers the micro heads only (the
# start's army pick, cloned from games whose armies cover the menu evenly, has no skill to keep):
# with z from the start's replays in every game the pick measured at z = 0 learnt only through
# shared weights and never settled in an hour; without, it settles within 12 minutes. Seed 0, 60
# minutes: 0.787, 5 of 9 at 0.80, lowest 0.56, against 0.729 and 3 of 9 before (BENCHMARKS.md,
# the default league's row, "since session 49"); with the benchmark's heuristic army stratified
# (session 53), 0.804 and 0.833 on seeds 0 and 1, 5 and 6 of 9, lowest 0.67. The KL at 0.05 for
# terran and protoss, zerg's at 0.1 (at 0.03 for every race zerg's micro learnt to avoid the fight),
# since session 55: 0.845 and 0.840, 6 and 7 of 9, lowest 0.65, league games 72% and 74% decided
# (BENCHMARKS.md, the default league's row).
SMAX_DEFAULTS = {"device.updates_per_chunk": 32, "device.main_agent_chunks": 9,
                 "device.scripted_slots": 3, "learner.loss.kl_teacher_weight": 0.05,
                 "kl_teacher_by_race": "zerg=0.1",
                 "learner.loss.kl_teacher_heads": "action_type,target", "z_replays": "none",
                 **LAPTOP_SNAPSHOTS}
# The matrix games' leagues were measured with the MLP + LSTM reference network.
MATRIX_DEFAULTS = {"network.core_size": 64, **LAPTOP_SNAPSHOTS}
# Kuhn's chunks are 32 updates (the device path's default is 8): measured for 10 minutes in one
# run, seed 0 (BENCHMARKS.md, "Kuhn at 32 updates a chunk"), the Nash mixture's NashConv read
# 0.0012 against 0.0042 at 8, with 23.3M games against 15.9M.
KUHN_DEFAULTS = {"learner.learning_rate": 1e-3, "learner.loss.entropy_weight": 0.1,
                 "device.updates_per_chunk": 32,
                 "learner.loss.exploiter_entropy_weight": 0.01,
                 "network.core_size": 0,
                 "league.matchmaking.league_exploiter_opponents": "nash",
                 "league.snapshots.main_agent_snapshot_steps": 40_000,
                 "league.snapshots.exploiter_min_steps": 40_000,
                 "league.snapshots.main_exploiter_timeout_steps": 80_000,
                 "league.snapshots.league_exploiter_timeout_steps": 40_000}
LEDUC_DEFAULTS = {"learner.learning_rate": 2e-3, "device.updates_per_chunk": 32,
                  "learner.loss.entropy_weight": 0.1, "learner.loss.upgo_weight": 0.0,
                  "learner.loss.exploiter_entropy_weight": 0.01,
                  "network.core_size": 0,
                  "league.matchmaking.league_exploiter_opponents": "nash",
                  "learner.exploiter_learning_rate": 5e-3,
                  "league.snapshots.main_agent_snapshot_steps": 200_000,
                  "learner.loss.policy_loss": "neurd", "learner.exploiter_exploration": 0.2,
                  "learner.batch_size": 128,
                  "league.snapshots.exploiter_min_steps": 10_000_000,
                  "league.snapshots.main_exploiter_timeout_steps": 20_000_000,
                  "league.snapshots.league_exploiter_timeout_steps": 10_000_000}


def _module(path: str):
    """A capability's factory: the module at `path`, imported when the feature runs."""
    return lambda: importlib.import_module(path)


def _text(path: str):
    """A game's `Capabilities.text`: `text(functions)` of the module at `path`, imported when a
    person plays the game."""
    return lambda functions: importlib.import_module(path).text(functions)


def _smax() -> Game:
    """SMAX races and its tools (actors/games/smax_races/: the game, its scripted AI, its
    supervised start)."""
    def functions():
        from actors.games import smax_races

        return smax_races.functions(smax_races.SmaxRacesConfig())

    def make_batch(batch_size, **kwargs):
        from actors.games import smax_races

        config = kwargs.pop("config", smax_races.SmaxRacesConfig())
        return smax_races.SmaxRacesGame(batch_size, config, **kwargs)

    return Game("smax_races", functions, make_batch, Capabilities(
        races=SMAX_RACES, scripted_opponent=_module("actors.games.smax_races.scripted"),
        z=_module("actors.games.smax_races.z"),
        supervised_start=_module("actors.games.smax_races.start"), unit_network=True,
        reward="openai_five", requires=("jaxmarl",), defaults=SMAX_DEFAULTS,
        draw=_module("actors.games.smax_races.draw")))


def _poker(name: str, defaults: dict) -> Game:
    def functions():
        from actors.games.poker import game

        return game.PokerFunctions(game.PokerConfig(name))

    def make_batch(batch_size, pool: bool = False, **kwargs):
        if pool:  # the OpenSpiel pool instead of the JAX game (the same game on every history)
            from actors.games.poker import openspiel

            return openspiel.OpenSpielPool(name, batch_size, **kwargs)
        from actors.games.poker import game

        return game.JaxPokerGame(name, batch_size, **kwargs)

    return Game(name, functions, make_batch, Capabilities(
        turn_based=True, exact_evaluator=_module("actors.games.poker.exact"), reward="game",
        defaults=defaults, text=_text("actors.games.poker.game"),
        draw=_module("actors.games.poker.draw")))


MATRIX = ("rps", "disc", "blotto", "random")


def _matrix(which: str) -> Game:
    def functions():
        from actors.games import matrix

        return matrix.MatrixFunctions(matrix.make_game(which))

    def make_batch(batch_size, **kwargs):
        from actors.games import matrix

        return matrix.MatrixGameBatch(matrix.make_game(which, **kwargs), batch_size)

    return Game(f"matrix_{which}", functions, make_batch, Capabilities(defaults=MATRIX_DEFAULTS))


DEFAULT_GAME = "smax_races"
"""The game a league plays when `--game` is not given (the mission's `--races=3` league)."""

BUILTINS = {DEFAULT_GAME: _smax, "kuhn_poker": lambda: _poker("kuhn_poker", KUHN_DEFAULTS),
            "leduc_poker": lambda: _poker("leduc_poker", LEDUC_DEFAULTS),
            **{f"matrix_{m}": functools.partial(_matrix, m) for m in MATRIX}}


# -- the other forms ---------------------------------------------------------------------------


def _openspiel(name: str) -> Game:
    def make_batch(batch_size, **kwargs):
        from actors.games.poker import openspiel

        return openspiel.OpenSpielPool(name, batch_size, **kwargs)

    return Game(f"openspiel/{name}", None, make_batch, Capabilities(turn_based=True, reward="game"))


def _pgx(env_id: str) -> Game:
    try:
        from actors.games import pgx_game
    except ImportError as e:  # pgx is part of the base install on Python >= 3.11
        raise UnknownGame(f"--game=pgx/{env_id} needs pgx ({e}); pip install pgx") from e
    return pgx_game.game(env_id)


def _jaxmarl(env_id: str) -> Game:
    try:
        from actors.games import jaxmarl_game
    except ImportError as e:
        raise UnknownGame(f"--game=jaxmarl/{env_id} needs jaxmarl ({e}); pip install jaxmarl") from e
    return jaxmarl_game.game(env_id)


def _entry_points() -> dict:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


# The environments of other libraries a factory may return, by the defining module and name of a
# base class (read from the instance's MRO: nothing is imported), with the module that adapts one
# (its `adapt(env, name)` returns the `Game`) and the fix for one that cannot be adapted.
ADAPTERS = {
    ("jaxmarl.environments.multi_agent_env", "MultiAgentEnv"): (
        "a JaxMARL MultiAgentEnv", "actors.games.jaxmarl_game",
        "two agents or two equal teams with Discrete actions; for other teams return "
        "actors.games.jaxmarl_game.adapt(env, name, teams=(...)) from the factory"),
    ("pgx.core", "Env"): (
        "a pgx Env", "actors.games.pgx_game", "pgx's two-player games"),
}

ACCEPTED = ("an actors.games.Game, an object of the GameFunctions protocol (spec, config, reset, step), "
            "a JaxMARL MultiAgentEnv instance of two agents or two teams (adapted by "
            "actors.games.jaxmarl_game) or a pgx Env instance of a two-player game (adapted by "
            "actors.games.pgx_game); docs/games.md")

_ADAPTED: dict[str, str] = {}   # name -> what `describe` says, for the games an adapter wrapped


def _adapter(made):
    """ADAPTERS' entry for `made` (an instance of a class derived from one it names), or None."""
    for cls in type(made).__mro__:
        entry = ADAPTERS.get((cls.__module__, cls.__qualname__))
        if entry is not None:
            return entry
    return None


def _from_factory(name: str, factory) -> Game:
    """The Game a user's factory returns: a Game; GameFunctions wrapped in one; a JaxMARL or pgx
    environment adapted (named `name`)."""
    _ADAPTED.pop(name, None)
    try:
        made = factory()
    except Exception as e:
        raise UnknownGame(f"--game={name}: the factory raised {type(e).__name__}: {e}") from e
    if isinstance(made, Game):
        return made
    if isinstance(made, GameFunctions):
        return Game(name, functions=lambda: made)
    entry = _adapter(made)
    if entry is None:
        raise UnknownGame(f"--game={name}: the factory returned a {type(made).__name__}; it must return "
                          f"{ACCEPTED}")
    what, adapter, fix = entry
    try:
        game = importlib.import_module(adapter).adapt(made, name)
    except (ValueError, TypeError) as e:   # UnknownGame is a ValueError
        raise UnknownGame(f"--game={name}: the factory returned {what} ({type(made).__qualname__}) that "
                          f"{adapter} cannot adapt: {e}. It adapts {fix}") from e
    _ADAPTED[name] = f"{what}, adapted by {adapter}"
    return game


def describe(name: str) -> str | None:
    """One line for the first screen of a run whose factory returned an environment that an
    adapter wrapped ("game mymod:make: a JaxMARL MultiAgentEnv, adapted by
    actors.games.jaxmarl_game"); None for every other game. UnknownGame as `resolve`."""
    resolve(name)
    what = _ADAPTED.get(name)
    return f"game {name}: {what}" if what else None


def _module_factory(name: str) -> Game:
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UnknownGame(
            f"--game={name}: cannot import module {module_name!r} ({e}). Run from the directory that "
            f"holds it, or add that directory to PYTHONPATH") from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UnknownGame(f"--game={name}: module {module_name!r} ({getattr(module, '__file__', '?')}) "
                          f"has no function {attr!r}")
    return _from_factory(name, factory)


def unknown_message(name: str) -> str:
    forms = "\n  ".join(f.format(builtins=", ".join(BUILTINS)) for f in FORMS)
    return f"unknown game {name!r}; --game takes one of these forms:\n  {forms}"


@functools.cache
def resolve(name: str) -> Game:
    """The game `name` names (module docstring); UnknownGame if none."""
    if not isinstance(name, str) or not name:
        raise UnknownGame(unknown_message(str(name)))
    if name in BUILTINS:
        return BUILTINS[name]()
    prefix, slash, rest = name.partition("/")
    if slash and rest:
        if prefix == "openspiel":
            return _openspiel(rest)
        if prefix == "pgx":
            return _pgx(rest)
        if prefix == "jaxmarl":
            return _jaxmarl(rest)
    if ":" in name and "/" not in name and all(p.isidentifier() for p in name.replace(":", ".").split(".")):
        return _module_factory(name)
    entry = _entry_points().get(name)
    if entry is not None:
        return _from_factory(name, lambda: entry.load()())  # load() gives the factory
    raise UnknownGame(unknown_message(name))


def names() -> list[str]:
    """The built-in names and those registered by installed packages."""
    return [*BUILTINS, *sorted(_entry_points())]


def module_path(name: str) -> str | None:
    """For a `package.module:factory` game, the file or package directory of its top-level
    module: what another host needs to import it (Ray ships it as one of `py_modules`); its
    directory is what another process on this host needs on its PYTHONPATH. None for the other
    forms."""
    if ":" not in name or "/" in name:
        return None
    resolve(name)  # imports it, or raises UnknownGame
    top = sys.modules[name.partition(":")[0].split(".")[0]]
    paths = list(getattr(top, "__path__", []) or [])
    path = paths[0] if len(paths) == 1 else getattr(top, "__file__", None)
    return os.path.abspath(path) if path else None
