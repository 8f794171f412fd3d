"""The watch page's games: one game between two players of the payoff matrix, played on demand
from a seed on a thread of the dashboard's process, its frames kept for the page to animate.

The dashboard serves `/watch?home=A&away=B&seed=S` (dashboard/static/watch.html), which asks
`/watch.json` with the same query until the game is ready:

    202 {"status": "queued" | "playing", "message", "elapsed_s"}   ask again
    200 {"status": "ok", "frames": [svg, ...], "outcome", "score", "steps", ...}
    404 {"status": "error", "message"}   a player the run does not have, a game that is not
                                         drawn (its Capabilities has no draw): a ValueError
    400 the query is wrong; 500 the game failed (the message names the exception);
    501 this server was started without a game player (`serve(..., watch=None)`)

Playing is `play(run_dir, home, away, seed, progress=...)` (`experiments.watch.watch`, passed
in by whoever starts the server: the dashboard sits below experiments and names no game). Games
are played one at a time, as they share the machine with the league; the latest results are
kept, so a page reloaded or shared shows the same game at once.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

MAX_SEED = 2**31 - 1


class WatchJob:
    """One game asked for: its state ("queued", "playing", "ok", "error"), the player's latest
    progress message, and its result or error."""

    def __init__(self, key: tuple[str, str, int]):
        self.key = key
        self.status = "queued"
        self.message = "waiting for another game to finish"
        self.started = time.time()
        self.result: dict | None = None
        self.code = 202
        self.done = threading.Event()

    def response(self) -> tuple[int, dict]:
        if self.status == "ok":
            return 200, {"status": "ok", **self.result}
        if self.status == "error":
            return self.code, {"status": "error", "message": self.message}
        return 202, {"status": self.status, "message": self.message,
                     "elapsed_s": round(time.time() - self.started, 1)}


class Watcher:
    """Games for the watch page (module docstring): `request(query)` -> (HTTP status, body)."""

    def __init__(self, run_dir: str, play: Callable | None, keep: int = 16, first_wait_s: float = 1.0):
        self.run_dir = run_dir
        self.play = play
        self.keep = keep
        self.first_wait_s = first_wait_s   # a new game's quick errors (no such player) answer at once
        self._jobs: collections.OrderedDict[tuple, WatchJob] = collections.OrderedDict()
        self._lock = threading.Lock()      # the jobs
        self._playing = threading.Lock()   # one game at a time

    @staticmethod
    def parse(query: dict[str, list[str]]) -> tuple[str, str, int]:
        """(home, away, seed) of the page's query; ValueError saying what is missing."""
        home, away = (query.get(k, [""])[0].strip() for k in ("home", "away"))
        if not home or not away:
            raise ValueError("name both players: /watch?home=PLAYER&away=PLAYER&seed=0 (player ids as "
                             "the payoff matrix shows them)")
        seed = query.get("seed", ["0"])[0].strip() or "0"
        if not seed.isdigit() or int(seed) > MAX_SEED:
            raise ValueError(f"seed={seed!r}: the seed is a whole number from 0 to {MAX_SEED}")
        return home, away, int(seed)

    def request(self, query: dict[str, list[str]]) -> tuple[int, dict]:
        """The game the query names: started if new, else how far it is (module docstring)."""
        if self.play is None:
            return 501, {"status": "error", "message": (
                "this dashboard server plays no games: it was started without a game player "
                "(dashboard.server.serve(..., watch=experiments.watch.watch))")}
        try:
            key = self.parse(query)
        except ValueError as e:
            return 400, {"status": "error", "message": str(e)}
        with self._lock:
            job = self._jobs.get(key)
            new = job is None
            if new:
                job = self._jobs[key] = WatchJob(key)
                threading.Thread(target=self._run, args=(job,), name="watch", daemon=True).start()
                finished = [k for k, j in self._jobs.items() if j.done.is_set()]
                for old in finished[:max(0, len(self._jobs) - self.keep)]:
                    del self._jobs[old]
            else:
                self._jobs.move_to_end(key)
        if new:
            job.done.wait(self.first_wait_s)
        code, body = job.response()
        if job.status == "error":   # reported once: asked again, it is played again
            with self._lock:
                if self._jobs.get(key) is job:
                    del self._jobs[key]
        return code, body

    def _run(self, job: WatchJob) -> None:
        home, away, seed = job.key
        with self._playing:
            job.status, job.message = "playing", "loading the players"

            def progress(text: str) -> None:
                job.message = text

            try:
                watched = self.play(self.run_dir, home, away, seed, progress=progress)
                job.result = watched.as_dict() if hasattr(watched, "as_dict") else dict(watched)
                job.status = "ok"
            except ValueError as e:   # what a person can fix: no such player, a game not drawn
                job.code, job.message, job.status = 404, str(e), "error"
            except Exception as e:  # noqa: BLE001 -- the page says what failed; the server goes on
                job.code, job.message, job.status = 500, f"the game failed: {type(e).__name__}: {e}", "error"
            finally:
                job.done.set()
