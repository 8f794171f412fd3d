"""A league under deliberate faults (issue 28): a Ray league runs for `--minutes` while a fault
drawn at random strikes every `--fault_every` seconds, each logged with its time; then one row
per fault says whether the league noticed, whether it recovered and what was lost.

Faults (`--faults`):
    kill_learner       kill -9 of a learner group's process
    kill_coordinator   kill -9 of the coordinator's process
    kill_evaluator     kill -9 of an evaluator's process
    kill_actor         kill -9 of an actor group's process (the replay path only)
    hang               SIGSTOP of a node's process for `--hang_seconds`, then SIGCONT
    full_disk          the run directory's filesystem (a tmpfs of `--disk_mb` made here; root
                       only) filled for `--full_seconds`, then freed
    torn_checkpoint    kill -9 of a learner group while it writes a checkpoint (its temporary
                       file seen), or else right after one
    lock_db            a reader (the dashboard's kind) holding a read transaction on league.db
                       for `--hang_seconds`

The harness acts as an operator's process supervisor would (systemd's Restart=on-failure):
when the league exits before its time, it reruns the same command, which resumes from the
run directory. Each fault's recovery says which it was: `in run` (the league went on by
itself) or `restarted` (the run stopped and its rerun resumed).

Per fault: detected after (the first terminal line of the league naming a failure after the
fault, or its exit), recovered after (league.db's game count and the learners' steps both
growing again), games lost (games league.db held at the fault and does not hold after it),
snapshots lost (players league.db held at the fault and does not after), learner steps lost
(the learners' steps recorded before the fault minus those they resumed from), games/s and
learner updates/s over `--window` seconds before the fault and after its recovery.

    sudo python -m benchmarks.chaos --minutes=30 --fault_every=90          # the 30-minute run
    sudo python -m benchmarks.chaos --minutes=3 --fault_every=40 --game=kuhn_poker   # short
    sudo python -m benchmarks.chaos --game=kuhn_poker --in_turn --paced --fault_every=15 ...   # CI's (tests/test_chaos.py)

With `--in_turn --paced` each fault strikes once the one before it has recovered (and was named),
and the league stops once the last has: the shortest run that meets every fault once.

Last line: `RESULT chaos faults=N recovered=R in_run=I named=D to_name=T games_lost=G
snapshots_lost=S ratio=<R/N> target=1.0` (named: faults the terminal named, of the T that fail
something; a held read transaction on league.db fails nothing).
"""

from __future__ import annotations

import errno
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("game", "smax_races", "the league's --game")
flags.DEFINE_integer("races", 3, "the league's --races (SMAX)")
flags.DEFINE_string("experience", "auto", "the league's --experience")
flags.DEFINE_float("minutes", 30.0, "the league's total running time, restarts included")
flags.DEFINE_float("fault_every", 90.0, "seconds between faults")
flags.DEFINE_float("first_fault", 120.0, "seconds from the start before the first fault, at the earliest "
                   "(it also waits for the league to play and learn: start-up, compiles)")
flags.DEFINE_list("faults", ["kill_learner", "kill_coordinator", "kill_evaluator", "kill_actor", "hang",
                             "full_disk", "torn_checkpoint", "lock_db"], "the faults to draw from")
flags.DEFINE_float("hang_seconds", 60.0, "how long a hang or a held read transaction lasts")
flags.DEFINE_float("full_seconds", 60.0, "how long the disk stays full")
flags.DEFINE_integer("disk_mb", 1024, "size of the run directory's own filesystem (tmpfs; root only)")
flags.DEFINE_float("window", 30.0, "seconds of rates before a fault and after its recovery")
flags.DEFINE_integer("seed", 0, "the draw of faults")
flags.DEFINE_bool("in_turn", False, "each fault of --faults once, in their order, instead of drawn")
flags.DEFINE_bool("paced", False, "with --in_turn: each fault strikes once the one before it has recovered "
                  "(and, if it fails something, was named), --fault_every after it at the earliest; the league "
                  "stops --window seconds after the last has recovered, --minutes being then a ceiling")
flags.DEFINE_string("run_root", "", "where the run directory goes (default: a new temporary directory)")
flags.DEFINE_list("league_args", [], "more flags for the league, e.g. --league_args=--checkpoint_every_seconds=30")

NODE_CLASSES = {"learner": ("DeviceLearnerGroup", "LearnerGroup"), "coordinator": ("Coordinator",),
                "evaluator": ("EvaluatorNode",), "actor": ("ActorGroup",)}
