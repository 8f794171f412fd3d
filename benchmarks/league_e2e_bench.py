"""End-to-end speed: env steps learned from per second through the whole program, vs the limit.

One learning agent (the first race's main agent; no exploiters, no evaluators) with one actor,
in one run:
- limit: a single-process loop that plays and learns with the program's network, actor batch,
  learner batch, unroll length and sample reuse: the actor's own code (for SMAX its fused
  jitted env+policy `lax.scan`) produces each batch of unrolls and the learner's jitted update
  consumes it right away (`samples_per_insert` updates' worth per item), alternating on one
  thread; no Reverb, no Ray. Built and compiled while the program starts up (the program's
  window begins only after that), timed twice after the program has stopped (the machine is
  shared: the mean of the two is the limit). Also timed alone, in between: play only and learn
  only, which say which half bounds the loop;
- e2e: `experiments.launchers.run_ray` with the coordinator, a Reverb table, the learner group
  and the actor group as Ray actors. Rate = the learner's "steps" (agent steps learnt from,
  B x (T - 1) per update, replays included) over a steady window after the learner's first
  update, read from the run's `league.db` (`learner_metrics`, written every few seconds);
  the same records give the actor's insert rate, sample reuse and staleness;
- `request_match` latency from 100 concurrent requester threads, to a Ray-actor coordinator
  (as `run_ray` builds it) and to an in-process one, on the full 3-race league.

    python -m benchmarks.league_e2e_bench [--game=smax_races|kuhn_poker] [--window=50]

Last line: `RESULT e2e ratio=<e2e / limit> target=0.5`.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import threading
import time

import numpy as np
from absl import app, flags

from agents.trajectory import batch_size, concat, take
from experiments.config import RunConfig

FLAGS = flags.FLAGS
flags.DEFINE_enum("game", "smax_races", ["smax_races", "kuhn_poker"], "The game.")
flags.DEFINE_float("limit_seconds", 15.0, "Seconds timed for each limit measurement.")
flags.DEFINE_float("part_seconds", 6.0, "Seconds timed for play-only and learn-only.")
flags.DEFINE_float("warmup", 10.0, "Seconds after the learner's first update before the window.")
flags.DEFINE_float("window", 50.0, "Seconds of the steady end-to-end window.")
flags.DEFINE_float("max_startup", 300.0, "Give up if the window has not started by then (s).")
flags.DEFINE_integer("requesters", 100, "Concurrent request_match callers.")
flags.DEFINE_integer("requests", 40, "request_match calls per requester.")
# The program's own defaults unless set (RunConfig); the limit uses the same values.
flags.DEFINE_integer("batch_size", None, "Games per actor (default: RunConfig's).")
flags.DEFINE_integer("learner_batch_size", None, "Unrolls per update (default: RunConfig's).")
flags.DEFINE_integer("unroll_length", None, "T (default: RunConfig's).")
flags.DEFINE_float("samples_per_insert", None, "Replay ratio (default: RunConfig's).")
flags.DEFINE_float("param_refresh_seconds", None, "Actor refresh period (default: RunConfig's).")


def e2e_config(run_dir: str) -> RunConfig:
    paths = {"batch_size": "actor.batch_size", "learner_batch_size": "learner.batch_size",
             "unroll_length": "learner.unroll_length", "samples_per_insert": "learner.replay.samples_per_insert",
             "param_refresh_seconds": "actor.param_refresh_seconds"}
    overrides = {path: getattr(FLAGS, name) for name, path in paths.items() if getattr(FLAGS, name) is not None}
    return RunConfig.make(game=FLAGS.game, races=1, runner="ray", run_dir=run_dir,
                     main_exploiters_per_race=0, league_exploiters_per_race=0, evaluators=0,
                     dashboard_port=-1, progress_every_seconds=3.0, experience="replay",
                     **overrides)   # the replay path: actors, Reverb and the learner across processes


# -- the limit: play and learn alternately in this process ------------------------------


class _SelfPlay:
    """Match source of the limit: always the agent against itself; results are dropped."""

    def __init__(self, agent_id: str, race: str):
        self.agent_id, self.race = agent_id, race

    def request_match(self, agent_id):
        return {"opponent_id": agent_id, "branch": "bench", "home_race": self.race,
                "away_race": self.race}

    def report_results(self, results):
        return len(results)


class _FixedParams:
    def __init__(self, params):
        self.params = params

    def latest_params(self, player_id, min_version=None):
        return None if min_version is not None else (0, self.params)


class _InlineLearner:
    """Stands in for the actor's Reverb writer: each batch of unrolls the actor hands over is
    learnt from at once, `samples_per_insert` updates' worth per item (items drawn uniformly
    from the latest max(actor batch, learner batch) unrolls, as the replay table would)."""

    def __init__(self, learner, batch_size: int, samples_per_insert: float, learn: bool = True):
        import jax

        self._tree_map = jax.tree_util.tree_map
        self.learner, self.batch_size, self.spi, self.learn = learner, batch_size, samples_per_insert, learn
        self.pool = None
        self.credit = 0.0
        self.updates = 0
        self.rng = np.random.default_rng(0)
        self.items_written = 0

    def put(self, batch, stop):
        n = batch_size(batch)
        self.items_written += n
        if not self.learn:
            return
        if self.pool is None or n >= self.batch_size:
            self.pool = batch
        else:
            keep = self.batch_size
            both = concat(self.pool, batch)
            self.pool = take(both, np.arange(batch_size(both))[-keep:])
        size = batch_size(self.pool)
        if size < self.batch_size:
            return
        self.credit += self.spi * n / self.batch_size
        while self.credit >= 1.0:
            idx = self.rng.choice(size, self.batch_size, replace=False)
            self.learner.learn_from_batch(take(self.pool, idx))
            self.credit -= 1.0
            self.updates += 1

    def close(self, timeout: float = 0.0):
        pass


class Limit:
    """The program's game, network, initial parameters, actor and learner, in this process."""

    def __init__(self, config: RunConfig):
        from actors.actor import Actor, ActorConfig, example_unroll
        from experiments import build
        from experiments.program import agent_indices
        from learners.learner import Learner, LearnerConfig

        self.config = config
        agent = next(iter(agent_indices(config)))
        game = build.make_game(config, config.actor.batch_size)
        self.network = build.make_network(config, game.spec)
        params = build.initial_params(self.network, game.spec, 0, config.seed)
        example = example_unroll(game.spec, self.network, config.learner.unroll_length)
        self.learner = Learner(self.network, params, LearnerConfig(
            batch_size=config.learner.batch_size, unroll_length=config.learner.unroll_length,
            learning_rate=config.learner.learning_rate), example)
        self.actor = Actor("limit", agent, game, self.network,
                           _SelfPlay(agent, config.race_names[0]), _FixedParams(params), None,
                           agent, ActorConfig(unroll_length=config.learner.unroll_length,
                                              episodes_per_match=config.actor.episodes_per_match,
                                              param_refresh_seconds=3600.0,
                                              reward_plugin=config.reward))
        self.inline = _InlineLearner(self.learner, config.learner.batch_size,
                                     config.learner.replay.samples_per_insert)
        self.actor._writer = self.inline  # the actor hands its unrolls straight to the learner
        self.steps_per_update = config.learner.batch_size * (config.learner.unroll_length - 1)
        self.actor.run(num_steps=3 * config.learner.unroll_length)  # compile both, fill the pool
        self.learner.version()

    def _timed(self, seconds: float, learn: bool = True) -> tuple[float, float]:
        """(learnt steps/s, env steps/s) of the alternating loop."""
        self.inline.learn = learn
        u0, e0 = self.inline.updates, self.actor.metrics()["env_steps"]
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            self.actor.run(num_steps=self.config.learner.unroll_length - 1)
        self.learner.version()  # waits for the last update
        elapsed = time.perf_counter() - start
        self.inline.learn = True
        return ((self.inline.updates - u0) * self.steps_per_update / elapsed,
                (self.actor.metrics()["env_steps"] - e0) / elapsed)

    def rate(self, seconds: float) -> tuple[float, float]:
        return self._timed(seconds)

    def play_only(self, seconds: float) -> float:
        return self._timed(seconds, learn=False)[1]

    def learn_only(self, seconds: float) -> float:
        import jax

        batch = take(self.inline.pool, np.arange(self.config.learner.batch_size))
        batch = jax.device_put(batch, self.learner._batch_sharding)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(4):
                self.learner.learn_from_batch(batch)
            self.learner.version()
            n += 4
        return n * self.steps_per_update / (time.perf_counter() - start)


