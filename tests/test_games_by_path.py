"""An environment of another library named by its module path (actors/games/registry.py): a
factory that returns a JaxMARL `MultiAgentEnv` or a pgx `Env` instance is adapted, named by the
path, passes check_game's checks and plays a league on every runner (in one process and on Ray
here; under Launchpad in tests/test_launchpad.py); anything else gets the error naming the four
kinds a factory may return."""

import io
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from actors.games import registry
from actors.games.base import Game, UnknownGame
from actors.games.check import run_checks
from experiments.config import ConfigError, RunConfig

# A two-player JaxMARL env written against MultiAgentEnv's API by someone else (the adapter's
# rules: actors/games/jaxmarl_game.py): matching pennies over three rounds.
PENNIES = textwrap.dedent('''
    import jax.numpy as jnp
    from jaxmarl.environments.multi_agent_env import MultiAgentEnv, State
    from jaxmarl.environments.spaces import Discrete


    class Pennies(MultiAgentEnv):
        def __init__(self, length=3):
            super().__init__(num_agents=2)
            self.length = length
            self.action_spaces = {a: Discrete(2) for a in self.agents}

        def reset(self, key):
            state = State(done=jnp.array(False), step=jnp.array(0))
            return self.get_obs(state), state

        def get_obs(self, state):
            obs = jnp.stack([state.step.astype(jnp.float32), jnp.float32(1.0)])
            return {a: obs for a in self.agents}

        def step_env(self, key, state, actions):
            match = actions["agent_0"] == actions["agent_1"]
            rewards = {"agent_0": match.astype(jnp.float32), "agent_1": (~match).astype(jnp.float32)}
            step = state.step + jnp.int32(1)
            done = step >= self.length
            state = State(done=done, step=step)
            return self.get_obs(state), state, rewards, {"agent_0": done, "agent_1": done, "__all__": done}, {}


    def make():
        return Pennies()


    def three():   # three agents: no two teams
        env = Pennies()
        env.agents = ["a_0", "b_0", "c_0"]
        return env
''')

TIC_TAC_TOE = textwrap.dedent('''
    import pgx


    def make():
        return pgx.make("tic_tac_toe")
''')

