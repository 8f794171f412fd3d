"""A league on a real multi-host Ray cluster on this machine, and the loss of one host mid-run.

    sudo python -m benchmarks.cluster --hosts=3 --minutes=5 --kill_host_after=120

Creates `--hosts` hosts as network namespaces (experiments/cluster_hosts.py: a bridge, a veth
pair per host, 10.77.0.<i>/24; host 0 runs `ray start --head` with the custom resources
`head` and `learner`, the others `ray start --address=10.77.0.1:6379` with `actor`), runs
`python -m experiments.league --ray_address=10.77.0.1:6379 ...` on the head, and
`--kill_host_after` seconds after the league's first progress line with games and learner
updates (the league fully running), kills every
process of the worker host that runs the most actor/evaluator nodes with `kill -9` (its raylet
and Ray workers: the host is gone). The league goes on with the remaining hosts: Ray restarts
the lost actors and evaluators there (learners and the coordinator are on the head).

Figures (from the league's progress lines, each stamped with the time it was read):
- games/s before: games counted between the first progress line with games and updates and the kill,
  over that time; after: games counted from the kill to the end, over that time (the
  restart of the lost nodes included);
- learner updates/s before/after: the mean of the progress lines' summed rate;
- lost_games: games the league had counted before the kill that league.db does not hold at
  the end (must be 0: nothing recorded is lost; games in flight on the killed host were never
  recorded and are not counted).
Checks printed: `league.db` only in the head's run directory (worker hosts see their own
disk mounted over the runs' parent: files there mean a worker wrote to a run directory),
every race pair played, snapshots and resets in league.db, the kill's "lost:" progress note.

Last line: `RESULT cluster games_per_s_before=<x> games_per_s_after=<y>
updates_per_s_before=<x> updates_per_s_after=<y> lost_games=<n>`.

The default league is the 3-race SMAX league made small for a shared 2-core machine
(`FAST_SMAX`: network 16 wide, actor batch 8, learner batch 8, unroll 8, one league exploiter
per race, snapshots every 1,000 steps, actors grouped per race); `--game=matrix_rps` is the
quick one tests use. Needs root (network namespaces).
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from absl import app, flags

from experiments.cluster_hosts import NamespaceCluster, available

PROGRESS = re.compile(r"\] players (\d+) \((\d+) frozen\)\s+games (\d+) \(([\d.]+)/s\)\s+learner updates ([\d.]+)/s")
HOSTS_LINE = re.compile(r"^hosts: (.*)$")

# SMAX, 3 races, small enough for a shared 2-core machine.
FAST_SMAX = ["--races=3", "--init=none", "--hidden_size=16", "--core_size=16", "--batch_size=8",
             "--learner_batch_size=8", "--unroll_length=8", "--learner.replay.max_size=64",
             "--league_exploiters_per_race=1", "--actor.episodes_per_match=8",
             "--main_agent_snapshot_steps=1000", "--exploiter_min_steps=1000",
             "--league.snapshots.main_exploiter_timeout_steps=2000", "--league.snapshots.league_exploiter_timeout_steps=1000",
             "--evaluation_games=8", "--actor_groups=race", "--learner_groups=all"]
# The matrix game: seconds to compile; one actor node per agent, so every host has some.
FAST_MATRIX = ["--batch_size=16", "--learner_batch_size=8", "--unroll_length=8",
               "--hidden_size=16", "--core_size=16", "--learner.replay.max_size=256", "--actor.episodes_per_match=16",
               "--main_agent_snapshot_steps=300", "--exploiter_min_steps=300",
               "--league.snapshots.main_exploiter_timeout_steps=600", "--league.snapshots.league_exploiter_timeout_steps=300",
               "--evaluation_games=8", "--actor_groups=agent", "--learner_groups=all"]
COMMON = ["--experience=replay",  # actors on the worker hosts: the path this demonstrates
          "--dashboard_port=-1", "--progress_every_seconds=10", "--meta_game_every_seconds=5",
          "--checkpoint_every_seconds=30", "--param_refresh_seconds=2"]


def league_args(game: str, minutes: float, address: str, run_dir: str, extra: list[str]) -> list[str]:
    fast = FAST_SMAX if game == "smax_races" else FAST_MATRIX
    return [sys.executable, "-u", "-m", "experiments.league", f"--game={game}", "--runner=ray",
            f"--ray_address={address}", f"--run_dir={run_dir}", f"--minutes={minutes}",
            *fast, *COMMON, *extra]


def run_cluster(hosts: int = 3, minutes: float = 5.0, kill_host_after: float = 120.0,
                game: str = "smax_races", extra: list[str] | None = None, root: str | None = None,
                out=sys.stdout) -> dict:
    """Runs the league on a namespace cluster, kills a worker host mid-run; returns the
    figures and checks (see the module docstring). Tears the cluster down whatever happens."""
    if hosts < 2:
        raise ValueError("--hosts must be at least 2 (the head and a worker to kill)")
    root = root or tempfile.mkdtemp(prefix="lgcluster_")
    started = time.time()

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    with NamespaceCluster(hosts=hosts, root=root, log=say) as cluster:
        say(f"cluster: {hosts} hosts {', '.join(cluster.addresses)} up in {time.time() - started:.0f} s "
            f"(head {cluster.address}; root {root})")
        run_dir = os.path.join(cluster.runs, "league")
        args = league_args(game, minutes, cluster.address, run_dir, extra or [])
        say("league: " + " ".join(args[2:]))
        league = cluster.popen_on(0, args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  bufsize=1, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        lines: list[tuple[float, str]] = []
        progress: list[tuple[float, int, float]] = []  # (time, games, updates/s)
        node_hosts: dict[str, str] = {}
        first_games = [None]

        def read():
            for line in league.stdout:
                now = time.time()
                lines.append((now, line.rstrip()))
                say("  | " + line.rstrip())
                m = PROGRESS.search(line)
                if m:
                    progress.append((now, int(m.group(3)), float(m.group(5))))
                    if first_games[0] is None and int(m.group(3)) > 0 and float(m.group(5)) > 0:
                        first_games[0] = now
                h = HOSTS_LINE.match(line.strip())
                if h:
                    for part in h.group(1).split(", "):
                        name, _, ip = part.rpartition(" ")
                        node_hosts[name] = ip

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        kill_time = killed_host = None
        games_before_kill = 0
        deadline = time.time() + minutes * 60 + 600  # startup and shutdown
        try:
            while league.poll() is None and time.time() < deadline:
                if (kill_time is None and first_games[0] is not None
                        and time.time() - first_games[0] >= kill_host_after):
                    killed_host = victim(cluster, node_hosts)
                    games_before_kill = progress[-1][1] if progress else 0
                    kill_time = time.time()
                    pids = cluster.kill_host(killed_host)
                    say(f"KILLED host {killed_host} ({cluster.addresses[killed_host]}, running "
                        f"{', '.join(n for n, ip in node_hosts.items() if ip == cluster.addresses[killed_host]) or 'nothing'}): "
                        f"kill -9 of {len(pids)} processes")
                time.sleep(1)
            if league.poll() is None:
                league.kill()
                raise RuntimeError("the league did not finish in time")
        finally:
            if league.poll() is None:
                league.kill()
            league.wait()
            reader.join(timeout=10)
        worker_files = cluster.files_written_by_workers()
        db = os.path.join(run_dir, "league.db")
        result = figures(progress, kill_time, games_before_kill, db)
        result.update(
            returncode=league.returncode, killed_host=killed_host, kill_time=kill_time,
            worker_files=worker_files, cluster_name=cluster.name, league_db_on_head=os.path.exists(db), run_dir=run_dir,
            output="\n".join(line for _, line in lines),
            lost_note=[line for t, line in lines if kill_time and t > kill_time and "lost:" in line],
        )
    result["namespaces_left"] = [n for n in cluster.namespaces + [cluster.switch] if _namespace_exists(n)]
    report(result, say)
    return result


def victim(cluster: NamespaceCluster, node_hosts: dict[str, str]) -> int:
    """The worker host running the most actor/evaluator nodes (the last worker if unknown)."""
    counts = {h: sum(ip == cluster.addresses[h] for n, ip in node_hosts.items()
                     if n.startswith(("actors", "evaluator"))) for h in range(1, cluster.hosts)}
    return max(counts, key=lambda h: (counts[h], h))


def figures(progress: list[tuple[float, int, float]], kill_time: float | None,
            games_before_kill: int, db: str) -> dict:
    result: dict = {"games_per_s_before": 0.0, "games_per_s_after": 0.0,
                    "updates_per_s_before": 0.0, "updates_per_s_after": 0.0, "lost_games": -1}
    playing = [p for p in progress if p[1] > 0 and p[2] > 0]
    if kill_time is not None and playing:
        before = [p for p in playing if p[0] <= kill_time]
        after = [p for p in progress if p[0] > kill_time]
        if len(before) >= 2:
            result["games_per_s_before"] = (before[-1][1] - before[0][1]) / (before[-1][0] - before[0][0])
            result["updates_per_s_before"] = sum(p[2] for p in before[1:]) / len(before[1:])
        if after and before:
            result["games_per_s_after"] = (after[-1][1] - before[-1][1]) / (after[-1][0] - before[-1][0])
            result["updates_per_s_after"] = sum(p[2] for p in after) / len(after)
    if os.path.exists(db):
        from coordinator.history import LeagueHistory

        history = LeagueHistory(db, readonly=True)
        rows = history.result_rows()   # single games and counted ones alike
        result["games_total"] = sum(r["games"] for r in rows)
        if kill_time is not None:
            upto = sum(r["games"] for r in rows if r["time"] <= kill_time)
            result["lost_games"] = max(0, games_before_kill - upto)
            result["games_after_kill"] = result["games_total"] - upto
        result["race_pairs"] = {}
        for r in rows:
            a, b = r["home_race"] or "-", r["away_race"] or "-"
            key = f"{min(a, b)}-{max(a, b)}"
            result["race_pairs"][key] = result["race_pairs"].get(key, 0) + r["games"]
        result["events"] = dict(collections.Counter(e["kind"] for e in history.events()))
        history.close()
    return result


def _namespace_exists(name: str) -> bool:
    return os.path.exists(f"/run/netns/{name}")


def report(r: dict, say) -> None:
    say(f"league exit code {r['returncode']}; killed host {r['killed_host']}; "
        f"games in league.db {r.get('games_total')} ({r.get('games_after_kill')} after the kill)")
    say(f"race pairs: {r.get('race_pairs')}; events: {r.get('events')}")
    say(f"lost note after the kill: {r['lost_note'][-1].strip() if r['lost_note'] else 'NONE'}")
    say(f"league.db on the head: {r['league_db_on_head']}; files written by worker hosts under the "
        f"run directories: {r['worker_files'] or 'none'}; namespaces left: {r['namespaces_left'] or 'none'}")
    say(f"RESULT cluster games_per_s_before={r['games_per_s_before']:.2f} "
        f"games_per_s_after={r['games_per_s_after']:.2f} "
        f"updates_per_s_before={r['updates_per_s_before']:.2f} "
        f"updates_per_s_after={r['updates_per_s_after']:.2f} lost_games={r['lost_games']}")


FLAGS = flags.FLAGS
flags.DEFINE_integer("hosts", 3, "Hosts (network namespaces): the head and hosts-1 workers.")
flags.DEFINE_float("minutes", 5.0, "The league's --minutes.")
flags.DEFINE_float("kill_host_after", 120.0, "Seconds after the league's first games and learner updates to kill a worker host.")
flags.DEFINE_string("game", "smax_races", "smax_races (3 races, FAST_SMAX) or matrix_rps (FAST_MATRIX).")
flags.DEFINE_list("extra", [], "More league flags, e.g. --extra=--evaluators=2.")
flags.DEFINE_string("root", None, "Directory for the run, Ray's logs and the hosts' disks (default: a temp dir).")


def main(argv) -> int:
    problem = available()
    if problem:
        print(f"error: a namespace cluster {problem}", file=sys.stderr)
        return 2
    result = run_cluster(FLAGS.hosts, FLAGS.minutes, FLAGS.kill_host_after, FLAGS.game, FLAGS.extra, FLAGS.root)
    ok = (result["returncode"] == 0 and result["league_db_on_head"] and not result["worker_files"]
          and result["lost_games"] == 0 and result.get("games_after_kill", 0) > 0)
    return 0 if ok else 1


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
