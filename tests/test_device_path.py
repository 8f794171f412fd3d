"""The device path (Podracer's Anakin): learners that play their own games in the jitted program
of their update (actors/rollout.py, learners/device.py, experiments/nodes/device_learners.py:DeviceLearnerGroup).

Each test is checked against something the device path does not compute itself: the batch game's
own `step` driven from Python, the payoff's per-game update over every order of the games, the
command line's exit status and the run directory."""

import base64
import functools
import itertools
import os
import re
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from actors import rewards
from actors.games import make_batch_game
from actors.rollout import DeviceRollout, Opponents
from agents import act
from coordinator.coordinator import Coordinator
from coordinator.history import LeagueHistory
from experiments.config import ConfigError, RunConfig
from experiments.program import build_program, experience_path
from league.payoff import Payoff
from league.players import LeagueConfig

# The system tier (docs/testing.md): whole leagues on the device path, on Ray and in one process.
pytestmark = pytest.mark.system

B, M, T = 8, 2, 6


def kuhn_setup():
    from experiments import build

    config = RunConfig.make(game="kuhn_poker", runner="inprocess", hidden_size=16, core_size=16)
    game = make_batch_game("kuhn_poker", B)
    network = build.make_network(config, game.spec)
    p0 = build.initial_params(network, game.spec, 0, 0)
    p1 = build.initial_params(network, game.spec, 1, 0)
    return game, network, p0, p1


def python_games(game, network, p0, opponent_network, slot_params, k_start, k_unroll):
    """The rollout's games stepped by JaxPokerGame.step from Python (the replay path's actor
    plays through it), side 1 running `opponent_network` with slot m's parameters on its B / M
    games: (results per slot, as the actor counts them; rewards [T, B]; first [T, B])."""
    reset_key, step_key = jax.random.split(k_start)
    keys = jax.random.split(reset_key, B)
    game.state, obs = game._reset(keys)
    step_keys = [step_key, *jax.random.split(k_unroll, T - 1)]
    state0 = state1 = network.initial_state(B)
    first = jnp.ones(B, bool)
    lengths, scores = np.zeros(B, int), np.zeros(B)
    expected = {k: np.zeros(M) for k in ("wins", "draws", "losses", "score", "length")}
    slot = np.arange(B) // (B // M)
    rewards_seen, firsts = [], []
    for k in step_keys:
        k_play, _ = jax.random.split(k)               # DeviceRollout.step_games: (play, z)
        k0, k1 = jax.random.split(k_play)             # actors.rollout.play_step: (side 0, side 1)
        a0, state0 = act(network, p0, k0, obs[0], state0, first)
        slot_keys = jax.random.split(k1, M)
        halves = []
        for m, params in enumerate(slot_params):
            part = slice(m * (B // M), (m + 1) * (B // M))
            half = jax.tree_util.tree_map(lambda x, part=part: x[part], (obs[1], state1, first))
            halves.append(act(opponent_network, params, slot_keys[m], *half))
        a1 = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *[h[0] for h in halves])
        state1 = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *[h[1] for h in halves])
        t = game.step(({h: np.asarray(v) for h, v in a0.game.items()},
                       {h: np.asarray(v) for h, v in a1.game.items()}))
        rewards_seen.append(np.asarray(t.rewards)[:, 0])
        firsts.append(np.asarray(first))
        lengths += 1
        scores += np.asarray(t.rewards)[:, 0]
        for b in np.flatnonzero(np.asarray(t.done)):
            outcome = int(np.asarray(t.outcome)[b])
            name = {1: "wins", 0: "draws", -1: "losses"}[outcome]
            expected[name][slot[b]] += 1
            expected["score"][slot[b]] += scores[b]
            expected["length"][slot[b]] += lengths[b]
            lengths[b], scores[b] = 0, 0.0
        obs, first = t.observations, jnp.asarray(t.done)
    return expected, np.stack(rewards_seen), np.stack(firsts)


def play_both_ways(game, network, p0, rollout, opponents, opponent_network, slot_params):
    """The rollout's first chunk and the same games from Python, compared result by result."""
    key = jax.random.PRNGKey(3)
    k_start, k_unroll = jax.random.split(key)
    carry, first_results = jax.jit(rollout.start)(p0, 0, opponents, None, k_start, None)
    carry, unroll, results = jax.jit(rollout.unroll)(p0, 0, opponents, None, carry, k_unroll)
    total = jax.device_get(first_results + results)
    expected, rewards_seen, firsts = python_games(game, network, p0, opponent_network, slot_params,
                                                  k_start, k_unroll)
    for name, values in expected.items():
        np.testing.assert_allclose(getattr(total, name), values, err_msg=name)
    assert int(np.sum(expected["wins"] + expected["draws"] + expected["losses"])) > 0
    np.testing.assert_allclose(np.asarray(unroll.steps.reward), rewards_seen)  # chips
    np.testing.assert_array_equal(np.asarray(unroll.steps.first), firsts)
    assert unroll.steps.reward.shape == (T, B)


def stack(*params):
    return jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *params)


def test_the_rollout_plays_the_games_the_batch_game_plays():
    """Fixed parameters and keys: the device rollout's steps and per-slot results equal a Python
    loop over the batch game's own `step` (the replay path's actor plays through it) with the
    same actions, counting results the way the actor reports them."""
    game, network, p0, p1 = kuhn_setup()
    rollout = DeviceRollout(network, game.fns, B, M, T, rewards.device_reward("game", game.spec))
    opponents = Opponents(stack(p1, p0), jnp.array([False, True]))  # slot 1: self-play
    play_both_ways(game, network, p0, rollout, opponents, network, (p1, p0))


