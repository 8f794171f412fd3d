"""The Launchpad driver's view of its node processes, in the main environment (no launchpad
needed): `experiments.launchpad_launcher.node_processes`."""
import os
import subprocess
import sys

import psutil

from experiments.launchpad_launcher import node_processes


def test_a_node_whose_environment_reads_empty_at_first_is_found(monkeypatch):
    """Right after Popen returns, a child's /proc environ can read empty (its exec is still
    setting it up): the scan goes on until it reads the node's name, where one scan took the
    node for one that had ended."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, "LEAGUE_NODE": "coordinator"})
    try:
        real, reads = psutil.Process.environ, {"n": 0}

        def environ(self):
            if self.pid == child.pid and reads["n"] < 3:   # the exec's window, three scans long
                reads["n"] += 1
                return {}
            return real(self)

        monkeypatch.setattr(psutil.Process, "environ", environ)
        found = node_processes({"coordinator", "learners"}, within=2.0)
        assert set(found) == {"coordinator"} and found["coordinator"].pid == child.pid
        assert reads["n"] == 3
    finally:
        child.kill()
        child.wait()
