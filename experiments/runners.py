"""Runners: launch the same graph of nodes in one process (`inprocess`) or on Ray (`ray`).

The graph, from one RunConfig (Acme's make_distributed_experiment, in small):
    coordinator                       league state, SQLite history, parameter store
    learner group(s)                  one learner per learning agent + their Reverb tables
    actor group(s)                    `actors_per_learner` actors per learning agent
    evaluators                        fill the payoff matrix for pairs with few games
The driver supervises: polls the coordinator (snapshots, resets), records learner metrics,
prints progress, stops on --minutes / --learner_steps / Ctrl-C, and restarts actor groups
that died (Ray restarts their process; the driver resubmits their work).
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from coordinator.coordinator import Coordinator, CoordinatorConfig
from experiments.config import RunConfig
from experiments.nodes import ActorGroup, EvaluatorNode, LearnerGroup, LearnerHandle, local
from league.players import learning_agents


@dataclasses.dataclass
class Plan:
    agents: list[str]
    agent_indices: dict[str, int]
    actor_assignments: list[tuple[str, str]]


def plan(config: RunConfig) -> Plan:
    agents = [p.player_id for p in learning_agents(config.league_config())]
    return Plan(
        agents=agents,
        agent_indices={a: i for i, a in enumerate(agents)},
        actor_assignments=[(f"actor_{a}_{k}", a) for a in agents for k in range(config.actors_per_learner)],
    )


def coordinator_config(config: RunConfig) -> CoordinatorConfig:
    return CoordinatorConfig(meta_game_every_seconds=config.meta_game_every_seconds,
                             checkpoint_every_seconds=config.checkpoint_every_seconds)


def per_learner_summary(metrics: dict) -> dict:
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


class Supervisor:
    """The driver's loop: poll, record, print, stop."""

    def __init__(self, config: RunConfig, coordinator, learner_metrics: Callable[[], dict], out=sys.stdout):
        self.config = config
        self.coordinator = local(coordinator)
        self.learner_metrics = learner_metrics
        self.out = out
        self.stop_event = threading.Event()
        self._tensorboard = None
        self.events: list[dict] = []
        self.started = time.time()

    def _write_tensorboard(self, metrics: dict, step: int) -> None:
        try:
            if self._tensorboard is None:
                from tensorboardX import SummaryWriter

                self._tensorboard = SummaryWriter(os.path.join(self.config.run_dir, "tensorboard"))
            for agent, values in metrics.items():
                for name, value in values.items():
                    if isinstance(value, int | float) and math.isfinite(value):
                        self._tensorboard.add_scalar(f"{agent}/{name}", value, int(values.get("steps", step)))
            self._tensorboard.flush()
        except Exception as e:  # TensorBoard is a convenience; never stop a league for it
            print(f"warning: TensorBoard writing failed: {e}", file=self.out)

    def report(self, elapsed: float) -> dict:
        metrics = self.learner_metrics()
        for agent, values in metrics.items():
            self.coordinator.record_learner_metrics(agent, per_learner_summary(values))
        self._write_tensorboard(metrics, int(elapsed))
        summary = self.coordinator.summary()
        updates = sum(m.get("updates_per_second", 0.0) for m in metrics.values())
        vs = "  ".join(f"{a.split('_main_agent')[0]} {w:.2f}" for a, w in summary["main_win_rate_vs_league"].items())
        print(
            f"[{elapsed / 60:5.1f} min] players {summary['players']} ({summary['historical']} frozen)  "
            f"games {summary['games']} ({summary['games_per_second']:.1f}/s)  learner updates {updates:.1f}/s  "
            f"main agents' win rate vs league: {vs or '-'}",
            file=self.out, flush=True,
        )
        return {"summary": summary, "learners": metrics}

    def done(self, start: float, metrics: dict | None) -> str | None:
        if self.stop_event.is_set():
            return "stopped"
        if self.config.minutes and time.time() - start >= self.config.minutes * 60:
            return f"--minutes={self.config.minutes} reached"
        if self.config.learner_steps and metrics:
            steps = [m.get("steps", 0) for m in metrics["learners"].values()]
            if steps and min(steps) >= self.config.learner_steps:
                return f"--learner_steps={self.config.learner_steps} reached by every learner"
        return None

    def loop(self, check_nodes: Callable[[], None] = lambda: None) -> str:
        start, last_report, metrics = self.started, 0.0, None
        while True:
            for event in self.coordinator.poll():
                self.events.append(event)
                what = f"{event['agent_id']} -> {event['player_id']} ({event['reason']})" if event["kind"] == "snapshot" else event["agent_id"]
                print(f"  {event['kind']}: {what}", file=self.out, flush=True)
            check_nodes()
            now = time.time()
            if now - last_report >= self.config.progress_every_seconds:
                metrics = self.report(now - start)
                last_report = now
            reason = self.done(start, metrics)
            if reason:
                return reason
            self.stop_event.wait(0.5)

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()


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