def test_opponents_of_another_width_play_with_their_own_network():
    """`opponent_network` (a wider learner against a league's players in
    `benchmarks.best_response_bench`): side 1 runs that network with the bank's parameters,
    game for game as the Python loop does; the learner's own network cannot read them."""
    from experiments import build

    game, network, p0, _ = kuhn_setup()
    theirs = build.make_network(RunConfig.make(game="kuhn_poker", hidden_size=32, core_size=16), game.spec)
    q1, q2 = (build.initial_params(theirs, game.spec, 1, seed) for seed in (1, 2))
    rollout = DeviceRollout(network, game.fns, B, M, T, rewards.device_reward("game", game.spec),
                            opponent_network=theirs)
    play_both_ways(game, network, p0, rollout, Opponents(stack(q1, q2), jnp.array([False, False])),
                   theirs, (q1, q2))
    assert rollout.key != DeviceRollout(network, game.fns, B, M, T, rewards.device_reward("game", game.spec)).key


def test_an_exploring_learner_records_its_behaviour_policys_log_probabilities():
    """With `exploration` the rollout's side 0 samples from mu = (1 - eps) pi + eps uniform(legal)
    and records log mu (what V-trace divides by), not log pi; without it, log pi."""
    from agents.networks import exploring_log_probs
    from tests.test_networks import tilted

    game, network, p0, p1 = kuhn_setup()
    p0 = tilted(p0)   # pi far from uniform, so mu differs from it
    rollout = DeviceRollout(network, game.fns, B, M, T, rewards.device_reward("game", game.spec))
    opponents = Opponents(stack(p1, p1), jnp.array([False, False]))
    k_start, k_unroll = jax.random.split(jax.random.PRNGKey(5))
    for eps in (0.0, 0.5):
        carry, _ = jax.jit(functools.partial(rollout.start, exploration=eps))(p0, 0, opponents, None, k_start)
        _, unroll, _ = jax.jit(functools.partial(rollout.unroll, exploration=eps))(
            p0, 0, opponents, None, carry, k_unroll)
        steps = unroll.steps
        out, _ = network.unroll(p0, steps.observation, steps.first, unroll.core_state, steps.opponent_observation)
        mu = exploring_log_probs(out.logits, eps)
        for h, taken in steps.action.items():
            expected = np.take_along_axis(np.asarray(mu[h]), np.asarray(taken)[..., None], -1)[..., 0]
            np.testing.assert_allclose(np.asarray(steps.behaviour_log_prob[h]), expected, rtol=1e-4, atol=1e-5)
        if eps:
            pi = np.take_along_axis(np.asarray(jax.nn.log_softmax(out.logits[h])),
                                    np.asarray(taken)[..., None], -1)[..., 0]
            assert np.max(np.abs(pi - expected)) > 0.05   # the test tells mu from pi


def test_exploration_on_the_replay_path_is_named_as_not_used():
    """Leduc's defaults explore; a Leduc run on the replay path (whose actors play the policy
    itself) says so on its experience line instead of failing."""
    config = RunConfig.make(game="leduc_poker", experience="replay")
    assert config.learner.exploiter_exploration > 0
    assert experience_path(config) == ("replay", "--experience=replay; learner.exploration and "
                                       "learner.exploiter_exploration act on the device path only: "
                                       "not used here (the actors play the policy itself)")
    assert experience_path(RunConfig.make(game="kuhn_poker", experience="replay")) == ("replay", "--experience=replay")


def test_counted_games_update_the_payoff_as_the_mean_over_their_orders():
    """`Payoff.update_counts` of a batch equals the mean, over every order of its games, of
    recording them one by one (`Payoff.update`); by hand: d = 0.5, a win and a loss from
    nothing give 0.75 wins each way."""
    counts = {"win": 2, "draw": 1, "loss": 1}
    games = [o for o, n in counts.items() for _ in range(n)]
    orders = set(itertools.permutations(games))
    totals = {name: np.zeros((2, 2)) for name in ("wins", "draws", "scores")}
    for order in orders:
        p = Payoff(decay=0.9)
        p.add_player("a"), p.add_player("b")
        p.update("a", "b", "loss")  # some history to decay
        for outcome in order:
            p.update("a", "b", outcome, {"win": 2.0, "draw": 0.0, "loss": -1.0}[outcome])
        for name in totals:
            totals[name] += getattr(p, f"_{name}")[:2, :2] / len(orders)
    q = Payoff(decay=0.9)
    q.add_player("a"), q.add_player("b")
    q.update("a", "b", "loss")
    q.update_counts("a", "b", 2, 1, 1, score=2 * 2.0 - 1.0)
    for name, expected in totals.items():
        np.testing.assert_allclose(getattr(q, f"_{name}")[:2, :2], expected, rtol=1e-5, err_msg=name)

    hand = Payoff(decay=0.5)
    hand.add_player("a"), hand.add_player("b")
    hand.update_counts("a", "b", 1, 0, 1)
    assert hand._wins[0, 1] == pytest.approx(0.75) and hand._wins[1, 0] == pytest.approx(0.75)


