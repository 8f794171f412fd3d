"""--game's forms (actors/games/registry.py): built-ins, a user's module by its path, entry points,
OpenSpiel by name; unknown names; a user's game on the default runner from outside the repository."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from actors.games import Game, GameFunctions, make_batch_game
from actors.games.registry import BUILTINS, UnknownGame, module_path, resolve
from experiments.config import UNTUNED_SNAPSHOT_UPDATES, ConfigError, RunConfig

# The system tier (docs/testing.md): a user's game in a league on Ray, the command line as a program.
pytestmark = pytest.mark.system

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPOSITORY, "examples", "nim.py")


def league_cli(*args, cwd=None, timeout=300):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "experiments.league", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=env)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A directory outside the repository holding a copy of the example game as `mynim.py`."""
    d = tmp_path / "mine"
    d.mkdir()
    shutil.copy(EXAMPLE, d / "mynim.py")
    monkeypatch.syspath_prepend(str(d))
    forget()
    yield d
    forget()


def forget():
    """Forgets the modules and games of other tests (each copies its own `mynim`)."""
    for name in ("mynim", "barenim"):
        sys.modules.pop(name, None)
    resolve.cache_clear()


def test_every_builtin_resolves_to_a_declared_game_without_importing_it():
    for name in BUILTINS:
        game = resolve(name)
        assert isinstance(game, Game) and game.name == name and game.device
    assert resolve("smax_races").capabilities.races == ("terran", "protoss", "zerg")
    assert resolve("kuhn_poker").capabilities.exact_evaluator
    assert not resolve("openspiel/liars_dice").device   # an OpenSpiel pool: the replay path only


def test_the_registered_smax_races_are_the_games():
    from actors.games import smax_races

    assert resolve("smax_races").capabilities.races == smax_races.RACES


def test_a_users_module_and_factory_by_path(user_dir):
    game = resolve("mynim:make")
    assert game.name == "nim" and game.capabilities.turn_based
    assert module_path("mynim:make") == str(user_dir / "mynim.py")
    batch = make_batch_game("mynim:make", 4)
    assert isinstance(batch.fns, GameFunctions) and batch.reset(0).observations[0]["stones"].shape == (4, 16)
    assert module_path("kuhn_poker") is None


@pytest.mark.parametrize("source, name, message", [
    ("", "nosuchmodule_xyz:make", "cannot import module 'nosuchmodule_xyz'"),
    ("def other():\n    pass\n", "badgame1:make", "has no function 'make'"),
    ("def make():\n    raise RuntimeError('no board')\n", "badgame2:make", "the factory raised RuntimeError: no board"),
    ("def make():\n    return 42\n", "badgame3:make", "the factory returned a int"),
])
def test_a_broken_module_or_factory_is_named(tmp_path, monkeypatch, source, name, message):
    if source:
        (tmp_path / (name.split(":")[0] + ".py")).write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnknownGame, match=message):
        resolve(name)
    with pytest.raises(ConfigError, match=message):
        RunConfig.make(game=name)


def test_an_installed_package_registers_games_through_the_entry_point_group(user_dir, tmp_path, monkeypatch):
    dist = tmp_path / "site" / "nimgames-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nimgames\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[league.games]\nnim_by_entry_point = mynim:make\n")
    with pytest.raises(UnknownGame):
        resolve("nim_by_entry_point")
    resolve.cache_clear()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    try:
        assert resolve("nim_by_entry_point").name == "nim"
    finally:
        resolve.cache_clear()


def test_a_game_nobody_tuned_gets_an_mlp_and_snapshots_in_updates(user_dir):
    config = RunConfig.make(game="mynim:make")
    assert config.network.core_size == 0    # flat observations: the MLP
    steps = config.learner.batch_size * config.learner.unroll_length
    assert config.league.snapshots.main_agent_snapshot_steps == 160 * steps
    assert config.league.snapshots.main_exploiter_timeout_steps == (
        UNTUNED_SNAPSHOT_UPDATES["league.snapshots.main_exploiter_timeout_steps"] * steps)
    # Flags given win; a larger batch is a longer cadence in steps.
    given = RunConfig.make(game="mynim:make", core_size=32, **{"learner.batch_size": 32})
    assert given.network.core_size == 32
    assert given.league.snapshots.main_agent_snapshot_steps == 160 * 32 * config.learner.unroll_length
    # The built-ins keep their measured cadences.
    assert RunConfig.make(game="matrix_rps").league.snapshots.main_agent_snapshot_steps == 4_000
    assert RunConfig.make(game="kuhn_poker").league.snapshots.main_agent_snapshot_steps == 40_000


