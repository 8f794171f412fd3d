"""The replay path's data for a learner: its Reverb table (`make_table`) and the iterator of
batches sampled from it (`ReplayBatches`: a background thread samples, puts each batch on the
devices and keeps a few ready), with the table's sample-reuse metrics.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from typing import Any

import jax
import reverb

from agents.trajectory import Unroll, stack_unrolls, time_major, unflatten_like
from learners.config import LearnerConfig, ReplayConfig

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


class ReplayBatches:
    """An iterator of time-major batches [T, B] from a learner's Reverb table: a background thread samples
    them, puts them on the devices (`sharding`) and keeps up to `config.prefetch_batches` ready,
    so the update does not wait on I/O when data is there. `get(timeout)`: the next batch, or
    None after `timeout` seconds without one; `metrics(consumed)`: the table's inserts and the
    sample reuse (`Learner.metrics`)."""

    def __init__(self, address: str, config: LearnerConfig, example: Unroll, sharding):
        self._address, self._config, self._example = address, config, example
        self._sharding = sharding
        self._queue: queue.Queue = queue.Queue(maxsize=config.prefetch_batches)
        self._stop = threading.Event()
        self._client: reverb.Client | None = None
        self._last_reuse = (0, 0)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="learner-prefetch", daemon=True)
        self._thread.start()

    def _put(self, batch: Unroll):
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
                # tf.data batches items batch-major: the one turn into the batches' layout
                self._put(time_major(unflatten_like(self._example, tf.nest.flatten(sample.data))))
                if self._stop.is_set():
                    return

    def _run_client(self):
        cfg = self._config
        client = reverb.Client(self._address)
        samples = client.sample(cfg.replay.table, num_samples=2 ** 62, emit_timesteps=False)
        while not self._stop.is_set():
            items = [unflatten_like(self._example, next(samples).data) for _ in range(cfg.batch_size)]
            self._put(stack_unrolls(items))

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

    def __iter__(self):
        return self

    def __next__(self):
        return self.get(None)

    def metrics(self, consumed: int, server_info: dict | None = None) -> dict[str, float]:
        """The table's completed inserts and samples, its size, and the sample reuse: samples
        `consumed` by the learner / samples inserted, since the start and since the previous
        call (`Learner.metrics`). `server_info`: a `Client.server_info()` already read."""
        if self._client is None:
            self._client = reverb.Client(self._address)
        info = (server_info or self._client.server_info())[self._config.replay.table]
        inserted = int(info.rate_limiter_info.insert_stats.completed)
        sampled = int(info.rate_limiter_info.sample_stats.completed)
        out = dict(samples_inserted=inserted, samples_sampled_by_server=sampled,
                   table_size=int(info.current_size),
                   sample_reuse=consumed / inserted if inserted else float("nan"))
        d_consumed, d_inserted = consumed - self._last_reuse[0], inserted - self._last_reuse[1]
        out["sample_reuse_recent"] = d_consumed / d_inserted if d_inserted else float("nan")
        self._last_reuse = (consumed, inserted)
        return out

    def close(self):
        self._stop.set()
        self._thread.join(timeout=2.0)
