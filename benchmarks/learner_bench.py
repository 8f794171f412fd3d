"""Learner throughput: the reference MLP through Reverb vs on device, and the default SMAX
unit network's update alone, with XLA's FLOP count and the machine's matmul rate.

Reference network (MLP 256 -> LSTM 256 -> policy + value), B=32, T=32, V-trace + TD(lambda) +
UPGO, Adam. In one run, alternating rounds:
- limit: `Learner.learn_from_batch` on one batch already on the devices (no I/O at all);
- reverb/dataset: `Learner.update` with the prefetching `reverb.TrajectoryDataset` sampler;
- reverb/client: the same with the `reverb.Client.sample` sampler thread.
The table is prefilled (uniform, high sample-to-insert ratio) so the learner never waits for
actors: this measures the learner's own input pipeline. Frames = B x (T - 1) learnt steps.

SMAX: the network and learner configuration a default `--races=3` run builds (the unit network
of `agents.make_network` with `--hidden_size=64 --core_size=64`, B=16, T=16, the default loss),
fed one device-resident batch of random legal data shaped like the actor's trajectories.
Compile: seconds to lower and compile the update (no persistent cache). FLOP utilisation:
XLA's cost analysis of the compiled update (FLOPs per update) / its measured time, divided
by the rate of a 2048^3 float32 matmul measured in the same run.

    python -m benchmarks.learner_bench [--updates=30] [--rounds=2] [--parts=reference,smax]
                                       [--virtual_devices=2]

`--virtual_devices=N` runs JAX on N virtual CPU devices (XLA's
`--xla_force_host_platform_device_count`, set before JAX loads): the learner shards each
batch over them, one thread per device.

Last line: `RESULT learner ratio=<reverb/dataset over limit> target=0.8
smax_learnt_steps_per_s=<n> smax_compile_s=<s> smax_flop_utilisation=<x>`.
"""

from __future__ import annotations

import os
import sys
import time

# Virtual CPU devices must be configured before JAX is imported.
for _arg in sys.argv:
    if _arg.startswith("--virtual_devices="):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_"
                                   f"device_count={int(_arg.split('=', 1)[1])}").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from agents.networks import NetworkConfig, ReferenceNetwork  # noqa: E402
from agents.trajectory import (  # noqa: E402
    Step,
    Unroll,
    reverb_signature,
    stack_unrolls,
    time_major,
    write_unroll,
    zeros_unroll,
)
from learners.learner import Learner, LearnerConfig, ReplayConfig  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("updates", 30, "Updates timed per mode and round.")
flags.DEFINE_integer("rounds", 2, "Alternating rounds (the median is reported).")
flags.DEFINE_integer("batch_size", 32, "B (reference network).")
flags.DEFINE_integer("unroll_length", 32, "T (reference network).")
flags.DEFINE_integer("obs_size", 128, "Observation features.")
flags.DEFINE_integer("num_actions", 16, "Actions of the single policy head.")
flags.DEFINE_integer("items", 256, "Unrolls prefilled into the table.")
flags.DEFINE_list("parts", ["reference", "smax"], "What to measure: reference, smax.")
flags.DEFINE_integer("matmul_size", 2048, "Side of the square matmul whose rate is the peak.")
flags.DEFINE_integer("virtual_devices", 1, "JAX virtual CPU devices (read before JAX loads).")


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


