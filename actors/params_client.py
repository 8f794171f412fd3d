"""The replay path actor's parameter client (Acme's variable client): the players' parameters as
one actor (`actors.actor.Actor`) plays them.

    client = ParamsClient(params_source, agent_id, period, timeout, stop)
    client.start()                       # waits for the learner's parameters, starts the refresher
    if client.refresh(): ...             # between two steps: newer parameters swapped in
    version, params = client.wait(opponent_id)

The learner's parameters (`agent_id`) are fetched once, then a thread asks
`params_source.latest_params(agent_id, min_version=version + 1)` every `period` seconds and
puts what is newer on the device; the actor swaps it in between two steps (`refresh`), so play
never waits for a refresh. Any other player's parameters are waited for (`wait`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import jax

PyTree = Any


class _Refresher:
    """Polls the learner's parameters on a thread; the actor swaps them in between steps."""

    def __init__(self, params_source, agent_id: str, period: float, version: int):
        self._source, self._agent_id, self._period = params_source, agent_id, period
        self._version = version
        self._lock = threading.Lock()
        self._pending: tuple[int, PyTree] | None = None
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"refresh-{agent_id}", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(self._period):
            try:
                got = self._source.latest_params(self._agent_id, min_version=self._version + 1)
            except Exception as e:  # noqa: BLE001 -- keep playing with the current parameters
                self.error = e
                continue
            if got is None or int(got[0]) <= self._version:
                continue
            version, params = int(got[0]), jax.device_put(got[1])
            with self._lock:
                self._pending = (version, params)
                self._version = version

    def take(self) -> tuple[int, PyTree] | None:
        if self._pending is None:  # the common case: no lock
            return None
        with self._lock:
            pending, self._pending = self._pending, None
        return pending

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5.0)


class ParamsClient:
    """See the module docstring. `version` and `params` are the learner's parameters being played
    (None before `start`); `stop` is the actor's stop event: a `wait` gives up once it is set."""

    def __init__(self, params_source, agent_id: str, period: float, timeout: float,
                 stop: threading.Event):
        self._source, self._agent_id = params_source, agent_id
        self._period, self._timeout, self._stop = period, timeout, stop
        self._refresher: _Refresher | None = None
        self.version: int | None = None
        self.params: PyTree | None = None

    def wait(self, player_id: str, min_version: int | None = None) -> tuple[int, PyTree]:
        """(version, parameters on the device) of `player_id`, asked every 50 ms; TimeoutError
        after `timeout` seconds, or at once when the actor is stopping."""
        deadline = time.monotonic() + self._timeout
        while True:
            got = self._source.latest_params(player_id, min_version=min_version)
            if got is not None:
                return int(got[0]), jax.device_put(got[1])
            if self._stop.is_set() or time.monotonic() > deadline:
                raise TimeoutError(f"no parameters for {player_id!r} after {self._timeout} s")
            time.sleep(0.05)

    def start(self) -> None:
        """Waits for the learner's parameters if it lacks them, and starts their refresher."""
        if self.params is None:
            self.version, self.params = self.wait(self._agent_id)
        if self._refresher is None:
            self._refresher = _Refresher(self._source, self._agent_id, self._period, self.version)

    def refresh(self) -> bool:
        """Swaps in the newer parameters the refresher fetched, if any (whether it did)."""
        pending = self._refresher.take()
        if pending is None:
            return False
        self.version, self.params = pending
        return True

    def drop(self) -> None:
        """Forgets the learner's parameters and stops their refresher (the learner restarted):
        `start` fetches its parameters again, and from then on the ones newer than those."""
        self.close()
        self.params = None

    def close(self) -> None:
        """Stops the refresher (`start` makes a new one); the parameters stay."""
        if self._refresher is not None:
            self._refresher.close()
            self._refresher = None

    @property
    def error(self) -> BaseException | None:
        """The refresher's last error (play goes on with the parameters it has), or None."""
        return None if self._refresher is None else self._refresher.error
