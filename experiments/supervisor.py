"""The driver's loop that every launcher hands a running program to (experiments/launchers.py,
experiments/launchpad_launcher.py): `supervise` prints what the league's control loop did (the
coordinator's own loop, a node of the program: snapshots, resets, meta-game, checkpoints,
learner metrics), checks the nodes, prints progress, stops on --minutes / --learner_steps /
Ctrl-C, then stops and closes every node in reverse order, each step even if an earlier one
failed, so checkpoints get written."""

from __future__ import annotations

import collections
import signal
import sys
import threading
import time
from collections.abc import Callable

from coordinator.learner_watch import compiling
from coordinator.learners import HANG_SECONDS
from experiments.config import RunConfig
from experiments.program import Program


class NodeFailed(RuntimeError):
    """A node's process (or thread) ended, or a call to it failed; the message says which and why."""


RESUME = "checkpoints are written on the way out; rerun the same command to resume"

_build_interrupt = threading.Event()


def catch_ctrl_c_while_building() -> None:
    """Until `supervise` installs the league's own handler: Ctrl-C raises KeyboardInterrupt and
    is remembered. Python drops an exception raised inside a garbage collector's callback (JAX's
    `_xla_gc_callback`: "Exception ignored in ..."), and a league whose Ctrl-C was dropped so
    would build and run on; `stop_if_interrupted` raises it again at the next node. A Ctrl-C so
    dropped prints no "Exception ignored" traceback (`sys.unraisablehook`): it is not lost. Every
    other dropped exception prints as before."""
    _build_interrupt.clear()

    def handler(signum, frame):
        _build_interrupt.set()
        raise KeyboardInterrupt

    global _hook_before
    if sys.unraisablehook is not _unraisable:   # once: a second league in this process keeps it
        _hook_before, sys.unraisablehook = sys.unraisablehook, _unraisable

    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread (tests)
        pass


_hook_before = sys.unraisablehook


def _unraisable(info) -> None:
    """`sys.unraisablehook` while building: silent for the Ctrl-C that the build remembers."""
    if not (issubclass(info.exc_type, KeyboardInterrupt) and _build_interrupt.is_set()):
        _hook_before(info)


def stop_if_interrupted() -> None:
    """Raises again a Ctrl-C that `catch_ctrl_c_while_building`'s handler saw."""
    if _build_interrupt.is_set():
        raise KeyboardInterrupt


def result_agent(exploitability: dict) -> str:
    """The run's agent where the game has an exact meta-game (`RUN_DIR:result`: the league's
    Nash mixture measured best, `agent_ref.measured_best`) with its latest exact NashConv,
    beside the main agents' alone; "" before the evaluator's first reading."""
    from experiments.agent_ref import MIXTURES, measured_best

    if "nash" not in exploitability:
        return ""
    mixture = measured_best(exploitability)
    mains = {k: v for k, v in exploitability.items() if k not in MIXTURES}
    alone = "  ".join(f"{a.split('_main_agent')[0]} {v:.3f}" for a, v in sorted(mains.items()))
    return (f"  the run's agent (RUN_DIR:result, {MIXTURES[mixture]}): NashConv {exploitability[mixture]:.4f}"
            + (f" (main agents alone: {alone})" if alone else ""))


