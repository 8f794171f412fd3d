"""Recurrent poker networks as exact tabular OpenSpiel policies, and Nash mixtures of players.

`network_policy(game, network, params)` turns what the actor plays into a `TabularPolicy`:
pi(a | I) for every information state I of the game, exactly (no sampling). The actor feeds a
recurrent network the pool's observations of BOTH players at EVERY decision step of a game
(`actors.games.poker.openspiel.OpenSpielPool`): side p sees `observe(state, p)` -- its information-state
tensor, `acting`, and its legal-action mask (one-hot at 0 when the other player moves) -- with
`first` set on the game's first decision step only (the LSTM is reset there); chance is resolved
inside the pool, so chance nodes and the terminal state are never observed. Here the game tree
is walked breadth-first by decision step and each side's core state is carried along every
history, so the network sees at each decision exactly the sequence of inputs the actor gave it.
The walk is batched over all histories of one depth (one `network.step` per depth and side),
and all depths are one jitted program (`PolicyWalk`): the tree is walked in Python once per
game, so converting one more player costs one XLA call.

With perfect recall a player's information state fixes its own past observations, so every
history of one information state must give the same probabilities; `network_policy` checks it
(`max_infostate_spread` in the returned report) instead of assuming it.

`mix_policies(game, policies, weights)` is the behaviour policy of a mixture of players for an
extensive-form game: the mixture picks one player per game (with `weights`) and that player
plays the whole game, so at an information state I of player p

    pi(a | I) = sum_k w_k x_k(I) pi_k(a | I) / sum_k w_k x_k(I),

where x_k(I) is player p's own reach probability of I under pi_k (the product of p's own action
probabilities along the way; Heinrich et al. 2015, "Fictitious Self-Play in Extensive-Form
Games", Theorem 7 -- the realisation-equivalent behaviour strategy). OpenSpiel's
`policy_aggregator.PolicyAggregator` computes the same thing (tests/test_nashconv_league.py).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy

from actors.games.poker import openspiel as poker


def _decision_states(state: pyspiel.State, prob: float = 1.0):
    """The non-chance descendants of `state` reached through chance only, with chance probability."""
    if state.is_terminal():
        return []
    if not state.is_chance_node():
        return [(state, prob)]
    out = []
    for action, p in state.chance_outcomes():
        out.extend(_decision_states(state.child(action), prob * p))
    return out


def make_step_fn(network):
    """(params, obs, state, first) -> (probabilities of the action head, new state), unjitted
    (`PolicyWalk` jits the whole walk around it)."""

    def step(params, obs, state, first):
        out, state = network.step(params, obs, state, first)
        return jax.nn.softmax(out.logits[poker.ACTION_HEAD].astype(jnp.float32), axis=-1), state

    return step


class PolicyWalk:
    """The game tree as the actor feeds it to a network, walked once; then any parameters'
    exact tabular policy is one jitted call.

    Built once per game: the tree is walked breadth-first by decision step (chance resolved
    in between, as the pool does), and each level keeps what the network sees there, for both
    sides (`poker.observe`), each history's parent on the level before, and the information
    state, acting player and legal actions of each history. `__call__(params)` then runs the
    network over every level in one XLA program (the core state of each history carried from
    its parent), and writes each information state's probabilities into a `TabularPolicy`.
    The tree walk in Python (the slow part) is paid once, not per player.

    `step` (optional) replaces `make_step_fn(network)`: tests use it to cut the network's memory.
    """

    def __init__(self, game: pyspiel.Game, network, step=None):
        self.game = game
        self.num_actions = game.num_distinct_actions()
        dim = int(np.prod(game.information_state_tensor_shape()))
        self._template = os_policy.TabularPolicy(game)
        self.levels = []  # per level: obs per side, parents, infostate index, player, legal
        frontier = [s for s, _ in _decision_states(game.new_initial_state())]
        parents = np.zeros(0, np.int64)
        while frontier:
            index, player, legal, children, child_parents = [], [], [], [], []
            for i, state in enumerate(frontier):
                p = state.current_player()
                index.append(self._template.state_lookup[self._template._state_key(state, p)])  # noqa: SLF001
                player.append(p)
                mask = np.zeros(self.num_actions, bool)
                mask[state.legal_actions(p)] = True
                legal.append(mask)
                for action in state.legal_actions(p):
                    for child, _ in _decision_states(state.child(action)):
                        children.append(child)
                        child_parents.append(i)
            obs = [poker.stack([poker.observe(s, side, self.num_actions, dim) for s in frontier])
                   for side in range(2)]
            self.levels.append(dict(obs=obs, parents=parents, index=np.asarray(index, np.int64),
                                    player=np.asarray(player, np.int64), legal=np.stack(legal)))
            frontier, parents = children, np.asarray(child_parents, np.int64)
        self.index = np.concatenate([lv["index"] for lv in self.levels])
        self.legal = np.concatenate([lv["legal"] for lv in self.levels])
        self.histories = len(self.index)
        unreached = len(self._template.state_lookup) - len(np.unique(self.index))
        if unreached:
            raise ValueError(f"{unreached} information states were never reached")
        step = step or make_step_fn(network)
        self._probs = jax.jit(lambda params: self._walk(network, step, params))

    def _walk(self, network, step, params):
        """[histories, A] the acting player's action probabilities at every decision history."""
        core, rows = None, []
        for depth, level in enumerate(self.levels):
            n = len(level["index"])
            if core is None:
                core = [network.initial_state(n) for _ in range(2)]
            else:
                core = [jax.tree_util.tree_map(lambda x, idx=level["parents"]: x[idx], c) for c in core]
            probs = []
            for side in range(2):
                p, core[side] = step(params, level["obs"][side], core[side], jnp.full(n, depth == 0))
                probs.append(p)
            rows.append(jnp.where((level["player"] == 0)[:, None], probs[0], probs[1]))
        return jnp.concatenate(rows)

    def __call__(self, params, check_tolerance: float = 1e-5,
                 report: dict | None = None) -> os_policy.TabularPolicy:
        """The exact tabular policy of `params` (see `network_policy`)."""
        rows = np.where(self.legal, np.asarray(self._probs(params), np.float64), 0.0)
        rows /= rows.sum(-1, keepdims=True)
        tabular = copy.copy(self._template)  # shares the structure, copies the array (OpenSpiel)
        _, first = np.unique(self.index, return_index=True)
        tabular.action_probability_array[self.index[first]] = rows[first]
        spread = float(np.abs(tabular.action_probability_array[self.index] - rows).max())
        if spread > check_tolerance:
            raise ValueError(f"histories of one information state disagree by {spread:.2e}: the "
                             "network's inputs are not a function of the information state")
        if report is not None:
            report.update(histories=self.histories, infostates=len(self._template.state_lookup),
                          max_infostate_spread=spread)
        return tabular


