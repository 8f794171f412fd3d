"""The league: its players, their payoff matrix, matchmaking and snapshot decisions.

Pure and deterministic for a given numpy Generator: no JAX, no I/O. The coordinator
owns one `League`, asks it for matches and decisions, carries the decisions out
(writes parameters, resets learners) and then applies them here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from league import matchmaking, persistence, rules
from league.matchmaking import Match, MatchDistribution
from league.payoff import Payoff
from league.players import (
    HISTORICAL,
    LEAGUE_EXPLOITER,
    LEARNING_ROLES,
    MAIN_AGENT,
    MAIN_EXPLOITER,
    LeagueConfig,
    Player,
    initial_snapshot_id,
    learning_agents,
    snapshot_id,
)
from league.results import GameResult
from league.rules import AddSnapshot, ResetAgent


class League:
    """Players, payoff and per-agent bookkeeping for one league."""

    def __init__(self, config: LeagueConfig, rng: np.random.Generator | int = 0):
        self.config = config
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.payoff = Payoff(decay=config.payoff_decay)
        self.players: dict[str, Player] = {}
        self._historical: list[str] = []
        self._snapshots_of: dict[str, list[str]] = {}
        self._learning: dict[str, list[str]] = {role: [] for role in LEARNING_ROLES}
        self.last_snapshot_step: dict[str, int] = {}
        self.snapshot_count: dict[str, int] = {}
        # Exploiters' progress against their targets (`exploiter_plateau_steps`): the best
        # lowest win rate since their last copy or reset, and the step it was reached at.
        self.best_target_rate: dict[str, float] = {}
        self.best_target_step: dict[str, int] = {}
        # OpenAI Five quality scores of each agent's past selves, aligned with snapshots_of.
        self._quality: dict[str, list[float]] = {}
        # The latest meta-game Nash weights the coordinator published (`set_nash_weights`); not
        # saved: a resumed league has none until the next publication.
        self.nash_weights: dict[str, float] = {}
        # League exploiters' fixed targets (`league_exploiter_opponents="nash_fixed"`): the Nash
        # weights each trains against from the first publication after its last copy was
        # evaluated until its next copy; and, per league exploiter's copy, the target its life
        # trained against (read by the exploiter-gap measurement).
        self.nash_targets: dict[str, dict[str, float]] = {}
        self.snapshot_targets: dict[str, dict[str, float]] = {}
        # Frozen players taken out of matchmaking (`withdraw`): they keep their payoff rows.
        self.withdrawn: dict[str, str] = {}
        for player in learning_agents(config):
            self._add(player)
        if config.initial_snapshots:
            for agent_id in self.learning_agent_ids(MAIN_AGENT):
                self.apply(AddSnapshot(agent_id, initial_snapshot_id(agent_id), 0, 0.0, "initial"))

    # -- membership ------------------------------------------------------------

    def _add(self, player: Player) -> None:
        if player.player_id in self.players:
            raise ValueError(f"player {player.player_id!r} is already in the league")
        self.players[player.player_id] = player
        self.payoff.add_player(player.player_id)
        if player.role == HISTORICAL:
            self._historical.append(player.player_id)
            self._snapshots_of.setdefault(player.parent, []).append(player.player_id)
            # OpenAI Five: a new past self enters with the highest current quality.
            scores = self._quality.setdefault(player.parent, [])
            scores.append(max(scores) if scores else 0.0)
        else:
            self._learning[player.role].append(player.player_id)
            self.last_snapshot_step.setdefault(player.player_id, 0)
            self.snapshot_count.setdefault(player.player_id, 0)

    def withdraw(self, player_id: str, reason: str) -> bool:
        """Takes a frozen player out of matchmaking for good (its parameters cannot be read):
        no matchmaker, evaluator or meta-solver picks it again; its games stay in the payoff
        and the history. Returns False if it was already withdrawn. Learning agents cannot be
        withdrawn."""
        player = self.player(player_id)
        if player.role != HISTORICAL:
            raise ValueError(f"{player_id!r} is a learning agent; only frozen players can be withdrawn")
        if player_id in self.withdrawn:
            return False
        index = self._leave_pools(player)
        quality = self._quality.get(player.parent)
        if quality is not None and index is not None and index < len(quality):
            quality.pop(index)
        self.withdrawn[player_id] = reason
        return True

    def _leave_pools(self, player: Player) -> int | None:
        """Removes a frozen player from the historical pools; its index among its parent's
        snapshots (aligned with the parent's quality scores), or None."""
        if player.player_id in self._historical:
            self._historical.remove(player.player_id)
        pool = self._snapshots_of.get(player.parent, [])
        if player.player_id not in pool:
            return None
        index = pool.index(player.player_id)
        pool.pop(index)
        return index

    def player(self, player_id: str) -> Player:
        try:
            return self.players[player_id]
        except KeyError:
            raise ValueError(
                f"unknown player id {player_id!r}; the league has {len(self.players)} players, "
                f"learning agents: {self.learning_agent_ids()}"
            ) from None

    def learning_agent_ids(self, role: str | None = None) -> list[str]:
        if role is None:
            return [p for r in LEARNING_ROLES for p in self._learning[r]]
        if role not in self._learning:
            raise ValueError(f"unknown learning role {role!r}; allowed: {', '.join(LEARNING_ROLES)}")
        return list(self._learning[role])

    def historical_ids(self) -> list[str]:
        return list(self._historical)

    def win_rates_vs_frozen(self, role: str) -> dict[str, float]:
        """Each learning agent of `role`'s mean win rate against the frozen players (NaN while
        there are none)."""
        historical = self.historical_ids()
        return {a: float(self.payoff.win_rates(a, historical).mean()) if historical else float("nan")
                for a in self.learning_agent_ids(role)}

    def snapshots_of(self, agent_id: str) -> list[str]:
        """The agent's historical players, oldest first."""
        return list(self._snapshots_of.get(agent_id, ()))

    # -- matches and results ---------------------------------------------------

    def match_distribution(self, agent_id: str) -> MatchDistribution:
        """The exact distribution of the learning agent's next opponent (and of the branch
        that picks it), by its role's matchmaker (`league.matchmaking`)."""
        return matchmaking.match_distribution(self, agent_id)

    def get_match(self, agent_id: str) -> Match:
        """The opponent for the learning agent's next games, drawn from `match_distribution`
        with the league's Generator: the one place where matchmaking is random."""
        dist = self.match_distribution(agent_id)
        i = self.rng.choice(len(dist.opponents), p=dist.probabilities)
        return Match(agent_id, dist.opponents[i], dist.branches[i])

    def set_nash_weights(self, weights: dict[str, float], evaluated=None) -> None:
        """The latest Nash distribution of the meta-game (player id -> weight), for matchmakers
        that target it (`MatchmakingConfig.league_exploiter_opponents`), solved over the players
        `evaluated` (None: all). With "nash_fixed", it becomes the fixed target of each league
        exploiter without one whose newest copy is among them (PSRO: the population's
        meta-strategy once the last best response has joined it), restricted to frozen players;
        a Nash on learning agents alone sets no target."""
        unknown = set(weights) - set(self.players)
        if unknown:
            raise ValueError(f"Nash weights name players not in the league: {sorted(unknown)}")
        self.nash_weights = {p: float(w) for p, w in weights.items()}
        historical = set(self._historical)
        support = {p: w for p, w in self.nash_weights.items() if w > 0 and p in historical}
        if self.config.matchmaking.league_exploiter_opponents != "nash_fixed" or not support:
            return
        for agent_id in self.learning_agent_ids(LEAGUE_EXPLOITER):
            copies = self._snapshots_of.get(agent_id)
            if agent_id not in self.nash_targets and (evaluated is None or not copies or copies[-1] in evaluated):
                self.nash_targets[agent_id] = support

    def record_result(self, home: str, away: str, outcome: str, score: float | None = None) -> None:
        """One game's outcome ("win" | "draw" | "loss" from home's side) and, if the game
        reports one, what it paid home (chips in poker; `Payoff.update`)."""
        self.player(home), self.player(away)
        self.payoff.update(home, away, outcome, score)
        self._update_quality(home, away, outcome)

    def record_results(self, results: Sequence[GameResult]) -> int:
        """Every game of `results` (`league.results.GameResult`s, checked: `results.check`):
        a single game as `record_result`, a count as `record_counts`. Returns the games."""
        for r in results:
            if r.games == 1:
                self.record_result(r.home, r.away, r.outcome, r.score)
            else:
                self.record_counts(r.home, r.away, r.wins, r.draws, r.losses, r.score)
        return sum(r.games for r in results)

    def record_counts(self, home: str, away: str, wins: int, draws: int, losses: int,
                      score: float | None = None) -> None:
        """A batch of games of home against away played at once (`Payoff.update_counts`); each
        won game updates the quality scores as one `record_result` would."""
        self.player(home), self.player(away)
        self.payoff.update_counts(home, away, wins, draws, losses, score)
        past_self = (away in self._snapshots_of.get(home, ()) or home in self._snapshots_of.get(away, ()))
        for outcome, count in (("win", wins), ("loss", losses)):
            for _ in range(int(count) if past_self else 0):
                self._update_quality(home, away, outcome)

    def quality_probabilities(self, agent_id: str) -> np.ndarray:
        """Softmax of the OpenAI Five quality scores of the agent's past selves."""
        q = np.asarray(self._quality.get(agent_id, ()), dtype=np.float64)
        if q.size == 0:
            return q
        e = np.exp(q - q.max())
        return e / e.sum()

    def _update_quality(self, home: str, away: str, outcome: str) -> None:
        """OpenAI Five appendix N: when the agent beats past self i, q_i -= eta / (N p_i)."""
        for agent, past, won in ((home, away, outcome == "win"), (away, home, outcome == "loss")):
            pool = self._snapshots_of.get(agent)
            if not won or not pool or past not in pool:
                continue
            i = pool.index(past)
            probs = self.quality_probabilities(agent)
            eta = self.config.matchmaking.openai_five_learning_rate
            # A past self that is almost never sampled would get an unbounded update.
            self._quality[agent][i] -= eta / (len(pool) * max(probs[i], 1e-6))

    # -- snapshots and resets --------------------------------------------------

    def decide(self, agent_id: str, agent_steps: int, wall_time: float) -> list[AddSnapshot | ResetAgent]:
        """What should happen to a learning agent now that it has trained `agent_steps` steps."""
        player = self.player(agent_id)
        if not player.is_learning:
            raise ValueError(f"{agent_id!r} is a historical player; only learning agents snapshot")
        config = self.config.snapshots
        since = agent_steps - self.last_snapshot_step[agent_id]
        if player.role == MAIN_EXPLOITER:
            targets = self.learning_agent_ids(MAIN_AGENT)
        else:
            targets = self.historical_ids()
        rates = self.payoff.win_rates(agent_id, targets) if targets else np.zeros(0)
        without_gain = 0.0
        if config.exploiter_plateau_steps > 0 and player.role != MAIN_AGENT:
            without_gain = self._steps_without_gain(agent_id, rates, agent_steps)
        reason = rules.snapshot_reason(player.role, since, rates, config, without_gain)
        if reason is None:
            return []
        new_id = snapshot_id(agent_id, self.snapshot_count[agent_id])
        decisions: list[AddSnapshot | ResetAgent] = [
            AddSnapshot(agent_id, new_id, int(agent_steps), float(wall_time), reason)
        ]
        if self.rng.random() < rules.reset_probability(player.role, config):
            decisions.append(ResetAgent(agent_id, int(agent_steps), self._reset_source(player)))
        return decisions

    def _reset_source(self, player: Player) -> str | None:
        """The frozen player a reset agent restarts from (`SnapshotConfig.league_exploiter_reset_to`):
        for league exploiters with "main_agent", the newest copy of a main agent of its race
        (of any race if its race has none; withdrawn copies have left the pools); None (the initial
        parameters) otherwise or until there is one."""
        if player.role != LEAGUE_EXPLOITER or self.config.snapshots.league_exploiter_reset_to != "main_agent":
            return None
        mains = self.learning_agent_ids(MAIN_AGENT)
        for pool in ([m for m in mains if self.player(m).race == player.race], mains):
            copies = [(self.player(c).wall_time, self.player(c).step, c) for m in pool for c in self.snapshots_of(m)]
            if copies:
                return max(copies)[2]
        return None

    def _steps_without_gain(self, agent_id: str, rates: np.ndarray, agent_steps: int) -> float:
        """Steps since the exploiter's lowest win rate against its targets last rose by
        `exploiter_plateau_gain` over its best since its last copy or reset."""
        lowest = float(rates.min()) if rates.size else 0.0
        best = self.best_target_rate.get(agent_id)
        if best is None or lowest > best + self.config.snapshots.exploiter_plateau_gain:
            self.best_target_rate[agent_id] = lowest
            self.best_target_step[agent_id] = agent_steps
        return agent_steps - self.best_target_step[agent_id]

    def apply(self, decision: AddSnapshot | ResetAgent) -> Player | None:
        """Records a decision the coordinator has carried out."""
        if isinstance(decision, AddSnapshot):
            parent = self.player(decision.agent_id)
            snapshot = Player(
                decision.player_id, HISTORICAL, parent.race, parent=parent.player_id,
                step=decision.step, wall_time=decision.wall_time,
            )
            self._add(snapshot)
            self.last_snapshot_step[parent.player_id] = decision.step
            self.snapshot_count[parent.player_id] += 1
            self._forget_progress(parent.player_id)
            target = self.nash_targets.pop(parent.player_id, None)
            if target is not None:   # its next life waits for the next Nash to include this copy
                self.snapshot_targets[snapshot.player_id] = target
            return snapshot
        if isinstance(decision, ResetAgent):
            self.player(decision.agent_id)
            self.last_snapshot_step[decision.agent_id] = decision.step
            self._forget_progress(decision.agent_id)
            self.nash_targets.pop(decision.agent_id, None)
            return None
        raise ValueError(f"unknown decision {decision!r}; expected AddSnapshot or ResetAgent")

    def _forget_progress(self, agent_id: str) -> None:
        """After a copy or a reset the exploiter's progress is measured afresh (from the next
        `decide`, whose reading becomes its best)."""
        self.best_target_rate.pop(agent_id, None)
        self.best_target_step.pop(agent_id, None)

    # -- persistence (plain data) ----------------------------------------------

    def state(self) -> dict:
        """The league as plain data (`league.persistence.league_state`)."""
        return persistence.league_state(self)

    @classmethod
    def from_state(cls, state: dict) -> League:
        """The league `state` describes (`league.persistence.league_from_state`)."""
        return persistence.league_from_state(cls, state)
