"""The same league under two launchers, one after the other: games/s, learner updates/s, memory.

Runs `python -m experiments.league` with each launcher's Python (Ray: the main 3.11
environment; Launchpad: the 3.10 Launchpad environment), for `--minutes` each, and reads:
- games/s and learner updates/s: the league's own progress lines (games/s is the league's
  total games over its run time; updates/s the learners' summed rate), the median of the
  lines after the first learner update;
- memory: the summed RSS of the league's whole process tree sampled every 2 s (the driver and
  its descendants: Launchpad's node processes; a local Ray instance's GCS, raylet and worker
  processes, which the driver starts), median and peak over the same window.

    python -m benchmarks.launcher_bench --game=kuhn_poker --minutes=3 \\
        --ray_python=.venv/bin/python --launchpad_python=.venv-launchpad/bin/python

Last line: `RESULT game=... <runner>_games_per_s=... <runner>_updates_per_s=... <runner>_rss_gb_median=... ...`.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psutil
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("game", "kuhn_poker", "kuhn_poker, leduc_poker or smax_races (1 race).")
flags.DEFINE_float("minutes", 3.0, "Minutes each league runs (--minutes of the league).")
flags.DEFINE_string("ray_python", None, "The main environment's python (runner ray); empty: skip.")
flags.DEFINE_string("launchpad_python", None, "The Launchpad environment's python; empty: skip.")
flags.DEFINE_list("extra", [], "More league flags, e.g. --extra=--batch_size=64.")

PROGRESS = re.compile(r"\] players \d+ .*games (\d+) \(([\d.]+)/s\)\s+learner updates ([\d.]+)/s")


def tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in processes:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def measure(python: str, runner: str) -> dict:
    run_dir = tempfile.mkdtemp(prefix=f"launcher_bench_{runner}_")
    args = [python, "-u", "-m", "experiments.league", f"--runner={runner}", f"--game={FLAGS.game}",
            f"--minutes={FLAGS.minutes}", f"--run_dir={run_dir}", "--dashboard_port=-1",
            *(["--init=none"] if FLAGS.game == "smax_races" else []), *FLAGS.extra]
    print(" ".join(args), flush=True)
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    samples, lines, started = [], [], time.time()

    def sample():
        while process.poll() is None:
            samples.append((time.time(), tree_rss(process.pid)))
            time.sleep(2.0)

    threading.Thread(target=sample, daemon=True).start()
    for line in process.stdout:
        match = PROGRESS.search(line)
        if match:
            lines.append((time.time(), int(match[1]), float(match[2]), float(match[3])))
            print(f"  {runner}: {line.strip()}", flush=True)
    process.wait()
    if process.returncode != 0:
        raise SystemExit(f"{runner} league failed (exit {process.returncode})")
    learning = [ln for ln in lines if ln[3] > 0]
    if len(learning) < 3:
        raise SystemExit(f"{runner}: too few progress lines with learner updates ({len(lines)} lines)")
    steady = learning[1:-1] or learning
    window = (steady[0][0], steady[-1][0])
    rss = [r for t, r in samples if window[0] <= t <= window[1]] or [r for _, r in samples]
    return dict(games_per_s=statistics.median(ln[2] for ln in steady),
                updates_per_s=statistics.median(ln[3] for ln in steady),
                rss_gb_median=statistics.median(rss) / 2**30, rss_gb_peak=max(rss) / 2**30,
                startup_s=learning[0][0] - started)


def main(argv):
    del argv
    results = {}
    for runner, python in (("ray", FLAGS.ray_python), ("launchpad", FLAGS.launchpad_python)):
        if python:
            results[runner] = measure(os.path.expanduser(python), runner)
            print(f"{runner}: " + ", ".join(f"{k} {v:.2f}" for k, v in results[runner].items()), flush=True)
    fields = " ".join(f"{r}_{k}={v:.2f}" for r, m in results.items() for k, v in m.items())
    print(f"RESULT game={FLAGS.game} minutes={FLAGS.minutes} {fields}")


if __name__ == "__main__":
    app.run(main)
    sys.exit(0)
