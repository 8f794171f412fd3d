"""A full disk under a league (issue 28): on a small tmpfs of its own, filled to the last byte,
league.db, frozen players' parameters, learner checkpoints and TensorBoard fail cleanly, the
league goes on, nothing half-written is left or read back, and everything held is written once
space returns. Needs root (mount); CI runs as root, where LEAGUE_REQUIRE_ROOT=1 makes a skip a
failure."""

import errno
import os
import subprocess
import threading

import numpy as np
import pytest

from coordinator import history as history_module
from coordinator.coordinator import Coordinator, CoordinatorConfig
from coordinator.history import HistoryFull, LeagueHistory
from coordinator.param_store import ParamStore
from league.players import LeagueConfig, SnapshotConfig
from tests.conftest import skip_unless_root
from tests.test_coordinator import _MeteredLearner

# The system tier (docs/testing.md): leagues on a full disk of their own (root).
pytestmark = pytest.mark.system


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB tmpfs mounted at tmp_path/disk; unmounted afterwards."""
    skip_unless_root("a small filesystem of its own")
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)], check=True, capture_output=True)
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk) -> str:
    """Writes a filler file until the filesystem is full (to the last page); returns its path."""
    filler = os.path.join(disk, "filler")
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 4096):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC
    return filler


def free(disk) -> None:
    os.remove(os.path.join(disk, "filler"))


def counts(n: int, start: int = 0) -> list[dict]:
    return [{"home": "a", "away": f"b{start + i}", "wins": 1, "draws": 0, "losses": 0, "branch": "main_agent",
             "source": "test", "actor_id": "x", "length": 1, "home_race": "any", "away_race": "any"}
            for i in range(n)]


def test_league_db_holds_its_writes_while_the_disk_is_full_and_makes_them_in_order_after(small_disk, capsys,
                                                                                           monkeypatch):
    monkeypatch.setattr(history_module, "RETRY_SECONDS", 0.0, raising=False)
    history = LeagueHistory(str(small_disk / "league.db"))
    history.add_event("snapshot", "a", "a#0", 1, "before")
    history.save_league_state({"n": 1})
    fill(small_disk)
    made = 0
    while history.held() == 0:      # until SQLite has no room left in its file or WAL
        history.add_game_counts(counts(500, made))
        made += 500
        assert made < 200_000, "the disk never filled"
    history.add_event("snapshot", "a", "a#1", 2, "while full")
    assert "cannot be written now" in capsys.readouterr().out
    with pytest.raises(HistoryFull):
        history.save_league_state({"n": 2})   # never held: it counts what came before it
    assert [e["reason"] for e in history.events()] == ["before"]
    assert history.load_league_state() == {"n": 1}

    free(small_disk)
    history.add_event("snapshot", "a", "a#2", 3, "after")
    assert history.held() == 0 and "written again" in capsys.readouterr().out
    assert [e["reason"] for e in history.events()] == ["before", "while full", "after"]
    assert len(history.game_counts()) == made and sorted(r["away"] for r in history.game_counts()) == \
        sorted(f"b{i}" for i in range(made))
    history.save_league_state({"n": 3})
    history.close()
    assert LeagueHistory(str(small_disk / "league.db"), readonly=True).load_league_state() == {"n": 3}


def test_frozen_parameters_are_held_in_memory_on_a_full_disk_and_written_after(small_disk, capsys):
    store = ParamStore(str(small_disk))
    params = {"layer": {"w": np.arange(300_000, dtype=np.float32)}}   # 1.2 MB: more than is left
    fill(small_disk)
    assert store.save("p#0", params, version=7)
    assert "p#0" in store and store.unwritten() == ["p#0"]
    version, loaded = store.load("p#0")
    assert version == 7 and np.array_equal(loaded["layer"]["w"], params["layer"]["w"])
    assert os.listdir(store.directory) == []          # no half-written or temporary file
    assert "held in memory" in capsys.readouterr().out
    assert not store.save("p#0", params, version=8)   # written once, even while held

    free(small_disk)
    assert store.write_held() == 0 and store.unwritten() == []
    version, loaded = ParamStore(str(small_disk)).load("p#0")   # read back from disk
    assert version == 7 and np.array_equal(loaded["layer"]["w"], params["layer"]["w"])


def test_a_learner_checkpoint_that_does_not_fit_leaves_the_last_two_as_they_were(small_disk):
    from learners import checkpoint

    file = os.path.join(small_disk, "learner", checkpoint.FILENAME)
    big = {"w": np.arange(200_000, dtype=np.float32)}

    def save(version):
        checkpoint.save(file, checkpoint.Checkpoint(version, 10 * version, 0, {"w": big["w"] + version}, {}))

    save(1)
    save(2)
    fill(small_disk)
    with pytest.raises(OSError) as raised:
        save(3)
    assert raised.value.errno == errno.ENOSPC
    assert checkpoint.read_payload(file)["version"] == 2
    assert checkpoint.read_payload(checkpoint.previous(file))["version"] == 1
    assert sorted(os.listdir(os.path.dirname(file))) == sorted([checkpoint.FILENAME, checkpoint.PREVIOUS])


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")   # TensorBoard's writer dies
def test_a_coordinator_on_a_full_disk_goes_on_and_records_everything_once_there_is_space(small_disk, monkeypatch):
    """Games, snapshots (their parameters), events, learner metrics and TensorBoard while the
    disk is full: no call raises or hangs; after space returns and a checkpoint, a restarted
    coordinator has every game and player."""
    monkeypatch.setattr(history_module, "RETRY_SECONDS", 0.0, raising=False)
    run_dir = str(small_disk / "run")
    snapshots = SnapshotConfig(main_agent_snapshot_steps=100, exploiter_min_steps=100,
                               main_exploiter_timeout_steps=200, league_exploiter_timeout_steps=200)
    config = LeagueConfig(races=("terran",), snapshots=snapshots, initial_snapshots=False)
    never = CoordinatorConfig(meta_game_every_seconds=float("inf"), checkpoint_every_seconds=float("inf"))
    coordinator = Coordinator(config, run_dir, seed=3, config=never)
    learners = {a: _MeteredLearner() for a in coordinator.agent_ids()}
    for learner in learners.values():
        learner.strategy_params = np.arange(250_000, dtype=np.float32)   # 1 MB a snapshot
    coordinator.set_learners(learners)
    for agent in learners:
        coordinator.store_initial_params(agent, {"strategy": np.zeros(3)})
    main = "terran_main_agent_0"
    game = {"home": main, "away": "terran_main_exploiter_0", "outcome": "win"}
    coordinator.report_results([game] * 5)
    coordinator.record_learners()
    coordinator.checkpoint()
    fill(small_disk)

    errors = []

    def while_full():
        try:
            calls_while_full()
        except Exception as e:
            errors.append(e)

    def calls_while_full():
        for step in (150, 300):
            for learner in learners.values():
                learner.agent_steps = step
                learner.m["steps"] = step
            coordinator.poll()                      # snapshots: parameters held, events held
            coordinator.report_results([game] * 7)  # held
            for _ in range(3):
                coordinator.record_learners()       # league.db held; TensorBoard's writer dies
            coordinator.checkpoint()                # skipped: the state on disk stays

    worker = threading.Thread(target=while_full, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "a call on a full disk hung"
    assert not errors, errors
    players = dict(coordinator.league.players)
    snapshot_ids = [p for p, v in players.items() if v.parent]
    assert snapshot_ids and coordinator.params.unwritten()

    free(small_disk)
    coordinator.record_learners()
    coordinator.checkpoint()
    assert coordinator.history.held() == 0 and coordinator.params.unwritten() == []
    coordinator.close()
    resumed = Coordinator(config, run_dir, seed=3, config=never)
    assert resumed.history.game_count() == 5 + 2 * 7
    assert set(resumed.league.players) == set(players)
    for player in snapshot_ids:
        assert resumed.params.load(player)[0] >= 0


def test_a_learner_group_on_a_full_disk_says_so_in_one_line_and_keeps_its_checkpoints(small_disk, capsys):
    """The default SMAX league's 12 learners said a full disk in 12 lines at once (the 30-minute
    chaos run): now one line names each learner whose checkpoint was not written; the ones there
    stay readable, and the next checkpoint once there is space is written."""
    from learners import checkpoint
    from learners.learner import Learner, LearnerConfig, save_checkpoints
    from tests.test_learner import tiny_learner_setup

    T, B = 3, 4
    net, example, params = tiny_learner_setup(T, B)
    group = {agent: Learner(net, params, LearnerConfig(batch_size=B, unroll_length=T), example,
                            checkpoint_dir=os.path.join(small_disk, agent)) for agent in ("a_0", "b_0", "c_0")}
    assert all(save_checkpoints(group).values())
    filler = fill(small_disk)
    capsys.readouterr()
    assert save_checkpoints(group) == {"a_0": None, "b_0": None, "c_0": None}
    lines = [line for line in capsys.readouterr().out.splitlines() if "not written" in line]
    assert lines == ["warning: learner checkpoint not written (No space left on device) for a_0, b_0, c_0: "
                     "what is there stays; tried again at the next checkpoint"], lines
    for agent in group:
        assert checkpoint.read_payload(os.path.join(small_disk, agent, checkpoint.FILENAME))["version"] == 0
    os.remove(filler)
    assert all(save_checkpoints(group).values())
