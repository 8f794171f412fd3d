"""The statistic z as a network input and z's pseudo-rewards (issue 14 section 1, "z"):
hand-worked distances, the 25% activation, the pseudo-reward losses against a numpy reference,
the 10% zeroing of supervised learning, the network's dependence on z, and an actor's main
agent conditioned on its race's z while an exploiter gets z = 0."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from actors import replays
from actors.actor import Actor, ActorConfig, example_unroll
from actors.games import make_batch_game
from actors.games.smax_races import RACES, SmaxRacesConfig, fixed_size_menu, supervised
from actors.games.smax_races import z as zmod
from agents import make_network, pseudo_reward_count, z_size
from agents.specs import MASK_KEY
from agents.trajectory import reverb_signature, unflatten_like
from learners import losses
from learners.config import LossConfig
from learners.learner import Learner, LearnerConfig, ReplayConfig

try:  # the replay path (the [replay] extra); its tests are marked `replay` (tests/conftest.py)
    import reverb

    from learners.replay import make_table
except ImportError:
    reverb = make_table = None

B, T = 8, 6
TINY = dict(embed_size=16, core_size=16, replica_size=16, pointer_size=8, value_size=16,
            attention_key_size=8)
Z_TINY = dict(TINY, z_size=zmod.Z_SIZE, pseudo_rewards=len(zmod.PSEUDO_REWARDS))
MARINE, MARAUDER, STALKER, ZEALOT, ZERGLING, HYDRALISK = range(6)


# ---------------------------------------------------------------------------------------------
# The numpy references (loops; the product's pseudo-rewards are jax.numpy: z.z_pseudo_rewards_jax
# and z.attacked_types_jax, used by both experience paths). tests/test_device_path.py uses them too.


def build_order(army: int, attack_order) -> list[int]:
    """SMAX's "build order": the army (token NUM_UNIT_TYPES + army; left out for -1) then the
    enemy unit types in the order first attacked (-1 padding dropped)."""
    head = [zmod.NUM_UNIT_TYPES + int(army)] if army >= 0 else []
    return head + [int(t) for t in attack_order if t >= 0]


def edit_distance(a, b) -> int:
    """Levenshtein distance between two sequences (insertions, deletions, substitutions, each
    cost 1; Wagner-Fischer dynamic programme)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def z_pseudo_rewards(target_z, army: int, attack_order, attacked) -> np.ndarray:
    """The two pseudo-rewards of one finished game, float32 [2] (`PSEUDO_REWARDS` order):

        r_build_order    = - edit(build_order(z), build_order(produced)) / max(len of both, 1)
        r_attacked_types = - hamming(attacked types of z, produced attacked types) / 6

    target_z: the encoded z the agent was given ([Z_SIZE]); army, attack_order, attacked:
    what it played (the army index, the types in first-attack order, bool [6])."""
    z_army, z_order, z_attacked = zmod.decode_z(target_z)
    want, got = build_order(z_army, z_order), build_order(army, attack_order)
    r_build = -edit_distance(want, got) / max(len(want), len(got), 1)
    r_types = -np.sum(z_attacked != np.asarray(attacked, bool)) / zmod.NUM_UNIT_TYPES
    return np.asarray([r_build, r_types], np.float32)


def attacked_types(action_type, target, alive, enemy_types, side: int = 0) -> np.ndarray:
    """bool [..., 6]: the SMAX unit types side `side` orders attacks on this step (as `smax_z`
    counts them)."""
    n = np.shape(alive)[-1]
    slot = np.clip(zmod.enemy_slot(side, target, n), 0, n - 1)
    types = np.take_along_axis(np.asarray(enemy_types), slot, axis=-1)
    attacking = (np.asarray(action_type) == zmod.ATTACK) & np.asarray(alive, bool) & (types >= 0)
    return np.any((types[..., None] == np.arange(zmod.NUM_UNIT_TYPES)) & attacking[..., None], axis=-2)


def produced_order(first_attack_step) -> list[int]:
    """The attack order from each type's first attack step (float [6], inf never): types by
    step, ties in type-index order (as `smax_z`)."""
    steps = np.asarray(first_attack_step, np.float64)
    return [int(k) for k in sorted(np.flatnonzero(np.isfinite(steps)), key=lambda k: (steps[k], k))]


def z_of(army, order, attacked_types):
    counts = np.zeros(6, np.int32)
    counts[list(attacked_types)] = 3
    return zmod.encode_z(np.int32(army), np.array(list(order) + [-1] * (6 - len(order))), counts)


# ---------------------------------------------------------------------------------------------
# The distances, by hand.


def test_edit_distance_hand_worked():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance([], [1, 2]) == 2
    assert edit_distance([7, 4, 5], [7, 5, 4]) == 2    # a swap: two substitutions
    assert edit_distance([7, 4, 5], [7, 4]) == 1       # one deletion