# -- the program on Ray ----------------------------------------------------------------


def _series(db_path: str) -> dict[str, list[tuple[float, float]]]:
    """learner_metrics of the (one) learner: name -> [(time, value)] in time order."""
    if not os.path.exists(db_path):
        return {}
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5.0) as db:
            rows = db.execute("SELECT time, name, value FROM learner_metrics ORDER BY time, id").fetchall()
    except sqlite3.Error:
        return {}
    out: dict[str, list[tuple[float, float]]] = {}
    for t, name, value in rows:
        out.setdefault(name, []).append((float(t), float(value)))
    return out


def _first_update_time(series) -> float | None:
    for t, v in series.get("steps", []):
        if v > 0:
            return t
    return None


def run_e2e(config: RunConfig, out, quiet_after: threading.Event) -> dict:
    """Runs the program on Ray until the steady window is over; returns its figures. The
    window starts `--warmup` s after the learner's first update, and not before `quiet_after`
    is set (this process's own work, building the limit, is done by then)."""
    from experiments.launchers import run_ray

    db_path = os.path.join(config.run_dir, "league.db")
    stop = threading.Event()
    started = time.time()
    marks: dict[str, float] = {}

    def watch():
        while not stop.wait(1.0):
            first = _first_update_time(_series(db_path))
            if first is None or not quiet_after.is_set():
                if time.time() - started > FLAGS.max_startup:
                    stop.set()
                continue
            marks.setdefault("quiet", time.time())
            begin = max(first + FLAGS.warmup, marks["quiet"] + 2.0)
            marks["begin"] = begin
            if time.time() >= begin + FLAGS.window + 1.0:
                marks["done"] = time.time()
                stop.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run_ray(config, stop_event=stop, out=out)
    except Exception as e:  # a node lost while shutting down: the window's records are kept
        if "done" not in marks:
            raise
        print(f"warning: the program failed while shutting down ({type(e).__name__}); "
              "its figures were recorded before that", flush=True)
    stop.set()
    watcher.join()
    series = _series(db_path)
    first = _first_update_time(series)
    if first is None or "begin" not in marks:
        raise RuntimeError(f"the learner made no update within {FLAGS.max_startup} s of starting")
    begin = marks["begin"]

    def window(name):
        points = [(t, v) for t, v in series.get(name, []) if t >= begin]
        if len(points) < 2:
            raise RuntimeError(f"fewer than two records of {name!r} in the window; pass a longer --window")
        return points[0], points[-1]

    (t0, s0), (t1, s1) = window("steps")
    (_, i0), (_, i1) = window("samples_inserted")
    (_, c0), (_, c1) = window("samples_consumed")
    staleness = [v for t, v in series.get("staleness_mean", []) if begin <= t <= t1]
    upd = [v for t, v in series.get("updates_per_second", []) if begin <= t <= t1]
    table = [v for t, v in series.get("table_size", []) if begin <= t <= t1]
    seconds = t1 - t0
    return {
        "startup_s": first - started,
        "window_s": seconds,
        "steps_per_s": (s1 - s0) / seconds if seconds > 0 else float("nan"),
        "inserted_items_per_s": (i1 - i0) / seconds if seconds > 0 else float("nan"),
        "sample_reuse": (c1 - c0) / (i1 - i0) if i1 > i0 else float("nan"),
        "staleness_mean": float(np.mean(staleness)) if staleness else float("nan"),
        "updates_per_s": float(np.mean(upd)) if upd else float("nan"),
        "table_size": float(np.mean(table)) if table else float("nan"),
    }


