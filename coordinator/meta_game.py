"""The meta-game the coordinator publishes every `meta_game_every_seconds`: the decayed payoff,
the meta-solver's mixture (league/meta_solvers.py: the Nash by default) and the ratings (Elo
and TrueSkill), written to league.db and handed back to the league's matchmakers."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from coordinator.history import HistoryWriter
from league import meta
from league.league import League
from league.meta_solvers import elo_with_exact, solve_meta_game
from league.results import GameResult

TRUESKILL_GAMES_PER_COUNT = 4
"""TrueSkill's update is sequential, ~0.2 ms a game: of a counted batch (a `GameResult` of several
games) it sees at most this many games per outcome, in the order win, draw, loss, repeated. The
payoff and Elo take every game."""


def trueskill_games(home: str, away: str, wins: int, draws: int, losses: int,
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


def recorded_trueskill_games(history: HistoryWriter) -> list[tuple[str, str, str]]:
    """Every game league.db holds, as TrueSkill saw it live: single games each, and of a device
    learner's chunk (`source` "device") at most TRUESKILL_GAMES_PER_COUNT per outcome; rows of
    single games reported together (an actor's, an evaluator's) every game."""
    return ([(g["home"], g["away"], g["outcome"]) for g in history.games()]
            + [game for r in history.game_counts()
               for game in trueskill_games(r["home"], r["away"], r["wins"], r["draws"], r["losses"],
                                           cap=TRUESKILL_GAMES_PER_COUNT if r["source"] == "device" else None)])


class MetaGamePublisher:
    """Publishes the league's meta-game to league.db (`publish`). TrueSkill is sequential in the
    games: reports queue them (`add`), `publish` replays them, so the ~0.2 ms per game is not
    spent while actors wait on the coordinator's lock."""

    def __init__(self, history: HistoryWriter, players: Sequence[str], solver: str = "nash"):
        self.history, self.solver = history, solver
        self._trueskill = meta.trueskill_ratings(recorded_trueskill_games(history), list(players))
        self._pending: list[tuple[str, str, str]] = []
        self._trueskill_lock = threading.Lock()

    def add(self, results: Iterable[GameResult]) -> None:
        """Queues reported games for TrueSkill; the caller holds the league's lock."""
        for r in results:
            if r.games == 1:
                self._pending.append((r.home, r.away, r.outcome))
            else:
                self._pending.extend(trueskill_games(r.home, r.away, r.wins, r.draws, r.losses))

    def publish(self, league: League, lock, now: float) -> Mapping[str, dict]:
        """Writes the payoff, the solver's mixture over the players whose payoffs are all known
        (`league.meta_solvers.solve_meta_game`; withdrawn players keep their payoff rows but
        leave it) and the ratings (exact pairs count as EXACT_GAMES games at their exact win
        rate in Elo) to league.db, and hands the mixture to the league's matchmakers
        (`League.set_nash_weights`). `lock` guards `league`. Returns {"nash", "elo"} by player."""
        with lock:
            ids = list(league.players)
            wins, draws, _ = league.payoff.count_matrices(ids)
            scores = league.payoff.score_matrix(ids)
            exact = league.payoff.exact_mask(ids)
            known = league.payoff.known_mask(ids)
            rates = league.payoff.win_rate_matrix(ids)
            withdrawn = np.array([p in league.withdrawn for p in ids], dtype=bool)
            pending, self._pending = self._pending, []
        with self._trueskill_lock:
            for home, away, outcome in pending:
                meta.trueskill_update(self._trueskill, home, away, outcome)
            trueskill = dict(self._trueskill)
        solution = solve_meta_game(scores, known, withdrawn, self.solver)
        nash = dict(zip(ids, solution.weights.tolist()))
        elo = elo_with_exact(wins, draws, exact, rates)
        self.history.add_payoff_snapshot(ids, wins, draws, now, scores=scores)
        self.history.add_nash(nash, now)
        with lock:
            league.set_nash_weights(nash, {ids[i] for i in solution.evaluated})
        self.history.add_ratings(
            {p: (elo[i], *trueskill.get(p, (meta.TRUESKILL_MU, meta.TRUESKILL_SIGMA))) for i, p in enumerate(ids)}, now)
        return {"nash": nash, "elo": dict(zip(ids, elo.tolist()))}

    def latest(self) -> dict[str, float]:
        """The latest published mixture over the players (empty before the first)."""
        latest = self.history.latest_nash()
        return {} if latest is None else dict(latest[1])

    def average(self, league: League, lock) -> dict[str, float]:
        """The mean of every published mixture over the frozen players still in the league
        (`meta.average_nash`: fictitious play's average strategy; a poker league's least
        exploitable product); empty before the first with a frozen player."""
        with lock:
            frozen = {p for p, player in league.players.items() if not player.is_learning and p not in league.withdrawn}
        return meta.average_nash(self.history.nash_publications(), frozen)
