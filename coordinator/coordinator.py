"""The coordinator node: owns the league, answers match requests, takes results, decides
snapshots and resets, and keeps the league's history in SQLite.

AlphaStar (Methods, "Infrastructure"): "One central coordinator maintains an estimate of
the payoff matrix, samples new matches on request, and resets main and league
exploiters. Additional evaluator workers ... are used to supplement the payoff estimates."

A plain class; its public methods are its RPC surface, so it runs in-process, as a Ray
actor or behind any RPC layer. Learners are reached through handles that offer
`steps()`, `snapshot() -> (version, params)` and `reset(params)` (a `learners.Learner`,
or a runner's proxy to one). No JAX here.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from coordinator.history import BACKUP_NAME, DB_NAME, HistoryFull, LeagueHistory
from coordinator.param_store import ParamStore
from league import meta
from league.league import League
from league.matchmaking import Match
from league.players import (
    HISTORICAL,
    LEAGUE_EXPLOITER,
    MAIN_AGENT,
    MAIN_EXPLOITER,
    LeagueConfig,
    initial_snapshot_id,
)
from league.results import GameResult, aggregate
from league.results import check as check_results
from league.rules import AddSnapshot, ResetAgent


@dataclass(frozen=True)
class CoordinatorConfig:
    # Write the payoff, Nash distribution and ratings to the history this often.
    meta_game_every_seconds: float = 10.0
    # Checkpoint the league state (besides after every snapshot or reset) this often.
    checkpoint_every_seconds: float = 30.0
    # The control loop (`Coordinator.run`): snapshot and reset decisions this often, and the
    # learners' metrics into league.db and TensorBoard this often.
    poll_every_seconds: float = 0.5
    metrics_every_seconds: float = 10.0
    # A learner is named stalled (an event, a terminal line, the dashboard) when this many
    # updates in a row were skipped as non-finite, or when it has had no update (no
    # experience) for this long; "recovered" when it updates again.
    stall_skipped_updates: int = 20
    stall_seconds: float = 180.0
    # league.db keeps each batch of games against one opponent in the same races as one row of
    # counts (`game_counts`); True: a row per single game as well (`games`), ~180 bytes each.
    per_game_rows: bool = False
    # An online copy of league.db (`<run_dir>/league.db.backup`) this often; 0: none.
    backup_every_seconds: float = 300.0


TENSORBOARD_RETRY_SECONDS = 60.0
"""After TensorBoard writing failed (a full disk), a new event file is tried this often."""

HANG_SECONDS = 20.0
"""A call of the control loop to a learner node unanswered this long is named (`waiting`); so
is a node that has not answered the driver's pings (experiments/launchers.py: Pings) or a
coordinator that has not answered the driver's loop (Supervisor.watch_coordinator)."""

RATE_WINDOW_SECONDS = 120.0
"""Learners' updates/s (`record_learners`) are over the readings of the last two minutes at least
(a SMAX device learner group's round, one chunk per agent, takes about a minute here)."""

EXACT_GAMES = 32.0
"""The weight, in games, of an exact payoff in the Elo fit."""


def per_learner_summary(metrics: Mapping) -> dict:
    """The learner scalars kept in league.db: per-head figures (one per unit and head on SMAX)
    are averaged over heads; TensorBoard keeps every one."""
    summary, per_head = {}, {}
    for name, value in metrics.items():
        prefix, _, head = name.partition("/")
        if head and prefix != "loss":
            per_head.setdefault(prefix, []).append(value)
        else:
            summary[name] = value
    summary.update({f"{prefix}_mean_over_heads": float(sum(v) / len(v)) for prefix, v in per_head.items()})
    return summary


def initial_player_id(agent_id: str) -> str:
    """The param-store id of a learning agent's initial parameters (what resets restore)."""
    return f"{agent_id}@initial"


TRUESKILL_GAMES_PER_COUNT = 4
"""TrueSkill's update is sequential, ~0.2 ms a game: of a counted batch (a `GameResult` of several games) it sees
at most this many games per outcome, in the order win, draw, loss, repeated. The payoff and Elo
take every game."""


def _trueskill_games(home: str, away: str, wins: int, draws: int, losses: int,
                     cap: int | None = TRUESKILL_GAMES_PER_COUNT) -> list[tuple[str, str, str]]:
    """The games of a counted batch that TrueSkill sees (`TRUESKILL_GAMES_PER_COUNT`; `cap`
    None: every game, as TrueSkill saw an actor's or evaluator's single games live)."""
    left = {o: int(n) if cap is None else min(int(n), cap)
            for o, n in (("win", wins), ("draw", draws), ("loss", losses))}
    games = []
    while any(left.values()):
        for outcome in ("win", "draw", "loss"):
            if left[outcome]:
                games.append((home, away, outcome))
                left[outcome] -= 1
    return games


