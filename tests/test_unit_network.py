"""The SMAX unit network: acting step by step equals the learner's teacher-forced unroll (with
resets and masks), sampled actions are always legal, the pointer follows the action type, the
value reads the opponent only through the value and is one per unit, the flattened layers
compute what haiku's unflattened ones do, and parameters round-trip through bytes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import make_network
from agents.networks import (
    MASKED_LOGIT,
    ReferenceNetwork,
    log_probs,
)
from agents.specs import (
    MASK_KEY,
    ActionSpec,
    ArraySpec,
    DiscreteHead,
    GameSpec,
    ObservationSpec,
    SideSpec,
)
from agents.storage import params_from_npz_bytes, params_to_npz_bytes
from agents.unit_network import UnitNetwork, UnitNetworkConfig

# The system tier (docs/testing.md): SMAX's unit network compiled and trained, minutes on 2 cores.
pytestmark = pytest.mark.system

N, TYPES, COMPS, F, OWN = 3, 6, 3, 13, 10
ATTACK = 5


def smax_like_spec(pointer_types=(ATTACK,)) -> GameSpec:
    """The structure of actors/games/smax_races.py's spec with 3 units (no jaxmarl needed); the
    target counts for the action types `pointer_types` (SMAX's: attack)."""
    heads = {"composition": DiscreteHead(COMPS),
             "action_type": DiscreteHead(TYPES, (N,), pointer_types=pointer_types),
             "target": DiscreteHead(N, (N,))}
    fields = {"units": ArraySpec((N, F * (2 * N - 1) + OWN), np.float32),
              "alive": ArraySpec((N,), np.bool_), "races": ArraySpec((2, 3), np.float32),
              "compositions": ArraySpec((2, COMPS), np.float32),
              "choosing": ArraySpec((), np.bool_), "acting": ArraySpec((), np.bool_),
              "time": ArraySpec((), np.float32)}
    side = SideSpec(ObservationSpec(fields), ActionSpec(heads), num_units=N)
    return GameSpec("smax_races", (side, side), 10)


def random_mask(rng, shape, k):
    mask = rng.random((*shape, k)) < 0.5
    idx = rng.integers(0, k, size=shape)
    np.put_along_axis(mask, idx[..., None], True, axis=-1)  # at least one legal value
    return mask


def random_obs(rng, lead):
    spec = smax_like_spec().side(0)
    obs = {name: rng.normal(size=(*lead, *s.shape)).astype(np.float32) if s.dtype == np.float32
           else rng.random(size=(*lead, *s.shape)) < 0.7
           for name, s in spec.observation.fields.items()}
    obs[MASK_KEY] = {"composition": random_mask(rng, lead, COMPS),
                     "action_type": random_mask(rng, (*lead, N), TYPES),
                     "target": random_mask(rng, (*lead, N), N)}
    return obs


def make(**overrides):
    sizes = dict(embed_size=16, core_size=12, replica_size=12, pointer_size=8, value_size=8,
                 attention_key_size=8)
    sizes.update(overrides)
    net = make_network(smax_like_spec(), sizes, unit=True)
    params = net.init(jax.random.PRNGKey(0), smax_like_spec().side(0).zero_observation())
    return net, params


def at(tree, t):
    return jax.tree_util.tree_map(lambda x: x[t], tree)


def test_make_network_chooses_by_game():
    net, _ = make()
    assert isinstance(net, UnitNetwork)
    assert net.head_names == ["composition", "action_type", "target"]
    assert net.head_shapes == {"composition": (), "action_type": (N,), "target": (N,)}
    assert net.value_shape == (N,)
    split, _ = make(split_units=True)
    assert split.head_names == ["composition"] + [f"{h}/{i}" for h in ("action_type", "target")
                                                  for i in range(N)]
    matrix = GameSpec("matrix_rps", (SideSpec(ObservationSpec({"acting": ArraySpec((), bool)}),
                                              ActionSpec({"action": DiscreteHead(3)})),) * 2, 1)
    assert isinstance(make_network(matrix), ReferenceNetwork)


def test_acting_step_by_step_equals_teacher_forced_unroll_with_resets():
    net, params = make()
    rng = np.random.default_rng(0)
    T, B = 6, 4
    obs, opp = random_obs(rng, (T, B)), random_obs(rng, (T, B))
    first = rng.random((T, B)) < 0.3
    state0 = jax.tree_util.tree_map(lambda x: x + 0.3, net.initial_state(B))
    state, key = state0, jax.random.PRNGKey(1)
    acted, stepped = [], []
    act = jax.jit(net.act)
    for t in range(T):
        key, sub = jax.random.split(key)
        action, next_state = act(params, sub, at(obs, t), state, first[t])
        out, check_state = net.step(params, at(obs, t), state, first[t], at(opp, t),
                                    actions=action.heads)
        for a, b in zip(jax.tree_util.tree_leaves(next_state), jax.tree_util.tree_leaves(check_state)):
            np.testing.assert_allclose(a, b, atol=1e-6)
        acted.append(action)
        stepped.append(out)
        state = next_state
    actions = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[a.heads for a in acted])
    behaviour = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[a.log_probs for a in acted])
    out, final = net.unroll(params, obs, first, state0, opp, actions_seq=actions)
    for t in range(T):
        np.testing.assert_allclose(stepped[t].value, out.value[t], atol=1e-5)
        for h in out.logits:
            np.testing.assert_allclose(stepped[t].logits[h], out.logits[h][t], atol=1e-4)
    # The learner's recomputed log-probs of the stored actions are the behaviour log-probs.
    recomputed = log_probs(out.logits, actions)
    for h in recomputed:
        np.testing.assert_allclose(recomputed[h], behaviour[h], atol=1e-4)
    for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(final)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_sampled_actions_are_legal_and_the_pointer_follows_the_action_type():
    net, params = make()
    rng = np.random.default_rng(2)
    B = 256
    obs = at(random_obs(rng, (1, B)), 0)
    action, _ = jax.jit(net.act)(params, jax.random.PRNGKey(3), obs, net.initial_state(B))
    game = jax.device_get(action.game)
    masks = obs[MASK_KEY]
    assert masks["composition"][np.arange(B), game["composition"]].all()
    types, targets = game["action_type"], game["target"]
    assert np.take_along_axis(masks["action_type"], types[..., None], -1).all()
    attack = types == ATTACK
    assert attack.any() and (~attack).any()
    assert np.take_along_axis(masks["target"], targets[..., None], -1)[attack].all()
    assert (targets[~attack] == 0).all()  # no pointer unless attacking: log-prob 0
    lp = jax.device_get(action.log_probs)
    assert lp["target"].shape == lp["action_type"].shape == (B, N)
    assert (lp["target"][~attack] == 0).all()
    assert (lp["action_type"] <= 0).all()
    out, _ = net.step(params, obs, net.initial_state(B), actions=action.heads)
    illegal = ~masks["action_type"]
    assert (np.asarray(out.logits["action_type"])[illegal] == MASKED_LOGIT).all()


