"""The learner node with a real in-process Reverb server: it learns, it measures, it persists."""

import dataclasses
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from agents.networks import NetworkConfig, ReferenceNetwork
from agents.trajectory import (
    Step,
    Unroll,
    reverb_signature,
    stack_unrolls,
    time_major,
    write_unroll,
    zeros_unroll,
)
from learners import losses
from learners.learner import CheckpointError, Learner, LearnerConfig, ReplayConfig

try:  # the replay path (the [replay] extra); its tests are marked `replay` (tests/conftest.py)
    import reverb

    from learners.replay import make_table
except ImportError:
    reverb = make_table = None

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def small_net(num_obs, num_actions=2, size=32):
    return ReferenceNetwork(NetworkConfig(heads={"action": num_actions}, mlp_sizes=(size,),
                                          lstm_size=size))


def example_for(net, num_obs, T):
    core = jax.tree_util.tree_map(lambda x: np.asarray(x[0]), net.initial_state(1))
    obs = np.zeros(num_obs, np.float32)
    return zeros_unroll(obs, obs, list(net.config.heads), core, T)


def serve(config, example):
    server = reverb.Server([make_table(config.replay, reverb_signature(example), config.batch_size)])
    return server, f"localhost:{server.port}"


def insert(client, table, unrolls):
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for u in unrolls:
            write_unroll(writer, table, u)
        writer.flush()


def policy_probs(net, params, observations):
    """pi(.|o) at the start of an episode for each observation row."""
    n = observations.shape[0]
    out, _ = net.step(params, observations, net.initial_state(n), np.ones(n, bool))
    return np.asarray(jax.nn.softmax(out.logits["action"]))


# --------------------------------------------------------------------------- contextual bandit
# Context c in {0, 1, 2}; in context c action c pays 1, action c+1 pays 0.6, action c+2 pays 0.
# All data comes from one stale behaviour policy (version 0, long superseded) that plays
# mu = 0.05 / 0.5 / 0.45 on (best, decent, bad), so V^mu = 0.35. Without importance weights the
# expected update is E_mu[(r - V^mu) grad log pi]: its logit gradient is mu(a) (r_a - V^mu)
# = 0.0325 / 0.125 / -0.1575, so the policy converges to the *decent* action. With V-trace's
# ratio pi/mu the expected update is the current policy's own gradient, which converges to the
# best action. Here all data is from a single very old version, so the clip must sit above the
# largest ratio (1 / min mu = 20): with rho_bar = 1 the clipped update converges to a policy
# that depends on mu (IMPALA Sec. 4.2, "pi_rho_bar"), and UPGO's ratio is clipped at 1 by
# definition, so this test uses the V-trace policy term alone with rho_bar_pg = 20.

BANDIT_R = np.array([[1.0, 0.6, 0.0], [0.0, 1.0, 0.6], [0.6, 0.0, 1.0]], np.float32)
BANDIT_MU = np.array([[0.05, 0.5, 0.45], [0.45, 0.05, 0.5], [0.5, 0.45, 0.05]], np.float32)


def bandit_unrolls(rng, n, T):
    """Every step is a one-step episode (first = True, discount = 0) played by version 0."""
    out = []
    for _ in range(n):
        c = rng.integers(0, 3, size=T)
        a = np.array([rng.choice(3, p=BANDIT_MU[ci]) for ci in c], np.int32)
        obs = np.eye(3, dtype=np.float32)[c]
        steps = Step(observation=obs, opponent_observation=obs, action={"action": a},
                     behaviour_log_prob={"action": np.log(BANDIT_MU[c, a]).astype(np.float32)},
                     reward=BANDIT_R[c, a], discount=np.zeros(T, np.float32),
                     first=np.ones(T, bool), policy_version=np.zeros(T, np.int32))
        out.append(steps)
    return out


