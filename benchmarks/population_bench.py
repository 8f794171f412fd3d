"""The population program against one program per agent and against the fused limit, in one run.

    python -m benchmarks.population_bench --game=smax_races --seconds=180 --warmup=150
    python -m benchmarks.population_bench --game=kuhn_poker --seconds=120 --warmup=60

Three measurements, one after another on the same machine (compare their ratios):
- `limit`: one fused program (rollout and update, `learners.device.DeviceLearner`) of the
  league's total batch (agents x learner.batch_size games, self-play) alone: what the device
  does with that batch when nothing else runs;
- `population`: the game's default league (`python -m experiments.league --game=G`, in one
  process) with `--device.population` (its agents' chunks as one vmapped program);
- `per_agent`: the same league with `--device.population=false` (one program per agent,
  `device.threads` at a time: the device path before);
- `split` (when asked for in `--arms`): the population in `--device.population_parts=0`
  parts, one per thread, side by side.
The leagues' rates are the increments of league.db's games and of the learners' learnt steps
over the last `--seconds` (compiles fall in the warm-up). Issue 55's CPU target: the 3-race
SMAX league's learnt steps/s >= 0.8 of the limit at the same total batch.

Last line: `RESULT population game=G population_learnt_steps_per_s=... per_agent_...=...
limit_...=... population_over_per_agent=... default=<the arm the backend's defaults run>
default_over_limit=... ratio=<default / limit / 0.8> target=0.8`: on a CPU the default league is
one program per agent, on a GPU or TPU the population program (experiments/config.py,
DEVICE_DEFAULTS).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
from absl import app, flags

from benchmarks import device_bench
from experiments.config import DEVICE_DEFAULTS

FLAGS = flags.FLAGS
flags.DEFINE_float("limit_seconds", 60.0, "measured seconds of the fused limit (after its compile)")
flags.DEFINE_list("arms", ["limit", "population", "per_agent"], "what to measure, in this order")
TARGET = 0.8


def fused_limit(game: str, seconds: float) -> dict:
    """Learnt steps/s of one device learner of the league's total batch, in self-play."""
    import dataclasses

    from actors import rewards
    from actors.actor import example_unroll, value_shape
    from actors.games import make_batch_game
    from actors.rollout import DeviceRollout, Opponents
    from experiments import build
    from experiments.config import RunConfig
    from league.players import learning_agents
    from learners.device import DeviceLearner

    run = RunConfig.make(game=game)
    agents = len(learning_agents(run.league))
    config = dataclasses.replace(run.learner, batch_size=run.learner.batch_size * agents)
    game_ = make_batch_game(game, 1)
    network = build.make_network(run, game_.spec)
    params = build.initial_params(network, game_.spec, 0, run.seed)
    slots = run.device.opponent_slots
    rollout = DeviceRollout(network, game_.fns, config.batch_size, slots, config.unroll_length,
                            rewards.device_reward(run.reward, game_.spec), value_shape=value_shape(network),
                            races=bool(run.game_info.capabilities.races),
                            z_statistic=run.game_info.capabilities.z() if run.z_network else None)
    learner = DeviceLearner(network, params, config, example_unroll(game_.spec, network, config.unroll_length),
                            rollout, updates_per_chunk=run.device.updates_per_chunk, seed=0)
    bank = jax.tree_util.tree_map(lambda x: jnp.stack([jnp.asarray(x)] * slots), params)
    opponents = Opponents(bank, jnp.ones(slots, bool))
    races = None
    if run.game_info.capabilities.races:
        import numpy as np

        rng = np.random.default_rng(0)
        races = rng.integers(0, run.races, size=(config.batch_size, 2)).astype(np.int32)
    learner.play_and_learn(opponents, races)   # compiles
    jax.block_until_ready(learner.current_params())
    start, version0 = time.time(), learner.version()
    while time.time() - start < seconds:
        learner.play_and_learn(opponents, races)
    jax.block_until_ready(learner.current_params())
    elapsed = time.time() - start
    updates = learner.version() - version0
    return {"learnt_steps_per_s": updates * config.batch_size * (config.unroll_length - 1) / elapsed,
            "games_per_s": float("nan"), "batch": config.batch_size, "agents": agents}


def main(argv):
    del argv
    results = {}
    for arm in FLAGS.arms:
        if arm == "limit":
            r = fused_limit(FLAGS.game, FLAGS.limit_seconds)
            print(f"limit      {FLAGS.game}: one fused program of {r['agents']} agents' batch "
                  f"({r['batch']} games): {r['learnt_steps_per_s']:,.0f} learnt steps/s", flush=True)
        else:
            settings = {"population": {"device.population": True},
                        "split": {"device.population": True, "device.population_parts": 0},
                        "per_agent": {"device.population": False}}[arm]
            r = device_bench.measure(FLAGS.game, "device", FLAGS.warmup, FLAGS.seconds, settings)
            print(f"{arm:10s} {FLAGS.game}: {r['games_per_s']:,.0f} recorded games/s, "
                  f"{r['learnt_steps_per_s']:,.0f} learnt steps/s ({r['games']:,} games; {r['run_dir']})",
                  flush=True)
        results[arm] = r

    def rate(arm):
        return results.get(arm, {}).get("learnt_steps_per_s", float("nan"))

    population, per_agent, limit = rate("population"), rate("per_agent"), rate("limit")
    # the target is the league as its defaults run it on this backend (experiments.config:
    # DEVICE_DEFAULTS): the population program on a GPU or TPU, one program per agent on a CPU
    default = "population" if DEVICE_DEFAULTS.get(jax.default_backend(), {}).get("device.population") else "per_agent"
    if "split" in results:
        print(f"split over per_agent {rate('split') / per_agent:.2f}, over population {rate('split') / population:.2f}, "
              f"over limit {rate('split') / limit:.2f}", flush=True)
    print(f"RESULT population game={FLAGS.game} population_learnt_steps_per_s={population:.0f} "
          f"per_agent_learnt_steps_per_s={per_agent:.0f} limit_learnt_steps_per_s={limit:.0f} "
          f"population_games_per_s={results.get('population', {}).get('games_per_s', float('nan')):.0f} "
          f"population_over_per_agent={population / per_agent:.2f} population_over_limit={population / limit:.2f} "
          f"default={default} default_over_limit={rate(default) / limit:.2f} "
          f"ratio={rate(default) / limit / TARGET:.2f} target={TARGET}")


if __name__ == "__main__":
    app.run(main)