@pytest.mark.parametrize("pointer", [ATTACK, 2])
def test_the_pointer_serves_the_action_types_the_spec_names(pointer):
    """The action-type head's `pointer_types` in the spec (not a constant of the network) says
    which action types the target counts for: with action type `pointer` taken, the target's
    logits are the legal targets'; with any other type the target is forced to 0. The
    parameters do not depend on it (the same for the same key)."""
    sizes = dict(embed_size=8, core_size=8, replica_size=8, pointer_size=4, value_size=8,
                 attention_key_size=4)
    spec = smax_like_spec(pointer_types=(pointer,))
    net = make_network(spec, sizes, unit=True)
    assert net.config.pointer_action_types == (pointer,)
    obs = at(random_obs(np.random.default_rng(4), (1, 8)), 0)
    obs[MASK_KEY]["target"][...] = True
    params = net.init(jax.random.PRNGKey(0), spec.side(0).zero_observation())
    other, _ = make(**sizes)
    reference = other.init(jax.random.PRNGKey(0), spec.side(0).zero_observation())
    jax.tree.map(np.testing.assert_array_equal, params, reference)
    for taken in (pointer, 1 if pointer != 1 else 0):
        actions = {"composition": np.zeros(8, np.int32), "action_type": np.full((8, N), taken, np.int32),
                   "target": np.zeros((8, N), np.int32)}
        out, _ = net.step(params, obs, net.initial_state(8), actions=actions)
        free = np.asarray(out.logits["target"]) != MASKED_LOGIT
        assert free.all() if taken == pointer else (free[..., 0].all() and not free[..., 1:].any())
    with pytest.raises(ValueError, match="pointer_types"):
        smax_like_spec(pointer_types=(TYPES,))


def test_the_smax_spec_names_attack_as_the_pointer_type():
    """SMAX's own spec gives the unit network the pointer's action type (attack): the network
    `experiments.build.make_network` builds for a SMAX run is the one it always was."""
    from actors.games import smax_races
    from actors.games.smax_races.game import ACTION_TYPES
    from actors.games.smax_races.game import ATTACK as SMAX_ATTACK
    from experiments import build
    from experiments.config import NetworkSettings, RunConfig

    spec = smax_races.functions(smax_races.SmaxRacesConfig()).spec
    assert spec.side(0).action["action_type"].pointer_types == (SMAX_ATTACK,)
    assert ACTION_TYPES[SMAX_ATTACK] == "attack"
    net = build.make_network(RunConfig(game="smax_races", network=NetworkSettings(hidden_size=16, core_size=16)),
                             spec)
    assert isinstance(net, UnitNetwork) and net.config.pointer_action_types == (SMAX_ATTACK,)


