"""Many hosts: one population program over the devices of every process (`jax.distributed`).

A TPU pod slice or a cluster of GPU hosts runs one JAX process per host; after
`jax.distributed.initialize` every process sees every device (`jax.devices()`) and a jitted
program whose inputs are sharded over all of them runs on all hosts at once, SPMD: every
process must make the same calls in the same order. The league itself is not SPMD (the
coordinator, evaluators, opponent draws and checkpoints are one process's business), so:

- the *leader* (process 0) runs the league as on one host; its device learners keep their
  state on its own first device. A population chunk (`learners.population.Population`) is the
  one SPMD step: the leader sends the chunk's host inputs (every agent's state, keys,
  opponents, settings) and a *recipe* naming the program to every follower, then all
  processes place the inputs with the agent axis sharded over `jax.devices()` (padded to a
  multiple of the device count), run the same jitted start and chunk, and gather the outputs
  (one jitted all-gather); the leader hands them back to its learners.
- a *follower* (process > 0) runs `follow`: receive a message, build the program its recipe
  names (once: "module:function" called with the recipe's arguments returns the program),
  run the same chunk, drop the outputs, until the leader sends `stop`.

Messages are two `broadcast_one_to_all` calls (a header of three int64, then the pickled
payload as bytes padded to a power of two: few shapes, few compiles), under one lock, so chunks
that run on several threads of the leader reach the followers in one order. Nothing here knows
the league: the recipe is opaque (experiments/distributed_league.py makes the league's).

What it costs: every chunk moves the population's states to every follower and back (the
league owns them between chunks). For a 1 M-parameter agent with Adam that is ~12 MB per agent
per chunk over the hosts' network; chunks of K updates amortise it.
"""

from __future__ import annotations

import importlib
import os
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

STOP, RUN = 0, 1

_LOCK = threading.Lock()          # one message (and its chunk) at a time, in one order
_STATE = {"seq": 0, "stopped": False, "chunks": 0}
_PROGRAMS: dict[bytes, Callable] = {}   # a follower's programs, by their pickled recipe


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, timeout_s: int = 300) -> None:
    """`jax.distributed.initialize` (no arguments: auto-detected on a Cloud TPU slice, SLURM or
    Open MPI); on the CPU backend its collectives go over gloo (TCP). Before anything else
    touches JAX's backends."""
    import jax

    if jax.config.jax_cpu_collectives_implementation is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address, num_processes, process_id,
                               initialization_timeout=int(timeout_s))


def multiprocess() -> bool:
    """True when JAX spans several processes (`initialize` ran with more than one)."""
    import jax

    return jax.process_count() > 1


def leading() -> bool:
    """True in the process that runs the league (process 0) of several."""
    import jax

    return jax.process_count() > 1 and jax.process_index() == 0


def rollout_devices() -> list:
    """The devices of a device learner's own rollout: the process's local devices; when several
    processes run population programs together, its first only (the population program shards
    the agent axis over every process's devices instead: one mesh, the same on every host)."""
    import jax

    return jax.local_devices()[:1] if jax.process_count() > 1 else jax.local_devices()


# -- messages -----------------------------------------------------------------------------


def _bucket(n: int) -> int:
    return max(1024, 1 << (max(n, 1) - 1).bit_length())


def _broadcast(message: np.ndarray) -> np.ndarray:
    from jax.experimental.multihost_utils import broadcast_one_to_all

    return np.asarray(broadcast_one_to_all(message))


def _send(kind: int, payload: Any = None) -> None:
    """The leader's half of a message (hold `_LOCK`)."""
    data = b"" if payload is None else pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    _STATE["seq"] += 1
    _broadcast(np.array([kind, len(data), _STATE["seq"]], np.int64))
    if data:
        buffer = np.zeros(_bucket(len(data)), np.uint8)
        buffer[:len(data)] = np.frombuffer(data, np.uint8)
        _broadcast(buffer)


def _receive() -> tuple[int, int, Any]:
    """A follower's half of a message: (kind, sequence number, payload)."""
    kind, size, seq = (int(v) for v in _broadcast(np.zeros(3, np.int64)))
    payload = None
    if size:
        payload = pickle.loads(_broadcast(np.zeros(_bucket(size), np.uint8))[:size].tobytes())
    return kind, seq, payload


# -- the SPMD chunk -----------------------------------------------------------------------


