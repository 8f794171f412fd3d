"""Actor throughput (with Reverb writes and parameter refresh) vs the fused env+policy limit.

SMAX races 5v5 (`fixed_size_menu(5)`, 100 battle steps), the default `UnitNetwork` on both
sides, in one run for each batch size B:
- limit: one jitted `lax.scan` of T-1 steps of env + both policies, nothing leaves the device
  (purejaxrl-style fused loop; the upper bound of any actor for this network and batch);
- actor: `actors.actor.Actor` writing every unroll to a real Reverb table (in-process server),
  refreshing its parameters every `--refresh_seconds` from a source whose version goes up on
  every request, reporting results to a match source.
Env steps = games x steps (both sides act in each).

    python -m benchmarks.actor_bench [--batch_sizes=64,256,1024] [--seconds=10]

Last line: `RESULT actor ratio=<actor / limit at B=256> target=0.6`.
"""

from __future__ import annotations

import time

import jax
import numpy as np
import reverb
from absl import app, flags

from actors.actor import Actor, ActorConfig, example_unroll, make_policy_fn
from actors.games import make_batch_game
from actors.games.smax_races import SmaxRacesConfig, fixed_size_menu
from agents import make_network
from agents.trajectory import reverb_signature

FLAGS = flags.FLAGS
flags.DEFINE_list("batch_sizes", ["64", "256", "1024"], "Batch sizes B.")
flags.DEFINE_float("seconds", 10.0, "Seconds timed per mode and batch size (at least).")
flags.DEFINE_integer("unroll_length", 32, "T.")
flags.DEFINE_float("refresh_seconds", 1.0, "Actor parameter refresh period.")


class Matches:
    def __init__(self):
        self.results = 0

    def request_match(self, agent_id):
        return {"opponent_id": "frozen", "branch": "bench", "home_race": "terran",
                "away_race": "zerg"}

    def report_results(self, results):
        self.results += len(results)


class BumpingParams:
    """Every refresh finds a new version (so the actor really swaps parameters)."""

    def __init__(self, params):
        self.params, self.version = params, 0

    def latest_params(self, player_id, min_version=None):
        if min_version is not None:
            self.version += 1
        return self.version, self.params


def fused_limit(game, network, params, steps: int, seconds: float) -> float:
    """Env steps/s of the fused jitted scan (env + both policies), no host round trips."""
    policy = make_policy_fn(network)
    vstep = jax.vmap(game.fns.step)
    batch = game.batch_size

    @jax.jit
    def run(carry, key):
        def body(carry, key):
            state, obs, s0, s1, first = carry
            a0, a1, s0, s1 = policy(params, params, key, obs[0], obs[1], s0, s1, first)
            state, obs, _, done, _, _ = vstep(state, (a0.game, a1.game))
            return (state, obs, s0, s1, done), done.sum()

        return jax.lax.scan(body, carry, jax.random.split(key, steps))

    timestep = game.reset(0)
    carry = (game.state, timestep.observations, network.initial_state(batch),
             network.initial_state(batch), np.ones(batch, bool))
    key = jax.random.PRNGKey(0)
    carry, _ = jax.block_until_ready(run(carry, key))  # compile
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        key, sub = jax.random.split(key)
        carry, done = run(carry, sub)
        calls += 1
    jax.block_until_ready(carry)
    return calls * steps * batch / (time.perf_counter() - start)


def actor_rate(game, network, params, seconds: float) -> tuple[float, dict]:
    T = FLAGS.unroll_length
    example = example_unroll(game.spec, network, T)
    table = reverb.Table("bench", reverb.selectors.Uniform(), reverb.selectors.Fifo(),
                         max_size=max(2 * game.batch_size, 256),
                         rate_limiter=reverb.rate_limiters.MinSize(1),
                         signature=reverb_signature(example))
    server = reverb.Server([table])
    actor = Actor("bench", "agent", game, network, Matches(), BumpingParams(params),
                  f"localhost:{server.port}", "bench",
                  ActorConfig(unroll_length=T, param_refresh_seconds=FLAGS.refresh_seconds,
                              episodes_per_match=10**9))
    try:
        actor.run(num_steps=2 * (T - 1))  # compile, fill the writer pipeline
        before = actor.metrics()
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            actor.run(num_steps=T - 1)
        elapsed = time.perf_counter() - start
        after = actor.metrics()
    finally:
        actor.close()
        server.stop()
    rate = (after["env_steps"] - before["env_steps"]) / elapsed
    info = {k: after[k] - before[k] for k in ("param_refreshes", "items", "episodes")}
    return rate, info


def main(argv):
    del argv
    config = SmaxRacesConfig(menu=fixed_size_menu(5))
    ratios = {}
    print(f"devices={jax.devices()}  T={FLAGS.unroll_length}  seconds={FLAGS.seconds}")
    for b in [int(x) for x in FLAGS.batch_sizes]:
        game = make_batch_game("smax_races", b, config=config)
        network = make_network(game.spec, unit=True)
        params = network.init(jax.random.PRNGKey(0), game.spec.side(0).zero_observation())
        if b == int(FLAGS.batch_sizes[0]):
            n = sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(params))
            print(f"unit network: {n} parameters, heads {len(network.head_names)}")
        limit = fused_limit(game, network, params, FLAGS.unroll_length - 1, FLAGS.seconds)
        rate, info = actor_rate(game, network, params, FLAGS.seconds)
        ratios[b] = rate / limit
        print(f"B={b:5d}  limit {limit:9.0f} env steps/s   actor {rate:9.0f} env steps/s   "
              f"ratio {ratios[b]:.2f}   ({info})", flush=True)
    key = 256 if 256 in ratios else sorted(ratios)[len(ratios) // 2]
    print(f"RESULT actor ratio={ratios[key]:.2f} target=0.6")


if __name__ == "__main__":
    app.run(main)