def _start_dashboard(config: RunConfig):
    if config.dashboard_port < 0:
        return None
    try:
        from experiments.dashboard import serve
    except ImportError:
        return None
    _, url = serve(config.run_dir, config.dashboard_port)
    print(f"dashboard: {url}", flush=True)
    return url


def _shut_down(steps, out) -> None:
    """Runs every shutdown step even if an earlier one fails, so checkpoints get written."""
    for what, step in steps:
        try:
            step()
        except Exception as e:
            print(f"warning: {what} failed ({type(e).__name__}: {e})", file=out, flush=True)


def run_inprocess(config: RunConfig, stop_event: threading.Event | None = None, out=sys.stdout) -> Supervisor:
    """Every node in this process, each running on its own thread."""
    p = plan(config)
    coordinator = Coordinator(config.league_config(), config.run_dir, config.seed, config=coordinator_config(config))
    print(f"building {len(p.agents)} learners ...", file=out, flush=True)
    group = LearnerGroup(config, p.agents, p.agent_indices)
    coordinator.set_learners({a: LearnerHandle(group, a) for a in p.agents})
    for a in p.agents:
        coordinator.store_initial_params(a, group.initial_params(a))
    groups = dict.fromkeys(p.agents, group)
    addresses = dict.fromkeys(p.agents, group.reverb_address())
    print(f"building {len(p.actor_assignments)} actors and {config.evaluators} evaluator(s) ...", file=out, flush=True)
    actors = ActorGroup(config, p.actor_assignments, coordinator, groups, addresses)
    evaluators = [EvaluatorNode(config, coordinator, groups, f"evaluator_{i}") for i in range(config.evaluators)]
    nodes = [group, actors, *evaluators]
    failures: list[str] = []

    def run_node(node):
        try:
            node.run()
        except Exception as e:
            failures.append(f"{type(node).__name__}: {e}")

    threads = [threading.Thread(target=run_node, args=(n,), daemon=True, name=type(n).__name__) for n in nodes]
    for t in threads:
        t.start()
    supervisor = Supervisor(config, coordinator, group_metrics(group), out)
    if stop_event is not None:
        supervisor.stop_event = stop_event
    previous = _install_sigint(supervisor.stop_event) if stop_event is None else None
    _start_dashboard(config)

    def check_nodes():
        if failures:
            raise RuntimeError(f"a node failed: {failures[0]}")

    try:
        reason = supervisor.loop(check_nodes)
        print(f"finishing: {reason}", file=out, flush=True)
        supervisor.report(time.time() - supervisor.started)
    finally:
        def stop_all():
            for node in nodes:
                node.stop()
            for t in threads:
                t.join(timeout=60)

        _shut_down([
            ("stopping the nodes", stop_all),
            ("closing the actors", actors.close),
            ("writing the learners' checkpoints", group.close),
            ("writing the league's checkpoint", coordinator.close),
        ], out)
        supervisor.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    print(f"checkpoints written to {config.run_dir}; rerun the same command to resume", file=out, flush=True)
    return supervisor


def group_metrics(group) -> Callable[[], dict]:
    """Learner metrics per agent, with updates/s derived from successive readings."""
    previous: dict[str, tuple[float, float]] = {}

    def read() -> dict:
        metrics = local(group).metrics()
        now = time.time()
        for agent, m in metrics.items():
            updates = m.get("updates_dispatched", 0.0)
            if agent in previous:
                t0, u0 = previous[agent]
                m["updates_per_second"] = (updates - u0) / max(now - t0, 1e-9)
            previous[agent] = (now, updates)
        return metrics

    return read


