"""What the coordinator makes of its learners' metrics (`Coordinator.record_learners`): their
updates per second (`UpdateRates`), the scalars league.db keeps (`per_learner_summary`), and
the stall watch (`StallWatch`: issue 31's "no silent stall", issue 58's quiet first hour)."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable, Mapping

RATE_WINDOW_SECONDS = 120.0
"""Learners' updates/s are over the readings of the last two minutes at least (a SMAX device
learner group's round, one chunk per agent, takes about a minute here)."""


def per_learner_summary(metrics: Mapping) -> dict:
    """The learner scalars kept in league.db: per-head figures (one per unit and head on SMAX)
    are averaged over heads; TensorBoard keeps every one."""
    summary, per_head = {}, {}
    for name, value in metrics.items():
        prefix, _, head = name.partition("/")
        if head and prefix != "loss":
            per_head.setdefault(prefix, []).append(value)
        else:
            summary[name] = value
    summary.update({f"{prefix}_mean_over_heads": float(sum(v) / len(v)) for prefix, v in per_head.items()})
    return summary


MAX_READINGS = 1_000
"""Readings kept per learner at most (a learner that stops keeps its readings since its last
chunk, one each `CoordinatorConfig.metrics_every_seconds` and each fresh progress line: over
an hour at the default 10 s; a learner stopped longer reads 0)."""


class UpdateRates:
    """Each learner's updates per second from successive readings of its `updates_dispatched`,
    over the readings of the last `window` seconds at least: a device learner's updates come a
    chunk at a time, so one 10 s window often holds none of them. A learner whose chunks come
    further apart than the window (an exploiter's one chunk a round beside main agents' nine,
    `--device.main_agent_chunks`) is read from the reading before its latest chunk: its rate
    over its latest chunk, not 0 between chunks; one that stops learning reads a rate that falls
    as the time since its last chunk grows (the stall itself is `StallWatch`'s to name)."""

    def __init__(self, window: float = RATE_WINDOW_SECONDS):
        self.window = window
        self._seen: dict[str, collections.deque] = {}   # agent -> (time, updates) readings

    def add(self, agent: str, updates: float, now: float) -> float | None:
        """Takes a reading; the rate, or None before a second reading."""
        seen = self._seen.setdefault(agent, collections.deque(maxlen=MAX_READINGS))
        if seen and updates < seen[-1][1]:   # a restarted learner counts from its checkpoint
            seen.clear()
        seen.append((now, updates))
        # the oldest reading kept: the newest one `window` old, but never one after the latest change
        while len(seen) > 2 and now - seen[1][0] >= self.window and seen[1][1] < updates:
            seen.popleft()
        if len(seen) < 2:
            return None
        t0, u0 = seen[0]
        return (updates - u0) / max(now - t0, 1e-9)


def compiling(metrics: Mapping) -> bool:
    """Whether a learner has not finished its first update since its process started or
    resumed (`updates_dispatched` 0: its first chunk is still compiling, or its first batch has
    not come)."""
    return "updates_dispatched" in metrics and float(metrics["updates_dispatched"]) == 0


def stalled_agents(events: Iterable[Mapping]) -> set[str]:
    """The learners league.db's events (oldest first) leave stalled: named "stalled" and not
    "recovered" since (a run stopped while they were)."""
    stalled = set()
    for event in events:
        if event["kind"] == "stalled":
            stalled.add(event["agent_id"])
        elif event["kind"] == "recovered":
            stalled.discard(event["agent_id"])
    return stalled