FAILURE_WORDS = re.compile(r"died|error|lost|stalled|restart|failed|withdrawn|Traceback|waiting on|"
                           r"not answered|cannot be written|not written|held in memory|writer stopped",
                           re.IGNORECASE)
STALE_SECONDS = 4.0   # league.db's learner readings lag the learners by up to a metrics interval
TARGET_WAIT = 30.0    # a fault waits this long for its target's process (a node still restarting)
HARMLESS = ("lock_db",)   # faults the league should not even notice
PROGRESS = re.compile(r"^\[\s*[0-9.]+ min\]")   # progress lines: their "lost:" note repeats an old loss
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def node_pids(kinds: str | tuple[str, ...], wait: float = 0.0) -> list[tuple[str, int]]:
    """(kind, process id) of the Ray workers running a node of one of `kinds` (their title is
    `ray::<Class>...`); looks again each second for up to `wait` seconds while there is none
    (between a restart and its process title)."""
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    deadline = time.time() + wait
    while True:
        out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        found = []
        for line in out.splitlines():
            pid, _, args = line.strip().partition(" ")
            title = args.strip()
            found += [(kind, int(pid)) for kind in kinds
                      if any(title.startswith(f"ray::{c}") and not title.startswith(f"ray::{c}X")
                             for c in NODE_CLASSES[kind])]
        if found or time.time() >= deadline:
            return found
        time.sleep(1.0)


class League:
    """The league's process, rerun whenever it exits before `deadline`; every line it prints,
    with its time."""

    def __init__(self, command: list[str], deadline: float, log_path: str):
        self.command, self.deadline = command, deadline
        self.lines: list[tuple[float, str]] = []
        self.exits: list[tuple[float, int]] = []
        self.starts: list[float] = []
        self._log = open(log_path, "w")
        self._stop = threading.Event()
        self.process: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._keep_running, daemon=True)
        self._thread.start()

    def _keep_running(self):
        while not self._stop.is_set() and time.time() < self.deadline - 20:
            minutes = (self.deadline - time.time()) / 60.0
            self.starts.append(time.time())
            self.process = subprocess.Popen([*self.command, f"--minutes={minutes:.2f}"], stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
            for line in self.process.stdout:
                self.lines.append((time.time(), line.rstrip()))
                self._log.write(f"{time.strftime('%H:%M:%S')} {line}")
                self._log.flush()
            code = self.process.wait()
            self.exits.append((time.time(), code))
            self.lines.append((time.time(), f"[chaos] the league exited with status {code}"))
            if code == 0 and time.time() >= self.deadline - 30:
                break
            time.sleep(2.0)

    def wait(self):
        self._thread.join()

    def stop(self):
        self._stop.set()
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)


class Probe:
    """league.db read every 2 s: (time, games, learners' steps summed, players)."""

    def __init__(self, db: str):
        self.db, self.rows = db, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def read(self):
        if not os.path.exists(self.db):
            return None
        try:
            con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
            try:
                games = con.execute("SELECT count(*) FROM games").fetchone()[0]
                games += con.execute("SELECT coalesce(sum(wins + draws + losses), 0) FROM game_counts").fetchone()[0]
                steps = con.execute(
                    "SELECT coalesce(sum(value), 0) FROM learner_metrics m WHERE name = 'steps' AND id = "
                    "(SELECT max(id) FROM learner_metrics WHERE agent_id = m.agent_id AND name = 'steps')"
                ).fetchone()[0]
                players = {r[0] for r in con.execute("SELECT player_id FROM players")}
            finally:
                con.close()
        except sqlite3.Error:
            return None
        return time.time(), games, steps, players

    def _poll(self):
        while not self._stop.is_set():
            row = self.read()
            if row is not None:
                self.rows.append(row)
            self._stop.wait(2.0)

    def at(self, when: float):
        before = [r for r in self.rows if r[0] <= when]
        return before[-1] if before else None

    def after(self, when: float):
        return [r for r in self.rows if r[0] > when]

    def stop(self):
        self._stop.set()
        self._thread.join()


def rates(probe: Probe, start: float, end: float) -> tuple[float, float]:
    """(games/s, learnt steps/s) between two times, from league.db."""
    rows = [r for r in probe.rows if start <= r[0] <= end]
    if len(rows) < 2 or rows[-1][0] - rows[0][0] <= 0:
        return float("nan"), float("nan")
    dt = rows[-1][0] - rows[0][0]
    return (rows[-1][1] - rows[0][1]) / dt, (rows[-1][2] - rows[0][2]) / dt


