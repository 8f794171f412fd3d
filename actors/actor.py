"""The actor node: plays batches of games for one learning agent and writes its trajectories.

A plain class whose public methods are its RPC surface: `run`, `run_episodes`, `stop`,
`metrics`, `close`, `example_unroll`.

    actor = Actor(actor_id, agent_id, game, network, match_source, params_source,
                  reverb_address, table, ActorConfig())
    actor.run(num_steps=10_000)          # or actor.run(stop_event=event) on its own thread

What it does (AlphaStar, seed 002, "Infrastructure"; the issue's actor contract):
- Matches. `match_source.request_match(agent_id)` -> {"opponent_id", "branch"[, "home_race",
  "away_race"]}; the opponent's parameters are fetched once when the match starts
  (`params_source.latest_params(opponent_id)`: frozen for past players, the current ones for a
  learning opponent). A match lasts until at least `episodes_per_match` games have finished;
  it is checked after each unroll, and a new match resets the whole batch (with the new races),
  so games still running are abandoned: never reported, counted in `metrics()`.
- Acting. Both sides' actions for the whole batch come from ONE jitted function per game step
  (two parameter sets, parameters on device). JAX games that expose their pure per-game step
  (`game.fns.step` and `game.state`, as SMAX races does) play a whole unroll as one jitted
  `lax.scan` of policy + game steps (`make_fused_unroll`; parameters swap between unrolls);
  other games (the OpenSpiel pool) alternate one jitted policy call and `game.step` per step.
  Either way the loop does not wait on the device between steps: the unroll is brought to the
  host once.
- Trajectories. Side 0 (the learner's agent) is written to `table` in `agents.trajectory`'s
  format: unrolls of `unroll_length` steps overlapping by one step, behaviour log-probs per
  network head, rewards from the reward plug-in (actors/rewards.py; default: the outcome,
  +1/0/-1 on the last step) in the network's `value_shape`: one per unit for the unit network
  (each unit's own reward, team spirit applied by the plug-in; a plug-in's one reward per step
  goes to every present unit), one per side otherwise (a plug-in's per-unit rewards averaged
  over the present units), the parameter version that acted, the opponent's observation and
  the core state before step 0. Before computing rewards the actor tells the plug-in the
  learner's progress (`set_progress(version)`, the version of the parameters that played:
  the learner's update count), which anneals OpenAI Five's team spirit.
  A background thread hands whole unrolls to Reverb (one `append` per unroll).
- Results. Every finished game is reported exactly once, after the unroll it finished in:
  `match_source.report_results([{"home", "away", "outcome": "win"|"draw"|"loss" (home's view),
  "score" (the sum of the game's own rewards to home: chips in poker, the outcome in SMAX),
  "length", "actor_id", "branch"}])`, from a thread of its own (the actor's thread never waits
  on the coordinator; `run` delivers what is queued before it returns). The coordinator's
  meta-game is built on the scores.
- z (SMAX, a network with a z input: `agents.z_size`; AlphaStar, seed 002). At the start of
  every game the learner's side gets a z, `obs["z"]`, kept for the whole game: a main agent's
  (`z_bank`, the game's `Capabilities.z().ZBank`) is drawn uniformly from the recorded z of its race
  against the game's enemy race, and each of its pseudo-rewards for following z
  (its `PSEUDO_REWARDS`) is active with probability `z_pseudo_reward_probability`
  (AlphaStar: 25%); without a bank (exploiters, who AlphaStar does not condition on z, or no
  replays) z = 0 and no pseudo-reward is active. The candidates are drawn on the host once per
  unroll, one per step and game (`_z_plan`), and a game takes its step's candidate when it
  starts. After each unroll the game's tracker of z (`Capabilities.z().tracker(fns)`: the
  device rollout's, jitted over the unroll's steps, its state carried across unrolls) follows
  what side 0 played, and at each game's last step its pseudo-rewards are written with the
  active flags in `Step.pseudo_reward`. The opponent plays with z = 0.
- Parameters. A background thread asks `params_source.latest_params(agent_id,
  min_version=version + 1)` every `param_refresh_seconds` (AlphaStar: 10 s), puts new parameters on
  the device and the loop swaps them in between two steps (two unrolls for fused games): play
  never waits for a refresh.
"""