def test_greedy_acting_takes_the_most_likely_legal_action():
    net, params = make()
    obs = at(random_obs(np.random.default_rng(4), (1, 8)), 0)
    action, _ = net.act(params, jax.random.PRNGKey(0), obs, net.initial_state(8), greedy=True)
    out, _ = net.step(params, obs, net.initial_state(8), actions=action.heads)
    for h, logits in out.logits.items():
        np.testing.assert_array_equal(action.heads[h], np.argmax(logits, -1))


def test_value_reads_the_opponent_but_the_policy_does_not():
    net, params = make()
    rng = np.random.default_rng(5)
    obs, opp1, opp2 = (at(random_obs(rng, (1, 4)), 0) for _ in range(3))
    state = net.initial_state(4)
    out1, _ = net.step(params, obs, state, opponent_obs=opp1)
    out2, _ = net.step(params, obs, state, opponent_obs=opp2)
    assert not np.allclose(out1.value, out2.value)
    for h in out1.logits:
        np.testing.assert_array_equal(out1.logits[h], out2.logits[h])


def test_unit_heads_keep_the_unit_axis_and_split_heads_are_the_same_logits():
    net, params = make()
    split, _ = make(split_units=True)
    obs = at(random_obs(np.random.default_rng(6), (1, 2)), 0)
    out, _ = net.step(params, obs, net.initial_state(2))
    assert out.logits["action_type"].shape == (2, N, TYPES)
    assert out.logits["target"].shape == (2, N, N)
    assert out.logits["composition"].shape == (2, COMPS)
    assert out.value.shape == (2, N)
    parts, _ = split.step(params, obs, split.initial_state(2))
    for i in range(N):
        np.testing.assert_array_equal(parts.logits[f"action_type/{i}"], out.logits["action_type"][:, i])


def test_one_value_per_unit_from_the_units_own_replica():
    """value_i = Linear(relu(Linear(core ++ opponent) + Linear(h_i))): the units' values differ
    (each reads its own replica h_i), and the formula rebuilt by hand from the parameters and
    the replicas gives the network's values."""
    net, params = make()
    rng = np.random.default_rng(8)
    obs, opp = (at(random_obs(rng, (1, 4)), 0) for _ in range(2))
    out, _ = net.step(params, obs, net.initial_state(4), opponent_obs=opp)
    assert out.value.shape == (4, N)
    assert np.abs(np.asarray(out.value)[:, 0] - np.asarray(out.value)[:, 1]).max() > 1e-6

    # h_i, core and the opponent encoding from the module's own pieces
    import haiku as hk

    from agents.unit_network import _UnitModule

    def pieces(obs, opp, state):
        m = _UnitModule(net.config)
        tokens, _, _, team = m._encode(obs)
        core, _ = m._core((team, jnp.zeros(4, bool)), state)
        return m._replicas(tokens, core), core, m._encode_opponent(opp, core)

    h, core, opp_code = hk.without_apply_rng(hk.transform(pieces)).apply(
        params, obs, opp, net.initial_state(4))
    p = {k: {n: np.asarray(v, np.float64) for n, v in d.items()} for k, d in params.items()}
    first, last = p["unit_agent/~/value/~/linear_0"], p["unit_agent/~/value/~/linear_1"]
    team = np.concatenate([core, opp_code], -1) @ first["w"] + first["b"]        # [B, V]
    hidden = np.maximum(team[:, None] + np.asarray(h) @ p["unit_agent/~/value_unit"]["w"], 0)
    expected = (hidden @ last["w"] + last["b"])[..., 0]
    np.testing.assert_allclose(out.value, expected, rtol=1e-4, atol=1e-5)


def test_flattened_layers_compute_what_haikus_layers_compute():
    """`_flat` merges leading axes for speed: the same numbers as applying the module to the
    rank-4 input directly."""
    import haiku as hk

    from agents.unit_network import _flat

    x = jax.random.normal(jax.random.PRNGKey(0), (3, 4, 5, 7))

    def both(x):
        mlp = hk.nets.MLP((6, 2), name="m")
        return mlp(x), _flat(mlp, x)

    f = hk.without_apply_rng(hk.transform(both))
    direct, flat = f.apply(f.init(jax.random.PRNGKey(1), x), x)
    assert flat.shape == (3, 4, 5, 2)
    np.testing.assert_allclose(flat, direct, rtol=1e-5, atol=1e-6)


