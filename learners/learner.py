"""The learner node: a plain class whose public methods are its RPC surface.

One learner per learning agent. It reads batches of unrolls (format: `agents.trajectory`) from
its own Reverb table, runs one jitted update per batch (data-parallel over the local devices:
the batch axis is sharded with `jax.sharding`, parameters are replicated and XLA averages the
gradients, because the loss is a mean over the batch), and serves versioned parameters.

Public methods (the RPC surface): `update`, `learn_from_batch`, `params`,
`version`, `steps`, `snapshot`, `reset`, `metrics`, `save_checkpoint`, `close`.

Metrics follow OpenAI Five (seed 003, Sec. 4.4 and App. M):
- staleness: the learner's version when it optimises on a step minus the `policy_version`
  that produced the step (mean and max over the learnt steps of each batch);
- sample reuse: samples consumed / samples produced, where a sample is one Reverb item (one
  unroll); consumed counts items this learner used in updates, produced is the table's
  completed inserts (`rate_limiter_info.insert_stats`). `sample_reuse` is the ratio since the
  start, `sample_reuse_recent` the ratio of the increments since the previous `metrics()` call
  (OpenAI Five's "instantaneous ratio between the rate of optimizers consuming data and
  rollouts producing data").

Version: +1 per applied update and +1 on `reset`; skipped (non-finite) updates leave params,
optimiser state and version unchanged. Checkpoints (params, optimiser state, version, steps;
format and writing in `learners/checkpoint.py`) go to `<checkpoint_dir>/checkpoint.msgpack`;
a learner started with the same directory restores them and continues the version sequence.
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import threading
import time
from collections import deque
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import reverb
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agents import network_key
from agents.trajectory import Unroll, time_major, unflatten_like, validate_unroll
from learners import checkpoint, losses
from learners.checkpoint import CheckpointError
from learners.config import LearnerConfig, ReplayConfig

__all__ = ["CheckpointError", "Learner", "LearnerConfig", "ReplayConfig", "make_table"]

PyTree = Any


def make_table(replay: ReplayConfig, signature: Any, batch_size: int) -> reverb.Table:
    """The Reverb table a learner reads from (see `ReplayConfig`); `signature` from
    `agents.trajectory.reverb_signature`."""
    spi = replay.samples_per_insert
    error_buffer = replay.error_buffer
    if error_buffer is None:
        error_buffer = max(2.0 * batch_size * max(1.0, spi), 2.0 * max(1.0, spi))
    limiter = reverb.rate_limiters.SampleToInsertRatio(
        samples_per_insert=spi, min_size_to_sample=replay.min_size_to_sample,
        error_buffer=error_buffer)
    if replay.selector == "fifo":
        sampler, max_times_sampled = reverb.selectors.Fifo(), math.ceil(spi)
    else:
        sampler, max_times_sampled = reverb.selectors.Uniform(), 0
    return reverb.Table(name=replay.table, sampler=sampler, remover=reverb.selectors.Fifo(),
                        max_size=replay.max_size, rate_limiter=limiter,
                        max_times_sampled=max_times_sampled, signature=signature)


class TrainingState(NamedTuple):
    params: PyTree
    opt_state: PyTree
    version: jax.Array       # int32 scalar
    num_skipped: jax.Array   # int32 scalar: non-finite updates skipped


def make_optimizer(config: LearnerConfig, flat: bool = True) -> optax.GradientTransformation:
    """Adam after global-norm clipping, on the parameters flattened into one vector
    (`optax.flatten`; the same arithmetic, elementwise, on one array instead of one per
    parameter: a network of ~45 parameter arrays otherwise compiles ~45 copies of Adam's
    loops, seconds of XLA compile time). `flat=False`: the per-parameter optimiser state of
    checkpoints written before (read by `Learner` to convert them)."""
    adam = optax.adam(config.learning_rate, b1=config.adam_b1, b2=config.adam_b2,
                      eps=config.adam_eps)
    if config.max_grad_norm:
        adam = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), adam)
    return optax.flatten(adam) if flat else adam


def _all_finite(tree: PyTree) -> jax.Array:
    """Every float in the tree is finite: one check over the leaves concatenated."""
    leaves = [jnp.ravel(x) for x in jax.tree_util.tree_leaves(tree)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    return jnp.all(jnp.isfinite(jnp.concatenate(leaves))) if leaves else jnp.asarray(True)


def make_update_fn(network: Any, config: LearnerConfig, optimizer: optax.GradientTransformation,
                   time_major_input: bool = False):
    """The pure update: (state, batch-major batch [B, T], teacher params or None) -> (state, metrics);
    with `time_major_input`, the batch is time-major [T, B] (the device path's rollout).

    With a teacher, each unroll's core state is the pair (policy's, teacher's) that the actor
    stored (`actors.actor.example_unroll(..., teacher=True)`).

    Learns on steps 0..T-2 of each unroll and bootstraps from V(s_{T-1}). The update is applied
    only if the loss, every gradient and every new parameter are finite. Networks with one
    value per unit (the unit network) learn each unit from its own reward, value and advantage
    (`learners.losses`; the trajectories' rewards are per unit): their unit heads must keep the
    unit axis.
    """
    if getattr(getattr(network, "config", None), "split_units", False):
        raise ValueError("the learner needs the unit heads' unit axis (each unit learns from its "
                         "own value and advantage): use UnitNetworkConfig(split_units=False)")

    def loss_fn(params, unroll: Unroll, teacher_params, version):
        steps = unroll.steps
        # Autoregressive heads (the unit network's pointer target depends on the action type)
        # are evaluated on the actions the behaviour policy took (teacher forcing).
        taken = ({"actions_seq": steps.action}
                 if getattr(network, "unroll_takes_actions", False) else {})
        core_state, teacher_logits = unroll.core_state, None
        if teacher_params is not None:
            # The teacher follows the same observations with its own recurrent state, which
            # the actor stores beside the policy's (`actors.actor.Actor`, `teacher_params`).
            core_state, teacher_state = core_state
            teacher_out, _ = network.unroll(teacher_params, steps.observation, steps.first,
                                            teacher_state, **taken)
            teacher_logits = jax.tree_util.tree_map(lambda x: x[:-1], teacher_out.logits)
        out, _ = network.unroll(params, steps.observation, steps.first, core_state,
                                steps.opponent_observation, **taken)

        def learn(x):
            return jax.tree_util.tree_map(lambda y: y[:-1], x)

        pseudo = None
        if steps.pseudo_reward and out.pseudo_value is not None:
            # z's pseudo-rewards, each with its own value head (losses.pseudo_reward_losses).
            pseudo = {"reward": steps.pseudo_reward["reward"][:-1],
                      "active": steps.pseudo_reward["active"][:-1],
                      "value": out.pseudo_value[:-1], "bootstrap": out.pseudo_value[-1]}
        return losses.total_loss(
            config.loss, learn(out.logits), out.value[:-1], out.value[-1], learn(steps.action),
            learn(steps.behaviour_log_prob), steps.reward[:-1], steps.discount[:-1],
            teacher_logits, losses.entropy_schedule(config.loss, version), pseudo)

    def update_time_major(state: TrainingState, unroll: Unroll, teacher_params):
        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, unroll, teacher_params, state.version)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        finite = jnp.isfinite(loss) & _all_finite(grads) & _all_finite(params)

        def choose(new, old):
            return jax.tree_util.tree_map(lambda a, b: jnp.where(finite, a, b), new, old)

        staleness = (state.version - unroll.steps.policy_version[:-1]).astype(jnp.float32)
        metrics.update(finite=finite, grad_norm=optax.global_norm(grads),
                       staleness_mean=jnp.mean(staleness), staleness_max=jnp.max(staleness))
        new_state = TrainingState(
            params=choose(params, state.params), opt_state=choose(opt_state, state.opt_state),
            version=state.version + finite.astype(jnp.int32),
            num_skipped=state.num_skipped + (~finite).astype(jnp.int32))
        return new_state, metrics

    if time_major_input:
        return update_time_major

    def update(state: TrainingState, batch: Unroll, teacher_params):
        return update_time_major(state, time_major(batch), teacher_params)

    return update


def _restore(path: str, config: LearnerConfig, optimizer, params_like) -> checkpoint.Checkpoint:
    """A checkpoint with the flat optimiser state of `make_optimizer`, or one written before
    it (per-parameter Adam moments), whose moments are then flattened the way `optax.flatten`
    lays them out (the same leaf order): the run resumes with the same optimiser state."""
    try:
        return checkpoint.restore(path, params_like, jax.eval_shape(optimizer.init, params_like))
    except CheckpointError as flat_error:
        per_param = make_optimizer(config, flat=False)
        try:
            saved = checkpoint.restore(path, params_like,
                                       jax.eval_shape(per_param.init, params_like))
        except CheckpointError:
            raise flat_error from None
    structure = jax.tree_util.tree_structure(params_like)

    def flatten(node):
        if jax.tree_util.tree_structure(node) != structure:
            return node
        return jnp.concatenate([jnp.ravel(x) for x in jax.tree_util.tree_leaves(node)])

    opt_state = jax.tree_util.tree_map(
        flatten, saved.opt_state,
        is_leaf=lambda node: jax.tree_util.tree_structure(node) == structure)
    return saved._replace(opt_state=opt_state)


_COMPILED: dict = {}
_COMPILED_LOCK = threading.Lock()


def _compiled_update(network, config: LearnerConfig, devices, replicated, batch_sharding):
    """(optimizer, jitted update) shared by every learner of one network and configuration in
    a process, so that co-located learners (one per league agent) compile the update once."""
    key = (network_key(network), dataclasses.replace(config, replay=ReplayConfig()).to_json(),
           tuple(d.id for d in devices))
    with _COMPILED_LOCK:
        if key not in _COMPILED:
            optimizer = make_optimizer(config)
            update = jax.jit(make_update_fn(network, config, optimizer),
                             in_shardings=(replicated, batch_sharding, replicated),
                             out_shardings=(replicated, replicated))
            _COMPILED[key] = (optimizer, update)
        optimizer, update = _COMPILED[key]
    return optimizer, update


class _Prefetcher:
    """A background thread that samples batches from Reverb, puts them on the devices and keeps
    up to `size` of them in a queue, so the update does not wait on I/O when data is there."""

    def __init__(self, address: str, config: LearnerConfig, example: Unroll, sharding):
        self._address, self._config, self._example = address, config, example
        self._sharding = sharding
        self._queue: queue.Queue = queue.Queue(maxsize=config.prefetch_batches)
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="learner-prefetch", daemon=True)
        self._thread.start()

    def _put(self, leaves):
        batch = unflatten_like(self._example, leaves)
        batch = jax.device_put(batch, self._sharding)
        while not self._stop.is_set():
            try:
                self._queue.put(batch, timeout=0.1)
                return
            except queue.Full:
                continue

    def _run(self):
        try:
            if self._config.sampler == "dataset":
                self._run_dataset()
            else:
                self._run_client()
        except BaseException as e:  # surfaced to the caller by get()
            if not self._stop.is_set():
                self.error = e

    def _run_dataset(self):
        import tensorflow as tf

        cfg = self._config
        workers = 1 if cfg.replay.selector == "fifo" else -1
        while not self._stop.is_set():
            ds = reverb.TrajectoryDataset.from_table_signature(
                self._address, cfg.replay.table,
                max_in_flight_samples_per_worker=2 * cfg.batch_size,
                num_workers_per_iterator=workers, rate_limiter_timeout_ms=500)
            ds = ds.batch(cfg.batch_size, drop_remainder=True).prefetch(1)
            for sample in ds.as_numpy_iterator():   # ends after a rate-limiter timeout
                self._put(tf.nest.flatten(sample.data))
                if self._stop.is_set():
                    return

    def _run_client(self):
        cfg = self._config
        client = reverb.Client(self._address)
        samples = client.sample(cfg.replay.table, num_samples=2 ** 62, emit_timesteps=False)
        while not self._stop.is_set():
            items = [next(samples).data for _ in range(cfg.batch_size)]
            self._put([np.stack(column) for column in zip(*items)])

    def get(self, timeout: float | None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.error is not None:
                raise RuntimeError("the learner's Reverb sampler failed") from self.error
            try:
                return self._queue.get(timeout=0.1)
            except queue.Empty:
                if deadline is not None and time.monotonic() > deadline:
                    return None

    def close(self):
        self._stop.set()
        self._thread.join(timeout=2.0)


class Learner:
    """See the module docstring. `network` offers `unroll(params, obs, first, state, opp)`
    (e.g. `agents.networks.ReferenceNetwork`); `example_unroll` is one unbatched item
    (e.g. `agents.trajectory.zeros_unroll`) that fixes the structure read from Reverb."""

    def __init__(self, network: Any, initial_params: PyTree, config: LearnerConfig,
                 example_unroll: Unroll, *, reverb_address: str | None = None,
                 checkpoint_dir: str | None = None,
                 teacher_params: PyTree | None = None, devices: list | None = None):
        validate_unroll(example_unroll, config.unroll_length)
        self._config, self._network = config, network
        self._example = example_unroll
        self._devices = list(devices or jax.local_devices())
        if config.batch_size % len(self._devices):
            raise ValueError(f"batch_size {config.batch_size} is not divisible by the "
                             f"{len(self._devices)} devices")
        mesh = Mesh(np.array(self._devices), ("batch",))
        self._replicated = NamedSharding(mesh, PartitionSpec())
        self._batch_sharding = NamedSharding(mesh, PartitionSpec("batch"))
        self._optimizer, self._update_fn = _compiled_update(
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
        if self._checkpoint_path and os.path.exists(self._checkpoint_path):
            saved = _restore(self._checkpoint_path, config, self._optimizer, initial_params)
            version, steps, skipped = saved.version, saved.steps, saved.num_skipped
            params, opt_state = saved.params, saved.opt_state
        self._install(params, opt_state, version, skipped, steps)

        self._history: deque = deque(maxlen=config.metrics_window)
        self._dispatched = 0
        self._consumed = 0
        self._last_reuse = (0, 0)
        self._published: tuple[int, PyTree] | None = None
        self._started = time.monotonic()
        self._address = reverb_address
        self._client = reverb.Client(reverb_address) if reverb_address else None
        self._prefetcher = None

    # ------------------------------------------------------------------ state

    def _install(self, params, opt_state, version, skipped, steps):
        params = jax.device_put(params, self._replicated)
        if opt_state is None:
            opt_state = jax.jit(self._optimizer.init, out_shardings=self._replicated)(params)
        with self._lock:
            self._state = TrainingState(
                params=params, opt_state=jax.device_put(opt_state, self._replicated),
                version=jax.device_put(jnp.asarray(version, jnp.int32), self._replicated),
                num_skipped=jax.device_put(jnp.asarray(skipped, jnp.int32), self._replicated))
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
        """Samples `num_updates` batches from Reverb (waiting up to `timeout` seconds for each)
        and applies one update per batch. Returns the number of batches consumed."""
        if self._address is None:
            raise RuntimeError("this learner has no Reverb address; use learn_from_batch")
        if self._prefetcher is None:
            self._prefetcher = _Prefetcher(self._address, self._config, self._example,
                                           self._batch_sharding)
        for i in range(num_updates):
            batch = self._prefetcher.get(timeout)
            if batch is None:
                return i
            self._apply(batch)
        return num_updates

    def learn_from_batch(self, batch: Unroll) -> None:
        """One update on a batch-major batch [B, T, ...] given directly (no Reverb)."""
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
        if self._client is not None:
            info = (server_info or self._client.server_info())[self._config.replay.table]
            inserted = int(info.rate_limiter_info.insert_stats.completed)
            sampled = int(info.rate_limiter_info.sample_stats.completed)
            out.update(samples_inserted=inserted, samples_sampled_by_server=sampled,
                       table_size=int(info.current_size),
                       sample_reuse=consumed / inserted if inserted else float("nan"))
            d_consumed, d_inserted = consumed - self._last_reuse[0], inserted - self._last_reuse[1]
            out["sample_reuse_recent"] = d_consumed / d_inserted if d_inserted else float("nan")
            self._last_reuse = (consumed, inserted)
        return out

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self) -> str | None:
        """Writes params, optimiser state, version and steps atomically; returns the path."""
        if self._checkpoint_path is None:
            return None
        with self._lock:
            state, steps = self._state, self.steps()
        return checkpoint.save(self._checkpoint_path, checkpoint.Checkpoint(
            int(state.version), steps, int(state.num_skipped), state.params, state.opt_state))

    def close(self) -> None:
        """Stops prefetching and writes a final checkpoint (if there is a run directory)."""
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None
        self.save_checkpoint()