class Faults:
    """What each fault does; `strike(kind)` returns (target, end time of the fault)."""

    def __init__(self, run_dir: str, mount: str | None):
        self.run_dir, self.mount = run_dir, mount
        self.at = time.time()   # when the last fault struck (a torn checkpoint waits for a write)

    def _kill(self, kind: str) -> str:
        pids = node_pids(kind, wait=TARGET_WAIT)
        if not pids:
            return f"no {kind} process found"
        _, pid = random.choice(pids)
        os.kill(pid, signal.SIGKILL)
        return f"{kind} pid {pid}"

    def strike(self, kind: str) -> str:
        self.at = time.time()
        if kind.startswith("kill_"):
            return self._kill(kind[len("kill_"):])
        if kind == "hang":
            candidates = node_pids(tuple(NODE_CLASSES), wait=TARGET_WAIT)
            if not candidates:
                return "no node process found"
            node, pid = random.choice(candidates)
            os.kill(pid, signal.SIGSTOP)
            threading.Timer(FLAGS.hang_seconds, lambda: _signal(pid, signal.SIGCONT)).start()
            return f"{node} pid {pid} stopped for {FLAGS.hang_seconds:.0f} s"
        if kind == "full_disk":
            filler = os.path.join(self.mount, "filler")
            # unbuffered, so no write is left for close to flush; a disk the run has already
            # filled (ENOSPC at the open or the first write) counts as filled
            try:
                with open(filler, "wb", buffering=0) as f:
                    while True:
                        f.write(b"\0" * (1 << 20))
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
            threading.Timer(FLAGS.full_seconds, lambda: os.path.exists(filler) and os.remove(filler)).start()
            return f"{self.mount} full for {FLAGS.full_seconds:.0f} s"
        if kind == "torn_checkpoint":
            pids = node_pids("learner", wait=TARGET_WAIT)
            if not pids:
                return "no learner process found"
            learners = os.path.join(self.run_dir, "learners")
            # a checkpoint write comes every checkpoint interval (30 s by default); unpaced, the
            # wait keeps to the schedule
            wait = 60.0 if FLAGS.paced else min(60.0, FLAGS.fault_every / 2)
            deadline, seen = time.time() + wait, None
            while time.time() < deadline and seen is None:
                for agent in os.listdir(learners) if os.path.isdir(learners) else []:
                    if any(".tmp." in f for f in os.listdir(os.path.join(learners, agent))):
                        seen = agent
                        break
                else:
                    time.sleep(0.002)
            self.at = time.time()
            for _, pid in node_pids("learner") or pids:
                _signal(pid, signal.SIGKILL)
            return (f"learners killed while {seen}'s checkpoint was being written" if seen
                    else f"learners killed (no checkpoint write seen within {wait:.0f} s)")
        if kind == "lock_db":
            con = sqlite3.connect(os.path.join(self.run_dir, "league.db"), timeout=30, isolation_level=None,
                                  check_same_thread=False)
            con.execute("BEGIN")
            con.execute("SELECT count(*) FROM games").fetchone()

            def release():
                con.execute("COMMIT")
                con.close()
            threading.Timer(FLAGS.hang_seconds, release).start()
            return f"league.db read transaction held {FLAGS.hang_seconds:.0f} s"
        raise app.UsageError(f"unknown fault {kind!r}; known: {', '.join(FLAGS['faults'].default)}")


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def make_filesystem(root: str) -> str | None:
    """A tmpfs of --disk_mb at root/fs (root only): the run directory's own small disk."""
    mount = os.path.join(root, "fs")
    os.makedirs(mount, exist_ok=True)
    if os.geteuid() != 0:
        return None
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FLAGS.disk_mb}m", "tmpfs", mount],
                          capture_output=True, text=True)
    return mount if done.returncode == 0 else None


