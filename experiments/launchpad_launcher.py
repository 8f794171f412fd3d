"""The Launchpad launcher: the program graph (experiments/program.py) as an `lp.Program`.

    python -m experiments.league --runner=launchpad [--lp_launch_type=local_mp|local_mt]

Every node of the graph becomes a `lp.CourierNode` in a group of its own (a process under
`local_mp`, the default; a thread under `local_mt`), built from the same class and keyword
arguments as under the other launchers. A `Ref` becomes the node's Launchpad handle, which
Launchpad turns into a courier client inside the node that receives it, so the nodes call
each other exactly as they call Ray proxies. A learner group keeps its own Reverb server (its
tables are built from the network's example unroll, one per agent), as under Ray: the graph
stays the one graph, with no separate ReverbNode.

The driver (this process) then does what `run_ray` does: waits for the nodes, makes the
program's wiring calls, calls `run()` on every node that runs (one courier call that lasts
the run: the nodes are built with `disable_run()`, so Launchpad does not call it itself) and
hands the loop to `experiments.supervisor.supervise`. Stopping (--minutes, --learner_steps, Ctrl-C) calls `stop()`
and `close()` on each node in reverse order, which writes the checkpoints, and only then
stops the Launchpad program. Node processes ignore Ctrl-C (the driver stops them in order)
and end with the driver. A node that dies stops the run with its log's last lines; rerun to
resume from the checkpoints.

Launchpad's last release (0.5.2) runs on Python 3.10 only: it lives in a second environment
(`constraints-launchpad.txt`, the `[launchpad]` extra; `experiments/compat.py` holds what
differs there). `problem()` says how to create it when launchpad cannot be imported.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback

from agents.memory import release_periodically
from experiments.config import RunConfig
from experiments.program import build_program, resolve
from experiments.supervisor import NodeFailed

LAUNCH_TYPES = ("local_mp", "local_mt")
# The commands that create the Launchpad environment (docs/launchpad.md).
CREATE_ENVIRONMENT = (
    "python3.10 -m venv .venv-launchpad && . .venv-launchpad/bin/activate && "
    "pip install -c constraints-launchpad.txt -e '.[launchpad]'")
JAXMARL_LINE = "pip install -c constraints-launchpad.txt --no-deps --ignore-requires-python jaxmarl==0.2.0"
RUN_EXAMPLE = "python -m experiments.league --runner=launchpad --game=kuhn_poker --minutes=2"


def problem(config: RunConfig) -> str | None:
    """Why `--runner=launchpad` cannot run `config` in this Python, with the fix; None if it can.
    Reads no module (find_spec only), so it is cheap and writes nothing."""
    version = ".".join(map(str, sys.version_info[:3]))
    if importlib.util.find_spec("launchpad") is None:
        return (
            f"--runner=launchpad needs Launchpad (dm-launchpad 0.5.2), which is not installed in "
            f"this Python ({version}, {sys.executable}); its last release runs on Python 3.10 "
            "only. Create the Launchpad environment from the repository's root and run from it:\n"
            f"  {CREATE_ENVIRONMENT}\n"
            f"  {RUN_EXAMPLE}\n"
            "(SMAX also needs: " + JAXMARL_LINE + ")\n"
            "No python3.10? `pyenv install 3.10` (then `PYENV_VERSION=3.10.13 python3.10 -m venv ...`), "
            "or your OS's package (Debian/Ubuntu: python3.10-venv). Or use --runner=ray / --runner=inprocess "
            "in the main environment.")
    missing = [m for m in config.game_info.capabilities.requires if importlib.util.find_spec(m) is None]
    if missing:
        fix = ("jaxmarl, which the Launchpad environment installs separately (jaxmarl 0.2.0 declares "
               f"Python >= 3.11 but runs on 3.10):\n  {JAXMARL_LINE}") if missing == ["jaxmarl"] else \
            f"{', '.join(missing)}: pip install them in this environment"
        return f"--game={config.game} needs {fix}"
    return None


def define_flags() -> None:
    """Launchpad's own flags (`--lp_launch_type`, `--lp_termination_notice_secs`) on the
    command line, with local_mp as the league's default launch type."""
    from absl import flags
    from launchpad import flags as lp_flags  # noqa: F401 -- defines them

    flags.FLAGS.set_default("lp_launch_type", "local_mp")