def network_policy(game: pyspiel.Game, network, params, *, walk: PolicyWalk | None = None,
                   check_tolerance: float = 1e-5, report: dict | None = None
                   ) -> os_policy.TabularPolicy:
    """The exact tabular policy of `network` with `params` playing `game` as the actor plays it.

    `walk`: a `PolicyWalk` of this game and network to reuse (callers converting many players
    keep one; without it the tree is walked again). `report` (optional dict) receives
    `histories` (decision nodes visited), `infostates` and `max_infostate_spread` (the largest
    difference of probabilities between two histories of one information state; a ValueError
    if above `check_tolerance`)."""
    walk = walk or PolicyWalk(game, network)
    return walk(params, check_tolerance=check_tolerance, report=report)


def own_reach(game: pyspiel.Game, policies: Sequence[os_policy.TabularPolicy]) -> np.ndarray:
    """x_k(I): [K, num information states] own reach of each information state (of the player
    acting there) under each tabular policy, indexed like `policies[k].state_lookup`."""
    template = policies[0]
    tables = np.stack([p.action_probability_array for p in policies])  # [K, S, A]
    reach = np.zeros((len(policies), len(template.state_lookup)))

    def walk(state: pyspiel.State, own: np.ndarray):  # own: [2, K]
        if state.is_terminal():
            return
        if state.is_chance_node():
            for action, _ in state.chance_outcomes():
                walk(state.child(action), own)
            return
        player = state.current_player()
        index = template.state_lookup[template._state_key(state, player)]  # noqa: SLF001
        reach[:, index] = own[player]  # equal on every history of I (perfect recall)
        for action in state.legal_actions(player):
            nxt = own.copy()
            nxt[player] = own[player] * tables[:, index, action]
            walk(state.child(action), nxt)

    walk(game.new_initial_state(), np.ones((2, len(policies))))
    return reach


def mix_policies(game: pyspiel.Game, policies: Sequence[os_policy.TabularPolicy],
                 weights: Sequence[float]) -> os_policy.TabularPolicy:
    """The behaviour policy of the mixture `weights` over `policies` (see the module docstring).

    Information states no policy of the support reaches get the plain weighted average (they
    do not change any payoff)."""
    w = np.asarray(weights, np.float64)
    if len(w) != len(policies) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("weights must be non-negative, not all zero, one per policy")
    w = w / w.sum()
    keep = np.flatnonzero(w > 0)
    policies = [policies[k] for k in keep]
    w = w[keep]
    tables = np.stack([p.action_probability_array for p in policies])  # [K, S, A]
    reach = own_reach(game, policies) * w[:, None]                       # [K, S]
    total = reach.sum(0)
    mixed = np.einsum("ks,ksa->sa", reach, tables)
    fallback = np.einsum("k,ksa->sa", w, tables)
    probs = np.where(total[:, None] > 0, mixed / np.maximum(total, 1e-300)[:, None], fallback)
    out = os_policy.TabularPolicy(game)
    out.action_probability_array[:] = probs / probs.sum(-1, keepdims=True)
    return out