def main(argv):
    del argv
    random.seed(FLAGS.seed)
    root = FLAGS.run_root or tempfile.mkdtemp(prefix="chaos_")
    mount = make_filesystem(root)
    faults = list(FLAGS.faults)
    if mount is None and "full_disk" in faults:
        faults.remove("full_disk")
        print("full_disk left out: making the run directory's own filesystem needs root (mount -t tmpfs)")
    base = mount or os.path.join(root, "fs")
    run_dir = os.path.join(base, "run")
    command = [sys.executable, "-m", "experiments.league", f"--game={FLAGS.game}", "--runner=ray",
               f"--run_dir={run_dir}", f"--experience={FLAGS.experience}", "--dashboard_port=-1",
               "--progress_every_seconds=5", *FLAGS.league_args]
    if FLAGS.game == "smax_races":
        command.append(f"--races={FLAGS.races}")
    if "kill_actor" in faults and FLAGS.experience != "replay":
        faults.remove("kill_actor")   # the device path has no actors
    print(f"chaos: {' '.join(command)}\n  run directory {run_dir} ({'tmpfs ' + str(FLAGS.disk_mb) + ' MB' if mount else 'no filesystem of its own'}); "
          f"faults {', '.join(faults)} every {FLAGS.fault_every:.0f} s from {FLAGS.first_fault:.0f} s", flush=True)
    started = time.time()
    league = League(command, started + FLAGS.minutes * 60, os.path.join(root, "league.log"))
    probe = Probe(os.path.join(run_dir, "league.db"))
    strikes = []
    # The first fault strikes once the league plays and learns (league.db has games and learner
    # steps: past start-up and compiles, which a busy machine slows), and not before --first_fault.
    while not any(r[1] > 0 and r[2] > 0 for r in probe.rows) and time.time() < started + FLAGS.minutes * 60:
        time.sleep(1.0)
    ready = time.time()
    print(f"[{(ready - started) / 60:5.1f} min] the league plays and learns", flush=True)
    when = max(started + FLAGS.first_fault, ready + 5.0)
    end = started + FLAGS.minutes * 60
    paced = FLAGS.paced and FLAGS.in_turn
    try:
        while when < end - FLAGS.fault_every / 2 and not (FLAGS.in_turn and len(strikes) == len(faults)):
            time.sleep(max(0.0, when - time.time()))
            kind = faults[len(strikes) % len(faults)] if FLAGS.in_turn else random.choice(faults)
            faults_now = Faults(run_dir, mount)
            target = faults_now.strike(kind)
            at = faults_now.at
            strikes.append((at, kind, target))
            print(f"[{(at - started) / 60:5.1f} min] fault: {kind}: {target}", flush=True)
            when += FLAGS.fault_every
            if paced:   # the next strikes once this one has recovered and was named
                settled = wait_settled(at, kind, league, probe, end)
                if settled is None:
                    break
                when = max(at + FLAGS.fault_every, settled + 5.0)
                print(f"[{(settled - started) / 60:5.1f} min] {kind} recovered after {settled - at:.0f} s", flush=True)
        if paced and strikes and len(strikes) == len(faults) and time.time() < end:
            time.sleep(max(0.0, min(end, time.time() + FLAGS.window) - time.time()))
            league.stop()
        league.wait()
    except KeyboardInterrupt:
        league.stop()
        league.wait()
    probe.stop()
    final = probe.read() or probe.rows[-1]
    rows = report(strikes, league, probe, final, started)
    print_table(rows, league, final, started)
    if mount:
        subprocess.run(["umount", "-l", mount], capture_output=True)
    if not FLAGS.run_root:
        shutil.rmtree(root, ignore_errors=True)


def failures_said(league: League, at: float, upto: float) -> list[tuple[float, str]]:
    """The league's terminal lines between two times that name a failure (progress lines left out)."""
    return [(t, ANSI.sub("", line)) for t, line in list(league.lines)
            if at < t < upto and FAILURE_WORDS.search(line) and not PROGRESS.match(line)]


def lasts(kind: str) -> float:
    """How long a fault of `kind` goes on after it strikes, in seconds."""
    return (FLAGS.hang_seconds if kind in ("hang", "lock_db") else
            FLAGS.full_seconds if kind == "full_disk" else 0.0)


def recovery(probe: Probe, at: float, duration: float, upto: float = float("inf")):
    """The league.db reading at which the league had recovered from a fault that struck at `at`
    and went on for `duration` seconds: from when it ended (plus STALE_SECONDS: league.db's
    readings lag the nodes), games grew above where they were at the fault, and the learners'
    steps grew, each from one reading to the next (not necessarily at the same reading: a slow
    league records its learners' steps every ~20 s). None if that did not happen before `upto`."""
    before = probe.at(at)
    if before is None:
        return None
    settle = at + duration + STALE_SECONDS
    later = [probe.at(settle), *(r for r in probe.after(settle) if r[0] < upto)]
    games = next((r for r, last in zip(later[1:], later) if r[1] > last[1] and r[1] > before[1]), None)
    steps = next((r for r, last in zip(later[1:], later) if r[2] > last[2]), None)
    return max(games, steps, key=lambda r: r[0]) if games and steps else None


