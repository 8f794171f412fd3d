"""A league on a real multi-host Ray cluster: three hosts as network namespaces on this machine
(experiments/cluster_hosts.py), one worker host killed with kill -9 mid-run
(benchmarks/cluster.py, the short version: the matrix game, ~3 minutes); and the Ray
launcher's placement by resources (experiments/launchers.py: `placement`), without a cluster.

The cluster test skips only without root or the `ip` command; with LEAGUE_REQUIRE_CLUSTER=1
(CI) it fails instead of skipping.
"""

import importlib
import os
import subprocess

import pytest

from agents import memory
from experiments.cluster_hosts import PREFIX, available
from experiments.config import RunConfig

# The system tier (docs/testing.md): a league on three Ray hosts (root).
pytestmark = pytest.mark.system

DRIVER = "ab" * 28  # a node id (hex)


def require_cluster() -> None:
    problem = available()
    if problem:
        if os.environ.get("LEAGUE_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"LEAGUE_REQUIRE_CLUSTER=1 but a namespace cluster {problem}", pytrace=False)
        pytest.skip(f"a namespace cluster {problem}")


def options_of(cluster: dict, **values):
    from experiments.config import RaySettings
    from experiments.launchers import placement
    from experiments.program import build_program

    # The replay path by default: its actors are what most of the placement is about.
    program = build_program(RunConfig.make(**{"game": "smax_races", "races": 3, "experience": "replay", **values}))
    return program, placement(program, cluster, DRIVER, RaySettings())


def test_placement_of_the_device_path():
    """The device path's graph has no actors: learner groups get the GPUs, evaluators the
    `actor` resource."""
    _, options = options_of({"CPU": 8.0, "GPU": 1.0, "actor": 2.0}, experience="device")
    assert not any(name.startswith("actors") for name in options)
    assert options["learners"]["num_gpus"] == 1.0
    assert options["evaluator_0"]["resources"] == {"actor": 1}


def test_placement_without_custom_resources_keeps_learners_by_the_run_directory():
    program, options = options_of({"CPU": 8.0})
    assert options["coordinator"]["scheduling_strategy"].node_id == DRIVER
    assert options["learners"]["scheduling_strategy"].node_id == DRIVER
    assert "num_gpus" not in options["learners"] and "resources" not in options["learners"]
    for name in ("actors", "evaluator_0"):
        assert options[name]["scheduling_strategy"] == "SPREAD" and options[name]["max_restarts"] == -1
    for o in options.values():  # no 75% GPU memory grab per JAX process; CPU clusters keep their platform
        assert o["runtime_env"]["env_vars"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def test_placement_by_gpus_and_custom_resources():
    _, options = options_of({"CPU": 8.0, "GPU": 2.0, "actor": 8.0}, learner_groups="race", actor_groups="race")
    groups = [n for n in options if n.startswith("learners/")]
    assert len(groups) == 3 and all(options[g]["num_gpus"] == 0.66 for g in groups)  # 2 GPUs shared by 3
    assert all(options[g]["runtime_env"]["env_vars"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"} for g in groups)
    actors = [n for n in options if n.startswith("actors/")] + ["evaluator_0"]
    for name in actors:
        assert options[name]["resources"] == {"actor": 1} and options[name]["scheduling_strategy"] == "SPREAD"
        assert options[name]["runtime_env"]["env_vars"]["JAX_PLATFORMS"] == "cpu"  # GPUs left to learners
    _, options = options_of({"CPU": 8.0, "learner": 4.0}, learner_groups="race")
    assert all(options[g]["resources"] == {"learner": 1} for g in options if g.startswith("learners/"))


def test_placement_refuses_what_the_cluster_cannot_hold():
    with pytest.raises(ValueError, match="'learner' resource"):
        options_of({"CPU": 8.0, "learner": 2.0}, learner_groups="race")
    with pytest.raises(ValueError, match="'actor' resource"):
        options_of({"CPU": 8.0, "actor": 1.0}, actor_groups="race")


def test_code_ships_to_a_cluster_without_environments_or_runs(tmp_path):
    from experiments.config import RaySettings
    from experiments.launchers import REPOSITORY, job_runtime_env

    local = RunConfig.make(game="matrix_rps", run_dir=str(tmp_path / "run"))
    assert "working_dir" not in job_runtime_env(local, RaySettings())
    cluster = RunConfig.make(game="matrix_rps", ray_address="10.0.0.1:6379",
                             run_dir=os.path.join(REPOSITORY, "runs", "x"))
    env = job_runtime_env(cluster, RaySettings())
    assert env["working_dir"] == REPOSITORY
    assert {".venv", "runs", ".git", "/runs/x"} <= set(env["excludes"])
    assert env["env_vars"]["MALLOC_ARENA_MAX"] == "2"
    module, _, function = env["worker_process_setup_hook"].rpartition(".")   # every worker releases
    assert getattr(importlib.import_module(module), function) is memory.release_periodically


def our_namespaces() -> set[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listing.splitlines()
            if line.startswith(f"{PREFIX}{os.getpid()}-")}


@pytest.mark.replay
@pytest.mark.long
def test_league_survives_losing_a_worker_host(tmp_path):
    require_cluster()
    from benchmarks.cluster import run_cluster

    # 2.5 minutes: the kill comes 20 s after the first learner updates (1.1 minutes in under CI's
    # load), and Ray needs ~30 s to report the lost nodes before the run ends
    result = run_cluster(hosts=3, minutes=2.5, kill_host_after=20.0, game="matrix_rps",
                         root=str(tmp_path))
    out = result["output"]
    assert result["returncode"] == 0, out
    # Placed by resources: the coordinator and learners on the head, actors on the workers.
    assert "placement: coordinator (driver's node); learners (learner=1)" in out, out
    assert result["killed_host"] in (1, 2), out
    # The league went on after the kill, and said what was lost.
    assert result.get("games_after_kill", 0) > 0, out
    assert result["lost_note"] and "1 host(s) 10.77.0." in result["lost_note"][-1], out
    assert result["games_per_s_after"] > 0 and result["updates_per_s_after"] > 0, out
    assert result["lost_games"] == 0, out
    # The run directory is the head's only: worker hosts wrote nothing to theirs.
    assert result["league_db_on_head"], out
    assert result["worker_files"] == [], result["worker_files"]
    assert os.listdir(os.path.join(result["run_dir"], "learners")), out
    # Torn down: no namespace and no process of the cluster left.
    assert not result["namespaces_left"] and not our_namespaces()
    leftover = subprocess.run(["pgrep", "-f", f"/tmp/{result['cluster_name']}/"],
                              capture_output=True, text=True).stdout.split()
    assert not leftover, leftover