def test_pseudo_rewards_hand_worked():
    # z: army 1, zerglings then hydralisks first attacked, both attacked.
    z = z_of(1, [ZERGLING, HYDRALISK], [ZERGLING, HYDRALISK])
    assert zmod.decode_z(z)[:2] == (1, [ZERGLING, HYDRALISK])
    # Followed exactly: 0 and 0.
    np.testing.assert_allclose(
        z_pseudo_rewards(z, 1, [ZERGLING, HYDRALISK], [0, 0, 0, 0, 1, 1]), [0.0, 0.0])
    # Build orders [army 1 = token 7, 4, 5] vs [7, 5, 4]: edit 2 of length 3; same types: 0.
    np.testing.assert_allclose(
        z_pseudo_rewards(z, 1, [HYDRALISK, ZERGLING], [0, 0, 0, 0, 1, 1]), [-2 / 3, 0.0])
    # Another army and only zerglings: [7, 4, 5] vs [6, 4]: substitute 7, delete 5 = 2 of 3;
    # attacked types differ in hydralisk: Hamming 1 of 6.
    np.testing.assert_allclose(
        z_pseudo_rewards(z, 0, [ZERGLING], [0, 0, 0, 0, 1, 0]), [-2 / 3, -1 / 6])
    # Nothing attacked, army 2 vs an empty z: build orders [8] vs []: 1 of 1; Hamming 0.
    np.testing.assert_allclose(
        z_pseudo_rewards(np.zeros(zmod.Z_SIZE), 2, [], np.zeros(6, bool)), [-1.0, 0.0])


def test_produced_z_matches_smax_z():
    """The running statistic (attacked_types per step, the product's attacked_types_jax equal to
    it, produced_order) gives the same order as the recorded smax_z on the same record."""
    rng = np.random.default_rng(0)
    n, steps = 4, 12
    unit_types = np.array([[MARINE, MARINE, MARAUDER, -1], [ZERGLING, HYDRALISK, ZERGLING, -1]])
    actions = {"composition": np.zeros(steps, np.int32),
               "action_type": rng.choice([0, 5], (steps, n)).astype(np.int32),
               "target": rng.integers(0, n, (steps, n)).astype(np.int32)}
    alive = rng.random((steps, n)) < 0.8
    z = zmod.smax_z(actions, alive, steps, unit_types, side=0)
    first = np.full(6, np.inf)
    for t in range(1, steps):
        hit = attacked_types(actions["action_type"][t], actions["target"][t], alive[t],
                             unit_types[1])
        np.testing.assert_array_equal(
            hit, zmod.attacked_types_jax(actions["action_type"][t], actions["target"][t], alive[t],
                                         unit_types[1]))  # the product's, in jax.numpy
        first = np.where(hit & ~np.isfinite(first), t, first)
    order = produced_order(first)
    assert order == [k for k in z["attack_order"] if k >= 0]
    np.testing.assert_array_equal(np.isfinite(first), z["attack_counts"] > 0)


# ---------------------------------------------------------------------------------------------
# The network.


@pytest.fixture(scope="module")
def smax():
    game = make_batch_game("smax_races", B, config=SmaxRacesConfig(menu=fixed_size_menu(2),
                                                                   max_steps=10))
    network = make_network(game.spec, Z_TINY, unit=True)
    params = network.init(jax.random.PRNGKey(0), game.spec.side(0).zero_observation())
    return game, network, params


def test_network_output_depends_on_z_and_no_z_is_zero(smax):
    game, network, params = smax
    obs = jax.device_get(game.reset(0, races=("terran", "zerg")).observations[0])
    state = network.initial_state(B)
    z = np.stack([z_of(b % 3, [ZERGLING], [ZERGLING]) for b in range(B)])
    out_z, _ = network.step(params, dict(obs, z=z), state)
    out_0, _ = network.step(params, dict(obs, z=np.zeros_like(z)), state)
    out_none, _ = network.step(params, obs, state)
    # z reaches the army choice (the strategy step), the values and the pseudo-values.
    assert float(jnp.abs(out_z.logits["composition"] - out_0.logits["composition"]).max()) > 1e-4
    assert float(jnp.abs(out_z.value - out_0.value).max()) > 1e-6
    assert out_z.pseudo_value.shape == (B, 2)
    assert float(jnp.abs(out_z.pseudo_value - out_0.pseudo_value).max()) > 1e-6
    # An observation without z (the game's own: evaluators) is the zero-z policy.
    for a, b in ((out_none.logits, out_0.logits), (out_none.value, out_0.value)):
        jax.tree.map(np.testing.assert_array_equal, a, b)
    # A network without z is unaffected by a z field and has no pseudo-value.
    plain = make_network(game.spec, TINY, unit=True)
    p = plain.init(jax.random.PRNGKey(0), game.spec.side(0).zero_observation())
    out, _ = plain.step(p, obs, state)
    assert out.pseudo_value is None and z_size(plain) == 0 and pseudo_reward_count(plain) == 0
    assert not any("z_encoder" in k or "pseudo" in k for k in p)


