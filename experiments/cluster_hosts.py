"""Several "hosts" on one machine as network namespaces, each running a Ray node: a real
multi-host Ray cluster for tests and benchmarks (needs root and the `ip` command).

    with NamespaceCluster(hosts=3, root="/tmp/c") as cluster:
        cluster.run_on(0, [sys.executable, "-m", "experiments.league", f"--ray_address={cluster.address}", ...])
        cluster.kill_host(2)          # kill -9 every process of host 2 (its raylet, workers, ...)

Layout (nothing touches the machine's own network namespace):
- a "switch" namespace `<name>-sw` holds the bridge `br0`;
- host i is the namespace `<name>-h<i>` with loopback up and `eth0` at 10.77.0.<i+1>/24, the
  other end of its veth pair (`h<i>`) in the bridge; hosts reach each other only through it;
- host 0 runs `ray start --head`, the others `ray start --address=10.77.0.1:6379`, each with
  its own Ray temp dir and the custom resources given (the head: `head`, `learner`; workers:
  `actor` by default);
- no shared disk for the run: in every worker host's mount namespace `<root>/runs` is a
  bind mount of the host's own `<root>/disk/h<i>`, so whatever a worker process writes to a
  run directory under `<root>/runs` lands there, not in the head's (`files_written_by_workers()`
  lists it: it must stay empty).

Teardown (`close()`, also on failure and on exit) kills every process in each host namespace
(`ip netns pids`: exactly this cluster's Ray processes, never another user's; `ray stop` would
kill every Ray process on the machine) and deletes the namespaces, which removes the veths
and the bridge. `python -m experiments.cluster_hosts --cleanup` removes namespaces left by a
killed test (names starting with `lgc`).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import time

SUBNET = "10.77.0"
PREFIX = "lgc"  # namespaces of this module: lgc<pid>-h<i>, lgc<pid>-sw
RAY_PORT = 6379


def available() -> str | None:
    """Why namespace clusters cannot run here (None if they can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs the `ip` command (iproute2)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def namespace_pids(namespace: str) -> list[int]:
    result = _ip("netns", "pids", namespace, check=False)
    return [int(p) for p in result.stdout.split()] if result.returncode == 0 else []


def kill_namespace(namespace: str, sig: int = signal.SIGKILL) -> list[int]:
    """Sends `sig` to every process of `namespace` (repeatedly, for children forked
    meanwhile); returns the pids signalled."""
    killed: list[int] = []
    for _ in range(20):
        pids = [p for p in namespace_pids(namespace) if p != os.getpid()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, sig)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    return killed


def delete_namespace(namespace: str) -> None:
    kill_namespace(namespace)
    _ip("netns", "delete", namespace, check=False)


def cleanup_stale() -> list[str]:
    """Deletes every namespace of this module whose creating process is gone."""
    removed = []
    names = [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
    for name in names:
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX):].split("-")[0]
        if owner.isdigit() and os.path.exists(f"/proc/{owner}"):
            continue  # a live cluster
        delete_namespace(name)
        removed.append(name)
    return removed