def test_counted_results_reach_league_db_and_the_payoff(tmp_path):
    coordinator = Coordinator(LeagueConfig(races=("any",)), str(tmp_path / "run"))
    main = coordinator.agent_ids()[0]
    dist = coordinator.match_distribution(main)
    assert dist["opponents"] and abs(sum(dist["probabilities"]) - 1) < 1e-9
    opponent, branch = next((o, b) for o, b in zip(dist["opponents"], dist["branches"]) if o != main)
    before = coordinator.league.payoff.count_matrices([main, opponent])
    rows = [{"home": main, "away": opponent, "wins": 5, "draws": 2, "losses": 3, "score": 4.0,
             "length": 30, "branch": branch}]
    assert coordinator.report_counts(rows) == 10
    history = LeagueHistory(coordinator.history.path, readonly=True)
    assert history.game_count() == 10
    (row,) = history.game_counts()
    assert (row["wins"], row["draws"], row["losses"], row["score"]) == (5, 2, 3, 4.0)
    reference = Payoff()
    for pid in (main, opponent):
        reference.add_player(pid)
    reference.update_counts(main, opponent, 5, 2, 3, 4.0)
    after = coordinator.league.payoff.count_matrices([main, opponent])
    np.testing.assert_allclose(after[0], reference.count_matrices([main, opponent])[0], rtol=1e-6)
    assert not np.allclose(after[0], before[0])
    with pytest.raises(ValueError, match="nothing of this batch was recorded"):
        coordinator.report_counts([{**rows[0], "wins": -1}])
    assert LeagueHistory(coordinator.history.path, readonly=True).game_count() == 10

    # A restarted coordinator replays the rows after its last league checkpoint.
    coordinator.report_counts(rows)
    coordinator.history.close()
    again = Coordinator(LeagueConfig(races=("any",)), str(tmp_path / "run"))
    np.testing.assert_allclose(again.league.payoff.count_matrices([main, opponent])[0],
                               coordinator.league.payoff.count_matrices([main, opponent])[0], rtol=1e-6)


def test_auto_picks_the_device_path_where_the_game_allows_and_says_why(tmp_path):
    kuhn = RunConfig.make(game="kuhn_poker", runner="inprocess")
    assert experience_path(kuhn)[0] == "device"
    assert "DeviceLearnerGroup" in str(build_program(kuhn)) and "actors" not in str(build_program(kuhn))
    assert experience_path(RunConfig.make(game="kuhn_poker", experience="replay"))[0] == "replay"
    smax = RunConfig.make(game="smax_races", init="none")  # OpenAI Five's reward, z: on the device
    assert experience_path(smax)[0] == "device"
    uneven = RunConfig.make(game="kuhn_poker", **{"device.opponent_slots": 3})
    path, why = experience_path(uneven)
    assert path == "replay" and "opponent_slots=3" in why
    plugin = tmp_path / "numpy_reward.py"
    plugin.write_text("import numpy as np\n\ndef get_reward(batch, contiguous):\n"
                      "    return np.asarray(batch['reward'])\n")
    path, why = experience_path(RunConfig.make(game="kuhn_poker", reward_plugin=str(plugin)))
    assert path == "replay" and "cannot be traced" in why
    with pytest.raises(ConfigError, match="--experience=device: .*opponent_slots"):
        experience_path(RunConfig.make(game="kuhn_poker", experience="device", **{"device.opponent_slots": 3}))


def league_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "experiments.league", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_a_reward_plugin_that_cannot_be_traced_is_refused_before_anything_is_written(tmp_path):
    plugin = tmp_path / "numpy_reward.py"
    plugin.write_text("import numpy as np\n\n"
                      "def get_reward(batch, contiguous):\n"
                      "    return np.asarray(batch['reward'], np.float32) * 2\n")
    run_dir = tmp_path / "run"
    result = league_cli("--game=kuhn_poker", "--runner=inprocess", "--experience=device",
                        f"--reward_plugin={plugin}", f"--run_dir={run_dir}")
    assert result.returncode == 2, result.stderr
    assert "cannot be traced by JAX" in result.stderr and "get_reward" in result.stderr
    assert "jax.numpy" in result.stderr and "--experience=replay" in result.stderr
    assert not run_dir.exists()

    traceable = tmp_path / "jax_reward.py"
    traceable.write_text("def get_reward(batch, contiguous):\n    return batch['reward'] * 2\n")
    config = RunConfig.make(game="kuhn_poker", experience="device", reward_plugin=str(traceable))
    assert experience_path(config)[0] == "device"


