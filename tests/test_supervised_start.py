"""The automatic supervised start (experiments/supervised_start.py): a SMAX league with no --init
records the heuristic's games, trains the supervised agents, caches them and starts from them; a
second run reuses the cache; --init=none and other games skip it."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from experiments.config import RunConfig

# The system tier (docs/testing.md): a SMAX league that builds its supervised start.
pytestmark = pytest.mark.system

TINY = ["--races=1", "--supervised.games=3", "--supervised.steps=2", "--supervised.batch_size=2",
        "--hidden_size=16", "--core_size=16"]


def league_cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "experiments.league", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_a_smax_league_without_init_builds_the_supervised_start_and_the_next_run_reuses_it(tmp_path):
    from experiments import league
    from experiments.build import load_supervised

    cache = tmp_path / "cache"
    config = RunConfig.from_paths({"game": "smax_races", "races": 1, "init": "auto",
                                   "network.hidden_size": 16, "network.core_size": 16,
                                   "supervised.games": 3, "supervised.steps": 2,
                                   "supervised.batch_size": 2, "supervised.cache_dir": str(cache),
                                   "run_dir": str(tmp_path / "run")})

    # The start is built as the league's driver builds it, in processes of its own: the driver,
    # which runs for the whole league, keeps none of the recording's and cloning's memory (it
    # compiles no XLA program past the few small ones of the cache key's description, and never
    # imports the cloning; in the driver itself the build compiled ~250). Under --runner=ray
    # (the default) the driver's `print` is Ray's by then (ray.init puts tqdm_ray.safe_print in
    # builtins' place, after the league's modules are imported): the build passed `print` to its
    # child and failed ("Can't pickle <built-in function print>"), so here print is Ray's too.
    code = ("import builtins, json, sys, jax; from experiments.config import RunConfig; "
            "from experiments.supervised_start import describe, resolve_start; compiled = []; "
            "from ray.experimental import tqdm_ray; builtins.print = tqdm_ray.safe_print; "
            "jax.monitoring.register_event_duration_secs_listener("
            "lambda name, *_, **__: compiled.append(name) if 'backend_compile' in name else None); "
            "config = RunConfig.from_dict(json.loads(sys.argv[1])); describe(config); before = len(compiled); "
            "resolved, line = resolve_start(config); print(line); "
            "print('compiled by the build here:', len(compiled) - before, 'cloning imported here:', "
            "'actors.games.smax_races.supervised' in sys.modules); print('file:', resolved.init)")
    built = subprocess.run([sys.executable, "-c", code, json.dumps(config.to_dict())], capture_output=True,
                           text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    out = built.stdout
    assert "[start] building the supervised start for terran" in out, out
    assert "[record] wrote 3 games" in out and "[supervised] terran step 2/2" in out, out
    assert "start: supervised agents of the scripted heuristic, built now" in out, out
    assert "compiled by the build here: 0 cloning imported here: False" in out, out
    file = out.split("file: ")[-1].strip()
    assert file.startswith(str(cache)) and os.path.isfile(file), file   # the run names its start
    assert not [e for e in os.listdir(cache) if e.startswith(".")], os.listdir(cache)  # no temporaries
    load_supervised(file, "terran")

    # A league with the same settings reuses it: nothing recorded or trained.
    mtime = os.path.getmtime(file)
    result = league_cli(*TINY, "--main_exploiters_per_race=0", "--league_exploiters_per_race=0",
                        "--evaluators=0", "--learner.batch_size=4",
                        "--unroll_length=6", "--minutes=0.01", "--runner=inprocess",
                        "--dashboard_port=-1", f"--run_dir={tmp_path / 'run'}",
                        env={"LEAGUE_SUPERVISED_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "start: supervised agents of the scripted heuristic, reused from the cache" in out, out
    assert "[record]" not in out and "[supervised]" not in out and "[start]" not in out, out
    assert json.load(open(tmp_path / "run" / "config.json"))["init"] == file
    assert os.path.getmtime(file) == mtime

    # Other settings are another start (here: more training steps).
    from experiments import supervised_start

    assert supervised_start.start_paths(config)[1] == file
    more_steps = dataclasses.replace(config, supervised=dataclasses.replace(config.supervised, steps=3))
    assert supervised_start.start_paths(more_steps)[1] != file
    # A resumed run without --init keeps the start it was started with (no build), and says it
    # came from the cache, not from an --init the user did not give.
    resumed, line = league.choose_start(more_steps, init_given=False)
    assert resumed.init == file and "--init" not in line, line
    assert line.startswith(f"start: supervised agents from the cached supervised start this run "
                           f"began with ({file}; "), line
    # --init only where the user gave it: a cached file for a new run, or a file of their own.
    new_run = dataclasses.replace(config, init=file, run_dir=str(tmp_path / "new"))
    assert supervised_start.resolve_start(new_run, log=None)[1].startswith(
        f"start: supervised agents from the cached supervised start given by --init ({file}; ")
    own = tmp_path / "own.npz"
    own.write_bytes(open(file, "rb").read())
    assert supervised_start.resolve_start(dataclasses.replace(new_run, init=str(own)), log=None)[1] \
        .startswith(f"start: supervised agents from --init={own} (")
    own_run = dataclasses.replace(new_run, init=str(own), run_dir=str(tmp_path / "own_run"))
    os.makedirs(own_run.run_dir)
    with open(os.path.join(own_run.run_dir, "config.json"), "w") as f:
        json.dump(own_run.to_dict(), f)
    assert supervised_start.resolve_start(own_run, log=None)[1].startswith(
        f"start: supervised agents from {own}, the --init file this run began with ("), own_run


def test_too_few_recorded_games_for_a_race_is_a_flag_error_not_a_traceback(tmp_path):
    """One recorded game holds at most two of three races: the cloning cannot train the third.
    The league says so and how to fix it (exit 2, no traceback) and leaves no half-built start."""
    cache = tmp_path / "cache"
    result = league_cli("--races=3", "--supervised.games=1", "--supervised.steps=2", "--supervised.batch_size=2",
                        "--hidden_size=16", "--core_size=16", "--minutes=0.01", "--runner=inprocess",
                        "--dashboard_port=-1", f"--supervised.cache_dir={cache}", f"--run_dir={tmp_path / 'run'}")
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "cannot be trained from 1 recorded games" in result.stderr, result.stderr[-3000:]
    assert "no recorded games of" in result.stderr and "--supervised.games" in result.stderr, result.stderr
    starts = [e for e in os.listdir(cache) if e.startswith("start-") or e.startswith(".")]
    assert not starts, os.listdir(cache)


def test_init_none_and_other_games_skip_the_supervised_start(tmp_path):
    from experiments import supervised_start

    cache = tmp_path / "cache"
    for values, why in [({"game": "smax_races", "init": "none"}, "--init=none"),
                        ({"game": "kuhn_poker"}, "no supervised start for this game")]:
        config = RunConfig.make(**values, **{"supervised.cache_dir": str(cache)})
        resolved, line = supervised_start.resolve_start(config, log=None)
        assert resolved.init_file is None and line == f"start: random parameters ({why})"
    assert not cache.exists()

    # The command's default: the automatic start on SMAX only; --init=none is kept.
    code = ("import sys, json; from experiments import league; league.define_flags(); "
            "league.FLAGS(sys.argv); print(json.dumps(league.config_from_flags().to_dict()))")

    def init_of(*args):
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        return json.loads(out.splitlines()[-1])["init"]

    assert init_of("--races=3") == "auto"
    assert init_of("--races=3", "--init=none") == "none"
    assert init_of("--game=kuhn_poker") == ""


def test_blocked_cloning_equals_the_step_by_step_loop(tmp_path):
    """The cloning's programs of a tenth of the steps (batches drawn up front, gathered on the
    device from every race's arrays of one shape, `lax.scan` + `lax.switch` over the buckets)
    learn the same parameters as the earlier loop (one jitted update per step on a batch made on
    the host), race by race, on a tiny replay set: the same batches, in the same order."""
    import jax
    import numpy as np

    from actors.games import smax_races
    from actors.games.smax_races import record, supervised
    from actors.games.smax_races import z as zmod
    from agents import make_network

    record.record(str(tmp_path / "replays"), "heuristic", 27, 27, 0, log=lambda *a, **k: None)
    spec = smax_races.functions(smax_races.SmaxRacesConfig()).spec
    network = make_network(spec, unit=True, hidden_size=8, core_size=8,
                           z=(zmod.Z_SIZE, len(zmod.PSEUDO_REWARDS)))
    data, _ = supervised.load_sequences(str(tmp_path / "replays"), spec, 0.2, 0)
    horizon = max(s[1]["composition"].shape[0] for pair in data.values() for part in pair for s in part)
    races = [r for r in range(3) if data[r][0]]
    assert len(races) >= 2, {r: len(data[r][0]) for r in range(3)}
    shapes = supervised.race_data({r: data[r][0] for r in races}, horizon)
    quiet = lambda *a, **k: None   # noqa: E731
    for race in races:
        # 7 steps: blocks of one step; 23: blocks of 2 and a last block padded with a no-op step.
        for steps in (7, 23):
            args = (network, spec, race, data[race][0], data[race][1], steps, 3, 1e-2, 0, horizon)
            blocked, held = supervised.train_race(*args, log=quiet, shapes=shapes)
            reference, held_ref = supervised.train_race_stepwise(*args, log=quiet)
            for a, b in zip(jax.tree.leaves(blocked), jax.tree.leaves(reference), strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
            assert held.keys() == held_ref.keys()
            for h in held:
                assert abs(held[h]["accuracy"] - held_ref[h]["accuracy"]) < 1e-6, (h, held, held_ref)
