"""The population program: the chunks of several device learners as ONE jitted program.

PureJaxRL and JaxMARL train populations in one compiled program, `jax.jit(jax.vmap(train))`;
Podracer's Anakin (Hessel et al. 2021, Sec. 3) fills a device with one program of
environment, acting and learning. A learner group's agents that share a network, a rollout
and the structure of their loss (`learners.update.shared_config`) play and learn their chunks
together: each agent's training state, games, opponents, teacher and keys are stacked on a
leading agent axis and `learners.device.make_chunk_fn` is vmapped over it, so the group costs
one dispatch per chunk instead of one per agent, and the device sees N agents' batches at once.

What differs between the agents -- learning rate, exploration, entropy weight and its schedule,
KL-to-teacher weight (`learners.update.AGENT_SETTINGS`: a main agent's and an exploiter's roles,
a race's own KL weight) -- is data along
the agent axis. The agents stay `DeviceLearner`s: each keeps its own state, versions,
checkpoints, resets and metrics (`DeviceLearner.chunk_inputs` / `chunk_done`), so a reset
replaces one agent's slice (the next chunk stacks the new state), a run directory written
before resumes, and every agent's update is the one it would make alone with its own keys
(`tests/test_population.py` checks it against each agent's own program).

Many hosts (`learners.distributed`): when JAX spans several processes and the population was
given a `recipe` (how another process builds the same program), its chunk runs over every
process's devices, the agent axis sharded over `jax.devices()`; the agents' states stay the
league's, on this process (`tests/test_distributed.py`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agents import network_key
from learners import distributed
from learners.device import DeviceLearner, make_chunk_fn, program_id
from learners.update import (
    AGENT_SETTINGS,
    TrainingState,
    agent_settings,
    make_optimizer,
    make_update_fn,
    shared_config,
)

_COMPILED: dict = {}
_COMPILED_LOCK = threading.Lock()


def population_key(learner: DeviceLearner) -> tuple:
    """Agents with equal keys can share a population program: the same network, rollout, chunk
    length and loss structure, and alike in having a teacher and a source of z."""
    return (network_key(learner.network), shared_config(learner.config).to_json(), learner.rollout.key,
            learner.updates_per_chunk, learner.teacher is None, learner.z_source is None)


def _make_population_chunk(update, rollout, num_updates: int, exploration):
    """The vmapped chunk of one agent (`make_chunk_fn`) with the agent's settings as an input."""

    def chunk(state, carry, opponents, teacher, key, settings):
        epsilon = settings["exploration"] if exploration is None else exploration

        def agent_update(state, unroll, teacher):
            return update(state, unroll, teacher, settings)

        return make_chunk_fn(agent_update, rollout, num_updates, epsilon)(state, carry, opponents, teacher, key)

    return chunk


def _compiled(learner: DeviceLearner, exploration):
    key = (*population_key(learner), exploration)
    with _COMPILED_LOCK:
        if key not in _COMPILED:
            config = shared_config(learner.config)
            update = make_update_fn(learner.network, config, make_optimizer(config))
            rollout = learner.rollout

            def start(params, version, opponents, teacher, k, races, z_source, settings):
                epsilon = settings["exploration"] if exploration is None else exploration
                return rollout.start(params, version, opponents, teacher, k, races, z_source,
                                     exploration=epsilon)

            chunk = _make_population_chunk(update, rollout, learner.updates_per_chunk, exploration)
            _COMPILED[key] = (jax.jit(jax.vmap(start)), jax.jit(jax.vmap(chunk)), program_id(("population", key)))
        return _COMPILED[key]


def stack(trees: Sequence[Any]):
    """Pytrees of one structure stacked on a new leading (agent) axis; None stays None."""
    if trees[0] is None:
        return None
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)


