"""The coordinator's handles to the learners, and its calls to them in flight.

A handle offers `steps()`, `snapshot() -> (version, params)`, `reset(params)`, `params()` and
`metrics()` (a `learners.Learner`, or a runner's proxy to one); the agents of a learner group
(`experiments.nodes.LearnerGroup`) are reached through their group (`GroupMember`), whose
`metrics()` answers for all of them at once."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

HANG_SECONDS = 20.0
"""A call of the control loop to a learner node unanswered this long is named (`waiting`); so
is a node that has not answered the driver's pings (experiments/launchers.py: Pings) or a
coordinator that has not answered the driver's loop (Supervisor.watch_coordinator)."""


class GroupMember:
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


class LearnerHandles:
    """The handles, one per agent, and the control loop's calls to them that are in flight
    (`calling`, `waiting`: a learner node hung, stopped or overloaded is named)."""

    def __init__(self, learners: Mapping[str, Any] | None = None):
        self._lock = threading.Lock()
        self._handles = dict(learners or {})
        self._in_flight: dict[object, tuple[str, float]] = {}

    def set(self, learners: Mapping[str, Any]) -> None:
        with self._lock:
            self._handles = dict(learners)

    def add_group(self, group, agent_ids: Sequence[str]) -> None:
        with self._lock:
            self._handles.update({a: GroupMember(group, a) for a in agent_ids})

    def get(self, agent_id: str):
        """The agent's handle, or None before its learner is connected."""
        with self._lock:
            return self._handles.get(agent_id)

    @contextlib.contextmanager
    def calling(self, what: str):
        """Marks a call of the control loop to another node in flight (`waiting`)."""
        key = object()
        self._in_flight[key] = (what, time.monotonic())
        try:
            yield
        finally:
            del self._in_flight[key]

    def waiting(self) -> list[str]:
        """The calls in flight for HANG_SECONDS or more, each as "<node> for <s> s"."""
        now = time.monotonic()
        return [f"{what} for {now - since:.0f} s" for what, since in list(self._in_flight.values())
                if now - since >= HANG_SECONDS]

    def metrics(self) -> dict[str, dict]:
        """Every learner's metrics, one `metrics()` call per learner group ({} for an agent its
        group has none for yet)."""
        with self._lock:
            handles = dict(self._handles)
        metrics, of_group = {}, {}
        for agent, handle in handles.items():
            group = getattr(handle, "group", None)
            if group is None:
                with self.calling(f"{agent}'s learner"):
                    metrics[agent] = dict(handle.metrics())
                continue
            if id(group) not in of_group:
                with self.calling(f"{agent}'s learner group"):
                    of_group[id(group)] = group.metrics()
            metrics[agent] = dict(of_group[id(group)].get(agent, {}))
        return metrics
