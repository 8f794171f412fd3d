"""The whole program with real components: coordinator, SQLite, Reverb, learners, actors, Ray."""

import dataclasses
import io
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from actors.games.registry import LEDUC_DEFAULTS
from coordinator.history import LeagueHistory
from experiments.config import RunConfig, fields, prepare_run_dir
from experiments.program import DEVICE_ONLY

# The system tier (docs/testing.md): whole leagues through the launchers, their faults and refusals.
pytestmark = pytest.mark.system

FAST = {
    "races": 1, "actors_per_learner": 1, "batch_size": 16, "learner_batch_size": 8, "unroll_length": 8,
    "hidden_size": 16, "core_size": 16, "main_agent_snapshot_steps": 300, "exploiter_min_steps": 300,
    "league.snapshots.main_exploiter_timeout_steps": 600, "league.snapshots.league_exploiter_timeout_steps": 300,
    "actor.episodes_per_match": 16, "param_refresh_seconds": 1.0, "progress_every_seconds": 2.0,
    "meta_game_every_seconds": 2.0, "checkpoint_every_seconds": 5.0, "dashboard_port": -1,
    "evaluation_games": 8, "learner.replay.max_size": 256,
}


def config(tmp_path, **overrides) -> RunConfig:
    """A small run of the replay path (actors, Reverb; the device path: tests/test_device_path.py)."""
    values = {**FAST, "game": "matrix_rps", "runner": "inprocess", "run_dir": str(tmp_path / "run"),
              "experience": "replay", **overrides}
    return RunConfig.make(**values)


def learner_versions(run_dir):
    from learners import checkpoint

    return {agent: checkpoint.read_params(run_dir, agent)[0]
            for agent in sorted(os.listdir(os.path.join(run_dir, "learners")))}


def learner_steps(run_dir):
    """Each learner's steps in its checkpoint: a resumed run stops on `learner_steps` above these."""
    from learners import checkpoint

    return {agent: checkpoint.read_payload(checkpoint.path(run_dir, agent))["steps"]
            for agent in sorted(os.listdir(os.path.join(run_dir, "learners")))}


def run(cfg, runner=None, out=None, **kwargs):
    from experiments.launchers import LAUNCHERS

    prepare_run_dir(cfg)
    out = out or io.StringIO()
    supervisor = LAUNCHERS[runner or cfg.runner](cfg, out=out, **kwargs)
    return supervisor, out.getvalue()


@pytest.mark.replay
def test_inprocess_league_learns_snapshots_resets_and_resumes(tmp_path):
    cfg = config(tmp_path, minutes=0.6)
    supervisor, out = run(cfg)
    history = LeagueHistory(cfg.run_dir, readonly=True)
    players = history.players()
    roles = {p["role"] for p in players}
    assert {"main_agent", "main_exploiter", "league_exploiter", "historical"} <= roles, out
    events = history.events()
    assert any(e["kind"] == "reset" and "main_exploiter" in e["agent_id"] for e in events), out
    snapshotted = {e["agent_id"] for e in events if e["kind"] == "snapshot"}
    assert snapshotted == {p["player_id"] for p in players if p["role"] != "historical"}
    games = history.result_rows()
    assert games and {g["source"] for g in games} == {"actor", "evaluator"}
    assert history.nash_history() and history.ratings_history() and history.learner_metrics()
    first_versions = learner_versions(cfg.run_dir)
    assert all(v > 0 for v in first_versions.values()), first_versions
    assert "checkpoints written" in out
    frozen = {p["player_id"] for p in players if p["role"] == "historical"}
    for player_id in frozen:
        assert os.path.exists(os.path.join(cfg.run_dir, "params", f"{player_id}.npz"))

    # Rerun the same run directory: it resumes (players, payoff, learner versions).
    games_before = history.game_count()
    _, out2 = run(dataclasses.replace(cfg, minutes=0.25))
    history = LeagueHistory(cfg.run_dir, readonly=True)
    assert frozen <= {p["player_id"] for p in history.players()}
    assert history.game_count() > games_before
    second_versions = learner_versions(cfg.run_dir)
    assert all(second_versions[a] > first_versions[a] for a in first_versions), (first_versions, second_versions)
    with sqlite3.connect(os.path.join(cfg.run_dir, "league.db")) as db:
        state_players = db.execute("SELECT count(*) FROM players").fetchone()[0]
    assert state_players >= len(players)


