"""Poker's exact tools, the `exact_evaluator` capability of Kuhn and Leduc: what the league and
`experiments.nashconv` compute exactly instead of from sampled games (OpenSpiel's NashConv and
best responses over the players' tabular policies).

    tools = game.capabilities.exact_evaluator()        # this module
    exact = tools.ExactEvaluator("kuhn_poker", network, params_source)
    tools.nash_conv(game, tools.agent_policy(game, network, params))

Generic code reaches these only through the capability (`actors.games.base.Capabilities`), so it
never imports poker's modules by name.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from actors.games.poker import openspiel as poker
from actors.games.poker import policy as poker_policy
from actors.games.poker.openspiel import (  # noqa: F401  (the tools experiments.nashconv reads)
    load_game,
    make_spec,
    nash_conv,
    policy_from_callable,
    policy_from_table,
    uniform_policy_fn,
)
from actors.games.poker.policy import PolicyWalk, expected_payoffs, mix_policies, network_policy  # noqa: F401


def agent_policy(game, network, params, weights: Sequence[float] | None = None, walk=None):
    """The exact tabular policy of an agent: one network's `params` (`network_policy`), or a
    mixture of members (`params` a list, `weights` theirs: one member per game, mixed per
    information state by reach, `mix_policies`), as the league reads its players."""
    if weights:
        walk = walk or PolicyWalk(game, network)
        tables = [network_policy(game, network, p, walk=walk) for p in params]
        return mix_policies(game, tables, weights)
    return network_policy(game, network, params, walk=walk)


class ExactEvaluator:
    """Exact payoffs between frozen players of a poker game, instead of sampled games.

    Each player becomes its exact tabular policy (`poker_policy.network_policy`: the network
    on every information state, as the actor plays it), then its own reach of every terminal
    history (`poker_policy.TerminalPaths.reaches`, cached: frozen players never change); a new
    player's win rates and mean chips against K others are one matrix product
    (`TerminalPaths.payoffs`). An exploiter snapshot's gap to a best response against its
    target is `exploiter_gap`. `metrics()` has the time spent per player in each part."""

    def __init__(self, game_name: str, network, params_source):
        self.game = poker.load_game(game_name)
        self.network, self.params_source = network, params_source
        self.paths = poker_policy.TerminalPaths(self.game)
        self._walk = poker_policy.PolicyWalk(self.game, network)
        self._reaches: dict[str, np.ndarray] = {}
        self._tables: dict = {}
        self._m = dict(players=0, tabular_seconds=0.0, payoff_seconds=0.0, pairs=0, gaps=0, gap_seconds=0.0)

    def table(self, player_id: str, cache: bool = True):
        """The player's exact tabular policy (cached for frozen players: `cache`)."""
        if player_id in self._tables:
            return self._tables[player_id]
        got = self.params_source.latest_params(player_id)
        if got is None:
            raise LookupError(f"no parameters for player {player_id!r}")
        table = poker_policy.network_policy(self.game, self.network, got[1], walk=self._walk)
        if cache:
            self._tables[player_id] = table
        return table

    def reach(self, player_id: str) -> np.ndarray:
        """[2, Z] the player's own reach of every terminal history, as each seat."""
        if player_id not in self._reaches:
            started = time.monotonic()
            self._reaches[player_id] = self.paths.reaches(self.table(player_id)).astype(np.float32)
            self._m["players"] += 1
            self._m["tabular_seconds"] += time.monotonic() - started
        return self._reaches[player_id]

    def nash_conv(self, mixtures: Mapping[str, Mapping[str, float]], main_agents: list[str],
                  frozen: set[str]) -> dict[str, float]:
        """Exact NashConv (OpenSpiel) of each named mixture of frozen and learning players
        (e.g. {"nash": latest weights, "nash_average": average weights}; mixed per information
        state by reach, `poker_policy.mix_policies`; a mixture without support is left out)
        and of each main agent's current policy. Only `frozen` players' tables are cached."""
        out = {}
        for name, weights in mixtures.items():
            mixed = self.mixture(weights, frozen)
            if mixed is not None:
                out[name] = poker.nash_conv(self.game, mixed)
        for agent in main_agents:
            out[agent] = poker.nash_conv(self.game, self.table(agent, cache=False))
        return out

    def mixture(self, weights: Mapping[str, float], frozen: set[str]):
        """The tabular policy of the mixture `weights` of players (one player per game, mixed
        per information state by reach: `poker_policy.mix_policies`), or None for no support.
        Only `frozen` players' tables are cached."""
        support = [(p, w) for p, w in weights.items() if w > 0]
        if not support:
            return None
        tables = [self.table(p, cache=p in frozen) for p, _ in support]
        return poker_policy.mix_policies(self.game, tables, [w for _, w in support])

    def exploiter_gap(self, player_id: str, target: str, weights: Mapping[str, float],
                      frozen: set[str]) -> dict | None:
        """How far the frozen exploiter `player_id` is from a best response to its target, the
        mixture `weights` of players (a main exploiter's: {main agent: 1}, current parameters;
        a league exploiter's: the league's Nash weights) named `target`:
        `best_response_gap` of the two tabular policies, as {"target", "br_value",
        "exploiter_value", "gap"}; None when `weights` has no support, or when a value is not
        finite (a player whose parameters are NaN: its learner is named "stalled" elsewhere)."""
        target_policy = self.mixture(weights, frozen)
        if target_policy is None:
            return None
        started = time.monotonic()
        out = {"target": target, **best_response_gap(self.game, self.table(player_id), target_policy, self.paths)}
        if not all(np.isfinite(out[k]) for k in ("br_value", "exploiter_value")):
            return None
        self._m["gaps"] += 1
        self._m["gap_seconds"] += time.monotonic() - started
        return out

    def payoffs(self, player_id: str, against: list[str]) -> dict[str, tuple[float, float]]:
        """{other: (win rate with draws half, mean chips)} of `player_id` against each other."""
        reach = self.reach(player_id)
        if not against:
            return {}
        others = np.stack([self.reach(q) for q in against])
        started = time.monotonic()
        win, chips = self.paths.payoffs(reach.astype(np.float64), others.astype(np.float64))
        self._m["payoff_seconds"] += time.monotonic() - started
        self._m["pairs"] += len(against)
        return {q: (float(w), float(c)) for q, w, c in zip(against, win, chips)}

    def metrics(self) -> dict:
        return dict(self._m)


def best_response_gap(game, exploiter, target, paths=None) -> dict[str, float]:
    """An exploiter's distance from a best response to its target, in the game's chips, seats
    averaged (the pool deals seats at random):

        br_value        = 1/2 sum_p max_sigma u_p(sigma, target)     (`poker.best_response_value`:
                                                                      OpenSpiel's BestResponsePolicy)
        exploiter_value = 1/2 (u_0(exploiter, target) + u_1(target, exploiter))
                                                                     (`TerminalPaths.payoffs`, exact)
        gap             = br_value - exploiter_value  >= 0

    `exploiter` and `target` are tabular policies of `game`; `paths` a `TerminalPaths` of the
    game (built here if None). Gap 0: the exploiter exploits its target as much as anything
    can; a large gap with a small NashConv of the target says the exploiter, not the target,
    holds the league back."""
    paths = paths or poker_policy.TerminalPaths(game)
    _, chips = paths.payoffs(paths.reaches(exploiter), paths.reaches(target)[None])
    br_value = poker.best_response_value(game, target)
    exploiter_value = float(chips[0])
    return {"br_value": br_value, "exploiter_value": exploiter_value, "gap": br_value - exploiter_value}
