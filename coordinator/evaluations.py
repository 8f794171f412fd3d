"""The evaluators' side of the coordinator (`experiments.nodes.EvaluatorNode`,
`actors.evaluator`): what they measure next (league/evaluation.py) and what they measured,
into the league's payoff and league.db. `Coordinator` answers their calls with these."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from coordinator.history import HistoryWriter
from league.evaluation import least_played_pairs, missing_exact
from league.league import League
from league.players import LEAGUE_EXPLOITER, MAIN_EXPLOITER


class Evaluations:
    """Evaluators' work and records over one league (guarded by `lock`) and its league.db."""

    def __init__(self, league: League, lock: threading.RLock, history: HistoryWriter,
                 clock: Callable[[], float], heuristic_rows: Sequence[Mapping] = ()):
        self.league, self._lock, self.history, self._clock = league, lock, history, clock
        self._gaps_in: set[str] = set()  # exploiter snapshots whose gaps are recorded
        # main agent -> [its first, its latest] win rate against the game's scripted opponent,
        # over the opponent's races (the rows already in league.db count: a resumed run)
        self._builtin: dict[str, list[float]] = {}
        self._exploitability: dict[str, float] = {}
        times = sorted({row["time"] for row in heuristic_rows})
        for when in times:
            self._add_builtin([row for row in heuristic_rows if row["time"] == when])

    def exact_work(self) -> dict | None:
        """For evaluators of games with an exact meta-game (poker): the oldest frozen player
        whose exact payoffs are missing, and the frozen players whose exact payoffs are in
        (it is needed against each of them), or None when every frozen player's are in."""
        with self._lock:
            frozen = self.league.historical_ids()
            mask = self.league.payoff.exact_mask(frozen)
        return missing_exact(frozen, mask)

    def report_exact(self, player_id: str, payoffs: Mapping[str, Sequence[float]]) -> None:
        """Exact payoffs of the frozen player `player_id` against other players:
        {other: (win rate with draws half, mean score)} (`Payoff.set_exact`); from then on its
        pairs are exact in PFSP, the Nash and the ratings, and evaluators sample them no more."""
        with self._lock:
            for other, (win_rate, score) in payoffs.items():
                self.league.payoff.set_exact(player_id, other, float(win_rate), float(score))
            self.league.payoff.set_exact(player_id, player_id, 0.5, 0.0)

    def evaluation_matches(self, count: int) -> list[dict]:
        """The `count` pairs of distinct players (withdrawn ones aside) with the fewest (decayed)
        games between them (`league.evaluation.least_played_pairs`), as matches {"home", "away",
        "home_race", "away_race"}: evaluators play every game in the two players' own races."""
        with self._lock:
            ids = [p for p in self.league.players if p not in self.league.withdrawn]
            wins, draws, losses = self.league.payoff.count_matrices(ids)
            exact = self.league.payoff.exact_mask(ids)
            races = {p: self.league.players[p].race for p in ids}
        pairs = least_played_pairs(ids, wins + draws + losses, exact, self.league.rng, count)
        return [{"home": a, "away": b, "home_race": races[a], "away_race": races[b]} for a, b in pairs]

    def trained_target(self, player_id: str) -> dict[str, float] | None:
        """The Nash weights a league exploiter's copy was trained against when its exploiter
        had a fixed target (`league_exploiter_opponents="nash_fixed"`); else None."""
        with self._lock:
            target = self.league.snapshot_targets.get(player_id)
        return None if target is None else dict(target)

    def record_exploitability(self, values: Mapping[str, float]) -> None:
        """Exact NashConv of the Nash mixture ("nash") and of main agents."""
        self.history.add_exploitability(values, self._clock())
        with self._lock:
            self._exploitability = dict(values)

    def exploitability(self) -> dict[str, float]:
        """The latest exact NashConv readings ({subject: value}: "nash", "nash_average", each
        main agent) since the coordinator started; {} before any."""
        with self._lock:
            return dict(self._exploitability)

    def record_exploiter_gaps(self, player_id: str, gaps: Sequence[Mapping]) -> int:
        """The frozen exploiter snapshot `player_id`'s gaps to a best response against its
        targets (`actors.evaluator.ExactEvaluator.exploiter_gap`: dicts with target, br_value,
        exploiter_value, gap), recorded in league.db (`exploiter_gaps`) with the snapshot's
        parent and the parent's role as the league knows them. Returns the number of rows
        recorded (0 for a player that is no exploiter's snapshot, or whose gaps are in: two
        evaluators may measure the same snapshot)."""
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
        row per agent and heuristic race (`HistoryWriter.add_heuristic`), all at one time."""
        self.history.add_heuristic(rows, self._clock())
        with self._lock:
            self._add_builtin(rows)

    def _add_builtin(self, rows: Sequence[Mapping]) -> None:
        """One measurement's rows: each agent's win rate over the opponent's races (weighted
        by games) becomes its latest, and its first if it had none."""
        scores: dict[str, list[float]] = {}
        for row in rows:
            total = scores.setdefault(row["player_id"], [0.0, 0.0])
            total[0] += row["win_rate"] * row["games"]
            total[1] += row["games"]
        for player_id, (score, games) in scores.items():
            if games:
                self._builtin.setdefault(player_id, [score / games] * 2)[1] = score / games

    def builtin_win_rates(self) -> dict[str, tuple[float, float]]:
        """{main agent: (its first, its latest) win rate against the game's scripted opponent
        (evaluator_0's measurements, draws half)}; {} before any."""
        with self._lock:
            return {p: (first, latest) for p, (first, latest) in self._builtin.items()}