def test_only_smax_networks_take_z():
    poker = make_batch_game("kuhn_poker", 2)
    assert z_size(make_network(poker.spec, z=(zmod.Z_SIZE, len(zmod.PSEUDO_REWARDS)))) == 0


# ---------------------------------------------------------------------------------------------
# The losses against a numpy reference.


def numpy_lambda_returns(r, g, v, boot, lam):
    """G_t = r_t + g_t ((1 - lam) V_{t+1} + lam G_{t+1}), G_T = V_T, per column."""
    T = r.shape[0]
    out = np.zeros_like(r)
    nxt_g = boot
    for t in reversed(range(T)):
        v_next = v[t + 1] if t + 1 < T else boot
        out[t] = r[t] + g[t] * ((1 - lam) * v_next + lam * nxt_g)
        nxt_g = out[t]
    return out


def numpy_vtrace_advantage(log_rho, r, g, v, boot):
    """IMPALA's V-trace (lambda 1, rho-bar = c-bar = 1): A_s = rho_s (r_s + g_s v_{s+1} - V_s)."""
    T = r.shape[0]
    rho = np.minimum(np.exp(log_rho), 1.0)
    c = np.minimum(np.exp(log_rho), 1.0)
    v_next = np.concatenate([v[1:], boot[None]])
    delta = rho * (r + g * v_next - v)
    vs = np.zeros_like(v)
    acc = np.zeros_like(boot)
    for t in reversed(range(T)):
        acc = delta[t] + g[t] * c[t] * acc
        vs[t] = v[t] + acc
    vs_next = np.concatenate([vs[1:], boot[None]])
    return rho * (r + g * vs_next - v)


def pseudo_case(seed=0, T_=5, B_=3, K=2, n=4):
    rng = np.random.default_rng(seed)
    f = np.float32
    case = dict(
        pi={"action_type": rng.normal(size=(T_, B_, n)).astype(f) - 1,
            "composition": rng.normal(size=(T_, B_)).astype(f) - 1},
        mu={"action_type": rng.normal(size=(T_, B_, n)).astype(f) - 1,
            "composition": rng.normal(size=(T_, B_)).astype(f) - 1},
        rewards=rng.normal(size=(T_, B_, K)).astype(f),
        active=(rng.random((T_, B_, K)) < 0.5).astype(f),
        discounts=(rng.random((T_, B_)) < 0.8).astype(f),
        values=rng.normal(size=(T_, B_, K)).astype(f),
        bootstrap=rng.normal(size=(B_, K)).astype(f))
    return case


def test_pseudo_reward_losses_match_a_numpy_reference():
    c = pseudo_case()
    lam = 0.8
    policy, value = losses.pseudo_reward_losses(
        c["pi"], c["mu"], c["rewards"], c["active"], c["discounts"], c["values"], c["bootstrap"],
        td_lambda=lam)
    T_, B_, K = c["values"].shape
    want_value, want_policy = 0.0, 0.0
    side_pi = {"action_type": c["pi"]["action_type"].sum(-1), "composition": c["pi"]["composition"]}
    side_mu = {"action_type": c["mu"]["action_type"].sum(-1), "composition": c["mu"]["composition"]}
    for k in range(K):
        for b in range(B_):
            r, g, v = c["rewards"][:, b, k], c["discounts"][:, b], c["values"][:, b, k]
            boot, a = c["bootstrap"][b, k], c["active"][:, b, k]
            G = numpy_lambda_returns(r, g, v, boot, lam)
            want_value += 0.5 * np.sum(a * (G - v) ** 2)
            for h in side_pi:
                adv = numpy_vtrace_advantage(side_pi[h][:, b] - side_mu[h][:, b], r, g, v, boot)
                want_policy -= np.sum(a * adv * side_pi[h][:, b])
    np.testing.assert_allclose(float(value), want_value / (T_ * B_), rtol=1e-5)
    np.testing.assert_allclose(float(policy), want_policy / (T_ * B_), rtol=1e-5)


def test_each_pseudo_value_head_learns_from_its_own_reward_only():
    c = pseudo_case(1)

    def value_grad(rewards):
        def loss(values):
            return losses.pseudo_reward_losses(c["pi"], c["mu"], rewards, c["active"],
                                               c["discounts"], values, c["bootstrap"])[1]
        return np.asarray(jax.grad(loss)(jnp.asarray(c["values"])))

    base = value_grad(c["rewards"])
    changed = c["rewards"].copy()
    changed[..., 0] += 1.0                     # only pseudo-reward 0 changes
    moved = value_grad(changed)
    assert np.abs(moved[..., 0] - base[..., 0]).max() > 1e-3   # head 0 sees it
    np.testing.assert_array_equal(moved[..., 1], base[..., 1])  # head 1 does not
    # Inactive games give no gradient at all.
    np.testing.assert_array_equal(base[c["active"] == 0], 0.0)


