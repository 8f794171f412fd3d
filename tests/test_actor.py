"""The actor node on real parts: SMAX races and OpenSpiel games, a real Reverb server, and the
learner node consuming what the actor writes."""

import time

import jax
import numpy as np
import pytest

from actors.actor import Actor, ActorConfig, example_unroll
from actors.games import make_batch_game
from actors.games.smax_races import ATTACK, SmaxRacesConfig, fixed_size_menu
from agents import make_network
from agents.specs import MASK_KEY
from agents.trajectory import reverb_signature, unflatten_like
from league.players import WithdrawnPlayer
from learners.learner import Learner, LearnerConfig, ReplayConfig

try:  # the replay path (the [replay] extra); its tests are marked `replay` (tests/conftest.py)
    import reverb

    from learners.replay import make_table
except ImportError:
    reverb = make_table = None

B, T = 8, 6
TINY = dict(embed_size=16, core_size=16, replica_size=16, pointer_size=8, value_size=16,
            attention_key_size=8)


class FixedOpponent:
    """The match source of the tests: always the same frozen opponent; races alternate."""

    def __init__(self, opponent="frozen", races=(("terran", "zerg"), ("protoss", "terran"))):
        self.opponent, self.race_cycle = opponent, races
        self.requests, self.results = 0, []

    def request_match(self, agent_id):
        home, away = self.race_cycle[self.requests % len(self.race_cycle)]
        self.requests += 1
        return {"opponent_id": self.opponent, "branch": "test", "home_race": home,
                "away_race": away}

    def report_results(self, results):
        self.results.extend(results)


class CountingParams:
    """A params source whose learner version goes up by one on every refresh request."""

    def __init__(self, params):
        self.params, self.version, self.calls = params, 0, []

    def latest_params(self, player_id, min_version=None):
        self.calls.append((player_id, min_version))
        if player_id != "agent":
            return 0, self.params
        if min_version is not None:
            self.version += 1
        return self.version, self.params


def wait_for_refresh(source: CountingParams, timeout: float = 60.0) -> None:
    """Waits until the actor's background refresher has asked `source` for newer parameters
    (it runs on its own thread, which a loaded machine may not schedule for a while: the
    actor never waits for it), so that the next unroll starts with a refreshed version."""
    deadline = time.monotonic() + timeout
    while source.version < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert source.version >= 1, "the actor's refresher never asked for newer parameters"


class LearnerParams:
    def __init__(self, learner, frozen):
        self.learner, self.frozen = learner, frozen

    def latest_params(self, player_id, min_version=None):
        if player_id == "agent":
            return self.learner.params(min_version)
        return 0, self.frozen


class CheckedGame:
    """Wraps a batch game: counts finished games, records resets, checks every action's
    legality against the masks of the observation it answered."""

    def __init__(self, game):
        self.game, self.spec, self.batch_size = game, game.spec, game.batch_size
        self.dones, self.resets, self.checked = 0, [], 0

    def reset(self, seed, races=None):
        self.resets.append(races)
        timestep = self.game.reset(seed, races=races)
        self.obs = jax.device_get(timestep.observations)
        return timestep

    def step(self, actions):
        for obs, side in zip(self.obs, jax.device_get(actions)):
            masks = obs[MASK_KEY]
            assert masks["composition"][np.arange(self.batch_size), side["composition"]].all()
            types = side["action_type"]
            assert np.take_along_axis(masks["action_type"], types[..., None], -1).all()
            attack = types == ATTACK
            legal_target = np.take_along_axis(masks["target"], side["target"][..., None], -1)[..., 0]
            assert legal_target[attack].all()
            self.checked += self.batch_size
        timestep = self.game.step(actions)
        self.dones += int(np.sum(jax.device_get(timestep.done)))
        self.obs = jax.device_get(timestep.observations)
        return timestep


@pytest.fixture(scope="module")
def smax():
    game = make_batch_game("smax_races", B, config=SmaxRacesConfig(menu=fixed_size_menu(2),
                                                                   max_steps=10))
    network = make_network(game.spec, TINY, unit=True)
    params = network.init(jax.random.PRNGKey(0), game.spec.side(0).zero_observation())
    return game, network, params


def queue_server(example, size=10_000):
    table = reverb.Table.queue("queue", size, signature=reverb_signature(example))
    return reverb.Server([table])


def drain(server, example, table="queue"):
    client = reverb.Client(f"localhost:{server.port}")
    n = client.server_info()[table].current_size
    items = []
    for sample in client.sample(table, num_samples=n, emit_timesteps=False):
        items.append(unflatten_like(example, sample.data))
    return items


