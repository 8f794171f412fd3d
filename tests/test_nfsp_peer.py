"""OpenSpiel's NFSP as a same-wall-clock peer in benchmarks/poker_quality.py (`--peers=nfsp`).

OpenSpiel 2.0.2 ships no NFSP that runs on this stack (TF1 one deleted, JAX one needs flax >=
0.11, PyTorch one torch): the peer says so and exits. With OpenSpiel v1.5's TF1 files
(`--nfsp_source`, set OPENSPIEL_NFSP_SOURCE to run the second test) it trains a few seconds
of Kuhn in a child process (importing the TF1 NFSP turns TF2 behaviour off process-wide) and
prints curve rows with finite NashConv values.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys

import pytest

from benchmarks import poker_quality


def test_without_a_tf1_nfsp_the_peer_exits_with_the_reason():
    if importlib.util.find_spec("open_spiel.python.algorithms.nfsp") is not None:
        pytest.skip("this OpenSpiel still ships the TF1 NFSP")
    with pytest.raises(SystemExit) as raised:
        poker_quality.load_nfsp(None)
    message = str(raised.value)
    assert "--nfsp_source" in message and "flax" in message and "TF1 NFSP" in message


@pytest.mark.skipif(not os.environ.get("OPENSPIEL_NFSP_SOURCE"),
                    reason="set OPENSPIEL_NFSP_SOURCE to an OpenSpiel v1.5 source tree")
def test_nfsp_peer_on_kuhn_prints_finite_nashconv_rows(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.poker_quality", "--game=kuhn_poker", "--minutes=0.1",
         "--every=2", "--arms=", "--peers=nfsp", f"--png={tmp_path / 'curve.png'}",
         f"--run_root={tmp_path}", f"--nfsp_source={os.environ['OPENSPIEL_NFSP_SOURCE']}"],
        capture_output=True, text=True, timeout=120, check=True).stdout
    rows = re.findall(r"\[nfsp\]\s+(\d+) s\s+(\d+) it\s+NashConv (\S+)", out)
    assert len(rows) >= 2, out
    episodes = [int(e) for _, e, _ in rows]
    assert episodes == sorted(episodes) and episodes[-1] > 0
    assert all(math.isfinite(float(v)) and 0 <= float(v) <= 2 for *_, v in rows)
    assert re.search(r"OpenSpiel NFSP \(TF1\): \S+ after \d+ s \(\d+ measurements, \d+ ", out)
    assert "curve NFSP (TF1):" in out
    assert "RESULT" not in out   # peers only: no league arm, no league figure