@pytest.mark.replay
def test_inprocess_kuhn_poker_league_runs_the_whole_loop(tmp_path):
    cfg = config(tmp_path, game="kuhn_poker", minutes=0.4)
    _, out = run(cfg)
    history = LeagueHistory(cfg.run_dir, readonly=True)
    assert history.game_count() > 100
    assert any(e["kind"] == "snapshot" for e in history.events())
    assert all(v > 0 for v in learner_versions(cfg.run_dir).values())

    # A second run learns with the KL to a teacher: the first run's main agent.
    student = config(tmp_path, game="kuhn_poker", minutes=0.3, run_dir=str(tmp_path / "student"),
                     teacher=f"{cfg.run_dir}:any_main_agent_0", kl_teacher_cost=0.5)
    _, out = run(student)
    kl = [v for _, _, name, v in LeagueHistory(student.run_dir, readonly=True).learner_metrics()
          if name == "loss/kl_teacher"]
    assert kl and all(v >= 0 for v in kl) and max(kl) > 0, out
    assert all(v > 0 for v in learner_versions(student.run_dir).values())


def ray_node_pid(handles, name: str) -> int:
    """The pid of the Ray worker process that runs node `name` of a launch (`handles`), asked of
    that actor itself. Not by scanning the machine's processes for its class's title: CI runs
    two tests at once, and the other one's league has a `ray::Coordinator` too (CI, session 57:
    this test killed the Ctrl-C test's coordinator, and both failed)."""
    import ray

    return ray.get(handles[name].handle.__ray_call__.remote(lambda _self: os.getpid()), timeout=60)


def learnt_since(run_dir, t: float) -> bool:
    """Every learner's steps grew in league.db's readings after wall time `t`."""
    if not os.path.exists(os.path.join(run_dir, "league.db")):
        return False
    history = LeagueHistory(run_dir, readonly=True)
    try:
        rows = history.learner_metrics()
    finally:
        history.close()
    readings: dict[str, list[float]] = {}
    for when, agent, name, value in rows:
        if name == "steps" and when > t:
            readings.setdefault(agent, []).append(value)
    agents = os.listdir(os.path.join(run_dir, "learners"))
    return all(len(readings.get(a, [])) > 1 and max(readings[a]) > readings[a][0] for a in agents)


# Snapshots 60x rarer than FAST's for the restart tests: on an idle machine their learners make
# ~12 updates a second each, and at FAST's cadence the league grew by ~6 players a second (109
# at 0.9 minutes in CI), a load that grows with the machine's speed.
SLOW_SNAPSHOTS = {"main_agent_snapshot_steps": 18_000, "exploiter_min_steps": 18_000,
                  "league.snapshots.main_exploiter_timeout_steps": 36_000,
                  "league.snapshots.league_exploiter_timeout_steps": 18_000}


def what_happened(timeline, supervisor, text) -> str:
    """A restart test's failure message: the hook's steps and any wait that ran out first, then
    the run's last lines (CI shows the beginning of a failure's output only)."""
    return "\n".join(timeline + [f"Ray restarts counted: {supervisor.restarts}", "the run's last lines:", text[-6000:]])