def _launch_type(given: str | None) -> str:
    from absl import flags

    if given is None:
        given = flags.FLAGS.lp_launch_type if flags.FLAGS.is_parsed() else "local_mp"
    if given not in LAUNCH_TYPES:
        raise ValueError(f"--lp_launch_type={given}: the league runs under local_mp (processes, "
                         "the default) or local_mt (threads of this process)")
    return given


# -- inside a node's process (or thread) ------------------------------------------------

# local_mt: the exception that ended a node's construction, by node name (same process).
_BUILD_ERRORS: dict[str, BaseException] = {}


class Served:
    """A node behind one courier method, `call(method, pickle of (args, kwargs))` -> pickle of
    the result. Courier 0.5.2 never returns from a call that has a numpy array among its
    arguments (seen here with numpy 1.26 and TF 2.8.4; results with arrays are fine), and the
    league's calls carry parameters: pickles of them travel as bytes instead."""

    def __init__(self, node):
        self._node = node

    def call(self, method: str, payload: bytes) -> bytes:
        args, kwargs = pickle.loads(payload)
        return pickle.dumps(getattr(self._node, method)(*args, **kwargs), protocol=pickle.HIGHEST_PROTOCOL)


class NodeClient:
    """A courier client of a `Served` node that reads like the node: `client.params(a)`."""

    def __init__(self, address: str):
        import courier

        self.address = address
        self._client = courier.Client(address)

    def future(self, method: str, *args, **kwargs) -> concurrent.futures.Future:
        """The call's future, whose result is the pickle of the method's result."""
        return self._client.futures.call(method, pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL))

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: pickle.loads(self._client.call(
            method, pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)))

    def __reduce__(self):
        return NodeClient, (self.address,)


def _build(name: str, cls: type, kwargs: dict) -> Served:
    """Builds node `name` where Launchpad runs it. Launchpad has turned its handles into
    courier clients by now; each becomes a NodeClient once its node serves."""
    import courier
    import tree

    def client(x):
        if not isinstance(x, courier.Client):
            return x
        wait_until_serving(x.address)
        return NodeClient(x.address)

    kwargs = tree.map_structure(client, kwargs)
    if threading.current_thread() is not threading.main_thread():  # local_mt: a thread
        try:
            return Served(cls(**kwargs))
        except BaseException as e:
            _BUILD_ERRORS[name] = e
            raise
    # local_mp: a process of its own. Ctrl-C belongs to the driver, which stops the nodes in
    # order (checkpoints); the process ends with the driver even if the driver is killed.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent()
    release_periodically()   # freed memory back to the OS (agents/memory.py)
    try:
        return Served(cls(**kwargs))
    except BaseException:
        # Leave now with the traceback in the node's log; not Launchpad's pdb post-mortem,
        # which would wait for a debugger session nobody opens.
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def wait_until_serving(address: str, alive=lambda: True) -> bool:
    """Blocks until a server listens at `address` ("host:port"); False if `alive()` turns
    False first. A TCP probe, not a courier call: gRPC backs a channel to a server that is not
    up yet off for up to two minutes (a SMAX learner group takes a minute or more to build),
    so a node's channel is opened only once the node serves."""
    host, _, port = address.rpartition(":")
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return True
        except OSError:
            if not alive():
                return False
            time.sleep(0.2)


