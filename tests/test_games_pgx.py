"""pgx's two-player games as functional games (actors/games/pgx_game.py): scripted tic-tac-toe
against pgx driven directly, the masks and views of both sides, auto-reset, truncation at
max_steps, random connect four over a vmapped batch, the batch protocol, and the env ids
refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pgx
import pytest

from actors.games import pgx_game
from actors.games.base import Game, random_legal_actions
from actors.games.functional import FunctionalBatchGame, compiled
from actors.games.registry import UnknownGame
from agents.specs import MASK_KEY

TTT = "tic_tac_toe"
# By turn: the opener takes the top row (0, 1, 2) and wins on the fifth move; the other player
# takes 3 and 4.
SCRIPT = [0, 3, 1, 4, 2]
IGNORED = 8  # what the side not to move sends: a free cell the script never takes
BATCH = 8


@pytest.fixture(scope="module")
def ttt():
    fns = pgx_game.functions(TTT)
    reset, step = compiled(fns)  # the programs FunctionalBatchGame runs
    return fns, reset, step


def _actions(obs, move):
    """The side to move plays `move`; the other sends IGNORED (which counts if it is taken)."""
    return tuple({"action": jnp.where(o["acting"], move, IGNORED).astype(jnp.int32)} for o in obs)


@pytest.fixture(scope="module")
def script(ttt):
    """SCRIPT played in BATCH games: [(state, obs) before each move], the step outputs, the end."""
    _, reset, step = ttt
    state, obs = reset(jax.random.split(jax.random.PRNGKey(3), BATCH))
    before, outputs = [], []
    for move in SCRIPT:
        before.append((state, obs))
        state, obs, rewards, done, outcome, signals = step(state, _actions(obs, move))
        outputs.append((rewards, done, outcome, signals))
    return before, outputs, (state, obs)


def _np(x):
    return np.asarray(x)


def test_spec_config_and_cache():
    fns = pgx_game.functions(TTT)
    assert pgx_game.functions(TTT) is fns  # one per env id
    assert fns.config == ("pgx", TTT) and hash(fns.config) == hash(pgx_game.PgxFunctions(TTT).config)
    assert fns.spec.name == "pgx/tic_tac_toe" and fns.spec.max_steps == 9
    side0, side1 = fns.spec.sides
    assert side0 == side1
    assert side0.observation["observation"].shape == (3, 3, 2)  # pgx's shape, kept
    assert side0.observation["observation"].dtype == np.float32
    assert side0.observation["acting"].shape == () and side0.observation["acting"].dtype == np.bool_
    assert side0.action.heads["action"].num_values == 9
    assert dict(fns.spec.signal_fields)["payoff"].shape == (2,)


def test_scripted_win_matches_pgx(script):
    before, outputs, _ = script
    start = before[0][0].game
    opener = _np(start.current_player)
    assert set(opener) == {0, 1}  # both sides open in this batch (pgx draws the opener)
    # pgx itself, from the same starting games, every move taken by whoever is to move
    env_step = jax.jit(jax.vmap(pgx.make(TTT).step))
    s = start
    for t, move in enumerate(SCRIPT):
        s = env_step(s, jnp.full(BATCH, move, jnp.int32))
        assert _np(s.terminated).all() == (t == len(SCRIPT) - 1) and _np(s.terminated).any() == (t == len(SCRIPT) - 1)
    pgx_rewards = _np(s.rewards)
    rows = np.arange(BATCH)
    assert (pgx_rewards[rows, opener] == 1).all() and (pgx_rewards[rows, 1 - opener] == -1).all()

    for rewards, done, outcome, _ in outputs[:-1]:
        assert not _np(done).any() and not _np(rewards).any() and not _np(outcome).any()
    rewards, done, outcome, signals = outputs[-1]
    assert _np(done).all()
    np.testing.assert_array_equal(_np(rewards), pgx_rewards)  # side i's reward is player i's
    np.testing.assert_array_equal(_np(outcome), np.where(opener == 0, 1, -1))
    assert _np(outcome).dtype == np.int8 and _np(rewards).dtype == np.float32
    np.testing.assert_array_equal(_np(signals["payoff"]), pgx_rewards)


@pytest.mark.filterwarnings("ignore:.*player_id.*:DeprecationWarning")  # pgx's observe(state, player)
def test_masks_views_and_turns(script):
    before, _, _ = script
    env = pgx.make(TTT)
    one_hot0 = np.arange(9) == 0
    for state, obs in before:
        g = state.game
        player = _np(g.current_player)
        acting = np.stack([_np(o["acting"]) for o in obs], 1)
        assert (acting.sum(1) == 1).all()  # exactly one side moves
        for side in range(2):
            np.testing.assert_array_equal(acting[:, side], player == side)
            mask = _np(obs[side][MASK_KEY]["action"])
            want = np.where(acting[:, side, None], _np(g.legal_action_mask), one_hot0)
            np.testing.assert_array_equal(mask, want)
            # each side sees the board from its own view (pgx's observe for that player)
            view = jax.vmap(lambda s, i=side: env.observe(s, i))(g)
            np.testing.assert_array_equal(_np(obs[side]["observation"]), _np(view).astype(np.float32))
            assert _np(obs[side]["observation"]).dtype == np.float32


def test_auto_reset(ttt, script):
    _, _, step = ttt
    _, _, (state, obs) = script  # after the winning move: the next games
    acting = np.stack([_np(o["acting"]) for o in obs], 1)
    assert (acting.sum(1) == 1).all()
    for side in range(2):
        assert not _np(obs[side]["observation"]).any()  # an empty board
        mask = _np(obs[side][MASK_KEY]["action"])
        np.testing.assert_array_equal(mask[acting[:, side]], True)  # all nine cells legal
        assert (mask[~acting[:, side]] == (np.arange(9) == 0)).all()
    assert not _np(state.steps).any() and not _np(state.game.terminated).any()
    # the new games go on: one move, one stone on the board, no end
    state, obs, rewards, done, outcome, _ = step(state, _actions(obs, 4))
    assert not _np(done).any() and not _np(rewards).any()
    for side in range(2):
        assert (_np(obs[side]["observation"]).sum((1, 2, 3)) == 1).all()


def test_illegal_move_loses(ttt):
    """pgx's rule, kept: the mover of an illegal move (an occupied cell) loses at once."""
    _, reset, step = ttt
    state, obs = reset(jax.random.split(jax.random.PRNGKey(5), BATCH))
    opener = _np(state.game.current_player)
    state, obs, *_ = step(state, _actions(obs, 0))
    state, obs, rewards, done, outcome, _ = step(state, _actions(obs, 0))
    assert _np(done).all()
    rows = np.arange(BATCH)
    assert (_np(rewards)[rows, opener] == 1).all() and (_np(rewards)[rows, 1 - opener] == -1).all()


