"""Recording SMAX races games to a replay directory (format: actors/replays.py), for supervised
learning (issue 14 section 1; AlphaStar learnt first from human replays, we have none: jaxmarl's
scripted heuristic stands in for the humans). The command: `python -m experiments.record`.

`record(out, "heuristic", games)`: jaxmarl's scripted micro (`smax_races.heuristic_policy`) on
both sides; game g plays configuration g mod 81 of every (side-0 race, side-1 race, side-0
army, side-1 army) of the menu, so every race pairing and army is covered evenly.
`record(out, (network, params), games)`: a player on both sides, sampling its actions and army
itself; game g plays race pairing g mod 9.

Each batch of `chunk_games` games is played by one jitted scan over the game's `max_steps`
steps and written as one chunk (the next batch plays while one is cut into games and written:
the same games, in the same files); an existing directory of the same game, spec and version is
appended to (seeds continue after its chunks).
"""

from __future__ import annotations

import functools
import itertools
import time

import jax
import jax.numpy as jnp
import numpy as np

from actors import replays
from actors.games import smax_races
from actors.games.smax_races.z import smax_z_of_chunk
from agents.specs import MASK_KEY

# Every (race 0, race 1, army 0, army 1) of the menu: 81 configurations.
CONFIGURATIONS = np.array(list(itertools.product(range(3), range(3), range(3), range(3))), np.int32)


class RecordError(ValueError):
    """Bad input to the recorder (the message names it and the fix)."""


def game_config_description(config: smax_races.SmaxRacesConfig) -> dict:
    """What the replay header says of the game: the races and the menu of armies."""
    return {"races": list(smax_races.RACES), "unit_types": list(smax_races.UNIT_TYPES),
            "menu": [[{"name": c.name, "units": [list(u) for u in c.units]} for c in comps]
                     for comps in config.menu],
            "max_steps": config.max_steps}


# ---------------------------------------------------------------------------------------------
# Playing a batch (one jitted scan; every slot plays exactly one game, cut at its end later).


def _record_play(fns, act0, act1, games, key, steps: int):
    """`steps` steps of `actors.rollout.play_step`, recording what `to_games` cuts into games:
    ((obs0, obs1), (actions0, actions1) as the game took them, done, outcome, the armies)."""
    from actors.rollout import play_step

    def body(g, k):
        g, p = play_step(fns.step, act0, act1, g, k)
        return g, ((p.observation, p.opponent_observation), (p.action.game, p.opponent_action.game),
                   p.done, p.outcome, g.game_state.compositions)

    return jax.lax.scan(body, games, jax.random.split(key, steps))[1]


@functools.lru_cache(maxsize=4)
def _heuristic_play(config: smax_races.SmaxRacesConfig):
    fns = smax_races.functions(config)

    @jax.jit
    def play(races, comps, key):
        batch = races.shape[0]
        key, reset_key = jax.random.split(key)
        act0, state0 = smax_races.heuristic_side(fns, 0, batch, comps[:, 0])  # the configuration's armies
        act1, state1 = smax_races.heuristic_side(fns, 1, batch, comps[:, 1])
        games = smax_races.start_games(fns, races, reset_key, state0, state1)
        return _record_play(fns, act0, act1, games, key, fns.spec.max_steps)

    return fns, play


@functools.lru_cache(maxsize=4)
def _player_play(network, config: smax_races.SmaxRacesConfig):
    from actors.rollout import network_policy

    fns = smax_races.functions(config)

    @jax.jit
    def play(params, races, key):
        batch = races.shape[0]
        key, reset_key = jax.random.split(key)
        initial = network.initial_state(batch)
        games = smax_races.start_games(fns, races, reset_key, initial, initial)
        policy = network_policy(network, params)
        return _record_play(fns, policy, policy, games, key, fns.spec.max_steps)

    return fns, play


def legalise(actions: dict, masks: dict) -> tuple[dict, int]:
    """Actions a mask forbids -> the mask's first legal value (the game ignores them: dead
    units, the composition after the first step); the target of a unit whose action type is
    not attack -> 0 (the network's convention: it forces target 0 where the type does not use
    it, agents/unit_network.py). Returns (actions, how many forbidden actions were a real
    choice: a mask row with more than one legal value, for targets only attacks)."""
    out, illegal = {}, 0
    for head, action in actions.items():
        mask = masks[head]
        legal = np.take_along_axis(mask, action[..., None].astype(np.int64), -1)[..., 0]
        chosen = mask.sum(-1) > 1
        fixed = np.where(legal, action, mask.argmax(-1))
        if head == "target":
            attacks = actions["action_type"] == smax_races.ATTACK
            fixed = np.where(attacks, fixed, 0)
            chosen &= attacks
        out[head] = fixed.astype(action.dtype)
        illegal += int(np.sum(~legal & chosen))
    return out, illegal


