"""JAX Kuhn and Leduc poker equal OpenSpiel's on every history, deal like OpenSpiel's chance,
auto-reset, and drive the actor's fused path."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pyspiel
import pytest

from actors.actor import Actor, ActorConfig
from actors.games import make_batch_game
from actors.games.base import BatchGame, random_legal_actions
from actors.games.poker import game as jax_poker
from actors.games.poker import openspiel as poker
from agents import make_network
from agents.specs import MASK_KEY

GAMES = ["kuhn_poker", "leduc_poker"]
NUM_CARDS = {"kuhn_poker": 3, "leduc_poker": 6}
DEALT = {"kuhn_poker": 2, "leduc_poker": 3}  # private cards, then Leduc's public card


def all_deals(name):
    """Every ordered deal of distinct cards: (player 0's, player 1's[, public])."""
    return list(itertools.permutations(range(NUM_CARDS[name]), DEALT[name]))


def openspiel_deal(game, deal):
    """The OpenSpiel state after the private cards of `deal`."""
    state = game.new_initial_state()
    for card in deal[:2]:
        state.apply_action(card)
    return state


def check_decision(state, seat, obs, k, num_actions):
    """Game k of the batched `obs` is OpenSpiel's decision node `state`, side 0 in `seat`."""
    player = state.current_player()
    for side in range(2):
        p = seat ^ side
        o = obs[side]
        np.testing.assert_array_equal(o["info_state"][k], state.information_state_tensor(p),
                                      err_msg=f"{state.history()} player {p}")
        assert bool(o["acting"][k]) == (p == player)
        want = state.legal_actions_mask(p) if p == player else np.eye(num_actions)[0]
        np.testing.assert_array_equal(o[MASK_KEY]["action"][k], np.asarray(want, bool),
                                      err_msg=f"{state.history()} player {p}")


def take(tree, rows):
    rows = np.array(rows, int)
    return jax.tree.map(lambda x: x[rows], tree)


@pytest.mark.parametrize("name", GAMES)
def test_spec_is_the_pools(name):
    game = jax_poker.JaxPokerGame(name, 4)
    assert isinstance(game, BatchGame)
    assert game.spec == poker.make_spec(poker.load_game(name))
    assert jax_poker.ACTION_HEAD == poker.ACTION_HEAD


@pytest.mark.parametrize("name", GAMES)
def test_every_history_equals_openspiel(name):
    """The full tree, both seats: every deal, every legal action, breadth-first and batched."""
    game = pyspiel.load_game(name)
    fns = jax_poker.PokerFunctions(jax_poker.PokerConfig(name))
    num_actions = game.num_distinct_actions()
    step = jax.jit(jax.vmap(fns.step))
    roots = [(deal, seat) for deal in all_deals(name) for seat in (0, 1)]
    nodes = [(openspiel_deal(game, deal), deal, seat) for deal, seat in roots]
    states = jax.vmap(fns.new_game)(jnp.array([d for d, _ in roots]), jnp.array([s for _, s in roots]),
                                    jax.random.split(jax.random.PRNGKey(0), len(roots)))
    obs = jax.device_get(jax.vmap(fns.observe)(states))
    decisions = terminals = 0
    while nodes:
        players = np.asarray(states.player)
        children, parents, moves = [], [], []
        for k, (state, deal, seat) in enumerate(nodes):
            assert players[k] == state.current_player()
            check_decision(state, seat, obs, k, num_actions)
            decisions += 1
            for a in state.legal_actions():
                child = state.child(a)
                if child.is_chance_node():  # Leduc's public card
                    child.apply_action(deal[2])
                children.append((child, deal, seat))
                parents.append(k)
                moves.append((a, state.current_player() ^ seat))
        a = np.array([m[0] for m in moves], np.int32)
        side = np.array([m[1] for m in moves])
        other = (a + 1) % num_actions  # the side not to move sends something else: ignored
        actions = ({"action": jnp.asarray(np.where(side == 0, a, other))},
                   {"action": jnp.asarray(np.where(side == 1, a, other))})
        batch = take(states, parents)
        states, obs, rewards, done, outcome, signals = jax.device_get(step(batch, actions))
        keep = []
        for k, (child, _, seat) in enumerate(children):
            assert bool(done[k]) == child.is_terminal(), child.history()
            if child.is_terminal():
                terminals += 1
                returns = child.returns()
                np.testing.assert_array_equal(rewards[k], [returns[seat], returns[1 - seat]])
                np.testing.assert_array_equal(signals["payoff"][k], rewards[k])
                assert outcome[k] == np.sign(returns[seat])
            else:
                assert rewards[k].tolist() == [0.0, 0.0] and outcome[k] == 0
                keep.append(k)
        nodes = [children[k] for k in keep]
        states, obs = take((states, obs), keep)
    # Per deal and seat -- Kuhn: decisions at -, p, b, pb; terminals pp, pbp, pbb, bp, bb.
    # Leduc, per round: decisions at -, c, r, cr, rr, crr; 5 sequences end by a call (cc, rc,
    # crc, rrc, crrc: to the next round or the showdown), 4 by a fold (rf, rrf, crf, crrf).
    per_deal = {"kuhn_poker": (4, 5), "leduc_poker": (6 + 5 * 6, 4 + 5 * (5 + 4))}[name]
    assert (decisions, terminals) == tuple(len(roots) * n for n in per_deal)


