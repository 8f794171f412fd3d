"""League players against the built-in opponent: jaxmarl's scripted SMAX heuristic.

AlphaStar measured its agents against StarCraft II's built-in AI; SMAX's built-in opponent is
jaxmarl's scripted micro (`actors.games.smax_races.heuristic_policy`: shoot the closest enemy
in range, else walk towards one). Here it also picks its army uniformly from the race's menu.

    outcomes = play_against_heuristic(network, params, ("terran", "zerg"), num_games=256)
    win_rate(outcomes)   # the player's (side 0) win rate, draws counting half

Every game of a batch is one independent game (one game per batch slot, all slots stepped by
one jitted `lax.while_loop` until every game has ended), so the sample is unbiased: no
"first N to finish" selection of short games.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from actors.games import smax_races
from actors.rollout import network_policy, play_to_end


@functools.lru_cache(maxsize=16)
def _play_fn(network, config: smax_races.SmaxRacesConfig, greedy: bool):
    fns = smax_races._cached_functions(config)
    max_steps = config.max_steps + 1

    @jax.jit
    def play(params, races, key):
        batch = races.shape[0]
        key, reset_key = jax.random.split(key)
        heuristic, scripted_state = smax_races.heuristic_side(fns, 1, batch)
        games = smax_races.start_games(fns, races, reset_key, network.initial_state(batch),
                                       scripted_state)
        outcome, _, _, ended = play_to_end(fns.step, network_policy(network, params, greedy),
                                           heuristic, games, key, max_steps)
        return outcome, ended

    return play


def play_against_heuristic(network, params, races: tuple[str, str], num_games: int, seed: int = 0,
                           config: smax_races.SmaxRacesConfig | None = None,
                           greedy: bool = False) -> np.ndarray:
    """Plays `num_games` SMAX races games of the network's player (side 0, race `races[0]`)
    against the scripted heuristic (side 1, race `races[1]`); returns the outcomes [num_games]
    int8 from the player's side (+1 win, 0 draw, -1 loss)."""
    if num_games < 1:
        raise ValueError(f"num_games must be at least 1; got {num_games}")
    config = config or smax_races.SmaxRacesConfig()
    race_pair = smax_races.matchup_array(tuple(races), num_games)
    play = _play_fn(network, config, bool(greedy))
    outcomes, finished = play(jax.device_put(params), jnp.asarray(race_pair), jax.random.PRNGKey(seed))
    if not bool(np.all(np.asarray(finished))):  # the game ends every game at max_steps
        raise RuntimeError("a game against the heuristic did not end within max_steps")
    return np.asarray(outcomes, np.int8)


def win_rate(outcomes: np.ndarray) -> float:
    """Wins plus half the draws, over games."""
    outcomes = np.asarray(outcomes)
    return float(np.mean((outcomes > 0) + 0.5 * (outcomes == 0)))
