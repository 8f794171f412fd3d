"""--init=FILE: every learning agent starts from its race's supervised parameters (AlphaStar's
start), exploiters reset to them, and a file that does not fit is refused before anything is
written."""

import os
import subprocess
import sys

import jax
import numpy as np

from coordinator.param_store import params_to_npz_bytes
from experiments.config import RunConfig


def supervised_file(path, races, hidden=16, core=16, seed=5):
    """A file in experiments.supervised's format ({race: params}) for a network of these sizes."""
    from experiments.nodes import initial_params, make_game, make_network

    config = RunConfig.make(game="smax_races", races=1, hidden_size=hidden, core_size=core)
    spec = make_game(config, 1).spec
    network = make_network(config, spec)
    tree = {race: initial_params(network, spec, k, seed) for k, race in enumerate(races)}
    with open(path, "wb") as f:
        f.write(params_to_npz_bytes(tree, 0))
    return tree


def test_learning_agents_start_from_their_races_supervised_parameters(tmp_path):
    from experiments.nodes import LearnerGroup
    from experiments.program import agent_indices

    file = str(tmp_path / "supervised.npz")
    tree = supervised_file(file, ["terran", "protoss"])
    config = RunConfig.make(game="smax_races", races=2, hidden_size=16, core_size=16, init=file,
                            run_dir=str(tmp_path / "run"))
    indices = agent_indices(config)
    group = LearnerGroup(config, list(indices), indices)
    try:
        for agent in indices:
            race = agent.split("_")[0]
            for a, b in zip(jax.tree_util.tree_leaves(group.initial_params(agent)),
                            jax.tree_util.tree_leaves(tree[race])):
                np.testing.assert_array_equal(a, b)
            # what the learner trains from, and what the coordinator keeps for resets
            params = group.params(agent)[1]
            np.testing.assert_array_equal(jax.tree_util.tree_leaves(params)[0],
                                          jax.tree_util.tree_leaves(tree[race])[0])
    finally:
        group.close()


def league_cli(*args):
    return subprocess.run([sys.executable, "-m", "experiments.league", *args], capture_output=True,
                          text=True, timeout=300)


def test_an_init_file_that_does_not_fit_is_refused_and_nothing_is_written(tmp_path):
    file = str(tmp_path / "supervised.npz")
    supervised_file(file, ["terran"])
    run_dir = tmp_path / "run"
    wrong_size = league_cli("--races=1", "--hidden_size=32", "--core_size=16", f"--init={file}",
                            f"--run_dir={run_dir}", "--runner=inprocess")
    assert wrong_size.returncode == 2
    assert f"--init={file} (terran): parameter" in wrong_size.stderr and "has shape" in wrong_size.stderr
    missing_race = league_cli("--races=2", "--hidden_size=16", "--core_size=16", f"--init={file}",
                              f"--run_dir={run_dir}", "--runner=inprocess")
    assert missing_race.returncode == 2
    assert "cannot load race 'protoss'" in missing_race.stderr
    assert not os.path.exists(run_dir / "config.json")
