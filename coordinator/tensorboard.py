"""Learner metrics as TensorBoard scalars (`<run_dir>/tensorboard`, tensorboardX): a convenience
beside league.db that never stops a league."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping

TENSORBOARD_RETRY_SECONDS = 60.0
"""After TensorBoard writing failed (a full disk), a new event file is tried this often."""


class TensorBoardSink:
    """Writes each learner's scalars as `<agent>/<metric>` at the learner's `steps`.
    tensorboardX's writer thread dies on a write error (a full disk), after which adding to its
    queue would block for ever: a writer whose thread is gone is dropped (one warning) and a
    new event file tried every TENSORBOARD_RETRY_SECONDS."""

    def __init__(self, log_dir: str):
        self.log_dir = log_dir
        self._writer = None
        self._failed = 0.0   # when writing last failed (0: it did not)

    def write(self, metrics: Mapping[str, Mapping], step: int) -> None:
        """Every finite number in `metrics` (agent -> name -> value), at the agent's `steps`
        (else `step`)."""
        if self._writer is not None and not _alive(self._writer):
            self._writer = None
            self._failed = time.monotonic()
            print("warning: TensorBoard's event writer stopped (a full disk?); a new event file is tried "
                  f"every {TENSORBOARD_RETRY_SECONDS:g} s", flush=True)
        failed = self._failed
        if self._writer is None and failed and time.monotonic() - failed < TENSORBOARD_RETRY_SECONDS:
            return
        try:
            if self._writer is None:
                from tensorboardX import SummaryWriter

                _quiet_writer_thread()
                # a queue no interval's metrics fill: never a put that waits on a dead thread
                self._writer = SummaryWriter(self.log_dir, max_queue=100_000)
            for agent, values in metrics.items():
                for name, value in values.items():
                    if isinstance(value, int | float) and math.isfinite(value):
                        self._writer.add_scalar(f"{agent}/{name}", value, int(values.get("steps", step)))
            self._writer.flush()
        except Exception as e:  # TensorBoard is a convenience; never stop a league for it
            if not failed:
                print(f"warning: TensorBoard writing failed ({e}); tried again every "
                      f"{TENSORBOARD_RETRY_SECONDS:g} s", flush=True)
            self._failed = time.monotonic()
            return
        self._failed = 0.0

    def close(self) -> None:
        if self._writer is not None and _alive(self._writer):
            self._writer.close()
        self._writer = None


def _quiet_writer_thread() -> None:
    """tensorboardX's event-writing thread dies with a traceback on a write error; the sink says
    it in one line instead (`TensorBoardSink.write`). Other threads' errors print as before."""
    from tensorboardX.event_file_writer import _EventLoggerThread

    previous = threading.excepthook
    if getattr(previous, "quiets_tensorboard", False):
        return

    def hook(args):
        if not (isinstance(args.thread, _EventLoggerThread) and isinstance(args.exc_value, OSError)):
            previous(args)
    hook.quiets_tensorboard = True
    threading.excepthook = hook


def _alive(writer) -> bool:
    """Whether a tensorboardX SummaryWriter's event-writing thread runs (True if not found)."""
    thread = getattr(getattr(getattr(writer, "file_writer", None), "event_writer", None), "_worker", None)
    return thread is None or thread.is_alive()