from __future__ import annotations

import dataclasses
import inspect
import queue
import threading
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from actors import rewards as reward_plugins
from actors.config import ActorConfig
from actors.rollout import (
    Games,
    Played,
    advance_teacher,
    finished_games,
    network_policy,
    play_step,
    stack_host,
    step_stepwise,
)
from agents import act, head_names, network_key, pseudo_reward_count, z_size
from agents.trajectory import Step, Unroll, batch_size, take, zeros_unroll
from league.matchmaking import Match
from league.players import draw_past_withdrawn
from league.results import GameResult

PyTree = Any


def z_statistic(game_name: str):
    """The module of the game's statistic z (its `Capabilities.z` factory: `Z_SIZE`, `ZBank`,
    `tracker`, ...), None for a game without one."""
    from actors.games.registry import resolve

    factory = resolve(game_name).capabilities.z
    return None if factory is None else factory()


def observation_template(game_spec, network) -> dict:
    """A zero observation of side 0 as trajectories store it: the game's, plus `z` [z_size]
    for a network conditioned on z."""
    obs = game_spec.side(0).zero_observation()
    if z_size(network):
        obs["z"] = np.zeros(z_size(network), np.float32)
    return obs


def example_unroll(game_spec, network, unroll_length: int, teacher: bool = False) -> Unroll:
    """An all-zero item of the actor's trajectories (Reverb signature, the learner's example).
    With `teacher`, the core state is (the policy's, the teacher's): see `Actor`."""
    side = game_spec.side(0)
    core = jax.tree_util.tree_map(lambda x: np.asarray(x)[0], network.initial_state(1))
    if teacher:
        core = (core, core)
    return zeros_unroll(observation_template(game_spec, network), side.zero_observation(),
                        head_shapes(network), core, unroll_length,
                        reward_shape=value_shape(network),
                        pseudo_rewards=pseudo_reward_count(network))


def head_shapes(network) -> dict[str, tuple[int, ...]]:
    """{head: action shape per step} of a network's trajectories (one action per head unless
    the network says otherwise: the unit network's unit heads are [n])."""
    shapes = getattr(network, "head_shapes", None)
    return dict(shapes) if shapes is not None else {h: () for h in head_names(network)}


def value_shape(network) -> tuple[int, ...]:
    """The value's and the trajectory reward's shape per step: () one per side, (n,) per unit."""
    return tuple(getattr(network, "value_shape", ()))


_COMPILED: dict = {}
"""Jitted functions shared by every actor of a process that uses the same network and game
(keyed on their configurations): a dozen co-located actors (one per league agent) compile
once, and hold one executable."""


def _shared(key, build):
    if key not in _COMPILED:
        _COMPILED[key] = build()
    return _COMPILED[key]


def make_policy_fn(network, greedy: bool = False):
    """The jitted acting step of both sides: (params0, params1, rng, obs0, obs1, state0, state1,
    first) -> (Action side 0, Action side 1, state0, state1)."""
    return _shared(("policy", network_key(network), greedy), lambda: _make_policy_fn(network, greedy))


def _make_policy_fn(network, greedy: bool):
    def policy(params0, params1, rng, obs0, obs1, state0, state1, first):
        k0, k1 = jax.random.split(rng)
        a0, state0 = act(network, params0, k0, obs0, state0, first, greedy)
        a1, state1 = act(network, params1, k1, obs1, state1, first, greedy)
        return a0, a1, state0, state1

    return jax.jit(policy)


def step_record(played: Played, z_active=None) -> dict:
    """An actor's chunk of steps (`actors.rollout.Played`, [T, B]) as it is written: side 0's
    observation, action and behaviour log-probs, the opponent's observation beside them, what
    the game returned, each game's length and score so far, and z's active flags (with z)."""
    record = dict(observation=played.observation, opponent_observation=played.opponent_observation,
                  action=played.action.heads, behaviour_log_prob=played.action.log_probs,
                  first=played.first, done=played.done, outcome=played.outcome,
                  rewards=played.rewards, signals=played.signals, length=played.length,
                  score=played.score)
    if z_active is not None:
        record["z_active"] = z_active
    return record