def _end_with_parent() -> None:
    """SIGTERM this process when its parent (the driver) dies (Linux's PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except OSError:
        pass


# -- the driver ------------------------------------------------------------------------


def node_processes(names: set[str], within: float = 10.0) -> dict:
    """{node name: psutil.Process} of this process's children that carry a name of `names` in
    LEAGUE_NODE (Launchpad's local_mp starts one child per node, the name set through its launch
    config). Scans again until every name is found or `within` seconds pass: a child's
    environment reads empty from /proc for a moment after Popen returns (the exec is still
    setting it up), and a node missed so was taken for one that had ended (CI, under load:
    "node coordinator ended", its log empty, 4 s into the run)."""
    import psutil

    found: dict = {}
    deadline = time.monotonic() + within
    while True:
        for child in psutil.Process().children():
            try:
                name = child.environ().get("LEAGUE_NODE")
            except psutil.Error:
                continue
            if name in names:
                found.setdefault(name, child)
        if set(found) >= names or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


class _Nodes:
    """The driver's view of the launched nodes: courier clients, and whether each still runs."""

    def __init__(self, handles: dict, launch_type: str, log_dir: str | None):
        self.launch_type, self.log_dir = launch_type, log_dir
        self.addresses = {name: handle.dereference().address for name, handle in handles.items()}
        self.clients: dict[str, NodeClient] = {}  # each once its node serves (wait_ready)
        self.processes = node_processes(set(self.addresses)) if launch_type == "local_mp" else {}

    def alive(self, name: str) -> bool:
        if self.launch_type == "local_mt":
            return any(t.name == name and t.is_alive() for t in threading.enumerate())
        import psutil

        process = self.processes.get(name)
        try:
            return process is not None and process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def wait_ready(self, name: str) -> None:
        """Blocks until node `name` serves (it has been built), or raises if it ended."""
        if not wait_until_serving(self.addresses[name], lambda: self.alive(name)):
            self.check(name)
        self.clients[name] = NodeClient(self.addresses[name])

    def log(self, name: str) -> str | None:
        return os.path.join(self.log_dir, name, "0") if self.log_dir else None

    def check(self, name: str) -> None:
        """Raises if node `name` has ended: its construction error (local_mt) or a NodeFailed
        naming its log and the log's last lines (local_mp)."""
        if self.alive(name):
            return
        if name in _BUILD_ERRORS:
            raise _BUILD_ERRORS[name]
        log, tail = self.log(name), ""
        if log and os.path.exists(log):
            with open(log, errors="replace") as f:
                tail = "".join(f.readlines()[-25:])
        where = f"; its log is {log}" + (f", ending:\n{tail}" if tail else "") if log else ""
        raise NodeFailed(f"node {name} ended{where}\nRerun the same command to resume from the checkpoints.")

    def call(self, name: str, method: str, *args, timeout: float | None = None, **kwargs):
        """`name.method(*args, **kwargs)` over courier, waiting for the node to come up and
        failing at once if its process ends."""
        future = self.clients[name].future(method, *args, **kwargs)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return pickle.loads(future.result(timeout=0.5))
            except concurrent.futures.TimeoutError:
                pass
            except Exception as e:
                raise NodeFailed(f"{name}.{method} failed: {e}") from None
            self.check(name)
            if deadline is not None and time.monotonic() > deadline:
                future.cancel()
                raise NodeFailed(f"{name}.{method} did not answer within {timeout:.0f} s")


class CourierProxy:
    """A node's courier client that reads like the node (each call blocks on its result)."""

    def __init__(self, nodes: _Nodes, name: str):
        self._nodes, self._name = nodes, name

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self._nodes.call(self._name, method, *args, **kwargs)


def _log_dir(config: RunConfig) -> str:
    """Where local_mp writes each node's output: $LAUNCHPAD_LOGGING_DIR, else the run
    directory's logs/launchpad/<node>/0."""
    from launchpad.launch.run_locally import launch_local_output_to_files as to_files

    log_dir = os.environ.get("LAUNCHPAD_LOGGING_DIR") or os.path.join(config.run_dir, "logs", "launchpad")
    # Launchpad 0.5.2 reads LAUNCHPAD_LOGGING_DIR once, when it is imported (before the run
    # directory is known): set the value it read.
    to_files._LOGGING_DIR = log_dir
    return log_dir