@pytest.mark.replay
def test_actor_feeds_the_learner_end_to_end(smax):
    game, network, params = smax
    example = example_unroll(game.spec, network, T)
    config = LearnerConfig(batch_size=4, unroll_length=T,
                           replay=ReplayConfig(max_size=1000, samples_per_insert=1.0,
                                               error_buffer=1e6))
    server = reverb.Server([make_table(config.replay, reverb_signature(example), 4)])
    address = f"localhost:{server.port}"
    learner = Learner(network, params, config, example, reverb_address=address)
    source = FixedOpponent()
    actor = Actor("actor-0", "agent", game, network, source, LearnerParams(learner, params),
                  address, config.replay.table,
                  ActorConfig(unroll_length=T, param_refresh_seconds=0.05, episodes_per_match=1000))
    try:
        actor.run(num_steps=2 * (T - 1))
        assert learner.update(3, timeout=60) == 3
        metrics = learner.metrics()
        assert metrics["version"] == 3 and np.isfinite(metrics["loss/total"])
        assert metrics["samples_inserted"] == 2 * B
        actor.run(num_steps=3 * (T - 1))          # picks up the learner's new parameters
        assert actor.metrics()["param_refreshes"] >= 1
        assert actor.metrics()["policy_version"] >= 1
        assert learner.update(2, timeout=60) == 2
        assert learner.metrics()["staleness_max"] >= 0
    finally:
        actor.close()
        learner.close()
        server.stop()


class RestartingLearner:
    """A learner group's parameters and its Reverb server's address, as a restart changes them:
    `restarting` (its process lost, not back: every call fails as a call to a lost node does),
    then back at `version` (its last checkpoint's, older) and another address."""

    def __init__(self, params, version, address):
        self.params, self.version, self.address, self.restarting = params, version, address, False

    def latest_params(self, player_id, min_version=None):
        if self.restarting:
            raise ConnectionError("the learner group is restarting")
        if player_id == "agent" and min_version is not None and self.version < min_version:
            return None
        return (self.version if player_id == "agent" else 0), self.params

    def reverb_address(self):
        if self.restarting:
            raise ConnectionError("the learner group is restarting")
        return self.address


def _run_until(actor, predicate, seconds=60.0):
    """Runs the actor an unroll at a time until `predicate()`; a deadline stops it (so that an
    actor that blocks for ever fails the test instead of hanging it)."""
    import threading

    late = threading.Event()
    stopper = threading.Timer(seconds, lambda: (late.set(), actor.stop()))
    stopper.start()
    try:
        while not predicate() and not late.is_set():
            actor.run(num_steps=T - 1)
    finally:
        stopper.cancel()


def _items_at(server, example, n, seconds=30.0):
    client = reverb.Client(f"localhost:{server.port}")
    deadline = time.time() + seconds
    while client.server_info()["queue"].current_size < n and time.time() < deadline:
        time.sleep(0.1)
    return drain(server, example)


@pytest.mark.replay
def test_an_actor_whose_learners_server_was_lost_writes_to_the_restarted_one(smax, monkeypatch):
    """Issue 28: Ray restarts a lost replay-path learner group with a new Reverb server at
    another port and the parameters of its last checkpoint. The actor's writes to the lost
    server wait (Reverb's client retries for ever); after STALL_CHECK_SECONDS it asks where
    the server is. (1) The group still restarting: the actor's run fails with that call's
    error (a lost node: the launcher runs it again); run again, it writes to the new server.
    (2) The group back at once: the actor moves to its server inside the run. Each time it
    plays the restarted learner's parameters, though older than the ones it had (each unroll's
    last step: its first is the step before, played with the lost learner's)."""
    from actors import adder

    monkeypatch.setattr(adder, "STALL_CHECK_SECONDS", 0.5)
    game, network, params = smax
    example = example_unroll(game.spec, network, T)
    first = queue_server(example)
    learner = RestartingLearner(params, 5, f"localhost:{first.port}")
    actor = Actor("actor-m", "agent", game, network, FixedOpponent(), learner, learner.reverb_address,
                  "queue", ActorConfig(unroll_length=T, param_refresh_seconds=0.05, episodes_per_match=1000))
    try:
        actor.run(num_steps=2 * (T - 1))
        assert {int(i.steps.policy_version[-1]) for i in _items_at(first, example, 2 * B)} == {5}

        # (1) lost, and still restarting when the actor asks
        first.stop()
        learner.restarting = True
        with pytest.raises(RuntimeError) as failed:
            _run_until(actor, lambda: False, seconds=60.0)
        assert isinstance(failed.value.__cause__, ConnectionError), failed.value
        second = queue_server(example)
        learner.restarting, learner.version, learner.address = False, 2, f"localhost:{second.port}"
        actor.run(num_steps=2 * (T - 1))
        assert actor.metrics()["reconnects"] == 1 and actor.metrics()["policy_version"] == 2
        assert {int(i.steps.policy_version[-1]) for i in _items_at(second, example, B)} == {2}

        # (2) lost and back before the actor asks: it moves inside the run
        second.stop()
        third = queue_server(example)
        learner.version, learner.address = 1, f"localhost:{third.port}"
        _run_until(actor, lambda: actor.metrics()["reconnects"] == 2)
        assert actor.metrics()["reconnects"] == 2, "the actor never found the restarted server"
        actor.run(num_steps=2 * (T - 1))
        assert {int(i.steps.policy_version[-1]) for i in _items_at(third, example, B)} == {1}
        third.stop()
    finally:
        actor.stop()
        actor.close()


