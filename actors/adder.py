"""The replay path actor's adder (Acme's adder): writes one actor's unrolls to its learner's
Reverb table.

    adder = UnrollAdder(address_of, table, max_queued, templates, heads, agent_id)
    adder.start()                               # a writer at the address `address_of()` names
    adder.add(chunk, core_state, stop)          # an unroll's [T, B] chunk: B items of [T]

`unroll_batch` turns the actor's time-major chunk into `agents.trajectory`'s items (its dtypes);
a thread of the writer (`_UnrollWriter`) hands them to Reverb, one item per game and whole
unrolls, and the actor's queue to it is bounded (`max_queued`): when the table's rate limiter
holds inserts back, `add` waits. A server that is no longer where the writer writes (the
learner's process restarted at another port) fails the writer with ReplayServerMoved; the actor
then `drop`s it and `start`s a new one where `address_of()` says the server is now.
"""

from __future__ import annotations

import queue
import threading
import time

import jax
import numpy as np

from agents.trajectory import Step, Unroll, batch_size, take

# Items a closing writer lets wait for the server's confirmation (Reverb warns beyond ~50).
CLOSING_UNCONFIRMED = 16
# A writer whose items have waited this long for the server asks whether the server is still
# where it writes (`_UnrollWriter(check=...)`): Reverb's client cannot tell a server that is
# gone from a rate limiter that holds inserts back (both time out), and retries for ever.
STALL_CHECK_SECONDS = 5.0


class ReplayServerMoved(Exception):
    """The learner's Reverb server answers at another address now (its process restarted)."""


class _UnrollWriter:
    """Writes batches of unrolls to Reverb on a thread (one item per game, whole unrolls).
    `check(address)`, called when items have waited STALL_CHECK_SECONDS for the server, raises
    when the server is no longer at `address` (the writer then fails with that error)."""

    def __init__(self, address: str, table: str, max_queued: int, check=None):
        import reverb  # TF is loaded only by processes that write

        from agents.trajectory import write_unroll

        self._write_unroll = write_unroll
        self.address = address
        self._check = check
        self._client = reverb.Client(address)
        self._writer = self._client.trajectory_writer(num_keep_alive_refs=1)
        self._table = table
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued)
        self.error: BaseException | None = None
        self.items_written = 0
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="unroll-writer", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            try:
                n = batch_size(batch)
                for b in range(n):
                    if self._closing.is_set() and not self._accepts_more():
                        return
                    self._write_unroll(self._writer, self._table, take(batch, b))
                self.items_written += n
                self._wait_until_sent(pending=0)
            except BaseException as e:  # surfaced by put()
                self.error = e
                return

    def _accepts_more(self) -> bool:
        """Closing: whether the table still takes items (what is queued is written while it
        does). When its rate limiter holds them back (the learners have stopped), the items
        written from here on would pile up unconfirmed, one Reverb warning each ("The number
        of pending items is alarmingly high"): the writer stops instead."""
        try:
            self._writer.flush(block_until_num_items=CLOSING_UNCONFIRMED, timeout_ms=500)
            return True
        except Exception as e:  # reverb's DeadlineExceededError: the table takes no more
            if "Deadline" not in type(e).__name__:
                raise
            return False

    def _wait_until_sent(self, pending: int) -> None:
        """Blocks until at most `pending` items wait to be confirmed by the server: when the
        table's rate limiter holds inserts back, the actor waits here instead of piling up
        items in memory (its queue fills and `put` blocks)."""
        checked = time.monotonic()
        while not self._closing.is_set():
            try:
                self._writer.flush(block_until_num_items=pending, timeout_ms=200)
                return
            except Exception as e:  # reverb's DeadlineExceededError: rate-limited, or gone
                if "Deadline" not in type(e).__name__:
                    raise
            if self._check is not None and time.monotonic() - checked >= STALL_CHECK_SECONDS:
                self._check(self.address)
                checked = time.monotonic()

    def put(self, batch: Unroll, stop: threading.Event):
        while True:
            if self.error is not None:
                raise RuntimeError("the actor's Reverb writer failed") from self.error
            try:
                self._queue.put(batch, timeout=0.1)
                return
            except queue.Full:
                if stop.is_set():
                    return

    def close(self, timeout: float = 2.0):
        """Stops writing; what the rate limiter still holds back after `timeout` is dropped."""
        self._closing.set()
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:   # the end marker, once there is room
            try:
                self._queue.put(None, timeout=0.1)
                break
            except queue.Full:
                continue
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        try:
            self._writer.flush(timeout_ms=int(timeout * 1000))
        except Exception:  # noqa: BLE001 -- a blocked table (rate limiter) at shutdown
            pass
        self._writer.close()