def unstack(tree, n: int) -> list:
    """The inverse of `stack`: one pytree per agent."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return [jax.tree_util.tree_unflatten(treedef, [leaf[i] for leaf in leaves]) for i in range(n)]


class AgentSlice:
    """One agent's training state as a view of the population's states on the agent axis
    (`learners.update.TrainingState`'s fields, each sliced on the device the first time it is
    read): the state stays stacked between chunks, and an agent's parameters leave the stack only
    when someone reads them (a snapshot, a checkpoint, an opponent)."""

    def __init__(self, stacked, index: int):
        self._stacked, self._index, self._fields = stacked, index, {}

    def __getattr__(self, name: str):
        if name not in TrainingState._fields:
            raise AttributeError(name)
        if name not in self._fields:
            whole = getattr(self._stacked, name)
            self._fields[name] = None if whole is None else jax.tree_util.tree_map(
                lambda x: x[self._index], whole)
        return self._fields[name]


class Population:
    """The chunks of `learners` (`DeviceLearner`s with one `population_key`) as one program."""

    def __init__(self, learners: Sequence[DeviceLearner], recipe=None):
        self.learners = list(learners)
        # ("module:function", *arguments): what builds this program in another process
        # (`learners.distributed.build`); None: this process's devices only
        self.recipe = recipe
        if not self.learners:
            raise ValueError("a population needs at least one learner")
        keys = {population_key(learner) for learner in self.learners}
        if len(keys) > 1:
            raise ValueError("the learners of a population must share their network, rollout, chunk "
                             "length and loss structure (learners.population.population_key)")
        settings = [agent_settings(learner.config) for learner in self.learners]
        self.settings = {name: jnp.asarray([s[name] for s in settings], jnp.float32) for name in AGENT_SETTINGS}
        # A constant epsilon stays a Python number: networks that sample their own heads (the
        # unit network) take no exploration, and the program is the agents' own.
        epsilons = {s["exploration"] for s in settings}
        exploration = float(epsilons.pop()) if len(epsilons) == 1 else None
        self._start, self._chunk, program = _compiled(self.learners[0], exploration)
        for learner in self.learners:   # what each agent's metrics name as its program
            learner.program_id = program
        self._stacked, self._views = None, []   # the last chunk's states and each agent's view of its slice
        self._teachers = stack([learner.teacher for learner in self.learners])
        self._z_sources = stack([learner.z_source for learner in self.learners])

    def play_and_learn(self, opponents: Sequence[Any], races: Sequence[Any] | None = None) -> list:
        """One chunk of every agent against its `opponents` (`actors.rollout.Opponents`, one per
        agent; `races` one [B, 2] per agent for games with races), as one program. Returns each
        agent's results (`actors.rollout.Results`, numpy), as `DeviceLearner.play_and_learn`."""
        n, started = len(self.learners), time.perf_counter()
        if len(opponents) != n or (races is not None and len(races) != n):
            raise ValueError(f"a population of {n} agents needs opponents (and races) for each")
        inputs = [learner.chunk_inputs() for learner in self.learners]
        states = self._states_of([state for state, _, _ in inputs])
        k_start = jnp.stack([k for _, k, _ in inputs])
        k_chunk = jnp.stack([k for _, _, k in inputs])
        opponents = stack(list(opponents))
        races = None if races is None else jnp.asarray(np.stack([np.asarray(r) for r in races]))
        args = (states, opponents, self._teachers, k_start, k_chunk, races, self._z_sources, self.settings)
        if self.recipe is not None and distributed.multiprocess():
            new_states, metrics, first, results = distributed.run(self.recipe, self.program, args, n)
            # the league's copy of the agents' states: on this process's devices, as before
            new_states = jax.device_put(new_states, self.learners[0]._replicated)
        else:
            new_states, metrics, first, results = self.program(*args)
        # the states stay on the device, stacked; each agent's is a view of its slice
        self._stacked = new_states
        self._views = [AgentSlice(new_states, i) for i in range(n)]
        metrics, results = jax.device_get((metrics, first + results))
        for learner in self.learners:
            if learner.first_chunk_seconds is None:
                learner.first_chunk_seconds = time.perf_counter() - started
        out = []
        for learner, (state, _, _), view, m, r in zip(
                self.learners, inputs, self._views, unstack(metrics, n), unstack(results, n)):
            out.append(learner.chunk_done(state, view, m, r))
        return out

    def _states_of(self, states: list) -> Any:
        """The agents' states on the agent axis for the next chunk: the last chunk's stacked
        states, kept on the device, where each agent's state is still its view of them; an
        agent whose state was replaced since (a reset, a reset that won over the chunk) is
        written into its slice (`.at[i].set`). Stacked anew the first time."""
        if self._stacked is None:
            return stack(states)
        stacked = self._stacked
        for i, (state, view) in enumerate(zip(states, self._views)):
            if state is not view:
                stacked = jax.tree_util.tree_map(lambda whole, part, i=i: whole.at[i].set(part), stacked, state)
        return stacked

    def program(self, states, opponents, teachers, k_start, k_chunk, races, z_sources, settings):
        """The chunk of every agent (inputs stacked on the agent axis): (new states, metrics,
        the start's results, the chunk's results). The same calls on every process when the
        inputs span several (`learners.distributed.spmd`)."""
        carry, first = self._start(states.params, states.version, opponents, teachers,
                                   k_start, races, z_sources, settings)
        new_states, _, metrics, results = self._chunk(states, carry, opponents, teachers,
                                                      k_chunk, settings)
        return new_states, metrics, first, results
