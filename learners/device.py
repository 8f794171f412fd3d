"""The device learner: a learner that plays its own games (Podracer's Anakin).

Hessel et al. 2021, "Podracer architectures for scalable reinforcement learning", Sec. 3
(Anakin): the environment, acting and learning in one compiled program on the device. One call
of `DeviceLearner.play_and_learn` is a chunk:

    start:  reset the B games for this chunk's opponents and play one step
    K times (one lax.scan):  play T - 1 steps (the rollout)  ->  one update on the T-step unroll

so nothing per step crosses to the host; between chunks the node (experiments/nodes/device_learners.py:
`DeviceLearnerGroup`) draws the next opponents from the coordinator's match distribution and
reports the chunk's results in one batch. The rollout is passed in (any object with
`start(params, version, opponents, teacher, key, races)` and `unroll(params, version, opponents,
teacher, carry, key)`, e.g. `actors.rollout.DeviceRollout`): where experience comes from is not
the learner's business. The update is the replay path's (`learners.update.make_update_fn`, on
the time-major unroll), and so are the parameters, versions, snapshots, resets, metrics and
checkpoints (`Learner`).

Several devices: the rollout splits the B games over them (`actors.rollout.DeviceRollout`'s
`devices`) and the parameters are replicated, so XLA partitions the whole chunk and averages
the gradients over the devices (the loss is a mean over the batch): the same update as on one.

A step's `policy_version` is the learner's version when it was played: staleness is 0 except for
an unroll's first step (played before the previous update) and sample reuse is 1 (each step is
learnt on once).
"""

from __future__ import annotations

import functools
import threading
import time
import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agents import network_key
from learners.config import LearnerConfig
from learners.learner import Learner
from learners.update import agent_settings, make_optimizer, make_update_fn, shared_config

PyTree = Any

_COMPILED: dict = {}
_COMPILED_LOCK = threading.Lock()


def make_chunk_fn(update, rollout, num_updates: int, exploration: float = 0.0):
    """The pure chunk: (state, carry, opponents, teacher, key) -> (state, carry, metrics averaged
    over the K updates (staleness_max: the max), results summed over them). `exploration`:
    epsilon of the learner's exploring behaviour policy (`DeviceRollout.step_games`)."""

    def chunk(state, carry, opponents, teacher, key):
        def body(c, k):
            state, carry = c
            carry, unroll, results = rollout.unroll(state.params, state.version, opponents,
                                                    teacher, carry, k, exploration)
            state, metrics = update(state, unroll, teacher)
            return (state, carry), (metrics, results)

        (state, carry), (metrics, results) = jax.lax.scan(
            body, (state, carry), jax.random.split(key, num_updates))
        summary = {k: (jnp.max(v) if k == "staleness_max" else jnp.mean(v.astype(jnp.float32)))
                   for k, v in metrics.items()}
        summary["finite"] = jnp.mean(metrics["finite"].astype(jnp.float32))
        return state, carry, summary, jax.tree_util.tree_map(lambda x: x.sum(0), results)

    return chunk


def _compiled(network, config: LearnerConfig, rollout, num_updates: int):
    """(jitted start, jitted chunk) shared by every device learner of one network, rollout,
    chunk size and loss structure in a process: co-located learners compile once.

    What differs between agents of one structure -- learning rate, entropy weight and its
    schedule, KL-to-teacher weight (`learners.update.AGENT_SETTINGS`: a role's and a race's own
    values) -- is an input of the program (`agent_settings`), as in the population program, so
    agents of different roles and races share it. What stays in the key: the network, the
    rollout (a main agent's scripted slots), the chunk length, the loss structure
    (`shared_config`: e.g. a main agent's magnet term, off for exploiters) and the behaviour
    policy's epsilon (a Python constant: networks that sample their own heads take none).
    Having a teacher or a source of z or not changes the inputs' structure: `jax.jit` traces
    those once each."""
    shared = shared_config(config)
    key = (network_key(network), shared.to_json(), rollout.key, num_updates, config.exploration)
    with _COMPILED_LOCK:
        if key not in _COMPILED:
            update = make_update_fn(network, shared, make_optimizer(shared))

            def chunk(state, carry, opponents, teacher, key, settings):
                def agent_update(state, unroll, teacher):
                    return update(state, unroll, teacher, settings)
                return make_chunk_fn(agent_update, rollout, num_updates, config.exploration)(
                    state, carry, opponents, teacher, key)

            start = functools.partial(rollout.start, exploration=config.exploration)
            _COMPILED[key] = (jax.jit(start), jax.jit(chunk), program_id(key))
        return _COMPILED[key]


def program_id(key) -> int:
    """A program's number, the same in every process for the same key (a progress line groups
    the agents that share a program by it)."""
    return zlib.crc32(repr(key).encode()) % 2 ** 24


def compiled_programs() -> int:
    """The distinct device-learner programs this process holds (`_compiled`'s keys)."""
    with _COMPILED_LOCK:
        return len(_COMPILED)