def test_total_loss_adds_the_pseudo_terms_with_their_weights():
    c = pseudo_case(2)
    T_, B_, n = c["pi"]["action_type"].shape
    rng = np.random.default_rng(3)
    logits = {"action_type": jnp.asarray(rng.normal(size=(T_, B_, n, 6)), jnp.float32),
              "composition": jnp.asarray(rng.normal(size=(T_, B_, 3)), jnp.float32)}
    actions = {"action_type": rng.integers(0, 6, (T_, B_, n)), "composition": rng.integers(0, 3, (T_, B_))}
    args = (logits, jnp.zeros((T_, B_, n)), jnp.zeros((B_, n)), actions, c["mu"],
            jnp.zeros((T_, B_, n)), jnp.ones((T_, B_)))
    pseudo = {"reward": c["rewards"], "active": c["active"], "value": c["values"],
              "bootstrap": c["bootstrap"]}
    off, _ = losses.total_loss(LossConfig(pseudo_policy_weight=0, pseudo_value_weight=0), *args,
                               pseudo=pseudo)
    plain, _ = losses.total_loss(LossConfig(), *args)
    on, m = losses.total_loss(LossConfig(pseudo_policy_weight=0.5, pseudo_value_weight=2.0), *args,
                              pseudo=pseudo)
    np.testing.assert_allclose(float(off), float(plain), rtol=1e-6)
    want = float(plain) + 0.5 * float(m["loss/pseudo_policy"]) + 2.0 * float(m["loss/pseudo_value"])
    np.testing.assert_allclose(float(on), want, rtol=1e-5)
    assert float(m["loss/pseudo_value"]) > 0


# ---------------------------------------------------------------------------------------------
# Supervised learning: each game's own z, zeroed 10% of the time.


def test_supervised_feeds_each_games_z_zeroed_ten_percent():
    n = 20_000
    own = np.stack([z_of(k % 3, [ZERGLING], [ZERGLING, k % 4]) for k in range(n)])
    seqs = [(None, None, own[k]) for k in range(n)]
    z = supervised.sequence_z(seqs, np.random.default_rng(0))
    zeroed = ~z.any(-1)
    assert abs(zeroed.mean() - 0.1) < 0.01        # AlphaStar's 10%, per sequence
    np.testing.assert_array_equal(z[~zeroed], own[~zeroed])   # the others: their own z
    np.testing.assert_array_equal(supervised.sequence_z(seqs[:5]), own[:5])  # evaluation: never zero
    # batch_sequences puts it in every step's observation.
    seq = ({"alive": np.ones((3, 2), bool)}, {h: np.zeros(3, np.int32) for h in supervised.HEADS},
           own[0])
    obs, _, valid = supervised.batch_sequences([seq, seq], 4, supervised.sequence_z([seq, seq]))
    assert obs["z"].shape == (4, 2, zmod.Z_SIZE)
    np.testing.assert_array_equal(obs["z"][2, 1], own[0])


# ---------------------------------------------------------------------------------------------
# The actor: a main agent's z from its race's bank, an exploiter's zero.


class Races:
    def __init__(self, races):
        self.races, self.results = races, []

    def request_match(self, agent_id):
        return {"opponent_id": "frozen", "branch": "test", "home_race": self.races[0],
                "away_race": self.races[1]}

    def report_results(self, results):
        self.results.extend(results)


class Frozen:
    def __init__(self, params):
        self.params = params

    def latest_params(self, player_id, min_version=None):
        return (0, self.params) if min_version is None else None


def one_bank():
    """A bank whose z names its matchup: army = own race, one attacked type = enemy race."""
    table = np.zeros((9, 2, zmod.Z_SIZE), np.float32)
    counts = np.zeros(9, np.int32)
    for own in range(3):
        for enemy in range(3):
            for k in range(2):
                table[own * 3 + enemy, k] = z_of(own, [enemy * 2 + k], [enemy * 2 + k])
            counts[own * 3 + enemy] = 2
    return zmod.ZBank(table, counts, "test")


@pytest.mark.replay
def test_z_plan_activates_each_pseudo_reward_a_quarter_of_the_time(smax):
    game, network, params = smax
    actor = Actor("a", "main", game, network, Races(("protoss", "zerg")), Frozen(params), None,
                  "t", ActorConfig(unroll_length=T), z_bank=one_bank())
    actor.game.reset(0, races=("protoss", "zerg"))
    z, active = actor._z_plan(2000)
    assert abs(active.mean() - 0.25) < 0.01
    assert abs(active[..., 0].mean() - active[..., 1].mean()) < 0.02
    army, order, _ = zmod.decode_z(z[5, 3])
    assert army == RACES.index("protoss") and order[0] // 2 == RACES.index("zerg")