def kill_in_turn(run_dir, kills, out, restarted, stop_event, timeline, after=5.0, wait=150.0, then=None):
    """An `on_launch` hook of a Ray launch: once league.db holds games, kill -9 each group of
    `kills` in turn (a group: node names, their processes killed at once), each once the
    launcher has said every node of the group before restarted (`out`: "<name> restarted", its
    wall time in `restarted[name]`) and a game has been recorded `after` seconds later (only the
    league going on can have played it), and `then[name](t)` holds for that time t if given;
    then set `stop_event`. Waits on the league, not on a clock: under CI's load a league's first
    game came 18-40 s after launch, Ray's restart 18-25 s after a kill. Not on games alone after
    a kill: the reports a lost coordinator missed are recorded once Ray has restarted it, before
    the launcher's probe says so. `timeline` gets a line per step, and one per wait that ran
    out, for a failing test to show first (CI shows a failure's first lines)."""
    import signal
    import threading
    import time

    def games_since(t):
        if not os.path.exists(os.path.join(run_dir, "league.db")):
            return False
        history = LeagueHistory(run_dir, readonly=True)
        try:
            return any(g["time"] > t for g in history.result_rows())
        finally:
            history.close()

    start = time.time()

    def note(what):
        timeline.append(f"{time.time() - start:6.1f} s  {what}")

    def wait_until(condition, what):
        deadline = time.time() + wait
        while not condition():
            if time.time() >= deadline:
                note(f"waited {wait:g} s in vain for {what}")
                return
            time.sleep(1.0)
        note(what)

    def watch(handles):
        wait_until(lambda: games_since(0.0), "the first game")
        for group in kills:
            for pid in [ray_node_pid(handles, name) for name in group]:
                os.kill(pid, signal.SIGKILL)
            note(f"killed {' and '.join(group)}")
            for name in group:
                line = f"  {name} restarted"
                wait_until(lambda line=line: line in out.getvalue(), f"'{line.strip()}'")
                restarted[name] = time.time()
            back = time.time()
            wait_until(lambda back=back: games_since(back + after), f"a game {after:g} s after {' and '.join(group)} were back")
            for name in set(group) & set(then or {}):
                wait_until(lambda back=back, name=name: then[name](back + after), f"{name}'s condition")
        stop_event.set()

    return lambda handles: threading.Thread(target=watch, args=(handles,), daemon=True).start()


@pytest.mark.replay
def test_ray_runner_survives_a_killed_actor_process_coordinator_and_learner_group(tmp_path):
    """Ray restarts each (issue 28, inside the run): the actors call the restarted coordinator
    again and the reports it missed are delivered then; the restarted learner group resumes
    from its checkpoints with a new Reverb server, which the actors find and fill, and every
    learner learns again."""
    import threading

    cfg = config(tmp_path, runner="ray", minutes=8.0, evaluators=0, **SLOW_SNAPSHOTS)   # stopped by the hook
    out, restarted, stop_event, timeline = io.StringIO(), {}, threading.Event(), []
    kills = [["actors"], ["coordinator"], ["learners"]]
    hook = kill_in_turn(cfg.run_dir, kills, out, restarted, stop_event, timeline,
                        then={"learners": lambda t: learnt_since(cfg.run_dir, t)})
    supervisor, text = run(cfg, out=out, stop_event=stop_event, on_launch=hook)
    said = what_happened(timeline, supervisor, text)
    assert list(restarted) == ["actors", "coordinator", "learners"], said
    assert all(f"{name} restarted" in text for name in restarted) and supervisor.restarts >= 3, said
    history = LeagueHistory(cfg.run_dir, readonly=True)
    # Games recorded 5 s after the launcher saw the coordinator back: the restarted
    # coordinator recorded what the restarted actor process played.
    assert any(g["time"] > restarted["coordinator"] + 5.0 for g in history.result_rows()), said
    # Every learner's steps grew after the restarted group was back: from unrolls the actors
    # wrote to its new server.
    assert learnt_since(cfg.run_dir, restarted["learners"] + 5.0), said


@pytest.mark.replay
def test_ray_runner_survives_the_coordinator_and_learner_group_lost_together(tmp_path):
    """Both lost at once (a host with both on it, or two crashes together): the restarted
    coordinator's wiring call to the learner group (connect_learners) can meet the group still
    restarting; the launcher wires it again once the group is back and the league goes on. It
    used to stop the run with Ray's ActorUnavailableError."""
    import threading

    cfg = config(tmp_path, runner="ray", minutes=8.0, evaluators=0, **SLOW_SNAPSHOTS)   # stopped by the hook
    out, restarted, stop_event, timeline = io.StringIO(), {}, threading.Event(), []
    kills = [["coordinator", "learners"]]
    hook = kill_in_turn(cfg.run_dir, kills, out, restarted, stop_event, timeline,
                        then={"learners": lambda t: learnt_since(cfg.run_dir, t)})
    supervisor, text = run(cfg, out=out, stop_event=stop_event, on_launch=hook)
    said = what_happened(timeline, supervisor, text)
    assert all(f"{name} restarted" in text for name in kills[0]) and supervisor.restarts >= 2, said
    assert learnt_since(cfg.run_dir, max(restarted.values()) + 5.0), said


