"""benchmarks/best_response_bench.py's bad input: a clear message and a non-zero exit."""

import json
import subprocess
import sys

import pytest

from benchmarks import best_response_bench
from coordinator.history import LeagueHistory
from experiments.config import RunConfig


def run(*args):
    return subprocess.run([sys.executable, "-m", "benchmarks.best_response_bench", *args],
                          capture_output=True, text=True, timeout=120)


def test_a_directory_without_a_league_is_named(tmp_path):
    out = run(f"--run_dir={tmp_path}")
    assert out.returncode != 0
    assert f"{tmp_path}/config.json not found: pass a league's run directory" in out.stderr


def test_a_league_that_is_not_poker_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(RunConfig.make(game="matrix_rps").to_dict()))
    out = run(f"--run_dir={tmp_path}")
    assert out.returncode != 0
    assert "is a matrix_rps league; this benchmark needs a poker league" in out.stderr


def test_a_league_without_a_nash_distribution_says_to_run_longer(tmp_path):
    LeagueHistory(str(tmp_path)).close()
    with pytest.raises(SystemExit, match="league.db has no Nash distribution yet"):
        best_response_bench.nash_target(str(tmp_path))


def test_an_arm_without_its_settings_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(RunConfig.make(game="kuhn_poker").to_dict()))
    out = run(f"--run_dir={tmp_path}", "--arms=defaults,longer")
    assert out.returncode != 0
    assert "--arms names ['longer'] with no --arm=NAME:settings" in out.stderr