def test_parameters_round_trip_through_bytes():
    net, params = make()
    version, restored = params_from_npz_bytes(params_to_npz_bytes(params, 7))
    assert version == 7
    obs = at(random_obs(np.random.default_rng(7), (1, 3)), 0)
    a, _ = net.step(params, obs, net.initial_state(3))
    b, _ = net.step(restored, obs, net.initial_state(3))
    np.testing.assert_array_equal(a.value, b.value)


def test_config_is_checked():
    with pytest.raises(ValueError):
        UnitNetworkConfig(core_size=0)
    with pytest.raises(ValueError):
        UnitNetworkConfig(pointer_hidden_size=0)
    with pytest.raises(ValueError):
        UnitNetworkConfig(pointer_action_types=(9,))


def test_run_config_sizes_and_unbatched_state():
    net = make_network(smax_like_spec(), hidden_size=24, core_size=20, unit=True)
    assert net.config.embed_size == 24 and net.config.core_size == 20
    assert net.initial_state_unbatched().hidden.shape == (20,)
    obs = smax_like_spec().side(0).zero_observation()
    params = net.init(jax.random.PRNGKey(0), obs, opponent_observation=obs)
    assert any("opponent" in k for k in params)


def test_a_checkpoint_of_the_network_before_per_unit_values_is_refused_clearly(tmp_path):
    """Learner checkpoints written before per-unit values (no `value_unit`, a 64-wide enemy-key
    MLP) do not restore into today's network: CheckpointError naming the parameter."""
    import optax

    from learners import checkpoint

    net, params = make()
    old = {k: dict(v) for k, v in params.items() if k != "unit_agent/~/value_unit"}
    optimizer = optax.adam(1e-3)
    path = str(tmp_path / "checkpoint.msgpack")
    checkpoint.save(path, checkpoint.Checkpoint(5, 100, 0, old, optimizer.init(old)))
    with pytest.raises(checkpoint.CheckpointError, match="value_unit"):
        checkpoint.restore(path, params, jax.eval_shape(optimizer.init, params))
    wide, wide_params = make(pointer_hidden_size=16 * 4)
    checkpoint.save(path, checkpoint.Checkpoint(5, 100, 0, wide_params, optimizer.init(wide_params)))
    with pytest.raises(checkpoint.CheckpointError, match="shape"):
        checkpoint.restore(path, params, jax.eval_shape(optimizer.init, params))
    # today's own checkpoint restores
    checkpoint.save(path, checkpoint.Checkpoint(5, 100, 0, params, optimizer.init(params)))
    assert checkpoint.restore(path, params, jax.eval_shape(optimizer.init, params)).version == 5


def test_neurd_trains_the_unit_networks_heads_and_leaves_unused_targets_alone():
    """policy_loss=neurd on the unit network's own outputs (unit heads [T, B, N, A], the team's
    composition head [T, B, C], one value per unit): every head gets a gradient, and the pointer
    gets none at the units whose action type does not use it (its one-hot forced mask leaves one
    legal target, where NeuRD's advantage is 0), nor at illegal logits."""
    from learners import losses
    from learners.config import LossConfig

    net, params = make()
    rng = np.random.default_rng(9)
    T, B = 5, 3
    obs, opp = random_obs(rng, (T, B)), random_obs(rng, (T, B))
    first = np.zeros((T, B), bool)
    action, _ = jax.jit(net.act)(params, jax.random.PRNGKey(2),
                                 jax.tree_util.tree_map(lambda x: x.reshape(T * B, *x.shape[2:]), obs),
                                 net.initial_state(T * B))
    actions = jax.tree_util.tree_map(lambda x: x.reshape(T, B, *x.shape[1:]), action.heads)
    rewards = rng.normal(size=(T, B, N)).astype(np.float32)
    discounts = np.ones((T, B), np.float32)

    out, _ = net.unroll(params, obs, first, net.initial_state(B), opp, actions_seq=actions)
    behaviour = jax.tree_util.tree_map(jax.lax.stop_gradient, log_probs(out.logits, actions))

    def loss_on_logits(logits):
        return losses.total_loss(LossConfig(policy_loss="neurd", upgo_weight=0.0), logits,
                                 jax.lax.stop_gradient(out.value), jnp.zeros((B, N)), actions,
                                 behaviour, jnp.asarray(rewards), jnp.asarray(discounts))[1]["loss/policy"]

    grads = jax.grad(loss_on_logits)(out.logits)
    for head in ("composition", "action_type", "target"):
        assert np.abs(np.asarray(grads[head])).max() > 1e-4, head
        assert np.all(np.asarray(grads[head])[np.asarray(out.logits[head]) == MASKED_LOGIT] == 0), head
    unused = ~np.isin(np.asarray(actions["action_type"]), [ATTACK])
    assert unused.any() and (~unused).any()
    assert np.all(np.asarray(grads["target"])[unused] == 0)
