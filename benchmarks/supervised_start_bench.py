"""The supervised start for 3 races (issue 84 item 5: at most 120 s on 2 cores, held-out accuracy
of the action type and target within 0.02 of the earlier code's per race).

    python -m benchmarks.supervised_start_bench [--replays=DIR] [--rounds=1] [--warm_compile]

Records `--games` games of the heuristic (timed; skipped with `--replays=DIR`, games already
recorded), then trains the three races' supervised agents from them with the earlier loop
(`--method=stepwise` of `supervised.supervised`: one jitted update per step on a batch made on
the host) and with the blocked programs (the default), alternating old, new, old, new for
`--rounds`, each in a process of its own with an empty JAX compilation cache (a fresh machine's
compile; `--warm_compile`: the machine's cache, as a second build on a machine compiles less).
The two learn the same batches in the same order, so their accuracies should agree to float
tolerance. Last line:
`RESULT supervised_start seconds=<recording + new training> old_seconds=<recording + old training>
ratio=<seconds / 120> target=<=1 record_seconds=<s> train_seconds=<new> old_train_seconds=<old>
<race>_action_type=<new>/<old> <race>_target=<new>/<old> ...`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("replays", "", "recorded games to train from (default: record them now, timed)")
flags.DEFINE_integer("games", 324, "games to record (the default --supervised.games)")
flags.DEFINE_integer("steps", 600, "training steps per race (the default --supervised.steps)")
flags.DEFINE_integer("batch_size", 16, "games per step (the default --supervised.batch_size)")
flags.DEFINE_integer("rounds", 1, "old/new pairs, alternating")
flags.DEFINE_bool("warm_compile", False, "use the machine's JAX compilation cache")
flags.DEFINE_list("methods", ["stepwise", "blocked"], "what to time, in this order each round")

LIMIT_S = 120.0

TRAIN = """
import sys, time
from experiments import build
build.enable_compilation_cache()
from actors.games.smax_races import start, supervised
from experiments.config import RunConfig
config = RunConfig.make(game="smax_races", races=3)
started = time.time()
supervised.supervised(sys.argv[1], sys.argv[2], config.race_names, steps=int(sys.argv[4]),
                      batch_size=int(sys.argv[5]), learning_rate=start.LEARNING_RATE,
                      holdout=start.HOLDOUT, hidden_size=config.network.hidden_size,
                      core_size=config.network.core_size, z=config.network.z, seed=start.TRAIN_SEED,
                      method=sys.argv[3])
print("TRAIN_SECONDS", time.time() - started)
"""

RECORD = """
import sys, time
from experiments import build
build.enable_compilation_cache()
from actors.games.smax_races import start
started = time.time()
start.record(sys.argv[1], type("C", (), {"supervised": type("S", (), {"games": int(sys.argv[2])})})())
print("RECORD_SECONDS", time.time() - started)
"""


def _run(code: str, *args: str, env: dict) -> tuple[float, str]:
    started = time.time()
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return time.time() - started, out.stdout


def main(argv):
    del argv
    work = tempfile.mkdtemp(prefix="supervised_bench-")
    env = dict(os.environ)
    record_s = 0.0
    replay_dir = FLAGS.replays
    if not replay_dir:
        replay_dir = os.path.join(work, "replays")
        env_rec = env if FLAGS.warm_compile else {**env, "LEAGUE_JAX_CACHE": os.path.join(work, "jax-record")}
        record_s, _ = _run(RECORD, replay_dir, str(FLAGS.games), env=env_rec)
        print(f"recording {FLAGS.games} games: {record_s:.1f}s (process wall, incl. imports)", flush=True)
    seconds = {m: [] for m in FLAGS.methods}
    reports = {}
    for r in range(FLAGS.rounds):
        for method in FLAGS.methods:
            out = os.path.join(work, f"{method}-{r}.npz")
            run_env = env if FLAGS.warm_compile else {**env, "LEAGUE_JAX_CACHE": os.path.join(work, f"jax-{method}-{r}")}
            wall, _ = _run(TRAIN, replay_dir, out, method, str(FLAGS.steps), str(FLAGS.batch_size), env=run_env)
            seconds[method].append(wall)
            with open(out + ".json") as f:
                reports[method] = json.load(f)["races"]
            acc = ", ".join(f"{race} {v['held_out']['action_type']['accuracy']:.3f}/"
                            f"{v['held_out']['target']['accuracy']:.3f}" for race, v in reports[method].items())
            print(f"round {r} {method}: {wall:.1f}s (process wall); held-out action type/target: {acc}",
                  flush=True)
    new = min(seconds.get("blocked", [float("nan")]))
    old = min(seconds.get("stepwise", [float("nan")]))
    parts = []
    for race in (reports.get("blocked") or reports.get("stepwise") or {}):
        for head in ("action_type", "target"):
            vals = [f"{reports[m][race]['held_out'][head]['accuracy']:.3f}" if m in reports else "-"
                    for m in ("blocked", "stepwise")]
            parts.append(f"{race}_{head}={vals[0]}/{vals[1]}")
    total, old_total = record_s + new, record_s + old
    print(f"RESULT supervised_start seconds={total:.1f} old_seconds={old_total:.1f} "
          f"ratio={total / LIMIT_S:.2f} target=<=1 record_seconds={record_s:.1f} train_seconds={new:.1f} "
          f"old_train_seconds={old:.1f} " + " ".join(parts))


if __name__ == "__main__":
    app.run(main)