def train_bandit(loss_config, updates=300, seed=0):
    net = small_net(3, num_actions=3)
    T, B = 3, 32
    config = LearnerConfig(batch_size=B, unroll_length=T, learning_rate=1e-2, max_grad_norm=None,
                           loss=loss_config,
                           replay=ReplayConfig(selector="uniform", samples_per_insert=4.0,
                                               max_size=10_000, error_buffer=1e6))
    example = example_for(net, 3, T)
    server, address = serve(config, example)
    client = reverb.Client(address)
    rng = np.random.default_rng(seed)
    core = example.core_state
    insert(client, config.replay.table,
           [Unroll(s, core) for s in bandit_unrolls(rng, updates * B // 4, T)])
    learner = Learner(net, net.init(jax.random.PRNGKey(seed), example.steps.observation[0]),
                      config, example, reverb_address=address)
    assert learner.update(updates, timeout=30) == updates
    probs = policy_probs(net, learner.params()[1], np.eye(3, dtype=np.float32))
    metrics = learner.metrics()
    learner.close()
    server.stop()
    return probs, metrics


@pytest.mark.replay
def test_bandit_stale_data_vtrace_learns_and_uncorrected_is_worse():
    base = losses.LossConfig(entropy_weight=0.0, upgo_weight=0.0, clip_pg_rho_threshold=20.0)
    probs, metrics = train_bandit(base)
    best = probs[np.arange(3), np.arange(3)]
    assert np.all(best > 0.95), probs
    assert metrics["staleness_mean"] > 100  # data from version 0, learner far ahead
    probs_nc, _ = train_bandit(dataclasses.replace(base, importance_correction=False))
    best_nc = probs_nc[np.arange(3), np.arange(3)]
    expected_reward = (probs * BANDIT_R).sum(1).mean()
    expected_reward_nc = (probs_nc * BANDIT_R).sum(1).mean()
    decent_nc = probs_nc[np.arange(3), (np.arange(3) + 1) % 3]
    assert decent_nc.max() > 0.9, probs_nc  # it settles on the decent action
    assert best_nc.mean() < best.mean() - 0.2, (probs, probs_nc)
    assert expected_reward > 0.95 and expected_reward_nc < expected_reward - 0.15


# --------------------------------------------------------------------------- chain MDP
# States 0..L-1 (one-hot observation). In state s the correct action is s % 2: it moves to
# s + 1; the other action ends the episode with reward 0. Reaching the end pays +1 on the last
# step, the only reward (delayed). A uniform policy succeeds with probability 2^-L. The actor
# below plays with parameters several versions old (it refreshes them every few updates, and
# replay reuses each unroll twice), writes overlapping unrolls with their stored LSTM state.

CHAIN_L = 4


class ChainActor:
    def __init__(self, net, n_envs, T, seed):
        self.net, self.n, self.T = net, n_envs, T
        self.rng = np.random.default_rng(seed)
        self.key = jax.random.PRNGKey(seed)
        self.pos = np.zeros(n_envs, np.int64)
        self.first = np.ones(n_envs, bool)
        self.core = jax.tree_util.tree_map(np.asarray, net.initial_state(n_envs))
        self.pending = [[] for _ in range(n_envs)]  # per env: (step fields, core before step)
        self.step_fn = jax.jit(net.step)

    def play(self, params, version, num_steps):
        unrolls = []
        for _ in range(num_steps):
            obs = np.eye(CHAIN_L, dtype=np.float32)[self.pos]
            out, core = self.step_fn(params, obs, self.core, self.first)
            self.key, sub = jax.random.split(self.key)
            logits = out.logits["action"]
            action = np.asarray(jax.random.categorical(sub, logits), np.int32)
            logp = np.asarray(jax.nn.log_softmax(logits))[np.arange(self.n), action]
            correct = action == self.pos % 2
            new_pos = np.where(correct, self.pos + 1, self.pos)
            done = ~correct | (new_pos == CHAIN_L)
            reward = (correct & (new_pos == CHAIN_L)).astype(np.float32)
            for i in range(self.n):
                step = dict(observation=obs[i], opponent_observation=obs[i],
                            action={"action": action[i]}, behaviour_log_prob={"action": logp[i]},
                            reward=reward[i], discount=np.float32(0.0 if done[i] else 1.0),
                            first=self.first[i], policy_version=np.int32(version))
                before = jax.tree_util.tree_map(lambda x, i=i: x[i], self.core)
                self.pending[i].append((step, before))
                if len(self.pending[i]) == self.T:
                    steps = [s for s, _ in self.pending[i]]
                    stacked = Step(**{k: jax.tree_util.tree_map(lambda *xs: np.stack(xs),
                                                                *[s[k] for s in steps])
                                      for k in steps[0]})
                    unrolls.append(Unroll(stacked, self.pending[i][0][1]))
                    self.pending[i] = self.pending[i][-1:]  # overlap by one step
            self.core = jax.tree_util.tree_map(np.asarray, core)
            self.pos = np.where(done, 0, new_pos)
            self.first = done
        return unrolls


def chain_success_probability(net, params):
    """Probability that the policy walks the whole chain (following the correct path)."""
    state, total = net.initial_state(1), 1.0
    for s in range(CHAIN_L):
        out, state = net.step(params, np.eye(CHAIN_L, dtype=np.float32)[s][None], state,
                              np.array([s == 0]))
        total *= float(jax.nn.softmax(out.logits["action"])[0, s % 2])
    return total


@pytest.mark.replay
def test_chain_mdp_delayed_reward_learned_from_stale_versions():
    T, B, n_envs, refresh_every = 6, 16, 16, 2
    net = small_net(CHAIN_L, num_actions=2)
    config = LearnerConfig(
        batch_size=B, unroll_length=T, learning_rate=3e-3,
        loss=losses.LossConfig(entropy_weight=0.003),
        replay=ReplayConfig(selector="uniform", samples_per_insert=2.0, max_size=64,
                            error_buffer=1e5))
    example = example_for(net, CHAIN_L, T)
    server, address = serve(config, example)
    client = reverb.Client(address)
    learner = Learner(net, net.init(jax.random.PRNGKey(1), example.steps.observation[0]),
                      config, example, reverb_address=address)
    actor = ChainActor(net, n_envs, T, seed=1)
    version, params = learner.params()
    initial = chain_success_probability(net, params)
    staleness = []
    for i in range(100):
        # new data from the (stale) parameters the actor holds, then learn on the replay
        insert(client, config.replay.table, actor.play(params, version, T if i == 0 else T - 1))
        assert learner.update(refresh_every, timeout=30) == refresh_every
        staleness.append(learner.metrics()["staleness_mean"])
        version, params = learner.params()
    final = chain_success_probability(net, params)
    learner.close()
    server.stop()
    assert initial < 0.2
    assert final > 0.9, (initial, final)
    assert np.mean(staleness[5:]) >= 1.0  # it really learnt from older versions


# --------------------------------------------------------------------------- measurements


def versioned_bandit_unrolls(versions, T, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for v, steps in zip(versions, bandit_unrolls(rng, len(versions), T)):
        out.append(Unroll(steps._replace(policy_version=np.full(T, v, np.int32)),
                          np.zeros(0, np.float32)))
    return out


def tiny_learner_setup(T=3, B=4, **replay):
    net = small_net(3, num_actions=3, size=8)
    example = example_for(net, 3, T)
    params = net.init(jax.random.PRNGKey(0), example.steps.observation[0])
    return net, example, params


def with_core(unrolls, example):
    return [u._replace(core_state=example.core_state) for u in unrolls]


@pytest.mark.replay
def test_staleness_and_sample_reuse_match_what_was_inserted_and_sampled():
    T, B = 3, 4
    net, example, params = tiny_learner_setup(T, B)
    fifo = LearnerConfig(batch_size=B, unroll_length=T, replay=ReplayConfig(
        table="fifo", selector="fifo", samples_per_insert=1.0, error_buffer=100.0))
    uniform = LearnerConfig(batch_size=B, unroll_length=T, replay=ReplayConfig(
        table="uniform", selector="uniform", samples_per_insert=2.0))
    sig = reverb_signature(example)
    server = reverb.Server([make_table(fifo.replay, sig, B), make_table(uniform.replay, sig, B)])
    address = f"localhost:{server.port}"
    client = reverb.Client(address)

    # FIFO, each item once: update k runs at learner version k on items 4k..4k+3.
    versions = [0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 2, 2]
    insert(client, "fifo", with_core(versioned_bandit_unrolls(versions, T), example))
    learner = Learner(net, params, fifo, example, reverb_address=address)
    assert learner.update(3, timeout=30) == 3
    m = learner.metrics()
    # per batch: staleness [0,0,0,0] -> 0; [1,0,0,0] -> 0.25 (max 1); [2,2,0,0] -> 1 (max 2)
    assert m["version"] == 3
    assert m["staleness_mean"] == pytest.approx((0 + 0.25 + 1.0) / 3)
    assert m["staleness_last"] == pytest.approx(1.0)
    assert m["staleness_max"] == 2
    assert (m["samples_inserted"], m["samples_consumed"]) == (12, 12)
    assert m["sample_reuse"] == pytest.approx(1.0)
    assert m["steps"] == 3 * B * (T - 1)
    learner.close()

    # Uniform, target reuse 2: 8 inserted, 16 consumed -> 2; then 8 more inserted and
    # 8 consumed -> recent 1, overall 24 / 16 = 1.5.
    insert(client, "uniform", with_core(versioned_bandit_unrolls([0] * 8, T, seed=1), example))
    learner = Learner(net, params, uniform, example, reverb_address=address)
    assert learner.update(4, timeout=30) == 4
    m = learner.metrics()
    assert (m["samples_inserted"], m["samples_consumed"]) == (8, 16)
    assert m["sample_reuse"] == pytest.approx(2.0) and m["sample_reuse_recent"] == pytest.approx(2.0)
    assert m["samples_sampled_by_server"] >= 16  # the prefetcher may be ahead
    insert(client, "uniform", with_core(versioned_bandit_unrolls([0] * 8, T, seed=2), example))
    assert learner.update(2, timeout=30) == 2
    m = learner.metrics()
    assert m["sample_reuse"] == pytest.approx(1.5) and m["sample_reuse_recent"] == pytest.approx(1.0)
    learner.close()
    server.stop()


def direct_batch(example, T, B, seed=0, versions=None):
    unrolls = with_core(versioned_bandit_unrolls(versions or [0] * B, T, seed=seed), example)
    return stack_unrolls(unrolls)


def test_non_finite_batch_is_skipped_and_counted():
    T, B = 3, 4
    net, example, params = tiny_learner_setup(T, B)
    learner = Learner(net, params, LearnerConfig(batch_size=B, unroll_length=T), example)
    learner.learn_from_batch(direct_batch(example, T, B))
    v1, p1 = learner.params()
    bad = direct_batch(example, T, B, seed=1)
    bad = bad._replace(steps=bad.steps._replace(reward=np.full_like(bad.steps.reward, np.nan)))
    learner.learn_from_batch(bad)
    v2, p2 = learner.params()
    assert (v1, v2) == (1, 1)
    assert learner.metrics()["updates_skipped"] == 1
    for a, b in zip(jax.tree_util.tree_leaves(p1), jax.tree_util.tree_leaves(p2)):
        np.testing.assert_array_equal(a, b)
        assert np.all(np.isfinite(b))
    learner.learn_from_batch(direct_batch(example, T, B, seed=2))
    assert learner.version() == 2 and learner.steps() == 2 * B * (T - 1)


def test_params_snapshot_and_reset():
    T, B = 3, 4
    net, example, params = tiny_learner_setup(T, B)
    learner = Learner(net, params, LearnerConfig(batch_size=B, unroll_length=T), example)
    assert learner.params(min_version=1) is None
    learner.learn_from_batch(direct_batch(example, T, B))
    version, snap = learner.snapshot()
    assert version == 1 and learner.params(min_version=1)[0] == 1
    learner.learn_from_batch(direct_batch(example, T, B, seed=1))
    changed = learner.params()[1]
    assert any(not np.array_equal(a, b) for a, b in
               zip(jax.tree_util.tree_leaves(snap), jax.tree_util.tree_leaves(changed)))
    assert learner.reset(params) == 3  # the version goes on
    for a, b in zip(jax.tree_util.tree_leaves(learner.params()[1]), jax.tree_util.tree_leaves(params)):
        np.testing.assert_array_equal(a, b)
    opt_count = jax.tree_util.tree_leaves(learner._state.opt_state)[0]
    assert int(opt_count) == 0  # fresh optimiser state (Adam's step count)


def test_checkpoint_restore_continues_the_version_sequence(tmp_path):
    T, B = 3, 4
    net, example, params = tiny_learner_setup(T, B)
    config = LearnerConfig(batch_size=B, unroll_length=T, checkpoint_every=2)
    a = Learner(net, params, config, example, checkpoint_dir=str(tmp_path / "main_0"))
    for i in range(3):
        a.learn_from_batch(direct_batch(example, T, B, seed=i))
    a.close()
    path = tmp_path / "main_0" / "checkpoint.msgpack"
    assert path.exists() and not list((tmp_path / "main_0").glob("*.tmp*"))
    b = Learner(net, params, config, example, checkpoint_dir=str(tmp_path / "main_0"))
    assert (b.version(), b.steps()) == (3, 3 * B * (T - 1))
    # optimiser state restored too: the next update equals the one the first learner makes
    a.learn_from_batch(direct_batch(example, T, B, seed=9))
    b.learn_from_batch(direct_batch(example, T, B, seed=9))
    assert b.version() == 4
    for x, y in zip(jax.tree_util.tree_leaves(a.params()[1]), jax.tree_util.tree_leaves(b.params()[1])):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)

    # not a checkpoint at all, and no previous one to fall back to: refused, not overwritten
    (tmp_path / "main_0" / "checkpoint.previous.msgpack").unlink()
    path.write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="checkpoint.msgpack.*Move it aside"):
        Learner(net, params, config, example, checkpoint_dir=str(tmp_path / "main_0"))
    assert path.read_bytes() == b"\x00garbage"  # not overwritten


TWO_DEVICES = textwrap.dedent("""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import sys
    sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
    import jax, numpy as np
    assert len(jax.local_devices()) == 2, jax.local_devices()
    from test_learner import tiny_learner_setup, direct_batch
    from learners.learner import Learner, LearnerConfig
    T, B = 3, 8
    net, example, params = tiny_learner_setup(T, B)
    results = []
    for devices in (jax.local_devices()[:1], jax.local_devices()):
        learner = Learner(net, params, LearnerConfig(batch_size=B, unroll_length=T), example,
                          devices=devices)
        for i in range(3):
            learner.learn_from_batch(direct_batch(example, T, B, seed=i))
        p = learner._state.params
        leaf = jax.tree_util.tree_leaves(p)[0]
        print("devices", len(devices), "params on", len(leaf.sharding.device_set))
        results.append(learner.params()[1])
    worst = max(float(np.max(np.abs(a - b))) for a, b in
                zip(jax.tree_util.tree_leaves(results[0]), jax.tree_util.tree_leaves(results[1])))
    changed = max(float(np.max(np.abs(a - b))) for a, b in
                  zip(jax.tree_util.tree_leaves(results[1]), jax.tree_util.tree_leaves(params)))
    print("max difference", worst, "change", changed)
    assert changed > 1e-4 and worst < 1e-5
    print("OK")
""")


def test_two_virtual_devices_match_one_device():
    code = TWO_DEVICES.format(repo=REPO, tests=os.path.join(REPO, "tests"))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "devices 2 params on 2" in proc.stdout and "OK" in proc.stdout


def test_kl_teacher_is_unrolled_from_the_teachers_own_state():
    """The KL term evaluates the teacher on the unroll's observations from the teacher's own
    recurrent state (stored beside the policy's), not from the student's: checked against a
    step-by-step numpy reference of KL(teacher || student) summed over actions."""
    from learners.update import make_optimizer, make_update_fn

    T, B, size = 5, 3, 8
    net = small_net(4, num_actions=3, size=size)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(B, T, 4)).astype(np.float32)
    student = net.init(jax.random.PRNGKey(1), obs[0, 0])
    teacher = net.init(jax.random.PRNGKey(2), obs[0, 0])
    student_state = jax.tree_util.tree_map(lambda x: rng.normal(size=(B, size)).astype(np.float32),
                                           net.initial_state(B))
    teacher_state = jax.tree_util.tree_map(lambda x: rng.normal(size=(B, size)).astype(np.float32),
                                           net.initial_state(B))
    first = np.zeros((B, T), bool)
    first[1, 2] = True  # one game starts mid-unroll: both cores reset there
    steps = Step(observation=obs, opponent_observation=obs,
                 action={"action": rng.integers(0, 3, (B, T)).astype(np.int32)},
                 behaviour_log_prob={"action": np.full((B, T), np.log(1 / 3), np.float32)},
                 reward=np.zeros((B, T), np.float32), discount=np.ones((B, T), np.float32),
                 first=first, policy_version=np.zeros((B, T), np.int32))
    batch = Unroll(steps=steps, core_state=(student_state, teacher_state))
    config = LearnerConfig(batch_size=B, unroll_length=T,
                           loss=losses.LossConfig(kl_teacher_weight=1.0))
    optimizer = make_optimizer(config)
    update = jax.jit(make_update_fn(net, config, optimizer))
    from learners.update import TrainingState

    state = TrainingState(student, optimizer.init(student), np.int32(0), np.int32(0))
    _, metrics = update(state, time_major(batch), teacher)   # the update reads [T, B]

    def logits_stepwise(params, core):
        out = []
        for t in range(T - 1):   # the learnt steps
            o, core = net.step(params, obs[:, t], core, first[:, t])
            out.append(np.asarray(o.logits["action"], np.float64))
        return np.stack(out)

    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    log_s = log_softmax(logits_stepwise(student, student_state))
    log_t = log_softmax(logits_stepwise(teacher, teacher_state))
    expected = np.mean(np.sum(np.exp(log_t) * (log_t - log_s), -1))
    wrong = log_softmax(logits_stepwise(teacher, student_state))
    assert abs(np.mean(np.sum(np.exp(wrong) * (wrong - log_s), -1)) - expected) > 1e-3
    assert float(metrics["loss/kl_teacher"]) == pytest.approx(expected, rel=1e-4)


def test_a_learning_rate_scale_multiplies_the_named_parameters_step_and_no_other():
    """--learner.learning_rate_scales=policy_action=10: on Adam's first step (m_hat = g,
    v_hat = g^2, so the step is -alpha g / (|g| + eps): -alpha sign(g), Kingma & Ba 2015, Alg. 1,
    worked by hand) the policy head's parameters move 10 alpha, every other parameter alpha; a
    NAME in no parameter's path, or a malformed pair, is an error."""
    from learners.update import TrainingState, make_optimizer, make_update_fn

    T, B, lr = 6, 4, 1e-3
    net = small_net(4, num_actions=3, size=8)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(B, T, 4)).astype(np.float32)
    params = net.init(jax.random.PRNGKey(1), obs[0, 0])
    steps = Step(observation=obs, opponent_observation=obs,
                 action={"action": rng.integers(0, 3, (B, T)).astype(np.int32)},
                 behaviour_log_prob={"action": np.full((B, T), np.log(1 / 3), np.float32)},
                 reward=rng.normal(size=(B, T)).astype(np.float32), discount=np.ones((B, T), np.float32),
                 first=np.zeros((B, T), bool), policy_version=np.zeros((B, T), np.int32))
    batch = time_major(Unroll(steps=steps, core_state=net.initial_state(B)))

    def moved(scales):
        config = LearnerConfig(batch_size=B, unroll_length=T, learning_rate=lr, max_grad_norm=None,
                               adam_eps=1e-20, learning_rate_scales=scales)   # g / (|g| + eps) = sign(g)
        optimizer = make_optimizer(config)
        update = jax.jit(make_update_fn(net, config, optimizer))
        state, _ = update(TrainingState(params, optimizer.init(params), np.int32(0), np.int32(0)),
                          batch, None)
        return {k: {n: np.abs(np.asarray(state.params[k][n]) - np.asarray(params[k][n])) for n in params[k]}
                for k in params}

    scaled = moved("policy_action=10")
    for module, leaves in scaled.items():
        for name, step in leaves.items():
            learnt = step[step > 0]   # parameters whose gradient is 0 do not move
            assert learnt.size > step.size // 2, (module, name)
            expected = 10 * lr if module.endswith("policy_action") else lr
            np.testing.assert_allclose(learnt, expected, rtol=1e-3, err_msg=f"{module}/{name}")
    with pytest.raises(ValueError, match="policy_composition, part of no parameter's path.*policy_action"):
        moved("policy_composition=10")
    for bad in ("policy_action", "policy_action=0", "=3", "policy_action=x"):
        with pytest.raises(ValueError, match="NAME=K pairs"):
            LearnerConfig(learning_rate_scales=bad)