def spmd(program: Callable, args: tuple, num_agents: int):
    """`program(*args)` over every process's devices, the agent axis (axis 0 of every leaf of
    `args`, numpy) sharded over `jax.devices()` and padded to a multiple of their number (the
    pad repeats the first agents; their outputs are dropped). Every process calls it with the
    same arguments. Returns the outputs gathered, numpy, the first `num_agents` along axis 0."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices()
    padded = -(-num_agents // len(devices)) * len(devices)
    index = np.arange(padded) % num_agents
    sharding = NamedSharding(Mesh(np.array(devices), ("agents",)), PartitionSpec("agents"))
    placed = jax.device_put(jax.tree_util.tree_map(lambda x: np.asarray(x)[index], args), sharding)
    out = _gather(sharding.mesh)(program(*placed))   # one program gathers every output
    return jax.tree_util.tree_map(lambda x: np.asarray(x.addressable_data(0))[:num_agents], out)


_GATHERS: dict = {}


def _gather(mesh):
    """A jitted identity whose outputs are replicated on every device of `mesh`: one all-gather
    for the whole tree (not one per leaf)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    key = tuple(d.id for d in mesh.devices.flat)
    if key not in _GATHERS:
        _GATHERS[key] = jax.jit(lambda tree: tree, out_shardings=NamedSharding(mesh, PartitionSpec()))
    return _GATHERS[key]


def run(recipe: Any, program: Callable, args: tuple, num_agents: int):
    """The leader's population chunk over every process (see `spmd`): `recipe` tells the
    followers how to build `program` (("module:function", *arguments); the function called
    with the arguments returns it). Returns the gathered outputs (numpy)."""
    args = jax_to_numpy(args)
    with _LOCK:
        if _STATE["stopped"]:
            raise RuntimeError("the followers were stopped: no more distributed chunks")
        _send(RUN, (recipe, args, num_agents))
        out = spmd(program, args, num_agents)
        _STATE["chunks"] += 1
        return out


def stop() -> None:
    """The leader tells every follower to return (once; nothing when JAX spans one process)."""
    if not leading():
        return
    with _LOCK:
        if not _STATE["stopped"]:
            _STATE["stopped"] = True
            _send(STOP)


def shutdown() -> None:
    """Leaves `jax.distributed` together (every process calls it: it waits for the others), so
    no process outlives the coordination service it needs and aborts (process 0 hosts it)."""
    import jax

    if jax.process_count() > 1:
        jax.distributed.shutdown()


def chunks_run() -> int:
    """Distributed chunks this process has run (leader or follower)."""
    return _STATE["chunks"]


def build(recipe: Any) -> Callable:
    """The program a recipe names: ("module:function", *arguments) -> function(*arguments)."""
    key = pickle.dumps(recipe)
    if key not in _PROGRAMS:
        target, *arguments = recipe
        module, _, name = target.partition(":")
        _PROGRAMS[key] = getattr(importlib.import_module(module), name)(*arguments)
    return _PROGRAMS[key]


def follow(log: Callable[[str], None] | None = None) -> int:
    """A follower's loop: each message's chunk run with the leader's inputs (outputs dropped:
    the leader keeps the league's state) until the leader's `stop`. Returns the chunks run."""
    import jax

    say = log or (lambda line: print(line, flush=True))
    say(f"distributed: process {jax.process_index()} of {jax.process_count()} follows process 0's "
        f"population programs on its {jax.local_device_count()} device(s) (pid {os.getpid()})")
    expected, started = 1, time.monotonic()
    while True:
        kind, seq, payload = _receive()
        if seq != expected:
            raise RuntimeError(f"message {seq} from the leader; expected {expected}: out of step")
        expected += 1
        if kind == STOP:
            break
        recipe, args, num_agents = payload
        spmd(build(recipe), args, num_agents)
        _STATE["chunks"] += 1
        if _STATE["chunks"] == 1:
            say(f"distributed: process {jax.process_index()} ran its first chunk "
                f"({time.monotonic() - started:.1f} s after it started following)")
    say(f"distributed: process {jax.process_index()} ran {_STATE['chunks']} population chunks; "
        "the leader stopped")
    return _STATE["chunks"]


def jax_to_numpy(tree):
    """Every array of `tree` on the host (numpy); None stays None."""
    import jax

    return jax.tree_util.tree_map(np.asarray, jax.device_get(tree))