def program_lines(metrics: dict, told: set) -> list[str]:
    """What the device learners' programs are doing, once each (`told` keeps what was said):
    which agents share which compiled program (the learners' metric `program`) while their
    first chunks compile, then each program's first chunk's wall time (`first_chunk_seconds`:
    compiling it, or loading it from the persistent cache, and its first K updates)."""
    programs: dict[float, list[str]] = {}
    for agent, m in metrics.items():
        if m and "program" in m:
            programs.setdefault(m["program"], []).append(agent)
    lines = []
    numbers = {p: i for i, p in enumerate(sorted(programs, key=lambda p: sorted(programs[p])), 1)}
    if programs and "programs" not in told:
        told.add("programs")
        lines.append(f"learner programs: {len(programs)} for {sum(map(len, programs.values()))} agents ("
                     + "; ".join(f"{numbers[p]}: {', '.join(agents)}" for p, agents in
                                 sorted(programs.items(), key=lambda item: numbers[item[0]]))
                     + "), each compiled (or loaded from the cache) by its first chunk")
    for p, agents in sorted(programs.items(), key=lambda item: numbers[item[0]]):
        times = [metrics[a]["first_chunk_seconds"] for a in agents if "first_chunk_seconds" in metrics[a]]
        if times and p not in told:
            told.add(p)
            lines.append(f"learner program {numbers[p]} of {len(programs)} ({len(agents)} agents) ready: its first "
                         f"chunk took {max(times):.0f} s (compile or cache load, then its first updates)")
    return lines


