"""Launchers: run one `Program` (experiments/program.py) in this process, on Ray, or as a
Launchpad program (experiments/launchpad_launcher.py).

All three build the nodes in order (resolving `Ref`s into handles), make the program's wiring
calls, run every node that runs, and hand the driver's loop to the `Supervisor`: poll the
coordinator (snapshots, resets), record learner metrics, print progress, stop on --minutes /
--learner_steps / Ctrl-C. Then every node is stopped and closed in reverse order, each step
even if an earlier one failed, so checkpoints get written. `on_launch(handles)`, if given, is
called once with every node's handle when all run (benchmarks read live learners through it).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import sys
import threading
import time
import traceback
import uuid

from actors.games.registry import module_path
from experiments.config import RaySettings, RunConfig
from experiments.launchpad_launcher import problem as launchpad_problem
from experiments.launchpad_launcher import run_launchpad
from experiments.nodes import lost_node
from experiments.program import Program, build_program, resolve
from experiments.supervisor import (
    HANG_SECONDS,
    RESUME,
    NodeFailed,
    Supervisor,
    stop_if_interrupted,
    supervise,
)


def run_inprocess(config: RunConfig, stop_event: threading.Event | None = None, out=sys.stdout,
                  on_launch=None) -> Supervisor:
    """Every node in this process; every node that runs on its own thread."""
    program = build_program(config)
    handles: dict = {}
    for node in program.nodes:
        stop_if_interrupted()
        print(f"building {node.name} ...", file=out, flush=True)
        handles[node.name] = node.cls(**resolve(node.kwargs, handles))
    wire(program, handles)
    failures: list[str] = []

    def run(name):
        try:
            handles[name].run()
        except Exception as e:   # a bug or a bad input: its traceback where the league's lines go
            print(f"{name} failed:\n{traceback.format_exc()}", file=out, flush=True)
            failures.append(f"{name}: {_describe(e)}")

    threads = {n.name: threading.Thread(target=run, args=(n.name,), daemon=True, name=n.name)
               for n in program.nodes if n.runs}
    for t in threads.values():
        t.start()

    def check_nodes(_):
        if failures:
            raise NodeFailed(f"{failures[0]}\n{RESUME}")

    def stop(node):
        handles[node.name].stop()
        threads[node.name].join(timeout=60)

    return supervise(program, handles, out, stop_event, on_launch, check_nodes, stop,
                      lambda node: handles[node.name].close())


def wire(program: Program, handles: dict, only: str | None = None) -> None:
    """Makes the program's wiring calls on the built nodes (`only`: those of one node, again
    after Ray restarted it)."""
    for call in program.calls:
        if only is None or call.node == only:
            getattr(handles[call.node], call.method)(**resolve(call.kwargs, handles))


def _describe(error: BaseException) -> str:
    """A node's error in one line: a RuntimeError's message already says what failed."""
    return str(error) if type(error) is RuntimeError else f"{type(error).__name__}: {error}"


class RayProxy:
    """A Ray actor handle that reads like the node itself (each call blocks on its result).
    Pickled as the actor's name (every node is a named actor of the job): a node built with
    another's proxy then holds no object reference among its constructor's arguments, which
    Ray flags with an error-level line for an actor it may restart (ray-project/ray#53727)."""

    def __init__(self, handle, name: str):
        self.handle, self.name = handle, name

    def __getattr__(self, name: str):
        import ray

        method = getattr(self.handle, name)
        return lambda *args, **kwargs: ray.get(method.remote(*args, **kwargs))

    def __reduce__(self):
        return (_named_proxy, (self.name,))


def _named_proxy(name: str) -> RayProxy:
    import ray

    return RayProxy(ray.get_actor(name), name)


def init_ray(config: RunConfig) -> None:
    """Starts the run's local Ray instance, or joins --ray_address, once per process. Called
    before this process runs JAX (experiments.league does so before its checks that load
    parameters): starting a local instance forks (Ray's Popen with a preexec_fn), which is
    unsafe once JAX's threads run ("os.fork() was called ... will likely lead to a deadlock")."""
    import ray

    if ray.is_initialized():
        return
    kwargs = dict(include_dashboard=False, logging_level="ERROR", log_to_driver=True,
                  runtime_env=job_runtime_env(config, config.ray))
    if config.ray_address:
        ray.init(address=config.ray_address, **kwargs)
    else:
        ray.init(_node_ip_address="127.0.0.1", num_cpus=max(os.cpu_count() or 2, 8), **kwargs)


# -- placement on a Ray cluster --------------------------------------------------------


REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Never shipped to workers: environments, run directories, caches, git.
CODE_EXCLUDES = [".venv", ".venv-*", "runs", ".git", "*.egg-info", "__pycache__",
                 ".pytest_cache", ".ruff_cache", ".hypothesis", "*.npz", "*.db", "*.db-*"]


def job_runtime_env(config: RunConfig, settings: RaySettings) -> dict:
    """The job's runtime_env: few malloc arenas (the many threads of co-located nodes otherwise
    each keep their own), every worker handing its freed memory back to the OS
    (`agents.memory.release_periodically`, run as each worker process starts) and, on a
    cluster, the code: the repository as working_dir and a
    user's game module (`--game=package.module:factory`) as one of `py_modules` (a local Ray
    instance's workers import it from the driver's directory as the driver does)."""
    env: dict = {"env_vars": {"MALLOC_ARENA_MAX": "2"},
                 "worker_process_setup_hook": "agents.memory.release_periodically"}
    game_module = module_path(config.game)
    if settings.ship_code == "always" or (settings.ship_code == "auto" and config.ray_address):
        excludes = list(CODE_EXCLUDES)
        run_dir = os.path.abspath(config.run_dir)
        if run_dir.startswith(REPOSITORY + os.sep):
            excludes.append("/" + os.path.relpath(run_dir, REPOSITORY))
        env.update(working_dir=REPOSITORY, excludes=excludes)
        if game_module and not game_module.startswith(REPOSITORY + os.sep):
            env["py_modules"] = [game_module]
    return env


def _offers(cluster: dict, resource: str, count: int, what: str) -> bool:
    """Whether some node offers the custom `resource`; ValueError if it does, but fewer than
    the `count` units the nodes (`what`) that request one each need."""
    offered = cluster.get(resource, 0)
    if 0 < offered < count:
        raise ValueError(f"{count} {what} need {count} units of the '{resource}' resource; "
                         f"the cluster offers {offered:g}")
    return offered > 0


def placement(program: Program, cluster: dict, driver_node: str, settings: RaySettings) -> dict:
    """Ray actor options (resources, scheduling strategy, runtime_env) of every node, from
    the cluster's total resources (`ray.cluster_resources()`) and the driver's node id;
    ValueError when the cluster cannot hold what was asked (never a run that hangs pending)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    on_driver = NodeAffinitySchedulingStrategy(node_id=driver_node, soft=False)
    groups = program.learner_groups()
    others = [n.name for n in program.nodes if n.restartable and n.name not in groups and n.name != "coordinator"]
    total_gpus = float(cluster.get("GPU", 0))
    gpus = settings.learner_gpus
    if gpus < 0:  # auto: a GPU per group, or the GPUs shared out when groups outnumber them
        gpus = 0.0 if not total_gpus else min(1.0, math.floor(100 * total_gpus / len(groups)) / 100)
    if gpus and gpus * len(groups) > total_gpus + 1e-9:
        raise ValueError(f"{len(groups)} learner groups x {gpus} GPUs do not fit the cluster's "
                         f"{total_gpus:g} GPUs; lower --ray.learner_gpus or change --learner_groups")
    no_preallocation = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    cpu_only = {**no_preallocation, **({"JAX_PLATFORMS": "cpu"} if total_gpus else {})}
    options: dict[str, dict] = {}
    for node in program.nodes:
        o: dict = dict(num_cpus=0, max_concurrency=64 if node.name == "coordinator" else 32,
                       runtime_env={"env_vars": dict(cpu_only)})
        if node.restartable:
            o["max_restarts"] = -1
        options[node.name] = o
    options["coordinator"]["scheduling_strategy"] = on_driver
    for name in groups:
        o = options[name]
        if gpus:
            o["num_gpus"] = gpus
            o["runtime_env"] = {"env_vars": dict(no_preallocation) if not settings.gpu_memory_fraction else {
                "XLA_PYTHON_CLIENT_MEM_FRACTION": str(settings.gpu_memory_fraction)}}
        elif _offers(cluster, settings.learner_resource, len(groups), "learner groups"):
            o["resources"] = {settings.learner_resource: 1}
        else:
            o["scheduling_strategy"] = on_driver
    for name in others:
        o = options[name]
        if _offers(cluster, settings.actor_resource, len(others), "actor and evaluator nodes"):
            o["resources"] = {settings.actor_resource: 1}
        if settings.spread:
            o["scheduling_strategy"] = "SPREAD"
    return options


def describe_placement(options: dict) -> str:
    parts = []
    for name, o in options.items():
        where = []
        if o.get("num_gpus"):
            where.append(f"{o['num_gpus']:g} GPU")
        where += [f"{k}={v:g}" for k, v in o.get("resources", {}).items()]
        strategy = o.get("scheduling_strategy")
        if strategy == "SPREAD":
            where.append("spread")
        elif strategy is not None:
            where.append("driver's node")
        parts.append(f"{name} ({', '.join(where) or 'anywhere'})")
    return "; ".join(parts)


def run_ray(config: RunConfig, stop_event: threading.Event | None = None, out=sys.stdout,
            on_launch=None) -> Supervisor:
    """Each node a Ray actor, on a local Ray instance (ports on 127.0.0.1) or the cluster at
    --ray_address, placed by `placement` (RaySettings). Ray restarts a dead restartable node's
    process (`Node.restartable`: actors, evaluators and the coordinator, from league.db, its
    wiring calls made again; learner groups from their checkpoints, on the replay path with a
    new Reverb server that the actors find again), also on another host when its host died,
    and the driver resubmits its work (the progress line says what was lost); a node whose
    run() failed on a call to a lost node runs again."""
    import ray

    settings = config.ray
    # Absolute: on a cluster each worker's current directory is its copy of the code.
    config = dataclasses.replace(config, run_dir=os.path.abspath(config.run_dir))
    program = build_program(config)
    init_ray(config)
    options = placement(program, ray.cluster_resources(), ray.get_runtime_context().get_node_id(), settings)
    if config.ray_address:
        print(f"placement: {describe_placement(options)}", file=out, flush=True)
    handles: dict = {}
    run_id = uuid.uuid4().hex[:8]   # actor names unique on a cluster that outlives runs
    for node in program.nodes:
        stop_if_interrupted()
        print(f"building {node.name} on Ray ...", file=out, flush=True)
        name = f"{node.name}-{run_id}"
        # No task events: Ray's GCS keeps one per method call (up to 100,000; the league makes
        # tens a second) for a state API and dashboard that the run does not start.
        actor = ray.remote(name=name, enable_task_events=False, **options[node.name])(node.cls).remote(
            **resolve(node.kwargs, handles))
        handles[node.name] = RayProxy(actor, name)
    wire(program, handles)
    running = {handles[n.name].handle.run.remote(): n for n in program.nodes if n.runs}
    died = ray.exceptions.RayActorError   # and its subclasses ActorDiedError, ActorUnavailableError
    hosts = NodeHosts(ray, handles)
    lost: list[str] = []

    restarting: dict[str, tuple[float, object]] = {}  # node -> (next probe time, probe ref)
    resubmit: dict[str, float] = {}  # node whose run() failed on a lost node -> when to run it again
    pings = Pings(hosts, out)

    def check_nodes(supervisor):
        pings.check([n.name for n in program.nodes if n.name not in restarting])
        ready, _ = ray.wait(list(running), timeout=0)
        for ref in ready:
            node = running.pop(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayTaskError as e:
                cause = e.cause if e.cause is not None else e
                if not lost_node(cause):   # its run() raised: a bug or a bad input
                    raise NodeFailed(f"{node.name}: {_describe(cause)}\n{RESUME}") from None
                # A call of its run() to a node that was lost (restarting) failed: it runs again
                # a little later (a RayTaskError that is also an ActorUnavailableError).
                if not supervisor.stop_event.is_set():
                    if node.name not in resubmit:
                        print(f"  {node.name}: a call to a lost node failed ({type(cause).__name__}); "
                              "it goes on once that node is back", file=out, flush=True)
                    resubmit[node.name] = time.time() + 2.0
                continue
            except died:   # its own process was lost
                was_on = hosts.known(node.name)
                gone = hosts.dead_hosts()
                if not node.restartable:
                    raise NodeFailed(f"{node.name} died (on {was_on}{', host lost' if was_on in gone else ''}); "
                                     "rerun the same command to resume from checkpoints") from None
                why = "its host was lost" if was_on in gone else "its process died"
                print(f"  {node.name} died on {was_on} ({why}); Ray restarts it and it picks up "
                      "from its checkpoints", file=out, flush=True)
                lost.append(f"{node.name}@{was_on}")
                supervisor.restarts += 1
                # Its run is resubmitted once it answers again (until then every call to it
                # fails at once with "the actor is restarting").
                restarting[node.name] = (time.time() + 2.0, None)
                continue
            if not supervisor.stop_event.is_set():
                running[handles[node.name].handle.run.remote()] = node
        for name, (when, probe) in list(restarting.items()):
            if probe is None:
                if time.time() >= when:
                    restarting[name] = (when, hosts.probe(name))
                continue
            if not ray.wait([probe], timeout=0)[0]:
                continue
            try:
                where = ray.get(probe)
            except Exception:  # still restarting: ask again in a while
                restarting[name] = (time.time() + 5.0, None)
                continue
            hosts.set(name, where)
            try:   # its wiring calls again (a restarted coordinator connects to the learner groups)
                wire(program, handles, only=name)
            except Exception as e:
                if not lost_node(e):
                    raise
                # A node it connects to is lost too (both on a lost host, or killed together):
                # it is wired again once that one answers.
                restarting[name] = (time.time() + 2.0, None)
                continue
            del restarting[name]
            print(f"  {name} restarted on {where}", file=out, flush=True)
            if not supervisor.stop_event.is_set():
                running[handles[name].handle.run.remote()] = program.node(name)
        for name, when in list(resubmit.items()):
            if time.time() >= when and not restarting and not supervisor.stop_event.is_set():
                del resubmit[name]
                running[handles[name].handle.run.remote()] = program.node(name)

    def lost_note() -> str:
        gone = hosts.dead_hosts()
        if not lost and not gone:
            return ""
        return (f"  lost: {len(gone)} host(s) {','.join(sorted(gone)) or '-'}, {len(lost)} node "
                f"process(es) ({', '.join(lost)}; {len(restarting)} not restarted yet), "
                "their games in flight unrecorded")

    def stop(node):
        if node.name in restarting:  # lost and not back yet: nothing of it to stop
            return
        ray.get(handles[node.name].handle.stop.remote(), timeout=30)
        ray.wait([r for r, n in running.items() if n is node], timeout=60)

    def close(node):
        if node.name in restarting:
            print(f"  {node.name} was still restarting (lost with its host); not closed", file=out, flush=True)
            return
        ray.get(handles[node.name].handle.close.remote(), timeout=300)

    def launched(handles_):
        where = ", ".join(f"{n} {hosts.of(n)}" for n in handles_)  # also what a loss reports
        if config.ray_address:
            print(f"hosts: {where}", file=out, flush=True)
        if on_launch is not None:
            on_launch(handles_)

    try:
        return supervise(program, handles, out, stop_event, launched, check_nodes, stop, close,
                          note=lost_note, lost=lambda e: isinstance(e, died))
    finally:
        if not config.ray_address:
            ray.shutdown()


class Pings:
    """A hang watch over Ray nodes: each node is asked for its host every PING_EVERY seconds
    (a call served beside its `run()`); one that has not answered for HANG_SECONDS is named
    once (a hung, SIGSTOPped or overloaded process; the league goes on without it meanwhile),
    and again when it answers."""

    PING_EVERY = 5.0

    def __init__(self, hosts: NodeHosts, out):
        self.hosts, self.out = hosts, out
        self.sent: dict[str, tuple[float, object]] = {}
        self.next: dict[str, float] = {}
        self.hung: set[str] = set()

    def check(self, names: list[str]) -> None:
        import ray

        now = time.time()
        for name in names:
            if name not in self.sent:
                if now >= self.next.get(name, 0.0):
                    self.sent[name] = (now, self.hosts.probe(name))
                continue
            at, ref = self.sent[name]
            if ray.wait([ref], timeout=0)[0]:
                del self.sent[name]
                self.next[name] = now + self.PING_EVERY
                if name in self.hung:
                    self.hung.discard(name)
                    print(f"  {name} answers again (after {now - at:.0f} s)", file=self.out, flush=True)
            elif now - at >= HANG_SECONDS and name not in self.hung:
                self.hung.add(name)
                print(f"  {name} has not answered for {now - at:.0f} s: its process hung, stopped or "
                      "overloaded? The league goes on without it meanwhile", file=self.out, flush=True)
        for name in set(self.sent) - set(names):   # lost and restarting: asked afresh once back
            del self.sent[name]
            self.hung.discard(name)


class NodeHosts:
    """Which host (IP address) each node's Ray actor runs on, and which hosts died."""

    def __init__(self, ray, handles: dict):
        self.ray, self.handles = ray, handles
        self._host: dict[str, str] = {}
        self._known_dead: set[str] = set()
        self._dead_before = self._dead()  # hosts dead before this run are not its losses

    def _dead(self) -> set[str]:
        nodes = self.ray.nodes()
        alive = {n["NodeManagerAddress"] for n in nodes if n["Alive"]}
        return {n["NodeManagerAddress"] for n in nodes if not n["Alive"]} - alive

    def probe(self, name: str):
        """The ref of a call answering the node's host address."""
        return self.handles[name].handle.__ray_call__.remote(
            lambda _self: __import__("ray").util.get_node_ip_address())

    def of(self, name: str) -> str:
        if name not in self._host:
            try:
                self._host[name] = self.ray.get(self.probe(name), timeout=60)
            except Exception:
                return "?"
        return self._host[name]

    def known(self, name: str) -> str:
        return self._host.get(name, "?")

    def set(self, name: str, host: str) -> None:
        self._host[name] = host

    def dead_hosts(self) -> set[str]:
        try:
            self._known_dead |= self._dead() - self._dead_before
        except Exception:  # the GCS busy: what was known
            pass
        return set(self._known_dead)


def problem(config: RunConfig) -> str | None:
    """Why `config.runner` cannot run in this Python, with the fix; None if it can. Checked
    before anything is written to the run directory."""
    if config.runner == "launchpad":
        return launchpad_problem(config)
    if config.runner == "ray" and importlib.util.find_spec("ray") is None:
        return ("--runner=ray needs Ray, which this environment does not have (the Launchpad "
                "environment on Python 3.10 has none): use --runner=launchpad or --runner=inprocess "
                "here, or run from the main environment (README: the two commands)")
    return None


LAUNCHERS = {"inprocess": run_inprocess, "ray": run_ray, "launchpad": run_launchpad}