# -- request_match latency -------------------------------------------------------------


def request_latencies(call, agents: list[str], requesters: int, requests: int) -> tuple[np.ndarray, float]:
    """Per-call latencies (s) of `call(agent)` from `requesters` threads started together,
    and the total calls per second."""
    barrier = threading.Barrier(requesters + 1)
    latencies = [[] for _ in range(requesters)]

    def worker(k):
        barrier.wait()
        for i in range(requests):
            agent = agents[(k + i) % len(agents)]
            t = time.perf_counter()
            call(agent)
            latencies[k].append(time.perf_counter() - t)

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(requesters)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    return np.concatenate([np.asarray(x) for x in latencies]), requesters * requests / elapsed


def coordinator_latency(root: str) -> dict[str, tuple[float, float, float]]:
    """{"inprocess": (p50 ms, p99 ms, calls/s), "ray": ..., "ray, 1 requester": ...} on the
    full 3-race league (12 learning agents)."""
    import ray

    from coordinator.coordinator import Coordinator
    from experiments.program import agent_indices, build_program

    league = RunConfig(run_dir=os.path.join(root, "latency"), races=3)
    agents = list(agent_indices(league))
    coordinator_config = build_program(league).node("coordinator").kwargs["config"]
    local = Coordinator(league.league, os.path.join(root, "latency_local"), 0,
                        config=coordinator_config)
    out = {}
    for _ in range(2):  # warm up both (SQLite, code paths)
        local.request_match(agents[0])
    lat, rate = request_latencies(local.request_match, agents, FLAGS.requesters, FLAGS.requests)
    out["inprocess"] = (np.percentile(lat, 50) * 1e3, np.percentile(lat, 99) * 1e3, rate)
    local.close()

    # As run_ray builds it: max_concurrency=64, num_cpus=0.
    remote = ray.remote(max_concurrency=64, num_cpus=0)(Coordinator).remote(
        league.league, league.run_dir, 0, config=coordinator_config)
    for _ in range(5):
        ray.get(remote.request_match.remote(agents[0]))
    def call(agent):
        return ray.get(remote.request_match.remote(agent))

    lat, rate = request_latencies(call, agents, 1, 200)  # unloaded: the round trip alone
    out["ray, 1 requester"] = (np.percentile(lat, 50) * 1e3, np.percentile(lat, 99) * 1e3, rate)
    lat, rate = request_latencies(call, agents, FLAGS.requesters, FLAGS.requests)
    out["ray"] = (np.percentile(lat, 50) * 1e3, np.percentile(lat, 99) * 1e3, rate)
    ray.get(remote.close.remote())
    ray.kill(remote)
    return out