def test_a_killed_device_path_run_resumes(tmp_path):
    """kill -9 of a device-path league (in one process) whose learners are one population
    program (issue 55); the reruns resume: the players and games league.db had stay, learners
    continue from their checkpoints, which stay one per agent, so that one program per agent (a
    run directory from before the population program) resumes them and the population program
    resumes that one's."""
    from learners import checkpoint

    run_dir = str(tmp_path / "run")
    args = ["--game=kuhn_poker", "--runner=inprocess", f"--run_dir={run_dir}", "--dashboard_port=-1",
            "--checkpoint_every_seconds=3", "--progress_every_seconds=2"]
    process = subprocess.Popen([sys.executable, "-m", "experiments.league", *args, "--device.population=true"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    db = os.path.join(run_dir, "league.db")
    deadline = time.time() + 240
    checkpoints = os.path.join(run_dir, "learners", "any_main_agent_0", checkpoint.FILENAME)
    while time.time() < deadline:
        if os.path.exists(checkpoints) and LeagueHistory(db, readonly=True).game_count() > 20_000:
            break
        time.sleep(1.0)
    time.sleep(4.0)  # one more checkpoint interval
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert population_chunks(run_dir), process.stdout.read()[-3000:]   # it ran as one program
    for population in ("false", "true"):
        history = LeagueHistory(db, readonly=True)
        games, players = history.game_count(), {p["player_id"] for p in history.players()}
        version = checkpoint.read_params(run_dir, "any_main_agent_0")[0]
        assert games > 20_000 and version > 0

        result = league_cli(*args, f"--device.population={population}", "--minutes=0.2")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "resuming" in result.stdout
        history = LeagueHistory(db, readonly=True)
        assert history.game_count() > games
        assert players <= {p["player_id"] for p in history.players()}
        assert checkpoint.read_params(run_dir, "any_main_agent_0")[0] > version


def _damage_frozen_files(run_dir, seed):
    """4 KB of noise in the middle of every frozen player's parameter file (issue 31); returns
    the players damaged. Agents' initial parameters (`<agent>@initial`, for resets) are kept."""
    history = LeagueHistory(os.path.join(run_dir, "league.db"), readonly=True)
    damaged = []
    for player in history.players():
        path = os.path.join(run_dir, "params", player["player_id"] + ".npz")
        if player["role"] != "historical" or not os.path.exists(path):
            continue
        data = bytearray(open(path, "rb").read())
        start = max(0, len(data) // 2 - 2048)
        data[start:start + 4096] = np.random.default_rng(seed).integers(0, 256, len(data[start:start + 4096]),
                                                                       dtype=np.uint8).tobytes()
        open(path, "wb").write(bytes(data))
        damaged.append(player["player_id"])
    return damaged


def test_damaged_frozen_players_are_withdrawn_and_the_league_goes_on(tmp_path):
    """Issue 31: noise in frozen players' files (every one: matchmaking cannot avoid them) stops
    neither an in-process run nor a Ray run: each damaged player a node asks for is withdrawn
    (a line in the terminal, an event in league.db), no later games are played against it, the
    league goes on (games recorded, learners updating) and the run exits 0."""
    from learners import checkpoint

    run_dir = str(tmp_path / "run")
    db = os.path.join(run_dir, "league.db")
    args = ["--game=kuhn_poker", f"--run_dir={run_dir}", "--dashboard_port=-1", "--progress_every_seconds=2",
            "--checkpoint_every_seconds=3", "--meta_game_every_seconds=2"]
    result = league_cli(*args, "--runner=inprocess", "--minutes=0.2")
    assert result.returncode == 0, result.stdout + result.stderr
    for runner, seed in (("inprocess", 1), ("ray", 2)):
        before = {e["player_id"] for e in LeagueHistory(db, readonly=True).events() if e["kind"] == "withdrawn"}
        damaged = [p for p in _damage_frozen_files(run_dir, seed) if p not in before]
        assert damaged, "the run before stored no new frozen player"
        history = LeagueHistory(db, readonly=True)
        games, version = history.game_count(), checkpoint.read_params(run_dir, "any_main_agent_0")[0]
        # until every learner has updated past the most any had learnt (a Ray run under CI's load
        # can spend a fixed 0.3 minutes compiling: session 64's CI), at most 3 minutes
        learners = ("any_main_agent_0", "any_main_exploiter_0", "any_league_exploiter_0", "any_league_exploiter_1")
        learnt = max(checkpoint.read_payload(checkpoint.path(run_dir, learner))["steps"] for learner in learners)
        result = league_cli(*args, f"--runner={runner}", f"--learner_steps={learnt + 1}", "--minutes=3")
        out = result.stdout + result.stderr
        assert result.returncode == 0, out
        history = LeagueHistory(db, readonly=True)
        withdrawn = {e["player_id"]: e for e in history.events() if e["kind"] == "withdrawn"}
        asked = [p for p in damaged if p in withdrawn]
        assert asked, f"{runner}: no damaged player was withdrawn\n{out}"
        for player in asked:
            assert f"withdrawn: frozen player {player}" in result.stdout, out
            assert "corrupt" in withdrawn[player]["reason"]
        assert history.game_count() > games, out
        assert checkpoint.read_params(run_dir, "any_main_agent_0")[0] > version, out
        # no games against a withdrawn player after it was withdrawn (a chunk drawn before may end)
        for row in history.game_counts():
            for player in asked:
                if player in (row["home"], row["away"]):
                    assert row["time"] < withdrawn[player]["time"] + 5.0, (row, withdrawn[player])


def test_a_learner_whose_every_update_is_skipped_is_named(tmp_path):
    """Issue 31, "no silent stall": a learner restored from a checkpoint whose parameters are
    NaN (a good checksum: written so) skips every update; the run names it in the terminal
    and in league.db ("stalled"), says why, and the other learners go on."""
    from learners import checkpoint

    run_dir = str(tmp_path / "run")
    # The main exploiter never resets to its initial parameters after a copy (a reset would
    # heal its NaN before 20 skipped updates when its timeout comes early in the second run).
    args = ["--game=kuhn_poker", "--runner=inprocess", f"--run_dir={run_dir}", "--dashboard_port=-1",
            "--progress_every_seconds=2", "--checkpoint_every_seconds=3",
            "--league.snapshots.main_exploiter_reset_probability=0"]
    result = league_cli(*args, "--minutes=0.2")
    assert result.returncode == 0, result.stdout + result.stderr
    victim = "any_main_exploiter_0"
    file = checkpoint.path(run_dir, victim)
    payload = checkpoint.read_payload(file)
    nan_params = jax.tree_util.tree_map(lambda x: np.full_like(np.asarray(x), np.nan), payload["params"])
    checkpoint.save(file, checkpoint.Checkpoint(payload["version"], payload["steps"], payload["num_skipped"],
                                                nan_params, payload["opt_state"]))
    result = league_cli(*args, "--minutes=0.4")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert f"stalled: learner {victim} is not learning" in result.stdout, out
    assert "skipped as non-finite" in result.stdout, out
    events = [e for e in LeagueHistory(os.path.join(run_dir, "league.db"), readonly=True).events()
              if e["kind"] == "stalled"]
    assert [e["agent_id"] for e in events] == [victim], events
    assert checkpoint.read_params(run_dir, "any_main_agent_0")[0] > 0


NOISE = ("os.fork() was called", "Unable to initialize backend", "constructor arguments in the object store",
         "Submoduled environments", "generated new fontManager")


def test_importing_smax_prints_nothing():
    """Issue 31: jaxmarl's package imports printed "Submoduled environments not found" from
    every node and pulled in matplotlib; SMAX alone imports quietly."""
    smax = subprocess.run([sys.executable, "-c", "import sys, actors.games.smax_races; "
                           "assert 'matplotlib' not in sys.modules"], capture_output=True, text=True)
    assert smax.returncode == 0 and not smax.stdout and not [n for n in NOISE if n in smax.stderr], smax


@pytest.mark.replay
@pytest.mark.parametrize("runner", ["inprocess", "ray"])
def test_a_node_that_fails_stops_the_run_with_a_message(tmp_path, runner):
    """Issue 31, "no silent stall": an actor whose reward plug-in starts failing (the replay
    path) stops its node at once; the run stops with one message naming the actor and the
    error and how to resume, exit 1, checkpoints written (on Ray the thread used to die alone,
    its learner getting no more games for the rest of the run).

    And a quiet first screen: the Ray run's driver runs JAX before launching (a --teacher's
    parameters are loaded and checked), yet nothing of NOISE shows: no fork after JAX started
    (Ray starts first), no JAX platform probe, no Ray error line about restartable actors'
    arguments."""
    from agents.storage import params_to_npz_bytes
    from experiments import build
    from learners import checkpoint

    plugin = tmp_path / "breaks.py"
    plugin.write_text("import numpy as np\n\ncalls = [0]\n\n"
                      "def get_reward(batch, contiguous):\n"
                      "    calls[0] += 1\n"
                      "    if calls[0] > 10:\n"
                      "        raise RuntimeError('the reward server went away')\n"
                      "    return np.asarray(batch['reward'], np.float32)\n")
    run_dir = str(tmp_path / "run")
    teacher = []
    if runner == "ray":
        config = RunConfig.make(game="kuhn_poker")
        spec = make_batch_game("kuhn_poker", 1).spec
        file = tmp_path / "teacher.npz"
        file.write_bytes(params_to_npz_bytes(build.initial_params(build.make_network(config, spec), spec, 0, 0), 0))
        teacher = [f"--teacher={file}", "--kl_teacher_cost=0.1"]
    result = league_cli("--game=kuhn_poker", f"--runner={runner}", "--experience=replay", f"--run_dir={run_dir}",
                        "--dashboard_port=-1", "--evaluators=0", f"--reward_plugin={plugin}", "--minutes=3",
                        *teacher)
    out = result.stdout + result.stderr
    if runner == "ray":
        assert not [line for line in NOISE if line in out], out
    assert result.returncode == 1, out
    assert "the reward server went away" in result.stderr, out
    assert re.search(r"error: actors\S*: actor_any_\w+ failed: RewardPluginError", result.stderr), out
    assert "rerun the same command to resume" in result.stderr and "Traceback" not in result.stderr, out
    # Stopped by the failure, not by the 3 minutes asked for: read on the league's own clock
    # (its progress lines), since under CI's load starting Ray and the nodes alone can take
    # a minute or more of wall-clock.
    minutes = [float(m) for m in re.findall(r"\[\s*([\d.]+) min\]", out)]
    assert max(minutes, default=0.0) < 2.5, out   # (none: it stopped before the first line)
    assert checkpoint.read_params(run_dir, "any_main_agent_0") is not None


@pytest.mark.replay
def test_ctrl_c_stops_a_ray_league_quickly_with_every_checkpoint_and_no_reverb_warnings(tmp_path):
    """Issue 31: Ctrl-C of a Ray league (the replay path: actors writing to Reverb) stops it
    well within a generous bound (BENCHMARKS.md has the default league's figure: ~10 s), every
    learner checkpoint written, and the actors' writers stop cleanly: no "pending items is
    alarmingly high" warnings (each item written after the stop used to print one)."""
    from learners import checkpoint

    run_dir = str(tmp_path / "run")
    process = subprocess.Popen([sys.executable, "-m", "experiments.league", "--game=kuhn_poker", "--runner=ray",
                                "--experience=replay", f"--run_dir={run_dir}", "--dashboard_port=-1",
                                "--progress_every_seconds=2"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    db = os.path.join(run_dir, "league.db")
    deadline = time.time() + 300   # ~60 s alone; beside other leagues on 2 cores, up to ~190 s
    while time.time() < deadline:
        if os.path.exists(db) and LeagueHistory(db, readonly=True).game_count() > 5_000:
            break
        time.sleep(1.0)
    time.sleep(10.0)
    stopped = time.time()
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=120)
    seconds = time.time() - stopped
    assert process.returncode == 0, out
    assert seconds < 30.0, (seconds, out)
    assert "stopped in" in out and "alarmingly high" not in out, out
    agents = sorted(os.listdir(os.path.join(run_dir, "learners")))
    assert len(agents) == 4 and all(checkpoint.read_params(run_dir, a) is not None for a in agents)


def population_chunks(run_dir) -> dict[str, int]:
    """{agent: how many of its learner metrics rows carry `host_share`}: only an agent that plays
    in a population program (`DeviceLearnerGroup.metrics`) reports it."""
    import sqlite3

    with sqlite3.connect(f"file:{os.path.join(run_dir, 'league.db')}?mode=ro", uri=True) as db:
        return dict(db.execute("SELECT agent_id, count(*) FROM learner_metrics WHERE name = 'host_share' "
                               "GROUP BY agent_id").fetchall())


def test_the_population_program_runs_a_league_on_ray(tmp_path):
    """Issue 55 item 6: `--device.population=true` on Ray (the default runner): Kuhn's 4 learning
    agents play and learn as one population program inside the learner group's Ray actor; every
    agent reports the program's host share, learns, and their games reach league.db. It runs
    until every agent has learnt 3 chunks, not for a fixed time: in CI under load (session 48)
    its learners were still compiling at 0.5 minutes, with no chunk to report."""
    from learners import checkpoint

    run_dir = str(tmp_path / "run")
    steps = 3 * 32 * 16 * 32   # chunks x Kuhn's updates per chunk x the CPU batch x the unroll
    result = league_cli("--game=kuhn_poker", "--runner=ray", "--device.population=true", f"--learner_steps={steps}",
                        f"--run_dir={run_dir}", "--dashboard_port=-1", "--progress_every_seconds=5")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "one program for the agents that share a network" in result.stdout, out[-4000:]
    agents = sorted(os.listdir(os.path.join(run_dir, "learners")))
    assert len(agents) == 4 and sorted(population_chunks(run_dir)) == agents, (population_chunks(run_dir), out[-3000:])
    assert all(checkpoint.read_params(run_dir, a)[0] > 0 for a in agents), out[-3000:]
    assert LeagueHistory(os.path.join(run_dir, "league.db"), readonly=True).game_count() > 1000


def test_the_dashboard_counts_counted_games_like_games(tmp_path):
    """The dashboard's payoff counts and headline from `games` rows and `game_counts` rows
    (device path) together, against the sums read with SQL."""
    import sqlite3

    from dashboard.server import DashboardData

    history = LeagueHistory(str(tmp_path))
    for pid in ("a", "b"):
        history.add_player(pid, "main_agent", "any", None, 0, time.time())
    history.add_games([{"home": "a", "away": "b", "outcome": "win"},
                       {"home": "b", "away": "a", "outcome": "draw"}])
    history.add_game_counts([{"home": "a", "away": "b", "wins": 4, "draws": 2, "losses": 3},
                             {"home": "a", "away": "a", "wins": 1, "draws": 0, "losses": 2}])
    data = DashboardData(str(tmp_path))
    first = data.data()
    history.add_game_counts([{"home": "b", "away": "a", "wins": 7, "draws": 0, "losses": 0}])
    payload = data.data()  # read incrementally: only the new row
    with sqlite3.connect(tmp_path / "league.db") as db:
        (counted,), = db.execute("SELECT sum(wins + draws + losses) FROM game_counts").fetchall()
    assert first["headline"]["games"] == 2 + 9 + 3
    assert payload["headline"]["games"] == 2 + counted == 21
    ids = payload["players"]["id"]
    a, b = ids.index("a"), ids.index("b")
    encoded = payload["payoff"]["wins"]
    n = payload["payoff"]["n"]
    wins = np.frombuffer(base64.b64decode(encoded["b64"]), encoded["dtype"]).reshape(n, n)
    assert wins[a, b] == 1 + 4 and wins[b, a] == 3 + 7
    assert payload["payoff"]["self_losses"][a] == 2


def test_z_pseudo_rewards_on_the_device_equal_the_numpy_reference():
    """SMAX's `z.z_pseudo_rewards_jax` against the numpy reference `z_pseudo_rewards` of
    tests/test_z.py (edit distance of build orders, Hamming distance of attacked types) on random
    z and random played games, ties in first-attack steps and empty z included."""
    from actors.games.smax_races import z as zmod
    from tests.test_z import produced_order, z_pseudo_rewards

    rng = np.random.default_rng(1)
    zs, armies, firsts, want = [], [], [], []
    for _ in range(300):
        order = rng.permutation(6)[:rng.integers(0, 7)]
        attack_order = np.full(6, -1)
        attack_order[:len(order)] = order
        counts = np.zeros(6, int)
        counts[order] = 1
        z = (zmod.encode_z(rng.integers(-1, 3), attack_order, counts) if rng.random() < 0.9
             else np.zeros(zmod.Z_SIZE, np.float32))
        army = int(rng.integers(-1, 3))
        first = np.where(rng.random(6) < 0.5, rng.integers(0, 4, 6).astype(float), np.inf)
        zs.append(z), armies.append(army), firsts.append(first)
        want.append(z_pseudo_rewards(z, army, produced_order(first), np.isfinite(first)))
    got = jax.jit(jax.vmap(zmod.z_pseudo_rewards_jax))(
        jnp.asarray(np.stack(zs)), jnp.asarray(armies), jnp.asarray(np.stack(firsts), jnp.float32))
    np.testing.assert_allclose(np.asarray(got), np.stack(want), atol=1e-6)
    assert np.stack(want)[:, 0].min() < -0.5 and np.stack(want)[:, 1].min() < -0.5  # not all near 0


def test_openai_five_reward_on_the_device_equals_the_numpy_plugin():
    """The built-in openai_five reward traced (team spirit from the traced learner version)
    against the numpy plug-in told the same progress."""
    game = make_batch_game("smax_races", 1)
    example = rewards.example_batch(game.spec, steps=6)
    rng = np.random.default_rng(0)
    batch = {k: (rng.random(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v)
             for k, v in example.items()}
    device = rewards.device_reward("openai_five", game.spec, team_spirit=(0.3, 0.8, 100))
    traced = jax.jit(lambda b, progress: device(b, False, progress))
    for progress in (0, 37, 500):
        numpy_reward = rewards.load_reward_plugin("openai_five", team_spirit=(0.3, 0.8, 100))
        numpy_reward.set_progress(progress)
        want = numpy_reward(batch, False)
        got = traced({k: jnp.asarray(v) for k, v in batch.items()}, progress)
        np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, err_msg=str(progress))


TWO_DEVICES = """
import jax, jax.numpy as jnp, numpy as np
from tests.test_device_path import kuhn_setup, B, M, T
from actors import rewards
from actors.actor import example_unroll
from actors.rollout import DeviceRollout, Opponents
from experiments.config import RunConfig
from learners.device import DeviceLearner

assert len(jax.local_devices()) == 2
game, network, p0, p1 = kuhn_setup()
config = RunConfig.make(game="kuhn_poker", learner_batch_size=B, unroll_length=T).learner
out = []
for devices in (jax.local_devices()[:1], jax.local_devices()):
    rollout = DeviceRollout(network, game.fns, B, M, T, rewards.device_reward("game", game.spec),
                            devices=devices)
    learner = DeviceLearner(network, p0, config, example_unroll(game.spec, network, T), rollout,
                            updates_per_chunk=3, seed=5)
    bank = jax.tree_util.tree_map(lambda a, b: jnp.stack([jnp.asarray(a), jnp.asarray(b)]), p1, p0)
    results = learner.play_and_learn(Opponents(bank, jnp.array([False, True])))
    placed = jax.tree_util.tree_leaves(learner.current_params())[0].sharding.device_set
    out.append((learner.params()[1], results, len(placed)))
(a, ra, na), (b, rb, nb) = out
assert (na, nb) == (1, 2), (na, nb)
for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(x, y, rtol=2e-5, atol=2e-6)
assert not all(np.allclose(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(p0)))
for x, y in zip(ra, rb):
    np.testing.assert_allclose(x, y, rtol=1e-5)
print("same update")
"""


def test_two_virtual_devices_give_the_same_update_as_one():
    """The chunk with the games split over 2 virtual CPU devices (parameters replicated) ends
    with the parameters and results of the same chunk on one device."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", TWO_DEVICES], capture_output=True, text=True,
                            timeout=300, env=env, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert result.returncode == 0 and "same update" in result.stdout, result.stdout + result.stderr[-3000:]


def test_device_evaluation_matches_the_exact_payoff():
    """`evaluate_pairs` (one game per slot, pairs vmapped) on 4,096 Kuhn games per pair: the mean
    chips and win rate of each pair lie within 4 standard errors of OpenSpiel's exact values
    for the same two networks (`ExactEvaluator`), and every slot counts exactly one game."""
    from actors.games.poker.exact import ExactEvaluator
    from actors.rollout import evaluate_pairs

    _, network, p0, p1 = kuhn_setup()
    # A sharper second player: its parameters scaled, so that the pair is not near even.
    p2 = jax.tree_util.tree_map(lambda x: 4.0 * np.asarray(x), p1)
    players = {"a": p0, "b": p2}

    class Source:
        def latest_params(self, player_id, min_version=None):
            return 0, players[player_id]

    exact = ExactEvaluator("kuhn_poker", network, Source())
    games = 4096
    game = make_batch_game("kuhn_poker", games)
    rollout = DeviceRollout(network, game.fns, games, 1, 2, rewards.device_reward("game", game.spec))
    pairs = [("a", "b"), ("b", "a")]
    stack = lambda side: jax.tree_util.tree_map(  # noqa: E731
        lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *[players[p[side]] for p in pairs])
    results = jax.device_get(jax.jit(lambda a, b, k: evaluate_pairs(rollout, a, b, k))(
        stack(0), stack(1), jax.random.PRNGKey(11)))
    for i, (home, away) in enumerate(pairs):
        total = results.wins[i] + results.draws[i] + results.losses[i]
        assert total == games
        win_rate, chips = exact.payoffs(home, [away])[away]
        measured_rate = (results.wins[i] + 0.5 * results.draws[i]) / games
        assert abs(measured_rate - win_rate) < 4 * np.sqrt(0.25 / games), (home, measured_rate, win_rate)
        assert abs(results.score[i] / games - chips) < 4 * 1.5 / np.sqrt(games), (home, results.score[i] / games, chips)
    assert abs(exact.payoffs("a", ["b"])["b"][1]) > 0.05  # the pair is not even: the test can tell


@pytest.mark.parametrize("parts, threads, want", [(1, 2, [4]), (2, 2, [2, 2]), (0, 2, [2, 2]), (0, 1, [4]),
                                                   (3, 2, [2, 2])])
def test_population_parts_split_a_population_into_programs_run_side_by_side(tmp_path, parts, threads, want):
    """--device.population_parts: Kuhn's 4 learning agents (one population key) as `want`
    programs' agents (0: one part per thread; never a part of one agent), and one round gives
    every agent its chunk."""
    from experiments.nodes import DeviceLearnerGroup
    from experiments.program import agent_indices

    config = RunConfig.make(game="kuhn_poker", runner="inprocess", hidden_size=16, core_size=16,
                            learner_batch_size=8, run_dir=str(tmp_path / "run"),
                            **{"device.updates_per_chunk": 2, "device.threads": threads,
                               "device.population": True, "device.population_parts": parts})
    coordinator = Coordinator(config.league, config.run_dir, seed=0)
    indices = agent_indices(config)
    assert len(indices) == 4
    group = DeviceLearnerGroup(config, list(indices), indices, coordinator)
    coordinator.connect_learners(group, list(indices))
    try:
        members = [group._population_agents[id(p)] for p in group.populations]
        assert [len(m) for m in members] == want and not group._alone
        assert sorted(a for m in members for a in m) == sorted(indices)
        group._round()
        assert {a: learner.version() for a, learner in group.learners.items()} == dict.fromkeys(indices, 2)
    finally:
        group.close()
        coordinator.close()


@pytest.mark.parametrize("population", [False, True])
def test_main_agent_chunks_give_main_agents_that_many_chunks_a_round(tmp_path, population):
    """--device.main_agent_chunks=3 on Kuhn: one round of the learner group applies 3 chunks of
    updates to each main agent and one to each exploiter (counted by the learners' versions and
    by league.db's games), one program per agent or the exploiters as one population program
    (the main agent, alone with its 3 chunks, plays its own), and is refused where it cannot act."""
    from experiments.nodes import DeviceLearnerGroup
    from experiments.program import agent_indices
    from league.players import learning_agents

    config = RunConfig.make(game="kuhn_poker", runner="inprocess", hidden_size=16, core_size=16,
                            learner_batch_size=8, run_dir=str(tmp_path / "run"), main_agent_chunks=3,
                            **{"device.updates_per_chunk": 2, "device.threads": 2,
                               "device.population": population})
    coordinator = Coordinator(config.league, config.run_dir, seed=0)
    indices = agent_indices(config)
    group = DeviceLearnerGroup(config, list(indices), indices, coordinator)
    coordinator.connect_learners(group, list(indices))
    roles = {p.player_id: p.role for p in learning_agents(config.league)}
    assert [sorted(group._population_agents[id(p)]) for p in group.populations] == (
        [sorted(a for a, r in roles.items() if r != "main_agent")] if population else [])
    waits = []   # at each chunk: (the agent's own waiting_for_turn, how many agents wait)
    play_chunk = group.play_chunk

    def watched(agent_id):
        flags = {a: m["waiting_for_turn"] for a, m in group.metrics().items()}
        waits.append((flags[agent_id], sum(flags.values())))
        return play_chunk(agent_id)

    group.play_chunk = watched
    try:
        group._round()
        versions = {a: learner.version() for a, learner in group.learners.items()}
        want = {a: 2 * (3 if roles[a] == "main_agent" else 1) for a in versions}
        assert versions == want and set(roles.values()) >= {"main_agent", "main_exploiter"}
        assert group.games == coordinator.history.game_count() > 0
        # the coordinator's stall watch sees who waits for its turn: all but the (at most 2) playing
        alone = [a for a in versions if population is False or roles[a] == "main_agent"]
        assert len(waits) == sum(versions[a] for a in alone) // 2
        if not population:
            assert all(own == 0.0 and waiting >= len(versions) - 2 for own, waiting in waits), waits
        assert not any(m["waiting_for_turn"] for m in group.metrics().values())   # between rounds
    finally:
        group.close()
        coordinator.close()
    with pytest.raises(ConfigError, match="main_agent_chunks must be at least 1"):
        RunConfig.make(game="kuhn_poker", main_agent_chunks=0)
    with pytest.raises(ConfigError, match="main_agent_chunks acts on the device path only"):
        experience_path(RunConfig.make(game="kuhn_poker", experience="replay", main_agent_chunks=2))


def test_a_new_leagues_first_round_reaches_every_agent_before_any_second_chunk(tmp_path):
    """Every agent's first chunk is dispatched before any agent's second (`chunk_order`), though
    main agents take 3 chunks a round: on a new league no exploiter waits for the main agents'
    whole share. The agents of one structure share a program (`program`: one for Kuhn's main
    agent and its exploiters), and each agent's first chunk's time is reported; the progress
    line's program lines say so once each."""
    from experiments.nodes import DeviceLearnerGroup
    from experiments.program import agent_indices
    from experiments.supervisor import program_lines
    from league.players import learning_agents

    config = RunConfig.make(game="kuhn_poker", runner="inprocess", hidden_size=16, core_size=16,
                            learner_batch_size=8, run_dir=str(tmp_path / "run"), main_agent_chunks=3,
                            **{"device.updates_per_chunk": 2, "device.threads": 2})
    coordinator = Coordinator(config.league, config.run_dir, seed=0)
    indices = agent_indices(config)
    group = DeviceLearnerGroup(config, list(indices), indices, coordinator)
    coordinator.connect_learners(group, list(indices))
    roles = {p.player_id: p.role for p in learning_agents(config.league)}
    started = []
    play_chunk = group.play_chunk

    def watched(agent_id):
        started.append(agent_id)
        return play_chunk(agent_id)

    group.play_chunk = watched
    try:
        before = group.metrics()
        assert not any("first_chunk_seconds" in m for m in before.values())
        group._round()
        n = len(indices)
        assert sorted(started[:n]) == sorted(indices), started   # every agent once, then the seconds
        assert len(started) == n + 2 * sum(r == "main_agent" for r in roles.values())
        assert set(started[n:]) == {a for a, r in roles.items() if r == "main_agent"}
        metrics = group.metrics()
        programs = {m["program"] for m in metrics.values()}
        # Kuhn's roles differ only in settings (learning rate, entropy): one program for all
        assert len(programs) == 1 and all(m["first_chunk_seconds"] > 0 for m in metrics.values())
        told: set = set()
        lines = program_lines(metrics, told)
        assert lines[0].startswith(f"learner programs: 1 for {n} agents") and len(lines) == 2
        assert "ready: its first chunk took" in lines[1] and program_lines(metrics, told) == []
    finally:
        group.close()
        coordinator.close()


def test_closing_a_learner_group_does_not_wait_for_its_chunks_in_flight(tmp_path):
    """Stopping mid-chunk: `close` writes the checkpoints at once; a chunk that ends after them
    is dropped (the checkpointed version stays the learner's) and its games are not reported."""
    import threading

    from experiments.nodes import DeviceLearnerGroup
    from experiments.program import agent_indices

    config = RunConfig.make(game="kuhn_poker", runner="inprocess", hidden_size=16, core_size=16,
                            learner_batch_size=8, run_dir=str(tmp_path / "run"),
                            **{"device.updates_per_chunk": 2, "device.threads": 2})
    coordinator = Coordinator(config.league, config.run_dir, seed=0)
    indices = agent_indices(config)
    group = DeviceLearnerGroup(config, list(indices), indices, coordinator)
    coordinator.connect_learners(group, list(indices))
    group._round()   # compiled, every agent at version 2
    release, inside = threading.Event(), threading.Event()
    learner = group.learners[next(iter(indices))]
    chunk_done = learner.chunk_done

    def slow(*args):
        inside.set()
        release.wait(60)
        return chunk_done(*args)

    learner.chunk_done = slow
    runner = threading.Thread(target=group.run, daemon=True)
    runner.start()
    try:
        assert inside.wait(60)
        t0 = time.time()
        group.stop()
        runner.join(10)
        group.close()
        assert not runner.is_alive() and time.time() - t0 < 5
        version, games = learner.version(), coordinator.history.game_count()
        release.set()
        time.sleep(1.0)
        assert learner.version() == version == 2
        assert coordinator.history.game_count() == games
    finally:
        release.set()
        coordinator.close()