@pytest.mark.parametrize("role", ["main_agent", "exploiter"])
@pytest.mark.replay
def test_actor_conditions_main_agents_on_their_races_z(smax, role):
    game, network, params = smax
    example = example_unroll(game.spec, network, T)
    table = reverb.Table.queue("queue", 1000, signature=reverb_signature(example))
    server = reverb.Server([table])
    races = ("protoss", "zerg")
    actor = Actor("a", "agent", game, network, Races(races), Frozen(params),
                  f"localhost:{server.port}", "queue",
                  ActorConfig(unroll_length=T, episodes_per_match=1000,
                              z_reward_probability=1.0),
                  z_bank=one_bank() if role == "main_agent" else None)
    try:
        actor.run(num_steps=4 * (T - 1))  # games of <= 11 steps: several finish
        actor.close()
        client = reverb.Client(f"localhost:{server.port}")
        items = [unflatten_like(example, s.data) for s in
                 client.sample("queue", num_samples=client.server_info()["queue"].current_size,
                               emit_timesteps=False)]
    finally:
        server.stop()
    z = np.stack([i.steps.observation["z"] for i in items])           # [items, T, Z]
    pseudo = np.stack([i.steps.pseudo_reward["reward"] for i in items])
    active = np.stack([i.steps.pseudo_reward["active"] for i in items])
    done = np.stack([i.steps.discount == 0 for i in items])
    assert done.any()
    if role == "exploiter":
        assert not z.any() and not pseudo.any() and not active.any()
        return
    for vec in z.reshape(-1, zmod.Z_SIZE):
        army, order, _ = zmod.decode_z(vec)
        assert army == RACES.index("protoss") and order[0] // 2 == RACES.index("zerg")
    assert active.all()                                   # probability 1 here
    assert (pseudo[~done] == 0).all()                     # given at a game's last step only
    assert (pseudo[done] <= 0).all() and (pseudo[done] >= -1).all() and (pseudo[done] < 0).any()


@pytest.mark.replay
def test_learner_learns_the_pseudo_rewards(smax):
    game, network, params = smax
    example = example_unroll(game.spec, network, T)
    config = LearnerConfig(batch_size=4, unroll_length=T,
                           replay=ReplayConfig(max_size=1000, samples_per_insert=1.0, error_buffer=1e6))
    server = reverb.Server([make_table(config.replay, reverb_signature(example), 4)])
    address = f"localhost:{server.port}"
    learner = Learner(network, params, config, example, reverb_address=address)
    actor = Actor("a", "agent", game, network, Races(("terran", "zerg")), Frozen(params), address,
                  config.replay.table, ActorConfig(unroll_length=T, episodes_per_match=1000),
                  z_bank=one_bank())
    try:
        actor.run(num_steps=T - 1)
        assert learner.update(1, timeout=60) == 1
        metrics = learner.metrics()
        assert np.isfinite(metrics["loss/pseudo_value"]) and np.isfinite(metrics["loss/pseudo_policy"])
    finally:
        actor.close()
        learner.close()
        server.stop()


# ---------------------------------------------------------------------------------------------
# Following z during a game: the tracker both experience paths call (`zmod.tracker`).


def follow_reference(menu_table, first, done, observation, heads, active):
    """(active, pseudo-rewards) [T, B, K] of a recorded stream of side 0's steps ([T, B]
    time-major, starting at a game's first step in every column), a numpy loop per game from the
    formula: a game takes its first step's z and active flags (none where its army is forced: one
    legal composition); the army is the composition chosen at the strategy step; each enemy
    type's first attack step is the game's step index (0 at its strategy step) of the first
    `attacked_types` order on it after the strategy step; at the game's last step the
    pseudo-rewards `z_pseudo_rewards` of its z and what it produced, times its active flags."""
    menu_table = np.asarray(menu_table)
    steps, batch = np.shape(first)
    k = np.shape(active)[-1]
    out_active = np.zeros((steps, batch, k), np.float32)
    out = np.zeros((steps, batch, k), np.float32)
    for b in range(batch):
        game = None
        for t in range(steps):
            o = {name: np.asarray(v[t, b]) for name, v in observation.items() if name != MASK_KEY}
            if first[t, b]:
                free = np.asarray(observation[MASK_KEY]["composition"][t, b]).sum() > 1
                game = dict(z=o["z"], active=np.asarray(active[t, b], np.float32) * free, army=-1,
                            first=np.full(zmod.NUM_UNIT_TYPES, np.inf), step=0)
            if o["choosing"]:
                game["army"] = int(heads["composition"][t, b])
            else:
                enemy_types = menu_table[o["races"][1].argmax(), o["compositions"][1].argmax()]
                hit = attacked_types(heads["action_type"][t, b], heads["target"][t, b], o["alive"],
                                     enemy_types)
                for kind in np.flatnonzero(hit & ~np.isfinite(game["first"])):
                    game["first"][kind] = game["step"]
            game["step"] += 1
            out_active[t, b] = game["active"]
            if done[t, b] and game["active"].any():
                out[t, b] = game["active"] * z_pseudo_rewards(
                    game["z"], game["army"], produced_order(game["first"]), np.isfinite(game["first"]))
    return out_active, out


