"""The payoff matrix: who beats whom, with old results decaying away.

AlphaStar's pseudocode (Supplementary Data, `Payoff`): before each result between
`home` and `away`, the pair's wins, draws, losses and games are multiplied by a decay
(0.99), then the new result is added for both orders; a pair never played has win
rate 0.5; win rate = (wins + draws / 2) / games.

Stored as two dense arrays so that lookups are vectorised and thousands of players
stay cheap: `wins[a, b]` (a's decayed wins over b; b's losses against a) and the
symmetric `draws[a, b]`. Games and losses are derived: games = wins[a,b] + wins[b,a]
+ draws[a,b] (the decay multiplies all of a pair's counts alike, so this is exact).

A third array, `scores[a, b]`, holds the decayed sum of a's score against b (antisymmetric:
scores[b, a] = -scores[a, b]), where a game's score is what the game pays home (chips in
poker) or, when a game reports none, its outcome +1/0/-1. `score_matrix` (mean score per
game) is the meta-game's payoff: for win/loss games it is 2 * win rate - 1, the same game as
the win rates; for poker it is the expected chips, the meta-game PSRO solves.

Exact entries. Where a pair's expected outcome is computable exactly (poker: both players as
tabular policies, one tree walk: the game's `exact_evaluator` capability), `set_exact`
records it (win rate with draws half, and mean score) and every query (`win_rate(s)`,
`win_rate_matrix`, `score_matrix`) uses it instead of the sampled counts; `exact_mask` says
which pairs have one. Counts stay what was played.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

OUTCOMES = ("win", "draw", "loss")


class Payoff:
    """Decayed win/draw/loss counts per ordered pair of players, by stable string id."""

    def __init__(self, decay: float = 0.99, capacity: int = 64, dtype=np.float32):
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must lie in (0, 1]; got {decay!r}")
        self.decay = float(decay)
        self._index: dict[str, int] = {}
        self._ids: list[str] = []
        self._indices: dict[tuple[str, ...], np.ndarray] = {}
        self._wins = np.zeros((capacity, capacity), dtype)
        self._draws = np.zeros((capacity, capacity), dtype)
        self._scores = np.zeros((capacity, capacity), dtype)
        self._exact = np.zeros((capacity, capacity), bool)
        self._exact_rates = np.zeros((capacity, capacity), np.float64)
        self._exact_scores = np.zeros((capacity, capacity), np.float64)

    # -- players ---------------------------------------------------------------

    def add_player(self, player_id: str) -> int:
        """Adds a player (idempotent) and returns its row index."""
        if not isinstance(player_id, str) or not player_id:
            raise ValueError(f"player ids are non-empty strings; got {player_id!r}")
        if player_id in self._index:
            return self._index[player_id]
        n = len(self._ids)
        if n == self._wins.shape[0]:
            self._grow(2 * n)
        self._index[player_id] = n
        self._ids.append(player_id)
        return n

    def _grow(self, capacity: int) -> None:
        n = len(self._ids)
        for name in ("_wins", "_draws", "_scores", "_exact", "_exact_rates", "_exact_scores"):
            old = getattr(self, name)
            new = np.zeros((capacity, capacity), old.dtype)
            new[:n, :n] = old[:n, :n]
            setattr(self, name, new)

    @property
    def players(self) -> list[str]:
        return list(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, player_id: str) -> bool:
        return player_id in self._index

    def index(self, player_id: str) -> int:
        try:
            return self._index[player_id]
        except KeyError:
            raise ValueError(
                f"unknown player id {player_id!r}; the payoff knows {len(self._ids)} players"
                + (f", e.g. {self._ids[:3]}" if self._ids else "")
            ) from None

    def indices(self, player_ids: Iterable[str]) -> np.ndarray:
        """Row indices of `player_ids`; cached per sequence of ids (rows never move), so the
        matchmakers' repeated lookups of the same candidate lists cost one hash."""
        key = player_ids if isinstance(player_ids, tuple) else tuple(player_ids)
        got = self._indices.get(key)
        if got is None:
            got = np.fromiter((self.index(p) for p in key), dtype=np.int64, count=len(key))
            got.setflags(write=False)
            if len(self._indices) >= 256:
                self._indices.clear()
            self._indices[key] = got
        return got

    # -- results ---------------------------------------------------------------

    def update(self, home: str, away: str, outcome: str, score: float | None = None) -> None:
        """Records one game; `outcome` is "win", "draw" or "loss" from home's side, `score`
        what the game paid home (default: the outcome as +1/0/-1)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; allowed: {', '.join(OUTCOMES)}")
        if score is None:
            score = {"win": 1.0, "draw": 0.0, "loss": -1.0}[outcome]
        elif not np.isfinite(score):
            raise ValueError(f"the score of {home} vs {away} is {score}; a game must report a finite score")
        h, a = self.index(home), self.index(away)
        for stats in (self._wins, self._draws, self._scores):
            stats[h, a] *= self.decay
            if h != a:
                stats[a, h] *= self.decay
        if h != a:
            self._scores[h, a] += score
            self._scores[a, h] -= score
        if outcome == "win":
            self._wins[h, a] += 1
        elif outcome == "loss":
            self._wins[a, h] += 1
        else:
            self._draws[h, a] += 1
            if h != a:
                self._draws[a, h] += 1

    def update_counts(self, home: str, away: str, wins: int, draws: int, losses: int,
                      score: float | None = None) -> None:
        """Records n = wins + draws + losses games of home against away played at once (a
        device learner's chunk); `score` is their total payoff to home (default: the outcomes
        as +1/0/-1).

        With decay d, `update` applied to the n games one by one gives every pair statistic
        S -> d^n S + sum_k d^(n-1-k) x_k, which depends on the order of the games. Played at
        once, they have none: this records the expectation over a uniformly random order,
        S -> d^n S + (sum_k x_k) (1 - d^n) / (n (1 - d))  (the mean weight of one game is
        (1/n) sum_j d^j), which is the per-game result exactly when d = 1 or n = 1."""
        counts = (int(wins), int(draws), int(losses))
        if min(counts) < 0:
            raise ValueError(f"game counts of {home} vs {away} must be >= 0; got {counts}")
        n = sum(counts)
        if n == 0:
            return
        if score is None:
            score = float(wins - losses)
        elif not np.isfinite(score):
            raise ValueError(f"the score of {home} vs {away} is {score}; a game must report a finite score")
        h, a = self.index(home), self.index(away)
        d = self.decay
        keep = d ** n
        weight = 1.0 if d == 1.0 else (1.0 - keep) / (n * (1.0 - d))
        for stats in (self._wins, self._draws, self._scores):
            stats[h, a] *= keep
            if h != a:
                stats[a, h] *= keep
        if h != a:
            self._scores[h, a] += weight * score
            self._scores[a, h] -= weight * score
        self._wins[h, a] += weight * wins
        self._wins[a, h] += weight * losses
        self._draws[h, a] += weight * draws
        if h != a:
            self._draws[a, h] += weight * draws

    def set_exact(self, home: str, away: str, win_rate: float, score: float) -> None:
        """The exact expected outcome of home against away: P[home wins] + P[draw] / 2 and the
        mean score per game to home; away's view follows (1 - win rate, -score)."""
        if not (0.0 <= win_rate <= 1.0 and np.isfinite(score)):
            raise ValueError(f"exact payoff of {home} vs {away} must have a win rate in [0, 1] and a "
                             f"finite score; got {win_rate!r}, {score!r}")
        h, a = self.index(home), self.index(away)
        self._exact[h, a] = self._exact[a, h] = True
        self._exact_rates[h, a], self._exact_rates[a, h] = win_rate, 1.0 - win_rate
        self._exact_scores[h, a], self._exact_scores[a, h] = score, -score
        if h == a:
            self._exact_rates[h, h], self._exact_scores[h, h] = 0.5, 0.0

    def exact_mask(self, player_ids: Sequence[str] | None = None) -> np.ndarray:
        """[n, n] True where a pair's payoff is exact."""
        idx = self.indices(player_ids) if player_ids is not None else np.arange(len(self._ids))
        return self._exact[idx[:, None], idx[None, :]].copy()

    def known_mask(self, player_ids: Sequence[str] | None = None) -> np.ndarray:
        """[n, n] True where a pair's payoff is known: exact, or played at least once (and on
        the diagonal, a player against itself: a draw)."""
        idx = self.indices(player_ids) if player_ids is not None else np.arange(len(self._ids))
        i, j = idx[:, None], idx[None, :]
        games = self._wins[i, j] + self._wins[j, i] + self._draws[i, j]
        return (games > 0) | self._exact[i, j] | (i == j)

    # -- queries ---------------------------------------------------------------

    def _rates(self, h: np.ndarray | int, a: np.ndarray | int) -> np.ndarray:
        wins = self._wins[h, a].astype(np.float64)
        losses = self._wins[a, h].astype(np.float64)
        draws = self._draws[h, a].astype(np.float64)
        games = wins + losses + draws
        with np.errstate(invalid="ignore", divide="ignore"):
            rates = np.where(games > 0, (wins + 0.5 * draws) / games, 0.5)
        return np.where(self._exact[h, a], self._exact_rates[h, a], rates)

    def win_rate(self, home: str, away: str) -> float:
        """P[home beats away] (draws count half); 0.5 for a pair never played."""
        return float(self._rates(self.index(home), self.index(away)))

    def win_rates(self, home: str, aways: Sequence[str]) -> np.ndarray:
        """Vectorised `win_rate(home, b)` for every b in `aways`."""
        return self.win_rates_by_index(self.index(home), self.indices(aways))

    def win_rates_by_index(self, home: int, aways: np.ndarray) -> np.ndarray:
        return self._rates(home, np.asarray(aways, dtype=np.int64))

    def win_rate_matrix(self, player_ids: Sequence[str] | None = None) -> np.ndarray:
        """[n, n] win rates between `player_ids` (all players by default)."""
        idx = self.indices(player_ids) if player_ids is not None else np.arange(len(self._ids))
        return self._rates(idx[:, None], idx[None, :])

    def counts(self, home: str, away: str) -> dict[str, float]:
        """Decayed wins, draws, losses and games of `home` against `away`."""
        h, a = self.index(home), self.index(away)
        wins, losses = float(self._wins[h, a]), float(self._wins[a, h])
        draws = float(self._draws[h, a])
        return {"wins": wins, "draws": draws, "losses": losses, "games": wins + draws + losses}

    def count_matrices(self, player_ids: Sequence[str] | None = None):
        """(wins, draws, losses) as [n, n] float64 arrays, row player's view."""
        idx = self.indices(player_ids) if player_ids is not None else np.arange(len(self._ids))
        wins = self._wins[idx[:, None], idx[None, :]].astype(np.float64)
        draws = self._draws[idx[:, None], idx[None, :]].astype(np.float64)
        return wins, draws, wins.T.copy()

    def score_matrix(self, player_ids: Sequence[str] | None = None) -> np.ndarray:
        """[n, n] mean score of the row player per game against the column player (0 for a
        pair never played): the meta-game's payoff matrix, antisymmetric."""
        idx = self.indices(player_ids) if player_ids is not None else np.arange(len(self._ids))
        i, j = idx[:, None], idx[None, :]
        games = (self._wins[i, j] + self._wins[j, i] + self._draws[i, j]).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            sampled = np.where(games > 0, self._scores[i, j] / games, 0.0)
        return np.where(self._exact[i, j], self._exact_scores[i, j], sampled)

    @property
    def nbytes(self) -> int:
        return self._wins.nbytes + self._draws.nbytes + self._scores.nbytes

    # -- persistence (plain data; the coordinator writes it) -------------------

    def state(self) -> dict:
        n = len(self._ids)
        pairs = np.argwhere(np.triu(self._exact[:n, :n]))
        return {
            "decay": self.decay,
            "players": list(self._ids),
            "wins": self._wins[:n, :n].copy(),
            "draws": self._draws[:n, :n].copy(),
            "scores": self._scores[:n, :n].copy(),
            # exact entries with i <= j as arrays: pairs [k, 2], their win rates and scores [k]
            # (a list of tuples took 0.6 s to save at 650 players of a Kuhn league)
            "exact_pairs": pairs.astype(np.int32),
            "exact_rates": self._exact_rates[pairs[:, 0], pairs[:, 1]],
            "exact_scores": self._exact_scores[pairs[:, 0], pairs[:, 1]],
        }

    @classmethod
    def from_state(cls, state: dict) -> Payoff:
        players = list(state["players"])
        wins = np.asarray(state["wins"])
        draws = np.asarray(state["draws"])
        n = len(players)
        if wins.shape != (n, n) or draws.shape != (n, n):
            raise ValueError(
                f"payoff state is inconsistent: {n} players but wins {wins.shape}, draws {draws.shape}"
            )
        if not (np.isfinite(wins).all() and np.isfinite(draws).all()):
            raise ValueError("payoff state holds NaN or infinite counts; the saved payoff is corrupt")
        payoff = cls(decay=state["decay"], capacity=max(64, n))
        for p in players:
            payoff.add_player(p)
        payoff._wins[:n, :n] = wins
        payoff._draws[:n, :n] = draws
        # States saved before scores existed: the outcome scores, wins - losses.
        scores = np.asarray(state["scores"]) if "scores" in state else wins - wins.T
        if scores.shape != (n, n) or not np.isfinite(scores).all():
            raise ValueError(f"payoff state's scores are corrupt (shape {scores.shape} for {n} players, or not finite)")
        payoff._scores[:n, :n] = scores
        if "exact_pairs" in state:
            payoff._set_exact_pairs(np.asarray(state["exact_pairs"]), np.asarray(state["exact_rates"]),
                                    np.asarray(state["exact_scores"]))
        for i, j, rate, score in state.get("exact", ()):   # states saved before exact_pairs
            payoff.set_exact(players[int(i)], players[int(j)], float(rate), float(score))
        return payoff

    def _set_exact_pairs(self, pairs: np.ndarray, rates: np.ndarray, scores: np.ndarray) -> None:
        """`set_exact` for many (index, index) pairs at once (`from_state`)."""
        n, k = len(self._ids), len(rates)
        if (pairs.ndim != 2 or pairs.shape != (k, 2) or scores.shape != (k,)
                or not np.issubdtype(pairs.dtype, np.integer) or (k and not (0 <= pairs.min() and pairs.max() < n))
                or not (np.isfinite(scores).all() and ((rates >= 0.0) & (rates <= 1.0)).all())):
            raise ValueError(f"payoff state's exact entries are corrupt ({k} rates, pairs {pairs.shape} "
                             f"for {n} players, or a win rate outside [0, 1] or a score not finite)")
        i, j = pairs[:, 0], pairs[:, 1]
        self._exact[i, j] = self._exact[j, i] = True
        self._exact_rates[i, j], self._exact_rates[j, i] = rates, 1.0 - rates
        self._exact_scores[i, j], self._exact_scores[j, i] = scores, -scores
        diagonal = i[i == j]
        self._exact_rates[diagonal, diagonal], self._exact_scores[diagonal, diagonal] = 0.5, 0.0
