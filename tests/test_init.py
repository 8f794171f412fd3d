"""--init=FILE: every learning agent starts from its race's supervised parameters (AlphaStar's
start), exploiters reset to them, and a file that does not fit is refused before anything is
written."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from agents.storage import params_to_npz_bytes
from experiments.config import RunConfig

# The system tier (docs/testing.md): leagues started from a supervised file, the command line as a program.
pytestmark = pytest.mark.system


def supervised_file(path, races, hidden=16, core=16, seed=5):
    """A file in experiments.supervised's format ({race: params}) for a network of these sizes."""
    from experiments.build import initial_params, make_game, make_network

    config = RunConfig.make(game="smax_races", races=1, hidden_size=hidden, core_size=core)
    spec = make_game(config, 1).spec
    network = make_network(config, spec)
    tree = {race: initial_params(network, spec, k, seed) for k, race in enumerate(races)}
    with open(path, "wb") as f:
        f.write(params_to_npz_bytes(tree, 0))
    return tree


def test_learning_agents_start_from_their_races_supervised_parameters(tmp_path):
    from experiments.nodes import DeviceLearnerGroup
    from experiments.program import agent_indices

    file = str(tmp_path / "supervised.npz")
    tree = supervised_file(file, ["terran", "protoss"])
    config = RunConfig.make(game="smax_races", races=2, hidden_size=16, core_size=16, init=file,
                            run_dir=str(tmp_path / "run"))
    indices = agent_indices(config)
    group = DeviceLearnerGroup(config, list(indices), indices, coordinator=None)
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


class SelfPlay:
    """The match source of the KL test: every agent plays itself in its own race."""

    def __init__(self, races):
        self.races = races

    def request_match(self, agent_id):
        race = self.races[agent_id]
        return {"opponent_id": agent_id, "branch": "self_play", "home_race": race, "away_race": race}

    def report_results(self, results):
        pass


@pytest.mark.replay
def test_each_agents_kl_teacher_is_its_own_races_supervised_policy(tmp_path):
    """--init=FILE with a KL weight and no --teacher: each learner's teacher is its own race's
    supervised parameters. Every agent also starts from them, so the first update's KL is zero
    (it would not be with the races' teachers swapped: their parameters differ), and it grows
    once the RL loss has moved the policy."""
    from experiments.build import agent_races
    from experiments.nodes import ActorGroup, LearnerGroup
    from experiments.program import agent_indices

    file = str(tmp_path / "supervised.npz")
    supervised_file(file, ["terran", "protoss"])
    config = RunConfig.make(game="smax_races", races=2, hidden_size=16, core_size=16, init=file,
                            kl_teacher_cost=1.0, main_exploiters_per_race=0,
                            league_exploiters_per_race=0, batch_size=4, learner_batch_size=4,
                            unroll_length=6, learning_rate=0.01, run_dir=str(tmp_path / "run"))
    assert config.teacher_source == "init"
    indices = agent_indices(config)
    assert sorted(indices) == ["protoss_main_agent_0", "terran_main_agent_0"]
    learners = LearnerGroup(config, list(indices), indices)
    actors = ActorGroup(config, [(f"{a}/actor", a) for a in indices], SelfPlay(agent_races(config)),
                        {a: learners for a in indices})
    try:
        for actor in actors.actors.values():
            actor.run(num_steps=4 * 5)  # 4 unrolls of 4 games: 16 items per agent
        first, later = {}, {}
        for agent, learner in learners.learners.items():
            assert learner.update(1, timeout=60) == 1
            first[agent] = learners.metrics()[agent]["loss/kl_teacher"]
            assert learner.update(5, timeout=60) == 5
            learner._history.clear()  # the metrics of the next update alone
            assert learner.update(1, timeout=60) == 1
            later[agent] = learners.metrics()[agent]["loss/kl_teacher"]
    finally:
        actors.close()
        learners.close()
    assert all(abs(v) < 1e-5 for v in first.values()), first
    assert all(v > 1e-4 for v in later.values()), later


def test_a_kl_weight_without_a_teacher_source_is_refused_and_nothing_is_written(tmp_path):
    import pytest

    from experiments.config import ConfigError

    with pytest.raises(ConfigError, match="a KL weight needs a teacher"):
        RunConfig.make(game="smax_races", kl_teacher_cost=0.1, init="none")
    with pytest.raises(ConfigError, match="has no supervised start"):
        RunConfig.make(game="kuhn_poker", init=str(tmp_path / "supervised.npz"))
    assert RunConfig.make(game="smax_races", kl_teacher_cost=0.1, init="x.npz").teacher_source == "init"
    assert RunConfig.make(game="smax_races", kl_teacher_cost=0.1, init="x.npz",
                          teacher="run:p").teacher_source == "teacher"   # --teacher wins
    run_dir = tmp_path / "run"
    result = league_cli("--kl_teacher_cost=0.1", "--init=none", f"--run_dir={run_dir}", "--runner=inprocess")
    assert result.returncode == 2 and "a KL weight needs a teacher" in result.stderr, result.stderr
    assert not run_dir.exists()


