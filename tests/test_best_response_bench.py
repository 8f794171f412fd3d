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


def kuhn_players():
    """The players of a Kuhn run with the game's defaults (an MLP of 64): its config and two
    players' parameters."""
    from actors.games import make_batch_game
    from experiments import build

    run_config = RunConfig.make(game="kuhn_poker")
    game = make_batch_game("kuhn_poker", 8)
    theirs = build.make_network(run_config, game.spec)
    return run_config, [build.initial_params(theirs, game.spec, 0, seed) for seed in (1, 2)]


def test_a_learner_of_another_width_plays_the_runs_players_and_is_measured():
    """A learner of width 16 against players of width 64: the opponents run the run's network
    (on the old code the run's parameters went into the learner's network: a shape error)."""
    import numpy as np

    run_config, params = kuhn_players()
    out = best_response_bench.run_arm(
        "kuhn_poker", {"network.hidden_size": 16, "learner.batch_size": 8, "device.updates_per_chunk": 8}, ["a", "b"],
        np.array([0.5, 0.5]), params, updates=16, every=8, seed=0, run_config=run_config)
    assert [u for u, _ in out["curve"]] == [0, 8, 16]   # the first chunk compiles and is not timed
    assert all(np.isfinite(v) for _, v in out["curve"]) and out["steps_per_s"] > 0


def test_a_learner_with_another_recurrent_core_is_refused():
    import numpy as np

    from experiments.config import ConfigError

    run_config, params = kuhn_players()
    with pytest.raises(ConfigError, match="recurrent core .16. differs from the run's .1.; change the width only"):
        best_response_bench.run_arm("kuhn_poker", {"network.core_size": 16}, ["a", "b"],
                                    np.array([0.5, 0.5]), params, 8, 8, 0, run_config)
