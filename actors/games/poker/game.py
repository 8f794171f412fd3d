"""Kuhn and Leduc poker in JAX: pure per-game functions, one jitted vmapped step over the batch.

Exactly OpenSpiel's `kuhn_poker` and `leduc_poker` with default parameters (two players; the
reference is open_spiel/games/kuhn_poker/kuhn_poker.cc and leduc_poker/leduc_poker.cc), behind
the batch protocol (actors/games/base.py) with the SAME `GameSpec` as `poker.OpenSpielPool`:
each side observes `info_state` (OpenSpiel's `information_state_tensor` of the OpenSpiel player
it plays), `acting`, and the legal-action mask of head "action" (one-hot at 0 when the other
player moves); the signal `payoff` and the rewards are the chips won, `outcome` their sign.
tests/test_jax_poker.py walks every history of both games beside pyspiel.

Rules (OpenSpiel's):
- Kuhn: a deck J Q K (cards 0 1 2); each player antes 1 and gets one card (player 0 first, each
  uniform over the cards left). Actions 0 pass, 1 bet (one chip); player 0 moves first. Pass
  facing a bet folds; bet facing a bet calls. The game ends after pass-pass or bet-bet (showdown:
  the higher card wins), bet-pass or pass-bet-pass (fold), or pass-bet-bet (showdown).
- Leduc: six cards J J Q Q K K (card c has rank c // 2); antes 1; one private card each (player 0
  first), then a public card after the first betting round, each uniform over the cards left.
  Actions 0 fold (legal only facing a bet), 1 call / check, 2 raise (2 chips in round 1, 4 in
  round 2, at most two raises a round). A round ends on a call that is not its first action;
  player 0 opens both rounds. At the showdown a private card pairing the public card wins, else
  the higher rank; equal ranks split the pot.
- Returns: the winner gains what the loser put in, the loser loses it (a split: 0 each).

Information-state tensor (the observers of the .cc files): one-hot observing player [2], its
private card [cards], Leduc's public card once dealt [6], then the betting sequence [rounds,
slots, 2] -- Kuhn: slot i holds the i-th move one-hot (pass, bet); Leduc: per round, call as
(1, 0), raise as (0, 1) (3 * 2 - 2 = 4 slots a round).

Chance: `deal_cards` turns draws d_k uniform on [0, cards - k) into the d_k-th card still in the
deck, in deck order -- OpenSpiel's chance outcome d_k, each of probability 1 / cards left (a draw
is a 64-bit random number mod the cards left: a bias below 2^-61, as `jax.random.randint`). All
cards (Leduc's public one included) are dealt when a game starts: the public card is unseen
until the second round, so its distribution given the history is OpenSpiel's. Seats: as in the
pool, side 0 plays OpenSpiel player `seat`, drawn per game (0 or 1) unless `random_seats=False`.
An illegal action is played as call/check (OpenSpiel's `action_mapping`); games auto-reset.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from actors.games.base import TimeStep, check_actions
from agents.specs import (
    MASK_KEY,
    ActionSpec,
    ArraySpec,
    DiscreteHead,
    GameSpec,
    ObservationSpec,
    SideSpec,
)

GAMES = ("kuhn_poker", "leduc_poker")
ACTION_HEAD = "action"  # poker.ACTION_HEAD (not imported: that module loads pyspiel)
FOLD, CALL, RAISE = 0, 1, 2  # what a move does (Leduc's action ids)


@dataclasses.dataclass(frozen=True)
class PokerConfig:
    game: str = "leduc_poker"  # "kuhn_poker" or "leduc_poker"
    random_seats: bool = True  # side 0 plays OpenSpiel player 0 or 1 at random, per game

    def __post_init__(self):
        if self.game not in GAMES:
            raise ValueError(f"unknown JAX poker game {self.game!r}; have {GAMES}")

    @property
    def leduc(self) -> bool:
        return self.game == "leduc_poker"


class PokerState(NamedTuple):
    cards: jax.Array    # int32 [2 | 3]: OpenSpiel player 0's card, player 1's, (Leduc) public
    seat: jax.Array     # int32: the OpenSpiel player side 0 plays
    player: jax.Array   # int32: the OpenSpiel player to move
    round: jax.Array    # int32: betting round (0, Leduc also 1)
    moves: jax.Array    # int32: moves so far in this round
    raises: jax.Array   # int32: raises (bets) so far in this round
    contrib: jax.Array  # int32 [2]: chips each OpenSpiel player has put in the pot
    betting: jax.Array  # float32 [rounds * slots * 2]: the tensor's betting sequence
    key: jax.Array      # uint32 [2]: a raw PRNG key (as jax.random.PRNGKey makes)


def deal_cards(draws):
    """Card k = the draws[k]-th (from 0) card not dealt yet, in deck order (draws[k] < cards - k):
    the draw moved up past each card dealt before that it reaches (at most three cards)."""
    cards = []
    for d in draws:
        card = jnp.asarray(d, jnp.int32)
        below = cards if len(cards) < 2 else [jnp.minimum(*cards), jnp.maximum(*cards)]
        for taken in below:  # in increasing order
            card = card + (card >= taken)
        cards.append(card)
    return jnp.stack(cards)


def make_spec(config: PokerConfig) -> GameSpec:
    """`poker.make_spec(pyspiel.load_game(config.game))`, without pyspiel."""
    actions, dim, max_steps = (3, 30, 8) if config.leduc else (2, 11, 3)
    fields = {"info_state": ArraySpec((dim,), np.float32), "acting": ArraySpec((), np.bool_)}
    side = SideSpec(ObservationSpec(fields), ActionSpec({ACTION_HEAD: DiscreteHead(actions)}),
                    num_units=1)
    return GameSpec(f"{config.game}()", (side, side), max_steps,
                    {"payoff": ArraySpec((2,), np.float32)})


class PokerFunctions:
    """Pure, jittable reset/step over ONE game; `JaxPokerGame` vmaps and jits them."""

    def __init__(self, config: PokerConfig = PokerConfig()):
        self.config = config
        self.spec = make_spec(config)
        leduc = config.leduc
        self.num_cards, self.num_actions = (6, 3) if leduc else (3, 2)
        self.rounds, self.slots = (2, 4) if leduc else (1, 3)
        self.raise_amounts = jnp.array([2, 4] if leduc else [1], jnp.int32)
        self.max_raises = 2 if leduc else 1
        self.num_dealt = 3 if leduc else 2
        self.num_bits = 2 + 2 * self.num_dealt + 1  # key, two words a card, seat
        # What action a does, by [facing a bet, a]. Kuhn: pass = check or fold, bet = bet or call.
        self.kinds = jnp.array([[CALL, CALL, RAISE], [FOLD, CALL, RAISE]] if leduc
                               else [[CALL, RAISE], [FOLD, CALL]], jnp.int32)

    # -- chance and observations -----------------------------------------------------------
    def new_game(self, cards, seat, key) -> PokerState:
        """The first decision node after the deal `cards` (see PokerState), side 0 in `seat`."""
        z = jnp.zeros((), jnp.int32)
        return PokerState(
            cards=jnp.asarray(cards, jnp.int32), seat=jnp.asarray(seat, jnp.int32), player=z,
            round=z, moves=z, raises=z, contrib=jnp.ones(2, jnp.int32),
            betting=jnp.zeros(self.rounds * self.slots * 2, jnp.float32), key=key)

    def initial_state(self, key) -> PokerState:
        return self.fresh_game(jax.random.bits(key, (self.num_bits,)))

    def fresh_game(self, bits) -> PokerState:
        """A new game from uint32 random bits [num_bits]: its key, the deal, the seat.

        Draw k is a 64-bit uniform number (two words) mod the cards left: uniform up to a
        bias below 2^-61, as `jax.random.randint`'s; one threefry call serves the whole game.
        """
        dealt = self.num_dealt
        left = (self.num_cards - jnp.arange(dealt)).astype(jnp.uint32)
        hi, lo = bits[2:2 + dealt], bits[2 + dealt:2 + 2 * dealt]
        wrap = (jnp.uint32(0xFFFFFFFF) % left + 1) % left  # 2^32 mod left
        draws = ((hi % left) * wrap + lo % left) % left
        seat = bits[-1] & 1 if self.config.random_seats else 0
        return self.new_game(deal_cards(draws.astype(jnp.int32)), seat, bits[:2])

    def legal(self, s: PokerState):
        """OpenSpiel's legal actions of the player to move, as a mask [num_actions]."""
        if not self.config.leduc:
            return jnp.ones(2, bool)
        facing = s.contrib[s.player] < s.contrib[1 - s.player]
        return jnp.stack([facing, jnp.array(True), s.raises < self.max_raises])

    def info_state(self, s: PokerState, player):
        """OpenSpiel's information_state_tensor(player) (the observers of kuhn/leduc_poker.cc)."""
        parts = [jax.nn.one_hot(player, 2), jax.nn.one_hot(s.cards[player], self.num_cards)]
        if self.config.leduc:
            parts.append(jax.nn.one_hot(jnp.where(s.round > 0, s.cards[2], -1), self.num_cards))
        return jnp.concatenate(parts + [s.betting]).astype(jnp.float32)

    def observe(self, s: PokerState):
        legal = self.legal(s)
        out = []
        for side in range(2):
            player = s.seat ^ side
            acting = s.player == player
            mask = jnp.where(acting, legal, jnp.arange(self.num_actions) == 0)
            out.append({"info_state": self.info_state(s, player), "acting": acting,
                        MASK_KEY: {ACTION_HEAD: mask}})
        return tuple(out)

    # -- reset / step ----------------------------------------------------------------------
    def reset(self, key):
        s = self.initial_state(key)
        return s, self.observe(s)

    def strength(self, cards):
        """Showdown hand strength of both players (higher wins, equal splits)."""
        if not self.config.leduc:
            return cards[:2]
        rank = cards // 2
        return jnp.where(rank[:2] == rank[2], 3 + rank[:2], rank[:2])

    def advance(self, s: PokerState, action):
        """Applies OpenSpiel player `s.player`'s `action` (no reset): (state, done, returns[2])."""
        p = s.player
        a = jnp.clip(action, 0, self.num_actions - 1).astype(jnp.int32)
        facing = s.contrib[p] < s.contrib[1 - p]
        kind = self.kinds[facing.astype(jnp.int32), a]
        kind = jnp.where((kind == RAISE) & (s.raises >= self.max_raises), CALL, kind)
        level = jnp.max(s.contrib)
        put = level + jnp.where(kind == RAISE, self.raise_amounts[s.round], 0)
        contrib = s.contrib.at[p].set(jnp.where(kind == FOLD, s.contrib[p], put))
        bit = a if not self.config.leduc else kind - 1  # Kuhn: pass/bet, Leduc: call/raise
        betting = s.betting.at[(s.round * self.slots + s.moves) * 2 + bit].set(1.0)
        round_over = (kind == CALL) & (s.moves > 0)
        fold = kind == FOLD
        done = fold | (round_over & (s.round == self.rounds - 1))
        strength = self.strength(s.cards)
        win0 = jnp.where(fold, jnp.where(p == 0, -1, 1), jnp.sign(strength[0] - strength[1]))
        stake = jnp.where(fold, contrib[p], contrib[0])  # the loser's chips (equal at a showdown)
        returns = (jnp.stack([win0, -win0]) * stake).astype(jnp.float32)
        new = s._replace(
            player=jnp.where(round_over, 0, 1 - p), round=s.round + round_over,
            moves=jnp.where(round_over, 0, s.moves + 1),
            raises=jnp.where(round_over, 0, s.raises + (kind == RAISE)),
            contrib=contrib, betting=betting)
        return new, done, returns

    def step(self, s: PokerState, actions):
        """One move of one game, auto-resetting; returns (state, obs pair, rewards[2], done, outcome, signals)."""
        mover = s.player ^ s.seat  # the side to move
        action = jnp.where(mover == 0, actions[0][ACTION_HEAD], actions[1][ACTION_HEAD])
        new, done, returns = self.advance(s, action)
        rewards = jnp.where(done, jnp.stack([returns[s.seat], returns[1 - s.seat]]), 0.0)
        outcome = jnp.sign(rewards[0]).astype(jnp.int8)
        bits = jax.random.bits(s.key, (2 + self.num_bits,))
        fresh = self.fresh_game(bits[2:])
        new = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, new._replace(key=bits[:2]))
        return new, self.observe(new), rewards, done, outcome, {"payoff": rewards}