def test_a_supervised_start_brings_the_kl_to_it_unless_a_weight_is_given(tmp_path, monkeypatch):
    """AlphaStar's recipe by default: a run with a supervised start and no KL weight gets the KL
    to the supervised policy at the game's default weights (SMAX: 0.05, zerg 0.1), or at 0.5 where the game
    sets none; --init=none, other games, an explicit weight and a resumed run begun with another
    weight keep theirs."""
    import json

    from actors.games import registry
    from experiments import league

    def kl(**values):
        return RunConfig.make(**values).learner.loss.kl_teacher_weight

    def weights(**values):
        return RunConfig.make(**values).kl_teacher_weights

    smax, races = dict(game="smax_races", races=3), ("terran", "protoss", "zerg")
    assert weights(**smax, init="x.npz") == {"terran": 0.05, "protoss": 0.05, "zerg": 0.1}
    assert weights(**smax, init="auto") == {"terran": 0.05, "protoss": 0.05, "zerg": 0.1}
    with monkeypatch.context() as patch:  # a game with a supervised start and no KL of its own
        patch.delitem(registry.SMAX_DEFAULTS, "learner.loss.kl_teacher_weight")
        patch.delitem(registry.SMAX_DEFAULTS, "kl_teacher_by_race")
        assert weights(**smax, init="x.npz") == dict.fromkeys(races, 0.5)
    assert weights(**smax, init="none") == dict.fromkeys(races, 0.0)
    assert weights(**smax) == dict.fromkeys(races, 0.0)  # built in code: no start
    assert kl(game="kuhn_poker") == 0.0
    # a weight given is every race's, unless the races' own are given too
    assert weights(**smax, init="x.npz", kl_teacher_cost=0.1) == dict.fromkeys(races, 0.1)
    assert not RunConfig.make(**smax, init="x.npz", **{"learner.loss.kl_teacher_weight": 0.0}).kl_teacher_on
    assert weights(**smax, init="x.npz", kl_teacher_cost=0.0, kl_teacher_by_race="zerg=0.2") == {
        "terran": 0.0, "protoss": 0.0, "zerg": 0.2}
    assert RunConfig.make(**smax, init="x.npz", kl_teacher_cost=0.0,
                          kl_teacher_by_race="zerg=0.2").learner.loss.kl_teacher_heads == "action_type,target"
    assert RunConfig.make(game="smax_races", init="x.npz").teacher_source == "init"

    # A run begun with no KL term resumes with none when no weight is given again.
    file = str(tmp_path / "supervised.npz")
    supervised_file(file, ["terran"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sizes = dict(game="smax_races", races=1, hidden_size=16, core_size=16, init=file, run_dir=str(run_dir))
    with open(run_dir / "config.json", "w") as f:
        json.dump(RunConfig.make(**sizes, kl_teacher_cost=0.0).to_dict(), f)
    resumed, _ = league.choose_start(RunConfig.make(**sizes), init_given=True, kl_given=False)
    assert resumed.learner.loss.kl_teacher_weight == 0.0
    given, _ = league.choose_start(RunConfig.make(**sizes, kl_teacher_cost=0.3), init_given=True, kl_given=True)
    assert given.learner.loss.kl_teacher_weight == 0.3
    # A run begun with the KL on every head (before the micro heads were SMAX's default) keeps them.
    with open(run_dir / "config.json", "w") as f:
        json.dump(RunConfig.make(**sizes, **{"learner.loss.kl_teacher_heads": ""}).to_dict(), f)
    resumed, _ = league.choose_start(RunConfig.make(**sizes), init_given=True, kl_given=False)
    assert (resumed.learner.loss.kl_teacher_weight, resumed.learner.loss.kl_teacher_heads) == (0.05, "")
    assert RunConfig.make(**sizes).learner.loss.kl_teacher_heads == "action_type,target"
    # and a run begun with a race's own weight keeps it
    with open(run_dir / "config.json", "w") as f:
        json.dump(RunConfig.make(**sizes, kl_teacher_by_race="terran=0.05").to_dict(), f)
    resumed, _ = league.choose_start(RunConfig.make(**sizes), init_given=True, kl_given=False)
    assert resumed.kl_teacher_weights == {"terran": 0.05}
