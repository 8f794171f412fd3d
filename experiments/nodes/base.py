"""What the nodes share: `lost_node` (a call to a node that Ray restarts), `ParamsSource` (how
actors and evaluators reach any player's parameters) and `_Learners`, the per-agent RPC surface
and the loop of both learner groups (`learner_group.LearnerGroup`, `device_learners.DeviceLearnerGroup`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from league.players import WithdrawnPlayer


def lost_node(error: BaseException | None) -> BaseException | None:
    """The call to another node whose process was lost, and that Ray restarts, in `error` or
    what caused it (Ray's RayActorError and its subclasses ActorDiedError and
    ActorUnavailableError), else None: the caller tries again once that node is back; it is
    no bug."""
    import sys

    ray = sys.modules.get("ray")   # only a Ray run can lose a node this way
    seen = set()
    while ray is not None and error is not None and id(error) not in seen:
        if isinstance(error, ray.exceptions.RayActorError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


class ParamsSource:
    """Parameters by player id: a learning agent's from its learner group, a frozen player's
    from the coordinator (`Coordinator.frozen_params`: the run directory is on its host only),
    the `CACHE_SIZE` most recently used kept here, since a frozen player never changes."""

    CACHE_SIZE = 64

    def __init__(self, learner_groups: Mapping[str, Any], coordinator):
        from agents.storage import Recent

        self._learners = dict(learner_groups)
        self._coordinator = coordinator
        self._frozen = Recent(self.CACHE_SIZE)   # player id -> (version, params)

    def latest_params(self, player_id: str, min_version: int | None = None):
        if player_id in self._learners:
            return self._learners[player_id].params(player_id, min_version)
        got = self._frozen.get(player_id)
        if got is None:
            got = self._coordinator.frozen_params(player_id)
            if got is None:
                raise WithdrawnPlayer(player_id)
            self._frozen.put(player_id, got)
        version, params = got
        if min_version is not None and version < min_version:
            return None
        return version, params


class _Learners:
    """The per-agent RPC surface every learner group shares (`self.learners`: agent -> learner)."""

    learners: dict
    _initial: dict

    def initial_params(self, agent_id: str):
        return self._initial[agent_id]

    def steps(self, agent_id: str) -> int:
        return self.learners[agent_id].steps()

    def snapshot(self, agent_id: str):
        return self.learners[agent_id].snapshot()

    def reset(self, agent_id: str, params) -> int:
        return self.learners[agent_id].reset(params)

    def params(self, agent_id: str, min_version: int | None = None):
        return self.learners[agent_id].params(min_version)

    def stop(self) -> None:
        self._stop.set()

    def checkpoint(self) -> None:
        from learners.learner import save_checkpoints

        save_checkpoints(self.learners)   # a full disk: one line for the group

    def run(self) -> None:
        """Round-robin over the learners (`_round`: an update each on the replay path, a chunk
        each on the device path) until `stop()`; checkpoints every `checkpoint_every_seconds`
        (a kill -9 loses at most that much)."""
        self._stop.clear()
        last_checkpoint = time.time()
        while not self._stop.is_set():
            if time.time() - last_checkpoint >= self.config.checkpoint_every_seconds:
                self.checkpoint()
                last_checkpoint = time.time()
            self._round()


class CoreShare:
    """A node's share of the wall time spent working, kept at most `share`: after a piece of work
    of w seconds the node rests

        rest(w) = w (1 - share) / share

    so that over any run of work and rests, work / (work + rests) = share (a duty cycle). The
    node's measured share is `measured()`: its working seconds over the seconds since it began."""

    def __init__(self, share: float = 1.0, clock=time.monotonic):
        if not 0.0 < share <= 1.0:
            raise ValueError(f"a core share is in (0, 1]; got {share}")
        self.share, self._clock = float(share), clock
        self.started, self.busy = clock(), 0.0

    def worked(self, seconds: float) -> float:
        """Counts `seconds` of work; returns the rest that follows it."""
        self.busy += seconds
        return seconds * (1.0 - self.share) / self.share

    def measured(self) -> float:
        return self.busy / max(self._clock() - self.started, 1e-9)