class DeviceLearner(Learner):
    """A `Learner` whose experience comes from its own games on its device: see the module
    docstring. `example_unroll` fixes the trajectory structure (as for the replay path);
    `z_source`: the agent's z (`actors.rollout.ZSource`; None: z = 0)."""

    def __init__(self, network: Any, initial_params: PyTree, config: LearnerConfig,
                 example_unroll, rollout, *, updates_per_chunk: int = 8, seed: int = 0,
                 checkpoint_dir: str | None = None, teacher_params: PyTree | None = None,
                 z_source=None, devices: list | None = None):
        if updates_per_chunk < 1:
            raise ValueError(f"updates_per_chunk must be >= 1; got {updates_per_chunk}")
        if rollout.batch_size != config.batch_size or rollout.unroll_length != config.unroll_length:
            raise ValueError(f"the rollout plays {rollout.batch_size} games x {rollout.unroll_length} "
                             f"steps; the learner's batch is {config.batch_size} x {config.unroll_length}")
        devices = list(devices or rollout.devices)
        if [d.id for d in devices] != [d.id for d in rollout.devices]:
            raise ValueError("the learner and its rollout must use the same devices")
        super().__init__(network, initial_params, config, example_unroll,
                         checkpoint_dir=checkpoint_dir, teacher_params=teacher_params,
                         devices=devices)
        self._rollout, self._updates_per_chunk = rollout, int(updates_per_chunk)
        self._start_fn, self._chunk_fn, self.program_id = _compiled(network, config, rollout,
                                                                    self._updates_per_chunk)
        # wall seconds of this process's first chunk of the agent (its program's compile, or its
        # load from the persistent cache, and K updates): None before it
        self.first_chunk_seconds: float | None = None
        self._closed = False
        self._settings = jax.device_put({name: jnp.float32(value) for name, value in agent_settings(config).items()},
                                        self._replicated)
        self._key = jax.random.PRNGKey(seed)
        self._z_source = None if z_source is None else jax.device_put(z_source)
        self.games_played = 0

    def current_params(self):
        """The current parameters, on the device (for self-play and co-located opponents)."""
        with self._lock:
            return self._state.params

    @property
    def updates_per_chunk(self) -> int:
        return self._updates_per_chunk

    def play_and_learn(self, opponents, races=None):
        """One chunk against `opponents` (`actors.rollout.Opponents`; `races` [B, 2] for games
        with races): K updates, each on an unroll of the B games. Returns the chunk's results
        per opponent slot (`actors.rollout.Results` of numpy arrays). An exploiter reset made
        while the chunk ran wins: the chunk's parameters are dropped, its games still count."""
        started = time.perf_counter()
        state, k_start, k_chunk = self.chunk_inputs()
        opponents, races = jax.device_put((opponents, races), self._replicated)
        carry, first = self._start_fn(state.params, state.version, opponents, self._teacher,
                                      k_start, races, self._z_source)
        new_state, _, metrics, results = self._chunk_fn(state, carry, opponents, self._teacher,
                                                        k_chunk, self._settings)
        results = jax.device_get(first + results)
        if self.first_chunk_seconds is None:
            self.first_chunk_seconds = time.perf_counter() - started
        return self.chunk_done(state, new_state, metrics, results)

    # -- a chunk in two halves: what a population program (learners.population) needs of it --

    def chunk_inputs(self):
        """(state, start key, chunk key) of the agent's next chunk; advances its key."""
        with self._lock:
            state = self._state
        self._key, k_start, k_chunk = jax.random.split(self._key, 3)
        return state, k_start, k_chunk

    def chunk_done(self, state, new_state, metrics, results):
        """Takes a chunk's outcome (played from `state`): its new state, unless a reset came
        while it ran (the reset wins; its games still count); its metrics, games and
        checkpoint. Returns `results` (numpy)."""
        k = self._updates_per_chunk
        with self._lock:
            if self._closed:   # a chunk that finished after the final checkpoint: dropped
                return results
            if self._state is state:
                self._state = new_state
                self._history.append(metrics)
                self._dispatched += k
                self._consumed += k * self._config.batch_size
        self.games_played += int(np.sum(results.wins + results.draws + results.losses))
        every = self._config.checkpoint_every
        if every and self._checkpoint_path and self._dispatched % every < k:
            self.save_checkpoint()
        return results

    @property
    def network(self):
        return self._network

    @property
    def config(self) -> LearnerConfig:
        return self._config

    @property
    def teacher(self):
        return self._teacher

    @property
    def z_source(self):
        return self._z_source

    @property
    def rollout(self):
        return self._rollout

    def metrics(self, server_info: dict | None = None) -> dict[str, float]:
        """`Learner.metrics`, with sample reuse 1 (each played step is learnt on once) and the
        games played."""
        out = super().metrics(server_info)
        out.update(sample_reuse=1.0, sample_reuse_recent=1.0, games_played=self.games_played,
                   program=float(self.program_id))
        if self.first_chunk_seconds is not None:
            out["first_chunk_seconds"] = self.first_chunk_seconds
        return out

    def close(self) -> None:
        """The final checkpoint; a chunk still running when it is written is dropped when it
        ends (stopping does not wait for it)."""
        with self._lock:
            self._closed = True
        super().close()
