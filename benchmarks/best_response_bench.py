"""How close does one exploiter's learner get to a best response against a fixed target? The
target is the newest Nash mixture of a finished poker league; the measure is exact.

    python -m benchmarks.best_response_bench --run_dir=D --updates=3000 --seeds=0,1 \
        --arms=defaults,noupgo --arm=noupgo:learner.loss.upgo_weight=0

A league exploiter's task in isolation (issue 26, "the gap to a best response"): one
`DeviceLearner` with an exploiter's loss and learning rate (`LearnerConfig.for_role`) starts
from the random initial parameters and plays its own games against the Nash mixture in league.db
of `--run_dir`, each chunk's opponent slots drawn by the mixture's weights (as the league's
device path draws them).
Every `--every` updates it is measured exactly (`actors.evaluator.best_response_gap`): its
chips a game against the mixture, seats averaged, beside the best response's value (OpenSpiel).
Nothing else runs, so the learner gets the machine: thousands of updates take seconds, where a
league exploiter gets ~200 updates between snapshots (Leduc defaults).

Each arm is the game's defaults with `--arm=NAME:key=value,...` settings (`RunConfig` field
paths, JSON values) on top, once per seed of `--seeds`, one after the other. The arm's network
may differ from the run's (`--arm=w256:network.hidden_size=256`: is the learner's width what
holds it back?): the opponents then run the run's own network (`DeviceRollout`'s
`opponent_network`). Both must be MLPs, or LSTMs of one core size.

The last line: `RESULT best_response value=<v> br=<b> ratio=<v/b> target=1.0 arm=<a>`, for the
arm whose mean final value is highest (ratio 1: a best response).
"""

from __future__ import annotations

import json
import time

import numpy as np
from absl import app, flags

from benchmarks.poker_quality import parse_arm

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "a finished (or running) poker league's run directory")
flags.DEFINE_integer("updates", 3000, "learner updates per arm and seed")
flags.DEFINE_integer("every", 500, "updates between exact measurements")
flags.DEFINE_string("seeds", "0,1", "comma-separated seeds (initial parameters and games)")
flags.DEFINE_string("arms", "defaults", "arms to run, in order: 'defaults' and the names of --arm")
flags.DEFINE_multi_string("arm", [], "NAME:key=value,key=value (RunConfig field paths)")


def nash_target(run_dir: str):
    """(player ids, weights, params) of the newest Nash mixture of `run_dir`'s league.db."""
    from coordinator.history import LeagueHistory
    from coordinator.param_store import player_params

    latest = LeagueHistory(run_dir, readonly=True).latest_nash()
    if latest is None:
        raise SystemExit(f"{run_dir}: league.db has no Nash distribution yet; run the league longer "
                         "(the coordinator solves its meta-game every few seconds)")
    ids = sorted(p for p, w in latest[1].items() if w > 0)
    weights = np.asarray([latest[1][p] for p in ids])
    return ids, weights / weights.sum(), [player_params(run_dir, p)[1] for p in ids]


def run_arm(game_name: str, settings: dict, ids, weights, params, updates: int, every: int,
            seed: int, run_config=None) -> dict:
    """One learner of one arm: {"curve": [(updates, exploiter value)], "br_value", "steps_per_s"}.
    `run_config`: the config of the run whose players `params` are (None: the game's defaults)."""
    import jax
    import jax.numpy as jnp

    from actors import rewards
    from actors.actor import example_unroll, value_shape
    from actors.games import make_batch_game
    from actors.games.poker import openspiel as poker
    from actors.games.poker import policy as poker_policy
    from actors.games.poker.exact import best_response_gap
    from actors.rollout import DeviceRollout, Opponents
    from agents import network_key
    from experiments import build
    from experiments.config import ConfigError, RunConfig
    from learners.device import DeviceLearner

    config = RunConfig.make(game=game_name, runner="inprocess", **settings)
    run = config.learner.for_role(main_agent=False)
    game = make_batch_game(game_name, run.batch_size)
    network = build.make_network(config, game.spec)
    theirs = build.make_network(run_config or RunConfig.make(game=game_name), game.spec)
    build.check_shapes(f"player {ids[0]} of the run", params[0],
                       build.initial_params(theirs, game.spec, 0, 0))
    other = network_key(network) != network_key(theirs)
    if other and network.core_size != theirs.core_size:
        raise ConfigError(f"the arm's recurrent core ({network.core_size}) differs from the run's "
                          f"({theirs.core_size}); change the width only (network.hidden_size)")
    initial = build.initial_params(network, game.spec, 0, seed)
    slots, k = config.device.opponent_slots, config.device.updates_per_chunk
    rollout = DeviceRollout(network, game.fns, run.batch_size, slots, run.unroll_length,
                            rewards.device_reward(config.reward, game.spec), value_shape=value_shape(network),
                            opponent_network=theirs if other else None)
    learner = DeviceLearner(network, initial, run, example_unroll(game.spec, network, run.unroll_length),
                            rollout, updates_per_chunk=k, seed=seed)
    exact = poker.load_game(game_name)
    walk = poker_policy.PolicyWalk(exact, network)
    their_walk = poker_policy.PolicyWalk(exact, theirs) if other else walk
    paths = poker_policy.TerminalPaths(exact)
    target = poker_policy.mix_policies(exact, [their_walk(p) for p in params], weights)
    on_device = [jax.device_put(p) for p in params]
    rng = np.random.default_rng(seed)

    def measure():
        return best_response_gap(exact, walk(learner.params()[1]), target, paths)

    gap = measure()
    curve, done, learning_time = [(0, gap["exploiter_value"])], 0, 0.0
    while done < updates:
        picks = rng.choice(len(ids), size=slots, p=weights)
        bank = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[on_device[i] for i in picks])
        start = time.perf_counter()
        learner.play_and_learn(Opponents(bank, jnp.zeros(slots, bool)))
        learning_time += time.perf_counter() - start if done else 0.0  # the first chunk compiles
        done += k
        if done % every < k or done >= updates:
            curve.append((done, measure()["exploiter_value"]))
    steps = (done - k) * run.batch_size * run.unroll_length
    return {"curve": curve, "br_value": gap["br_value"], "steps_per_s": steps / max(learning_time, 1e-9)}