_SHARED_FUNCTIONS: dict = {}


class JaxPokerGame:
    """A batch of Kuhn or Leduc poker games as one jitted, vmapped step (protocol: base.py)."""

    def __init__(self, game: str, batch_size: int, random_seats: bool = True):
        config = PokerConfig(game, random_seats)
        self.batch_size = int(batch_size)
        if config not in _SHARED_FUNCTIONS:  # games of one configuration share compiled steps
            fns = PokerFunctions(config)
            _SHARED_FUNCTIONS[config] = (fns, jax.jit(jax.vmap(fns.reset)), jax.jit(jax.vmap(fns.step)))
        self.fns, self._reset, self._step = _SHARED_FUNCTIONS[config]
        self.spec = self.fns.spec
        self.state: PokerState | None = None

    def reset(self, seed: int) -> TimeStep:
        keys = jax.random.split(jax.random.PRNGKey(seed), self.batch_size)
        self.state, obs = self._reset(keys)
        b = self.batch_size
        zeros = jnp.zeros((b, 2), jnp.float32)
        return TimeStep(obs, zeros, jnp.zeros(b, bool), jnp.zeros(b, jnp.int8), {"payoff": zeros})

    def step(self, actions) -> TimeStep:
        check_actions(self.spec, actions, self.batch_size)
        actions = tuple({k: jnp.asarray(v) for k, v in a.items()} for a in actions)
        self.state, obs, rewards, done, outcome, signals = self._step(self.state, actions)
        return TimeStep(obs, rewards, done, outcome, signals)