@pytest.mark.replay
def test_unrolls_overlap_by_one_and_carry_the_refreshed_version(smax):
    game, network, params = smax
    example = example_unroll(game.spec, network, T)
    server = queue_server(example)
    source = CountingParams(params)
    actor = Actor("actor-1", "agent", game, network, FixedOpponent(), source,
                  f"localhost:{server.port}", "queue",
                  ActorConfig(unroll_length=T, param_refresh_seconds=0.01, episodes_per_match=1000))
    try:
        unrolls = 4
        actor.run(num_steps=2 * (T - 1))
        wait_for_refresh(source)
        actor.run(num_steps=2 * (T - 1))
        actor.close()
        items = drain(server, example)
    finally:
        server.stop()
    assert len(items) == unrolls * B  # written in order: unroll by unroll, game by game
    versions = np.stack([np.asarray(i.steps.policy_version) for i in items]).reshape(unrolls, B, T)
    assert (np.diff(versions.reshape(unrolls, B, T)[:, 0].reshape(-1)) >= 0).all()
    assert versions.max() > versions.min() >= 0     # refreshed while playing
    for u in range(unrolls - 1):
        for b in range(B):
            this, following = items[u * B + b].steps, items[(u + 1) * B + b].steps
            np.testing.assert_array_equal(this.observation["units"][-1],
                                          following.observation["units"][0])
            np.testing.assert_array_equal(this.reward[-1], following.reward[0])
            assert this.policy_version[-1] == following.policy_version[0]
    for item in items:
        s = item.steps
        done = s.discount == 0
        np.testing.assert_array_equal(s.first[1:], done[:-1])   # a game ends, the next starts
        assert np.all(s.reward[~done] == 0) and np.all(np.isin(s.reward[done], (-1, 0, 1)))
        assert item.core_state.hidden.shape == (TINY["core_size"],)
        assert s.reward.shape == (T, *network.value_shape)            # one reward per unit
        for h in network.head_names:
            assert s.action[h].shape == (T, *network.head_shapes[h])
            assert np.all(s.behaviour_log_prob[h] <= 1e-6)
        assert s.opponent_observation["units"].shape == s.observation["units"].shape
    assert items[0].steps.first[0]                     # a fresh stream starts a game
    np.testing.assert_array_equal(items[0].core_state.hidden, 0)


@pytest.mark.replay
def test_every_finished_game_is_reported_once_and_matches_change(smax):
    game, network, params = smax
    checked = CheckedGame(game)
    source = FixedOpponent()
    actor = Actor("actor-2", "agent", checked, network, source, CountingParams(params), None,
                  "unused", ActorConfig(unroll_length=T, param_refresh_seconds=1.0,
                                        episodes_per_match=B, reward_plugin="openai_five"))
    try:
        played = actor.run_episodes(4 * B)
    finally:
        actor.close()
    metrics = actor.metrics()
    assert played >= 4 * B
    assert len(source.results) == checked.dones == metrics["episodes"] == played
    assert checked.checked > 0
    assert {r.home for r in source.results} == {"agent"}
    assert {r.away for r in source.results} == {"frozen"}
    assert {r.outcome for r in source.results} <= {"win", "draw", "loss"}
    assert all(2 <= r.length <= 11 for r in source.results)  # strategy step + battle
    assert metrics["matches"] == source.requests >= 2
    assert checked.resets[:2] == [("terran", "zerg"), ("protoss", "terran")]


class PerUnitReward:
    """A reward plug-in object: unit i of step k gets k + i / 10 (so every value says where it
    came from); records the progress the actor passes."""

    def __init__(self):
        self.progress = []

    def set_progress(self, version):
        self.progress.append(version)

    def __call__(self, batch, contiguous):
        n = batch["present"].shape[-1]
        return (np.arange(len(batch["done"]))[:, None] + np.arange(n)[None] / 10).astype(np.float32)