def wait_settled(at: float, kind: str, league: League, probe: Probe, end: float) -> float | None:
    """Waits (for --paced) until the fault that struck at `at` has recovered and, if it fails
    something, was named; returns that time, or None at `end`."""
    while time.time() < end:
        recovered, said = recovery(probe, at, lasts(kind)), failures_said(league, at, time.time())
        if recovered and (kind in HARMLESS or said):
            return recovered[0] if kind in HARMLESS else max(recovered[0], said[0][0])
        time.sleep(1.0)
    return None


def report(strikes, league: League, probe: Probe, final, started: float) -> list[dict]:
    rows = []
    for i, (at, kind, target) in enumerate(strikes):
        upto = strikes[i + 1][0] if i + 1 < len(strikes) else float("inf")
        said = failures_said(league, at, upto)
        # what the league itself said (Ray's raylet line about a dead worker often comes first)
        own = [x for x in said if "(raylet)" not in x[1]]
        before = probe.at(at)
        # Before the fault after next at the latest (a slow league's recovery may outlast the
        # next fault's strike).
        recovered = recovery(probe, at, lasts(kind), upto + max(60.0, FLAGS.fault_every))
        restarted = any(at < t < (recovered[0] if recovered else upto) for t in league.starts)
        lost_players = sorted(before[3] - final[3]) if before else []
        # The learners' steps dip where a learner resumed from an older checkpoint: the lowest
        # reading between the fault and the recovery (a lower bound of what was lost).
        between = [r[2] for r in probe.after(at) if recovered and r[0] <= recovered[0]]
        steps_lost = max(0.0, before[2] - min(between)) if before and between else 0.0
        pre = rates(probe, at - FLAGS.window, at)
        post = rates(probe, recovered[0], recovered[0] + FLAGS.window) if recovered else (float("nan"),) * 2
        rows.append({
            "at": (at - started) / 60, "fault": kind, "target": target,
            "detected": said[0][0] - at if said else None, "said": (own or said)[0][1].strip()[:90] if said else "",
            "recovered": recovered[0] - at if recovered else None,
            "how": ("restarted" if restarted else "in run") if recovered else "not recovered",
            "games_lost": max(0, before[1] - final[1]) if before else 0,
            "snapshots_lost": len(lost_players), "steps_lost": steps_lost,
            "before": pre, "after": post,
        })
    return rows


def print_table(rows, league: League, final, started: float) -> None:
    print("\n| min | fault | target | detected after | what it said | recovered after | how | games lost | "
          "snapshots lost | learner steps lost | games/s before -> after | learnt steps/s before -> after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def s(x):
        return "-" if x is None else f"{x:.0f} s"
    for r in rows:
        print(f"| {r['at']:.1f} | {r['fault']} | {r['target']} | {s(r['detected'])} | {r['said'] or '-'} | "
              f"{s(r['recovered'])} | {r['how']} | {r['games_lost']} | {r['snapshots_lost']} | "
              f"{r['steps_lost']:.0f} | {r['before'][0]:.0f} -> {r['after'][0]:.0f} | "
              f"{r['before'][1]:.0f} -> {r['after'][1]:.0f} |")
    recovered = sum(r["how"] != "not recovered" for r in rows)
    in_run = sum(r["how"] == "in run" for r in rows)
    # A held read transaction fails nothing in WAL mode: there is nothing to name.
    to_name = [r for r in rows if r["fault"] not in HARMLESS]
    named = sum(r["detected"] is not None for r in to_name)
    print(f"\nthe league ran {(time.time() - started) / 60:.1f} min, started {len(league.starts)} time(s) "
          f"(exits: {', '.join(str(c) for _, c in league.exits) or 'none'}); league.db holds "
          f"{final[1]:,} games and {len(final[3])} players at the end")
    print(f"RESULT chaos faults={len(rows)} recovered={recovered} in_run={in_run} named={named} to_name={len(to_name)} "
          f"games_lost={sum(r['games_lost'] for r in rows)} snapshots_lost={sum(r['snapshots_lost'] for r in rows)} "
          f"ratio={recovered / max(1, len(rows)):.2f} target=1.0")


if __name__ == "__main__":
    app.run(main)