def run_launchpad(config: RunConfig, stop_event: threading.Event | None = None, out=sys.stdout,
                  on_launch=None, launch_type: str | None = None):
    """Runs the program as an `lp.Program` (see the module docstring); returns the Supervisor."""
    from experiments.supervisor import supervise

    message = problem(config)
    if message:
        raise RuntimeError(message)
    import launchpad as lp
    from launchpad.nodes.python.local_multi_processing import PythonProcess

    launch_type = _launch_type(launch_type)
    # The driver closes the nodes itself (checkpoints) and then ends the program: Launchpad's
    # own countdown would SIGKILL the driver too if a node is slow to exit (`_end`).
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS(sys.argv[:1], known_only=True)
    flags.FLAGS.lp_termination_notice_secs = -1
    program = build_program(config)
    lp_program = lp.Program("league")
    handles = {}
    for node in program.nodes:
        courier_node = lp.CourierNode(_build, node.name, node.cls, resolve(node.kwargs, handles))
        courier_node.disable_run()  # the driver calls run() once the program is wired
        with lp_program.group(node.name):
            handles[node.name] = lp_program.add_node(courier_node)
    log_dir = None
    if launch_type == "local_mp":
        terminal = os.environ.get("LAUNCHPAD_LAUNCH_LOCAL_TERMINAL", "output_to_files")
        if terminal == "output_to_files":
            log_dir = _log_dir(config)
        # A user's game module (--game=package.module:factory) imports in every node process
        # as in this one: they start in this directory (tests/test_launchpad.py).
        resources = {n.name: PythonProcess(env={"LEAGUE_NODE": n.name, "MALLOC_ARENA_MAX": "2"})
                     for n in program.nodes}
        print(f"launching {len(program.nodes)} nodes under Launchpad (local_mp, one process each"
              + (f"; their output: {log_dir}/<node>/0)" if log_dir else ")"), file=out, flush=True)
        manager = lp.launch(lp_program, launch_type="local_mp", local_resources=resources,
                            terminal=terminal)
    else:
        print(f"launching {len(program.nodes)} nodes under Launchpad (local_mt, threads of this process)",
              file=out, flush=True)
        manager = lp.launch(lp_program, launch_type="local_mt")
    try:
        nodes = _Nodes(handles, launch_type, log_dir)
        proxies = {name: CourierProxy(nodes, name) for name in nodes.addresses}
        for node in program.nodes:
            print(f"waiting for {node.name} ...", file=out, flush=True)
            nodes.wait_ready(node.name)
        for call in program.calls:
            nodes.call(call.node, call.method, **resolve(call.kwargs, nodes.clients))
        running = {n.name: nodes.clients[n.name].future("run") for n in program.nodes if n.runs}
        stopping = threading.Event()

        def check_nodes(_supervisor):
            for name, future in running.items():
                if future.done() and not stopping.is_set():
                    error = future.exception()
                    raise NodeFailed(f"{name} stopped running" + (f": {error}" if error else "")
                                     + "; rerun the same command to resume from the checkpoints")
            for name in nodes.addresses:
                nodes.check(name)

        def stop(node):
            stopping.set()
            nodes.call(node.name, "stop", timeout=30)
            concurrent.futures.wait([running[node.name]], timeout=60)

        def close(node):
            nodes.call(node.name, "close", timeout=300)

        return supervise(program, proxies, out, stop_event, on_launch, check_nodes, stop, close)
    finally:
        _end(manager, nodes if "nodes" in locals() else None, out)


def _end(manager, nodes: _Nodes | None, out) -> None:
    """Stops the Launchpad program (SIGTERM to each node process, the stop event to each
    thread) and waits 15 s; node processes still there then are killed: each has been closed
    by then (checkpoints written), but a thread of its own may hold its exit up."""
    ending = threading.Thread(target=manager.stop_and_wait, daemon=True)
    ending.start()
    ending.join(timeout=15)
    if ending.is_alive() and nodes is not None:
        for name, process in nodes.processes.items():
            if nodes.alive(name):
                print(f"node {name} had not exited 15 s after the stop; killed", file=out, flush=True)
                process.kill()
        ending.join(timeout=10)

