"""Learner checkpoints: the project's own format (`learners/checkpoint.py`: msgpack with a
sha256, written atomically, the previous one kept) beside Orbax (`orbax.checkpoint`, the JAX
ecosystem's checkpointer, installed with flax), on the default SMAX learner's state, in one run.

    python -m benchmarks.checkpoint_bench --rounds=5

For each: seconds to save (until the files are complete) and to restore, bytes on disk, and
whether 4 KB of noise written into the middle of the largest file is caught on restore (issue
31's damage: the file keeps its size). Last line:
`RESULT checkpoint save_s=<ours> orbax_save_s=<orbax> ratio=<ours / orbax save> caught=<ours>/<orbax> target=caught both`.
"""

from __future__ import annotations

import os
import tempfile
import time

import jax
import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", 5, "saves and restores timed per format (the median is kept)")


def learner_state():
    from actors.games import make_batch_game
    from experiments.build import initial_params, make_network
    from experiments.config import RunConfig
    from learners.update import make_optimizer

    run = RunConfig()
    spec = make_batch_game("smax_races", 1).spec
    params = initial_params(make_network(run, spec), spec, 0, 0)
    optimizer = make_optimizer(run.learner)
    return params, optimizer.init(params)


def noise(path: str) -> None:
    data = bytearray(open(path, "rb").read())
    start = max(0, len(data) // 2 - 2048)
    data[start:start + 4096] = np.random.default_rng(0).integers(0, 256, len(data[start:start + 4096]),
                                                                 dtype=np.uint8).tobytes()
    open(path, "wb").write(bytes(data))


def largest_file(directory: str) -> str:
    files = [os.path.join(d, f) for d, _, names in os.walk(directory) for f in names]
    return max(files, key=os.path.getsize)


def size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(path) for f in names)


def ours(params, opt_state, root: str) -> dict:
    from learners import checkpoint

    file = os.path.join(root, "ours", checkpoint.FILENAME)
    os.makedirs(os.path.dirname(file))
    saves, restores = [], []
    for i in range(FLAGS.rounds):
        started = time.perf_counter()
        checkpoint.save(file, checkpoint.Checkpoint(i, i, 0, params, opt_state))
        saves.append(time.perf_counter() - started)
        started = time.perf_counter()
        checkpoint.restore(file, params, opt_state)
        restores.append(time.perf_counter() - started)
    nbytes = size(file)
    noise(file)
    try:
        restored = checkpoint.restore(file, params, opt_state)
        caught = not all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(restored.params),
                                                                jax.tree_util.tree_leaves(params)))
        caught = "no (different values)" if caught else "no"
    except checkpoint.CheckpointError:
        caught = "yes"
    return {"save": float(np.median(saves)), "restore": float(np.median(restores)), "bytes": nbytes, "caught": caught}


def orbax(params, opt_state, root: str) -> dict:
    import orbax.checkpoint as ocp

    state = {"params": params, "opt_state": opt_state}
    directory = os.path.join(root, "orbax")
    manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(max_to_keep=2))
    saves, restores = [], []
    for i in range(FLAGS.rounds):
        started = time.perf_counter()
        manager.save(i, args=ocp.args.StandardSave(state))
        manager.wait_until_finished()
        saves.append(time.perf_counter() - started)
        started = time.perf_counter()
        manager.restore(i, args=ocp.args.StandardRestore(state))
        restores.append(time.perf_counter() - started)
    last = manager.latest_step()
    step_dir = os.path.join(directory, str(last))
    nbytes = size(step_dir)
    noise(largest_file(step_dir))
    try:
        restored = manager.restore(last, args=ocp.args.StandardRestore(state))
        same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
                   zip(jax.tree_util.tree_leaves(restored), jax.tree_util.tree_leaves(state)))
        caught = "no (restored the saved values)" if same else "no (restored different values)"
    except Exception as e:  # noqa: BLE001 -- whatever Orbax raises on a damaged file
        caught = f"yes ({type(e).__name__})"
    manager.close()
    return {"save": float(np.median(saves)), "restore": float(np.median(restores)), "bytes": nbytes, "caught": caught}


def main(argv):
    del argv
    params, opt_state = learner_state()
    n = sum(np.size(x) for x in jax.tree_util.tree_leaves(params))
    print(f"the default SMAX learner: {n:,} parameters, with its optimiser state", flush=True)
    root = tempfile.mkdtemp(prefix="checkpoint_bench_")
    results = {"ours (msgpack + sha256)": ours(params, opt_state, root), "Orbax CheckpointManager": orbax(params, opt_state, root)}
    for name, r in results.items():
        print(f"{name:>26}: save {r['save'] * 1000:7.1f} ms  restore {r['restore'] * 1000:7.1f} ms  "
              f"{r['bytes'] / 1e6:6.2f} MB  noise caught: {r['caught']}", flush=True)
    a, b = results.values()
    print(f"RESULT checkpoint save_s={a['save']:.4f} orbax_save_s={b['save']:.4f} ratio={a['save'] / b['save']:.2f} "
          f"caught={a['caught'].split()[0]}/{b['caught'].split()[0]} target=caught both")


if __name__ == "__main__":
    app.run(main)
