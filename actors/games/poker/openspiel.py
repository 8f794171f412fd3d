"""OpenSpiel two-player zero-sum games (Kuhn and Leduc poker first) as a pool, and policy adapters.

`OpenSpielPool` runs B pyspiel games behind the batch protocol (actors/games/base.py): each side
observes its information-state tensor and the legal actions; only the player to move acts
(`acting`), the other side's action is ignored; chance nodes are sampled inside the pool. The
per-step reward is the chip payoff on the final step (zero-sum); `outcome` is its sign.

`policy_from_callable` turns any policy over information-state tensors -- a callable taking the
same observation dict the pool produces, batched, and returning action probabilities -- into an
OpenSpiel `TabularPolicy`, so `open_spiel.python.algorithms.exploitability.nash_conv` measures it
exactly; `policy_from_table` does the same for a table keyed by information-state string (a .npz
of saved tabular parameters). NashConv is always computed by OpenSpiel.

pgx's Kuhn/Leduc are not used: no test here proves them equal to OpenSpiel's on every reachable
history, which the games issue requires before a JAX poker may drive the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import exploitability

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

ACTION_HEAD = "action"
PolicyFn = Callable[[Mapping[str, np.ndarray]], np.ndarray]


def load_game(name: str) -> pyspiel.Game:
    game = pyspiel.load_game(name)
    info = game.get_type()
    if game.num_players() != 2 or info.utility != pyspiel.GameType.Utility.ZERO_SUM:
        raise ValueError(f"{name}: need a two-player zero-sum game")
    if not info.provides_information_state_tensor:
        raise ValueError(f"{name}: the game provides no information-state tensor")
    return game


def make_spec(game: pyspiel.Game) -> GameSpec:
    num_actions = game.num_distinct_actions()
    head = DiscreteHead(num_actions)
    fields = {
        "info_state": ArraySpec(tuple(game.information_state_tensor_shape()), np.float32),
        "acting": ArraySpec((), np.bool_),
    }
    side = SideSpec(ObservationSpec(fields), ActionSpec({ACTION_HEAD: head}), num_units=1)
    signals = {"payoff": ArraySpec((2,), np.float32)}
    return GameSpec(str(game), (side, side), game.max_game_length(), signals)


def observe(state: pyspiel.State, player: int, num_actions: int, dim: int) -> dict[str, np.ndarray]:
    """One side's observation of `state`; a non-acting side gets a one-hot-at-0 mask."""
    acting = (not state.is_terminal()) and state.current_player() == player
    mask = np.zeros(num_actions, bool)
    if acting:
        mask[state.legal_actions(player)] = True
    else:
        mask[0] = True
    if state.is_terminal():
        info = np.zeros(dim, np.float32)
    else:
        info = np.asarray(state.information_state_tensor(player), np.float32)
    return {"info_state": info, "acting": np.bool_(acting), MASK_KEY: {ACTION_HEAD: mask}}


class OpenSpielPool:
    """A pool of `batch_size` OpenSpiel games stepped together (protocol: actors/games/base.py)."""

    def __init__(self, game_name: str, batch_size: int, random_seats: bool = True):
        self.game = load_game(game_name)
        self.batch_size = int(batch_size)
        self.spec = make_spec(self.game)
        self._num_actions = self.game.num_distinct_actions()
        self._dim = int(np.prod(self.game.information_state_tensor_shape()))
        self._rng = np.random.default_rng(0)
        self.states: list[pyspiel.State] = []
        # seats[i]: the OpenSpiel player that side 0 plays in game i (side 1 plays the other).
        # Dealt at random per game, so that a learner on side 0 learns both players' decisions.
        self.random_seats = random_seats
        self.seats = np.zeros(self.batch_size, np.int64)

    def _new_state(self) -> pyspiel.State:
        return self._resolve_chance(self.game.new_initial_state())

    def _deal_seat(self, i: int) -> None:
        self.seats[i] = self._rng.integers(2) if self.random_seats else 0

    def _resolve_chance(self, state: pyspiel.State) -> pyspiel.State:
        while state.is_chance_node():
            outcomes, probs = zip(*state.chance_outcomes())
            state.apply_action(int(self._rng.choice(outcomes, p=probs)))
        return state

    def _observations(self):
        per_side = []
        for side in range(2):
            obs = [observe(s, int(seat) ^ side, self._num_actions, self._dim)
                   for s, seat in zip(self.states, self.seats)]
            per_side.append(stack(obs))
        return tuple(per_side)

    def reset(self, seed: int) -> TimeStep:
        self._rng = np.random.default_rng(seed)
        self.states = [self._new_state() for _ in range(self.batch_size)]
        for i in range(self.batch_size):
            self._deal_seat(i)
        b = self.batch_size
        return TimeStep(self._observations(), np.zeros((b, 2), np.float32), np.zeros(b, bool),
                        np.zeros(b, np.int8), {"payoff": np.zeros((b, 2), np.float32)})

    def step(self, actions) -> TimeStep:
        check_actions(self.spec, actions, self.batch_size)
        b = self.batch_size
        payoff = np.zeros((b, 2), np.float32)
        done = np.zeros(b, bool)
        for i, state in enumerate(self.states):
            player = state.current_player()
            seat = int(self.seats[i])
            action = int(actions[player ^ seat][ACTION_HEAD][i])
            if action not in state.legal_actions(player):
                raise ValueError(f"game {i}: action {action} is illegal for player {player} "
                                 f"(legal {state.legal_actions(player)}) in history {state.history()}")
            state.apply_action(action)
            self._resolve_chance(state)
            if state.is_terminal():
                returns = state.returns()
                payoff[i] = (returns[seat], returns[1 - seat])
                done[i] = True
                self.states[i] = self._new_state()
                self._deal_seat(i)
        outcome = np.sign(payoff[:, 0]).astype(np.int8)
        return TimeStep(self._observations(), payoff.copy(), done, outcome, {"payoff": payoff})