def main(argv):
    del argv
    from experiments.config import ConfigError, RunConfig

    if not FLAGS.run_dir:
        raise SystemExit("--run_dir is required: a poker league's run directory (its league.db and params/)")
    try:
        run_config = RunConfig.from_dict(json.load(open(f"{FLAGS.run_dir}/config.json")))
    except FileNotFoundError:
        raise SystemExit(f"{FLAGS.run_dir}/config.json not found: pass a league's run directory") from None
    game_name = run_config.game
    if game_name not in ("kuhn_poker", "leduc_poker"):
        raise SystemExit(f"{FLAGS.run_dir} is a {game_name} league; this benchmark needs a poker league")
    defined = dict(parse_arm(text) for text in FLAGS.arm)
    arms = [a for a in FLAGS.arms.split(",") if a]
    unknown = [a for a in arms if a != "defaults" and a not in defined]
    if unknown:
        raise SystemExit(f"--arms names {unknown} with no --arm=NAME:settings; define them or use 'defaults'")
    seeds = [int(s) for s in FLAGS.seeds.split(",") if s]
    ids, weights, params = nash_target(FLAGS.run_dir)
    print(f"target: the Nash mixture of {FLAGS.run_dir} ({len(ids)} players: "
          + ", ".join(f"{p} {w:.2f}" for p, w in zip(ids, weights)) + ")", flush=True)
    finals = {}
    for arm in arms:
        for seed in seeds:
            try:
                out = run_arm(game_name, defined.get(arm, {}), ids, weights, params, FLAGS.updates,
                              FLAGS.every, seed, run_config)
            except ConfigError as e:
                raise SystemExit(f"arm {arm}: {e}") from None
            finals.setdefault(arm, []).append(out["curve"][-1][1])
            br = out["br_value"]
            print(f"  [{arm} seed {seed}] best response {br:.3f}; value at updates "
                  + ", ".join(f"{u}: {v:+.3f}" for u, v in out["curve"])
                  + f"; {out['steps_per_s']:,.0f} learnt steps/s", flush=True)
    print_finals("best_response", finals, br, f"final value against the Nash mixture (seeds {FLAGS.seeds})")


def print_finals(name: str, finals: dict, br: float, column: str, digits: int = 3) -> None:
    """The table of each arm's final values (`finals`: arm -> one per seed) against the best
    response's value `br`, and the RESULT line of the arm with the highest mean."""
    print(f"\n| arm | {column} | mean | of the best response ({br:.{digits}f}) |")
    print("|---|---|---|---|")
    for arm, values in finals.items():
        print(f"| {arm} | {', '.join(f'{v:+.{digits}f}' for v in values)} | {np.mean(values):+.{digits}f} | "
              f"{np.mean(values) / br:.2f} |")
    best = max(finals, key=lambda a: np.mean(finals[a]))
    value = float(np.mean(finals[best]))
    print(f"RESULT {name} value={value:.{digits}f} br={br:.{digits}f} ratio={value / br:.2f} target=1.0 arm={best}")


if __name__ == "__main__":
    app.run(main)