class Stream(NamedTuple):
    """What an actor carries from one unroll to the next within a match."""

    games: Games          # the running games (`actors.rollout`; the game's state stays in the game)
    carry: dict | None    # the last step of the previous unroll [1, B, ...] (host), or None
    carry_state: Any      # side 0's core state before that step
    teacher_state: Any    # the teacher's core state before the next unroll (None: no teacher)
    z: Any = None         # (z [B, Z], active [B, K]) of the running games (None: no z)
    z_followed: Any = None  # the z tracker's state of the running games (the game's, opaque)


class Playing(NamedTuple):
    """The match being played: the coordinator's `Match` and what playing it needs."""

    match: Match           # request_match's answer (opponent, branch, races, ...)
    opponent_version: int
    opponent_params: Any
    matchups: list | None  # the races each game is played in (SMAX), read from the game
    episodes: int          # games finished in this match


def make_teacher_advance(network):
    """The jitted (teacher params, teacher state, steps {observation, first, action} [T, B])
    -> the teacher's core state before the last step (`actors.rollout.advance_teacher`)."""
    return _shared(("teacher", network_key(network)), lambda: jax.jit(
        lambda params, state, steps: advance_teacher(network, params, state, steps)))


def make_fused_unroll(network, game_step, num_steps: int):
    """`_make_fused_unroll`, shared between actors whose games have the same configuration
    (a game's functions object with a hashable `config`, as `game.fns`); else not shared."""
    owner = getattr(game_step, "__self__", None)
    config = getattr(owner, "config", None)
    if config is None:
        return _make_fused_unroll(network, game_step, num_steps)
    key = ("fused", network_key(network), type(owner).__qualname__, config, num_steps)
    return _shared(key, lambda: _make_fused_unroll(network, game_step, num_steps))


def _make_fused_unroll(network, game_step, num_steps: int):
    """One jitted `lax.scan` of `num_steps` steps (`actors.rollout.play_step`) of both policies
    and a JAX game's pure per-game `game_step`, side 0 with z where the network takes it.
    Returns a function

        (params0, params1, rng, games, z, z_plan) -> ((games, z), chunk [num_steps, B, ...]
            (`step_record`), side 0's core state before the last step)
    """
    def body(params0, params1, carry, xs):
        games, z = carry
        key, plan = xs
        obs0, z = with_z(games.obs[0], z, plan, games.first)
        games, played = play_step(game_step, network_policy(network, params0),
                                  network_policy(network, params1), games, key, obs0=obs0)
        record = step_record(played, None if z is None else z[1])
        return (games, z), (record, played.state_before)

    def unroll(params0, params1, rng, games, z=None, z_plan=None):
        carry, (chunk, before) = jax.lax.scan(
            lambda c, x: body(params0, params1, c, x), (games, z),
            (jax.random.split(rng, num_steps), z_plan))
        return carry, chunk, jax.tree_util.tree_map(lambda x: x[-1], before)

    return jax.jit(unroll)


def with_z(obs, z, plan, first):
    """(side 0's observation with `z`, the new (z, active)): games starting this step (`first`
    [B]) take this step's candidates `plan` (z [B, Z], active [B, K]), the others keep theirs.
    (obs, None) without z."""
    if z is None:
        return obs, None
    new = tuple(jnp.where(jnp.reshape(first, (-1, 1)), p, c) for p, c in zip(plan, z))
    return {**obs, "z": new[0]}, new


def reset_game(game, seed: int, match: Match):
    """Resets the batch for a match: races per game where the game takes them (SMAX races)."""
    if match.home_race is not None and "races" in inspect.signature(game.reset).parameters:
        return game.reset(seed, races=(match.home_race, match.away_race))
    return game.reset(seed)


def played_matchups(game) -> list[tuple[str, str]] | None:
    """The (side 0, side 1) races every game of the batch is played in, read from the game
    itself (SMAX races), or None for games without races."""
    matchups = getattr(game, "matchups", None)
    return matchups() if callable(matchups) else None