def test_an_unknown_game_exits_2_naming_the_forms_and_writes_nothing(tmp_path):
    result = league_cli("--game=rrps", f"--run_dir={tmp_path / 'run'}", timeout=120)
    assert result.returncode == 2, result.stderr
    assert "unknown game 'rrps'" in result.stderr
    for form in ("package.module:factory", "pgx/<env_id>", "jaxmarl/<env_id>", "openspiel/<name>", "league.games"):
        assert form in result.stderr
    assert "SpielError" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_an_openspiel_game_is_refused_in_the_base_environment_with_the_install_line(tmp_path):
    pytest.importorskip("pyspiel")
    if "reverb" in sys.modules or __import__("importlib").util.find_spec("reverb") is not None:
        pytest.skip("the replay environment plays OpenSpiel games")
    result = league_cli("--game=openspiel/liars_dice", f"--run_dir={tmp_path / 'run'}", timeout=120)
    assert result.returncode == 2, result.stderr
    assert "no JAX step" in result.stderr and "constraints-replay.txt" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_users_game_outside_the_repository_runs_a_league_on_the_default_runner(user_dir, tmp_path):
    """The example game, copied out of the repository, by its module path on Ray (the default
    runner): Ray's workers import it (no 'Unknown game'), its games are recorded, and the
    terminal sums snapshots on the progress line instead of a line each. It runs until every
    learner has made 320 updates (the untuned game's main-exploiter timeout; a snapshot every 160),
    not for a fixed time: CI's learners, compiling under load on a cold cache, were still
    compiling at 0.6 minutes and then at 1 minute (session 47), with no snapshot to sum."""
    from coordinator.history import LeagueHistory

    run_dir = tmp_path / "run"
    steps = 320 * 16 * 32   # updates x the CPU batch x the unroll
    result = league_cli("--game=mynim:make", f"--learner_steps={steps}", f"--run_dir={run_dir}", "--dashboard_port=-1",
                        "--progress_every_seconds=5", cwd=str(user_dir), timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "runner=ray" in result.stdout
    assert "device: cpu: learner batch 16 games per agent (the measured CPU default" in result.stdout
    history = LeagueHistory(str(run_dir), readonly=True)
    try:
        assert history.game_count() > 1000
    finally:
        history.close()
    lines = result.stdout.splitlines()
    assert not any(line.startswith("  snapshot:") for line in lines)
    assert any("snapshot" in line and line.startswith("[") for line in lines), result.stdout[-2000:]


def test_the_example_is_short_and_documented():
    with open(EXAMPLE) as f:
        lines = f.read().splitlines()
    # the game itself (its rules and factory's imports) in at most 100 lines; with the optional
    # capabilities a person sees it through (text for the play page, SVG for the watch page) 130
    rules = next(i for i, line in enumerate(lines) if line.startswith("class NimText"))
    assert rules <= 100 and len(lines) <= 130, (rules, len(lines))
    docs = os.path.join(REPOSITORY, "docs", "games.md")
    with open(docs) as f:
        text = f.read()
    assert "examples/nim.py" in text and "check_game" in text


def test_a_factory_may_return_bare_functions(user_dir, tmp_path, monkeypatch):
    (tmp_path / "barenim.py").write_text(textwrap.dedent("""
        from mynim import Nim

        def make():
            return Nim()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    game = resolve("barenim:make")
    assert game.name == "barenim:make" and game.device and game.capabilities.races == ()


def test_on_a_cluster_ray_ships_a_users_game_module_with_the_code(user_dir):
    from experiments.launchers import job_runtime_env

    mine = RunConfig.make(game="mynim:make", **{"ray.ship_code": "always"})
    assert job_runtime_env(mine, mine.ray)["py_modules"] == [str(user_dir / "mynim.py")]
    builtin = RunConfig.make(game="kuhn_poker", **{"ray.ship_code": "always"})
    assert "py_modules" not in job_runtime_env(builtin, builtin.ray)
