"""The learner node: a plain class whose public methods are its RPC surface.

One learner per learning agent. It takes an iterator of batches of unrolls (format:
`agents.trajectory`; on the replay path `learners.replay.ReplayBatches`, sampled from its own
Reverb table), runs one jitted update per batch (`learners.update`: data-parallel over the
local devices, the batch axis sharded with `jax.sharding`, parameters replicated, XLA averaging
the gradients, because the loss is a mean over the batch), and serves versioned parameters.
The device path's learner (`learners.device.DeviceLearner`) is this class with its own games
fused into the update.

Public methods (the RPC surface): `update`, `learn_from_batch`, `params`,
`version`, `steps`, `snapshot`, `reset`, `metrics`, `save_checkpoint`, `close`.

Metrics follow OpenAI Five (seed 003, Sec. 4.4 and App. M):
- staleness: the learner's version when it optimises on a step minus the `policy_version`
  that produced the step (mean and max over the learnt steps of each batch);
- sample reuse (replay path): samples consumed / samples produced, where a sample is one
  Reverb item (one unroll); consumed counts items this learner used in updates, produced is
  the table's completed inserts (`rate_limiter_info.insert_stats`). `sample_reuse` is the ratio
  since the start, `sample_reuse_recent` the ratio of the increments since the previous
  `metrics()` call (OpenAI Five's "instantaneous ratio between the rate of optimizers consuming
  data and rollouts producing data").

Version: +1 per applied update and +1 on `reset`; skipped (non-finite) updates leave params,
optimiser state and version unchanged. Checkpoints (params, optimiser state, version, steps;
format, checksum, writing and migration in `learners/checkpoint.py`) go to
`<checkpoint_dir>/checkpoint.msgpack`, the one before to `checkpoint.previous.msgpack`; a
learner started with the same directory restores the newest good one (a damaged latest is set
aside with a warning) and continues the version sequence.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agents.storage import disk_full
from agents.trajectory import Unroll, validate_unroll
from learners import checkpoint, update
from learners.checkpoint import CheckpointError
from learners.config import LearnerConfig, ReplayConfig

__all__ = ["CheckpointError", "Learner", "LearnerConfig", "ReplayConfig"]

PyTree = Any


class Learner:
    """See the module docstring. `network` offers `unroll(params, obs, first, state, opp)`
    (e.g. `agents.networks.ReferenceNetwork`); `example_unroll` is one unbatched item
    (e.g. `agents.trajectory.zeros_unroll`) that fixes the structure of a batch.

    Where batches come from: `batches`, any iterator of time-major batches [T, B, ...] (one
    with `get(timeout)` may return None when none came in time), or `reverb_address`: the
    learner's Reverb table (`learners.replay.ReplayBatches`, made on the first `update`)."""

    def __init__(self, network: Any, initial_params: PyTree, config: LearnerConfig,
                 example_unroll: Unroll, *, reverb_address: str | None = None, batches=None,
                 checkpoint_dir: str | None = None,
                 teacher_params: PyTree | None = None, devices: list | None = None):
        validate_unroll(example_unroll, config.unroll_length)
        self._config, self._network = config, network
        self._example = example_unroll
        self._devices = list(devices or jax.local_devices())
        if config.batch_size % len(self._devices):
            raise ValueError(f"batch_size {config.batch_size} is not divisible by the "
                             f"{len(self._devices)} devices")
        self._replicated, self._batch_sharding = update.shardings(self._devices)
        self._optimizer, self._update_fn = update.compiled_update(
            network, config, self._devices, self._replicated, self._batch_sharding)
        self._teacher = (None if teacher_params is None
                         else jax.device_put(teacher_params, self._replicated))
        self._lock = threading.RLock()
        self._frames_per_update = config.batch_size * (config.unroll_length - 1)

        self._checkpoint_path = None
        if checkpoint_dir is not None:
            os.makedirs(checkpoint_dir, exist_ok=True)
            self._checkpoint_path = os.path.join(checkpoint_dir, checkpoint.FILENAME)
            with open(os.path.join(checkpoint_dir, "learner_config.json"), "w") as f:
                f.write(config.to_json())
        version, steps, skipped, params, opt_state = 0, 0, 0, initial_params, None
        saved = None if not self._checkpoint_path else checkpoint.restore_good(
            self._checkpoint_path, initial_params, self._optimizer,
            update.make_optimizer(config, flat=False))
        if saved is not None:
            version, steps, skipped = saved.version, saved.steps, saved.num_skipped
            params, opt_state = saved.params, saved.opt_state
        self._install(params, opt_state, version, skipped, steps)

        self._history: deque = deque(maxlen=config.metrics_window)
        self._dispatched = 0
        self._consumed = 0
        self._published: tuple[int, PyTree] | None = None
        self._started = time.monotonic()
        self._address = reverb_address
        self._batches = batches

    # ------------------------------------------------------------------ state

    def _install(self, params, opt_state, version, skipped, steps):
        params = jax.device_put(params, self._replicated)
        if opt_state is None:
            opt_state = jax.jit(self._optimizer.init, out_shardings=self._replicated)(params)
        with self._lock:
            self._state = update.TrainingState(
                params=params, opt_state=jax.device_put(opt_state, self._replicated),
                version=jax.device_put(jnp.asarray(version, jnp.int32), self._replicated),
                num_skipped=jax.device_put(jnp.asarray(skipped, jnp.int32), self._replicated),
                # a new magnet at every start, restore and reset: the parameters installed
                magnet=params if self._config.loss.magnet_weight else None)
            # steps = base_steps + (version - base_version) * frames per applied update
            self._base_version, self._base_steps = int(version), int(steps)

    def _apply(self, batch) -> None:
        with self._lock:
            self._state, metrics = self._update_fn(self._state, batch, self._teacher)
            self._history.append(metrics)
            self._dispatched += 1
            self._consumed += self._config.batch_size
        every = self._config.checkpoint_every
        if every and self._checkpoint_path and self._dispatched % every == 0:
            self.save_checkpoint()

    # ------------------------------------------------------------------ RPC surface

    def update(self, num_updates: int = 1, timeout: float | None = None) -> int:
        """Takes `num_updates` batches from the learner's batches (waiting up to `timeout`
        seconds for each) and applies one update per batch. Returns the number consumed."""
        if self._batches is None:
            if self._address is None:
                raise RuntimeError("this learner has no batches and no Reverb address; pass "
                                   "batches= or use learn_from_batch")
            from learners.replay import ReplayBatches

            self._batches = ReplayBatches(self._address, self._config, self._example,
                                          self._batch_sharding)
        get = getattr(self._batches, "get", None)
        for i in range(num_updates):
            batch = get(timeout) if get is not None else next(self._batches, None)
            if batch is None:
                return i
            self._apply(jax.device_put(batch, self._batch_sharding))
        return num_updates

    def learn_from_batch(self, batch: Unroll) -> None:
        """One update on a time-major batch [T, B, ...] given directly (no Reverb)."""
        self._apply(jax.device_put(batch, self._batch_sharding))

    def version(self) -> int:
        return int(self._state.version)

    def steps(self) -> int:
        """Agent steps learnt on by applied updates (B x (T - 1) per update), across restarts."""
        with self._lock:
            state, base_version, base_steps = self._state, self._base_version, self._base_steps
        return base_steps + (int(state.version) - base_version) * self._frames_per_update

    def params(self, min_version: int | None = None) -> tuple[int, PyTree] | None:
        """(version, params as numpy) for actors, or None if the version is below
        `min_version` (an actor passes its own version + 1 to get only newer parameters)."""
        with self._lock:
            state = self._state
        version = int(state.version)
        if min_version is not None and version < min_version:
            return None
        if self._published is None or self._published[0] != version:
            # Always finite: an update with a non-finite loss, gradient or result is skipped.
            params = jax.tree_util.tree_map(np.array, jax.device_get(state.params))
            self._published = (version, params)
        return self._published

    def snapshot(self) -> tuple[int, PyTree]:
        """Frozen (version, params) for a league player: a copy that later updates never touch."""
        version, params = self.params()
        return version, jax.tree_util.tree_map(np.copy, params)

    def reset(self, params: PyTree) -> int:
        """Exploiter reset: new parameters and a fresh optimiser state; the version goes on
        (+1) so that actors pick the new parameters up. Returns the new version."""
        with self._lock:
            version = int(self._state.version) + 1
            skipped = int(self._state.num_skipped)
            steps = self.steps()
            self._install(params, None, version, skipped, steps)
        return version

    def metrics(self, server_info: dict | None = None) -> dict[str, float]:
        """Version, steps, skipped updates, losses and staleness (averaged over the last
        `metrics_window` updates), sample reuse (see the module docstring), throughput.
        `server_info`: a Reverb `Client.server_info()` already read (it decodes every table's
        signature, which is slow; learners sharing a server read it once)."""
        with self._lock:
            history = list(self._history)
            state, consumed = self._state, self._consumed
        out: dict[str, float] = {
            "version": int(state.version), "steps": self.steps(),
            "updates_skipped": int(state.num_skipped), "updates_dispatched": self._dispatched,
            "samples_consumed": consumed,
            "frames_per_second": self._dispatched * self._frames_per_update
            / max(time.monotonic() - self._started, 1e-9)}
        if history:
            host = jax.device_get(history)
            for key in host[-1]:
                values = np.array([float(m[key]) for m in host])
                out[key] = float(values.mean())
            out["staleness_max"] = float(max(float(m["staleness_max"]) for m in host))
            out["staleness_last"] = float(host[-1]["staleness_mean"])
        if hasattr(self._batches, "metrics"):   # the replay table's inserts and sample reuse
            out.update(self._batches.metrics(consumed, server_info))
        return out

    # ------------------------------------------------------------------ checkpoints

    def write_checkpoint(self) -> str | None:
        """Writes params, optimiser state, version and steps atomically; returns the path (None
        without a run directory). Raises the OSError of a full disk, having written nothing:
        the checkpoint there stays."""
        if self._checkpoint_path is None:
            return None
        with self._lock:
            state, steps = self._state, self.steps()
        return checkpoint.save(self._checkpoint_path, checkpoint.Checkpoint(
            int(state.version), steps, int(state.num_skipped), state.params, state.opt_state))

    def save_checkpoint(self) -> str | None:
        """`write_checkpoint`; on a full disk it says so and returns None: the checkpoint there
        stays, and the next one is tried at the next interval (the learner goes on)."""
        if self._checkpoint_path is None:
            return None
        return save_checkpoints({self._checkpoint_path: self})[self._checkpoint_path]

    def close(self) -> None:
        """Stops prefetching and writes a final checkpoint (if there is a run directory)."""
        if hasattr(self._batches, "close"):
            self._batches.close()
        self._batches = None
        self.save_checkpoint()


def save_checkpoints(learners: Mapping[str, Learner]) -> dict[str, str | None]:
    """Every learner's checkpoint (`Learner.write_checkpoint`): {name: path, or None where none
    was written}; a learner group names its learners by agent. On a full disk one warning names
    every learner whose checkpoint was not written (what is there stays; each is tried again at
    its next checkpoint), not a line each."""
    written, missed, reason = {}, [], ""
    for name, learner in learners.items():
        try:
            written[name] = learner.write_checkpoint()
        except OSError as e:
            if not disk_full(e):
                raise
            written[name], reason = None, e.strerror
            missed.append(name)
    if missed:
        print(f"warning: learner checkpoint not written ({reason}) for {', '.join(missed)}: what is there "
              "stays; tried again at the next checkpoint", flush=True)
    return written