def one_game(n: int, forced: bool = False):
    """One hand-worked game of side 0 (terran) against zerg's mixed army (menu index 2: a
    zergling in slot 0, a hydralisk in slot 1), given z = (army 1, zerglings then hydralisks):
    step 0 chooses army 1; step 1 unit 0 attacks slot 1 (a hydralisk); step 2 unit 1 attacks
    slot 0 (a zergling), unit 0 the hydralisk again; step 3 nothing, the game ends."""
    steps = 4
    z = z_of(1, [ZERGLING, HYDRALISK], [ZERGLING, HYDRALISK])
    races = np.zeros((steps, 1, 2, 3), np.float32)
    races[..., 0, RACES.index("terran")] = races[..., 1, RACES.index("zerg")] = 1
    compositions = np.zeros((steps, 1, 2, 3), np.float32)
    compositions[1:, :, 0, 1] = compositions[1:, :, 1, 2] = 1       # known once chosen
    mask = np.zeros((steps, 1, 3), bool)
    mask[0, :, :] = [False, True, False] if forced else True
    mask[1:, :, 0] = True
    action_type = np.zeros((steps, 1, n), np.int32)
    target = np.zeros((steps, 1, n), np.int32)
    action_type[1, 0, 0], target[1, 0, 0] = zmod.ATTACK, 1
    action_type[2, 0, :2], target[2, 0, :2] = zmod.ATTACK, [1, 0]
    alive = np.zeros((steps, 1, n), bool)
    alive[1:, :, :2] = True
    observation = {"z": np.broadcast_to(z, (steps, 1, zmod.Z_SIZE)).copy(),
                   "choosing": np.array([[True], [False], [False], [False]]), "races": races,
                   "compositions": compositions, "alive": alive, MASK_KEY: {"composition": mask}}
    heads = {"composition": np.array([[1], [0], [0], [0]], np.int32), "action_type": action_type,
             "target": target}
    first = np.array([[True], [False], [False], [False]])
    done = np.array([[False], [False], [False], [True]])
    return first, done, observation, heads, np.ones((steps, 1, 2), np.float32)


def test_the_tracker_gives_the_hand_worked_pseudo_rewards(smax):
    game, _, _ = smax
    tracker = zmod.tracker(game.fns)
    n = game.spec.side(0).num_units
    # The menu's zerg mix: a zergling, a hydralisk (what the hand-worked game attacks).
    assert list(np.asarray(game.fns.env.menu_table)[RACES.index("zerg"), 2, :2]) == [ZERGLING, HYDRALISK]
    first, done, observation, heads, active = one_game(n)
    _, got_active, pseudo = tracker.follow_host(tracker.init_state(1, zmod.Z_SIZE, 2), first, done,
                                                observation, heads, active)
    # Build orders: z's [army 1 = token 7, zergling 4, hydralisk 5], played [7, 5, 4]: edit
    # distance 2 of length 3; the same types attacked: Hamming 0. Given at the last step only.
    np.testing.assert_allclose(pseudo[:, 0], [[0, 0], [0, 0], [0, 0], [-2 / 3, 0]], atol=1e-6)
    np.testing.assert_array_equal(got_active[:, 0], np.ones((4, 2)))
    # A game whose army is forced on side 0 follows no z: not active, no pseudo-rewards.
    first, done, observation, heads, active = one_game(n, forced=True)
    _, got_active, pseudo = tracker.follow_host(tracker.init_state(1, zmod.Z_SIZE, 2), first, done,
                                                observation, heads, active)
    assert not got_active.any() and not pseudo.any()