def test_truncation_at_max_steps():
    fns = pgx_game.PgxFunctions(TTT, max_steps=3)
    assert fns.spec.max_steps == 3 and fns.config == ("pgx", TTT, 3)
    reset, step = compiled(fns)
    state, obs = reset(jax.random.split(jax.random.PRNGKey(3), BATCH))
    for t, move in enumerate(SCRIPT[:3]):
        state, obs, rewards, done, outcome, _ = step(state, _actions(obs, move))
        assert _np(done).all() == (t == 2) and _np(done).any() == (t == 2)
    # cut short: a draw, no rewards, a fresh board
    assert not _np(rewards).any() and not _np(outcome).any()
    assert not _np(obs[0]["observation"]).any() and not _np(state.steps).any()


def test_connect_four_random_play():
    fns = pgx_game.functions("connect_four")
    batch, steps = 64, 200

    @jax.jit
    def play(key):
        state, obs = jax.vmap(fns.reset)(jax.random.split(key, batch))

        def body(carry, k):
            state, obs = carry
            masks = [o[MASK_KEY]["action"] for o in obs]
            keys = jax.random.split(k, 2)
            actions = tuple({"action": jax.random.categorical(kk, jnp.where(m, 0.0, -1e9)).astype(jnp.int32)}
                            for kk, m in zip(keys, masks))
            state, new_obs, rewards, done, outcome, _ = jax.vmap(fns.step)(state, actions)
            seen = (jnp.stack([m.any(-1) for m in masks], 1), jnp.stack([o["acting"] for o in obs], 1))
            return (state, new_obs), (rewards, done, outcome, *seen)

        return jax.lax.scan(body, (state, obs), jax.random.split(key, steps))[1]

    rewards, done, outcome, mask_any, acting = map(_np, play(jax.random.PRNGKey(0)))
    assert mask_any.all() and (acting.sum(-1) == 1).all()
    assert set(np.unique(outcome)) <= {-1, 0, 1} and {-1, 1} <= set(np.unique(outcome[done]))
    np.testing.assert_array_equal(rewards[..., 0], -rewards[..., 1])  # zero-sum
    assert not rewards[~done].any() and not outcome[~done].any()
    np.testing.assert_array_equal(outcome[done], np.sign(rewards[done][:, 0]))
    # every game ends within the 42 cells: at least 200 // 42 games in each slot
    ends = [np.flatnonzero(done[:, b]) for b in range(batch)]
    assert all(len(e) >= steps // 42 for e in ends)
    assert max(np.diff(np.concatenate([[-1], e])).max() for e in ends) <= fns.spec.max_steps
    # each new game draws its opener from the slot's own key, which moves on: most slots see
    # both sides open (each of their >= 4 games opens at random)
    openers = [acting[np.concatenate([[0], e[e + 1 < steps] + 1]), b, 0] for b, e in enumerate(ends)]
    assert sum(len(set(o)) == 2 for o in openers) > batch // 2


def test_batch_protocol_and_registry():
    from actors.games.registry import resolve

    game = resolve("pgx/tic_tac_toe")
    assert isinstance(game, Game) and game.name == "pgx/tic_tac_toe"
    assert game.capabilities.turn_based and game.functions() is pgx_game.functions(TTT)
    batch = FunctionalBatchGame(pgx_game.PgxFunctions(TTT), 8)
    rng = np.random.default_rng(0)
    ts = batch.reset(0)
    ended = 0
    for _ in range(30):
        for side, side_spec in enumerate(batch.spec.sides):
            side_spec.check_observation(ts.observations[side], (8,))
        ts = batch.step(random_legal_actions(rng, batch.spec, ts.observations))
        done, outcome, rewards = _np(ts.done), _np(ts.outcome), _np(ts.rewards)
        assert set(outcome[done]) <= {-1, 0, 1} and not outcome[~done].any()
        np.testing.assert_array_equal(outcome[done], np.sign(rewards[done, 0]))
        ended += done.sum()
    assert ended >= 8 * 30 // 9  # a game lasts at most 9 moves


def test_refuses_unknown_and_non_two_player_envs():
    with pytest.raises(UnknownGame, match="not one of pgx's environments") as info:
        pgx_game.game("not_a_game")
    assert "connect_four" in str(info.value) and "tic_tac_toe" in str(info.value)
    assert "2048" not in str(info.value)  # the list holds two-player games only
    assert {"2048", "sparrow_mahjong"} <= set(pgx.available_envs())
    with pytest.raises(UnknownGame, match="1-player"):
        pgx_game.game("2048")
    with pytest.raises(UnknownGame, match="3-player"):
        pgx_game.game("sparrow_mahjong")
    with pytest.raises(ValueError, match="players"):
        pgx_game.PgxFunctions("2048")
    assert pgx_game.game("connect_four").name == "pgx/connect_four"
