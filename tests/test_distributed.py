"""Many hosts (learners/distributed.py, experiments/distributed_league.py): two JAX processes on
this machine (CPU backend, gloo collectives, a coordinator on a free local port) run one
population program together, the agent axis sharded over both processes' devices.

- A population chunk over the two processes equals the same agents' chunk in one process
  (same keys): 3 agents padded to 4 over 2 devices, so process 1 computes agent 2 (and a pad);
  a follower that built another program would give agent 2 other parameters.
- A 2-process Kuhn league runs to its end (--learner_steps) and records its games in
  league.db; process 1 says how many population chunks it ran (> 0) and exits when the league
  stops.
"""

import os
import re
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launch(args_of, timeout: float) -> list[tuple[int, str]]:
    """Runs process 0 and 1 (`args_of(process_id)`: the command) side by side; their (exit
    status, output) once both ended (killed after `timeout` seconds)."""
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    procs = [subprocess.Popen(args_of(i), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, cwd=ROOT) for i in (0, 1)]
    deadline, out = time.monotonic() + timeout, []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            text += "\n[killed: timeout]"
        out.append((p.returncode, text))
    return out


# -- a population chunk over two processes ----------------------------------------------------


def kuhn_population_learners():
    """The agents of tests/test_population.py (3, with different rates, exploration, entropy)."""
    from actors.actor import example_unroll
    from learners.device import DeviceLearner
    from tests.test_population import K, T, agent_configs, kuhn_setup

    config, game, network, rollout, params = kuhn_setup()
    learners = [DeviceLearner(network, params[i], c, example_unroll(game.spec, network, T), rollout,
                              updates_per_chunk=K, seed=11 + i)
                for i, c in enumerate(agent_configs(config))]
    return learners, params


def kuhn_program():
    """The recipe's function: the follower's copy of the population's program."""
    from learners.population import Population

    return Population(kuhn_population_learners()[0]).program


def chunk_worker(process_id: int, port: int) -> None:
    import jax
    import numpy as np

    from experiments import build
    from learners import distributed
    from learners.population import Population
    from tests.test_population import K, opponents_of

    distributed.initialize(f"localhost:{port}", 2, process_id, timeout_s=60)
    build.enable_compilation_cache()   # the league's persistent cache: a second run loads
    assert jax.device_count() == 2 and jax.local_device_count() == 1
    if process_id:
        print(f"followed {distributed.follow()} chunks", flush=True)
        distributed.shutdown()
        return
    try:
        spread, params = kuhn_population_learners()
        alone, _ = kuhn_population_learners()
        population = Population(spread, recipe=(f"{__name__}:kuhn_program",))
        local = Population(alone)
        for chunk in range(2):
            got = population.play_and_learn([opponents_of(params, i) for i in range(3)])
            expected = local.play_and_learn([opponents_of(params, i) for i in range(3)])
            for i in range(3):
                for name in ("wins", "draws", "losses"):
                    np.testing.assert_array_equal(getattr(got[i], name), getattr(expected[i], name))
                a_version, a_params = alone[i].params()
                b_version, b_params = spread[i].params()
                assert a_version == b_version == K * (chunk + 1)
                for x, y in zip(jax.tree_util.tree_leaves(a_params), jax.tree_util.tree_leaves(b_params)):
                    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-6)
                # the league's copy stays on this process's device
                leaf = jax.tree_util.tree_leaves(spread[i].current_params())[0]
                assert leaf.is_fully_addressable and len(leaf.sharding.device_set) == 1
        assert distributed.chunks_run() == 2
        print("same updates", flush=True)
    finally:
        distributed.stop()
        distributed.shutdown()


@pytest.mark.system
def test_a_population_chunk_over_two_processes_is_its_chunk_in_one():
    port = free_port()
    code = "import sys; from tests.test_distributed import chunk_worker; chunk_worker(int(sys.argv[1]), int(sys.argv[2]))"
    (rc0, out0), (rc1, out1) = launch(lambda i: [sys.executable, "-c", code, str(i), str(port)], timeout=240)
    assert rc0 == 0 and "same updates" in out0, out0[-3000:] + "\n---- process 1:\n" + out1[-2000:]
    assert rc1 == 0 and "followed 2 chunks" in out1, out1[-3000:]


# -- a league over two processes --------------------------------------------------------------


def _wired() -> bool:
    """experiments/league.py starts --distributed.* (the wiring of experiments/distributed_league.py)."""
    with open(os.path.join(ROOT, "experiments", "league.py")) as f:
        return "distributed_league" in f.read()


@pytest.mark.system
@pytest.mark.skipif(not _wired(), reason="experiments/league.py does not start --distributed.* yet")
def test_a_two_process_kuhn_league_runs_to_its_end_and_records_its_games(tmp_path):
    from coordinator.history import LeagueHistory

    run_dir, port = str(tmp_path / "run"), free_port()
    args = ["--game=kuhn_poker", "--runner=inprocess", f"--run_dir={run_dir}", "--dashboard_port=-1",
            "--device.population=true", "--learner_steps=6000", "--progress_every_seconds=5",
            f"--distributed.coordinator_address=localhost:{port}", "--distributed.num_processes=2",
            "--distributed.timeout_seconds=60"]
    started = time.monotonic()
    (rc0, out0), (rc1, out1) = launch(
        lambda i: [sys.executable, "-m", "experiments.league", *args, f"--distributed.process_id={i}"], timeout=240)
    both = out0[-4000:] + "\n---- process 1:\n" + out1[-2000:]
    assert rc0 == 0 and "finishing: --learner_steps=6000 reached by every learner" in out0, both
    assert "distributed: process 0 of 2, 2 devices in all" in out0, both
    assert rc1 == 0, both
    chunks = re.search(r"distributed: process 1 ran (\d+) population chunks; the leader stopped", out1)
    assert chunks and int(chunks.group(1)) >= 2, both
    history = LeagueHistory(os.path.join(run_dir, "league.db"), readonly=True)
    assert history.game_count() > 0, both
    # the population chunks' games reached league.db (counted rows the learner group reported)
    device_games = sum(r["wins"] + r["draws"] + r["losses"] for r in history.game_counts()
                       if r["source"] == "device")
    assert device_games > 0, both
    print(f"2-process league: {time.monotonic() - started:.0f} s, process 1 ran {chunks.group(1)} chunks, "
          f"{history.game_count()} games recorded ({device_games} by the learners)")