def random_stream(rng, steps: int, batch: int, n: int):
    """A recorded stream of side 0's steps [T, B] of random games (random lengths, armies,
    attacks, deaths, z and active flags), every column starting with a game's first step."""
    first = np.zeros((steps, batch), bool)
    done = np.zeros((steps, batch), bool)
    z = np.zeros((steps, batch, zmod.Z_SIZE), np.float32)
    active = np.zeros((steps, batch, 2), np.float32)
    races = np.zeros((steps, batch, 2, 3), np.float32)
    compositions = np.zeros((steps, batch, 2, 3), np.float32)
    mask = np.zeros((steps, batch, 3), bool)
    choosing = np.zeros((steps, batch), bool)
    for b in range(batch):
        t = 0
        while t < steps:
            length = int(rng.integers(2, 7))
            end = min(t + length, steps)
            first[t, b] = choosing[t, b] = True
            if t + length <= steps:
                done[t + length - 1, b] = True
            order = rng.permutation(6)[:rng.integers(0, 4)]
            z[t:end, b] = z_of(rng.integers(0, 3), order, order) if rng.random() < 0.8 else 0
            active[t:end, b] = rng.random(2) < 0.7
            own, enemy = rng.integers(0, 3, 2)
            races[t:end, b, 0, own] = races[t:end, b, 1, enemy] = 1
            compositions[t + 1:end, b, 0, rng.integers(0, 3)] = 1
            compositions[t + 1:end, b, 1, rng.integers(0, 3)] = 1
            mask[t, b] = [True, True, True] if rng.random() < 0.8 else np.eye(3, dtype=bool)[rng.integers(3)]
            mask[t + 1:end, b, 0] = True
            t = end
    alive = (rng.random((steps, batch, n)) < 0.8) & ~choosing[..., None]
    observation = {"z": z, "choosing": choosing, "races": races, "compositions": compositions,
                   "alive": alive, MASK_KEY: {"composition": mask}}
    heads = {"composition": rng.integers(0, 3, (steps, batch)).astype(np.int32),
             "action_type": rng.choice([0, zmod.ATTACK], (steps, batch, n)).astype(np.int32),
             "target": rng.integers(0, n, (steps, batch, n)).astype(np.int32)}
    return first, done, observation, heads, active


def test_the_tracker_follows_random_games_as_the_numpy_loop(smax):
    """The tracker's pseudo-rewards over a stream of random games equal the numpy loop's, in
    one call or in two unrolls with the state carried between them (games across the cut)."""
    game, _, _ = smax
    tracker = zmod.tracker(game.fns)
    n = game.spec.side(0).num_units
    first, done, observation, heads, active = random_stream(np.random.default_rng(4), 24, 16, n)
    want_active, want = follow_reference(game.fns.env.menu_table, first, done, observation, heads,
                                         active)
    assert (want < 0).any() and done.sum() > 30
    state = tracker.init_state(16, zmod.Z_SIZE, 2)
    _, got_active, got = tracker.follow_host(state, first, done, observation, heads, active)
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_array_equal(got_active, want_active)
    parts = []
    for cut in (slice(0, 12), slice(12, 24)):
        state, _, part = tracker.follow_host(state, *(jax.tree.map(lambda x, c=cut: x[c], xs)
                                                      for xs in (first, done, observation, heads, active)))
        parts.append(part)
    np.testing.assert_allclose(np.concatenate(parts), want, atol=1e-6)


def test_both_experience_paths_give_the_numpy_loops_pseudo_rewards(smax):
    """The replay path's actor (its unrolls' new steps) and the device rollout (its recorded
    steps) write the pseudo-rewards the numpy loop gives over what they played."""
    from actors import rewards
    from actors.actor import value_shape
    from actors.rollout import DeviceRollout, Opponents, ZSource

    game, network, params = smax
    menu = game.fns.env.menu_table
    # The replay path: an actor without a replay server, its unrolls' new steps kept.
    actor = Actor("a", "agent", game, network, Races(("protoss", "zerg")), Frozen(params), None,
                  "t", ActorConfig(unroll_length=T, episodes_per_match=1000,
                                   z_reward_probability=0.5), z_bank=one_bank())
    seen, pseudo_rewards = [], actor._pseudo_rewards

    def keep(chunk):   # the new steps of an unroll, before the actor writes them
        out = pseudo_rewards(chunk)
        seen.append(({k: chunk[k] for k in ("first", "done", "observation", "action", "z_active")},
                     out))
        return out

    actor._pseudo_rewards = keep
    actor.run(num_steps=3 * (T - 1))
    actor.close()
    steps = jax.tree.map(lambda *xs: np.concatenate(xs), *[c for c, _ in seen])
    want_active, want = follow_reference(menu, steps["first"], steps["done"], steps["observation"],
                                         steps["action"], steps["z_active"])
    np.testing.assert_allclose(np.concatenate([o["reward"] for _, o in seen]), want, atol=1e-6)
    np.testing.assert_array_equal(np.concatenate([o["active"] for _, o in seen]), want_active)
    assert steps["done"].any() and (want < 0).any()

    # The device path: a start and two unrolls, against the learner's own parameters.
    rollout = DeviceRollout(network, game.fns, B, 1, T, rewards.device_reward("game", game.spec),
                            value_shape=value_shape(network), races=True, z_probability=0.5,
                            z_statistic=zmod)
    opponents = Opponents(jax.tree.map(lambda x: x[None], params), jnp.array([True]))
    bank = one_bank()
    races = jnp.asarray(np.tile([RACES.index("protoss"), RACES.index("zerg")], (B, 1)), jnp.int32)
    carry, _ = jax.jit(rollout.start, static_argnums=3)(
        params, 0, opponents, None, jax.random.PRNGKey(1), races,
        ZSource(jnp.asarray(bank.table), jnp.asarray(bank.counts)))
    unrolls, unroll_fn = [], jax.jit(rollout.unroll, static_argnums=3)
    for key in jax.random.split(jax.random.PRNGKey(2), 2):
        carry, unroll, _ = unroll_fn(params, 0, opponents, None, carry, key)
        unrolls.append(jax.device_get(unroll.steps))
    played = jax.tree.map(lambda a, b: np.concatenate([a, b[1:]]), *unrolls)  # overlap one step
    want_active, want = follow_reference(menu, played.first, played.discount == 0,
                                         played.observation, played.action,
                                         played.pseudo_reward["active"])
    np.testing.assert_allclose(played.pseudo_reward["reward"], want, atol=1e-6)
    np.testing.assert_array_equal(played.pseudo_reward["active"], want_active)
    assert (played.discount == 0).any() and (want < 0).any()


