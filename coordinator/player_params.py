"""Where players' parameters come from, for the coordinator's callers: frozen players' and the
agents' initial parameters from the run directory's store on the coordinator's host
(`ParamStore`), learning agents' current ones from their learner groups. Actors and
evaluators on other hosts fetch them through the coordinator, so no disk is shared."""

from __future__ import annotations

import threading
from collections.abc import Callable

from coordinator.decisions import initial_player_id
from coordinator.learners import LearnerHandles
from coordinator.param_store import ParamStore
from league.league import League
from league.players import MAIN_AGENT, initial_snapshot_id


class PlayerParams:
    """Players' parameters over one league (guarded by `lock`); a frozen player whose file is
    damaged is handed to `withdraw(player_id, reason)`."""

    def __init__(self, league: League, lock: threading.RLock, store: ParamStore, learners: LearnerHandles,
                 withdraw: Callable[[str, str], bool]):
        self.league, self._lock, self.store, self.learners = league, lock, store, learners
        self._withdraw = withdraw

    def store_initial(self, agent_id: str, params, version: int = 0) -> None:
        """Keeps a learning agent's initial parameters for its resets and, for a main agent
        whose frozen initial copy is in the league (`LeagueConfig.initial_snapshots`), as that
        player's parameters (each written once)."""
        player = self.league.player(agent_id)
        self.store.save(initial_player_id(agent_id), params, version)
        if self.league.config.initial_snapshots and player.role == MAIN_AGENT:
            self.store.save(initial_snapshot_id(agent_id), params, version)

    def frozen(self, player_id: str) -> tuple[int, dict] | None:
        """(version, parameters) of a frozen player (or an agent's initial parameters), from the
        store (callers cache them: they never change).

        None when the player is withdrawn: its file is damaged (the zip's CRC, or a wrong
        layout), so it is taken out of matchmaking (`withdraw`) and the caller asks for
        another match. A plain value, not an exception, so that every launcher's RPC carries it."""
        with self._lock:
            if player_id in self.league.withdrawn:
                return None
        try:
            return self.store.load(player_id)
        except ValueError as e:
            player = self.league.players.get(player_id)
            if player is None or player.is_learning:
                raise  # an agent's initial parameters: its resets need them
            self._withdraw(player_id, str(e))
            return None

    def learning(self, agent_id: str) -> tuple[int, dict]:
        """(version, current parameters) of a learning agent, from its learner group: device
        learners in other groups play against it with these."""
        learner = self.learners.get(agent_id)
        if learner is None:
            raise KeyError(f"{agent_id!r} has no connected learner")
        return learner.params()
