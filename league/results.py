"""Game results: the one record of what was played (issue 30).

A `GameResult` is made where games end (an actor's finished game, an evaluator's, a device
learner's chunk of games against one opponent), checked once where it enters the coordinator
(`check`, called by `Coordinator.report`), and written to league.db from it
(`coordinator.history.LeagueHistory.add_results`). One game is a count of one:

    GameResult.one("terran_main_agent_0", "zerg_main_exploiter_0_v3", +1, score=1.0, length=41)
    GameResult("kuhn_poker_main_agent", "kuhn_poker_main_agent_v2", wins=30, draws=0, losses=34,
               score=-3.0, length=180, source="device")

Counts are home's view; `score` is the sum over the games of what the game itself paid home
(chips in poker, the outcome in SMAX), `length` the sum of their lengths in steps.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence

from league.payoff import OUTCOMES

OUTCOME_OF_SIGN = {1: "win", 0: "draw", -1: "loss"}


@dataclasses.dataclass(frozen=True)
class GameResult:
    """`games` games of `home` against `away` in the same races (see the module docstring)."""

    home: str
    away: str
    wins: int = 0
    draws: int = 0
    losses: int = 0
    score: float | None = None
    length: int | None = None
    branch: str = ""
    home_race: str | None = None
    away_race: str | None = None
    source: str = "actor"
    actor_id: str = ""

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def outcome(self) -> str:
        """"win" | "draw" | "loss" of a single game (ValueError for a count of several)."""
        if self.games != 1:
            raise ValueError(f"{self.games} games have no single outcome")
        return "win" if self.wins else "draw" if self.draws else "loss"

    @classmethod
    def one(cls, home: str, away: str, outcome: int | str, score: float | None = None,
            length: int | None = None, **fields) -> GameResult:
        """One game: `outcome` +1 / 0 / -1 or "win" / "draw" / "loss" (home's view)."""
        name = OUTCOME_OF_SIGN.get(outcome, outcome) if not isinstance(outcome, str) else outcome
        if name not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; allowed: {', '.join(OUTCOMES)} or +1/0/-1")
        return cls(home, away, wins=int(name == "win"), draws=int(name == "draw"),
                   losses=int(name == "loss"), score=score, length=length, **fields)

    @classmethod
    def from_dict(cls, row: Mapping) -> GameResult:
        """From the dict form (one game: {"home", "away", "outcome", ...}; counts: {"home", "away",
        "wins", "draws", "losses", ...}); unknown keys are refused with their names."""
        row = dict(row)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(row) - known - {"outcome", "time"})
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(unknown)} in a game result; "
                             f"known: outcome, {', '.join(sorted(known))}")
        row.pop("time", None)
        if "outcome" in row:
            outcome = row.pop("outcome")
            return cls.one(row.pop("home"), row.pop("away"), outcome, **row)
        return cls(**row)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def check(results: Sequence[GameResult], players: Mapping) -> None:
    """ValueError naming the first problem of a batch of results, so that a malformed batch is
    refused whole: an unknown player, counts that are not integers >= 0 or no games at all,
    races that are not the players' (`players`: player id -> an object with `race`), a
    non-finite score."""
    for r in results:
        what = f"games {r.home} vs {r.away}"
        for key in ("home", "away"):
            if getattr(r, key) not in players:
                raise KeyError(f"unknown player {getattr(r, key)!r} in a game result; nothing of "
                               "this batch was recorded")
        counts = (r.wins, r.draws, r.losses)
        if any(not isinstance(c, numbers.Integral) or isinstance(c, bool) or c < 0 for c in counts) or not sum(counts):
            raise ValueError(f"{what}: counts must be integers >= 0 and not all 0, got {counts}; "
                             "nothing of this batch was recorded")
        for key in ("home", "away"):
            played, race = getattr(r, f"{key}_race"), players[getattr(r, key)].race
            if played is not None and played != race:
                raise ValueError(f"{what} were played with {key} race {played!r}, but "
                                 f"{getattr(r, key)} is a {race} player; the actor or evaluator reset "
                                 "the game in the wrong races; nothing of this batch was recorded")
        if r.score is not None and not math.isfinite(float(r.score)):
            raise ValueError(f"{what} reported score {r.score}; the game returned a non-finite "
                             "payoff (check the game or reward plug-in); nothing of this batch "
                             "was recorded")


def aggregate(results: Sequence[GameResult]) -> list[GameResult]:
    """The results as counts: one `GameResult` per opponent, races, branch, source and actor,
    wins, draws and losses added, `score` and `length` summed (None where no game had one).
    What league.db keeps by default: storage per batch, not per game (issue 31)."""
    groups: dict[tuple, list[GameResult]] = {}
    for r in results:
        key = (r.home, r.away, r.branch, r.home_race, r.away_race, r.source, r.actor_id)
        groups.setdefault(key, []).append(r)
    out = []
    for (home, away, branch, home_race, away_race, source, actor_id), rows in groups.items():
        scores = [r.score for r in rows if r.score is not None]
        lengths = [r.length for r in rows if r.length is not None]
        out.append(GameResult(home, away, wins=sum(r.wins for r in rows), draws=sum(r.draws for r in rows),
                              losses=sum(r.losses for r in rows), score=float(sum(scores)) if scores else None,
                              length=int(sum(lengths)) if lengths else None, branch=branch,
                              home_race=home_race, away_race=away_race, source=source, actor_id=actor_id))
    return out
