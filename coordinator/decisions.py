"""The league's snapshot and reset decisions (`League.decide`, league/rules.py) carried out on
the learners: a snapshot's parameters into the parameter store and its player into league.db;
a reset's parameters (a frozen player's warm start, or the agent's initial ones) into its
learner. The coordinator's control loop runs them (`Coordinator.poll`)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from coordinator.history import HistoryWriter
from coordinator.learners import LearnerHandles
from coordinator.param_store import ParamStore
from league.league import League
from league.rules import AddSnapshot, ResetAgent


def initial_player_id(agent_id: str) -> str:
    """The param-store id of a learning agent's initial parameters (what resets restore)."""
    return f"{agent_id}@initial"


class Decisions:
    """Asks every learner for its steps, asks the league (guarded by `lock`) what to do, and
    does it (`poll`)."""

    def __init__(self, league: League, lock: threading.RLock, learners: LearnerHandles,
                 params: ParamStore, history: HistoryWriter, clock: Callable[[], float]):
        self.league, self._lock, self.learners = league, lock, learners
        self.params, self.history, self._clock = params, history, clock

    def poll(self) -> list[dict]:
        """Carries out every learner's decisions now; returns them as events ({"kind":
        "snapshot" | "reset", "agent_id", ...})."""
        events = []
        for agent_id in self.league.learning_agent_ids():
            learner = self.learners.get(agent_id)
            if learner is None:
                continue
            with self.learners.calling(f"{agent_id}'s learner"):
                steps = int(learner.steps())
            with self._lock:
                decisions = self.league.decide(agent_id, steps, self._clock())
            for decision in decisions:
                events.append(self._carry_out(learner, decision))
        return events

    def _carry_out(self, learner, decision) -> dict:
        if isinstance(decision, AddSnapshot):
            with self.learners.calling(f"{decision.agent_id}'s learner"):
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
            with self.learners.calling(f"{decision.agent_id}'s learner"):
                learner.reset(params)
            with self._lock:
                self.league.apply(decision)
            self.history.add_event("reset", decision.agent_id, None, decision.step, source and f"from {source}")
            return {"kind": "reset", "agent_id": decision.agent_id}
        raise ValueError(f"unknown decision {decision!r}")
