"""SMAX's forced-army curriculum: the cells a main agent plays against the built-in AI with both
armies forced (`--device.scripted_task_slots`), which cells it draws, and the handicaps they
start from (`--device.scripted_task_levels`).

A cell is (enemy race, the agent's army, the heuristic's army): indices into the game's races
and the races' menus. The learner group (`experiments.nodes.DeviceLearnerGroup`) holds one
`ForcedCells` per main agent, made by the scripted opponent's `curriculum` factory
(`actors.games.smax_races.scripted.curriculum`), and passes its cells along as opaque task
options: `draw` names the next chunk's cells, `task_rows` the rows of the races array the game's
reset reads for them (`SmaxRacesFunctions.reset`: the armies, then the units the heuristic's
army starts without), `record` takes each forced slot's results, `metrics` reads them back.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from actors.games.smax_races import handicap
from league.pfsp import weighted_pfsp_probabilities

WINDOW = 4     # chunks of a cell's results its win rate reads
METRICS = 16   # chunks of forced results the metrics read


class ForcedCells:
    """One main agent's forced cells (`slots` of them a chunk), their results and handicaps.

    `scripted`: the game's scripted opponent (`pick_probabilities`, `army_units`); `config`: the
    game's `GameFunctions.config`; `races`: the indices of the run's races (the enemies a cell
    can have); `rng` and `lock`: the learner group's (its chunks run on threads)."""

    def __init__(self, scripted, config, races: list[int], slots: int, handicap: bool,
                 rng: np.random.Generator, lock: threading.Lock):
        self.scripted, self.config, self.enemies = scripted, config, list(races)
        self.slots, self.handicap = int(slots), bool(handicap)
        self._rng, self._lock = rng, lock
        self.cells: dict[tuple[int, int, int], deque] = {}   # cell -> last chunks' (score, games)
        self.levels: dict[tuple[int, int, int], int] = {}    # cell -> handicap level (0: full army)
        self._results: deque = deque(maxlen=METRICS)          # chunks' (wins, draws, losses)
        self._handicaps: deque = deque(maxlen=METRICS)        # chunks' mean share of the army removed

    def draw(self, network, params, home: int) -> list[tuple[int, int, int]]:
        """The agent's forced cells for its next chunk, drawn with replacement from every cell
        of the run's races by `league.pfsp.weighted_pfsp_probabilities`: squared PFSP over the
        cells' win rates (`win_rate`) times the agent's probability of picking the cell's army
        in that matchup (the scripted opponent's `pick_probabilities`, `params`): the cells that
        count most toward its result against the heuristic's uniform pick and that it wins least."""
        picks = self.scripted.pick_probabilities(network, params, [[home, enemy] for enemy in self.enemies],
                                                 self.config)
        k = picks.shape[1]
        cells = [(enemy, own, army) for enemy in self.enemies for own in range(k) for army in range(k)]
        shares = [picks[self.enemies.index(enemy), own] for enemy, own, _ in cells]
        with self._lock:
            rates = [self.win_rate(cell) for cell in cells]
            drawn = self._rng.choice(len(cells), size=self.slots, p=weighted_pfsp_probabilities(rates, shares))
        return [cells[i] for i in drawn]

    def win_rate(self, cell: tuple[int, int, int]) -> float:
        """The agent's score in a cell over the last `WINDOW` chunks that played it (wins plus
        half the draws, over the games; at the cell's handicaps); 0.5 before any."""
        played = self.cells.get(cell)
        score, games = np.sum(list(played), 0) if played else (0.0, 0)
        return float(score / games) if games else 0.5

    def army_size(self, cell: tuple[int, int, int]) -> int:
        """Units in the heuristic's army of a cell."""
        race, _, army = cell
        return self.scripted.army_units(self.config, race, army)

    def handicap_units(self, cell: tuple[int, int, int]) -> int:
        """Units the heuristic's army starts without in a cell: its level over the army's size
        (`handicap.handicap_units`); 0 without handicaps."""
        if not self.handicap:
            return 0
        return handicap.handicap_units(self.levels.get(cell, 0), self.army_size(cell))

    def task_rows(self, cells: list[tuple[int, int, int]], per_game: int, games: int) -> list[np.ndarray]:
        """The rows the races array [B, 2] gains for a chunk whose first slots play `cells`
        (`per_game` games each, `games` in all): the armies [B, 2] (-1: the side's own pick),
        and with handicaps the units each side starts without [B, 2]."""
        armies = np.full((games, 2), -1)
        armies[:len(cells) * per_game] = np.repeat([cell[1:] for cell in cells], per_game, 0)
        if not self.handicap:
            return [armies]
        handicaps = np.zeros((games, 2), int)
        handicaps[:len(cells) * per_game, 1] = np.repeat([self.handicap_units(cell) for cell in cells], per_game)
        return [armies, handicaps]

    def record(self, cells: list[tuple[int, int, int]], outcomes: list[list[int]]) -> None:
        """A chunk's results in its forced slots: `outcomes` one (wins, draws, losses) a slot,
        the slots playing `cells`. Moves each cell's win rate and, with handicaps, its level
        (`handicap.next_level`, on the chunk's score in it)."""
        self._results.append(list(np.sum(outcomes, 0)))
        played: dict[tuple[int, int, int], np.ndarray] = {}   # cell -> this chunk's (score, games)
        for cell, (wins, draws, losses) in zip(cells, outcomes):
            played[cell] = played.get(cell, 0) + np.array([wins + 0.5 * draws, wins + draws + losses])
        with self._lock:
            if self.handicap:   # the share of the army removed, before the levels move
                self._handicaps.append(float(np.mean(
                    [self.handicap_units(cell) / self.army_size(cell) for cell in played])))
            for cell, (score, games) in played.items():
                if games:
                    self.cells.setdefault(cell, deque(maxlen=WINDOW)).append((score, games))
                    if self.handicap:
                        self.levels[cell] = handicap.next_level(self.levels.get(cell, 0), score, int(games))

    def metrics(self) -> dict[str, float]:
        """`heuristic_forced_win_rate`, `_draw_rate` and `_games` (the forced games of the last
        `METRICS` chunks); with handicaps `heuristic_forced_handicap` (the mean share of the
        heuristic's army removed in them)."""
        wins, draws, losses = np.sum(list(self._results), 0) if self._results else (0, 0, 0)
        out = {}
        if games := wins + draws + losses:
            out.update(heuristic_forced_win_rate=(wins + 0.5 * draws) / games,
                       heuristic_forced_draw_rate=draws / games, heuristic_forced_games=float(games))
        if self._handicaps:
            out["heuristic_forced_handicap"] = float(np.mean(self._handicaps))
        return out


def progress_text(m: dict) -> str:
    """`ForcedCells.metrics()` as the progress line shows them: "forced armies 0.42 (handicap 30%)"."""
    if "heuristic_forced_win_rate" not in m:
        return ""
    return f"forced armies {m['heuristic_forced_win_rate']:.2f}" + (
        f" (handicap {m['heuristic_forced_handicap']:.0%})" if "heuristic_forced_handicap" in m else "")