def matmul_flops_per_second(n: int, repeats: int = 5) -> float:
    """The rate of one n^3 float32 matmul (2 n^3 FLOPs), best of `repeats`: the peak the
    utilisation figures divide by."""
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(a, a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        f(a, a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best


def compiled_cost(learner: Learner, batch) -> tuple[float, float, float]:
    """(wall seconds to lower and compile the learner's update, the same in this process's CPU
    seconds -- compiling is single-threaded, so on a busy shared machine the CPU time is what
    an idle one would take --, XLA's FLOPs per update)."""
    state = learner._state
    start, cpu = time.perf_counter(), time.process_time()
    compiled = learner._update_fn.lower(state, batch, learner._teacher).compile()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return seconds, cpu, float(cost.get("flops", float("nan")))


def reference_part(peak: float) -> dict:
    import reverb  # the replay path's (the [replay] extra): --parts=smax runs without it

    from learners.replay import make_table

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
    _, _, flops = compiled_cost(learners["dataset"], device_batch)

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
    utilisation = flops * medians["limit"] / (B * (T - 1)) / peak
    print(f"reference limit: {flops / (B * (T - 1)) / 1e6:.2f} MFLOP per learnt step, "
          f"FLOP utilisation {utilisation:.3f}")
    for learner in learners.values():
        learner.close()
    server.stop()
    return {"ratio": medians["reverb/dataset"] / medians["limit"]}


def legal_random_batch(rng, example: Unroll, spec, batch: int) -> Unroll:
    """`batch` unrolls shaped like `example` (the actor's items): random observations, every
    unit alive, every action legal, actions drawn uniformly, the pointer's target 0 where the
    action type does not use it (what the network forces), rewards per step (and per unit
    where the trajectory has a unit axis), episodes ending with probability 1/50 a step."""
    side = spec.side(0)
    n = int(side.num_units)
    heads = side.action.heads
    T = int(np.shape(example.steps.reward)[0])

    def fill(x):
        x = np.asarray(x)
        shape = (batch, *x.shape)
        if x.dtype == np.bool_:
            return np.ones(shape, bool)
        return rng.normal(size=shape).astype(x.dtype)

    obs = jax.tree_util.tree_map(fill, example.steps.observation)
    opp = jax.tree_util.tree_map(fill, example.steps.opponent_observation)
    types = rng.integers(0, heads["action_type"].num_values, (batch, T, n)).astype(np.int32)
    targets = rng.integers(0, heads["target"].num_values, (batch, T, n)).astype(np.int32)
    targets = np.where(types == 5, targets, 0).astype(np.int32)
    game = {"composition": rng.integers(0, heads["composition"].num_values, (batch, T)).astype(np.int32),
            "action_type": types, "target": targets}
    actions, log_mu = {}, {}
    for head, like in example.steps.action.items():
        name, _, unit = head.partition("/")
        value = game[name] if not unit else game[name][..., int(unit)]
        actions[head] = value.astype(np.int32)
        assert actions[head].shape == (batch, *np.shape(like)), (head, np.shape(like))
        log_mu[head] = np.full(actions[head].shape, -1.5, np.float32)
    reward_shape = (batch, *np.shape(example.steps.reward))
    steps = Step(observation=obs, opponent_observation=opp, action=actions,
                 behaviour_log_prob=log_mu,
                 reward=rng.normal(size=reward_shape).astype(np.float32),
                 discount=(rng.random((batch, T)) > 0.02).astype(np.float32),
                 first=rng.random((batch, T)) < 0.02,
                 policy_version=np.zeros((batch, T), np.int32))
    core = jax.tree_util.tree_map(lambda x: np.zeros((batch, *np.shape(x)), np.float32),
                                  example.core_state)
    return time_major(Unroll(steps, core))


def smax_part(peak: float) -> dict:
    from actors.actor import example_unroll
    from actors.games import make_batch_game
    from experiments.build import initial_params, make_network
    from experiments.config import RunConfig

    run = RunConfig()
    config = run.learner
    B, T = config.batch_size, config.unroll_length
    spec = make_batch_game("smax_races", 1).spec
    network = make_network(run, spec)
    params = initial_params(network, spec, 0, 0)
    n_params = sum(np.size(x) for x in jax.tree_util.tree_leaves(params))
    example = example_unroll(spec, network, T)
    learner = Learner(network, params, config, example)
    batch = jax.device_put(legal_random_batch(np.random.default_rng(0), example, spec, B),
                           learner._batch_sharding)
    compile_s, compile_cpu_s, flops = compiled_cost(learner, batch)
    learner.learn_from_batch(batch)   # the jit's own compile (not timed)
    jax.block_until_ready(learner._state)
    assert learner.version() == 1, "the update on random legal data was skipped (non-finite)"

    def limit(n):
        for _ in range(n):
            learner.learn_from_batch(batch)

    steps_per_update = B * (T - 1)
    rates, cpu = [], []
    for _ in range(FLAGS.rounds):
        start = time.process_time()
        rates.append(steps_per_update * FLAGS.updates / timed(limit, FLAGS.updates, learner))
        cpu.append((time.process_time() - start) / FLAGS.updates)
    rate = float(np.median(rates))
    utilisation = flops * rate / steps_per_update / peak
    print(f"smax unit net (hidden {run.network.hidden_size}, core {run.network.core_size}, "
          f"{len(learner._devices)} device(s)): "
          f"{n_params:,} params, {len(network.head_names if hasattr(network, 'head_names') else [])}"
          f" heads, B={B}, T={T}: {rate:,.0f} learnt steps/s ({1e3 * steps_per_update / rate:.1f} ms"
          f" per update, {1e3 * float(np.median(cpu)):.0f} ms CPU; rounds: "
          + ", ".join(f"{x:.0f}" for x in rates) + f"), compile {compile_s:.1f} s "
          f"({compile_cpu_s:.1f} s CPU), {flops / steps_per_update / 1e6:.2f} MFLOP per learnt step, "
          f"FLOP utilisation {utilisation:.3f}")
    learner.close()
    return {"smax_learnt_steps_per_s": rate, "smax_compile_s": compile_s,
            "smax_compile_cpu_s": compile_cpu_s,
            "smax_flop_utilisation": utilisation}


def main(_):
    peak = matmul_flops_per_second(FLAGS.matmul_size)
    print(f"{FLAGS.matmul_size}^3 float32 matmul: {peak / 1e9:.1f} GFLOP/s")
    out = {}
    if "smax" in FLAGS.parts:
        out.update(smax_part(peak))
    if "reference" in FLAGS.parts:
        out.update(reference_part(peak))
    peak_after = matmul_flops_per_second(FLAGS.matmul_size)
    print(f"{FLAGS.matmul_size}^3 float32 matmul again at the end: {peak_after / 1e9:.1f} GFLOP/s")
    line = "RESULT learner"
    if "ratio" in out:
        line += f" ratio={out['ratio']:.2f} target=0.8"
    if "smax_learnt_steps_per_s" in out:
        line += (f" smax_learnt_steps_per_s={out['smax_learnt_steps_per_s']:.0f}"
                 f" smax_compile_s={out['smax_compile_s']:.1f}"
                 f" smax_flop_utilisation={out['smax_flop_utilisation']:.3f}")
    print(line)


if __name__ == "__main__":
    app.run(main)