# -- the game as text, for a person playing it (Capabilities.text; experiments.play) -----------

ACTION_NAMES = {"kuhn_poker": ("Pass", "Bet"), "leduc_poker": ("Fold", "Call", "Raise")}
"""OpenSpiel's `action_to_string` of each action (tests/test_play.py checks them)."""
RANKS = "JQK"


class PokerText:
    """Kuhn or Leduc drawn as text for the OpenSpiel player that `side` plays: its card, the
    board card (Leduc, from the second round), the pot, the betting so far; `end` shows both
    cards. Works on one game's `PokerState` (numpy or JAX arrays)."""

    def __init__(self, fns: PokerFunctions):
        self.fns = fns
        self.names = ACTION_NAMES[fns.config.game]

    def card(self, c) -> str:
        return RANKS[int(c) // 2] if self.fns.config.leduc else RANKS[int(c)]

    def action_name(self, state, side, head, value) -> str:
        return self.names[int(value)]

    def _moves(self, s) -> list[list[tuple[int, str]]]:
        """Per round so far, the moves played: (OpenSpiel player, action name); player 0 opens
        each round and the players alternate."""
        betting = np.asarray(s.betting).reshape(self.fns.rounds, self.fns.slots, 2)
        names = self.names[1:] if self.fns.config.leduc else self.names   # Leduc's bits: call, raise
        last = min(int(np.asarray(s.round)), self.fns.rounds - 1)
        return [[(m % 2, names[int(np.argmax(slot))]) for m, slot in enumerate(betting[r]) if slot.any()]
                for r in range(last + 1)]

    def _lines(self, s, side: int, rounds, shown: bool) -> str:
        me = int(np.asarray(s.seat)) ^ side
        cards, contrib = np.asarray(s.cards), np.asarray(s.contrib)
        who = {me: "you", 1 - me: "opponent"}
        opens = "each round" if self.fns.config.leduc else "the betting"
        lines = [f"{self.fns.config.game}: you are player {me} (player 0 opens {opens})",
                 f"  your card: {self.card(cards[me])}    opponent's card: "
                 f"{self.card(cards[1 - me]) if shown else '?'}"]
        if self.fns.config.leduc:
            board = self.card(cards[2]) if len(rounds) > 1 else "not dealt yet"
            lines.append(f"  board card: {board}")
        lines.append(f"  pot: {int(contrib.sum())} (you put in {int(contrib[me])}, opponent {int(contrib[1 - me])})")
        for r, moves in enumerate(rounds):
            label = "betting" if not self.fns.config.leduc else f"round {r + 1} betting"
            lines.append(f"  {label}: " + (", ".join(f"{who[p]} {name}" for p, name in moves) or "none yet"))
        return "\n".join(lines)

    def describe(self, state, side) -> str:
        return self._lines(state, side, self._moves(state), shown=False)

    def end(self, state, actions, side) -> str:
        """Both cards, the whole betting with the last move (`actions` played from `state`, the
        game's last state), and how it ended."""
        s = jax.tree.map(np.asarray, state)
        player, me = int(s.player), int(s.seat) ^ side
        action = int(np.asarray(actions[player ^ int(s.seat)][ACTION_HEAD]))
        rounds = self._moves(s)
        rounds[-1].append((player, self.names[action]))
        new, _, returns = self.fns.advance(jax.tree.map(jnp.asarray, state), action)
        new, returns = jax.tree.map(np.asarray, new), np.asarray(returns)
        folded = int(self.fns.kinds[int(s.contrib[player] < s.contrib[1 - player]), action]) == FOLD
        how = (f"{'you' if player == me else 'opponent'} folded" if folded
               else "showdown, " + ("a split pot" if returns[me] == 0 else
                                    f"{'you' if returns[me] > 0 else 'opponent'} won"))
        return f"{self._lines(new, side, rounds, shown=True)}\n  {how}"


def text(fns: PokerFunctions) -> PokerText:
    """`Capabilities.text` of Kuhn and Leduc."""
    return PokerText(fns)
