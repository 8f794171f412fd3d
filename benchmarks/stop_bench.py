"""How long Ctrl-C takes to stop a running league, every checkpoint written (issue 31: <= 15 s).

    python -m benchmarks.stop_bench --after=180                        # the default 3-race league on Ray
    python -m benchmarks.stop_bench --after=180 -- --runner=inprocess  # in one process
    python -m benchmarks.stop_bench --after=60 -- --game=kuhn_poker --runner=launchpad   # (Launchpad's environment)

Starts `python -m experiments.league --races=3 --init=none` (random parameters: no supervised
start to build first) plus any flags after `--` in a fresh run directory, sends SIGINT
`--after` seconds later, and times the process until it exits. The league's own last line
says how long its stop took and its longest step. Last line:
`RESULT stop seconds=<SIGINT to exit> ratio=<seconds / 15> target=<=1`.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_float("after", 180.0, "seconds of running before the Ctrl-C")
flags.DEFINE_float("limit", 15.0, "the target: seconds from Ctrl-C to exit")


def main(argv):
    run_dir = tempfile.mkdtemp(prefix="stop_bench_")
    command = [sys.executable, "-m", "experiments.league", "--races=3", "--init=none", "--dashboard_port=-1",
               f"--run_dir={run_dir}", *argv[1:]]
    print(" ".join(command[2:]), flush=True)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(FLAGS.after)
    stopped = time.time()
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate()
    seconds = time.time() - stopped
    lines = out.strip().splitlines()
    progress = [line for line in lines if re.match(r"\[\s*[\d.]+ min\]", line)]
    for line in progress[-1:] + lines[-1:]:
        print(line)
    warnings = sum("alarmingly high" in line for line in lines)
    print(f"exit {process.returncode}; {warnings} Reverb 'pending items' warnings")
    print(f"RESULT stop seconds={seconds:.1f} exit={process.returncode} ratio={seconds / FLAGS.limit:.2f} target=<=1")
    return 0 if process.returncode == 0 else 1


if __name__ == "__main__":
    app.run(main)