def test_a_ppo_run_optimises_the_clipped_objective():
    """--policy_loss=ppo reaches the learner: the loss it minimises is PPO's clipped surrogate
    on GAE(0.95) advantages with discount 0.9993 (OpenAI Five, Table 2), checked against a
    numpy loop of PPO eq. 7 and GAE eq. 16 on a batch whose ratios fall outside the clip."""
    from experiments.config import RunConfig
    from learners.update import TrainingState, make_optimizer, make_update_fn

    loss_config = RunConfig.make(game="kuhn_poker", policy_loss="ppo").learner.loss
    assert (loss_config.policy_loss, loss_config.upgo_weight, loss_config.gae_lambda) == ("ppo", 0.0, 0.95)
    T, B = 6, 4
    net = small_net(3, num_actions=3, size=8)
    rng = np.random.default_rng(3)
    obs = rng.normal(size=(B, T, 3)).astype(np.float32)
    actions = rng.integers(0, 3, (B, T)).astype(np.int32)
    behaviour = np.log(rng.uniform(0.05, 0.9, (B, T))).astype(np.float32)  # ratios far from 1
    rewards = rng.normal(size=(B, T)).astype(np.float32)
    discounts = np.ones((B, T), np.float32)
    discounts[2, 3] = 0.0
    first = np.zeros((B, T), bool)
    first[2, 4] = True
    params = net.init(jax.random.PRNGKey(0), obs[0, 0])
    state0 = net.initial_state(B)
    steps = Step(observation=obs, opponent_observation=obs, action={"action": actions},
                 behaviour_log_prob={"action": behaviour}, reward=rewards, discount=discounts,
                 first=first, policy_version=np.zeros((B, T), np.int32))
    config = LearnerConfig(batch_size=B, unroll_length=T, loss=loss_config)
    optimizer = make_optimizer(config)
    update = jax.jit(make_update_fn(net, config, optimizer))
    state = TrainingState(params, optimizer.init(params), np.int32(0), np.int32(0))
    _, metrics = update(state, time_major(Unroll(steps, state0)), None)

    out, _ = net.unroll(params, np.swapaxes(obs, 0, 1), np.swapaxes(first, 0, 1), state0)
    logits = np.asarray(out.logits["action"], np.float64)           # [T, B, A]
    values = np.asarray(out.value, np.float64)                      # [T, B]
    log_pi = logits - logits.max(-1, keepdims=True)
    log_pi = log_pi - np.log(np.exp(log_pi).sum(-1, keepdims=True))
    log_pi_a = np.take_along_axis(log_pi, actions.T[..., None], -1)[..., 0]
    ratio = np.exp(log_pi_a[:-1] - behaviour.T[:-1])
    gamma = 0.9993 * discounts.T[:-1]
    advantages = np.zeros((T - 1, B))
    running = np.zeros(B)
    for t in reversed(range(T - 1)):
        delta = rewards.T[t] + gamma[t] * values[t + 1] - values[t]
        running = delta + gamma[t] * 0.95 * running
        advantages[t] = running
    surrogate = np.minimum(ratio * advantages, np.clip(ratio, 0.8, 1.2) * advantages)
    assert np.mean(np.abs(ratio - 1) > 0.2) > 0.3                   # the clip matters here
    assert float(metrics["loss/policy"]) == pytest.approx(-surrogate.mean(), rel=1e-4)
    assert float(metrics["ppo_clipped_fraction"]) == pytest.approx(np.mean(np.abs(ratio - 1) > 0.2))
    assert "loss/upgo" not in metrics



