"""Reward plug-ins: loading, checking, the default outcome reward and OpenAI Five's processing."""

import numpy as np
import pytest

from actors import rewards
from actors.games import smax_races
from actors.games.poker import openspiel as poker

SMAX_SPEC = smax_races.make_spec(smax_races.RacesSMAX(smax_races.SmaxRacesConfig(
    menu=smax_races.fixed_size_menu(3))))
POKER_SPEC = poker.make_spec(poker.load_game("kuhn_poker"))


def write(tmp_path, body, name="plugin.py"):
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_default_is_the_outcome_at_the_end():
    fn = rewards.load_reward_plugin(None, POKER_SPEC)
    batch = rewards.example_batch(POKER_SPEC, side=0)
    np.testing.assert_array_equal(fn(batch, True), [0, 0, 0, 1])
    np.testing.assert_array_equal(fn(rewards.example_batch(POKER_SPEC, side=1), True), [0, 0, 0, -1])


def test_a_valid_plugin_file(tmp_path):
    path = write(tmp_path, "import numpy as np\n"
                 "def get_reward(batch, contiguous):\n"
                 "    return batch['reward'] * 2 + 0.01 * batch['damage_dealt'].sum(-1)\n")
    fn = rewards.load_reward_plugin(path, SMAX_SPEC)
    out = fn(rewards.example_batch(SMAX_SPEC), True)
    assert out.shape == (4,) and out[-1] == pytest.approx(2 + 0.01 * 3 * 0.1)


@pytest.mark.parametrize("body, problem", [
    ("def get_reward(batch, contiguous):\n    return (\n", "cannot be loaded: SyntaxError"),
    ("import no_such_module_xyz\n", "cannot be loaded: ModuleNotFoundError"),
    ("def reward(batch, contiguous):\n    return 0\n", "is not defined"),
    ("def get_reward(batch):\n    return batch['done']\n", "wrong signature"),
    ("def get_reward(batch, contiguous):\n    raise KeyError('gold')\n", "raised KeyError"),
    ("def get_reward(batch, contiguous):\n    return None\n", "returned None"),
    ("import numpy as np\ndef get_reward(batch, contiguous):\n    return np.zeros(3)\n",
     "returned shape (3,)"),
    ("import numpy as np\ndef get_reward(batch, contiguous):\n"
     "    r = np.zeros(len(batch['done'])); r[2] = np.nan; return r\n", "non-finite values at steps [2]"),
    ("def get_reward(batch, contiguous):\n    return 'abc'\n", "non-numeric"),
])
def test_broken_plugins_name_file_function_and_problem(tmp_path, body, problem):
    path = write(tmp_path, body)
    with pytest.raises(rewards.RewardPluginError) as info:
        rewards.load_reward_plugin(path, SMAX_SPEC)
    message = str(info.value)
    assert path in message and "get_reward(batch, contiguous)" in message and problem in message


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_missing_file_and_failure_at_run_time(tmp_path):
    with pytest.raises(rewards.RewardPluginError, match="no such file"):
        rewards.load_reward_plugin(str(tmp_path / "absent.py"))
    path = write(tmp_path, "import numpy as np\ndef get_reward(batch, contiguous):\n"
                 "    return np.log(batch['reward'] + 1)\n")
    fn = rewards.load_reward_plugin(path, POKER_SPEC)  # fine on the synthetic win
    batch = rewards.example_batch(POKER_SPEC, side=1)  # a loss: log(0) = -inf
    with pytest.raises(rewards.RewardPluginError, match="non-finite"):
        fn(batch, True)


def smax_fields(rng, steps=6, n=3):
    fields = {
        "done": np.array([False] * (steps - 1) + [True]),
        "outcome": np.array([0] * (steps - 1) + [1], np.int8),
        "rewards": np.zeros((steps, 2), np.float32),
        "time": np.arange(steps, dtype=np.float32),
        "win": np.zeros((steps, 2), np.float32),
        "present": np.ones((steps, 2, n), bool),
    }
    fields["win"][-1] = (1, -1)
    for name in ("damage_dealt", "damage_taken", "kills", "deaths"):
        fields[name] = rng.random((steps, 2, n)).astype(np.float32)
    return fields