@pytest.mark.parametrize("name", GAMES)
def test_deal_is_openspiels_chance(name):
    """Draw d_k (uniform on [0, cards - k)) picks OpenSpiel's chance outcome d_k, every outcome
    of a chance node has probability 1 / (cards - k); so deals are OpenSpiel's chance exactly."""
    game = pyspiel.load_game(name)
    n = NUM_CARDS[name]
    ranges = [range(n - k) for k in range(DEALT[name])]
    draws = np.array(list(itertools.product(*ranges)), np.int32)
    dealt = np.asarray(jax.vmap(lambda d: jax_poker.deal_cards(list(d)))(jnp.asarray(draws)))
    for d, cards in zip(draws, dealt):
        state = game.new_initial_state()
        expected = []
        for k, draw in enumerate(d):
            if k == 2:  # Leduc: check-check to the public card
                state.apply_action(1)
                state.apply_action(1)
            outcomes, probs = zip(*state.chance_outcomes())
            assert len(outcomes) == n - k
            np.testing.assert_allclose(probs, 1.0 / (n - k))
            expected.append(outcomes[draw])
            state.apply_action(outcomes[draw])
        assert cards.tolist() == expected
    assert len({tuple(c) for c in dealt.tolist()}) == len(all_deals(name))  # every deal once


@pytest.mark.parametrize("name", GAMES)
def test_deal_and_seat_frequencies(name):
    """A large batch, at reset and again after the auto-reset: every deal and seat is as
    frequent as OpenSpiel's chance makes it, within 5 binomial standard errors, and a new game
    repeats the deal and seat of the one before only by chance."""
    batch = 240_000
    game = jax_poker.JaxPokerGame(name, batch)
    deals = all_deals(name)
    index = {d: i for i, d in enumerate(deals)}

    def within(count, p):
        return abs(count - batch * p) < 5 * np.sqrt(batch * p * (1 - p))

    def check_and_get():
        cards, seats = np.asarray(game.state.cards), np.asarray(game.state.seat)
        counts = np.bincount([index[tuple(c)] for c in cards.tolist()], minlength=len(deals))
        assert all(within(c, 1 / len(deals)) for c in counts), (counts.min(), counts.max())
        assert within(seats.sum(), 0.5)
        return cards, seats

    game.reset(seed=7)
    cards, seats = check_and_get()
    call = {"action": np.ones(batch, np.int32)}  # Kuhn: bet, call; Leduc: check x 4
    for _ in range(2 if name == "kuhn_poker" else 4):
        ts = game.step((call, call))
    assert np.asarray(ts.done).all()
    new_cards, new_seats = check_and_get()
    repeats = np.sum(np.all(new_cards == cards, axis=1) & (new_seats == seats))
    assert within(repeats, 1 / (2 * len(deals))), repeats