def _load() -> str:
    try:
        one, five, _ = os.getloadavg()
        return f"load average {one:.1f} (1 min) {five:.1f} (5 min)"
    except OSError:
        return "load average ?"


class _Log:
    """The program's progress lines, kept out of the figures but available on failure."""

    def __init__(self):
        self.lines: list[str] = []

    def write(self, text):
        self.lines.append(text)

    def flush(self):
        pass


def main(argv):
    del argv
    import jax
    import ray

    began = time.perf_counter()
    root = tempfile.mkdtemp(prefix="league_e2e_bench_")
    config = e2e_config(os.path.join(root, "run"))
    print(f"game={config.game} actor batch={config.actor.batch_size} learner batch="
          f"{config.learner.batch_size} T={config.learner.unroll_length} samples_per_insert="
          f"{config.learner.replay.samples_per_insert} refresh={config.actor.param_refresh_seconds}s "
          f"hidden={config.network.hidden_size} core={config.network.core_size} devices={jax.devices()}  "
          f"({os.cpu_count()} cores, {_load()})", flush=True)

    # The limit is built (and compiled) on a thread while the program starts up on Ray; the
    # program's steady window starts only after that, and the limit is timed after the program.
    built = threading.Event()
    holder: dict = {}

    def build():
        t = time.perf_counter()
        try:
            holder["limit"] = Limit(config)
            holder["seconds"] = time.perf_counter() - t
        except BaseException as e:  # surfaced below
            holder["error"] = e
        finally:
            built.set()

    builder = threading.Thread(target=build, daemon=True)
    builder.start()
    log = _Log()
    try:
        e2e = run_e2e(config, log, built)  # starts Ray as the program does; shuts it down
    except Exception:
        print("".join(log.lines))
        raise
    print(f"e2e (Ray): {e2e['steps_per_s']:8.0f} learnt steps/s over {e2e['window_s']:.0f} s "
          f"(first update {e2e['startup_s']:.0f} s after start)  ({_load()})", flush=True)
    builder.join()
    if "error" in holder:
        raise holder["error"]
    limit = holder["limit"]
    print(f"limit built and compiled in {holder['seconds']:.0f} s (during the program's start)",
          flush=True)
    before, env_before = limit.rate(FLAGS.limit_seconds)
    play = limit.play_only(FLAGS.part_seconds)
    learn = limit.learn_only(FLAGS.part_seconds)
    after, env_after = limit.rate(FLAGS.limit_seconds)
    print(f"limit: {before:.0f} then {after:.0f} learnt steps/s ({env_before:.0f}, {env_after:.0f} "
          f"env steps/s); play only {play:.0f} env steps/s; learn only {learn:.0f} learnt "
          f"steps/s  ({_load()})", flush=True)

    ray.init(_node_ip_address="127.0.0.1", num_cpus=max(os.cpu_count() or 2, 8),
             include_dashboard=False, logging_level="ERROR", log_to_driver=True)
    try:
        latency = coordinator_latency(root)
    finally:
        ray.shutdown()
    for name, (p50, p99, rate) in latency.items():
        print(f"request_match {name:17s}: p50 {p50:7.2f} ms  "
              f"p99 {p99:7.2f} ms  ({rate:.0f} calls/s)", flush=True)

    limit_rate = (before + after) / 2
    ratio = e2e["steps_per_s"] / limit_rate
    T = config.learner.unroll_length
    produced = e2e["inserted_items_per_s"] * (T - 1)
    print()
    print("| what | figure |")
    print("|---|---|")
    print(f"| limit: play+learn alternating, one process (two timings / mean) | "
          f"{before:.0f} / {after:.0f} / {limit_rate:.0f} learnt steps/s |")
    print(f"| limit parts: play only / learn only | {play:.0f} env steps/s / {learn:.0f} learnt steps/s |")
    print(f"| e2e on Ray: learnt steps/s (steady window) | {e2e['steps_per_s']:.0f} |")
    print(f"| e2e on Ray: actor env steps written/s (Reverb inserts x (T-1)) | {produced:.0f} |")
    print(f"| e2e on Ray: updates/s, sample reuse, staleness, table size | "
          f"{e2e['updates_per_s']:.2f}, {e2e['sample_reuse']:.2f}, "
          f"{e2e['staleness_mean']:.1f} versions, {e2e['table_size']:.0f} items |")
    for name, (p50, p99, rate) in latency.items():
        who = name if "1 requester" in name else f"{name}, {FLAGS.requesters} concurrent requesters"
        print(f"| request_match, {who}: p50 / p99 | "
              f"{p50:.2f} / {p99:.2f} ms ({rate:.0f} calls/s) |")
    print(f"| ratio e2e / limit | {ratio:.2f} |")
    print(f"(total {time.perf_counter() - began:.0f} s; {_load()})")
    print(f"RESULT e2e ratio={ratio:.2f} target=0.5")


if __name__ == "__main__":
    app.run(main)
