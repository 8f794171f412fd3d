"""Env steps per second with random legal actions: SMAX races and the poker pools.

    python -m benchmarks.games_bench [--batches=64,256,1024] [--steps=200]
    python -m benchmarks.games_bench --batches= --poker_batches=256,4096   # poker only

SMAX races 5v5 (five unit slots a side) is timed as one jitted `lax.scan` of random legal actions
and vmapped steps; the limit it is compared with is raw jaxmarl SMAX random play of the same size
(5 vs 5 marines, `SMAX.step` with auto-reset, random available actions) timed the same way in the
same run, so the ratio is what the races layer (strategy step, SC2 damage table, per-side
observations, masks, signals, auto-reset) costs. Poker, in games/s (finished games) and steps/s:
the OpenSpiel pool (Python over pyspiel) stepped with random legal actions from numpy; beside it
in the same run the JAX poker (actors/games/jax_poker.py) at each `--poker_batches` size, both
through the protocol (`game.step` from Python, the same numpy random legal actions) and as one
jitted `lax.scan` of random legal actions and vmapped steps. Run-to-run spread on a shared 2-core
machine is 20-40%: compare the ratios.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from jaxmarl.environments.smax.smax_env import SMAX

from actors.games import smax_races
from actors.games.base import random_legal_actions
from actors.games.poker import game as jax_poker
from actors.games.poker import openspiel as poker
from agents.specs import MASK_KEY

flags.DEFINE_list("batches", ["64", "256", "1024"], "SMAX batch sizes.")
flags.DEFINE_integer("steps", 200, "Steps per timed SMAX scan.")
flags.DEFINE_integer("repeats", 3, "Timed repetitions (best is reported).")
flags.DEFINE_integer("poker_batch", 256, "Poker pool size.")
flags.DEFINE_integer("poker_steps", 200, "Poker pool steps timed.")
flags.DEFINE_list("poker_batches", ["256", "4096"], "JAX poker batch sizes.")
FLAGS = flags.FLAGS


def random_from_mask(key, mask):
    """Uniform legal value per mask row (last axis)."""
    logits = jnp.where(mask, 0.0, -1e9)
    return jax.random.categorical(key, logits).astype(jnp.int32)


def races_runner(batch: int, steps: int, units: int = 5):
    fns = smax_races.SmaxRacesFunctions(smax_races.SmaxRacesConfig(menu=smax_races.fixed_size_menu(units)))
    races = jnp.asarray(np.random.default_rng(0).integers(0, 3, (batch, 2)), jnp.int32)
    reset = jax.jit(jax.vmap(fns.reset))
    step = jax.vmap(fns.step)

    def side_actions(key, obs):
        keys = jax.random.split(key, len(obs[MASK_KEY]))
        return {h: random_from_mask(k, m) for k, (h, m) in zip(keys, obs[MASK_KEY].items())}

    @jax.jit
    def run(state, obs, key):
        def body(carry, _):
            state, obs, key = carry
            key, k0, k1 = jax.random.split(key, 3)
            actions = (side_actions(k0, obs[0]), side_actions(k1, obs[1]))
            state, obs, rewards, done, outcome, _ = step(state, actions)
            return (state, obs, key), done.sum()

        (state, obs, key), dones = jax.lax.scan(body, (state, obs, key), None, length=steps)
        return state, obs, dones.sum()

    state, obs = reset(jax.random.split(jax.random.PRNGKey(0), batch), races)
    return run, (state, obs, jax.random.PRNGKey(1))


def raw_smax_runner(batch: int, steps: int, units: int = 5):
    env = SMAX(num_allies=units, num_enemies=units, use_self_play_reward=True)
    reset = jax.jit(jax.vmap(env.reset))

    @jax.jit
    def run(state, obs, key):
        def body(carry, _):
            state, obs, key = carry
            key, k_act, k_step = jax.random.split(key, 3)
            avail = jax.vmap(env.get_avail_actions)(state)
            keys = jax.random.split(k_act, len(env.agents))
            actions = {a: random_from_mask(k, avail[a].astype(bool)) for k, a in zip(keys, env.agents)}
            obs, state, rewards, dones, _ = jax.vmap(env.step)(
                jax.random.split(k_step, batch), state, actions)
            return (state, obs, key), dones["__all__"].sum()

        (state, obs, key), dones = jax.lax.scan(body, (state, obs, key), None, length=steps)
        return state, obs, dones.sum()

    obs, state = reset(jax.random.split(jax.random.PRNGKey(0), batch))
    return run, (state, obs, jax.random.PRNGKey(1))


def time_runner(run, carry, batch: int, steps: int, repeats: int) -> float:
    state, obs, key = carry
    out = run(state, obs, key)  # compile
    jax.block_until_ready(out)
    best = 0.0
    for r in range(repeats):
        start = time.perf_counter()
        out = run(out[0], out[1], jax.random.PRNGKey(10 + r))
        jax.block_until_ready(out)
        best = max(best, batch * steps / (time.perf_counter() - start))
    return best


def poker_protocol_rates(game, steps: int) -> tuple[float, float]:
    """(games/s, steps/s) of `game.step` driven from Python with numpy random legal actions."""
    batch = game.batch_size
    rng = np.random.default_rng(0)
    ts = game.reset(0)
    for _ in range(3):  # compile (JAX)
        ts = game.step(random_legal_actions(rng, game.spec, ts.observations))
    games, start = 0, time.perf_counter()
    for _ in range(steps):
        ts = game.step(random_legal_actions(rng, game.spec, ts.observations))
        games += int(np.sum(np.asarray(ts.done)))
    elapsed = time.perf_counter() - start
    return games / elapsed, batch * steps / elapsed


def jax_poker_scan_rates(name: str, batch: int, steps: int, repeats: int) -> tuple[float, float]:
    """(games/s, steps/s) of one jitted scan of random legal actions and vmapped JAX poker steps."""
    fns = jax_poker.PokerFunctions(jax_poker.PokerConfig(name))
    step = jax.vmap(fns.step)

    @jax.jit
    def run(state, obs, key):
        def body(carry, key):
            state, obs = carry
            k0, k1 = jax.random.split(key)
            actions = tuple({"action": random_from_mask(k, o[MASK_KEY]["action"])}
                            for k, o in zip((k0, k1), obs))
            state, obs, _, done, _, _ = step(state, actions)
            return (state, obs), done.sum()

        (state, obs), dones = jax.lax.scan(body, (state, obs), jax.random.split(key, steps))
        return state, obs, dones.sum()

    state, obs = jax.jit(jax.vmap(fns.reset))(jax.random.split(jax.random.PRNGKey(0), batch))
    out = jax.block_until_ready(run(state, obs, jax.random.PRNGKey(1)))  # compile
    best = (0.0, 0.0)
    for r in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(run(out[0], out[1], jax.random.PRNGKey(10 + r)))
        elapsed = time.perf_counter() - start
        best = max(best, (int(out[2]) / elapsed, batch * steps / elapsed))
    return best


def poker_rows() -> None:
    for name in ("kuhn_poker", "leduc_poker"):
        pool_games, pool_steps = poker_protocol_rates(
            poker.OpenSpielPool(name, FLAGS.poker_batch), FLAGS.poker_steps)
        print(f"{name} OpenSpiel pool B={FLAGS.poker_batch}: {pool_games:,.0f} games/s "
              f"({pool_steps:,.0f} steps/s)", flush=True)
        for b in (int(x) for x in FLAGS.poker_batches):
            games, steps = poker_protocol_rates(jax_poker.JaxPokerGame(name, b), FLAGS.poker_steps)
            scan_games, scan_steps = jax_poker_scan_rates(name, b, FLAGS.steps, FLAGS.repeats)
            print(f"{name} JAX B={b}: game.step {games:,.0f} games/s ({steps:,.0f} steps/s, "
                  f"x{games / pool_games:.1f} the pool); jitted scan {scan_games:,.0f} games/s "
                  f"({scan_steps:,.0f} steps/s, x{scan_games / pool_games:.1f})", flush=True)


def main(argv):
    del argv
    results = []
    for b in (int(x) for x in FLAGS.batches):
        ours = time_runner(*races_runner(b, FLAGS.steps), b, FLAGS.steps, FLAGS.repeats)
        raw = time_runner(*raw_smax_runner(b, FLAGS.steps), b, FLAGS.steps, FLAGS.repeats)
        results.append((b, ours, raw))
        print(f"smax_races 5v5 B={b}: {ours:,.0f} steps/s; raw jaxmarl SMAX 5v5 {raw:,.0f} "
              f"steps/s; ratio {ours / raw:.2f}", flush=True)
    poker_rows()
    if not results:
        return
    b, ours, raw = max(results, key=lambda r: r[1])
    print(f"RESULT games smax_steps_per_s={ours:.0f} ratio={ours / raw:.2f} target=0.8")


if __name__ == "__main__":
    app.run(main)