class _GroupMember:
    """One agent of a learner group, with the per-agent surface the coordinator polls."""

    def __init__(self, group, agent_id: str):
        self.group, self.agent_id = group, agent_id

    def steps(self) -> int:
        return self.group.steps(self.agent_id)

    def snapshot(self):
        return self.group.snapshot(self.agent_id)

    def reset(self, params) -> int:
        return self.group.reset(self.agent_id, params)

    def params(self):
        return self.group.params(self.agent_id)


class Coordinator:
    def __init__(
        self,
        league_config: LeagueConfig,
        run_dir: str,
        seed: int = 0,
        learners: Mapping[str, Any] | None = None,
        config: CoordinatorConfig | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.config = config or CoordinatorConfig()
        self._clock = clock
        self._lock = threading.RLock()
        os.makedirs(run_dir, exist_ok=True)
        self.history = LeagueHistory(os.path.join(run_dir, DB_NAME))
        self.params = ParamStore(run_dir)
        self._learners = dict(learners or {})
        state = self.history.load_league_state()
        if state is None:
            self.league = League(league_config, np.random.default_rng(seed))
            now = clock()
            for player in self.league.players.values():
                self.history.add_player(player.player_id, player.role, player.race, player.parent, 0, now)
                if player.role == HISTORICAL:
                    self.history.add_event("snapshot", player.parent, player.player_id, 0, "initial", now)
            self._last_game_id = 0
            self._last_count_id = 0
            self._save_state()
        else:
            self.league = League.from_state(state["league"])
            self._last_game_id = int(state["last_game_id"])
            self._last_count_id = int(state.get("last_count_id", 0))
            self._catch_up()
        self._trueskill = meta.trueskill_ratings(
            [(g["home"], g["away"], g["outcome"]) for g in self.history.games()]
            + [game for r in self.history.game_counts()
               # rows of single games reported together (an actor's, an evaluator's): every
               # game, as live; a device learner's chunk: capped, as live
               for game in _trueskill_games(r["home"], r["away"], r["wins"], r["draws"], r["losses"],
                                            cap=TRUESKILL_GAMES_PER_COUNT if r["source"] == "device" else None)],
            list(self.league.players))
        # TrueSkill is sequential in the games: reports queue them, the meta-game publisher
        # replays them, so the ~0.2 ms per game is not spent while actors wait on the lock.
        self._trueskill_pending: list[tuple[str, str, str]] = []
        self._trueskill_lock = threading.Lock()
        self._last_meta_game = 0.0
        self._last_checkpoint = clock()
        self._last_backup = clock()
        self._gaps_in: set[str] = set()  # exploiter snapshots whose gaps are recorded
        self._started = clock()
        self._games_since_start = 0
        self.run_dir = run_dir
        self._stop = threading.Event()
        self._events: list[dict] = []
        self._learner_metrics: dict[str, dict] = {}
        self._updates_seen: dict[str, collections.deque] = {}   # agent -> (time, updates) readings
        self._watched: dict[str, dict] = {}   # `_watch_learner`'s last reading of each learner
        # learners league.db still says are stalled (a run stopped while they were): watched as
        # stalled, so that "recovered" is recorded once they learn
        self._stalled_before: set[str] = set()
        for event in self.history.events():
            if event["kind"] == "stalled":
                self._stalled_before.add(event["agent_id"])
            elif event["kind"] == "recovered":
                self._stalled_before.discard(event["agent_id"])
        self._tensorboard = None
        self._tensorboard_failed = 0.0   # when writing it last failed (0: it did not)
        self._in_flight: dict[object, tuple[str, float]] = {}

    # -- resuming --------------------------------------------------------------

    def _catch_up(self) -> None:
        """Re-applies what the history holds past the last league checkpoint (after kill -9)."""
        for row in self.history.players():
            if row["player_id"] not in self.league.players and row["role"] == HISTORICAL:
                if row["player_id"] not in self.params:
                    continue  # died between deciding and storing: the decision is re-made
                self.league.apply(AddSnapshot(row["parent"], row["player_id"], row["step"], row["wall_time"], "resumed"))
        for game in self.history.games(since_id=self._last_game_id):
            if game["home"] in self.league.players and game["away"] in self.league.players:
                self.league.record_result(game["home"], game["away"], game["outcome"], game["score"])
            self._last_game_id = game["id"]
        for row in self.history.game_counts(since_id=self._last_count_id):
            if row["home"] in self.league.players and row["away"] in self.league.players:
                self.league.record_counts(row["home"], row["away"], row["wins"], row["draws"],
                                          row["losses"], row["score"])
            self._last_count_id = row["id"]

    def _save_state(self) -> None:
        # Every game up to the newest row is in the payoff (recorded under the same lock);
        # a restart replays only the rows after it. On a full disk (writes held in memory:
        # `LeagueHistory._write`, `ParamStore.write_held`) the checkpoint in league.db stays the
        # last one whose games and players are all on disk.
        if self.params.write_held() or self.history.held():
            return
        self._last_game_id = max(self._last_game_id, self.history.last_game_id())
        self._last_count_id = max(self._last_count_id, self.history.last_count_id())
        with contextlib.suppress(HistoryFull):   # said by the history; tried at the next checkpoint
            self.history.save_league_state({"league": self.league.state(), "last_game_id": self._last_game_id,
                                            "last_count_id": self._last_count_id})

    # -- the RPC surface -------------------------------------------------------

    def set_learners(self, learners: Mapping[str, Any]) -> None:
        """Handles to the learners, one per agent (`steps()`, `snapshot()`, `reset(params)`)."""
        with self._lock:
            self._learners = dict(learners)

    def connect_learners(self, group, agent_ids: Sequence[str]) -> None:
        """Connects a learner group (`steps(agent)`, `snapshot(agent)`, `reset(agent, params)`,
        `initial_params(agent)`, e.g. `experiments.nodes.LearnerGroup`) and keeps its agents'
        initial parameters (`store_initial_params`), before any actor asks for a match."""
        for agent_id in agent_ids:
            self.store_initial_params(agent_id, group.initial_params(agent_id))
        with self._lock:
            self._learners.update({a: _GroupMember(group, a) for a in agent_ids})

    def agent_ids(self) -> list[str]:
        return self.league.learning_agent_ids()

    def players(self) -> list[dict]:
        with self._lock:
            return [vars(p).copy() for p in self.league.players.values()]

    def store_initial_params(self, agent_id: str, params, version: int = 0) -> None:
        """Keeps a learning agent's initial parameters for its resets and, for a main agent
        whose frozen initial copy is in the league (`LeagueConfig.initial_snapshots`), as that
        player's parameters (each written once)."""
        player = self.league.player(agent_id)
        self.params.save(initial_player_id(agent_id), params, version)
        if self.league.config.initial_snapshots and player.role == MAIN_AGENT:
            self.params.save(initial_snapshot_id(agent_id), params, version)

    def request_match(self, agent_id: str) -> Match:
        """The opponent for `agent_id`'s next games (`league.matchmaking.Match`), the races
        they are played in, where the opponent's parameters live, and why."""
        with self._lock:
            match = self.league.get_match(agent_id)
            home, away = self.league.players[agent_id], self.league.players[match.opponent_id]
        # A learning opponent plays its learner's current parameters; a frozen one is loaded
        # from the parameter store by player id.
        return dataclasses.replace(match, home_race=home.race, away_race=away.race,
                                   opponent_params="learner" if away.is_learning else "store")

    def report(self, results: Sequence[GameResult | Mapping]) -> int:
        """Game results (`league.results.GameResult`: one game, or a count of games against one
        opponent in the same races, e.g. a device learner's chunk; the dict form is read too)
        from actors, evaluators and device learners. Checked once (`league.results.check`): a
        malformed batch is refused whole. league.db keeps one row per record (`games` for one
        game, `game_counts` for a count); the payoff and Elo see every game, TrueSkill at most
        `TRUESKILL_GAMES_PER_COUNT` per outcome of a count. Returns the number of games."""
        results = [r if isinstance(r, GameResult) else GameResult.from_dict(r) for r in results]
        with self._lock:
            check_results(results, self.league.players)
            total = 0
            for r in results:
                if r.games == 1:
                    self.league.record_result(r.home, r.away, r.outcome, r.score)
                    self._trueskill_pending.append((r.home, r.away, r.outcome))
                else:
                    self.league.record_counts(r.home, r.away, r.wins, r.draws, r.losses, r.score)
                    self._trueskill_pending.extend(_trueskill_games(r.home, r.away, r.wins, r.draws, r.losses))
                total += r.games
            self.history.add_results(results if self.config.per_game_rows else aggregate(results),
                                     per_game_rows=self.config.per_game_rows)
            self._games_since_start += total
        return total

    # The names of `report` before game results had one record (issue 30).
    report_results = report
    report_counts = report

    def match_distribution(self, agent_id: str) -> dict:
        """The exact distribution of `agent_id`'s next opponents (`League.match_distribution`:
        the one `request_match` samples from), for a device learner to draw the opponents of a
        chunk's games: {"agent_id", "home_race", "opponents", "probabilities", "branches",
        "races" (opponent -> race), "learning" (opponents whose learner plays its current
        parameters)}."""
        with self._lock:
            dist = self.league.match_distribution(agent_id)
            players = self.league.players
            return {"agent_id": agent_id, "home_race": players[agent_id].race,
                    "opponents": list(dist.opponents), "probabilities": dist.probabilities.tolist(),
                    "branches": list(dist.branches),
                    "races": {o: players[o].race for o in dist.opponents},
                    "learning": sorted({o for o in dist.opponents if players[o].is_learning})}

    def poll(self) -> list[dict]:
        """Asks every learner for its steps and carries out the league's snapshot/reset decisions."""
        events = []
        for agent_id in self.league.learning_agent_ids():
            learner = self._learners.get(agent_id)
            if learner is None:
                continue
            with self._calling(f"{agent_id}'s learner"):
                steps = int(learner.steps())
            with self._lock:
                decisions = self.league.decide(agent_id, steps, self._clock())
            for decision in decisions:
                events.append(self._carry_out(learner, decision))
        if events:
            with self._lock:
                self._save_state()
        self._maybe_periodic()
        return events

    def _carry_out(self, learner, decision) -> dict:
        if isinstance(decision, AddSnapshot):
            with self._calling(f"{decision.agent_id}'s learner"):
                version, params = learner.snapshot()
            self.params.save(decision.player_id, params, version)
            with self._lock:
                player = self.league.apply(decision)
            self.history.add_player(player.player_id, player.role, player.race, player.parent, player.step, player.wall_time)
            self.history.add_event("snapshot", decision.agent_id, decision.player_id, decision.step, decision.reason)
            return {"kind": "snapshot", "agent_id": decision.agent_id, "player_id": decision.player_id, "reason": decision.reason}
        if isinstance(decision, ResetAgent):
            source = decision.source   # a warm start from a frozen player; its initial parameters if unreadable
            try:
                _, params = self.params.load(source) if source else (None, None)
            except (KeyError, ValueError) as e:
                print(f"warning: {decision.agent_id} resets to its initial parameters, not to {source}'s: {e}",
                      flush=True)
                source = None
            if source is None:
                _, params = self.params.load(initial_player_id(decision.agent_id))
            with self._calling(f"{decision.agent_id}'s learner"):
                learner.reset(params)
            with self._lock:
                self.league.apply(decision)
            self.history.add_event("reset", decision.agent_id, None, decision.step, source and f"from {source}")
            return {"kind": "reset", "agent_id": decision.agent_id}
        raise ValueError(f"unknown decision {decision!r}")

    def exact_work(self) -> dict | None:
        """For evaluators of games with an exact meta-game (poker): the oldest frozen player
        whose exact payoffs are missing, and the frozen players whose exact payoffs are in
        (it is needed against each of them), or None when every frozen player's are in."""
        with self._lock:
            frozen = self.league.historical_ids()
            mask = self.league.payoff.exact_mask(frozen)
        done = [p for i, p in enumerate(frozen) if mask[i, i]]
        todo = [p for i, p in enumerate(frozen) if not mask[i, i]]
        return {"player": todo[0], "against": done} if todo else None

    def report_exact(self, player_id: str, payoffs: Mapping[str, Sequence[float]]) -> None:
        """Exact payoffs of the frozen player `player_id` against other players:
        {other: (win rate with draws half, mean score)} (`Payoff.set_exact`); from then on its
        pairs are exact in PFSP, the Nash and the ratings, and evaluators sample them no more."""
        with self._lock:
            for other, (win_rate, score) in payoffs.items():
                self.league.payoff.set_exact(player_id, other, float(win_rate), float(score))
            self.league.payoff.set_exact(player_id, player_id, 0.5, 0.0)

    def evaluation_matches(self, count: int) -> list[dict]:
        """The `count` pairs of distinct players with the fewest (decayed) games between them,
        as matches {"home", "away", "home_race", "away_race"}: evaluators play every game in
        the two players' own races; which of the two plays side 0 is random."""
        with self._lock:
            ids = [p for p in self.league.players if p not in self.league.withdrawn]
            wins, draws, losses = self.league.payoff.count_matrices(ids)
            exact = self.league.payoff.exact_mask(ids)
            rng = self.league.rng
            races = {p: self.league.players[p].race for p in ids}
        games = np.where(exact, np.inf, wins + draws + losses)  # exact pairs need no games
        n = len(ids)
        if n < 2:
            return []
        upper = np.triu_indices(n, 1)
        pair_games = games[upper] + rng.uniform(0, 1e-3, len(upper[0]))  # random tie-breaks
        order = [k for k in np.argsort(pair_games)[:count] if np.isfinite(pair_games[k])]
        # Either player may be side 0: a side that a game favours biases no pair's cell.
        pairs = [(ids[upper[0][k]], ids[upper[1][k]])[:: 1 if rng.random() < 0.5 else -1] for k in order]
        return [{"home": a, "away": b, "home_race": races[a], "away_race": races[b]} for a, b in pairs]

    def frozen_params(self, player_id: str) -> tuple[int, dict] | None:
        """(version, parameters) of a frozen player (or an agent's initial parameters), from
        the run directory's store on the coordinator's host: actors and evaluators on other
        hosts fetch them here (and cache them: they never change), so no disk is shared.

        None when the player is withdrawn: its file is damaged (the zip's CRC, or a wrong
        layout), so it is taken out of matchmaking (`withdraw`) and the caller asks for
        another match. A plain value, not an exception, so that every launcher's RPC carries it."""
        with self._lock:
            if player_id in self.league.withdrawn:
                return None
        try:
            return self.params.load(player_id)
        except ValueError as e:
            player = self.league.players.get(player_id)
            if player is None or player.is_learning:
                raise  # an agent's initial parameters: its resets need them
            self.withdraw(player_id, str(e))
            return None

    def withdraw(self, player_id: str, reason: str) -> bool:
        """Takes a frozen player out of matchmaking, evaluation and the Nash for the rest of the
        run (`League.withdraw`; saved with the league): an event in league.db ("withdrawn", with
        the reason) and in `take_events` for the terminal. False if it already was."""
        with self._lock:
            if not self.league.withdraw(player_id, reason):
                return False
            player = self.league.players[player_id]
            self._save_state()
            self._events.append({"kind": "withdrawn", "agent_id": player.parent, "player_id": player_id,
                                 "reason": reason})
        self.history.add_event("withdrawn", player.parent, player_id, player.step, reason)
        return True

    def learner_params(self, agent_id: str) -> tuple[int, dict]:
        """(version, current parameters) of a learning agent, from its learner group: device
        learners in other groups play against it with these."""
        learner = self._learners.get(agent_id)
        if learner is None:
            raise KeyError(f"{agent_id!r} has no connected learner")
        return learner.params()

    def nash_weights(self) -> dict[str, float]:
        """The latest published Nash distribution over the players (empty before the first)."""
        latest = self.history.latest_nash()
        return {} if latest is None else dict(latest[1])

    def average_nash_weights(self) -> dict[str, float]:
        """The mean of every published Nash distribution over the frozen players still in the
        league (`meta.average_nash`: fictitious play's average strategy; a poker league's
        least exploitable product); empty before the first with a frozen player."""
        with self._lock:
            frozen = {p for p, player in self.league.players.items()
                      if not player.is_learning and p not in self.league.withdrawn}
        return meta.average_nash(self.history.nash_publications(), frozen)

    def trained_target(self, player_id: str) -> dict[str, float] | None:
        """The Nash weights a league exploiter's copy was trained against when its exploiter
        had a fixed target (`league_exploiter_opponents="nash_fixed"`); else None."""
        with self._lock:
            target = self.league.snapshot_targets.get(player_id)
        return None if target is None else dict(target)

    def record_exploitability(self, values: Mapping[str, float]) -> None:
        """Exact NashConv of the Nash mixture ("nash") and of main agents, from an evaluator."""
        self.history.add_exploitability(values, self._clock())

    def record_exploiter_gaps(self, player_id: str, gaps: Sequence[Mapping]) -> int:
        """The frozen exploiter snapshot `player_id`'s gaps to a best response against its
        targets, from an evaluator (`actors.evaluator.ExactEvaluator.exploiter_gap`: dicts with
        target, br_value, exploiter_value, gap), recorded in league.db (`exploiter_gaps`) with
        the snapshot's parent and the parent's role as the league knows them. Returns the
        number of rows recorded (0 for a player that is no exploiter's snapshot, or whose gaps
        are in: two evaluators may measure the same snapshot)."""
        with self._lock:
            player = self.league.players.get(player_id)
            parent = self.league.players.get(player.parent) if player is not None and player.parent else None
            if parent is None or parent.role not in (MAIN_EXPLOITER, LEAGUE_EXPLOITER) or player_id in self._gaps_in:
                return 0
            self._gaps_in.add(player_id)
        self.history.add_exploiter_gaps([{**g, "player_id": player_id, "parent": parent.player_id,
                                          "role": parent.role} for g in gaps], self._clock())
        return len(gaps)

    def record_heuristic(self, rows: Sequence[Mapping]) -> None:
        """Main agents' win rates against the scripted heuristic (SMAX), from evaluator_0: one
        row per agent and heuristic race (`LeagueHistory.add_heuristic`), all at one time."""
        self.history.add_heuristic(rows, self._clock())

    def record_learner_metrics(self, agent_id: str, metrics: Mapping[str, float]) -> None:
        self.history.add_learner_metrics(agent_id, metrics, self._clock())

    def checkpoint(self) -> None:
        with self._lock:
            self._save_state()
        self._last_checkpoint = self._clock()

    def publish_meta_game(self) -> dict:
        """Writes the payoff, the Nash distribution (over the players whose payoffs are all
        known) and ratings to history."""
        with self._lock:
            ids = list(self.league.players)
            wins, draws, _ = self.league.payoff.count_matrices(ids)
            scores = self.league.payoff.score_matrix(ids)
            exact = self.league.payoff.exact_mask(ids)
            known = self.league.payoff.known_mask(ids)
            rates = self.league.payoff.win_rate_matrix(ids)
            pending, self._trueskill_pending = self._trueskill_pending, []
            withdrawn = set(self.league.withdrawn)
        with self._trueskill_lock:
            for home, away, outcome in pending:
                meta.trueskill_update(self._trueskill, home, away, outcome)
            trueskill = dict(self._trueskill)
        now = self._clock()
        # The Nash of the players whose payoffs are all known (players still waiting for an
        # evaluation get weight 0 until they have one: `meta.fully_known_players`).
        nash = np.zeros(len(ids))
        # Withdrawn players (`withdraw`) keep their payoff rows but leave the meta-game.
        active = np.array([i for i, p in enumerate(ids) if p not in withdrawn], dtype=int)
        evaluated = active[meta.fully_known_players(known[np.ix_(active, active)])]
        nash[evaluated] = meta.nash_distribution(
            meta.scores_as_win_rates(scores[np.ix_(evaluated, evaluated)]))
        # Exact pairs count as EXACT_GAMES games at their exact win rate.
        elo = meta.elo_ratings(np.where(exact, EXACT_GAMES * rates, wins), np.where(exact, 0.0, draws))
        self.history.add_payoff_snapshot(ids, wins, draws, now, scores=scores)
        self.history.add_nash(dict(zip(ids, nash)), now)
        with self._lock:
            self.league.set_nash_weights(dict(zip(ids, nash.tolist())), {ids[i] for i in evaluated})
        self.history.add_ratings(
            {p: (elo[i], *trueskill.get(p, (25.0, 25.0 / 3))) for i, p in enumerate(ids)}, now
        )
        self._last_meta_game = now
        return {"nash": dict(zip(ids, nash.tolist())), "elo": dict(zip(ids, elo.tolist()))}

    def _maybe_periodic(self) -> None:
        now = self._clock()
        if now - self._last_meta_game >= self.config.meta_game_every_seconds:
            self.publish_meta_game()
        if now - self._last_checkpoint >= self.config.checkpoint_every_seconds:
            self.checkpoint()
        every = self.config.backup_every_seconds
        if every > 0 and now - self._last_backup >= every:
            self.backup()

    def backup(self) -> str:
        """An online copy of league.db beside it (`LeagueHistory.backup`), restored by
        `python -m experiments.restore_history --run_dir=...`; returns its path."""
        self._last_backup = self._clock()
        try:
            return self.history.backup(os.path.join(self.run_dir, BACKUP_NAME))
        except Exception as e:  # a full disk: the league goes on, the last good backup stays
            print(f"warning: backing up league.db failed ({type(e).__name__}: {e}); the previous backup is kept",
                  flush=True)
            return ""

    @contextlib.contextmanager
    def _calling(self, what: str):
        """Marks a call of the control loop to another node in flight (`waiting`)."""
        key = object()
        self._in_flight[key] = (what, time.monotonic())
        try:
            yield
        finally:
            del self._in_flight[key]

    def waiting(self) -> list[str]:
        """The control loop's calls to other nodes unanswered for HANG_SECONDS or more, each as
        "<node> for <s> s" (a node hung, stopped or overloaded: the progress line names it)."""
        now = time.monotonic()
        return [f"{what} for {now - since:.0f} s" for what, since in list(self._in_flight.values())
                if now - since >= HANG_SECONDS]

    def summary(self) -> dict:
        """Figures for the terminal: league size, games, each main agent's win rate vs the
        league, the calls of the control loop waiting on a node (`waiting`)."""
        with self._lock:
            historical = self.league.historical_ids()
            mains = self.league.learning_agent_ids(MAIN_AGENT)
            vs_league = {
                m: float(self.league.payoff.win_rates(m, historical).mean()) if historical else float("nan")
                for m in mains
            }
            return {
                "players": len(self.league.players),
                "historical": len(historical),
                "games": self.history.game_count(),
                "games_per_second": self._games_since_start / max(self._clock() - self._started, 1e-9),
                "main_win_rate_vs_league": vs_league,
                "waiting": self.waiting(),
            }

    # -- the control loop: a node of the program ---------------------------------

    def run(self) -> None:
        """The league's control loop (issue 30: part of the program, `--print_program` shows
        it; launchers only run it): every `poll_every_seconds` the snapshot and reset decisions
        (`poll`, which also keeps the meta-game and checkpoint cadence), every
        `metrics_every_seconds` the learners' metrics into league.db and TensorBoard
        (`record_learners`); until `stop()`. The driver reads what happened with `take_events`
        and `learner_metrics`."""
        self._stop.clear()
        last_metrics = -math.inf
        while not self._stop.wait(self.config.poll_every_seconds):
            events = self.poll()
            if events:
                with self._lock:
                    self._events.extend(events)
            if time.monotonic() - last_metrics >= self.config.metrics_every_seconds:
                last_metrics = time.monotonic()
                self.record_learners()

    def stop(self) -> None:
        self._stop.set()

    def take_events(self) -> list[dict]:
        """What the control loop did or found since the last call: snapshots, resets, withdrawn
        players (`withdraw`), stalled and recovered learners (`_watch_learner`)."""
        with self._lock:
            events, self._events = self._events, []
        return events

    def learner_metrics(self) -> dict[str, dict]:
        """Each learner's latest metrics (`record_learners`), with `updates_per_second`."""
        with self._lock:
            return {a: dict(m) for a, m in self._learner_metrics.items()}

    def record_learners(self) -> dict[str, dict]:
        """Every learner's metrics (one `metrics()` call per learner group), `updates_per_second`
        from successive readings, recorded in league.db (`per_learner_summary`) and TensorBoard
        (`<run_dir>/tensorboard`); kept for `learner_metrics`. Returns them."""
        with self._lock:
            learners = dict(self._learners)
        metrics, of_group = {}, {}
        for agent, handle in learners.items():
            group = getattr(handle, "group", None)
            if group is None:
                with self._calling(f"{agent}'s learner"):
                    metrics[agent] = dict(handle.metrics())
                continue
            if id(group) not in of_group:
                with self._calling(f"{agent}'s learner group"):
                    of_group[id(group)] = group.metrics()
            metrics[agent] = dict(of_group[id(group)].get(agent, {}))
        now = self._clock()
        for agent, m in metrics.items():
            if not m:   # a group without this agent's metrics (yet): no reading of 0 updates
                continue
            if "updates_dispatched" in m:
                updates = m["updates_dispatched"]
                seen = self._updates_seen.setdefault(agent, collections.deque())
                if seen and updates < seen[-1][1]:   # a restarted learner counts from its checkpoint
                    seen.clear()
                seen.append((now, updates))
                # over the readings of the last RATE_WINDOW_SECONDS at least: a device learner's
                # updates come a chunk at a time, so one 10 s window often holds none of them
                while len(seen) > 2 and now - seen[1][0] >= RATE_WINDOW_SECONDS:
                    seen.popleft()
                if len(seen) > 1:
                    t0, u0 = seen[0]
                    m["updates_per_second"] = (updates - u0) / max(now - t0, 1e-9)
            self.history.add_learner_metrics(agent, per_learner_summary(m), self._clock())
            self._watch_learner(agent, m)
        self._write_tensorboard(metrics, int(now - self._started))
        with self._lock:
            self._learner_metrics = metrics
        return metrics

    def _watch_learner(self, agent: str, m: Mapping) -> None:
        """Names a stalled learner (issue 31, "no silent stall"): `stall_skipped_updates`
        updates in a row skipped as non-finite (its version stays while `updates_skipped`
        grows), or no update dispatched for `stall_seconds` of its own time: a device learner
        group's agent waiting for its turn in a round (`waiting_for_turn`: other agents' chunks
        run, with `--device.main_agent_chunks` most of a round for an exploiter) is not counted.
        A "stalled" event (league.db, `take_events`) when it starts, a "recovered" one when the
        learner applies updates again."""
        if "version" not in m:
            return
        now = self._clock()
        version, skipped = int(m["version"]), int(m.get("updates_skipped", 0))
        dispatched = float(m.get("updates_dispatched", 0.0))
        seen = self._watched.get(agent)
        if seen is None:
            self._watched[agent] = {"version": version, "skipped": skipped, "dispatched": dispatched,
                                    "in_a_row": 0, "experience": now, "stalled": agent in self._stalled_before}
            return
        if dispatched < seen["dispatched"]:   # a restarted learner counts from its checkpoint
            seen.update(in_a_row=0, experience=now)
        elif version > seen["version"]:
            seen["in_a_row"] = 0
        elif skipped > seen["skipped"]:
            seen["in_a_row"] += skipped - seen["skipped"]
        if dispatched > seen["dispatched"] or m.get("waiting_for_turn"):
            seen["experience"] = now
        seen.update(version=version, skipped=skipped, dispatched=dispatched)
        reason = None
        if seen["in_a_row"] >= self.config.stall_skipped_updates:
            reason = (f"its last {seen['in_a_row']} updates were all skipped as non-finite (NaN or inf "
                      "in the loss, gradients or parameters); its version stays at "
                      f"{version}: look at its learner metrics, or restore an earlier checkpoint")
        elif now - seen["experience"] >= self.config.stall_seconds:
            reason = (f"no update for {now - seen['experience']:.0f} s: it gets no experience "
                      "(its games or replay table are not reaching it)")
        if bool(reason) == seen["stalled"]:
            return
        seen["stalled"] = bool(reason)
        kind, reason = ("stalled", reason) if reason else ("recovered", "updating again")
        with self._lock:
            self._events.append({"kind": kind, "agent_id": agent, "player_id": None, "reason": reason})
        self.history.add_event(kind, agent, None, int(m.get("steps", 0)), reason)

    def _write_tensorboard(self, metrics: dict, step: int) -> None:
        """Learner metrics as TensorBoard scalars (tensorboardX). Its writer thread dies on a
        write error (a full disk), after which adding to its queue would block for ever: a
        writer whose thread is gone is dropped (one warning) and a new event file tried every
        TENSORBOARD_RETRY_SECONDS."""
        if self._tensorboard is not None and not _tensorboard_alive(self._tensorboard):
            self._tensorboard = None
            self._tensorboard_failed = time.monotonic()
            print("warning: TensorBoard's event writer stopped (a full disk?); a new event file is tried "
                  f"every {TENSORBOARD_RETRY_SECONDS:g} s", flush=True)
        failed = self._tensorboard_failed
        if self._tensorboard is None and failed and time.monotonic() - failed < TENSORBOARD_RETRY_SECONDS:
            return
        try:
            if self._tensorboard is None:
                from tensorboardX import SummaryWriter

                _quiet_tensorboard_thread()
                # a queue no interval's metrics fill: never a put that waits on a dead thread
                self._tensorboard = SummaryWriter(os.path.join(self.run_dir, "tensorboard"), max_queue=100_000)
            for agent, values in metrics.items():
                for name, value in values.items():
                    if isinstance(value, int | float) and math.isfinite(value):
                        self._tensorboard.add_scalar(f"{agent}/{name}", value, int(values.get("steps", step)))
            self._tensorboard.flush()
        except Exception as e:  # TensorBoard is a convenience; never stop a league for it
            if not failed:
                print(f"warning: TensorBoard writing failed ({e}); tried again every "
                      f"{TENSORBOARD_RETRY_SECONDS:g} s", flush=True)
            self._tensorboard_failed = time.monotonic()
            return
        self._tensorboard_failed = 0.0

    def close(self) -> None:
        self._stop.set()
        if self._tensorboard is not None and _tensorboard_alive(self._tensorboard):
            self._tensorboard.close()
        self._tensorboard = None
        self.checkpoint()
        self.history.close()


def _quiet_tensorboard_thread() -> None:
    """tensorboardX's event-writing thread dies with a traceback on a write error; the
    coordinator says it in one line instead (`_write_tensorboard`). Other threads' errors
    print as before."""
    from tensorboardX.event_file_writer import _EventLoggerThread

    previous = threading.excepthook
    if getattr(previous, "quiets_tensorboard", False):
        return

    def hook(args):
        if not (isinstance(args.thread, _EventLoggerThread) and isinstance(args.exc_value, OSError)):
            previous(args)
    hook.quiets_tensorboard = True
    threading.excepthook = hook


def _tensorboard_alive(writer) -> bool:
    """Whether a tensorboardX SummaryWriter's event-writing thread runs (True if not found)."""
    thread = getattr(getattr(getattr(writer, "file_writer", None), "event_writer", None), "_worker", None)
    return thread is None or thread.is_alive()