def uniform_behaviour_batch(seed, T, B):
    """(a small network, observations [B, T, 3], a batch of B unrolls of T steps with random
    observations, actions and rewards, played by a uniform behaviour policy)."""
    net = small_net(3, num_actions=3, size=8)
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(B, T, 3)).astype(np.float32)
    steps = Step(observation=obs, opponent_observation=obs,
                 action={"action": rng.integers(0, 3, (B, T)).astype(np.int32)},
                 behaviour_log_prob={"action": np.full((B, T), np.log(1 / 3), np.float32)},
                 reward=rng.normal(size=(B, T)).astype(np.float32),
                 discount=np.ones((B, T), np.float32), first=np.zeros((B, T), bool),
                 policy_version=np.zeros((B, T), np.int32))
    return net, obs, steps


def test_the_learner_anneals_the_entropy_weight_with_its_version():
    """The update reads the entropy weight from the schedule at the state's version: at
    version 0 the loss's entropy term has weight 0.1, at version 30 of a 30-update anneal to
    0.001 it has 0.001 (same batch, same parameters: only the weight differs)."""
    from learners.update import TrainingState, make_optimizer, make_update_fn

    T, B = 5, 3
    net, obs, steps = uniform_behaviour_batch(4, T, B)
    loss = losses.LossConfig(entropy_weight=0.1, entropy_weight_end=0.001, entropy_anneal_updates=30)
    config = LearnerConfig(batch_size=B, unroll_length=T, loss=loss)
    optimizer = make_optimizer(config)
    update = jax.jit(make_update_fn(net, config, optimizer))
    params = net.init(jax.random.PRNGKey(0), obs[0, 0])
    totals = {}
    for version in (0, 30):
        state = TrainingState(params, optimizer.init(params), np.int32(version), np.int32(0))
        _, metrics = update(state, time_major(Unroll(steps, net.initial_state(B))), None)
        totals[version] = metrics
    assert float(totals[0]["entropy_weight"]) == pytest.approx(0.1)
    assert float(totals[30]["entropy_weight"]) == pytest.approx(0.001)
    entropy_term = float(totals[0]["loss/entropy"])
    assert entropy_term < 0
    assert float(totals[30]["loss/total"]) - float(totals[0]["loss/total"]) == pytest.approx(
        (0.001 - 0.1) * entropy_term, rel=1e-4)


