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


def summarize(results: list[GameResult]) -> dict:
    """{"games", "wins", "draws", "losses", "win_rate" (draws count half)} of game results."""
    wins, draws, losses = (sum(getattr(r, k) for r in results) for k in ("wins", "draws", "losses"))
    games = wins + draws + losses
    return {"games": games, "wins": wins, "draws": draws, "losses": losses,
            "win_rate": (wins + 0.5 * draws) / games if games else float("nan")}
