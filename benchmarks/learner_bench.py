"""Learner throughput through Reverb vs the same jitted update on device-resident batches.

Reference network (MLP 256 -> LSTM 256 -> policy + value), B=32, T=32, V-trace + TD(lambda) +
UPGO, Adam. In one run, alternating rounds:
- limit: `Learner.learn_from_batch` on one batch already on the devices (no I/O at all);
- reverb/dataset: `Learner.update` with the prefetching `reverb.TrajectoryDataset` sampler;
- reverb/client: the same with the `reverb.Client.sample` sampler thread.
The table is prefilled (uniform, high sample-to-insert ratio) so the learner never waits for
actors: this measures the learner's own input pipeline. Frames = B x (T - 1) learnt steps.

    python -m benchmarks.learner_bench [--updates=30] [--rounds=2]

Last line: `RESULT learner ratio=<reverb/dataset over limit> target=0.8`.
"""

from __future__ import annotations

import time

import jax
import numpy as np
import reverb
from absl import app, flags

from agents.networks import NetworkConfig, ReferenceNetwork
from agents.trajectory import (
    Step,
    Unroll,
    reverb_signature,
    stack_unrolls,
    write_unroll,
    zeros_unroll,
)
from learners.learner import Learner, LearnerConfig, ReplayConfig, make_table

FLAGS = flags.FLAGS
flags.DEFINE_integer("updates", 30, "Updates timed per mode and round.")
flags.DEFINE_integer("rounds", 2, "Alternating rounds (the median is reported).")
flags.DEFINE_integer("batch_size", 32, "B.")
flags.DEFINE_integer("unroll_length", 32, "T.")
flags.DEFINE_integer("obs_size", 128, "Observation features.")
flags.DEFINE_integer("num_actions", 16, "Actions of the single policy head.")
flags.DEFINE_integer("items", 256, "Unrolls prefilled into the table.")


def random_unroll(rng, net, T, obs_size, num_actions):
    obs = rng.normal(size=(T, obs_size)).astype(np.float32)
    steps = Step(
        observation=obs, opponent_observation=obs,
        action={"action": rng.integers(0, num_actions, T).astype(np.int32)},
        behaviour_log_prob={"action": np.full(T, -np.log(num_actions), np.float32)},
        reward=rng.normal(size=T).astype(np.float32),
        discount=(rng.random(T) > 0.02).astype(np.float32),
        first=rng.random(T) < 0.02, policy_version=np.zeros(T, np.int32))
    core = jax.tree_util.tree_map(lambda x: np.asarray(x[0]), net.initial_state(1))
    return Unroll(steps, core)


def timed(fn, updates, learner):
    start_version = learner.version()
    start = time.perf_counter()
    fn(updates)
    assert learner.version() == start_version + updates  # syncs: waits for the last update
    return time.perf_counter() - start


def main(_):
    B, T = FLAGS.batch_size, FLAGS.unroll_length
    net = ReferenceNetwork(NetworkConfig(heads={"action": FLAGS.num_actions}, mlp_sizes=(256,),
                                         lstm_size=256))
    core = jax.tree_util.tree_map(lambda x: np.asarray(x[0]), net.initial_state(1))
    obs = np.zeros(FLAGS.obs_size, np.float32)
    example = zeros_unroll(obs, obs, ["action"], core, T)
    params = net.init(jax.random.PRNGKey(0), obs)
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))

    replay = ReplayConfig(table="bench", selector="uniform", samples_per_insert=1e4,
                          max_size=FLAGS.items, error_buffer=1e9)
    server = reverb.Server([make_table(replay, reverb_signature(example), B)])
    address = f"localhost:{server.port}"
    rng = np.random.default_rng(0)
    unrolls = [random_unroll(rng, net, T, FLAGS.obs_size, FLAGS.num_actions)
               for _ in range(FLAGS.items)]
    client = reverb.Client(address)
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for u in unrolls:
            write_unroll(writer, replay.table, u)
        writer.flush()

    learners = {}
    for sampler in ("dataset", "client"):
        config = LearnerConfig(batch_size=B, unroll_length=T, replay=replay, sampler=sampler)
        learners[sampler] = Learner(net, params, config, example, reverb_address=address)
    device_batch = jax.device_put(stack_unrolls(unrolls[:B]), learners["dataset"]._batch_sharding)

    def limit(n):
        for _ in range(n):
            learners["dataset"].learn_from_batch(device_batch)

    modes = {
        "limit": (limit, learners["dataset"]),
        "reverb/dataset": (lambda n: learners["dataset"].update(n, timeout=60), learners["dataset"]),
        "reverb/client": (lambda n: learners["client"].update(n, timeout=60), learners["client"]),
    }
    for fn, learner in modes.values():   # compile and fill the prefetch queues
        timed(fn, 3, learner)
    frames = B * (T - 1) * FLAGS.updates
    results = {name: [] for name in modes}
    for _ in range(FLAGS.rounds):
        for name, (fn, learner) in modes.items():
            results[name].append(frames / timed(fn, FLAGS.updates, learner))
    print(f"reference net: {n_params:,} params, B={B}, T={T}, {len(jax.local_devices())} device(s),"
          f" {FLAGS.updates} updates x {FLAGS.rounds} rounds per mode")
    medians = {name: float(np.median(v)) for name, v in results.items()}
    for name, fps in medians.items():
        print(f"{name:16s} {fps:9.0f} frames/s  {fps / (B * (T - 1)):6.2f} updates/s  "
              f"ratio to limit {fps / medians['limit']:.2f}  (rounds: "
              + ", ".join(f"{x:.0f}" for x in results[name]) + ")")
    for learner in learners.values():
        learner.close()
    server.stop()
    print(f"RESULT learner ratio={medians['reverb/dataset'] / medians['limit']:.2f} target=0.8")


if __name__ == "__main__":
    app.run(main)
