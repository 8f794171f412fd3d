"""The evaluator node: plays two frozen players against each other and reports the outcomes.

A plain class (public methods = RPC surface: `evaluate`, `metrics`). It writes no replay. The
outcomes feed the payoff matrix (AlphaStar, seed 002, Extended Data Fig. 6: evaluators play
any pair of players).

    evaluator = Evaluator(game, network, params_source, result_sink)
    results = evaluator.evaluate("main_v3", "exploiter_v1", num_games=200,
                                 races=("terran", "zerg"))
    summarize(results)   # {"games", "wins", "draws", "losses", "win_rate"}

Unbiased counts. With B games running at once, "the first N games to finish" over-sample
short games. Instead every batch slot b plays a fixed quota of games (quotas summing to N,
differing by at most one) and only its first quota games count; a slot's games are i.i.d., so
the counted games are an unbiased sample.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping

import jax
import numpy as np

from actors.actor import make_policy_fn, played_matchups, races_played, reset_game
from actors.rollout import Games, step_stepwise
from league.matchmaking import Match
from league.results import GameResult


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig:
    seed: int = 0
    greedy: bool = False            # True: most likely actions instead of sampling
    max_batch_steps: int = 100_000  # safety bound on a whole evaluation
    branch: str = "evaluation"      # the "branch" of the reported results


class Evaluator:
    """See the module docstring. `params_source.latest_params(player_id)` -> (version, params);
    `result_sink.report_results(list of result dicts)` (the coordinator's match source), or None."""

    def __init__(self, game, network, params_source, result_sink=None,
                 config: EvaluatorConfig | None = None, evaluator_id: str = "evaluator"):
        self.game, self.network = game, network
        self.params_source, self.result_sink = params_source, result_sink
        self.config = config or EvaluatorConfig()
        self.evaluator_id = evaluator_id
        self._policy = make_policy_fn(network, greedy=self.config.greedy)
        self._rng = jax.random.PRNGKey(self.config.seed)
        self._evaluations = 0
        self._lock = threading.Lock()
        self._m = dict(evaluations=0, games=0, env_steps=0, seconds=0.0)

    def _params(self, player_id: str):
        got = self.params_source.latest_params(player_id)
        if got is None:
            raise LookupError(f"no parameters for player {player_id!r}")
        return int(got[0]), jax.device_put(got[1])

    def evaluate(self, player_a: str, player_b: str, num_games: int,
                 races: tuple[str, str] | None = None) -> dict:
        """Plays `num_games` games of `player_a` (side 0) against `player_b` (side 1).

        Returns the games' results, `num_games` dicts {"home": player_a, "away": player_b,
        "outcome": "win"|"draw"|"loss" (home's view), "score" (the game's payoff to home),
        "length", "actor_id", "branch", and for games with races "home_race" / "away_race",
        the races played as the game reports them}, the
        format of the actors' reports; they are also reported to the result sink if any."""
        if num_games < 1:
            raise ValueError("num_games must be >= 1")
        started = time.monotonic()
        batch = int(self.game.batch_size)
        _, params_a = self._params(player_a)
        params_b = params_a if player_b == player_a else self._params(player_b)[1]
        match = Match(player_a, player_b, self.config.branch, *(races or (None, None)))
        self._evaluations += 1
        timestep = reset_game(self.game, self.config.seed * 7919 + self._evaluations, match)
        matchups = played_matchups(self.game)
        quota = np.full(batch, num_games // batch) + (np.arange(batch) < num_games % batch)
        played = np.zeros(batch, np.int64)
        games = Games.start(None, timestep.observations, self.network.initial_state(batch),
                            self.network.initial_state(batch), batch, xp=np)
        results = []
        steps = 0
        while np.any(played < quota):
            if steps >= self.config.max_batch_steps:
                raise RuntimeError(f"evaluation did not finish in {steps} batch steps")
            self._rng, key = jax.random.split(self._rng)
            games, step = step_stepwise(self.game, self._policy, params_a, params_b, games, key)
            steps += 1
            done = np.asarray(step.done, bool)
            outcome, score, length = (np.asarray(x) for x in (step.outcome, step.score, step.length))
            for i in np.flatnonzero(done & (played < quota)):
                results.append(GameResult.one(player_a, player_b, int(np.sign(outcome[i])),
                                              float(score[i]), int(length[i]),
                                              actor_id=self.evaluator_id, branch=self.config.branch,
                                              source="evaluator", **races_played(matchups, i)))
            played += done
        if self.result_sink is not None:
            self.result_sink.report_results(results)
        with self._lock:
            self._m["evaluations"] += 1
            self._m["games"] += len(results)
            self._m["env_steps"] += steps * batch
            self._m["seconds"] += time.monotonic() - started
        return results

    def metrics(self) -> dict:
        with self._lock:
            m = dict(self._m)
        m["env_steps_per_second"] = m["env_steps"] / max(m["seconds"], 1e-9)
        return m


class ExactEvaluator:
    """Exact payoffs between frozen players of a poker game, instead of sampled games.

    Each player becomes its exact tabular policy (`poker_policy.network_policy`: the network
    on every information state, as the actor plays it), then its own reach of every terminal
    history (`poker_policy.TerminalPaths.reaches`, cached: frozen players never change); a new
    player's win rates and mean chips against K others are one matrix product
    (`TerminalPaths.payoffs`). An exploiter snapshot's gap to a best response against its
    target is `exploiter_gap`. `metrics()` has the time spent per player in each part."""

    def __init__(self, game_name: str, network, params_source):
        from actors.games import poker, poker_policy

        self.game = poker.load_game(game_name)
        self.network, self.params_source = network, params_source
        self.paths = poker_policy.TerminalPaths(self.game)
        self._walk = poker_policy.PolicyWalk(self.game, network)
        self._reaches: dict[str, np.ndarray] = {}
        self._tables: dict = {}
        self._m = dict(players=0, tabular_seconds=0.0, payoff_seconds=0.0, pairs=0, gaps=0, gap_seconds=0.0)

    def table(self, player_id: str, cache: bool = True):
        """The player's exact tabular policy (cached for frozen players: `cache`)."""
        from actors.games import poker_policy

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
        from actors.games import poker

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
        from actors.games import poker_policy

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
    from actors.games import poker, poker_policy

    paths = paths or poker_policy.TerminalPaths(game)
    _, chips = paths.payoffs(paths.reaches(exploiter), paths.reaches(target)[None])
    br_value = poker.best_response_value(game, target)
    exploiter_value = float(chips[0])
    return {"br_value": br_value, "exploiter_value": exploiter_value, "gap": br_value - exploiter_value}


def summarize(results: list[GameResult]) -> dict:
    """{"games", "wins", "draws", "losses", "win_rate" (draws count half)} of game results."""
    wins, draws, losses = (sum(getattr(r, k) for r in results) for k in ("wins", "draws", "losses"))
    games = wins + draws + losses
    return {"games": games, "wins": wins, "draws": draws, "losses": losses,
            "win_rate": (wins + 0.5 * draws) / games if games else float("nan")}