def league_cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "experiments.league", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--game=chess"], "chess"),
        (["--runner=slurm"], "slurm"),
        (["--game=kuhn_poker", "--races=3"], "one race"),
        (["--runner=launchpad"], "Create the Launchpad environment from the repository's root"),
        (["--game=kuhn_poker", "--kl_teacher_cost=0.1"], "and --teacher go together"),
        (["--game=kuhn_poker", "--entropy_cost=0.1", "--learner.loss.entropy_weight=0.2"], "both set learner.loss.entropy_weight"),
        (["--game=kuhn_poker", "--learner.replay.selector=lifo"], "selector must be 'fifo' or 'uniform'"),
        (["--game=kuhn_poker", "--kl_teacher_cost=0.1", "--teacher=/nowhere:x"], "cannot load its parameters"),
        (["--game=kuhn_poker", "--main_pfsp_weighting=cubic"], "unknown PFSP weighting 'cubic'"),
        (["--game=kuhn_poker", "--policy_loss=a2c"], "policy_loss must be 'vtrace', 'ppo' or 'neurd'"),
        (["--game=kuhn_poker", "--learner.exploiter_learning_rate=-0.1"], "exploiter_learning_rate must be > 0"),
    ],
)
def test_bad_flags_get_a_clear_message_and_non_zero_exit(tmp_path, args, message):
    result = league_cli(*args, f"--run_dir={tmp_path / 'run'}")
    assert result.returncode != 0
    assert message in result.stderr
    assert not (tmp_path / "run").exists()   # nothing written
    assert not os.path.exists(tmp_path / "run" / "league.db")


def test_run_dir_with_a_different_config_is_refused_untouched(tmp_path):
    cfg = config(tmp_path)
    prepare_run_dir(cfg)
    saved = open(os.path.join(cfg.run_dir, "config.json")).read()
    result = league_cli("--game=matrix_rps", "--races=1", "--learner_batch_size=64", f"--run_dir={cfg.run_dir}",
                        "--runner=inprocess")
    assert result.returncode != 0 and "different config" in result.stderr and "batch_size" in result.stderr
    assert open(os.path.join(cfg.run_dir, "config.json")).read() == saved


def test_unwritable_run_dir_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = league_cli("--game=matrix_rps", f"--run_dir={blocker}/run", "--runner=inprocess")
    assert result.returncode != 0 and "cannot write to the run directory" in result.stderr


@pytest.mark.replay
def test_corrupt_learner_checkpoint_stops_the_run_and_is_kept(tmp_path):
    cfg = config(tmp_path)
    prepare_run_dir(cfg)
    path = os.path.join(cfg.run_dir, "learners", "any_main_agent_0", "checkpoint.msgpack")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"\x00garbage")
    saved = RunConfig.from_dict(json.load(open(os.path.join(cfg.run_dir, "config.json"))))
    # every setting of the saved replay run, but those the replay path never reads (refused)
    flags = [f"--{path}={value}" for path, value in fields(saved)
             if value is not None and not any(path.startswith(key) for key in DEVICE_ONLY)]
    result = league_cli(*flags, "--minutes=0.1", timeout=300)
    assert result.returncode != 0
    assert "checkpoint" in result.stderr and path in result.stderr
    assert open(path, "rb").read() == b"\x00garbage"


def test_game_defaults_apply_to_flags_not_given():
    """`--game=leduc_poker` gets the measured Leduc values (actors.games.registry.LEDUC_DEFAULTS);
    a flag given on the command line wins over them."""
    code = ("import sys, json; from experiments import league; league.define_flags(); "
            "league.FLAGS(sys.argv); "
            "print(json.dumps(league.config_from_flags().to_dict()))")
    run = lambda *a: json.loads(subprocess.run([sys.executable, "-c", code, *a], capture_output=True,  # noqa: E731
                                               text=True, timeout=120, check=True).stdout.splitlines()[-1])
    leduc = run("--game=leduc_poker")["learner"]
    assert leduc["learning_rate"] == LEDUC_DEFAULTS["learner.learning_rate"] != RunConfig().learner.learning_rate
    assert leduc["batch_size"] == LEDUC_DEFAULTS["learner.batch_size"]
    assert leduc["loss"]["entropy_weight"] == 0.1 != RunConfig().learner.loss.entropy_weight
    assert leduc["exploiter_learning_rate"] == LEDUC_DEFAULTS["learner.exploiter_learning_rate"]
    assert run("--game=leduc_poker", "--learning_rate=0.0005")["learner"]["learning_rate"] == 0.0005
    assert run("--game=leduc_poker", "--learner.learning_rate=0.0007")["learner"]["learning_rate"] == 0.0007
    assert run("--game=matrix_rps")["learner"]["learning_rate"] == RunConfig().learner.learning_rate
    # Settings whose default is None parse as their annotation's type (`float | None`), not as text.
    exploiters = run("--game=leduc_poker", "--learner.exploiter_learning_rate=0.004",
                     "--learner.loss.exploiter_entropy_weight=0.02")["learner"]
    assert (exploiters["exploiter_learning_rate"], exploiters["loss"]["exploiter_entropy_weight"]) == (0.004, 0.02)