@pytest.mark.parametrize("name", GAMES)
def test_random_play_auto_resets_and_follows_openspiel(name):
    """Random legal play of a batch: every step equals OpenSpiel replayed from the JAX deal, and
    a finished game restarts at once with a fresh deal (its first decision observed)."""
    batch, num_actions = 32, 3 if name == "leduc_poker" else 2
    game = jax_poker.JaxPokerGame(name, batch)
    os_game = pyspiel.load_game(name)
    rng = np.random.default_rng(0)
    ts = game.reset(seed=1)

    def replay_start():
        cards, seats = np.array(game.state.cards), np.array(game.state.seat)
        return [openspiel_deal(os_game, c) for c in cards], cards, seats

    states, cards, seats = replay_start()
    finished, lengths, seats_seen = 0, np.zeros(batch, int), set()
    for _ in range(40):
        for side in range(2):
            game.spec.side(side).check_observation(ts.observations[side], (batch,))
        obs = jax.device_get(ts.observations)
        for i, state in enumerate(states):
            check_decision(state, int(seats[i]), obs, i, num_actions)
        actions = random_legal_actions(rng, game.spec, obs)
        ts = game.step(actions)
        done = np.asarray(ts.done)
        rewards = np.asarray(ts.rewards)
        lengths += 1
        new_states, new_cards, new_seats = replay_start()
        for i, state in enumerate(states):
            seat = int(seats[i])
            state.apply_action(int(actions[state.current_player() ^ seat]["action"][i]))
            if state.is_chance_node():
                state.apply_action(int(cards[i][2]))
            assert done[i] == state.is_terminal()
            if done[i]:
                returns = state.returns()
                np.testing.assert_array_equal(rewards[i], [returns[seat], returns[1 - seat]])
                assert ts.outcome[i] == np.sign(returns[seat])
                assert 2 <= lengths[i] <= game.spec.max_steps
                finished, lengths[i] = finished + 1, 0
                states[i], cards[i], seats[i] = new_states[i], new_cards[i], new_seats[i]
                seats_seen.add(int(seats[i]))
            else:
                assert rewards[i].tolist() == [0.0, 0.0]
                assert cards[i].tolist() == new_cards[i].tolist() and seats[i] == new_seats[i]
    assert finished > 2 * batch
    assert seats_seen == {0, 1}


def test_fixed_seats_and_illegal_actions_are_called():
    game = jax_poker.JaxPokerGame("leduc_poker", 8, random_seats=False)
    ts = game.reset(0)
    assert not np.asarray(game.state.seat).any()
    fold = {"action": np.zeros(8, np.int32)}  # fold without a bet to call: played as a check
    ts = game.step((fold, fold))
    np.testing.assert_array_equal(np.asarray(ts.observations[1]["info_state"])[:, 14:16], [[1, 0]] * 8)
    assert not np.asarray(ts.done).any()


class _Matches:
    def __init__(self):
        self.results = []

    def request_match(self, agent_id):
        return {"opponent_id": "frozen", "branch": "test"}

    def report_results(self, results):
        self.results.extend(results)


class _Params:
    def __init__(self, params):
        self.params = params

    def latest_params(self, player_id, min_version=None):
        return None if min_version is not None and min_version > 1 else (1, self.params)


@pytest.mark.parametrize("name, lengths", [("kuhn_poker", {2, 3}), ("leduc_poker", set(range(2, 9)))])
def test_make_batch_game_is_jax_and_the_actor_fuses_it(name, lengths):
    game = make_batch_game(name, 16)
    assert isinstance(game, jax_poker.JaxPokerGame)
    assert isinstance(make_batch_game(name, 2, pool=True), poker.OpenSpielPool)
    assert isinstance(make_batch_game("leduc_poker(suit_isomorphism=True)", 2), poker.OpenSpielPool)
    network = make_network(game.spec, dict(mlp_sizes=(16,), lstm_size=8))
    params = network.init(jax.random.PRNGKey(0), game.spec.side(0).zero_observation())
    matches = _Matches()
    actor = Actor("actor", "agent", game, network, matches, _Params(params), None, "unused",
                  ActorConfig(unroll_length=8, param_refresh_seconds=1.0))
    try:
        actor.run(num_steps=3 * 7)
    finally:
        actor.close()
    assert actor._fused_fns  # the fused scan played
    assert len(matches.results) == actor.metrics()["episodes"] > 16
    assert {r.length for r in matches.results} <= lengths
    assert all(r.score != 0 or name == "leduc_poker" for r in matches.results)