NEITHER = textwrap.dedent('''
    class Board:
        def reset(self, key):
            return None


    def make():
        return Board()
''')


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A directory outside the repository, on sys.path, holding the three user modules."""
    for module, source in (("bypath_pennies", PENNIES), ("bypath_ttt", TIC_TAC_TOE), ("bypath_neither", NEITHER)):
        (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    forget()
    yield tmp_path
    forget()


def forget():
    for module in ("bypath_pennies", "bypath_ttt", "bypath_neither"):
        sys.modules.pop(module, None)
    registry.resolve.cache_clear()


def assert_passes_check_game(game):
    checks = run_checks(game, 8, 40, 0)
    problems = [(c.name, c.problems) for c in checks if c.problems]
    assert not problems, problems
    assert len(checks) >= 14


def test_a_factory_returning_a_jaxmarl_env_is_adapted_and_passes_check_game(user_dir):
    game = registry.resolve("bypath_pennies:make")
    assert isinstance(game, Game) and game.name == "bypath_pennies:make"
    fns = game.functions()
    assert fns.spec.name == "bypath_pennies:make" and fns.spec.sides[0].action.heads["action"].num_values == 2
    assert registry.describe("bypath_pennies:make") == (
        "game bypath_pennies:make: a JaxMARL MultiAgentEnv, adapted by actors.games.jaxmarl_game")
    assert registry.describe("kuhn_poker") is None
    assert registry.module_path("bypath_pennies:make") == str(user_dir / "bypath_pennies.py")  # what Ray ships
    assert_passes_check_game(game)
    # One that the adapter refuses names the adapter and the fix.
    with pytest.raises(UnknownGame, match=r"MultiAgentEnv \(Pennies\) that actors.games.jaxmarl_game cannot "
                                          r"adapt: .*teams="):
        registry.resolve("bypath_pennies:three")


def test_a_factory_returning_a_pgx_env_is_adapted_and_passes_check_game(user_dir):
    game = registry.resolve("bypath_ttt:make")
    assert isinstance(game, Game) and game.name == "bypath_ttt:make" and game.capabilities.turn_based
    fns = game.functions()
    assert fns.spec.name == "bypath_ttt:make" and fns.spec.max_steps == 9   # tic-tac-toe's bound, by its id
    assert fns.config != registry.resolve("pgx/tic_tac_toe").functions().config   # an instance of its own
    assert registry.describe("bypath_ttt:make") == "game bypath_ttt:make: a pgx Env, adapted by actors.games.pgx_game"
    assert_passes_check_game(game)


def test_a_factory_returning_neither_is_refused_naming_the_four_kinds(user_dir, monkeypatch):
    # Telling what a factory returned imports neither library: here neither can be imported.
    monkeypatch.setitem(sys.modules, "pgx", None)
    monkeypatch.setitem(sys.modules, "jaxmarl", None)
    for error, call in ((UnknownGame, registry.resolve), (ConfigError, lambda name: RunConfig.make(game=name))):
        registry.resolve.cache_clear()
        with pytest.raises(error) as info:
            call("bypath_neither:make")
        message = str(info.value)
        assert "the factory returned a Board" in message
        for kind in ("actors.games.Game", "GameFunctions protocol", "JaxMARL MultiAgentEnv instance",
                     "pgx Env instance", "docs/games.md"):
            assert kind in message, message


@pytest.mark.system
def test_a_jaxmarl_env_by_its_module_path_plays_a_league_in_process(user_dir, tmp_path):
    """The in-process runner resolves the path string itself (as every Ray or Launchpad process
    does) and its learners play the adapted game. A main agent alone, a few updates."""
    from coordinator.history import LeagueHistory
    from experiments.config import prepare_run_dir
    from experiments.launchers import LAUNCHERS

    config = RunConfig.make(game="bypath_pennies:make", runner="inprocess", run_dir=str(tmp_path / "run"),
                            minutes=1.0, learner_steps=4 * 8 * 32, hidden_size=16, learner_batch_size=8,
                            main_exploiters_per_race=0, league_exploiters_per_race=0, evaluators=0,
                            dashboard_port=-1, progress_every_seconds=5.0,
                            **{"device.updates_per_chunk": 2})
    assert config.game_info.name == "bypath_pennies:make"
    prepare_run_dir(config)
    out = io.StringIO()
    LAUNCHERS["inprocess"](config, out=out)
    history = LeagueHistory(config.run_dir, readonly=True)
    try:
        assert history.game_count() > 0, out.getvalue()[-3000:]
    finally:
        history.close()
    assert "--learner_steps=" in out.getvalue(), out.getvalue()[-3000:]   # it stopped on learnt steps


@pytest.mark.system
def test_a_pgx_env_by_its_module_path_plays_a_league_on_ray(user_dir):
    """The default runner, as a user starts it from their own directory: Ray's node processes
    import the user's module (not on PYTHONPATH), the first screen names the adapter, and the
    learners' and the evaluator's games of the adapted pgx game reach league.db. (Launchpad:
    tests/test_launchpad.py, a JaxMARL env by its module path.)"""
    run_dir = user_dir / "run"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-m", "experiments.league", "--game=bypath_ttt:make", f"--run_dir={run_dir}",
         "--learner_steps=1", "--hidden_size=16", "--core_size=16", "--progress_every_seconds=5",
         "--dashboard_port=-1"], cwd=str(user_dir), env=env, capture_output=True, text=True, timeout=400)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "runner=ray" in out and "game bypath_ttt:make: a pgx Env, adapted by actors.games.pgx_game" in out, out[-4000:]
    with sqlite3.connect(f"file:{run_dir / 'league.db'}?mode=ro", uri=True) as db:
        sources = dict(db.execute("SELECT source, sum(wins + draws + losses) FROM game_counts GROUP BY source"))
    assert sources.get("device", 0) > 0 and sources.get("evaluator", 0) > 0, (sources, out[-3000:])