def test_the_magnet_is_replaced_by_the_parameters_every_magnet_every_updates():
    """With `magnet_weight` the update carries a magnet: the parameters it started from until
    the version reaches `magnet_every` (here 3), then the parameters of that update. The loss's
    KL to the magnet is 0 while they are equal and > 0 once the parameters have moved."""
    from learners.update import TrainingState, make_optimizer, make_update_fn

    T, B = 5, 3
    net, obs, steps = uniform_behaviour_batch(5, T, B)
    config = LearnerConfig(batch_size=B, unroll_length=T, learning_rate=1e-2,
                           loss=losses.LossConfig(magnet_weight=0.5, magnet_every=3))
    optimizer = make_optimizer(config)
    update = jax.jit(make_update_fn(net, config, optimizer))
    params = net.init(jax.random.PRNGKey(0), obs[0, 0])
    state = TrainingState(params, optimizer.init(params), np.int32(0), np.int32(0), magnet=params)
    batch = time_major(Unroll(steps, net.initial_state(B)))
    kls, magnets, params_seen = [], [], []
    for _ in range(4):
        state, metrics = update(state, batch, None)
        kls.append(float(metrics["loss/kl_magnet"]))
        magnets.append(state.magnet)
        params_seen.append(state.params)

    def same(a, b):
        return all(np.allclose(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))

    assert kls[0] == pytest.approx(0.0, abs=1e-7) and kls[1] > 1e-6 and kls[2] > kls[1]
    assert same(magnets[0], params) and same(magnets[1], params)       # versions 1, 2: unchanged
    assert same(magnets[2], params_seen[2]) and not same(magnets[2], params)  # version 3: replaced
    assert same(magnets[3], params_seen[2])                              # version 4: kept
    assert kls[3] < kls[2]   # measured against the new magnet, one update away