class NamespaceCluster:
    def __init__(self, hosts: int, root: str, head_resources: dict | None = None,
                 worker_resources: dict | None = None, num_cpus: int = 2,
                 object_store_mb: int = 150, python: str = sys.executable, log=print):
        if hosts < 1 or hosts > 50:
            raise ValueError("hosts must be 1..50")
        self.hosts, self.root, self.python, self.log = hosts, os.path.abspath(root), python, log
        self.head_resources = head_resources if head_resources is not None else {"head": 1, "learner": 64}
        self.worker_resources = worker_resources if worker_resources is not None else {"actor": 64}
        self.num_cpus, self.object_store_mb = num_cpus, object_store_mb
        self.name = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.name}-sw"
        self.namespaces = [f"{self.name}-h{i}" for i in range(hosts)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(hosts)]
        self.address = f"{self.addresses[0]}:{RAY_PORT}"
        self.runs = os.path.join(self.root, "runs")  # the run directories' parent (head's disk)
        # Ray's session directories (logs, Unix sockets: paths under 108 bytes, so short).
        self.ray_temp = f"/tmp/{self.name}"
        self.killed: list[int] = []
        self._created: list[str] = []
        self._processes: list[subprocess.Popen] = []
        self._closed = False
        # Ray 2.60 authenticates with a token: this cluster's own (not ~/.ray/auth_token).
        self.token_path = os.path.join(self.root, "auth_token")
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN_PATH": self.token_path}
        self.env.pop("RAY_AUTH_TOKEN", None)
        self.env.pop("RAY_ADDRESS", None)

    # -- network -------------------------------------------------------------------------

    def _netns(self, namespace: str, *cmd: str) -> None:
        _ip("-n", namespace, *cmd)

    def create_network(self) -> None:
        problem = available()
        if problem:
            raise RuntimeError(f"namespace cluster {problem}")
        cleanup_stale()
        atexit.register(self.close)
        _ip("netns", "add", self.switch)
        self._created.append(self.switch)
        self._netns(self.switch, "link", "add", "br0", "type", "bridge")
        self._netns(self.switch, "link", "set", "br0", "up")
        self._netns(self.switch, "link", "set", "lo", "up")
        for i, (ns, addr) in enumerate(zip(self.namespaces, self.addresses)):
            _ip("netns", "add", ns)
            self._created.append(ns)
            # Both ends made in the switch namespace, then one moved into the host.
            self._netns(self.switch, "link", "add", f"h{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._netns(self.switch, "link", "set", f"h{i}", "master", "br0")
            self._netns(self.switch, "link", "set", f"h{i}", "up")
            self._netns(ns, "link", "set", "lo", "up")
            self._netns(ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            self._netns(ns, "link", "set", "eth0", "up")

    # -- Ray -----------------------------------------------------------------------------

    def host_disk(self, host: int) -> str:
        return self.runs if host == 0 else os.path.join(self.root, "disk", f"h{host}")

    def _shell(self, host: int, command: str) -> list[str]:
        """argv running `command` (sh) on `host`: in its network namespace and, on a worker,
        with its own disk mounted over the run directories' parent."""
        prefix = ""
        if host:
            prefix = f"mount --bind {self.host_disk(host)} {self.runs} && "
        return ["ip", "netns", "exec", self.namespaces[host], "sh", "-c", prefix + command]

    def _ray_start(self, host: int) -> None:
        ray = os.path.join(os.path.dirname(self.python), "ray")
        temp = os.path.join(self.ray_temp, f"h{host}")
        os.makedirs(temp, exist_ok=True)
        resources = self.head_resources if host == 0 else self.worker_resources
        args = [ray, "start", "--block", f"--node-ip-address={self.addresses[host]}",
                f"--num-cpus={self.num_cpus}", "--num-gpus=0",
                f"--object-store-memory={self.object_store_mb * 2**20}",
                f"--resources={json.dumps(resources)}", "--disable-usage-stats",
                # A session directory (logs, Unix sockets) of its own: the hosts share one
                # filesystem, and two raylets in one directory would bind the same sockets.
                f"--temp-dir={temp}"]
        if host == 0:
            args += ["--head", f"--port={RAY_PORT}", "--include-dashboard=false"]
        else:
            args += [f"--address={self.address}"]
        log = open(os.path.join(self.root, f"ray_start_h{host}.log"), "w")
        command = " ".join(_quote(a) for a in args)
        self._processes.append(subprocess.Popen(self._shell(host, f"exec {command}"), stdout=log,
                                                stderr=subprocess.STDOUT, env=self.env))

    def start(self, timeout: float = 180.0) -> NamespaceCluster:
        """Creates the network, starts the head and the workers, waits until every node is up."""
        os.makedirs(self.runs, exist_ok=True)
        if not os.path.exists(self.token_path):
            import secrets

            with open(os.open(self.token_path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(secrets.token_hex(32))
        for host in range(1, self.hosts):
            os.makedirs(self.host_disk(host), exist_ok=True)
        self.create_network()
        for host in range(self.hosts):
            self._start_host(host, timeout)
        return self

    def _start_host(self, host: int, timeout: float, attempts: int = 3) -> None:
        for attempt in range(attempts):
            # Under load a raylet may miss Ray's 30 s registration window: start it again.
            self._ray_start(host)
            try:
                self.wait_nodes(host + 1, timeout)
                return
            except RuntimeError as e:
                if attempt == attempts - 1 or "exited" not in str(e):
                    raise
                self.log(f"host {host}: `ray start` failed ({e}); trying again")
                kill_namespace(self.namespaces[host])
                self._processes.pop().wait()

    def alive_nodes(self) -> int:
        code = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
                "print(sum(n['Alive'] for n in ray.nodes()))")
        try:
            result = self.run_on(0, [self.python, "-c", code, self.address], timeout=60,
                                 capture_output=True, text=True)
            return int(result.stdout.strip().splitlines()[-1])
        except (subprocess.SubprocessError, ValueError, IndexError):
            return 0

    def wait_nodes(self, count: int, timeout: float) -> None:
        """Until the first `count` hosts' `ray start` say their node runs, then until the
        cluster counts `count` live nodes."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for p in self._processes:
                if p.poll() is not None:
                    raise RuntimeError(f"`ray start` exited ({p.returncode}); see {self.root}/ray_start_h*.log "
                                       f"and {self.ray_temp}")
            started = 0
            for host in range(count):
                with open(os.path.join(self.root, f"ray_start_h{host}.log")) as f:
                    started += "Ray runtime started" in f.read()
            if started >= count and self.alive_nodes() >= count:
                return
            time.sleep(1)
        raise RuntimeError(f"fewer than {count} Ray nodes up after {timeout:.0f} s; see {self.root}/ray_start_h*.log")

    # -- using it ------------------------------------------------------------------------

    def command_on(self, host: int, argv: list[str]) -> list[str]:
        return self._shell(host, "exec " + " ".join(_quote(a) for a in argv))

    def run_on(self, host: int, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        """`argv` on `host`, with this cluster's Ray token in its environment."""
        kwargs["env"] = {**self.env, **kwargs.get("env", {})}
        return subprocess.run(self.command_on(host, argv), **kwargs)

    def popen_on(self, host: int, argv: list[str], **kwargs) -> subprocess.Popen:
        kwargs["env"] = {**self.env, **kwargs.get("env", {})}
        return subprocess.Popen(self.command_on(host, argv), **kwargs)

    def pids(self, host: int) -> list[int]:
        return namespace_pids(self.namespaces[host])

    def kill_host(self, host: int) -> list[int]:
        """kill -9 of every process on `host` (its raylet, Ray workers, ...): the host is gone."""
        if host == 0:
            raise ValueError("host 0 is the head")
        killed = kill_namespace(self.namespaces[host])
        self.killed.extend(killed)
        # Take its link down too: nothing answers at its address any more.
        _ip("-n", self.switch, "link", "set", f"h{host}", "down", check=False)
        return killed

    def files_written_by_workers(self) -> list[str]:
        """Files worker hosts' processes wrote to run directories (must be none)."""
        found = []
        for host in range(1, self.hosts):
            for dirpath, _, files in os.walk(self.host_disk(host)):
                found += [os.path.join(dirpath, f) for f in files]
        return found

    def close(self) -> None:
        """Kills every process of every host namespace and deletes the namespaces (the veths
        and the bridge go with them). Safe to call twice and after a partial start."""
        if self._closed:
            return
        self._closed = True
        for ns in reversed(self._created):
            kill_namespace(ns)
        for p in self._processes:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self._created):
            _ip("netns", "delete", ns, check=False)
        self._created.clear()

    def __enter__(self) -> NamespaceCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, kind, *exc) -> None:
        self.close()
        if kind is None:  # Ray's logs kept only when something failed
            shutil.rmtree(self.ray_temp, ignore_errors=True)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def main(argv: list[str]) -> int:
    if "--cleanup" in argv:
        print("removed:", " ".join(cleanup_stale()) or "nothing")
        return 0
    print(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