def test_a_whole_number_for_a_float_setting_is_a_float_and_learns():
    """JSON reads `vtrace_lambda=0` (a benchmark's --arm) as the int 0; rlax's V-trace refuses
    an int lambda inside the jitted update. The config makes it 0.0; int and str settings keep
    their types."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from learners.losses import total_loss

    config = RunConfig.make(**{"game": "kuhn_poker", "learner.loss.vtrace_lambda": 0,
                               "learner.exploiter_learning_rate": 1, "learner.batch_size": 8,
                               "learner.loss.policy_loss": "vtrace"})
    assert type(config.learner.loss.vtrace_lambda) is float and config.learner.loss.vtrace_lambda == 0.0
    assert type(config.learner.exploiter_learning_rate) is float      # `float | None`
    assert type(config.learner.batch_size) is int
    assert RunConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    # The loss runs with it (on the old code: chex's "input 5 has type int64 but expected float").
    logits = {"action": jnp.asarray(np.random.default_rng(0).normal(size=(3, 2, 2)), jnp.float32)}
    actions = {"action": jnp.zeros((3, 2), jnp.int32)}
    behaviour = {"action": jax.nn.log_softmax(logits["action"])[..., 0]}
    zeros = jnp.zeros((3, 2))   # values and rewards; every discount 1
    loss, _ = total_loss(config.learner.loss, logits, zeros, zeros[0], actions, behaviour, zeros, zeros + 1.0)
    assert np.isfinite(float(loss))


def test_every_sub_config_field_has_a_flag_and_config_json_round_trips(tmp_path):
    """One flag per leaf of the nested config, named by its path (every LossConfig,
    ReplayConfig, MatchmakingConfig and SnapshotConfig field included), with the help its
    field carries; a config set through flags survives config.json and a resume."""
    from league.players import MatchmakingConfig, SnapshotConfig
    from learners.config import ReplayConfig
    from learners.losses import LossConfig

    paths = {path for path, _ in fields()}
    for prefix, cls in (("learner.loss", LossConfig), ("learner.replay", ReplayConfig),
                        ("league.matchmaking", MatchmakingConfig), ("league.snapshots", SnapshotConfig)):
        for f in dataclasses.fields(cls):
            assert f"{prefix}.{f.name}" in paths or f"{prefix}.{f.name}" == "learner.replay.table"
    code = ("import sys, json; from experiments import league; league.define_flags(); "
            "league.FLAGS(sys.argv); print(json.dumps(league.config_from_flags().to_dict())); "
            "print(league.FLAGS['learner.replay.samples_per_insert'].help)")
    args = ["--game=kuhn_poker", "--learner.loss.td_lambda=0.5", "--learner.replay.selector=fifo",
            "--league.matchmaking.main_pfsp_weighting=hard", "--league.snapshots.exploiter_win_rate=0.6",
            "--entropy_cost=0.3", "--noleague.initial_snapshots", f"--run_dir={tmp_path / 'run'}"]
    lines = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                           timeout=120, check=True).stdout.splitlines()
    assert lines[-1] == "target times each unroll is sampled from the replay table (AlphaStar: 2)"
    config = RunConfig.from_dict(json.loads(lines[-2]))
    assert (config.learner.loss.td_lambda, config.learner.replay.selector) == (0.5, "fifo")
    assert config.league.matchmaking.main_pfsp_weighting == "hard"
    assert config.league.snapshots.exploiter_win_rate == 0.6 and config.league.initial_snapshots is False
    assert config.learner.loss.entropy_weight == 0.3 and config.learner.learning_rate == 1e-3  # Kuhn's default
    assert prepare_run_dir(config) is False and prepare_run_dir(config) is True
    saved = RunConfig.from_dict(json.load(open(tmp_path / "run" / "config.json")))
    assert saved == config
    with pytest.raises(ValueError, match="learner.loss.td_lambda: saved 0.5, now 0.8"):
        prepare_run_dir(dataclasses.replace(config, learner=dataclasses.replace(
            config.learner, loss=dataclasses.replace(config.learner.loss, td_lambda=0.8))))


def test_a_flat_config_json_of_an_earlier_version_still_resumes(tmp_path):
    flat = {"game": "kuhn_poker", "races": 1, "runner": "inprocess", "run_dir": str(tmp_path),
            "learner_batch_size": 8, "hidden_size": 16, "entropy_cost": None, "batch_size": 4,
            "main_agent_snapshot_steps": 300, "evaluation_games": 8}
    (tmp_path / "config.json").write_text(json.dumps(flat))
    config = RunConfig.from_dict(flat)
    assert (config.learner.batch_size, config.network.hidden_size, config.actor.batch_size) == (8, 16, 4)
    assert config.league.snapshots.main_agent_snapshot_steps == 300 and config.evaluator.games == 8
    assert config.learner.loss.entropy_weight == 0.1 and config.learner.learning_rate == 1e-3  # Kuhn's
    assert config.network.core_size == 0 != RunConfig().network.core_size   # not given: Kuhn's default
    assert prepare_run_dir(config) is True


def test_a_damaged_league_db_is_refused_untouched_and_restored_from_its_backup(tmp_path):
    """Issue 31: league.db cut to half its size: the same command exits 2 with one paragraph
    naming the file and the restore command, writing nothing; the coordinator's online backup
    (`--backup_every_seconds`) restores it (`experiments.restore_history`), and the league
    resumes from it."""
    run_dir = tmp_path / "run"
    args = ["--game=kuhn_poker", "--runner=inprocess", f"--run_dir={run_dir}", "--dashboard_port=-1",
            "--backup_every_seconds=3", "--progress_every_seconds=2"]
    # stops once every learner has learnt (games recorded, backed up every 3 s), not by the clock:
    # with an empty compilation cache a quarter of a minute went to compiling
    result = league_cli(*args, "--learner_steps=100000", "--minutes=4", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    db, backup = run_dir / "league.db", run_dir / "league.db.backup"
    assert backup.exists()
    backed_up = LeagueHistory(str(backup), readonly=True).game_count()
    assert backed_up > 0
    with open(db, "r+b") as f:
        f.truncate(os.path.getsize(db) // 2)
    damaged = db.read_bytes()
    result = league_cli(*args, "--minutes=0.2", timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"the league history {db} is damaged" in result.stderr, result.stderr
    assert f"python -m experiments.restore_history --run_dir={run_dir}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and db.read_bytes() == damaged

    restored = subprocess.run([sys.executable, "-m", "experiments.restore_history", f"--run_dir={run_dir}"],
                              capture_output=True, text=True, timeout=120)
    assert restored.returncode == 0, restored.stderr
    assert "restored" in restored.stdout and list(run_dir.glob("league.db.damaged-*"))
    assert LeagueHistory(str(db), readonly=True).game_count() == backed_up
    assert not list(run_dir.glob("league.db.backup*-*"))   # a plain file: no -wal/-shm, no .partial
    # frozen players made after the backup leave params/: their ids are made again on resume
    known = {p["player_id"] for p in LeagueHistory(str(db), readonly=True).players()}
    assert {f.stem for f in (run_dir / "params").glob("*.npz") if "@" not in f.stem} <= known
    result = league_cli(*args, "--minutes=0.2", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "resuming" in result.stdout
    assert LeagueHistory(str(db), readonly=True).game_count() > backed_up


def test_the_compilation_cache_is_pruned_to_its_bound_least_recently_used_first(tmp_path):
    from experiments.build import prune_cache

    for i in range(10):   # ten 1 kB entries, entry 0 the least recently used
        path = tmp_path / f"entry{i}"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    prune_cache(str(tmp_path), max_bytes=10_000)   # at the bound: nothing goes
    assert len(list(tmp_path.iterdir())) == 10
    os.utime(tmp_path / "entry0", (2_000_000, 2_000_000))   # entry 0 read again: now the newest
    prune_cache(str(tmp_path), max_bytes=8_000)   # down to 3/4 of 8 kB: the four oldest go
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry0", "entry5", "entry6", "entry7", "entry8", "entry9"]
