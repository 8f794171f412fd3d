"""The base environment (current JAX, numpy 2) beside the replay environment's pinned stack
(JAX 0.4.34, numpy 1.26, TF 2.15), in one run, rounds alternating between the two Pythons:

- learner: `benchmarks.learner_bench --parts=smax`, one default SMAX learner's update alone
  (learnt steps/s, compile seconds);
- league: `benchmarks.device_bench --paths=device`, a whole Kuhn league on the device path in
  one process (recorded games/s, learnt steps/s).

The actors' benchmark (`benchmarks.actor_bench`) writes to Reverb: it exists in the replay
environment only, so it has no pair here.

    python -m benchmarks.stack_bench --base_python=.venv/bin/python \
        --replay_python=.venv-replay/bin/python [--rounds=2] [--league_seconds=40]

Last line: `RESULT stack ... ratio=<base over replay, learnt steps/s of the league> target=0.9`
(the base stack no more than 10% slower on this machine).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("base_python", sys.executable, "the base environment's python")
flags.DEFINE_string("replay_python", "", "the replay environment's python (docs/experience.md, 'The replay environment')")
flags.DEFINE_integer("rounds", 2, "rounds; each runs both parts in both environments")
flags.DEFINE_float("league_seconds", 40.0, "measured seconds of the Kuhn league per run")
flags.DEFINE_float("league_warmup", 20.0, "seconds of the Kuhn league before measuring")
flags.DEFINE_integer("updates", 30, "SMAX learner updates per measurement")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def result_fields(python: str, args: list[str]) -> dict[str, float]:
    """The numbers of the last `RESULT` line of `python -m <args>` run from the repository."""
    done = subprocess.run([python, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{python} -m {' '.join(args)} failed (exit {done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return {k: float(v) for k, v in re.findall(r"(\w+)=([-+0-9.eE]+|nan)", lines[-1])}


def versions(python: str) -> str:
    code = "import jax, numpy, sys; print(f'Python {sys.version.split()[0]}, jax {jax.__version__}, numpy {numpy.__version__}')"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def main(argv):
    del argv
    if not FLAGS.replay_python:
        raise app.UsageError("--replay_python: the replay environment's python (docs/experience.md, 'The replay environment')")
    envs = {"base": FLAGS.base_python, "replay": FLAGS.replay_python}
    for name, python in envs.items():
        print(f"{name:6s} {python}: {versions(python)}", flush=True)
    got: dict[str, dict[str, list[float]]] = {name: {} for name in envs}
    for round_ in range(FLAGS.rounds):
        for name, python in envs.items():
            learner = result_fields(python, ["benchmarks.learner_bench", "--parts=smax",
                                             f"--updates={FLAGS.updates}", "--rounds=1"])
            league = result_fields(python, ["benchmarks.device_bench", "--game=kuhn_poker", "--paths=device",
                                            f"--seconds={FLAGS.league_seconds}",
                                            f"--warmup={FLAGS.league_warmup}"])
            row = {"learner_steps_per_s": learner["smax_learnt_steps_per_s"],
                   "learner_compile_s": learner["smax_compile_s"],
                   "league_games_per_s": league["device_games_per_s"]}
            for key, value in row.items():
                got[name].setdefault(key, []).append(value)
            print(f"round {round_ + 1} {name:6s}: SMAX learner {row['learner_steps_per_s']:,.0f} learnt steps/s "
                  f"(compile {row['learner_compile_s']:.1f} s); Kuhn league {row['league_games_per_s']:,.0f} "
                  "games/s", flush=True)
    median = {name: {k: statistics.median(v) for k, v in rows.items()} for name, rows in got.items()}
    learner_ratio = median["base"]["learner_steps_per_s"] / median["replay"]["learner_steps_per_s"]
    league_ratio = median["base"]["league_games_per_s"] / median["replay"]["league_games_per_s"]
    print(f"medians: base {median['base']}\n         replay {median['replay']}")
    print("RESULT stack " + " ".join(f"{name}_{k}={v:.1f}" for name in envs for k, v in median[name].items())
          + f" learner_ratio={learner_ratio:.2f} ratio={league_ratio:.2f} target=0.9")


if __name__ == "__main__":
    app.run(main)