def test_openai_five_is_zero_sum_and_team_spirit_interpolates():
    fields = smax_fields(np.random.default_rng(0))
    for tau in (0.0, 0.5, 1.0):
        cfg = rewards.OpenAIFiveConfig(tau_start=tau, tau_end=tau)
        fn = rewards.OpenAIFiveReward(cfg)
        r0 = fn(rewards.side_batch(fields, 0), True)
        r1 = fn(rewards.side_batch(fields, 1), True)
        assert r0.shape == (6, 3)
        np.testing.assert_allclose(r0.sum(-1) + r1.sum(-1), 0.0, atol=1e-5)
        if tau == 1.0:
            np.testing.assert_allclose(r0, r0[:, :1].repeat(3, 1), atol=1e-6)
    # tau = 0: each unit's own score minus the enemy mean.
    fn = rewards.OpenAIFiveReward(rewards.OpenAIFiveConfig(tau_start=0.0, tau_end=0.0))
    b = rewards.side_batch(fields, 0)
    own = rewards.unit_scores(b, "", fn.config)
    enemy = rewards.unit_scores(b, "enemy_", fn.config)
    np.testing.assert_allclose(fn(b, True), own - enemy.mean(-1, keepdims=True), rtol=1e-5)


def won_episode(present):
    """Fields of one game won by side 0 at its last step, no events yet (`present` [T, 2, n])."""
    steps, _, n = present.shape
    fields = {"done": np.arange(steps) == steps - 1, "outcome": np.eye(steps, dtype=np.int8)[-1],
              "rewards": np.zeros((steps, 2), np.float32), "time": np.zeros(steps, np.float32),
              "win": np.zeros((steps, 2), np.float32), "present": present}
    fields["win"][-1] = [1, -1]
    for name in ("damage_dealt", "damage_taken", "kills", "deaths"):
        fields[name] = np.zeros((steps, 2, n), np.float32)
    return fields


def test_openai_five_hand_worked_episode_counts_each_event_once():
    """Two units a side, tau = 0.5, no time decay. t0: our unit 0 deals 0.4 of enemy unit 0's
    health; t1: it deals the last 0.6 and kills it (enemy unit 0 dies), enemy unit 1 deals 0.3
    to our unit 1; t2: we win. One-sided raw rewards (seed 000): ours [0.4, 0], [1.1, 0],
    [5, 5]; theirs [0, 0], [-1, 0.3], [0, 0]. Team spirit then zero sum, worked by hand."""
    fields = won_episode(np.ones((3, 2, 2), bool))
    fields["time"] = np.arange(3, dtype=np.float32)
    fields["damage_dealt"][0, 0, 0], fields["damage_taken"][0, 1, 0] = 0.4, 0.4
    fields["damage_dealt"][1, 0, 0], fields["damage_taken"][1, 1, 0] = 0.6, 0.6
    fields["kills"][1, 0, 0], fields["deaths"][1, 1, 0] = 1.0, 1.0
    fields["damage_dealt"][1, 1, 1], fields["damage_taken"][1, 0, 1] = 0.3, 0.3
    fn = rewards.OpenAIFiveReward(rewards.OpenAIFiveConfig(tau_start=0.5, tau_end=0.5, time_decay=1.0))
    ours = fn(rewards.side_batch(fields, 0), True)
    theirs = fn(rewards.side_batch(fields, 1), True)
    np.testing.assert_allclose(ours, [[0.3, 0.1], [1.175, 0.625], [5.0, 5.0]], atol=1e-6)
    np.testing.assert_allclose(theirs, [[-0.2, -0.2], [-1.225, -0.575], [-5.0, -5.0]], atol=1e-6)
    # a win is worth +5 to each winning unit and -5 to each loser, not +-10
    assert ours[2].tolist() == [5.0, 5.0] and theirs[2].tolist() == [-5.0, -5.0]
    # team totals: our raw total 11.5 minus theirs -0.7
    assert ours.sum() == pytest.approx(12.2, abs=1e-5) and theirs.sum() == pytest.approx(-12.2, abs=1e-5)


def test_openai_five_counts_damage_and_kills_in_shares_of_the_enemy_army():
    """Four units against two, tau = 0, no time decay. t0: our units 0 and 1 kill enemy unit 0
    together (each: damage 0.5, kill 0.5); enemy unit 1 kills our unit 3 (damage 1, kill 1).
    t1: we win. Scaled by n_own / n_enemy: ours rho = 2 (1 x 0.5 + 0.5 x 0.5) = 1.5 for units 0
    and 1, 0, -1 (death); theirs x 2/4: -1 (death), 0.5 (1 + 0.5) = 0.75, mean -0.125; ours
    minus their mean, worked by hand. The team means are the shares destroyed: ours half their
    army x (1 + 0.5) - a quarter of ours lost = 0.5, theirs 0.375 - 0.5 = -0.125."""
    fields = won_episode(np.array([[[1, 1, 1, 1], [1, 1, 0, 0]]] * 2, bool))
    fields["damage_dealt"][0, 0, :2], fields["kills"][0, 0, :2] = 0.5, 0.5
    fields["deaths"][0, 1, 0], fields["damage_taken"][0, 1, 0] = 1.0, 1.0
    fields["damage_dealt"][0, 1, 1], fields["kills"][0, 1, 1] = 1.0, 1.0
    fields["deaths"][0, 0, 3], fields["damage_taken"][0, 0, 3] = 1.0, 1.0
    fn = rewards.OpenAIFiveReward(rewards.OpenAIFiveConfig(tau_start=0.0, tau_end=0.0, time_decay=1.0))
    ours = fn(rewards.side_batch(fields, 0), True)
    theirs = fn(rewards.side_batch(fields, 1), True)
    np.testing.assert_allclose(ours[0], [1.625, 1.625, 0.125, -0.875], atol=1e-6)
    np.testing.assert_allclose(theirs[0], [-1.5, 0.25, 0.0, 0.0], atol=1e-6)
    assert ours[0].mean() == pytest.approx(0.625) and theirs[0, :2].mean() == pytest.approx(-0.625)
    np.testing.assert_allclose(ours[1], [5.0] * 4)
    np.testing.assert_allclose(theirs[1], [-5, -5, 0, 0])
    # OpenAI Five's per-unit counting (size_fair=False): their unit 1's kill of one of our four
    # is a whole kill in a team of two; ours rho mean 0.125, theirs 0.25: ours 0.125 - 0.25
    per_unit = rewards.OpenAIFiveReward(rewards.OpenAIFiveConfig(
        tau_start=0.0, tau_end=0.0, time_decay=1.0, size_fair=False))
    assert per_unit(rewards.side_batch(fields, 0), True)[0].mean() == pytest.approx(-0.125)


