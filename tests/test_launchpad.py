"""The league under Launchpad (`--runner=launchpad`), with real Launchpad, courier and Reverb.

Launchpad 0.5.2 runs on Python 3.10 only, so these tests run in the Launchpad environment
(docs/launchpad.md, "The environment"; `.ci/run` builds it and runs this file there with
LEAGUE_REQUIRE_LAUNCHPAD=1, which turns a missing launchpad or main environment into a
failure instead of a skip). In the main 3.11 environment they are skipped.

Every run goes through the command line, as a user starts it, and is stopped the ways a user
stops it: --minutes, --learner_steps, Ctrl-C (SIGINT to the whole process group, as a terminal
sends it).
"""

import importlib.util
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

# The system tier (docs/testing.md): leagues under Launchpad (its own environment).
pytestmark = pytest.mark.system

REQUIRED = os.environ.get("LEAGUE_REQUIRE_LAUNCHPAD") == "1"
if importlib.util.find_spec("launchpad") is None:
    if REQUIRED:
        raise ImportError("LEAGUE_REQUIRE_LAUNCHPAD=1 but launchpad is not importable in "
                          f"{sys.executable}: build the Launchpad environment (docs/launchpad.md)")
    pytest.skip("launchpad is not installed: it runs on Python 3.10 only, in the Launchpad "
                "environment (docs/launchpad.md); .ci/run runs these tests there",
                allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The league's small, fast settings (as tests/test_program.py's FAST).
FAST = [  # the replay path (actors, Reverb) under Launchpad
    "--experience=replay", "--actors_per_learner=1", "--batch_size=16", "--learner_batch_size=8", "--unroll_length=8",
    "--hidden_size=16", "--core_size=16", "--main_agent_snapshot_steps=300",
    "--exploiter_min_steps=300", "--league.snapshots.main_exploiter_timeout_steps=600",
    "--league.snapshots.league_exploiter_timeout_steps=300", "--actor.episodes_per_match=16", "--param_refresh_seconds=1",
    "--progress_every_seconds=2", "--meta_game_every_seconds=2", "--checkpoint_every_seconds=5",
    "--dashboard_port=-1", "--evaluation_games=8", "--learner.replay.max_size=256",
]