class StallWatch:
    """Names a stalled learner (issue 31, "no silent stall"): `skipped_updates` updates in a row
    skipped as non-finite (its version stays while `updates_skipped` grows), or no update
    dispatched for `stall_seconds` of its own time: a device learner group's agent waiting for
    its turn in a round (`waiting_for_turn`: other agents' chunks run, with
    `--device.main_agent_chunks` most of a round for an exploiter) is not counted.

    A learner that has not finished its first update since it started or resumed (`compiling`)
    is compiling its first chunk (minutes for SMAX on a CPU), not stalled: it is named only
    after `compile_seconds` ("compiling for N min"), and is not "recovered" until it updates.

    `observe` returns ("stalled", why) when a stall starts, ("recovered", why) when the learner
    applies updates again, else None. Learners in `stalled` (`stalled_agents`: a run stopped
    while they were) are watched as stalled, so that their recovery is said once they learn."""

    def __init__(self, skipped_updates: int, stall_seconds: float, compile_seconds: float,
                 stalled: Iterable[str] = ()):
        self.skipped_updates, self.stall_seconds = skipped_updates, stall_seconds
        self.compile_seconds = compile_seconds
        self._stalled_before = set(stalled)
        self._seen: dict[str, dict] = {}   # each learner's last reading

    def observe(self, agent: str, m: Mapping, now: float) -> tuple[str, str] | None:
        if "version" not in m:
            return None
        version, skipped = int(m["version"]), int(m.get("updates_skipped", 0))
        dispatched = float(m.get("updates_dispatched", 0.0))
        seen = self._seen.get(agent)
        if seen is None:
            self._seen[agent] = {"version": version, "skipped": skipped, "dispatched": dispatched,
                                 "in_a_row": 0, "experience": now, "stalled": agent in self._stalled_before}
            return None
        if dispatched < seen["dispatched"]:   # a restarted learner counts from its checkpoint
            seen.update(in_a_row=0, experience=now)
        elif version > seen["version"]:
            seen["in_a_row"] = 0
        elif skipped > seen["skipped"]:
            seen["in_a_row"] += skipped - seen["skipped"]
        if dispatched > seen["dispatched"] or m.get("waiting_for_turn"):
            seen["experience"] = now
        seen.update(version=version, skipped=skipped, dispatched=dispatched)
        idle, first = now - seen["experience"], compiling(m)
        reason = None
        if seen["in_a_row"] >= self.skipped_updates:
            reason = (f"its last {seen['in_a_row']} updates were all skipped as non-finite (NaN or inf "
                      "in the loss, gradients or parameters); its version stays at "
                      f"{version}: look at its learner metrics, or restore an earlier checkpoint")
        elif first and idle >= self.compile_seconds:
            reason = (f"compiling for {idle / 60:.0f} min: its first update has not come (a first chunk "
                      "compiles in minutes; is its device busy, or are its games not reaching it?)")
        elif not first and idle >= self.stall_seconds:
            reason = (f"no update for {idle:.0f} s: it gets no experience "
                      "(its games or replay table are not reaching it)")
        if bool(reason) == seen["stalled"] or (first and not reason):   # recovered: only by updating
            return None
        seen["stalled"] = bool(reason)
        return ("stalled", reason) if reason else ("recovered", "updating again")


class LearnerMonitor:
    """What the coordinator makes of a reading of every learner's metrics (`record`): their
    `updates_per_second` (`UpdateRates`), league.db's rows (`per_learner_summary`), the stall
    watch's events (`StallWatch`, also in league.db) and TensorBoard's scalars (`sink`: a
    `coordinator.tensorboard.TensorBoardSink`). Keeps the latest reading (`latest`)."""

    def __init__(self, history, watch: StallWatch, sink):
        self.history, self.watch, self.sink = history, watch, sink
        self.rates = UpdateRates()
        self._latest: dict[str, dict] = {}
        self._lock = threading.Lock()

    def record(self, metrics: dict[str, dict], now: float, step: int) -> list[dict]:
        """Takes a reading (agent -> metrics, `updates_per_second` added in place); returns the
        stall watch's events ({"kind", "agent_id", "player_id", "reason"})."""
        events = []
        for agent, m in metrics.items():
            if not m:   # a group without this agent's metrics (yet): no reading of 0 updates
                continue
            if "updates_dispatched" in m:
                rate = self.rates.add(agent, m["updates_dispatched"], now)
                if rate is not None:
                    m["updates_per_second"] = rate
            self.history.add_learner_metrics(agent, per_learner_summary(m), now)
            change = self.watch.observe(agent, m, now)
            if change:
                kind, reason = change
                events.append({"kind": kind, "agent_id": agent, "player_id": None, "reason": reason})
                self.history.add_event(kind, agent, None, int(m.get("steps", 0)), reason)
        self.sink.write(metrics, step)
        with self._lock:
            self._latest = metrics
        return events

    def latest(self) -> dict[str, dict]:
        """A copy of the latest reading."""
        with self._lock:
            return {a: dict(m) for a, m in self._latest.items()}