# ---------------------------------------------------------------------------------------------
# The run's settings: where z comes from, who gets it, what is refused.


def test_main_agents_get_the_bank_and_exploiters_zero():
    from experiments.build import agent_z_banks
    from experiments.config import RunConfig

    bank = one_bank()
    banks = agent_z_banks(RunConfig.make(races=2), bank)
    assert {a for a, b in banks.items() if b is bank} == {a for a in banks if "main_agent" in a}
    assert any("exploiter" in a for a in banks)
    assert all(b is None for a, b in banks.items() if "exploiter" in a)


def test_z_source_flags_and_bad_replays_are_refused(tmp_path):
    import json
    import os

    from experiments.build import load_z_bank, make_game
    from experiments.config import ConfigError, RunConfig
    from experiments.league import check_z

    with pytest.raises(ConfigError, match="has no statistic z"):
        RunConfig.make(game="kuhn_poker", z_replays=str(tmp_path))
    with pytest.raises(ConfigError, match="needs a network that takes z"):
        RunConfig.make(z_replays=str(tmp_path), **{"network.z": False})
    with pytest.raises(ConfigError, match="z_reward_probability"):
        RunConfig.make(**{"actor.z_reward_probability": 1.5})
    # No bank: z = 0, said in the progress line.
    assert "z: off" in check_z(RunConfig.make(init="none"))
    # --init's report names its replays: the bank's default source.
    replay_dir = tmp_path / "replays"
    replay_dir.mkdir()
    init = tmp_path / "supervised.npz"
    init.write_bytes(b"")
    (tmp_path / "supervised.npz.json").write_text(json.dumps({"replays": str(replay_dir)}))
    # SMAX's default is no z (the unconditioned policy: the one evaluated); "start" asks for it.
    assert RunConfig.make(init=str(init)).z_replay_dir is None
    assert "z: off" in check_z(RunConfig.make(init=str(init)))
    assert RunConfig.make(init=str(init), z_replays="start").z_replay_dir == str(replay_dir)
    assert RunConfig.make(init=str(init), z_replays="").z_replay_dir == str(replay_dir)
    assert RunConfig.make(init=str(init), z_replays="none").z_replay_dir is None
    with pytest.raises(ConfigError, match="--z_replays=start .*--init=none"):
        RunConfig.make(init="none", z_replays="start")
    with pytest.raises(ConfigError, match="has no statistic z"):
        RunConfig.make(game="kuhn_poker", z_replays="start")
    # Replays of another spec (another menu: other unit slots): refused, naming the directory.
    other = make_batch_game("smax_races", 1, config=SmaxRacesConfig(menu=fixed_size_menu(2))).spec
    replays.ReplayWriter(str(replay_dir), other)
    config = RunConfig.make(z_replays=str(replay_dir))
    with pytest.raises(ConfigError, match=f"--z_replays={replay_dir}: .*another observation/action spec"):
        load_z_bank(config, make_game(config, 1).spec)
    with pytest.raises(ConfigError, match="no such replay directory"):
        check_z(RunConfig.make(z_replays=str(tmp_path / "nowhere")))
    assert not os.path.exists(tmp_path / "nowhere")


def test_a_start_without_z_is_refused_by_a_z_network():
    from experiments.build import check_shapes, initial_params, make_game, make_network
    from experiments.config import ConfigError, RunConfig

    def params(z):
        config = RunConfig.make(races=1, hidden_size=16, core_size=16, **{"network.z": z})
        spec = make_game(config, 1).spec
        return initial_params(make_network(config, spec), spec, 0, 0)

    with pytest.raises(ConfigError, match="without the z input"):
        check_shapes("--init=old.npz (terran)", params(False), params(True))


def test_a_run_saved_before_z_resumes_without_z():
    from experiments.config import RunConfig

    saved = RunConfig.make(races=1).to_dict()
    assert RunConfig.from_dict(saved).network.z
    del saved["network"]["z"]
    assert not RunConfig.from_dict(saved).network.z
