"""Surgery (agents/surgery.py): widened networks compute what the old ones computed.

Each check runs the old network with its parameters and the widened network with the widened
parameters on the same observation sequences and compares action probabilities and values."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import surgery
from agents.networks import NetworkConfig, ReferenceNetwork
from agents.unit_network import UnitNetwork, UnitNetworkConfig

# The system tier (docs/testing.md): a Kuhn league widened and resumed.
pytestmark = pytest.mark.system

T, B = 6, 3


def _np(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


def _max_diffs(out_a, out_b):
    prob = max(float(np.max(np.abs(jax.nn.softmax(out_a.logits[h]) - jax.nn.softmax(out_b.logits[h]))))
               for h in out_a.logits)
    return prob, float(np.max(np.abs(out_a.value - out_b.value)))


def _unroll(network, params, obs, opp):
    first = jnp.zeros((T, B), bool).at[0].set(True).at[3, 1].set(True)
    return network.unroll(params, obs, first, network.initial_state(B), opp)[0]


# -- the reference network (poker, matrix games) --------------------------------------------

def _reference(hidden, core):
    return ReferenceNetwork(NetworkConfig(heads={"a": 3, "b": 2}, mlp_sizes=(hidden,), lstm_size=core,
                                          value_uses_opponent=True))


def _features(rng, n):
    return {"x": jnp.asarray(rng.normal(size=(T, B, n)), jnp.float32)}


def test_widening_the_reference_network_and_adding_features_preserves_its_outputs():
    rng = np.random.default_rng(0)
    old_net, new_net = _reference(8, 8), _reference(13, 11)
    old_params = _np(old_net.init(jax.random.PRNGKey(1), {"x": jnp.zeros(5)}))
    # two new observation features, at positions 1 and 6 of the new feature vector
    positions = (0, 2, 3, 4, 5)
    template = _np(new_net.init(jax.random.PRNGKey(2), {"x": jnp.zeros(7)}))
    plan = surgery.plan(old_net.config, new_net.config, old_features=5, new_features=7,
                        feature_positions=positions)
    assert plan.exact
    new_params = surgery.widen(plan, old_params, template)

    obs, opp = _features(rng, 5), _features(rng, 5)
    new_obs, new_opp = _features(rng, 7), _features(rng, 7)  # the new features: anything
    new_obs["x"] = new_obs["x"].at[..., jnp.asarray(positions)].set(obs["x"])
    new_opp["x"] = new_opp["x"].at[..., jnp.asarray(positions)].set(opp["x"])
    prob, value = _max_diffs(_unroll(old_net, old_params, obs, opp), _unroll(new_net, new_params, new_obs, new_opp))
    assert prob < 1e-5 and value < 1e-5, (prob, value)

    # the new units are live (random incoming weights), only their outgoing weights are zero
    w = new_params["agent/~/torso/~/linear_0"]["w"]
    assert np.all(w[np.asarray(positions)][:, :8] == old_params["agent/~/torso/~/linear_0"]["w"])
    assert np.all(w[[1, 6]][:, :8] == 0)  # new features into old units: zero (eq. 9)
    assert np.std(w[:, 8:]) > 0  # new units: random (eq. 6, R())
    lstm = new_params["agent/~/lstm/linear"]["w"]  # rows [x (13), h (11)], columns 4 x 11
    assert np.all(lstm[8:13].reshape(5, 4, 11)[:, :, :8] == 0)
    assert np.all(lstm[13 + 8:].reshape(3, 4, 11)[:, :, :8] == 0)
    assert np.std(lstm.reshape(24, 4, 11)[:, :, 8:]) > 0


def test_a_random_initialisation_of_the_new_weights_would_change_the_outputs():
    """The check above can fail: widening with every new weight random (no zeros) does not
    preserve the outputs."""
    rng = np.random.default_rng(0)
    old_net, new_net = _reference(8, 8), _reference(12, 8)
    old_params = _np(old_net.init(jax.random.PRNGKey(1), {"x": jnp.zeros(5)}))
    template = _np(new_net.init(jax.random.PRNGKey(2), {"x": jnp.zeros(5)}))
    naive = jax.tree_util.tree_map(np.copy, template)
    for module, leaves in old_params.items():
        for name, old in leaves.items():
            naive[module][name][tuple(slice(0, n) for n in old.shape)] = old
    obs, opp = _features(rng, 5), _features(rng, 5)
    prob, _ = _max_diffs(_unroll(old_net, old_params, obs, opp), _unroll(new_net, naive, obs, opp))
    assert prob > 1e-3


def test_lstm_noise_is_approximate_and_small():
    rng = np.random.default_rng(0)
    old_net, new_net = _reference(8, 8), _reference(8, 16)
    old_params = _np(old_net.init(jax.random.PRNGKey(1), {"x": jnp.zeros(5)}))
    template = _np(new_net.init(jax.random.PRNGKey(2), {"x": jnp.zeros(5)}))
    plan = surgery.plan(old_net.config, new_net.config, old_features=5, lstm_noise=1e-3)
    assert not plan.exact and "core_size 8 -> 16" in plan.approximate[0]
    new_params = surgery.widen(plan, old_params, template, lstm_noise=1e-3)
    obs, opp = _features(rng, 5), _features(rng, 5)
    prob, value = _max_diffs(_unroll(old_net, old_params, obs, opp), _unroll(new_net, new_params, obs, opp))
    assert 0 < prob < 1e-2 and value < 1e-2


def test_shrinking_and_other_changes_are_refused():
    with pytest.raises(surgery.SurgeryError, match="cannot shrink"):
        surgery.plan(_reference(16, 8).config, _reference(8, 8).config, old_features=5)
    other_heads = ReferenceNetwork(NetworkConfig(heads={"a": 4}, mlp_sizes=(8,), lstm_size=8))
    with pytest.raises(surgery.SurgeryError, match="action heads"):
        surgery.plan(_reference(8, 8).config, other_heads.config, old_features=5)
    no_lstm = NetworkConfig(heads={"action": 3}, mlp_sizes=(8, 8), lstm_size=0)
    with pytest.raises(surgery.SurgeryError, match="core_size=0"):
        surgery.plan(no_lstm, dataclasses.replace(no_lstm, mlp_sizes=(16, 16)), old_features=5)
    plan = surgery.plan(_reference(8, 8).config, _reference(8, 8).config, old_features=5)
    params = _np(_reference(8, 8).init(jax.random.PRNGKey(1), {"x": jnp.zeros(5)}))
    wrong = _np(_reference(8, 8).init(jax.random.PRNGKey(1), {"x": jnp.zeros(6)}))
    with pytest.raises(surgery.SurgeryError, match=r"torso/~/linear_0/w: saved shape \(6, 8\)"):
        surgery.widen(plan, wrong, params)


def test_optimiser_moments_keep_their_old_values_and_start_at_zero_for_new_units():
    old_net, new_net = _reference(4, 4), _reference(6, 4)
    old = _np(old_net.init(jax.random.PRNGKey(1), {"x": jnp.zeros(3)}))
    new = _np(new_net.init(jax.random.PRNGKey(2), {"x": jnp.zeros(3)}))
    plan = surgery.plan(old_net.config, new_net.config, old_features=3)
    moments = surgery.widen_zeros(plan, old, new)
    w = moments["agent/~/torso/~/linear_0"]["w"]
    assert w.shape == (3, 6) and np.all(w[:, :4] == old["agent/~/torso/~/linear_0"]["w"]) and np.all(w[:, 4:] == 0)


# -- the unit network (SMAX races) -------------------------------------------------------------

UNIT = UnitNetworkConfig(num_units=3, num_targets=3, num_action_types=6, num_compositions=3,
                         embed_size=8, replica_size=8, core_size=8, value_size=8, pointer_size=4,
                         attention_heads=2, attention_key_size=4)
OWN = 5


def _unit_obs(rng, config, base=None):
    n, f = config.num_units, config.unit_feature_size
    row = (n - 1 + config.num_targets) * f + OWN
    units = rng.normal(size=(T, B, n, row)).astype(np.float32)
    if base is not None:  # the old features in the new layout: each other unit's block widened
        old_f = base["units"].shape[-1] - OWN
        old_f //= (n - 1 + config.num_targets)
        blocks = np.split(base["units"][..., :-OWN], n - 1 + config.num_targets, axis=-1)
        for k, block in enumerate(blocks):
            units[..., k * f:k * f + old_f] = block
        units[..., -OWN:] = base["units"][..., -OWN:]
    obs = {"units": units,
           "alive": rng.random((T, B, n)) < 0.8 if base is None else base["alive"],
           "races": np.eye(3, dtype=np.float32)[rng.integers(0, 3, (T, B, 2))] if base is None else base["races"],
           "compositions": np.ones((T, B, 2, 3), np.float32) if base is None else base["compositions"],
           "choosing": np.zeros((T, B), np.float32), "acting": np.ones((T, B), np.float32),
           "time": np.linspace(0, 1, T * B, dtype=np.float32).reshape(T, B),
           "action_mask": {"action_type": np.ones((T, B, n, 6), bool), "target": np.ones((T, B, n, 3), bool),
                           "composition": np.ones((T, B, 3), bool)}}
    return jax.tree_util.tree_map(jnp.asarray, obs)


def _unit_surgery(new_config, seed=0):
    rng = np.random.default_rng(seed)
    old_net, new_net = UnitNetwork(UNIT), UnitNetwork(new_config)
    obs, opp = _unit_obs(rng, UNIT), _unit_obs(rng, UNIT)
    one = jax.tree_util.tree_map(lambda x: x[0, 0], obs)
    new_obs, new_opp = _unit_obs(rng, new_config, obs), _unit_obs(rng, new_config, opp)
    new_one = jax.tree_util.tree_map(lambda x: x[0, 0], new_obs)
    old_params = _np(old_net.init(jax.random.PRNGKey(1), one, one))
    template = _np(new_net.init(jax.random.PRNGKey(2), new_one, new_one))
    own, global_features = surgery.unit_input_sizes(UNIT, old_params)
    assert own == OWN and global_features == 2 * 3 + 2 * 3 + 2  # races, compositions, choosing, time
    plan = surgery.plan(UNIT, new_config, own_features=own, global_features=global_features)
    new_params = surgery.widen(plan, old_params, template)
    diffs = _max_diffs(_unroll(old_net, old_params, obs, opp), _unroll(new_net, new_params, new_obs, new_opp))
    return plan, diffs


@pytest.mark.parametrize("change", [
    dict(replica_size=12), dict(core_size=13), dict(value_size=11), dict(pointer_size=7),
    dict(attention_heads=3), dict(attention_key_size=6), dict(unit_feature_size=15),
    dict(embed_size=16), dict(embed_size=24),
    dict(replica_size=12, core_size=12, attention_heads=3, attention_key_size=7, pointer_size=5,
         value_size=9, unit_feature_size=14, embed_size=16),
])
def test_widening_the_unit_network_preserves_its_outputs(change):
    plan, (prob, value) = _unit_surgery(dataclasses.replace(UNIT, **change))
    assert plan.exact
    assert prob < 1e-5 and value < 1e-5, (change, prob, value)


def test_widening_the_unit_networks_residual_stream_by_a_fraction_is_reported_approximate():
    plan, (prob, value) = _unit_surgery(dataclasses.replace(UNIT, embed_size=12))
    assert not plan.exact and "LayerNorm" in plan.approximate[0]
    assert prob > 1e-5 or value > 1e-5  # the LayerNorms' statistics do change


# -- experiments.surgery on a league's run directory ------------------------------------------

def _tree_digest(run_dir):
    import hashlib
    import os

    digest = {}
    for root, _, files in os.walk(run_dir):
        for name in files:
            if not name.startswith("league.db") and name != "run.lock":
                with open(os.path.join(root, name), "rb") as f:
                    digest[os.path.relpath(os.path.join(root, name), run_dir)] = hashlib.sha256(f.read()).hexdigest()
    return digest


def _surgery_cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "experiments.surgery", *args], capture_output=True,
                          text=True, timeout=300)


LEARNT = 20_000   # agent steps per learner in each run of the Kuhn league below


@pytest.fixture(scope="module")
def kuhn_run(tmp_path_factory):
    from tests.test_program import config, run

    # stops once every learner has learnt this much, not by the clock (with an empty compilation
    # cache, 0.4 minutes went to compiling); the minutes are only a ceiling
    cfg = config(tmp_path_factory.mktemp("surgery"), game="kuhn_poker", minutes=4, learner_steps=LEARNT,
                 experience="device", main_agent_snapshot_steps=100, exploiter_min_steps=100,
                 **{"league.snapshots.league_exploiter_timeout_steps": 100})
    run(cfg)
    return cfg


def test_surgery_on_a_kuhn_league_keeps_every_players_nashconv_and_the_league_resumes(kuhn_run, tmp_path):
    import os
    import shutil

    from experiments import nashconv
    from experiments import surgery as tool
    from experiments.config import NetworkSettings
    from tests.test_program import learner_steps, learner_versions, run

    run_dir = str(tmp_path / "run")
    shutil.copytree(kuhn_run.run_dir, run_dir)
    cfg = dataclasses.replace(kuhn_run, run_dir=run_dir)
    reader = nashconv.RunReader(run_dir)
    players = [p["player_id"] for p in reader.history().players()]
    assert len(players) >= 5 and any("#" in p for p in players)  # learners and frozen players
    before = {p: reader.measure_player(p).nash_conv for p in players}
    versions = learner_versions(run_dir)

    report = tool.operate(run_dir, {"hidden_size": 24, "core_size": 20}, out=open(os.devnull, "w"))
    assert report.max_prob < 1e-5 and report.max_value < 1e-5
    assert report.players == len(os.listdir(os.path.join(run_dir, "params"))) and report.checkpoints == 4
    after_reader = nashconv.RunReader(run_dir)
    assert after_reader.config.network == NetworkSettings(hidden_size=24, core_size=20)
    for p in players:
        assert after_reader.measure_player(p).nash_conv == pytest.approx(before[p], abs=1e-6), p
    # the old files are kept
    with open(os.path.join(report.backup, "config.json")) as f:
        assert '"hidden_size": 16' in f.read()
    assert any(e["kind"] == "surgery" for e in after_reader.history().events())

    # the league resumes with the wider network and keeps learning
    wider = dataclasses.replace(cfg, network=NetworkSettings(hidden_size=24, core_size=20),
                                learner_steps=max(learner_steps(run_dir).values()) + LEARNT)
    run(wider)
    resumed = learner_versions(run_dir)
    assert all(resumed[a] > versions[a] for a in versions), (versions, resumed)


def test_lstm_noise_is_measured_and_refused_beyond_the_tolerance(kuhn_run, tmp_path):
    import shutil

    run_dir = str(tmp_path / "run")
    shutil.copytree(kuhn_run.run_dir, run_dir)
    digest = _tree_digest(run_dir)
    result = _surgery_cli(f"--run_dir={run_dir}", "--core_size=24", "--lstm_noise=0.5", "--tolerance=1e-4")
    assert result.returncode == 2, result.stderr
    assert "approximate" in result.stdout and "more than 0.0001 (--tolerance)" in result.stderr
    assert _tree_digest(run_dir) == digest


@pytest.mark.parametrize("case", ["locked", "shrink", "unknown_flag", "other_game", "not_a_run"])
def test_bad_surgery_requests_are_refused_and_change_nothing(kuhn_run, tmp_path, case):
    import os
    import shutil

    from experiments import run_lock

    run_dir = str(tmp_path / "run")
    shutil.copytree(kuhn_run.run_dir, run_dir)
    args, message, lock = [f"--run_dir={run_dir}", "--hidden_size=32"], None, None
    if case == "locked":
        lock = run_lock.hold(run_dir, "a test league")
        message = "in use by a test league"
    elif case == "shrink":
        args, message = [f"--run_dir={run_dir}", "--core_size=8"], "shrinking is not supported"
    elif case == "unknown_flag":
        args, message = [*args, "--lstm_size=128"], "lstm_size"
    elif case == "other_game":  # a Leduc player among Kuhn's: its input layer does not fit
        from agents.storage import params_to_npz_bytes
        from tests.test_nashconv_league import network_and_params

        _, (params,) = network_and_params("leduc_poker", [0])
        with open(os.path.join(run_dir, "params", "stranger#0.npz"), "wb") as f:
            f.write(params_to_npz_bytes(params, 1))
        message = "stranger#0.npz: parameter agent/~/opponent_torso/~/linear_0/w"
    elif case == "not_a_run":
        os.remove(os.path.join(run_dir, "config.json"))
        message = "not a league's run directory"
    digest = _tree_digest(run_dir)
    try:
        result = _surgery_cli(*args)
    finally:
        if lock:
            lock.close()
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert _tree_digest(run_dir) == digest


def test_a_second_league_on_a_running_run_dir_is_refused(tmp_path):
    import subprocess
    import sys

    from experiments import run_lock

    run_dir = str(tmp_path / "run")
    lock = run_lock.hold(run_dir, "a league (a test)")
    try:
        result = subprocess.run([sys.executable, "-m", "experiments.league", "--game=matrix_rps",
                                 f"--run_dir={run_dir}", "--minutes=0.1"], capture_output=True, text=True,
                                timeout=120)
    finally:
        lock.close()
    assert result.returncode == 2
    assert "is in use by a league (a test)" in result.stderr


def test_a_feature_the_saved_players_never_saw_gets_zero_weights_and_changes_nothing(kuhn_run, tmp_path):
    """Players saved before the observation's feature 3 existed (simulated: that input row
    removed from every player) are widened with --new_features=3: exact (seed 003, eq. 9)."""
    import os
    import shutil

    from agents.storage import params_from_npz_bytes, params_to_npz_bytes
    from experiments import surgery as tool

    run_dir = str(tmp_path / "run")
    shutil.copytree(kuhn_run.run_dir, run_dir)
    shutil.rmtree(os.path.join(run_dir, "learners"))
    inputs = ("agent/~/torso/~/linear_0", "agent/~/opponent_torso/~/linear_0")
    saved = {}
    for name in os.listdir(os.path.join(run_dir, "params")):
        path = os.path.join(run_dir, "params", name)
        with open(path, "rb") as f:
            version, params = params_from_npz_bytes(f.read())
        for module in inputs:
            params[module]["w"] = np.delete(params[module]["w"], 3, axis=0)
        saved[name] = params
        with open(path, "wb") as f:
            f.write(params_to_npz_bytes(params, version))

    with pytest.raises(tool.Refused, match="pass --new_features with the positions of the 1 new ones"):
        tool.operate(run_dir, {}, out=open(os.devnull, "w"))
    report = tool.operate(run_dir, {}, new_features=[3], out=open(os.devnull, "w"))
    assert report.max_prob < 1e-5 and report.max_value < 1e-5 and report.players == len(saved)
    for name, old in saved.items():
        with open(os.path.join(run_dir, "params", name), "rb") as f:
            _, new = params_from_npz_bytes(f.read())
        for module in inputs:
            assert np.all(new[module]["w"][3] == 0)
            np.testing.assert_array_equal(np.delete(new[module]["w"], 3, axis=0), old[module]["w"])
