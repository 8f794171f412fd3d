"""benchmarks/exact_pg_bench.py: the exact value against OpenSpiel's, NeuRD's direction worked
by hand, bad input named."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import expected_game_score

from benchmarks import exact_pg_bench
from experiments.config import RunConfig


def random_policy(game, seed):
    policy = os_policy.TabularPolicy(game)
    rng = np.random.default_rng(seed)
    probs = rng.random(policy.action_probability_array.shape) * policy.legal_actions_mask
    policy.action_probability_array[:] = probs / probs.sum(1, keepdims=True)
    return policy


def test_the_exact_value_is_openspiels_with_seats_averaged():
    from actors.games.poker import openspiel as poker

    game = poker.load_game("leduc_poker")
    target, player = random_policy(game, 0), random_policy(game, 1)
    task = exact_pg_bench.Task(game, target)
    root = game.new_initial_state()
    as_first = expected_game_score.policy_value(root, [player, target])[0]
    as_second = expected_game_score.policy_value(root, [target, player])[1]
    value = float(task.value(jnp.asarray(player.action_probability_array, jnp.float32)))
    np.testing.assert_allclose(value, 0.5 * (as_first + as_second), atol=1e-5)
    assert task.legal.sum() == player.legal_actions_mask.sum()   # every information state was visited


def test_neurds_direction_is_the_advantage_without_pi_and_stops_at_beta():
    """d/dy of the surrogate: A(s, a) itself on legal actions whose logit may still move that way;
    0 on an illegal action, and on a logit at +beta that A would push up."""
    logits = jnp.asarray([[0.5, -0.2, 3.0], [10.0, 0.0, -10.0]])
    advantages = jnp.asarray([[0.3, -0.1, 0.7], [0.2, -0.4, -0.5]])
    legal = jnp.asarray([[True, True, False], [True, True, True]])
    grad = jax.grad(lambda y: exact_pg_bench.neurd_surrogate(y, advantages, legal, beta=10.0))(logits)
    np.testing.assert_allclose(np.asarray(grad), [[0.3, -0.1, 0.0], [0.0, -0.4, 0.0]])


def test_an_unknown_arm_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(RunConfig.make(game="kuhn_poker").to_dict()))
    out = subprocess.run([sys.executable, "-m", "benchmarks.exact_pg_bench", f"--run_dir={tmp_path}",
                          "--arms=neurd_lstm"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "--arms names ['neurd_lstm']; choose from softmax_table, softmax_mlp, neurd_table, neurd_mlp" in out.stderr
