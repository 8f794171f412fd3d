"""The default runner against one process (issue 84 item 4): the same league, one runner after the
other, on the same machine, read from each run's own league.db.

    python -m benchmarks.runner_bench --game=leduc_poker --minutes=5 --rounds=2

Runs `python -m experiments.league --game=G --minutes=M --dashboard_port=-1 --runner=R` in a
fresh run directory for each runner of `--runners`, alternating them `--rounds` times (in, ray,
in, ray, ...: a load that drifts over the benchmark falls on both), and reads from each run's
league.db the games it recorded (the `games` rows and the `game_counts` sums, by their time)
over its last `--window` minutes: the issue's "recorded games/s over the last 3 of 5 minutes".
The ratio is the first runner's mean over the other's (target: the default runner >= 0.9 of
one process). Last line:
`RESULT runner_bench game=<g> <runner>_games_per_s=<mean> ... ratio=<default / inprocess> target=0.9`.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("game", "leduc_poker", "the league's --game")
flags.DEFINE_float("minutes", 5.0, "league minutes of each run")
flags.DEFINE_float("window", 3.0, "the rate's window: the run's last this many minutes")
flags.DEFINE_integer("rounds", 2, "runs of each runner, alternating")
flags.DEFINE_list("runners", ["ray", "inprocess"], "the runners compared: the first over the second")
flags.DEFINE_list("extra", [], "more league flags, e.g. --extra=--evaluator.count=0")


def recorded_games_per_s(db: str, window_minutes: float) -> float:
    """Games recorded per second over the last `window_minutes` of the run (up to its last
    recorded game): `games` rows one each, `game_counts` rows their wins + draws + losses."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        rows = c.execute("SELECT time, 1 FROM games").fetchall()
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "game_counts" in tables:
            rows += c.execute("SELECT time, wins + draws + losses FROM game_counts").fetchall()
    if not rows:
        return 0.0
    end = max(t for t, _ in rows)
    start = end - 60 * window_minutes
    return sum(n for t, n in rows if t > start) / (60 * window_minutes)


def run_league(runner: str) -> float:
    run_dir = tempfile.mkdtemp(prefix=f"runner_bench_{runner}_")
    args = [sys.executable, "-u", "-m", "experiments.league", f"--game={FLAGS.game}",
            f"--minutes={FLAGS.minutes}", f"--run_dir={run_dir}", "--dashboard_port=-1",
            f"--runner={runner}", *FLAGS.extra]
    print(" ".join(args), flush=True)
    started = time.time()
    done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = done.stdout.splitlines()
    for line in lines[-4:]:
        print(f"  {runner}: {line}", flush=True)
    if done.returncode != 0:
        print("\n".join(lines[-40:]), file=sys.stderr)
        raise SystemExit(f"the {runner} league failed (exit {done.returncode})")
    rate = recorded_games_per_s(os.path.join(run_dir, "league.db"), FLAGS.window)
    print(f"  {runner}: {rate:,.0f} recorded games/s over the last {FLAGS.window:g} of "
          f"{FLAGS.minutes:g} minutes ({time.time() - started:.0f} s in all)", flush=True)
    return rate


def main(argv):
    del argv
    if len(FLAGS.runners) != 2:
        raise SystemExit("--runners takes two runners: the one measured and the one it is compared with")
    rates: dict[str, list[float]] = {r: [] for r in FLAGS.runners}
    for _ in range(FLAGS.rounds):
        for runner in FLAGS.runners:
            rates[runner].append(run_league(runner))
    means = {r: statistics.mean(v) for r, v in rates.items()}
    first, second = FLAGS.runners
    ratio = means[first] / max(means[second], 1e-9)
    each = " ".join(f"{r}_runs={'/'.join(f'{x:.0f}' for x in v)}" for r, v in rates.items())
    print(f"RESULT runner_bench game={FLAGS.game} minutes={FLAGS.minutes:g} window={FLAGS.window:g} "
          + " ".join(f"{r}_games_per_s={m:.0f}" for r, m in means.items())
          + f" {each} ratio={ratio:.2f} target=0.9")


if __name__ == "__main__":
    app.run(main)
