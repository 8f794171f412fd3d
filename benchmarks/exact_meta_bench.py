"""Cost of the exact poker meta-game per new frozen player: `python -m benchmarks.exact_meta_bench`.

A new frozen player costs (1) its exact tabular policy (the run's network on every information
state: `poker_policy.network_policy`) and its own reach of every terminal history, once, and
(2) its exact payoffs against the K frozen players already in (one matrix product,
`TerminalPaths.payoffs`). Measured for the run's default Leduc network at K = 100, 300, 1,000,
off the actors' path (the evaluator node does it). The limit: the time between two snapshots of
one agent in a default Leduc run (20k agent steps at ~12k actor steps/s: ~2 s), so that exact
payoffs keep up with a league that snapshots every agent that often.
"""

from __future__ import annotations

import time

import numpy as np
from absl import app, flags

flags.DEFINE_string("game", "leduc_poker", "kuhn_poker or leduc_poker")
flags.DEFINE_string("sizes", "100,300,1000", "frozen players already in")
flags.DEFINE_integer("repeats", 3, "timed repeats (median)")
flags.DEFINE_float("limit_s", 2.0, "seconds per new player the league can afford")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    from actors.games.poker import openspiel as poker
    from actors.games.poker import policy as poker_policy
    from experiments.build import initial_params, make_game, make_network
    from experiments.config import RunConfig

    config = RunConfig.make(game=FLAGS.game)
    game = poker.load_game(FLAGS.game)
    spec = make_game(config, 1).spec
    network = make_network(config, spec)
    walk = poker_policy.PolicyWalk(game, network)
    paths = poker_policy.TerminalPaths(game)

    def new_player(seed):
        params = initial_params(network, spec, seed, 0)
        started = time.perf_counter()
        table = poker_policy.network_policy(game, network, params, walk=walk)
        reach = paths.reaches(table)
        return reach, time.perf_counter() - started

    new_player(0)  # compile
    tabular = float(np.median([new_player(s)[1] for s in range(1, 1 + FLAGS.repeats)]))
    print(f"{FLAGS.game}: {len(paths.chance)} terminal histories; network {config.network}")
    print(f"tabular policy + reach of a new player: {tabular * 1e3:.1f} ms (median of {FLAGS.repeats})")
    rng = np.random.default_rng(0)
    reach, _ = new_player(99)
    worst = 0.0
    for k in (int(x) for x in FLAGS.sizes.split(",")):
        others = rng.random((k, 2, len(paths.chance)))  # stands for k cached reaches
        times = []
        for _ in range(FLAGS.repeats):
            started = time.perf_counter()
            paths.payoffs(reach, others)
            times.append(time.perf_counter() - started)
        payoff = float(np.median(times))
        total = tabular + payoff
        worst = max(worst, total)
        print(f"K={k:5d}: payoffs {payoff * 1e3:7.1f} ms, per new player {total * 1e3:7.1f} ms, "
              f"reach cache {k * 2 * len(paths.chance) * 4 / 1e6:.1f} MB (float32)")
    print(f"RESULT exact_meta game={FLAGS.game} tabular_ms={tabular * 1e3:.1f} "
          f"per_player_1000_ms={worst * 1e3:.1f} ratio={worst / FLAGS.limit_s:.3f} target=1.0")


if __name__ == "__main__":
    app.run(main)
