"""The coordinator node: owns the league, answers match requests, takes results, decides
snapshots and resets, and keeps the league's history in SQLite.

AlphaStar (Methods, "Infrastructure"): "One central coordinator maintains an estimate of
the payoff matrix, samples new matches on request, and resets main and league
exploiters. Additional evaluator workers ... are used to supplement the payoff estimates."

A plain class; its public methods are its RPC surface, so it runs in-process, as a Ray
actor or behind any RPC layer. Learners are reached through handles that offer
`steps()`, `snapshot() -> (version, params)` and `reset(params)` (a `learners.Learner`,
or a runner's proxy to one). No JAX here. Its parts, each in its own module:

- league.db: `history.HistoryWriter` (its schema: `league_db`), the league's checkpoint and
  resumption: `league_state.LeagueStore`;
- the learners: their handles and calls in flight (`learners`), the league's snapshot and
  reset decisions carried out on them (`decisions`), their metrics, rates and stall watch
  (`learner_watch`), TensorBoard (`tensorboard`);
- players' parameters (`player_params`, over `param_store`), the evaluators' calls
  (`evaluations`), the meta-game (`meta_game`, its solvers in league/meta_solvers.py).
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.decisions import Decisions
from coordinator.evaluations import Evaluations
from coordinator.history import BACKUP_NAME, DB_NAME, HistoryWriter
from coordinator.history_reader import HistoryReader
from coordinator.league_state import LeagueStore
from coordinator.learner_watch import LearnerMonitor, StallWatch, stalled_agents
from coordinator.learners import LearnerHandles
from coordinator.meta_game import MetaGamePublisher
from coordinator.param_store import ParamStore
from coordinator.player_params import PlayerParams
from coordinator.tensorboard import TensorBoardSink
from league.matchmaking import Match
from league.meta_solvers import meta_solver
from league.players import MAIN_AGENT, LeagueConfig
from league.results import GameResult, aggregate
from league.results import check as check_results


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
    # A learner that has not finished its first update since it started or resumed is
    # compiling its first chunk, not stalled: named only after this long ("compiling for N min").
    stall_compile_seconds: float = 900.0
    # league.db keeps each batch of games against one opponent in the same races as one row of
    # counts (`game_counts`); True: a row per single game as well (`games`), ~180 bytes each.
    per_game_rows: bool = False
    # An online copy of league.db (`<run_dir>/league.db.backup`) this often; 0: none.
    backup_every_seconds: float = 300.0
    # The meta-game's mixture published to league.db and the matchmakers, by name
    # (league/meta_solvers.py: META_SOLVERS, e.g. "nash", "uniform").
    meta_solver: str = "nash"

    def __post_init__(self):
        meta_solver(self.meta_solver)   # a name not in the registry: ValueError naming the known ones


class Coordinator:
    """The league's one owner (`league`, guarded by one lock) and its RPC surface: the
    learners' and actors' calls (matches, results, parameters), the evaluators' calls, and the
    control loop (`run`) that a launcher runs as a node of the program."""

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
        self.history = HistoryWriter(os.path.join(run_dir, DB_NAME))
        self.params = ParamStore(run_dir)
        self._learners = LearnerHandles(learners)
        self._store = LeagueStore(self.history, self.params)
        self.league = self._store.open(league_config, seed, clock())
        self._decisions = Decisions(self.league, self._lock, self._learners, self.params, self.history, clock)
        self.player_params = PlayerParams(self.league, self._lock, self.params, self._learners, self.withdraw)
        self.evaluations = Evaluations(self.league, self._lock, self.history, clock,
                                       _heuristic_rows(os.path.join(run_dir, DB_NAME)))
        self.meta_game = MetaGamePublisher(self.history, list(self.league.players), self.config.meta_solver)
        self._last_meta_game = 0.0
        self._last_checkpoint = clock()
        self._last_backup = clock()
        self._started = clock()
        self._games_since_start = 0
        self.run_dir = run_dir
        self._stop = threading.Event()
        self._events: list[dict] = []
        self._tensorboard = TensorBoardSink(os.path.join(run_dir, "tensorboard"))
        self._monitor = LearnerMonitor(self.history, StallWatch(
            self.config.stall_skipped_updates, self.config.stall_seconds, self.config.stall_compile_seconds,
            stalled_agents(self.history.events())), self._tensorboard)

    # -- the RPC surface -------------------------------------------------------

    def set_learners(self, learners: Mapping[str, Any]) -> None:
        """Handles to the learners, one per agent (`steps()`, `snapshot()`, `reset(params)`)."""
        self._learners.set(learners)

    def connect_learners(self, group, agent_ids: Sequence[str]) -> None:
        """Connects a learner group (`steps(agent)`, `snapshot(agent)`, `reset(agent, params)`,
        `initial_params(agent)`, e.g. `experiments.nodes.LearnerGroup`) and keeps its agents'
        initial parameters (`store_initial_params`), before any actor asks for a match."""
        for agent_id in agent_ids:
            self.store_initial_params(agent_id, group.initial_params(agent_id))
        self._learners.add_group(group, agent_ids)

    def agent_ids(self) -> list[str]:
        return self.league.learning_agent_ids()

    def players(self) -> list[dict]:
        with self._lock:
            return [vars(p).copy() for p in self.league.players.values()]

    def store_initial_params(self, agent_id: str, params, version: int = 0) -> None:
        """Keeps a learning agent's initial parameters for its resets (and a main agent's frozen
        initial copy's: `PlayerParams.store_initial`)."""
        self.player_params.store_initial(agent_id, params, version)

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
        `meta_game.TRUESKILL_GAMES_PER_COUNT` per outcome of a count. Returns the number of games."""
        results = [r if isinstance(r, GameResult) else GameResult.from_dict(r) for r in results]
        with self._lock:
            check_results(results, self.league.players)
            total = self.league.record_results(results)
            self.meta_game.add(results)
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
        """Asks every learner for its steps and carries out the league's snapshot/reset decisions
        (`coordinator.decisions.Decisions`); keeps the meta-game, checkpoint and backup cadence."""
        events = self._decisions.poll()
        if events:
            with self._lock:
                snapshot = self._store.snapshot(self.league)
            self._store.write(snapshot)
        self._maybe_periodic()
        return events

    def frozen_params(self, player_id: str) -> tuple[int, dict] | None:
        """(version, parameters) of a frozen player (or an agent's initial parameters) from the
        store on the coordinator's host; None when the player is withdrawn, its file damaged
        (`PlayerParams.frozen`): the caller asks for another match."""
        return self.player_params.frozen(player_id)

    def withdraw(self, player_id: str, reason: str) -> bool:
        """Takes a frozen player out of matchmaking, evaluation and the Nash for the rest of the
        run (`League.withdraw`; saved with the league): an event in league.db ("withdrawn", with
        the reason) and in `take_events` for the terminal. False if it already was."""
        with self._lock:
            if not self.league.withdraw(player_id, reason):
                return False
            player = self.league.players[player_id]
            snapshot = self._store.snapshot(self.league)
            self._events.append({"kind": "withdrawn", "agent_id": player.parent, "player_id": player_id,
                                 "reason": reason})
        self._store.write(snapshot)
        self.history.add_event("withdrawn", player.parent, player_id, player.step, reason)
        return True

    def learner_params(self, agent_id: str) -> tuple[int, dict]:
        """(version, current parameters) of a learning agent, from its learner group."""
        return self.player_params.learning(agent_id)

    # -- the evaluators' calls (coordinator/evaluations.py) --------------------------

    def exact_work(self) -> dict | None:
        """The next frozen player whose exact payoffs (poker) are missing (`Evaluations`)."""
        return self.evaluations.exact_work()

    def report_exact(self, player_id: str, payoffs: Mapping[str, Sequence[float]]) -> None:
        """Exact payoffs of a frozen player: {other: (win rate, mean score)} (`Evaluations`)."""
        self.evaluations.report_exact(player_id, payoffs)

    def evaluation_matches(self, count: int) -> list[dict]:
        """The `count` pairs with the fewest games between them, as matches (`Evaluations`)."""
        return self.evaluations.evaluation_matches(count)

    def trained_target(self, player_id: str) -> dict[str, float] | None:
        """The Nash weights a league exploiter's copy trained against, if fixed (`Evaluations`)."""
        return self.evaluations.trained_target(player_id)

    def record_exploitability(self, values: Mapping[str, float]) -> None:
        """Exact NashConv of the Nash mixture ("nash") and of main agents, from an evaluator."""
        self.evaluations.record_exploitability(values)

    def record_exploiter_gaps(self, player_id: str, gaps: Sequence[Mapping]) -> int:
        """An exploiter snapshot's gaps to a best response; rows recorded (`Evaluations`)."""
        return self.evaluations.record_exploiter_gaps(player_id, gaps)

    def record_heuristic(self, rows: Sequence[Mapping]) -> None:
        """Main agents' win rates against the scripted heuristic (SMAX), from evaluator_0."""
        self.evaluations.record_heuristic(rows)

    def nash_weights(self) -> dict[str, float]:
        """The latest published Nash distribution over the players (empty before the first)."""
        return self.meta_game.latest()

    def average_nash_weights(self) -> dict[str, float]:
        """The mean of every published Nash distribution over the frozen players still in the
        league (`MetaGamePublisher.average`: fictitious play's average strategy)."""
        return self.meta_game.average(self.league, self._lock)

    def record_learner_metrics(self, agent_id: str, metrics: Mapping[str, float]) -> None:
        self.history.add_learner_metrics(agent_id, metrics, self._clock())

    def checkpoint(self) -> None:
        with self._lock:
            snapshot = self._store.snapshot(self.league)
        self._store.write(snapshot)
        self._last_checkpoint = self._clock()

    def publish_meta_game(self) -> dict:
        """Writes the payoff, the meta-solver's mixture (`CoordinatorConfig.meta_solver`: the
        Nash distribution over the players whose payoffs are all known) and ratings to history
        (`coordinator.meta_game.MetaGamePublisher`). Returns {"nash", "elo"} by player."""
        now = self._clock()
        published = self.meta_game.publish(self.league, self._lock, now)
        self._last_meta_game = now
        return published

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
        """An online copy of league.db beside it (`LeagueStore.backup`), restored by
        `python -m experiments.restore_history --run_dir=...`; returns its path."""
        self._last_backup = self._clock()
        return self._store.backup(os.path.join(self.run_dir, BACKUP_NAME))

    def waiting(self) -> list[str]:
        """The control loop's calls to other nodes unanswered for HANG_SECONDS or more, each as
        "<node> for <s> s" (a node hung, stopped or overloaded: the progress line names it)."""
        return self._learners.waiting()

    def summary(self) -> dict:
        """Figures for the terminal: league size, games, each main agent's win rate vs the
        league, the calls of the control loop waiting on a node (`waiting`)."""
        with self._lock:
            return {
                "players": len(self.league.players),
                "historical": len(self.league.historical_ids()),
                "games": self.history.game_count(),
                "games_per_second": self._games_since_start / max(self._clock() - self._started, 1e-9),
                "main_win_rate_vs_league": self.league.win_rates_vs_frozen(MAIN_AGENT),
                "main_win_rate_vs_builtin": self.evaluations.builtin_win_rates(),
                "exploitability": self.evaluations.exploitability(),
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
        players (`withdraw`), stalled and recovered learners (`learner_watch.StallWatch`)."""
        with self._lock:
            events, self._events = self._events, []
        return events

    def learner_metrics(self) -> dict[str, dict]:
        """Each learner's latest metrics (`record_learners`), with `updates_per_second`."""
        return self._monitor.latest()

    def record_learners(self) -> dict[str, dict]:
        """Every learner's metrics (one `metrics()` call per learner group), with
        `updates_per_second`, recorded in league.db and TensorBoard (`<run_dir>/tensorboard`),
        watched for stalls (`coordinator.learner_watch.LearnerMonitor`); kept for
        `learner_metrics`. Returns them."""
        metrics = self._learners.metrics()
        now = self._clock()
        events = self._monitor.record(metrics, now, int(now - self._started))
        with self._lock:
            self._events.extend(events)
        return metrics

    def close(self) -> None:
        self._stop.set()
        self._tensorboard.close()
        self.checkpoint()
        self.history.close()


def _heuristic_rows(path: str) -> list[dict]:
    """league.db's measurements against the game's scripted opponent (a resumed run's)."""
    reader = HistoryReader(path)
    try:
        return reader.heuristic_history()
    finally:
        reader.close()
