"""The run's agent as a user takes it away (issue 85): the default command, then the agent it names
exported and measured from the file alone.

    python -m benchmarks.run_agent_bench --game=kuhn_poker --minutes=30 --at=10 --seed=3
    python -m benchmarks.run_agent_bench --game=leduc_poker --minutes=30 --at=10 --seed=3

Runs `python -m experiments.league --game=G --minutes=M --seed=S --dashboard_port=-1` (the default
runner) in a fresh run directory. When the league's own progress line reads a minute of `--at`,
the run's agent is exported while the league goes on (`python -m experiments.export
RUN_DIR:result --out=F`: what a run of `--minutes=AT` would name at its end, read live), and once
more after the run stops. Each exported file's NashConv is then computed by OpenSpiel's tools
from the file alone (`python -m experiments.nashconv --params=F`, after the league has stopped,
so measuring takes nothing from it). The agent is the league's Nash mixture measured best
(`experiments.agent_ref`: the latest or the average of every published mixture).

Last line: `RESULT run_agent game=G seed=S nashconv_at_<m>=<x> ... mixture_at_<m>=<latest|average>
... ratio=<x at the target's minute / target> target=<t>`, the targets BENCHMARKS.md already holds:
Kuhn < 0.02 at 10 minutes, Leduc < 0.30 at 30 minutes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("game", "kuhn_poker", "a poker game (an exact meta-game): kuhn_poker or leduc_poker")
flags.DEFINE_float("minutes", 30.0, "the league's --minutes")
flags.DEFINE_list("at", ["10"], "league minutes at which the run's agent is also exported, live")
flags.DEFINE_integer("seed", 3, "the league's --seed (0-2 chose the poker defaults)")
flags.DEFINE_list("extra", [], "more league flags")
TARGETS = {"kuhn_poker": (10.0, 0.02), "leduc_poker": (30.0, 0.30)}   # (minute, NashConv below)
PROGRESS = re.compile(r"^\[\s*([0-9.]+) min\]")


def export(run_dir: str, out: str) -> None:
    subprocess.run([sys.executable, "-m", "experiments.export", f"{run_dir}:result", f"--out={out}"],
                   check=True, stdout=subprocess.DEVNULL)


def nashconv(path: str) -> float:
    """OpenSpiel's NashConv of an exported file (`experiments.nashconv`'s last line)."""
    done = subprocess.run([sys.executable, "-m", "experiments.nashconv", f"--params={path}"],
                          check=True, capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1])


def mixture(path: str) -> str:
    """Which mixture the exported file holds: the latest Nash weights or their average."""
    from agents import exported

    source = exported.read(path)[0].get("source", {})
    return {"nash": "latest", "nash_average": "average"}.get(source.get("mixture"), "?")


def main(argv):
    del argv
    run_dir = tempfile.mkdtemp(prefix=f"run_agent_{FLAGS.game}_")
    command = [sys.executable, "-m", "experiments.league", f"--game={FLAGS.game}", f"--minutes={FLAGS.minutes}",
               f"--seed={FLAGS.seed}", f"--run_dir={run_dir}", "--dashboard_port=-1", *FLAGS.extra]
    print(" ".join(command[1:]), flush=True)
    pending = sorted(float(m) for m in FLAGS.at if float(m) < FLAGS.minutes)
    files: dict[float, str] = {}
    league = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in league.stdout:
        print(line, end="", flush=True)
        found = PROGRESS.match(line)
        if found and pending and float(found.group(1)) >= pending[0]:
            at = pending.pop(0)
            files[at] = os.path.join(run_dir, f"agent_at_{at:g}.npz")
            export(run_dir, files[at])
            print(f"exported the run's agent at {found.group(1)} league minutes: {files[at]}", flush=True)
    if league.wait() != 0:
        print(f"error: the league exited with {league.returncode}", file=sys.stderr)
        return 1
    files[FLAGS.minutes] = os.path.join(run_dir, "agent_at_end.npz")
    export(run_dir, files[FLAGS.minutes])
    readings = {at: (nashconv(path), mixture(path)) for at, path in sorted(files.items())}
    for at, (value, which) in readings.items():
        print(f"the run's agent at {at:g} minutes: NashConv {value:.4f} ({which} Nash mixture)")
    minute, target = TARGETS.get(FLAGS.game, (FLAGS.minutes, float("nan")))
    scored = readings.get(minute, readings[FLAGS.minutes])[0]
    print(f"RESULT run_agent game={FLAGS.game} seed={FLAGS.seed} " + " ".join(
        f"nashconv_at_{at:g}={v:.4f} mixture_at_{at:g}={w}" for at, (v, w) in readings.items())
        + f" ratio={scored / target:.2f} target={target}")
    return 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
