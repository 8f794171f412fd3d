"""A new league's first minutes, as a user meets them (issue 84): how soon every learner
updates, and how much of the machine goes to learning.

    python -m benchmarks.first_minutes_bench [--minutes=6] [-- extra league flags]

Runs `python -m experiments.league --races=3 --minutes=M --dashboard_port=-1` (plus the flags
after `--`) in a fresh run directory, then, right after it on the same machine, the default
SMAX learner's update alone (`benchmarks.learner_bench --parts=smax`: one learner, one
device-resident batch, no games). Reads:
- `every_learner_updating_s`: from the league's first progress line to the first line on which
  no learner is still "compiling" (its first update not come);
- `league_steps_per_s`: the learners' learnt steps (league.db's `learner_metrics`, summed over
  the agents) over minutes [--from, --to] of the run (its first learner reading is minute 0);
- the ratio of the two rates (target: >= 0.5; the update alone has the machine to itself, the
  league also plays its games, evaluates and coordinates).
Warm caches (a second run with the same flags) are what the target is about; the first run
on a machine compiles. Last line:
`RESULT first_minutes every_learner_updating_s=<s> league_steps_per_s=<n> update_alone_steps_per_s=<n>
ratio=<league / alone> target=0.5`.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_float("minutes", 6.0, "league minutes")
flags.DEFINE_float("window_from", 3.0, "the rate's window starts at this minute of the run")
flags.DEFINE_float("window_to", 6.0, "and ends here (at most --minutes)")

PROGRESS = re.compile(r"^\[\s*([\d.]+) min\]")


def every_learner_updating(lines: list[str]) -> float | None:
    """Seconds from the first progress line to the first one with no learner compiling."""
    progress = [(float(m.group(1)), line) for line in lines if (m := PROGRESS.match(line))]
    if not progress:
        return None
    first = progress[0][0]
    for minutes, line in progress:
        if "learner updates" in line and "compiling" not in line.split("learner updates", 1)[1].split("main agents'")[0]:
            return 60 * (minutes - first)
    return None


def steps_rate(db: str, start_minute: float, end_minute: float) -> float:
    """Learnt steps per second summed over the agents between two minutes of the run (each
    agent's last `steps` reading at or before each end)."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT time, agent_id, value FROM learner_metrics WHERE name = 'steps' "
                         "ORDER BY time").fetchall()
    if not rows:
        return 0.0
    t0 = rows[0][0]

    def at(minute):
        seen: dict[str, float] = {}
        for t, agent, value in rows:
            if t - t0 > 60 * minute:
                break
            seen[agent] = value
        return seen

    a, b = at(start_minute), at(end_minute)
    return sum(b.get(k, 0.0) - a.get(k, 0.0) for k in b) / (60 * (end_minute - start_minute))


def main(argv):
    run_dir = tempfile.mkdtemp(prefix="first_minutes_")
    command = [sys.executable, "-m", "experiments.league", "--races=3", f"--minutes={FLAGS.minutes}",
               "--dashboard_port=-1", f"--run_dir={run_dir}", *argv[1:]]
    print(" ".join(command[2:]), flush=True)
    started = time.time()
    out = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    lines = out.splitlines()
    for line in lines:
        if line.startswith(("learner program", "device:", "start:", "checkpoints written")) or PROGRESS.match(line):
            print(line[:220])
    print(f"league process: {time.time() - started:.0f} s")
    updating = every_learner_updating(lines)
    league = steps_rate(f"{run_dir}/league.db", FLAGS.window_from, min(FLAGS.window_to, FLAGS.minutes))
    bench = subprocess.run([sys.executable, "-m", "benchmarks.learner_bench", "--parts=smax"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    alone = float(re.search(r"smax_learnt_steps_per_s=(\d+)", bench).group(1))
    print(f"learnt steps/s over minutes {FLAGS.window_from:g}-{min(FLAGS.window_to, FLAGS.minutes):g}: "
          f"league {league:,.0f}, one SMAX learner's update alone right after {alone:,.0f}")
    print(f"RESULT first_minutes every_learner_updating_s={-1 if updating is None else round(updating)} "
          f"league_steps_per_s={league:.0f} update_alone_steps_per_s={alone:.0f} "
          f"ratio={league / alone:.2f} target=0.5")


if __name__ == "__main__":
    app.run(main)