class TerminalPaths:
    """Every terminal history z of a two-player game with what an exact payoff needs: its
    chance probability c(z), player 0's utility u_0(z), and for each player the (information
    state, action) pairs of that player's own moves on the way, so that a tabular policy's own
    reach of z is one gather and a product:

        x^p(z) = prod_{(I, a) on z, I player p's} pi(a | I)

    The expected payoff of a against b with a as player 0 is then
    sum_z c(z) u_0(z) x_a^0(z) x_b^1(z) (one dot product), and with K players it is a matrix
    product: exact meta-games of thousands of players cost one walk of the tree, once.
    """

    def __init__(self, game: pyspiel.Game):
        template = os_policy.TabularPolicy(game)
        self.num_actions = game.num_distinct_actions()
        self.num_states = len(template.state_lookup)
        chance, utility, paths = [], [], ([], [])

        def walk(state: pyspiel.State, prob: float, path: tuple[list, list]):
            if state.is_terminal():
                chance.append(prob)
                utility.append(state.returns()[0])
                for p in range(2):
                    paths[p].append(list(path[p]))
                return
            if state.is_chance_node():
                for action, q in state.chance_outcomes():
                    walk(state.child(action), prob * q, path)
                return
            player = state.current_player()
            index = template.state_lookup[template._state_key(state, player)]  # noqa: SLF001
            for action in state.legal_actions(player):
                path[player].append(index * self.num_actions + action)
                walk(state.child(action), prob, path)
                path[player].pop()

        walk(game.new_initial_state(), 1.0, ([], []))
        self.chance = np.asarray(chance)                 # [Z]
        self.utility = np.asarray(utility)               # [Z] player 0's
        one = self.num_states * self.num_actions         # the index of a padding 1.0
        self.paths = []                                  # per player [Z, L] flat indices
        for p in range(2):
            length = max(1, max(len(x) for x in paths[p]))
            self.paths.append(np.asarray([x + [one] * (length - len(x)) for x in paths[p]], np.int64))

    def reaches(self, policy: os_policy.TabularPolicy) -> np.ndarray:
        """[2, Z]: the policy's own reach of every terminal as player 0 and as player 1."""
        flat = np.concatenate([np.asarray(policy.action_probability_array, np.float64).ravel(), [1.0]])
        return np.stack([flat[self.paths[p]].prod(axis=1) for p in range(2)])

    def payoffs(self, reach: np.ndarray, others: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact (win rates, mean chips) of the player with `reach` [2, Z] against each of
        `others` [K, 2, Z], seats alternated (half the games as each player):

            chips(a, b) = 1/2 sum_z c u_0 (x_a^0 x_b^1 - x_b^0 x_a^1)
            win(a, b)   = 1/2 sum_z c (x_a^0 x_b^1 [u_0 > 0] + x_b^0 x_a^1 [u_0 < 0]
                                       + 1/2 (x_a^0 x_b^1 + x_b^0 x_a^1) [u_0 = 0])"""
        others = np.asarray(others).reshape(-1, 2, len(self.chance))
        c, u = self.chance, self.utility
        first = others[:, 1] * (reach[0] * c)[None]              # [K, Z]: a as player 0
        second = others[:, 0] * (reach[1] * c)[None]             # [K, Z]: a as player 1
        chips = 0.5 * (first @ u - second @ u)
        win = 0.5 * (first @ ((u > 0) + 0.5 * (u == 0)) + second @ ((u < 0) + 0.5 * (u == 0)))
        return win, chips


def expected_payoffs(game: pyspiel.Game, policies: Sequence[os_policy.TabularPolicy]) -> np.ndarray:
    """[K, K] exact expected chips won by policy a against policy b, seats alternated (a is
    player 0 in half the games): the antisymmetric chip meta-game of the players
    (`TerminalPaths`: V0[a, b] = sum_z chance(z) u_0(z) x_a^0(z) x_b^1(z))."""
    paths = TerminalPaths(game)
    reach = np.stack([paths.reaches(p) for p in policies])        # [K, 2, Z]
    v0 = (reach[:, 0] * paths.chance * paths.utility) @ reach[:, 1].T
    return 0.5 * (v0 - v0.T)