def run_ray(config: RunConfig, stop_event: threading.Event | None = None, out=sys.stdout,
            kill_actor_after: float | None = None) -> Supervisor:
    """Each node a Ray actor, on a local Ray instance or on the cluster at --ray_address.

    On one machine the learners share one process and the actors another (memory: a dozen
    JAX+TF processes would not fit a laptop). Ports bind to 127.0.0.1 on a local instance.
    """
    import ray

    p = plan(config)
    if not ray.is_initialized():
        # Few malloc arenas: the many threads of co-located nodes otherwise each keep their own.
        kwargs = dict(include_dashboard=False, logging_level="ERROR", log_to_driver=True,
                      runtime_env={"env_vars": {"MALLOC_ARENA_MAX": "2"}})
        if config.ray_address:
            ray.init(address=config.ray_address, **kwargs)
        else:
            ray.init(_node_ip_address="127.0.0.1", num_cpus=max(os.cpu_count() or 2, 8), **kwargs)
    remote = dict(num_cpus=0)
    coordinator = ray.remote(max_concurrency=64, **remote)(Coordinator).remote(
        config.league_config(), config.run_dir, config.seed, config=coordinator_config(config))
    print(f"building {len(p.agents)} learners on Ray ...", file=out, flush=True)
    group = ray.remote(max_concurrency=32, **remote)(LearnerGroup).remote(config, p.agents, p.agent_indices)
    address = ray.get(group.reverb_address.remote())
    ray.get(coordinator.set_learners.remote({a: LearnerHandle(group, a) for a in p.agents}))
    for a in p.agents:
        ray.get(coordinator.store_initial_params.remote(a, ray.get(group.initial_params.remote(a))))
    groups = dict.fromkeys(p.agents, group)
    addresses = dict.fromkeys(p.agents, address)
    print(f"building {len(p.actor_assignments)} actors and {config.evaluators} evaluator(s) on Ray ...", file=out, flush=True)
    actors = ray.remote(max_concurrency=8, max_restarts=-1, **remote)(ActorGroup).remote(
        config, p.actor_assignments, coordinator, groups, addresses)
    evaluators = [
        ray.remote(max_concurrency=8, max_restarts=-1, **remote)(EvaluatorNode).remote(config, coordinator, groups, f"evaluator_{i}")
        for i in range(config.evaluators)
    ]
    running = {group.run.remote(): group, actors.run.remote(): actors}
    running.update({e.run.remote(): e for e in evaluators})
    supervisor = Supervisor(config, coordinator, group_metrics(group), out)
    if stop_event is not None:
        supervisor.stop_event = stop_event
    previous = _install_sigint(supervisor.stop_event) if stop_event is None else None
    _start_dashboard(config)
    supervisor.restarts = 0
    started = time.time()
    killed = [False]

    def check_nodes():
        if kill_actor_after is not None and not killed[0] and time.time() - started > kill_actor_after:
            pid = ray.get(actors.pid.remote())
            print(f"  (test) killing the actor process {pid}", file=out, flush=True)
            os.kill(pid, signal.SIGKILL)
            killed[0] = True
        ready, _ = ray.wait(list(running), timeout=0)
        for ref in ready:
            node = running.pop(ref)
            try:
                ray.get(ref)
                if not supervisor.stop_event.is_set():
                    running[node.run.remote()] = node
            except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError):
                if node is group:
                    raise RuntimeError("the learner process died; rerun the same command to resume from checkpoints") from None
                print("  a node died; Ray restarts it and it picks up where its learner is", file=out, flush=True)
                supervisor.restarts += 1
                running[node.run.remote()] = node

    try:
        reason = supervisor.loop(check_nodes)
        print(f"finishing: {reason}", file=out, flush=True)
        supervisor.report(time.time() - supervisor.started)
    finally:
        def stop_all():
            for node in (actors, *evaluators, group):
                ray.get(node.stop.remote(), timeout=30)

        _shut_down([
            ("stopping the nodes", stop_all),
            ("waiting for the nodes", lambda: ray.wait(list(running), num_returns=len(running), timeout=60)),
            ("closing the actors", lambda: ray.get(actors.close.remote(), timeout=60)),
            ("writing the learners' checkpoints", lambda: ray.get(group.close.remote(), timeout=300)),
            ("writing the league's checkpoint", lambda: ray.get(coordinator.close.remote(), timeout=60)),
        ], out)
        supervisor.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if not config.ray_address:
            ray.shutdown()
    print(f"checkpoints written to {config.run_dir}; rerun the same command to resume", file=out, flush=True)
    return supervisor


RUNNERS = {"inprocess": run_inprocess, "ray": run_ray}