def stack(observations: list[dict]) -> dict:
    """Stack per-game observation dicts (with the nested mask dict) along a new batch axis."""
    out = {k: np.stack([o[k] for o in observations]) for k in observations[0] if k != MASK_KEY}
    out[MASK_KEY] = {h: np.stack([o[MASK_KEY][h] for o in observations])
                     for h in observations[0][MASK_KEY]}
    return out


# ---------------------------------------------------------------------------------------------
# Policy adapters for exact NashConv.


def policy_from_callable(game: pyspiel.Game, policy_fn: PolicyFn) -> os_policy.TabularPolicy:
    """A `TabularPolicy` whose every information state holds `policy_fn`'s action probabilities.

    `policy_fn(obs)` gets the pool's observation dict batched over all information states of the
    game (`info_state` [N, dim], `acting` [N], `action_mask` {"action": [N, A]}) and returns probabilities
    [N, A]; mass on illegal actions is an error, rows are renormalised.
    """
    tabular = os_policy.TabularPolicy(game)
    num_actions = game.num_distinct_actions()
    dim = int(np.prod(game.information_state_tensor_shape()))
    obs = [observe(s, s.current_player(), num_actions, dim) for s in tabular.states]
    batch = stack(obs)
    probs = np.asarray(policy_fn(batch), np.float64)
    mask = batch[MASK_KEY][ACTION_HEAD]
    if probs.shape != mask.shape:
        raise ValueError(f"policy returned shape {probs.shape}, expected {mask.shape}")
    if not np.all(np.isfinite(probs)) or np.any(probs < 0):
        raise ValueError("policy returned negative or non-finite probabilities")
    if np.any(probs[~mask] > 1e-6):
        raise ValueError("policy puts probability on illegal actions")
    probs = np.where(mask, probs, 0.0)
    total = probs.sum(-1, keepdims=True)
    if np.any(total <= 0):
        raise ValueError("policy gives zero total probability to the legal actions of a state")
    tabular.action_probability_array[:] = probs / total
    return tabular


def policy_from_table(game: pyspiel.Game, table: Mapping[str, np.ndarray]) -> os_policy.TabularPolicy:
    """A `TabularPolicy` from {information-state string: probabilities [A]}; every state needed."""
    tabular = os_policy.TabularPolicy(game)
    missing = [k for k in tabular.state_lookup if k not in table]
    if missing:
        raise ValueError(f"the table lacks {len(missing)} information states, e.g. {missing[0]!r}")
    for key, index in tabular.state_lookup.items():
        probs = np.asarray(table[key], np.float64)
        mask = tabular.legal_actions_mask[index].astype(bool)
        if probs.shape != mask.shape or np.any(probs[~mask] > 1e-6) or probs[mask].sum() <= 0:
            raise ValueError(f"bad probabilities {probs} for information state {key!r}")
        tabular.action_probability_array[index] = np.where(mask, probs, 0) / probs[mask].sum()
    return tabular


def uniform_policy_fn(obs: Mapping[str, np.ndarray]) -> np.ndarray:
    mask = np.asarray(obs[MASK_KEY][ACTION_HEAD], np.float64)
    return mask / mask.sum(-1, keepdims=True)


def nash_conv(game: pyspiel.Game, policy: os_policy.Policy) -> float:
    """OpenSpiel's exact NashConv (sum over players of best-response improvements)."""
    return float(exploitability.nash_conv(game, policy))


def best_response_value(game: pyspiel.Game, policy: os_policy.Policy) -> float:
    """The exact value (chips) of a best response to `policy`, averaged over the two seats
    (the pool deals seats at random):

        BR(pi) = 1/2 sum_p max_{sigma_p} u_p(sigma_p, pi_{-p})

    each term by OpenSpiel's `best_response.BestResponsePolicy(game, p, policy).value(root)`
    (a full walk of the tree). In a zero-sum game sum_p u_p(pi) = 0, so OpenSpiel's
    NashConv(pi) = sum_p (max u_p - u_p(pi)) = 2 BR(pi)."""
    from open_spiel.python.algorithms import best_response

    root = game.new_initial_state()
    return 0.5 * sum(float(best_response.BestResponsePolicy(game, p, policy).value(root)) for p in range(2))
