"""Ctrl-C while a league is being built (issue 31's Ctrl-C, before the league's own handler is
installed): the run stops at once with a message saying what was kept, exit 130, no traceback.
Before, the KeyboardInterrupt's traceback was printed and the process went on running the
nodes' threads it had started."""

import os
import signal
import subprocess
import sys


def test_ctrl_c_while_the_league_is_being_built_stops_it_with_a_message_and_no_traceback(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "experiments.league", "--game=kuhn_poker",
                                "--runner=inprocess", f"--run_dir={run_dir}", "--dashboard_port=-1"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               # as from a terminal: under a shell's background job (CI's, say)
                               # SIGINT is ignored, and a child inherits that
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in process.stdout:   # the first node being built: the others take seconds more
        seen.append(line)
        if line.startswith("building "):
            break
    process.send_signal(signal.SIGINT)
    try:
        rest, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:   # it went on (before the fix: a traceback, then its threads ran on)
        process.kill()
        rest, _ = process.communicate()
    out = "".join(seen) + rest
    assert process.returncode == 130, out
    assert "interrupted: the league stopped" in out and "rerun the same command to resume" in out, out
    assert "Traceback" not in out, out
    assert os.path.exists(run_dir / "config.json")   # the run directory is kept, to resume


def test_a_ctrl_c_that_python_drops_in_a_garbage_collector_callback_still_stops_the_build():
    # Seen in CI: the Ctrl-C of the test above landed in JAX's `_xla_gc_callback`, Python printed
    # "Exception ignored in ..." and dropped the KeyboardInterrupt, and the league went on
    # building and running until killed. The build's handler remembers it; the next node raises it.
    # Later in CI (session 48) the same drop printed its traceback into the test above: the
    # remembered Ctrl-C prints none; another dropped exception still prints.
    script = """
import gc, os, signal, sys
from experiments.supervisor import catch_ctrl_c_while_building, stop_if_interrupted
catch_ctrl_c_while_building()
class Broken:
    def __del__(self):
        raise ValueError("an error of its own")
Broken()
def callback(phase, info):
    if phase == "start":
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10000):   # the handler runs here, inside the callback: its exception is dropped
            pass
gc.callbacks.append(callback)
gc.collect()
gc.callbacks.remove(callback)
print("the collection returned", flush=True)
try:
    stop_if_interrupted()
except KeyboardInterrupt:
    print("raised again")
    sys.exit(130)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "KeyboardInterrupt" not in result.stderr, result.stderr
    assert "Exception ignored" in result.stderr and "ValueError: an error of its own" in result.stderr, result.stderr
    assert "the collection returned" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 130 and "raised again" in result.stdout, result.stdout + result.stderr