def league(*args, python=sys.executable, **kwargs):
    return subprocess.Popen([python, "-u", "-m", "experiments.league", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kwargs)


def finish(process, timeout=300) -> str:
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        pytest.fail(f"the league did not finish within {timeout} s:\n{out[-5000:]}")
    return out


def query(run_dir, sql):
    path = os.path.join(run_dir, "league.db")
    if not os.path.exists(path):
        return None
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return db.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return None


def learner_versions(run_dir):
    from learners import checkpoint

    return {agent: checkpoint.read_params(run_dir, agent)[0]
            for agent in sorted(os.listdir(os.path.join(run_dir, "learners")))}


def learner_steps(run_dir):
    from learners import checkpoint

    return {agent: int(checkpoint.read_payload(checkpoint.path(run_dir, agent))["steps"])
            for agent in sorted(os.listdir(os.path.join(run_dir, "learners")))}


def no_process_left(process):
    """Every process of the run's session (its nodes included) has ended."""
    import psutil

    deadline = time.time() + 30
    while time.time() < deadline:
        left = [p for p in psutil.process_iter(["pid"]) if _session(p) == process.pid]
        if not left:
            return True
        time.sleep(1)
    return False


def _session(p):
    try:
        return os.getsid(p.pid)
    except OSError:
        return None


@pytest.mark.long
def test_kuhn_league_under_local_mp_stops_on_ctrl_c_with_checkpoints_and_resumes(tmp_path):
    run_dir = str(tmp_path / "run")
    args = ["--runner=launchpad", "--game=kuhn_poker", f"--run_dir={run_dir}", *FAST]
    process = league(*args, "--minutes=5")
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        frozen = query(run_dir, "SELECT count(*) FROM players WHERE role = 'historical'")
        if frozen and frozen[0][0] >= 3:
            break
        time.sleep(2)
    assert process.poll() is None, finish(process)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in the terminal: the driver and every node
    out = finish(process, timeout=120)
    assert process.returncode == 0, out
    assert "local_mp" in out and "stopping (Ctrl-C again" in out, out
    assert "checkpoints written" in out and "warning" not in out, out
    assert no_process_left(process), out
    for node in ("coordinator", "learners", "actors", "evaluator_0"):   # each node's output
        assert os.path.getsize(os.path.join(run_dir, "logs", "launchpad", node, "0")) > 0

    from coordinator.history import LeagueHistory

    history = LeagueHistory(run_dir, readonly=True)
    players = history.players()
    frozen = {p["player_id"] for p in players if p["role"] == "historical"}
    assert len(frozen) >= 3, out
    for player_id in frozen:   # snapshotted players' parameters
        assert os.path.exists(os.path.join(run_dir, "params", f"{player_id}.npz"))
    games = history.result_rows()
    assert sum(g["games"] for g in games) > 100 and {g["source"] for g in games} == {"actor", "evaluator"}, out
    assert any(e["kind"] == "snapshot" for e in history.events())
    first, steps = learner_versions(run_dir), learner_steps(run_dir)
    assert len(first) == 4 and all(v > 0 for v in first.values()), first

    # The same command resumes (here until every learner has learnt 500 more steps than the
    # furthest one had): players, games and learner versions go on.
    out = finish(league(*args, f"--learner_steps={max(steps.values()) + 500}"))
    assert "resuming a league" in out and "reached by every learner" in out, out
    history = LeagueHistory(run_dir, readonly=True)
    assert frozen <= {p["player_id"] for p in history.players()}
    assert history.game_count() > sum(g["games"] for g in games), out
    second = learner_versions(run_dir)
    assert all(second[a] > first[a] for a in first), (first, second)


@pytest.mark.long
def test_smax_one_race_league_under_local_mp(tmp_path):
    """A 1-race SMAX league (four learners playing their own games: the default device path, and
    an evaluator) until every learner has learnt from 100 agent steps: about a minute on a quiet
    machine once JAX has compiled (stopping by --learner_steps, not --minutes, keeps it a test
    of the league rather than of the machine's load)."""
    run_dir = str(tmp_path / "run")
    out = finish(league("--runner=launchpad", "--game=smax_races", "--races=1", "--learner_steps=100",
                        "--init=none",  # random parameters: no supervised start to build first
                        f"--run_dir={run_dir}", "--learner_batch_size=8",
                        "--unroll_length=8", "--hidden_size=16", "--core_size=16",
                        "--evaluation_games=4", "--checkpoint_every_seconds=10",
                        "--progress_every_seconds=10", "--dashboard_port=-1"), timeout=600)
    assert "reached by every learner" in out and "checkpoints written" in out, out
    from coordinator.history import LeagueHistory

    history = LeagueHistory(run_dir, readonly=True)
    assert "experience: device" in out, out
    counted = history.game_counts()
    assert counted and {g["home_race"] for g in counted if g["source"] == "device"} == {"terran"}, out
    versions = learner_versions(run_dir)
    assert len(versions) == 4 and all(v > 0 for v in versions.values()), out


@pytest.mark.skipif(not REQUIRED and not os.environ.get("LEAGUE_MAIN_PYTHON"),
                    reason="LEAGUE_MAIN_PYTHON (the main 3.11 environment's python, for Ray) is not set")
@pytest.mark.long
def test_a_run_started_under_ray_resumes_under_launchpad_local_mt(tmp_path):
    """The run directory is the same format in both environments: a Kuhn run started under
    Ray in the main environment (Python 3.11, TF 2.15, Reverb 0.14) resumes under Launchpad
    (Python 3.10, TF 2.8, Reverb 0.7), here on local_mt threads, stopped by --learner_steps."""
    main_python = os.environ.get("LEAGUE_MAIN_PYTHON")
    assert main_python, "LEAGUE_MAIN_PYTHON must name the main environment's python"
    run_dir = str(tmp_path / "run")
    args = ["--game=kuhn_poker", f"--run_dir={run_dir}", *FAST]
    out = finish(league("--runner=ray", *args, "--learner_steps=1000", python=main_python))
    assert "reached by every learner" in out, out
    first, steps = learner_versions(run_dir), learner_steps(run_dir)
    assert min(steps.values()) >= 1000, steps
    from coordinator.history import LeagueHistory

    games = LeagueHistory(run_dir, readonly=True).game_count()
    out = finish(league("--runner=launchpad", "--lp_launch_type=local_mt", *args,
                        f"--learner_steps={max(steps.values()) + 1000}"))
    assert "resuming a league" in out and "local_mt" in out, out
    assert "reached by every learner" in out and "checkpoints written" in out, out
    second = learner_versions(run_dir)
    assert all(second[a] > first[a] for a in first), (first, second)
    assert LeagueHistory(run_dir, readonly=True).game_count() > games


def test_a_node_that_cannot_start_stops_the_run_with_its_error_and_keeps_the_file(tmp_path):
    """A corrupt learner checkpoint: the learner group's process fails while it is built; the
    driver says which node, shows the end of its log (the CheckpointError naming the file)
    and exits non-zero without waiting on the dead node; the file is left as it was."""
    run_dir = tmp_path / "run"
    path = run_dir / "learners" / "any_main_agent_0" / "checkpoint.msgpack"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00garbage")
    started = time.time()
    process = league("--runner=launchpad", "--game=kuhn_poker", f"--run_dir={run_dir}", *FAST,
                     "--minutes=1")
    out = finish(process, timeout=180)
    ended = time.time()
    assert process.returncode == 1, out
    assert "node learners ended" in out and "CheckpointError" in out and str(path) in out, out
    # The learner group's log (the one the driver names) was last written as it died; the
    # driver exits soon after (it stops the other nodes, ~10 s), however long the start-up took
    # under load (CI runs this beside the replay tests).
    log = re.search(r"node learners ended; its log is (\S+), ending:", out)
    assert log, out
    died = os.path.getmtime(log.group(1))
    assert started < died and ended - died < 45, (ended - died, out)
    assert path.read_bytes() == b"\x00garbage"
    assert no_process_left(process), out


def test_kuhn_league_on_the_device_path_under_launchpad(tmp_path):
    """The device path under Launchpad (local_mp), its learners as one population program
    (`--device.population=true`, issue 55 item 6): learner groups that play their own games, no
    actors; counted games from the learners and the evaluator reach league.db, every learner
    reports the population program's host share, and every learner learns (the run ends once
    every learner has: `--learner_steps=1`; a stop does not wait for a first chunk still
    compiling). (The default, one program per agent, runs under Launchpad in the user's-game
    test below.)"""
    run_dir = str(tmp_path / "run")
    out = finish(league("--runner=launchpad", "--game=kuhn_poker", f"--run_dir={run_dir}",
                        "--experience=device", "--device.population=true", "--learner_steps=1",
                        "--hidden_size=16", "--core_size=16",
                        "--progress_every_seconds=5", "--checkpoint_every_seconds=10",
                        "--dashboard_port=-1"), timeout=300)
    assert "experience: device" in out and "checkpoints written" in out, out
    assert "one program for the agents that share a network" in out, out
    reporting = dict(query(run_dir, "SELECT agent_id, count(*) FROM learner_metrics WHERE name = 'host_share' "
                                    "GROUP BY agent_id") or [])
    assert sorted(reporting) == sorted(os.listdir(os.path.join(run_dir, "learners"))), (reporting, out)
    assert not os.path.exists(os.path.join(run_dir, "logs", "launchpad", "actors")), out
    sources = dict(query(run_dir, "SELECT source, sum(wins + draws + losses) FROM game_counts GROUP BY source"))
    assert sources.get("device", 0) > 1000 and sources.get("evaluator", 0) > 0, (sources, out)
    versions = learner_versions(run_dir)
    assert len(versions) == 4 and all(v > 0 for v in versions.values()), out


def test_a_users_game_outside_the_repository_runs_under_launchpad(tmp_path):
    """A user's game by its module path (`--game=mynim:make`, the example copied out of the
    repository, run from its directory) under Launchpad's local_mp: every node process imports
    it, and its games reach league.db."""
    import shutil

    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copy(os.path.join(ROOT, "examples", "nim.py"), mine / "mynim.py")
    run_dir = str(tmp_path / "run")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "experiments.league", "--runner=launchpad", "--game=mynim:make",
         f"--run_dir={run_dir}", "--minutes=0.75", "--progress_every_seconds=5", "--dashboard_port=-1"],
        cwd=str(mine), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env=env)
    out = finish(process, timeout=300)
    assert "game=mynim:make" in out and "checkpoints written" in out, out
    sources = dict(query(run_dir, "SELECT source, sum(wins + draws + losses) FROM game_counts GROUP BY source"))
    assert sources.get("device", 0) > 1000, (sources, out)