class Supervisor:
    """The driver's loop: print what the program's control loop (`Coordinator.run`) did, check
    the nodes, print progress, stop."""

    def __init__(self, config: RunConfig, coordinator, out=sys.stdout,
                 stop_event: threading.Event | None = None, note: Callable[[], str] | None = None,
                 lost: Callable[[BaseException], bool] = lambda e: False):
        self.config, self.coordinator, self.out = config, coordinator, out
        self.note = note  # more for the progress line (Ray: hosts and node processes lost)
        self._scripted = None  # the game's scripted opponent, once a learner reports on it
        self.lost = lost  # whether an error of a call says the node's process was lost (Ray)
        self.stop_event = stop_event or threading.Event()
        self.events: list[dict] = []
        self.started = time.time()
        self.restarts = 0
        self.heartbeat = time.time()   # the loop's last round: `watch_coordinator`
        # Snapshots and resets since the last progress line: summed on it, not a line each (a
        # fast game makes several a second).
        self.changes: collections.Counter = collections.Counter()
        self.players_at_start: int | None = None   # the league's size at the first progress line
        self.programs_told: set = set()   # what `program_lines` has said already

    def task_progress(self, metrics: dict) -> str:
        """The progress line's words for a main agent's games against the game's scripted
        opponent's tasks (`ScriptedOpponent.progress(metrics)`; "" where the game has none)."""
        factory = self.config.game_info.capabilities.scripted_opponent
        if factory is None or not metrics:
            return ""
        self._scripted = self._scripted or factory()
        progress = getattr(self._scripted, "progress", None)
        return progress(metrics) if progress else ""
    def report(self, fresh: bool = False) -> dict:
        """Prints the progress line from the coordinator's summary and the learners' metrics
        its control loop last recorded (`fresh`: read them now)."""
        elapsed = time.time() - self.started
        metrics = self.coordinator.record_learners() if fresh else self.coordinator.learner_metrics()
        summary = self.coordinator.summary()
        # until a learner's first update (its first chunk compiling: minutes for SMAX on a CPU)
        # the line says so, not 0.0/s (`learner_watch.compiling`)
        reported = {a: m for a, m in metrics.items() if m}
        first = [a for a, m in reported.items() if compiling(m)]
        rates = {a: m["updates_per_second"] for a, m in reported.items()
                 if "updates_per_second" in m and a not in first}
        slowest = min(rates, key=rates.get) if len(rates) > 1 else None
        notes = ([f"slowest {slowest} {rates[slowest]:.1f}/s"] if slowest else []) + (
            [f"{len(first)} compiling"] if first else [])
        updates = ("compiling" if len(first) == len(reported) else f"{sum(rates.values()):.1f}/s"
                   + (f" ({'; '.join(notes)})" if notes else ""))
        def by_race(rates):
            return "  ".join(f"{a.split('_main_agent')[0]} {w}" for a, w in rates.items())

        vs = by_race({a: f"{w:.2f}" for a, w in summary["main_win_rate_vs_league"].items()})
        # the main agents' training games against the game's scripted opponent (and how many of
        # them were drawn: a side that cannot win plays out the clock), and the part of the line
        # of its tasks, in the game's own words (`ScriptedOpponent.progress`)
        def against_heuristic(m):
            own = (f"{m['heuristic_win_rate']:.2f}" + (
                f" ({m['heuristic_draw_rate']:.0%} drawn)" if m.get("heuristic_draw_rate") else "")
                if "heuristic_win_rate" in m else "")
            return " ".join(filter(None, (own, self.task_progress(m))))

        scripted = by_race({a: against_heuristic(m) for a, m in metrics.items() if against_heuristic(m)})
        # the evaluator's measurements against the game's scripted opponent: first -> latest
        builtin = by_race({a: f"{first:.2f} -> {latest:.2f}"
                           for a, (first, latest) in summary.get("main_win_rate_vs_builtin", {}).items()})
        changes = ", ".join(f"+{n} {kind}{'s' if n > 1 else ''}" for kind, n in sorted(self.changes.items()))
        self.changes.clear()
        # new players a minute, once a minute is in (the league's first players are no news)
        if self.players_at_start is None:
            self.players_at_start = summary["players"]
        per_minute = ((summary["players"] - self.players_at_start) / (elapsed / 60) if elapsed >= 60 else None)
        print(
            f"[{elapsed / 60:5.1f} min] players {summary['players']} ({summary['historical']} frozen"
            + (f"; {changes}" if changes else "") + (f"; {per_minute:.0f}/min" if per_minute is not None else "")
            + f")  games {summary['games']} ({summary['games_per_second']:.1f}/s)  learner updates {updates}  "
            f"main agents' win rate vs league: {vs or '-'}"
            + (f"  the run's agent (RUN_DIR:result:RACE) vs built-in AI (evaluator, first -> latest): {builtin}"
               if builtin else "")
            + result_agent(summary.get("exploitability", {}))
            + (f"  vs heuristic (training games): {scripted}" if scripted else "")
            + (self.note() if self.note else "")
            + (f"  waiting on {', '.join(summary['waiting'])} (hung?)" if summary.get("waiting") else ""),
            file=self.out, flush=True,
        )
        for line in program_lines(metrics, self.programs_told):
            print(line, file=self.out, flush=True)
        return {"summary": summary, "learners": metrics}

    def done(self, metrics: dict | None) -> str | None:
        if self.stop_event.is_set():
            return "stopped"
        if self.config.minutes and time.time() - self.started >= self.config.minutes * 60:
            return f"--minutes={self.config.minutes} reached"
        if self.config.learner_steps and metrics:
            steps = [m.get("steps", 0) for m in metrics["learners"].values()]
            if steps and min(steps) >= self.config.learner_steps:
                return f"--learner_steps={self.config.learner_steps} reached by every learner"
        return None

    def loop(self, check_nodes: Callable[[], None] = lambda: None) -> str:
        last_report, metrics = 0.0, None
        while True:
            check_nodes()
            try:
                for event in self.coordinator.take_events():
                    self.events.append(event)
                    if event["kind"] in ("snapshot", "reset"):
                        self.changes[event["kind"]] += 1
                    else:
                        print(f"  {describe_event(event)}", file=self.out, flush=True)
                if time.time() - last_report >= self.config.progress_every_seconds:
                    metrics, last_report = self.report(), time.time()
            except Exception as e:
                if not self.lost(e):
                    raise
                # the coordinator's process was lost and is restarting (check_nodes says so)
            reason = self.done(metrics)
            if reason:
                return reason
            self.heartbeat = time.time()
            self.stop_event.wait(0.5)

    def watch_coordinator(self, finished: threading.Event) -> None:
        """Until `finished`: names a coordinator that has not answered the loop for
        HANG_SECONDS (a hung, stopped or overloaded process), once, and says when it answers
        again. The loop itself waits for it (so the node pings, made from the loop, wait too)."""
        quiet = HANG_SECONDS
        said = None
        while not finished.wait(1.0):
            beat = self.heartbeat
            late = time.time() - beat
            if said is None and late >= quiet:
                print(f"  the coordinator has not answered for {late:.0f} s (its process hung, stopped or "
                      "overloaded?); the run waits for it", file=self.out, flush=True)
                said = beat
            elif said is not None and beat != said:
                print(f"  the coordinator answers again (after {time.time() - said:.0f} s)", file=self.out, flush=True)
                said = None


