"""SMAX's built-in opponent, jaxmarl's scripted heuristic: the game's scripted opponent
(`actors.games.base.ScriptedOpponent`: `side`, `play`, `pick_probabilities`, `army_units`).

AlphaStar measured its agents against StarCraft II's built-in AI; SMAX's built-in opponent is
jaxmarl's scripted micro (`game.heuristic_policy`: shoot the closest enemy in range, else walk
towards one). Here it also picks its army uniformly from the race's menu.

    outcomes = play_against_heuristic(network, params, ("terran", "zerg"), num_games=256)
    win_rate(outcomes)   # the player's (side 0) win rate, draws counting half

Every game of a batch is one independent game (one game per batch slot, all slots stepped by
one jitted `lax.while_loop` until every game has ended), so the sample is unbiased: no
"first N to finish" selection of short games.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from actors.games.smax_races import game
from actors.rollout import network_policy, play_step, play_to_end


@functools.lru_cache(maxsize=16)
def _play_fn(network, config: game.SmaxRacesConfig, greedy: bool):
    fns = game.functions(config)
    max_steps = config.max_steps + 1

    @jax.jit
    def play(params, races, forced, key):
        batch = races.shape[0]
        key, reset_key = jax.random.split(key)
        heuristic, scripted_state = game.heuristic_side(fns, 1, batch)
        # The game forces the armies (`SmaxRacesFunctions.reset` with [races, armies]).
        games = game.start_games(fns, jnp.stack([races, forced.T], 1), reset_key,
                                       network.initial_state(batch), scripted_state)
        act0, act1 = network_policy(network, params, greedy), heuristic
        # The strategy step (no game ends on it; its key split as play_to_end splits each
        # step's), then the battle: the armies both sides played.
        key, strategy_key = jax.random.split(key)
        games, _ = play_step(fns.step, act0, act1, games, strategy_key)
        compositions = games.game_state.compositions
        outcome, _, _, ended = play_to_end(fns.step, act0, act1, games, key, max_steps - 1)
        return outcome, ended, compositions

    return play


class HeuristicGames(NamedTuple):
    """Games against the heuristic: `outcomes` [B] int8 from the player's side (+1 win, 0 draw,
    -1 loss) and the armies both sides played, `compositions` [B, 2] (menu indices of each
    side's race: the player's, the heuristic's)."""

    outcomes: np.ndarray
    compositions: np.ndarray


def play_against_heuristic(network, params, races: tuple[str, str], num_games: int, seed: int = 0,
                           config: game.SmaxRacesConfig | None = None,
                           greedy: bool = False) -> np.ndarray:
    """Plays `num_games` SMAX races games of the network's player (side 0, race `races[0]`)
    against the scripted heuristic (side 1, race `races[1]`); returns the outcomes [num_games]
    int8 from the player's side (+1 win, 0 draw, -1 loss)."""
    return play_detailed(network, params, races, num_games, seed, config, greedy).outcomes


def play_detailed(network, params, races: tuple[str, str], num_games: int, seed: int = 0,
                  config: game.SmaxRacesConfig | None = None, greedy: bool = False,
                  compositions=(None, None)) -> HeuristicGames:
    """`play_against_heuristic` with the armies played: `compositions` forces the player's
    and/or the heuristic's army, each a menu index of its race or [num_games] of them (one per
    game, -1: its own pick) or None (the side picks its own: the player with its composition
    head, the heuristic uniformly)."""
    if num_games < 1:
        raise ValueError(f"num_games must be at least 1; got {num_games}")
    config = config or game.SmaxRacesConfig()
    if len(compositions) != 2 or any(c is not None and np.shape(c) not in ((), (num_games,))
                                     for c in compositions):
        raise ValueError(f"compositions must be one entry per side, each None, an index or "
                         f"[num_games={num_games}] indices; got {compositions}")
    forced = np.stack([np.broadcast_to(np.asarray(-1 if c is None else c, np.int64), (num_games,))
                       for c in compositions])
    if forced.min() < -1 or forced.max() >= game.COMPOSITIONS_PER_RACE:
        raise ValueError(f"compositions must be menu indices 0..{game.COMPOSITIONS_PER_RACE - 1} "
                         f"(or None / -1: the side's own pick); got {compositions}")
    race_pair = game.matchup_array(tuple(races), num_games)
    play = _play_fn(network, config, bool(greedy))
    outcomes, finished, played = play(jax.device_put(params), jnp.asarray(race_pair),
                                      jnp.asarray(forced, jnp.int32), jax.random.PRNGKey(seed))
    if not bool(np.all(np.asarray(finished))):  # the game ends every game at max_steps
        raise RuntimeError("a game against the heuristic did not end within max_steps")
    return HeuristicGames(np.asarray(outcomes, np.int8), np.asarray(played, np.int32))


@functools.lru_cache(maxsize=16)
def _pick_fn(network, config: game.SmaxRacesConfig):
    fns = game.functions(config)

    @jax.jit
    def picks(params, races):
        batch = races.shape[0]   # the strategy step's observation depends on the races only
        _, obs = jax.vmap(fns.reset)(jax.random.split(jax.random.PRNGKey(0), batch), races)
        out, _ = network.step(params, obs[0], network.initial_state(batch), jnp.ones(batch, bool))
        return jax.nn.softmax(out.logits[game.COMPOSITION_HEAD], -1)

    return picks


def pick_probabilities(network, params, races, config: game.SmaxRacesConfig | None = None
                       ) -> np.ndarray:
    """The player's army pick at the start of a game, pi(army | races) from its composition
    head: [P, COMPOSITIONS_PER_RACE] for the race pairs `races` [P, 2] (side 0's race, side
    1's), as `play_detailed` plays them (no z)."""
    races = np.asarray(races, np.int32)
    if races.ndim != 2 or races.shape[1] != 2:
        raise ValueError(f"races must be [P, 2] race indices (side 0, side 1); got shape {races.shape}")
    play = _pick_fn(network, config or game.SmaxRacesConfig())
    return np.asarray(play(params, jnp.asarray(races)), np.float64)


def scores(outcomes: np.ndarray) -> np.ndarray:
    """Each game's score: a win 1, a draw 0.5, a loss 0."""
    outcomes = np.asarray(outcomes)
    return (outcomes > 0) + 0.5 * (outcomes == 0)


def win_rate(outcomes: np.ndarray, axis: int | None = None):
    """Wins plus half the draws, over games (a float; with `axis`, an array over that axis)."""
    rate = np.mean(scores(outcomes), axis=axis)
    return float(rate) if axis is None else rate


# -- the game's scripted opponent (actors.games.base.ScriptedOpponent) --------------------------

def balanced_armies(num_games: int) -> np.ndarray:
    """The heuristic's army in each of `num_games` games: its menu in turn (game i: army i mod
    K), so each army plays num_games // K games or one more (stratified sampling of its
    uniform pick)."""
    return np.arange(num_games) % game.COMPOSITIONS_PER_RACE


def play_balanced(network, params, races: tuple[str, str], num_games: int, seed: int = 0,
                  config: game.SmaxRacesConfig | None = None, greedy: bool = False) -> np.ndarray:
    """`play_against_heuristic` with the heuristic's armies in turn (`balanced_armies`), the
    player picking its own: the evaluator's measurement over time (the protocol's `play`). With
    the heuristic's pick drawn, every measurement of a run replays one draw of its seed, which
    can give one army a third more games than its share (seed 0's terran against zerg: 28 of
    64 zergling games where 21.3 are expected)."""
    return play_detailed(network, params, races, num_games, seed, config, greedy,
                         compositions=(None, balanced_armies(num_games))).outcomes


side = game.heuristic_side
play = play_balanced


def army_units(config: game.SmaxRacesConfig, race: int, army: int) -> int:
    """Units in army `army` (a menu index) of race `race` (an index into `game.RACES`)."""
    return config.menu[race][army].size


def curriculum(config: game.SmaxRacesConfig, races: list[int], slots: int, settings, rng, lock):
    """One main agent's forced-army curriculum (`curriculum.ForcedCells`: which cells its
    `slots` forced slots play, their armies and handicaps, their results), for the learner
    group; `settings`: the run's device settings (`scripted_task_levels`: handicaps)."""
    import sys

    from actors.games.smax_races.curriculum import ForcedCells

    return ForcedCells(sys.modules[__name__], config, races, slots, settings.scripted_task_levels, rng, lock)


def progress(metrics: dict) -> str:
    """The progress line's words for one main agent's forced-army games (`ScriptedOpponent.progress`):
    their win rate and, with handicaps, the mean share of the heuristic's army they start without."""
    from actors.games.smax_races.curriculum import progress_text

    return progress_text(metrics)