def to_games(fns, races, out) -> tuple[dict, int]:
    """Scan outputs [T, B, ...] -> the arrays of one chunk (actors.replays.make_chunk), each
    game cut at its end; and the count of recorded actions outside the mask."""
    obs, actions, done, outcome, compositions = jax.tree.map(np.asarray, out)
    done = done.T  # [B, T]
    if not np.all(done.any(1)):
        raise RuntimeError("a game did not end within max_steps")
    length = done.argmax(1) + 1
    horizon = int(length.max())
    batch = races.shape[0]
    valid = np.arange(horizon)[None, :] < length[:, None]  # [B, T]

    def cut(x):  # [T, B, ...] -> [B, horizon, ...], zero after the game's end
        x = np.swapaxes(x[:horizon], 0, 1)
        return np.where(valid.reshape(valid.shape + (1,) * (x.ndim - 2)), x, np.zeros((), x.dtype))

    obs = tuple(jax.tree.map(cut, o) for o in obs)
    acts, illegal = [], 0
    for s in range(2):
        a, bad = legalise({h: cut(v) for h, v in actions[s].items()}, obs[s][MASK_KEY])
        acts.append(a)
        illegal += bad
    final = np.arange(batch), length - 1
    comps = compositions[0]  # [B, 2] after the strategy step
    table = np.asarray(fns.env.menu_table)
    unit_types = np.stack([table[races[:, s], comps[:, s]] for s in range(2)], 1)
    per_game = {"races": np.asarray(races, np.int8), "compositions": np.asarray(comps, np.int8),
                "unit_types": np.asarray(unit_types, np.int8)}
    arrays = replays.make_chunk(obs, tuple(acts), length, outcome.T[final], per_game, statistics=smax_z_of_chunk)
    return arrays, illegal


def record(out: str, policy, games: int, chunk_games: int = 27, seed: int = 0,
           config: smax_races.SmaxRacesConfig | None = None, log=print) -> dict:
    """Records `games` games to `out`; returns figures (games, steps, seconds, outcomes).
    `policy`: "heuristic" (both sides), or a player's (network, params) on both sides
    (`experiments.record.load_player` reads one from a league run)."""
    if games < 1 or chunk_games < 1:
        raise RecordError(f"--games={games} and --chunk_games={chunk_games} must be at least 1")
    config = config or smax_races.SmaxRacesConfig()
    fns = smax_races.functions(config)
    if policy == "heuristic":
        _, play = _heuristic_play(config)
        player = None
    else:
        network, params = policy
        _, play = _player_play(network, config)
        player = jax.device_put(params)
    writer = replays.ReplayWriter(out, fns.spec, game_config_description(config))
    first_chunk = writer._next
    done_games, steps, illegal, tally = 0, 0, 0, np.zeros(3, int)
    start = time.time()

    def dispatch(chunk: int, first_game: int):
        """Starts chunk `chunk`'s games (asynchronously: JAX returns before they are played)."""
        batch = min(chunk_games, games - first_game)
        index = np.arange(first_game, first_game + batch)
        key = jax.random.PRNGKey(seed * 1_000_003 + first_chunk + chunk)
        if player is None:
            conf = CONFIGURATIONS[index % len(CONFIGURATIONS)]
            races, comps = conf[:, :2], conf[:, 2:]
            return races, play(jnp.asarray(races), jnp.asarray(comps), key)
        races = CONFIGURATIONS[::9, :2][index % 9]
        return races, play(player, jnp.asarray(races), key)

    chunk = 0
    pending = dispatch(0, 0)
    while done_games < games:
        races, out_arrays = pending
        batch = races.shape[0]
        if done_games + batch < games:  # the next chunk plays while this one is cut and written
            pending = dispatch(chunk + 1, done_games + batch)
        arrays, bad = to_games(fns, races, out_arrays)
        del out_arrays
        writer.append(arrays)
        done_games += batch
        steps += int(arrays["length"].sum())
        illegal += bad
        tally += np.bincount(arrays["outcome"].astype(int) + 1, minlength=3)
        chunk += 1
        elapsed = time.time() - start
        log(f"[record] {done_games}/{games} games, {steps} steps, {elapsed:.0f}s "
            f"({done_games / elapsed:.1f} games/s, {2 * steps / elapsed:.0f} side-steps/s); side 0: "
            f"{tally[2]} won, {tally[1]} drawn, {tally[0]} lost", flush=True)
    figures = {"games": done_games, "steps": steps, "seconds": time.time() - start,
               "illegal_actions": illegal, "wins": int(tally[2]), "draws": int(tally[1]),
               "losses": int(tally[0])}
    log(f"[record] wrote {done_games} games to {out} ({figures['seconds']:.0f}s); "
        f"{illegal} recorded choices were outside the legal mask and stored as the first legal value",
        flush=True)
    return figures