def races_played(matchups: list[tuple[str, str]] | None, slot: int) -> dict:
    """The result fields "home_race" / "away_race" of one batch slot ({} without races)."""
    if matchups is None:
        return {}
    return {"home_race": matchups[slot][0], "away_race": matchups[slot][1]}


class _ParamsRefresher:
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


class _Reporter:
    """Reports finished games to the match source from a thread of its own, so that the actor's
    thread never waits on the coordinator (issue 30): reports queued while a call is in flight
    go together in the next call. An error of the match source (the coordinator refusing a
    batch) is raised in the actor's thread by its next `put` or by `flush`; one for which
    `retry(error)` is true (the coordinator's process lost, restarting) keeps the batch and
    delivers it once the match source answers again (tried every RETRY_SECONDS)."""

    RETRY_SECONDS = 1.0

    def __init__(self, sink, retry=None):
        self._sink = sink
        self._retry = retry or (lambda error: False)
        self._pending: list = []
        self._in_flight = False
        self._closing = False
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="actor-reports", daemon=True)
        self._thread.start()

    def _raise(self):
        if self.error is not None:
            error, self.error = self.error, None
            raise RuntimeError("reporting finished games to the coordinator failed") from error

    def put(self, results: list) -> None:
        with self._cond:
            self._raise()
            self._pending.extend(results)
            self._cond.notify_all()

    def _run(self):
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
                self._in_flight = True
            try:
                self._sink.report_results(batch)
            except BaseException as e:  # raised in the actor's thread (put, flush)
                retry = self._retry(e) and not self._closing
                with self._cond:
                    if retry:
                        self._pending[:0] = batch   # first, before what came since
                    else:
                        self.error = e
                if retry:
                    time.sleep(self.RETRY_SECONDS)
            finally:
                with self._cond:
                    self._in_flight = False
                    self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until every queued report has been delivered (True), or `timeout` passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._pending or self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(timeout=left)
            self._raise()
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Delivers what is queued (up to `timeout` seconds), then stops the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=timeout)