def unroll_batch(chunk: dict, core_state, obs_template, opponent_template, heads) -> Unroll:
    """An unroll's time-major chunk (the actor's `step_record` fields [T, B] with "reward",
    "version" and, with z, "pseudo_reward") and side 0's core state before its step 0, as the
    batch of B items that is written: observations in their templates' dtypes, int32 actions,
    float32 log-probs and rewards, the discount 1 - done and the acting version per step."""
    def cast(x, dtype=None):
        x = np.asarray(x)
        return x if dtype is None else x.astype(dtype, copy=False)

    def observation(tree, template):
        return jax.tree_util.tree_map(lambda tmpl, x: cast(x, tmpl.dtype), template, tree)

    b = np.shape(chunk["first"])[1]
    return Unroll(
        steps=Step(
            observation=observation(chunk["observation"], obs_template),
            opponent_observation=observation(chunk["opponent_observation"], opponent_template),
            action={h: cast(chunk["action"][h], np.int32) for h in heads},
            behaviour_log_prob={h: cast(chunk["behaviour_log_prob"][h], np.float32) for h in heads},
            reward=cast(chunk["reward"], np.float32),   # [T, B, *value_shape]
            discount=1.0 - np.asarray(chunk["done"], np.float32),
            first=cast(chunk["first"], bool),
            policy_version=np.repeat(chunk["version"][:, None], b, 1),
            pseudo_reward={} if "pseudo_reward" not in chunk else {
                k: cast(v, np.float32) for k, v in chunk["pseudo_reward"].items()}),
        core_state=jax.tree_util.tree_map(np.asarray, jax.device_get(core_state)))


class UnrollAdder:
    """See the module docstring. `address_of()` says where the learner's Reverb server is now;
    `templates` are (side 0's observation, the opponent's) as trajectories store them and `heads`
    the network's action heads; `agent_id` names the learner in ReplayServerMoved."""

    def __init__(self, address_of, table: str, max_queued: int, templates: tuple, heads,
                 agent_id: str):
        self._address_of, self._table, self._max_queued = address_of, table, max_queued
        self._obs_template, self._opponent_template = templates
        self._heads, self._agent_id = heads, agent_id
        self._writer: _UnrollWriter | None = None

    @property
    def failed(self) -> bool:
        """Whether the writer stopped on an error (its server lost): `drop` it, then `start`."""
        return self._writer is not None and self._writer.error is not None

    @property
    def items_written(self) -> int | None:
        """Items the writer has written to Reverb (None without a writer)."""
        return None if self._writer is None else self._writer.items_written

    def start(self) -> None:
        """Makes a writer at the server's address now, if there is none."""
        if self._writer is None:
            self._writer = _UnrollWriter(self._address_of(), self._table, self._max_queued,
                                         check=self._check_server)

    def add(self, chunk: dict, core_state, stop: threading.Event) -> int:
        """Hands an unroll's batch (`unroll_batch`) to the writer thread, waiting while its queue
        is full (until `stop` is set); returns the items handed over (0 without a writer).
        Raises ReplayServerMoved when the writer failed because its server moved."""
        if self._writer is None:
            return 0
        batch = unroll_batch(chunk, core_state, self._obs_template, self._opponent_template,
                             self._heads)
        try:
            self._writer.put(batch, stop)
        except RuntimeError as e:
            if isinstance(e.__cause__, ReplayServerMoved):
                raise ReplayServerMoved(*e.__cause__.args) from e
            raise
        return batch_size(batch)

    def _check_server(self, address: str) -> None:
        """Raises ReplayServerMoved when the learner's server is no longer at `address`; the
        address source's own error (a call to a lost node) when it cannot say yet."""
        now = self._address_of()
        if now != address:
            raise ReplayServerMoved(f"{self._agent_id}'s Reverb server moved from {address} to {now}")

    def drop(self) -> None:
        """Forgets the writer of a lost server (the unrolls queued for it go with its replay)."""
        if self._writer is not None:
            self._writer.close(timeout=0.1)
            self._writer = None

    def close(self) -> None:
        """Stops the writer, flushing what is queued (`_UnrollWriter.close`)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
