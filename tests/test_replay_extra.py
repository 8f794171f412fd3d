"""Issue 27: Reverb and TensorFlow are the `[replay]` extra. The base environment (current JAX,
numpy 2) has neither; a run that would take the replay path there is refused with exit 2,
naming the extra and its install command, before anything is written."""

import importlib.util
import os
import subprocess
import sys

import pytest

from experiments.program import REPLAY_INSTALL, replay_problem

HAS_REVERB = importlib.util.find_spec("reverb") is not None
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_replay_problem_names_the_extra_and_its_command_when_reverb_is_missing(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "reverb" else real(name, *a))
    problem = replay_problem()
    assert "[replay] extra" in problem and REPLAY_INSTALL in problem
    # The command is the README's ("The other environments") and docs/experience.md's.
    assert REPLAY_INSTALL in open(os.path.join(REPO, "README.md")).read()


@pytest.mark.replay
def test_only_replay_path_modules_import_reverb():
    """In the replay environment, importing the whole program, the learners and the actors
    loads no Reverb: only the replay path's functions do (a fresh interpreter: this test's
    own may have loaded it through the replay tests). TensorFlow is not checked here: the
    replay environment's tensorflow-probability 0.23 loads it on its own."""
    code = ("import sys; import experiments.league, experiments.launchers, experiments.nodes, learners.learner, "
            "learners.device, actors.actor, actors.evaluator, dashboard.server; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'reverb'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.skipif(HAS_REVERB, reason="the base environment's refusal: this environment has the [replay] extra")
@pytest.mark.parametrize("args, why", [
    (["--experience=replay"], "--experience=replay"),
    (["--device.opponent_slots=3"], "auto: "),   # 3 does not divide the batch: auto takes replay
])
def test_the_replay_path_without_reverb_exits_2_naming_the_extra_and_writes_nothing(tmp_path, args, why):
    run_dir = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "experiments.league", "--game=kuhn_poker", "--runner=inprocess",
                             f"--run_dir={run_dir}", "--dashboard_port=-1", *args],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert why in result.stderr and "[replay] extra" in result.stderr and REPLAY_INSTALL in result.stderr
    assert not run_dir.exists()

