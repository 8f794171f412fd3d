"""The reference network: step-by-step equals unroll (with resets), masks, serialisation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import trajectory
from agents.networks import (
    MASKED_LOGIT,
    NetworkConfig,
    ReferenceNetwork,
    exploring_log_probs,
    log_probs,
    sample_actions,
)
from agents.storage import params_from_npz_bytes, params_to_npz_bytes


def make(value_uses_opponent=False):
    net = ReferenceNetwork(NetworkConfig(heads={"kind": 3, "target": 5}, mlp_sizes=(16, 16),
                                         lstm_size=12, value_uses_opponent=value_uses_opponent))
    obs = {"features": np.zeros(6, np.float32), "extra": np.zeros((2, 2), np.float32),
           "action_mask": {"target": np.ones(5, bool)}}
    return net, obs, net.init(jax.random.PRNGKey(0), obs)


def random_obs(rng, lead):
    return {"features": rng.normal(size=(*lead, 6)).astype(np.float32),
            "extra": rng.normal(size=(*lead, 2, 2)).astype(np.float32),
            "action_mask": {"target": rng.random(size=(*lead, 5)) > 0.4}}


@pytest.mark.parametrize("value_uses_opponent", [False, True])
def test_step_by_step_equals_unroll_with_resets(value_uses_opponent):
    net, _, params = make(value_uses_opponent)
    rng = np.random.default_rng(0)
    T, B = 7, 3
    obs, opp = random_obs(rng, (T, B)), random_obs(rng, (T, B))
    first = rng.random(size=(T, B)) < 0.3
    state0 = jax.tree_util.tree_map(lambda x: x + 0.5, net.initial_state(B))  # non-trivial start
    out, final = net.unroll(params, obs, first, state0, opp)
    state = state0
    for t in range(T):
        at_t = jax.tree_util.tree_map(lambda x, t=t: x[t], (obs, opp))
        o, state = net.step(params, at_t[0], state, first[t], at_t[1])
        np.testing.assert_allclose(o.value, out.value[t], atol=1e-5)
        for h in o.logits:
            np.testing.assert_allclose(o.logits[h], out.logits[h][t], atol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(final)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_first_resets_the_core():
    net, _, params = make()
    rng = np.random.default_rng(1)
    obs = jax.tree_util.tree_map(lambda x: x[0], random_obs(rng, (1, 2)))
    fresh, _ = net.step(params, obs, net.initial_state(2), np.array([True, True]))
    dirty = jax.tree_util.tree_map(lambda x: x + 1.0, net.initial_state(2))
    reset, _ = net.step(params, obs, dirty, np.array([True, False]))
    np.testing.assert_allclose(reset.value[0], fresh.value[0], atol=1e-6)
    assert abs(float(reset.value[1] - fresh.value[1])) > 1e-6


def test_masked_actions_get_no_probability_and_opponent_changes_only_value():
    net, _, params = make(value_uses_opponent=True)
    rng = np.random.default_rng(2)
    obs, opp = random_obs(rng, (4,)), random_obs(rng, (4,))
    out, _ = net.step(params, obs, net.initial_state(4), None, opp)
    mask = obs["action_mask"]["target"]
    assert np.all(np.asarray(out.logits["target"])[~mask] == MASKED_LOGIT)
    actions, logp = sample_actions(jax.random.PRNGKey(0), out.logits)
    assert np.all(mask[np.arange(4), np.asarray(actions["target"])])
    np.testing.assert_allclose(logp["kind"], log_probs(out.logits, actions)["kind"])
    out2, _ = net.step(params, obs, net.initial_state(4), None,
                       jax.tree_util.tree_map(lambda x: x * 2.0 + 1.0, opp))
    np.testing.assert_array_equal(out.logits["kind"], out2.logits["kind"])
    assert not np.allclose(out.value, out2.value)


def test_params_bytes_round_trip_with_version():
    net, _, params = make()
    version, restored = params_from_npz_bytes(params_to_npz_bytes(params, 42))
    assert version == 42
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(
        jax.tree_util.tree_map(np.asarray, params))
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(restored)):
        np.testing.assert_array_equal(a, b)
    data = bytearray(params_to_npz_bytes({"x": jnp.arange(64.0)}, 1))
    data[len(data) // 3] ^= 0xFF   # one damaged byte: the zip's CRC catches it
    with pytest.raises(ValueError, match="not a readable parameter file"):
        params_from_npz_bytes(bytes(data))


def test_a_spurious_ast_error_from_another_thread_does_not_make_a_sound_file_corrupt(monkeypatch):
    """CPython 3.11's AST constructor keeps its recursion depth interpreter-wide (gh-106905): a
    garbage collection that switches to another thread's `ast` use in the middle of numpy's
    header parse (`ast.literal_eval`) raises SystemError on sound bytes. That race is injected
    here at the call it hits; the reader retries it, and only a file that keeps failing is
    refused."""
    import ast
    real = ast.literal_eval
    failures = {"left": 2}

    def racing(source):
        if failures["left"] > 0:
            failures["left"] -= 1
            raise SystemError("AST constructor recursion depth mismatch (before=42, after=52)")
        return real(source)

    monkeypatch.setattr(ast, "literal_eval", racing)
    data = params_to_npz_bytes({"x": jnp.arange(6.0)}, 3)
    version, restored = params_from_npz_bytes(data)
    assert failures["left"] == 0 and version == 3
    np.testing.assert_array_equal(restored["x"], np.arange(6.0))
    failures["left"] = 10 ** 6   # a file that never reads is still refused, with the cause
    with pytest.raises(ValueError, match="not a readable parameter file.*recursion depth mismatch"):
        params_from_npz_bytes(data)


def test_trajectory_helpers():
    net, obs, _ = make()
    core = jax.tree_util.tree_map(lambda x: np.asarray(x[0]), net.initial_state(1))
    example = trajectory.zeros_unroll(obs, obs, ["kind", "target"], core, 5)
    assert trajectory.validate_unroll(example, 5) == 5
    tm = trajectory.stack_unrolls([example, example, example])   # time-major
    assert tm.steps.reward.shape == (5, 3) and tm.steps.observation["extra"].shape == (5, 3, 2, 2)
    assert tm.core_state.hidden.shape == (3, 12) and trajectory.batch_size(tm) == 3
    # tf.data's batch-major batches are turned into the same layout
    batch_major = jax.tree_util.tree_map(lambda *xs: np.stack(xs), example, example, example)
    assert batch_major.steps.reward.shape == (3, 5)
    again = trajectory.time_major(batch_major)
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, again, tm))
    # one item back out, and two batches side by side
    item = trajectory.take(tm, 1)
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, item, example))
    assert trajectory.batch_size(trajectory.concat(tm, tm)) == 6
    bad = example._replace(steps=example.steps._replace(reward=example.steps.reward.astype(np.float64)))
    with pytest.raises(ValueError, match="reward"):
        trajectory.validate_unroll(bad)


@pytest.mark.replay
def test_reverb_signature_has_the_unrolls_shapes():
    net, obs, _ = make()
    core = jax.tree_util.tree_map(lambda x: np.asarray(x[0]), net.initial_state(1))
    example = trajectory.zeros_unroll(obs, obs, ["kind", "target"], core, 5)
    sig = trajectory.reverb_signature(example)
    assert tuple(sig.steps.observation["features"].shape) == (5, 6)


def test_without_a_core_the_network_is_a_feed_forward_mlp():
    """`lstm_size=0` (poker's `--network.core_size=0`): no LSTM parameters, a core state of
    width 1 passed through unchanged, outputs that depend on the current step only, and step
    equal to unroll."""
    from actors.games.poker import openspiel as poker
    from actors.games.poker import policy as poker_policy
    from agents import make_network

    game = poker.load_game("leduc_poker")
    spec = poker.make_spec(game)
    net = make_network(spec, hidden_size=16, core_size=0)
    assert net.config.lstm_size == 0 and net.config.mlp_sizes == (16, 16)
    obs = spec.side(0).zero_observation()
    params = net.init(jax.random.PRNGKey(0), obs, opponent_observation=obs)
    assert not any("lstm" in name for name in params), sorted(params)
    assert any("torso/~/linear_1" in name for name in params), sorted(params)
    state = net.initial_state(3)
    assert all(x.shape == (3, 1) for x in jax.tree_util.tree_leaves(state))
    # One game's decisions, through the real pool's observations, as the exact converter sees them.
    walk = poker_policy.PolicyWalk(game, net)
    level = walk.levels[1]
    n = len(level["index"])
    held = jax.tree_util.tree_map(lambda x: x + 0.5, net.initial_state(n))
    out, new_state = net.step(params, level["obs"][0], held, np.zeros(n, bool))
    for a, b in zip(jax.tree_util.tree_leaves(new_state), jax.tree_util.tree_leaves(held)):
        np.testing.assert_array_equal(a, b)
    # The same step with `first` set gives the same outputs: there is no memory to reset.
    out_first, _ = net.step(params, level["obs"][0], net.initial_state(n), np.ones(n, bool))
    np.testing.assert_allclose(out.logits["action"], out_first.logits["action"], atol=1e-6)
    seq = jax.tree_util.tree_map(lambda x: np.stack([x, x[::-1]]), level["obs"][0])
    unrolled, _ = net.unroll(params, seq, np.zeros((2, n), bool), net.initial_state(n))
    np.testing.assert_allclose(unrolled.logits["action"][0], out.logits["action"], atol=1e-5)
    np.testing.assert_allclose(unrolled.logits["action"][1], out.logits["action"][::-1], atol=1e-5)
    report = {}
    table = poker_policy.network_policy(game, net, params, walk=walk, report=report)
    assert report["max_infostate_spread"] < 1e-6
    np.testing.assert_allclose(table.action_probability_array.sum(-1), 1.0, atol=1e-6)


def tilted(params, by: float = 2.0):
    """`params` with every policy head's bias raised by `by` on action 0: pi far from uniform."""
    import haiku as hk

    return hk.data_structures.map(
        lambda module, name, x: jnp.asarray(x).at[0].add(by) if "policy_" in module and name == "b" else x, params)


def test_the_exploring_behaviour_policy_worked_by_hand():
    """pi = (0.25, 0.75, masked), epsilon 0.2, 2 legal actions: mu = 0.8 pi + 0.1 on the legal
    ones = (0.3, 0.7, 0). `agents.act` with `exploration` samples from mu and reports log mu."""
    from agents import act

    logits = {"a": jnp.asarray([[0.0, np.log(3.0), MASKED_LOGIT]], jnp.float32)}
    mu = np.exp(np.asarray(exploring_log_probs(logits, 0.2)["a"][0]))
    np.testing.assert_allclose(mu, [0.3, 0.7, 0.0], atol=1e-6)
    np.testing.assert_allclose(np.exp(np.asarray(exploring_log_probs(logits, 0.0)["a"][0])), [0.25, 0.75, 0.0],
                               atol=1e-6)

    net = ReferenceNetwork(NetworkConfig(heads={"a": 3}, mlp_sizes=(8,), lstm_size=0))
    n = 20000
    obs = {"features": np.zeros((n, 4), np.float32),
           "action_mask": {"a": np.tile(np.asarray([True, True, False]), (n, 1))}}
    params = net.init(jax.random.PRNGKey(0), {"features": obs["features"][0],
                                              "action_mask": {"a": obs["action_mask"]["a"][0]}})
    params = tilted(params)
    out, _ = net.step(params, obs, net.initial_state(n))
    pi = np.asarray(jax.nn.softmax(out.logits["a"][0]))
    expected = 0.6 * pi + 0.4 * np.asarray([0.5, 0.5, 0.0])
    action, _ = act(net, params, jax.random.PRNGKey(1), obs, net.initial_state(n), exploration=0.4)
    taken = np.asarray(action.game["a"])
    assert not np.any(taken == 2)
    np.testing.assert_allclose(np.bincount(taken, minlength=3) / n, expected, atol=0.015)
    np.testing.assert_allclose(np.exp(np.asarray(action.log_probs["a"])), expected[taken], rtol=1e-4)
    assert abs(expected[0] - pi[0]) > 0.03   # the test tells mu from pi


def test_the_game_capability_not_the_head_names_picks_the_unit_network():
    """`agents.make_network` builds the unit network where the caller says the game has the
    `unit_network` capability (`unit=True`), and the plain network otherwise: a spec with the unit
    network's per-unit heads but without the capability gets the plain network. A run's network
    (`experiments.build.make_network`) follows its game's capability."""
    from agents import make_network
    from agents.specs import (
        ActionSpec,
        ArraySpec,
        DiscreteHead,
        GameSpec,
        ObservationSpec,
        SideSpec,
    )
    from agents.unit_network import UnitNetwork
    from experiments import build
    from experiments.config import RunConfig, game_of

    n = 3
    heads = {"composition": DiscreteHead(3), "action_type": DiscreteHead(6, (n,), pointer_types=(5,)),
             "target": DiscreteHead(n, (n,))}
    side = SideSpec(ObservationSpec({"units": ArraySpec((n, 13 * (2 * n - 1) + 10), np.float32),
                                     "alive": ArraySpec((n,), np.bool_)}), ActionSpec(heads), num_units=n)
    spec = GameSpec("units_without_the_capability", (side, side), 10)
    plain = make_network(spec)
    assert type(plain) is ReferenceNetwork and plain.config.heads == {"composition": 3, "action_type": 6, "target": n}
    assert type(make_network(spec, unit=False, hidden_size=8)) is ReferenceNetwork
    unit = make_network(spec, unit=True, hidden_size=8, core_size=8)
    assert isinstance(unit, UnitNetwork) and unit.config.pointer_action_types == (5,)
    assert unit.config.num_units == n and unit.config.embed_size == 8
    poker = RunConfig.make(game="kuhn_poker")
    assert not poker.game_info.capabilities.unit_network and game_of("smax_races").capabilities.unit_network
    assert type(build.make_network(poker, spec)) is ReferenceNetwork
    assert isinstance(build.make_network(RunConfig(game="smax_races"), spec), UnitNetwork)
    matrix = SideSpec(ObservationSpec({"x": ArraySpec((2,), np.float32)}), ActionSpec({"a": DiscreteHead(3)}))
    with pytest.raises(ValueError, match="unit network needs the action heads"):
        make_network(GameSpec("matrix", (matrix, matrix), 1), unit=True)