def test_openai_five_weights_decay_and_schedule():
    cfg = rewards.OpenAIFiveConfig(time_decay_horizon=10.0)
    batch = {"time": np.array([0.0, 10.0]), "win": np.array([0.0, 1.0])}
    for name in ("damage_dealt", "kills", "deaths"):
        batch[name] = np.zeros((2, 1))
    batch["kills"][:] = 1.0
    rho = rewards.unit_scores(batch, "", cfg)[:, 0]
    assert rho[0] == pytest.approx(cfg.w_kill)
    assert rho[1] == pytest.approx(cfg.w_kill * 0.6 + cfg.w_win)  # win not decayed
    # OpenAI Five's rerun: 0.3 -> 0.8, linear over anneal_updates learner updates
    assert cfg.team_spirit(0) == pytest.approx(0.3)
    assert cfg.team_spirit(cfg.anneal_updates // 2) == pytest.approx((0.3 + 0.8) / 2)
    assert cfg.team_spirit(10 * cfg.anneal_updates) == pytest.approx(0.8)
    fn = rewards.load_reward_plugin("openai_five", SMAX_SPEC)
    fn.set_progress(cfg.anneal_updates)
    assert fn.tau == pytest.approx(0.8)
    # the run's schedule reaches the built-in: tau = 0.1 + (250 / 1000) (0.5 - 0.1) = 0.2
    fn = rewards.load_reward_plugin("openai_five", SMAX_SPEC, team_spirit=(0.1, 0.5, 1000))
    fn.set_progress(250)
    assert fn.tau == pytest.approx(0.2)


def test_absent_units_get_no_reward():
    fields = smax_fields(np.random.default_rng(1))
    fields["present"][:, :, 2] = False
    out = rewards.OpenAIFiveReward()(rewards.side_batch(fields, 0), True)
    assert np.all(out[:, 2] == 0) and np.any(out[:, :2] != 0)


def test_running_normalizer():
    norm = rewards.RunningRewardNormalizer()
    rng = np.random.default_rng(0)
    for _ in range(50):
        out = norm(rng.normal(3.0, 2.0, 1000))
    assert norm.mean == pytest.approx(3.0, abs=0.05)
    assert norm.std == pytest.approx(2.0, rel=0.02)
    assert out.mean() == pytest.approx(1.5, abs=0.1)  # divided by the std, not centred
    centred = rewards.RunningRewardNormalizer(center=True)
    for _ in range(50):
        out = centred(rng.normal(3.0, 2.0, 1000))
    assert centred.std == pytest.approx(2.0, rel=0.02)
    assert out.mean() == pytest.approx(0.0, abs=0.1) and out.std() == pytest.approx(1.0, abs=0.05)


def test_side_batch_from_poker_timesteps_without_time():
    fields = {"done": np.array([[False, True]]), "outcome": np.array([[0, -1]], np.int8),
              "rewards": np.array([[[0, 0], [-2, 2]]], np.float32),
              "payoff": np.array([[[0, 0], [-2, 2]]], np.float32)}
    b1 = rewards.side_batch(fields, 1)
    np.testing.assert_array_equal(b1["outcome"], [0, 1])
    np.testing.assert_array_equal(b1["reward"], [0, 2])
    np.testing.assert_array_equal(b1["payoff"], [0, 2])
    np.testing.assert_array_equal(b1["enemy_payoff"], [0, -2])
    np.testing.assert_array_equal(rewards.outcome_reward(b1, True), [0, 1])