def test_a_jaxmarl_env_by_its_module_path_runs_under_launchpad(tmp_path):
    """A user's factory returning a JaxMARL MultiAgentEnv (tests/test_games_by_path.py's matching
    pennies), by its module path from the user's directory under Launchpad's local_mp: every node
    process imports and adapts it, the first screen names the adapter, and every learner learns
    (`--learner_steps=1`: the run ends once every learner has)."""
    from tests.test_games_by_path import PENNIES

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "bypath_pennies.py").write_text(PENNIES)
    run_dir = str(tmp_path / "run")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "experiments.league", "--runner=launchpad", "--game=bypath_pennies:make",
         f"--run_dir={run_dir}", "--learner_steps=1", "--hidden_size=16", "--core_size=16",
         "--progress_every_seconds=5", "--dashboard_port=-1"],
        cwd=str(mine), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env=env)
    out = finish(process, timeout=300)
    assert "game bypath_pennies:make: a JaxMARL MultiAgentEnv, adapted by actors.games.jaxmarl_game" in out, out
    assert "checkpoints written" in out, out
    sources = dict(query(run_dir, "SELECT source, sum(wins + draws + losses) FROM game_counts GROUP BY source"))
    assert sources.get("device", 0) > 0, (sources, out)
    versions = learner_versions(run_dir)
    assert versions and all(v > 0 for v in versions.values()), out