@pytest.mark.replay
def test_each_unit_keeps_its_own_reward_and_the_plugin_sees_the_acting_version(smax):
    """Per-unit rewards reach the trajectory unit by unit (not averaged over the side), in the
    plug-in's [B, T'] row-major order, and the plug-in is told the version that played."""
    game, network, params = smax
    example = example_unroll(game.spec, network, T)
    server = queue_server(example)
    reward, source = PerUnitReward(), CountingParams(params)
    actor = Actor("actor-r", "agent", game, network, FixedOpponent(), source,
                  f"localhost:{server.port}", "queue",
                  ActorConfig(unroll_length=T, param_refresh_seconds=0.01, episodes_per_match=1000),
                  reward=reward)
    try:
        actor.run(num_steps=T - 1)
        wait_for_refresh(source)
        actor.run(num_steps=T - 1)
        actor.close()
        items = drain(server, example)
    finally:
        server.stop()
    n = network.value_shape[0]
    assert len(items) == 2 * B and items[0].steps.reward.shape == (T, n)
    for b in range(B):   # first unroll: T new steps, batch row b holds plug-in rows b*T .. b*T+T-1
        expected = (b * T + np.arange(T))[:, None] + np.arange(n)[None] / 10
        np.testing.assert_allclose(items[b].steps.reward, expected, rtol=1e-6)
    versions = [int(np.max(i.steps.policy_version)) for i in items]
    assert reward.progress and reward.progress[-1] == max(versions) >= 1


