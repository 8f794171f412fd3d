"""A league over several hosts' devices: `--distributed.*` (`learners.distributed`).

Every host runs the same command with its own `--distributed.process_id` (or, on a Cloud TPU
slice, `--distributed.auto`: JAX finds the slice's hosts itself). Process 0 runs the league as
on one host (coordinator, evaluators, learner groups, the run directory); the others follow:
each population chunk of process 0's learner groups runs over every process's devices, the
agent axis sharded over `jax.devices()`. Only the in-process runner: the learner groups must
live in process 0's JAX runtime.

The recipe a population gives the followers (`experiments.nodes.make_populations`) is the resolved run
configuration, the group's agents and the population's index: a follower builds the same
`DeviceLearnerGroup` (no coordinator, a scratch run directory: it writes nothing of the run's)
and takes that population's program.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile

from absl import flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("distributed.coordinator_address", None,
                        "several hosts, one league (jax.distributed): HOST:PORT of process 0, the same "
                        "on every host; process 0 runs the league, the others lend it their devices")
    flags.DEFINE_integer("distributed.num_processes", None, "several hosts: how many processes (one per host)")
    flags.DEFINE_integer("distributed.process_id", None, "several hosts: this process's index, 0 runs the league")
    flags.DEFINE_bool("distributed.auto", False, "several hosts: jax.distributed.initialize() finds them "
                      "(Cloud TPU slice, SLURM, Open MPI)")
    flags.DEFINE_integer("distributed.timeout_seconds", 300, "several hosts: how long to wait for all of them")


def requested() -> bool:
    return bool(FLAGS["distributed.auto"].value or FLAGS["distributed.coordinator_address"].value)


def start() -> str | None:
    """With `--distributed.*`: starts `jax.distributed` (before anything else uses JAX) and
    returns this process's first-screen line; None without. ValueError for a runner other
    than inprocess."""
    if not requested():
        return None
    if FLAGS.runner != "inprocess":
        raise ValueError(f"--distributed.* runs the league in process 0 (--runner=inprocess); got --runner={FLAGS.runner}")
    from learners import distributed

    if FLAGS["distributed.auto"].value:
        distributed.initialize(timeout_s=FLAGS["distributed.timeout_seconds"].value)
    else:
        distributed.initialize(FLAGS["distributed.coordinator_address"].value,
                               FLAGS["distributed.num_processes"].value,
                               FLAGS["distributed.process_id"].value,
                               timeout_s=FLAGS["distributed.timeout_seconds"].value)
    import jax

    return (f"distributed: process {jax.process_index()} of {jax.process_count()}, "
            f"{jax.device_count()} devices in all ({jax.local_device_count()} here); population programs' "
            f"agents are sharded over all of them")


def is_follower() -> bool:
    """True in a process other than 0 of a distributed league."""
    import jax

    return requested() and jax.process_index() != 0


def follow() -> int:
    """A follower's whole run: process 0's population chunks until it stops. Exit status 0."""
    from agents.memory import release_periodically
    from learners import distributed

    release_periodically()   # freed memory back to the OS, as in every league process (agents/memory.py)
    try:
        distributed.follow()
    finally:
        for group in _GROUPS.values():   # the scratch run directories
            shutil.rmtree(group.config.run_dir, ignore_errors=True)
    distributed.shutdown()
    return 0


def stop() -> None:
    """Process 0, at the end of its run (however it ends): the followers return."""
    if requested():
        from learners import distributed

        distributed.stop()
        distributed.shutdown()


_GROUPS: dict = {}


def population_program(config: dict, agent_ids: list[str], agent_indices: dict, name: str, index: int):
    """The program of population `index` of the learner group process 0 built from these (a
    follower's `DeviceLearnerGroup` with no coordinator, in a scratch run directory)."""
    from experiments.config import RunConfig
    from experiments.nodes import DeviceLearnerGroup

    key = (repr(sorted(config.items())), tuple(agent_ids), name)
    if key not in _GROUPS:
        run = RunConfig.from_dict(config)
        run = dataclasses.replace(run, run_dir=tempfile.mkdtemp(prefix="league-follower-"))
        _GROUPS[key] = DeviceLearnerGroup(run, agent_ids, agent_indices, coordinator=None, name=name)
    return _GROUPS[key].populations[index].program