def describe_event(event: dict) -> str:
    """One terminal line for a coordinator event (`Coordinator.take_events`)."""
    kind = event["kind"]
    if kind == "snapshot":
        return f"snapshot: {event['agent_id']} -> {event['player_id']} ({event['reason']})"
    if kind == "withdrawn":
        return (f"withdrawn: frozen player {event['player_id']} leaves matchmaking for the rest of "
                f"the run: {event['reason']}")
    if kind == "stalled":
        return f"stalled: learner {event['agent_id']} is not learning: {event['reason']}"
    if kind == "recovered":
        return f"recovered: learner {event['agent_id']} is {event['reason']}"
    return f"{kind}: {event['agent_id']}"


def supervise(program: Program, handles: dict, out, stop_event, on_launch, check_nodes,
               stop_node, close_node, note: Callable[[], str] | None = None,
               lost: Callable[[BaseException], bool] = lambda e: False) -> Supervisor:
    """What both launchers share once the nodes run: the loop, then an orderly shutdown."""
    config = program.config
    stop_if_interrupted()
    supervisor = Supervisor(config, handles["coordinator"], out, stop_event, note, lost)
    previous = _install_sigint(supervisor.stop_event) if stop_event is None else None
    if config.dashboard_port >= 0:
        from dashboard.server import serve
        from experiments.watch import watch

        # a payoff cell's game, watched (dashboard/watch.py), is played in this process on demand
        print(f"dashboard: {serve(config.run_dir, config.dashboard_port, watch=watch)[1]}", file=out, flush=True)
    if on_launch is not None:
        on_launch(handles)
    stopping = None
    timings: list[tuple[float, str]] = []

    def timed(what: str, step: Callable[[], None]) -> None:
        started = time.time()
        try:
            step()
        except Exception as e:
            print(f"warning: {what} failed ({type(e).__name__}: {e})", file=out, flush=True)
        finally:
            timings.append((time.time() - started, what))

    finished = threading.Event()
    threading.Thread(target=supervisor.watch_coordinator, args=(finished,), daemon=True,
                     name="watch-coordinator").start()
    try:
        reason = supervisor.loop(lambda: check_nodes(supervisor))
        stopping = time.time()
        print(f"finishing: {reason}", file=out, flush=True)
        try:
            supervisor.report(fresh=True)
        except Exception as e:
            if not lost(e):
                raise
    finally:
        finished.set()
        stopping = stopping or time.time()
        # Every running node is told to stop at once, so each finishes the work it has in
        # flight (a learner's chunk, an evaluator's games) beside the others, not after them;
        # then each is closed (checkpoints written) in reverse order.
        threads = [threading.Thread(target=timed, args=(f"stopping {n.name}", lambda n=n: stop_node(n)), daemon=True)
                   for n in reversed(program.nodes) if n.runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for n in reversed(program.nodes):
            if hasattr(n.cls, "close"):
                timed(f"closing {n.name}", lambda n=n: close_node(n))
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    longest = max(timings, default=(0.0, ""))
    print(f"checkpoints written to {config.run_dir} (stopped in {time.time() - stopping:.1f} s"
          + (f"; the longest step: {longest[1]}, {longest[0]:.1f} s" if longest[0] >= 1.0 else "")
          + "); rerun the same command to resume", file=out, flush=True)
    return supervisor


def _install_sigint(stop_event: threading.Event):
    def handler(signum, frame):
        if stop_event.is_set():
            raise KeyboardInterrupt
        print("\nstopping (Ctrl-C again to abort without checkpoints) ...", flush=True)
        stop_event.set()

    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread (tests)
        return None
