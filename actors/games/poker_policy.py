"""Recurrent poker networks as exact tabular OpenSpiel policies, and Nash mixtures of players.

`network_policy(game, network, params)` turns what the actor plays into a `TabularPolicy`:
pi(a | I) for every information state I of the game, exactly (no sampling). The actor feeds a
recurrent network the pool's observations of BOTH players at EVERY decision step of a game
(`actors.games.poker.OpenSpielPool`): side p sees `observe(state, p)` -- its information-state
tensor, `acting`, and its legal-action mask (one-hot at 0 when the other player moves) -- with
`first` set on the game's first decision step only (the LSTM is reset there); chance is resolved
inside the pool, so chance nodes and the terminal state are never observed. Here the game tree
is walked breadth-first by decision step and each side's core state is carried along every
history, so the network sees at each decision exactly the sequence of inputs the actor gave it.
The walk is batched over all histories of one depth (one `network.step` per depth).

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

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy

from actors.games import poker


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


def _pad(n: int) -> int:
    """Batch sizes padded to powers of two (few distinct jit shapes)."""
    return 1 << max(0, (n - 1).bit_length())


def make_step_fn(network):
    """jitted (params, obs, state, first) -> (probabilities of the action head, new state)."""

    def step(params, obs, state, first):
        out, state = network.step(params, obs, state, first)
        return jax.nn.softmax(out.logits[poker.ACTION_HEAD].astype(jnp.float32), axis=-1), state

    return jax.jit(step)


def network_policy(game: pyspiel.Game, network, params, *, step_fn=None,
                   check_tolerance: float = 1e-5, report: dict | None = None
                   ) -> os_policy.TabularPolicy:
    """The exact tabular policy of `network` with `params` playing `game` as the actor plays it.

    `report` (optional dict) receives `histories` (decision nodes visited), `infostates` and
    `max_infostate_spread` (the largest difference of probabilities between two histories of
    one information state; a ValueError if above `check_tolerance`)."""
    step_fn = step_fn or make_step_fn(network)
    num_actions = game.num_distinct_actions()
    dim = int(np.prod(game.information_state_tensor_shape()))
    tabular = os_policy.TabularPolicy(game)
    seen = np.zeros(len(tabular.state_lookup), bool)
    spread = 0.0
    histories = 0

    frontier = [s for s, _ in _decision_states(game.new_initial_state())]
    core = None  # per side: pytree [len(frontier), ...]
    first_step = True
    while frontier:
        n = len(frontier)
        padded = _pad(n)
        histories += n
        if core is None:
            core = [network.initial_state(n) for _ in range(2)]
        probs, new_core = [], []
        for side in range(2):
            obs = poker.stack([poker.observe(s, side, num_actions, dim) for s in frontier])
            obs = jax.tree_util.tree_map(lambda x, r=padded: _pad_rows(x, r), obs)
            state = jax.tree_util.tree_map(lambda x, r=padded: _pad_rows(x, r), core[side])
            first = np.full(padded, first_step)
            p, s = step_fn(params, obs, state, first)
            probs.append(np.asarray(p, np.float64)[:n])
            new_core.append(jax.tree_util.tree_map(lambda x, m=n: np.asarray(x)[:m], s))
        children, parents = [], []
        for i, state in enumerate(frontier):
            player = state.current_player()
            key = tabular._state_key(state, player)  # noqa: SLF001 -- OpenSpiel's own key rule
            index = tabular.state_lookup[key]
            legal = np.zeros(num_actions, bool)
            legal[state.legal_actions(player)] = True
            row = np.where(legal, probs[player][i], 0.0)
            row /= row.sum()
            if seen[index]:
                spread = max(spread, float(np.abs(tabular.action_probability_array[index] - row).max()))
            else:
                tabular.action_probability_array[index] = row
                seen[index] = True
            for action in state.legal_actions(player):
                for child, _ in _decision_states(state.child(action)):
                    children.append(child)
                    parents.append(i)
        parents = np.asarray(parents, np.int64)
        core = [jax.tree_util.tree_map(lambda x, idx=parents: x[idx], c) for c in new_core]
        frontier = children
        first_step = False
    if not seen.all():
        raise ValueError(f"{int((~seen).sum())} information states were never reached")
    if spread > check_tolerance:
        raise ValueError(f"histories of one information state disagree by {spread:.2e}: the "
                         "network's inputs are not a function of the information state")
    if report is not None:
        report.update(histories=histories, infostates=int(seen.size), max_infostate_spread=spread)
    return tabular


def _pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
    x = np.asarray(x)
    if len(x) == rows:
        return x
    pad = np.zeros((rows - len(x), *x.shape[1:]), x.dtype)
    if x.dtype == np.bool_ and x.ndim == 2:  # masks: keep one legal action in padding rows
        pad[:, 0] = True
    return np.concatenate([x, pad])


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