def test_training_reward_shapes():
    from actors.rewards import training_reward

    per_unit = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    present = np.array([[True, True, False], [True, False, False]])
    # one value per side: the mean over present units
    np.testing.assert_allclose(training_reward(per_unit, present), [1.5, 4.0])
    # one value per unit: as they are for present units, an absent slot its team's mean over
    # the present ones; a side's reward goes to every unit
    np.testing.assert_array_equal(training_reward(per_unit, present, (3,)),
                                  [[1.0, 2.0, 1.5], [4.0, 4.0, 4.0]])
    np.testing.assert_array_equal(training_reward(per_unit, None, (3,)), per_unit)
    np.testing.assert_array_equal(training_reward(np.array([1.0, -1.0]), present, (3,)),
                                  [[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    with pytest.raises(ValueError):
        training_reward(per_unit, present, (4,))


@pytest.mark.replay
def test_actor_on_an_openspiel_pool_with_the_reference_network():
    game = make_batch_game("kuhn_poker", 16)
    network = make_network(game.spec, dict(mlp_sizes=(16,), lstm_size=8))
    params = network.init(jax.random.PRNGKey(0), game.spec.side(0).zero_observation())
    example = example_unroll(game.spec, network, 4)
    server = queue_server(example)
    source = FixedOpponent(races=((None, None),))
    actor = Actor("actor-3", "agent", game, network, source, CountingParams(params),
                  f"localhost:{server.port}", "queue",
                  ActorConfig(unroll_length=4, param_refresh_seconds=1.0, reward_plugin="outcome"))
    try:
        actor.run(num_steps=3 * 3)
        actor.close()
        items = drain(server, example)
    finally:
        server.stop()
    assert len(items) == 3 * 16
    done = sum(int(np.sum(i.steps.discount[1 if k >= 16 else 0:] == 0))
               for k, i in enumerate(items))
    assert done == len(source.results) > 0
    assert all(r.length in (2, 3) for r in source.results)  # Kuhn: 2 or 3 moves


@pytest.mark.replay
def test_teacher_follows_the_stream_with_its_own_state(smax):
    """With a teacher, each unroll stores (policy state, teacher state) before its step 0; the
    teacher's is what stepping the teacher one step at a time through the previous unroll's
    learnt steps gives, starting from zeros at the start of the stream."""
    game, network, params = smax
    teacher = network.init(jax.random.PRNGKey(7), game.spec.side(0).zero_observation())
    example = example_unroll(game.spec, network, T, teacher=True)
    server = queue_server(example)
    actor = Actor("actor-t", "agent", game, network, FixedOpponent(), CountingParams(params),
                  f"localhost:{server.port}", "queue",
                  ActorConfig(unroll_length=T, param_refresh_seconds=60, episodes_per_match=1000),
                  teacher_params=teacher)
    try:
        unrolls = 3
        actor.run(num_steps=unrolls * (T - 1))
        actor.close()
        items = drain(server, example)
    finally:
        server.stop()
    assert len(items) == unrolls * B
    first_teacher = np.stack([items[b].core_state[1].hidden for b in range(B)])
    np.testing.assert_array_equal(first_teacher, 0)
    for u in range(unrolls - 1):
        batch = [items[u * B + b] for b in range(B)]
        state = jax.tree_util.tree_map(lambda *x: np.stack(x), *[i.core_state[1] for i in batch])
        for t in range(T - 1):
            obs = jax.tree_util.tree_map(lambda *x, t=t: np.stack(x)[:, t], *[i.steps.observation for i in batch])
            first = np.stack([i.steps.first[t] for i in batch])
            actions = {h: np.stack([i.steps.action[h][t] for i in batch]) for h in network.head_names}
            _, state = network.step(teacher, obs, state, first, actions=actions)
        following = np.stack([items[(u + 1) * B + b].core_state[1].hidden for b in range(B)])
        np.testing.assert_allclose(following, np.asarray(state.hidden), atol=1e-5)
        policy = np.stack([items[(u + 1) * B + b].core_state[0].hidden for b in range(B)])
        assert np.abs(policy - following).max() > 1e-3   # two different cores


def test_reports_to_a_lost_coordinator_are_delivered_once_it_is_back_and_other_errors_raised():
    """The actor's reporter (`actors.actor._Reporter`): a batch whose call failed because the
    coordinator's process was lost (Ray's ActorUnavailableError, `experiments.nodes.lost_node`)
    is kept and delivered, in order and once, when the coordinator answers again; any other
    error reaches the actor's thread."""
    import ray.exceptions

    from actors.actor import _Reporter
    from experiments.nodes import lost_node

    class Coordinator:
        def __init__(self, failures):
            self.failures, self.received = failures, []

        def report_results(self, batch):
            if self.failures:
                raise self.failures.pop(0)
            self.received.extend(batch)

    lost = ray.exceptions.ActorUnavailableError("the actor is restarting", None)
    coordinator = Coordinator([lost, lost])
    reporter = _Reporter(coordinator, lost_node)
    reporter.RETRY_SECONDS = 0.05
    reporter.put([1, 2])
    reporter.put([3])
    assert reporter.flush(timeout=10.0)
    assert coordinator.received == [1, 2, 3] and not coordinator.failures
    reporter.close()

    coordinator = Coordinator([ValueError("a result for an unknown player")])
    reporter = _Reporter(coordinator, lost_node)
    reporter.put([1])
    with pytest.raises(RuntimeError, match="reporting finished games") as raised:
        reporter.flush(timeout=10.0)
    assert isinstance(raised.value.__cause__, ValueError) and coordinator.received == []
    reporter.close()
    assert lost_node(RuntimeError("wrapped")) is None
    try:
        try:
            raise lost
        except Exception as e:
            raise RuntimeError("reporting finished games to the coordinator failed") from e
    except RuntimeError as wrapped:
        assert lost_node(wrapped) is lost


class DamagedFrozenPlayers(FixedOpponent):
    """Matchmaking that offers `damaged` frozen players one after the other (each taken out of
    matchmaking once a node found it damaged), then the good one."""

    def __init__(self, damaged):
        super().__init__()
        self.offers = iter(damaged)

    def request_match(self, agent_id):
        match = super().request_match(agent_id)
        return {**match, "opponent_id": next(self.offers, "frozen")}


class WithdrawingParams(CountingParams):
    """Parameters for the agent and "frozen"; any other player has been withdrawn."""

    def latest_params(self, player_id, min_version=None):
        if player_id not in ("agent", "frozen"):
            raise WithdrawnPlayer(player_id)
        return super().latest_params(player_id, min_version)


def test_an_actor_draws_past_any_number_of_withdrawn_players(smax):
    """Issue 31: an actor whose matches meet 30 damaged frozen players in a row (every frozen
    file damaged: each withdrawn at its first meeting) draws again past each and plays the
    next good match; the bound on draws (MATCH_ATTEMPTS, 20) counts only players met twice."""
    game, network, params = smax
    source = DamagedFrozenPlayers([f"damaged_{k}" for k in range(30)])
    actor = Actor("actor-3", "agent", game, network, source, WithdrawingParams(params), None, "unused",
                  ActorConfig(unroll_length=T, param_refresh_seconds=1.0, episodes_per_match=B))
    try:
        played = actor.run_episodes(B)
    finally:
        actor.close()
    assert played >= B
    assert source.requests >= 31   # the 30 withdrawn, the good one (and the next match)
    assert {r.away for r in source.results} == {"frozen"}