def test_a_checkpoint_with_per_parameter_adam_state_resumes_with_the_same_state(tmp_path):
    """Checkpoints written before the optimiser ran on the flattened parameters (optax.flatten)
    hold Adam's moments per parameter: restoring flattens them in optax.flatten's order, so the
    resumed state equals the one the flat optimiser reaches on the same updates."""
    import jax.numpy as jnp

    from learners import checkpoint
    from learners.checkpoint import restore_migrating
    from learners.update import make_optimizer

    config = LearnerConfig()
    params = {"a": {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}, "c": {"w": jnp.arange(4.0)}}
    grads = jax.tree_util.tree_map(lambda x: x * 0.3 + 1.0, params)
    per_param, flat = make_optimizer(config, flat=False), make_optimizer(config)
    old_state, flat_state = per_param.init(params), flat.init(params)
    for _ in range(3):
        _, old_state = per_param.update(grads, old_state, params)
        _, flat_state = flat.update(grads, flat_state, params)
    path = str(tmp_path / "checkpoint.msgpack")
    checkpoint.save(path, checkpoint.Checkpoint(3, 10, 0, params, old_state))
    restored = restore_migrating(path, params, flat, per_param)
    assert restored.version == 3
    for a, b in zip(jax.tree_util.tree_leaves(restored.opt_state),
                    jax.tree_util.tree_leaves(flat_state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    # a checkpoint of other parameters is still refused, with the flat template's message
    checkpoint.save(path, checkpoint.Checkpoint(3, 10, 0, {"z": jnp.ones(2)}, old_state))
    with pytest.raises(CheckpointError, match="cannot restore"):
        restore_migrating(path, params, flat, per_param)


def _noise(path, seed=0):
    """4 KB of noise (a quarter of the file if smaller) written into the middle of `path`: the
    file keeps its size and its msgpack layout may still parse."""
    data = bytearray(path.read_bytes())
    n = min(4096, len(data) // 4)
    start = len(data) // 2 - n // 2
    data[start:start + n] = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))


def test_a_damaged_checkpoint_is_set_aside_and_the_previous_one_restored(tmp_path, capsys):
    """Issue 31: noise in the latest learner checkpoint is found by its checksum; the learner
    restores the previous of the two it keeps, moves the damaged file aside and says so. With
    both damaged: CheckpointError naming both, every file left as it was."""
    T, B = 3, 4
    net, example, params = tiny_learner_setup(T, B)
    config = LearnerConfig(batch_size=B, unroll_length=T, checkpoint_every=1)
    directory = tmp_path / "main_0"
    a = Learner(net, params, config, example, checkpoint_dir=str(directory))
    for i in range(3):   # checkpoints after updates 1, 2, 3: the last two are kept
        a.learn_from_batch(direct_batch(example, T, B, seed=i))
    latest, previous = directory / "checkpoint.msgpack", directory / "checkpoint.previous.msgpack"
    assert latest.exists() and previous.exists()
    _noise(latest)
    b = Learner(net, params, config, example, checkpoint_dir=str(directory))
    assert (b.version(), b.steps()) == (2, 2 * B * (T - 1))   # the previous checkpoint's
    out = capsys.readouterr().out
    assert "checkpoint.msgpack is damaged" in out and "checksum" in out and "version 2" in out, out
    aside = list(directory.glob("checkpoint.msgpack.damaged-*"))
    assert len(aside) == 1 and not latest.exists()
    # the restored state is the second update's: it equals a learner that stopped there
    for x, y in zip(jax.tree_util.tree_leaves(b._state.params),
                    jax.tree_util.tree_leaves(_params_after(net, params, config, example, T, B, 2))):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
    b.save_checkpoint()
    b.save_checkpoint()
    _noise(latest, seed=1)
    _noise(previous, seed=2)
    before = (latest.read_bytes(), previous.read_bytes())
    with pytest.raises(CheckpointError, match="no good learner checkpoint.*checkpoint.msgpack.*previous"):
        Learner(net, params, config, example, checkpoint_dir=str(directory))
    assert (latest.read_bytes(), previous.read_bytes()) == before


def _params_after(net, params, config, example, T, B, updates):
    learner = Learner(net, params, config, example)
    for i in range(updates):
        learner.learn_from_batch(direct_batch(example, T, B, seed=i))
    return learner._state.params


def test_exploiters_learn_best_responses_and_main_agents_keep_the_regularised_loss():
    """`LossConfig.for_role` through the run's per-agent learner configs: a Kuhn league's main
    agent keeps the magnet and the entropy annealing; its main and league exploiters get
    neither, and `exploiter_entropy_weight` as their entropy weight."""
    from experiments.build import agent_learner_configs
    from experiments.config import RunConfig

    config = RunConfig.make(game="kuhn_poker", **{
        "learner.loss.magnet_weight": 0.2, "learner.loss.entropy_weight": 0.1,
        "learner.loss.entropy_weight_end": 0.01, "learner.loss.entropy_anneal_updates": 100,
        "learner.loss.exploiter_entropy_weight": 0.005, "learner.learning_rate": 0.002,
        "learner.exploiter_learning_rate": 0.005})
    agents = ["any_main_agent_0", "any_main_exploiter_0", "any_league_exploiter_0", "any_league_exploiter_1"]
    configs = agent_learner_configs(config, agents)
    main = configs["any_main_agent_0"].loss
    assert (main.magnet_weight, main.entropy_weight, main.entropy_weight_end) == (0.2, 0.1, 0.01)
    assert configs["any_main_agent_0"].learning_rate == 0.002
    for agent in agents[1:]:
        loss = configs[agent].loss
        assert (loss.magnet_weight, loss.entropy_weight, loss.entropy_weight_end) == (0.0, 0.005, None)
        assert configs[agent].learning_rate == 0.005
    plain = RunConfig.make(game="matrix_rps")   # without the exploiters' settings: the run's
    exploiter = agent_learner_configs(plain, agents[1:2])["any_main_exploiter_0"]
    assert exploiter.loss.entropy_weight == plain.learner.loss.entropy_weight
    assert exploiter.learning_rate == plain.learner.learning_rate


def test_exploiter_learning_rate_reaches_the_optimizer():
    """Adam's first step moves each parameter by about the learning rate (m/sqrt(v) = sign(g)
    at step 1): an exploiter's learner built from `for_role(False)` steps by the exploiters'
    rate, a main agent's by the run's."""
    import jax
    import numpy as np

    from learners.config import LearnerConfig
    from learners.update import make_optimizer

    config = LearnerConfig(learning_rate=1e-3, exploiter_learning_rate=4e-3, max_grad_norm=None)
    params = {"w": np.ones(5, np.float32)}
    grads = {"w": np.asarray([0.5, -2.0, 3.0, -0.1, 1.0], np.float32)}
    for main_agent, rate in ((True, 1e-3), (False, 4e-3)):
        optimizer = make_optimizer(config.for_role(main_agent))
        step, _ = optimizer.update(grads, optimizer.init(params), params)
        np.testing.assert_allclose(np.asarray(jax.tree_util.tree_leaves(step)[0]), -rate * np.sign(grads["w"]),
                                   rtol=1e-4)
    with pytest.raises(ValueError, match="exploiter_learning_rate must be > 0"):
        LearnerConfig(exploiter_learning_rate=0.0)


def test_exploiters_take_their_exploration_and_main_agents_the_runs():
    from learners.config import LearnerConfig

    config = LearnerConfig(exploration=0.05, exploiter_exploration=0.2)
    assert (config.for_role(True).exploration, config.for_role(False).exploration) == (0.05, 0.2)
    assert LearnerConfig(exploration=0.05).for_role(False).exploration == 0.05
    assert LearnerConfig().for_role(False).exploration == 0.0
    with pytest.raises(ValueError, match=r"exploiter_exploration must be in \[0, 1\); got 1.0"):
        LearnerConfig(exploiter_exploration=1.0)