class Actor:
    """See the module docstring. `game` follows actors/games/base.py's protocol, `network` the
    interface of agents/networks.py (`agents.act` samples from it); `reward` is a loaded reward
    plug-in that overrides `config.reward_plugin`.

    `retry_reports_if(error)`: true for an error of the match source after which reports are
    delivered again later (its process lost and restarting: `experiments.nodes.lost_node`).

    `teacher_params`: a frozen teacher (AlphaStar's supervised policy, for the learner's KL
    term) that follows the same observations with its own recurrent state; each unroll then
    stores the core state (the policy's, the teacher's) before its step 0, so the learner
    unrolls the teacher from the teacher's own state."""

    def __init__(self, actor_id: str, agent_id: str, game, network, match_source, params_source,
                 reverb_address: str | None, table: str, config: ActorConfig | None = None,
                 *, reward=None, teacher_params=None, z_bank=None,
                 retry_reports_if=None):
        self.actor_id, self.agent_id = str(actor_id), str(agent_id)
        self.game, self.network = game, network
        self.match_source, self.params_source = match_source, params_source
        self.config = config or ActorConfig()
        self._table = table
        # Where the learner's Reverb server is: an address, or a callable that says where it is
        # now (a learner group that Ray restarted serves from another port: `_drop_learner`).
        self._address_of = None if reverb_address is None else (
            reverb_address if callable(reverb_address) else (lambda: reverb_address))
        self._batch = int(game.batch_size)
        self._heads = head_names(network)
        self._policy = make_policy_fn(network)
        # `reward`: an already loaded plug-in (actors.rewards.load_reward_plugin), else by name.
        self._reward_fn = reward or reward_plugins.load_reward_plugin(
            self.config.reward_plugin, game.spec, 0, team_spirit=self.config.team_spirit)
        self._reward_shape = value_shape(network)
        self._obs_template = observation_template(game.spec, network)
        self._opponent_template = game.spec.side(0).zero_observation()
        # z (module docstring): the bank of a main agent, None for exploiters (z = 0).
        self._z_size, self._pseudo_count = z_size(network), pseudo_reward_count(network)
        self.z_bank = z_bank if self._z_size else None
        statistic = z_statistic(game.spec.name) if self._z_size else None
        fns = getattr(game, "fns", None)
        self._z_tracker = (statistic.tracker(fns) if statistic is not None and fns is not None
                           and self._pseudo_count else None)
        self._z_rng = np.random.default_rng(self.config.seed + 7)
        self._teacher = None if teacher_params is None else jax.device_put(teacher_params)
        self._advance_teacher = None if teacher_params is None else make_teacher_advance(network)
        self._rng = jax.random.PRNGKey(self.config.seed)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._writer: _UnrollWriter | None = None
        self._reporter = _Reporter(match_source, retry_reports_if)
        self._refresher: _ParamsRefresher | None = None
        self._params = self._version = None
        self._match: Match | None = None
        self._stream: Stream | None = None
        self._resets = 0
        fused = self.config.fused and hasattr(game, "state") and callable(
            getattr(getattr(game, "fns", None), "step", None))
        self._fused_fns: dict | None = {} if fused else None
        self._m = dict(env_steps=0, batch_steps=0, episodes=0, unrolls=0, items=0, matches=0,
                       param_refreshes=0, reconnects=0, games_abandoned=0, running_seconds=0.0)

    # ------------------------------------------------------------------ setup

    def example_unroll(self) -> Unroll:
        return example_unroll(self.game.spec, self.network, self.config.unroll_length,
                              teacher=self._teacher is not None)

    def _wait_params(self, player_id: str, min_version: int | None = None):
        deadline = time.monotonic() + self.config.params_timeout
        while True:
            got = self.params_source.latest_params(player_id, min_version=min_version)
            if got is not None:
                return int(got[0]), jax.device_put(got[1])
            if self._stop.is_set() or time.monotonic() > deadline:
                raise TimeoutError(f"no parameters for {player_id!r} after "
                                   f"{self.config.params_timeout} s")
            time.sleep(0.05)

    def _start(self):
        """Makes what the actor lacks: its writer, its learner's parameters and their
        refresher, a match."""
        if self._writer is not None and self._writer.error is not None:
            self._drop_learner()   # a run again after its learner's server was lost
        if self._writer is None and self._address_of is not None:
            self._writer = _UnrollWriter(self._address_of(), self._table, self.config.write_queue,
                                         check=self._check_server)
        if self._params is None:
            self._version, self._params = self._wait_params(self.agent_id)
        if self._refresher is None:
            self._refresher = _ParamsRefresher(self.params_source, self.agent_id,
                                               self.config.param_refresh_seconds, self._version)
        if self._match is None:
            self._new_match()

    def _check_server(self, address: str) -> None:
        """Raises ReplayServerMoved when the learner's server is no longer at `address`; the
        address source's own error (a call to a lost node) when it cannot say yet."""
        now = self._address_of()
        if now != address:
            raise ReplayServerMoved(f"{self.agent_id}'s Reverb server moved from {address} to {now}")

    def _drop_learner(self) -> None:
        """The learner's server was lost (its process restarted, with a new server and the
        parameters of its last checkpoint): drops the writer (the unrolls queued for the lost
        server go with its replay), the parameters and their refresher, so that `_start` makes
        them again at the server's address now, with the restarted learner's parameters
        (older than the ones played: the refresher asks only for newer ones)."""
        self._writer.close(timeout=0.1)
        self._writer = None
        if self._refresher is not None:
            self._refresher.close()
            self._refresher = None
        self._params = None
        with self._lock:
            self._m["reconnects"] += 1

    def _new_match(self):
        def draw():
            request = Match.of(self.match_source.request_match(self.agent_id), self.agent_id)
            if request.opponent_id == self.agent_id:
                return request, self._version, self._params
            # a damaged frozen player raises WithdrawnPlayer here, now out of matchmaking
            return (request, *self._wait_params(request.opponent_id))
        request, opponent_version, opponent_params = draw_past_withdrawn(draw, self.agent_id)
        abandoned = (0 if self._stream is None
                     else int(np.sum(np.asarray(self._stream.games.lengths) > 0)))
        self._resets += 1
        timestep = reset_game(self.game, self.config.seed * 100_003 + self._resets, request)
        self._match = Playing(request, opponent_version, opponent_params,
                            played_matchups(self.game), 0)
        initial = self.network.initial_state(self._batch)
        self._stream = Stream(
            games=Games.start(None, timestep.observations, initial, initial, self._batch, xp=np),
            carry=None, carry_state=initial, teacher_state=None if self._teacher is None else initial,
            **self._z_reset())
        with self._lock:
            self._m["matches"] += 1
            self._m["games_abandoned"] += abandoned

    # ------------------------------------------------------------------ the loop

    def _take_refresh(self):
        pending = self._refresher.take()
        if pending is not None:
            self._version, self._params = pending
            with self._lock:
                self._m["param_refreshes"] += 1

    def _play_stepwise(self, num_steps: int):
        """Any game: `actors.rollout.step_stepwise` per step (one jitted policy call, one
        game.step), parameters refreshed between steps; the records stay where they are until
        the one transfer at the end. Returns (time-major host chunk, core state before the last
        step)."""
        records, versions = [], []
        s = self._stream
        games, z = s.games, s.z
        plan = self._z_plan(num_steps)
        for k in range(num_steps):
            self._take_refresh()
            self._rng, key = jax.random.split(self._rng)
            obs0, z = with_z(games.obs[0], z, None if plan is None else (plan[0][k], plan[1][k]),
                             games.first)
            games, played = step_stepwise(self.game, self._policy, self._params,
                                          self._match.opponent_params, games, key, obs0=obs0)
            records.append((played._replace(opponent_action=None), None if z is None else z[1]))
            versions.append(self._version)
        self._stream = s._replace(games=games, z=z)
        played, z_active = stack_host(records)
        chunk = step_record(played, z_active)
        chunk["version"] = np.asarray(versions, np.int32)
        return chunk, jax.tree_util.tree_map(lambda x: x[-1], played.state_before)

    def _play_fused(self, num_steps: int):
        """JAX games (pure per-game `game.fns.step`): the whole unroll is one jitted scan of
        policy + game steps; parameters are swapped in between unrolls."""
        self._take_refresh()
        self._rng, key = jax.random.split(self._rng)
        s = self._stream
        (games, z), chunk, last_state = self._fused(num_steps)(
            self._params, self._match.opponent_params, key,
            s.games._replace(game_state=self.game.state), s.z, self._z_plan(num_steps))
        self.game.state = games.game_state
        self._stream = s._replace(games=games._replace(game_state=None), z=z)
        chunk = jax.device_get(chunk)
        chunk["version"] = np.full(num_steps, self._version, np.int32)
        return chunk, last_state

    def _fused(self, num_steps: int):
        if num_steps not in self._fused_fns:
            self._fused_fns[num_steps] = make_fused_unroll(self.network, self.game.fns.step,
                                                           num_steps)
        return self._fused_fns[num_steps]

    # ------------------------------------------------------------------ z

    def _z_reset(self) -> dict:
        """The z fields of a new match's Stream (all None without z)."""
        if not self._z_size:
            return {}
        b, k = self._batch, self._pseudo_count
        return dict(z=(np.zeros((b, self._z_size), np.float32), np.zeros((b, k), np.float32)),
                    z_followed=None if self._z_tracker is None
                    else self._z_tracker.init_state(b, self._z_size, k))

    def _z_plan(self, num_steps: int):
        """Candidate (z [T, B, Z], active [T, B, K]) for games starting at each step of the
        next unroll: drawn from the bank by each game's matchup (zeros without a bank)."""
        if not self._z_size:
            return None
        b, k = self._batch, self._pseudo_count
        z = np.zeros((num_steps, b, self._z_size), np.float32)
        active = np.zeros((num_steps, b, k), np.float32)
        if self.z_bank is not None:
            bank = self.z_bank
            races = self._match_races()
            matchup = races[:, 0] * bank.races + races[:, 1]
            counts = bank.counts[matchup]                                  # [B]
            pick = np.floor(self._z_rng.random((num_steps, b)) * np.maximum(counts, 1)).astype(int)
            z = bank.table[matchup[None, :], pick] * (counts > 0)[None, :, None]
            active = ((self._z_rng.random((num_steps, b, k)) < self.config.z_pseudo_reward_probability)
                      & (counts > 0)[None, :, None]).astype(np.float32)
        return z.astype(np.float32), active

    def _match_races(self) -> np.ndarray:
        """[B, 2] race indices of the batch's games (zeros for games without races)."""
        races = getattr(self.game, "races", None)
        if races is None:
            return np.zeros((self._batch, 2), np.int64)
        return np.asarray(races, np.int64).reshape(self._batch, 2)

    def _pseudo_rewards(self, chunk: dict) -> dict:
        """z's pseudo-rewards of the new steps ({"reward", "active"} [T', B, K]): the game's
        tracker of z (`follow_host`, jitted) over them, from its state at the unroll's start
        (carried in the Stream); zeros for a game without one."""
        active = np.asarray(chunk["z_active"], np.float32)
        if self._z_tracker is None:
            return {"reward": np.zeros_like(active), "active": active}
        s = self._stream
        followed, active, reward = self._z_tracker.follow_host(
            s.z_followed, np.asarray(chunk["first"], bool), np.asarray(chunk["done"], bool),
            chunk["observation"], chunk["action"], active)
        self._stream = s._replace(z_followed=followed)
        return {"reward": reward, "active": active}

    def _unroll(self):
        """Plays the steps of one unroll, writes it, reports results; may start a new match."""
        steps_needed = self.config.unroll_length - (0 if self._stream.carry is None else 1)
        play = self._play_fused if self._fused_fns is not None else self._play_stepwise
        before = self._stream
        chunk, last_state = play(steps_needed)
        if self._z_size:
            chunk["pseudo_reward"] = self._pseudo_rewards(chunk)
            del chunk["z_active"]
        self._reward_and_report(chunk)
        if before.carry is not None:
            chunk = jax.tree_util.tree_map(lambda a, b: np.concatenate([a, b]), before.carry, chunk)
        core_state, teacher_state = before.carry_state, before.teacher_state
        if self._teacher is not None:
            core_state = (core_state, teacher_state)
            steps = {k: chunk[k] for k in ("observation", "first", "action")}
            teacher_state = self._advance_teacher(self._teacher, teacher_state, steps)
        self._write(chunk, core_state)
        self._stream = self._stream._replace(carry=jax.tree_util.tree_map(lambda x: x[-1:], chunk),
                                             carry_state=last_state, teacher_state=teacher_state)
        with self._lock:
            self._m["batch_steps"] += steps_needed
            self._m["env_steps"] += steps_needed * self._batch
            self._m["unrolls"] += 1
        if self._match.episodes >= self.config.episodes_per_match:
            self._new_match()

    def _reward_and_report(self, chunk: dict):
        """Training rewards of the new steps (plug-in) and the finished games' results."""
        done = np.asarray(chunk["done"], bool).T        # [B, T']: each game's steps in order
        outcome = np.asarray(chunk["outcome"]).T
        fields = {"done": done, "outcome": outcome, "rewards": np.swapaxes(chunk["rewards"], 0, 1)}
        for name, value in chunk["signals"].items():
            fields[name] = np.swapaxes(value, 0, 1)
        batch = reward_plugins.side_batch(fields, 0)
        if hasattr(self._reward_fn, "set_progress"):  # e.g. team spirit's annealing
            self._reward_fn.set_progress(int(np.max(chunk["version"])))
        rewards = reward_plugins.training_reward(self._reward_fn(batch, False), batch.get("present"),
                                                 self._reward_shape)
        chunk["reward"] = np.swapaxes(rewards.reshape(*done.shape, *self._reward_shape), 0, 1)

        results = []
        match = self._match
        branch = match.match.branch
        opponent = match.match.opponent_id
        for _, b, result, score, length in finished_games(chunk["done"], chunk["outcome"],
                                                          chunk["score"], chunk["length"]):
            results.append(GameResult.one(self.agent_id, opponent, result, score, length,
                                          actor_id=self.actor_id, branch=branch,
                                          **races_played(match.matchups, b)))
        self._match = match._replace(episodes=match.episodes + len(results))
        with self._lock:
            self._m["episodes"] += len(results)
        if results:
            self._reporter.put(results)

    def _write(self, chunk: dict, core_state):
        """Hands the unrolls (a time-major [T, B] batch: B items of [T]) to the writer thread."""
        if self._writer is None:
            return

        def cast(x, dtype=None):
            x = np.asarray(x)
            return x if dtype is None else x.astype(dtype, copy=False)

        def observation(tree, template):
            return jax.tree_util.tree_map(lambda tmpl, x: cast(x, tmpl.dtype), template, tree)

        b = self._batch
        batch = Unroll(
            steps=Step(
                observation=observation(chunk["observation"], self._obs_template),
                opponent_observation=observation(chunk["opponent_observation"],
                                                 self._opponent_template),
                action={h: cast(chunk["action"][h], np.int32) for h in self._heads},
                behaviour_log_prob={h: cast(chunk["behaviour_log_prob"][h], np.float32)
                                    for h in self._heads},
                reward=cast(chunk["reward"], np.float32),   # [T, B, *value_shape]
                discount=1.0 - np.asarray(chunk["done"], np.float32),
                first=cast(chunk["first"], bool),
                policy_version=np.repeat(chunk["version"][:, None], b, 1),
                pseudo_reward={} if "pseudo_reward" not in chunk else {
                    k: cast(v, np.float32) for k, v in chunk["pseudo_reward"].items()}),
            core_state=jax.tree_util.tree_map(np.asarray, jax.device_get(core_state)))
        try:
            self._writer.put(batch, self._stop)
        except RuntimeError as e:
            if not isinstance(e.__cause__, ReplayServerMoved):
                raise
            self._drop_learner()
            self._start()
            return
        with self._lock:
            self._m["items"] += b

    # ------------------------------------------------------------------ RPC surface

    def run(self, num_steps: int | None = None, stop_event: threading.Event | None = None) -> int:
        """Plays whole unrolls until `num_steps` batch steps (each advances all B games) are
        done, `stop()` is called or `stop_event` is set. Returns the batch steps played."""
        self._stop.clear()
        self._start()
        start_steps, started = self._m["batch_steps"], time.monotonic()
        try:
            while not self._stop.is_set() and not (stop_event is not None and stop_event.is_set()):
                if num_steps is not None and self._m["batch_steps"] - start_steps >= num_steps:
                    break
                self._unroll()
        finally:
            with self._lock:
                self._m["running_seconds"] += time.monotonic() - started
            self._reporter.flush(timeout=30.0)
        return self._m["batch_steps"] - start_steps

    def run_episodes(self, num_episodes: int) -> int:
        """Plays whole unrolls until at least `num_episodes` more games have finished."""
        self._stop.clear()
        self._start()
        target = self._m["episodes"] + num_episodes
        started = time.monotonic()
        try:
            while not self._stop.is_set() and self._m["episodes"] < target:
                self._unroll()
        finally:
            with self._lock:
                self._m["running_seconds"] += time.monotonic() - started
            self._reporter.flush(timeout=30.0)
        return self._m["episodes"] - target + num_episodes

    def stop(self) -> None:
        """Stops `run` after the current unroll."""
        self._stop.set()

    def close(self) -> None:
        """Stops the refresh, report and writer threads (flushing what is queued)."""
        self._stop.set()
        self._reporter.close()
        if self._refresher is not None:
            self._refresher.close()
            self._refresher = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def metrics(self) -> dict:
        """Env steps (games x steps) and their rate while running, episodes, unrolls and items
        written, parameter refreshes, the acting version, the current match and opponent."""
        with self._lock:
            m = dict(self._m)
        m["env_steps_per_second"] = m["env_steps"] / max(m["running_seconds"], 1e-9)
        m["policy_version"] = self._version
        match = self._match
        m["current_opponent"] = None if match is None else match.match.opponent_id
        m["opponent_version"] = None if match is None else match.opponent_version
        m["match"] = None if match is None else dataclasses.asdict(match.match)
        if self._writer is not None:
            m["items_written"] = self._writer.items_written
        tau = getattr(self._reward_fn, "tau", None)
        if tau is not None:
            m["team_spirit"] = float(tau)
        if self._refresher is not None and self._refresher.error is not None:
            m["refresh_error"] = repr(self._refresher.error)
        return m
