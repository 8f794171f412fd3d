"""The actor node: plays batches of games for one learning agent and writes its trajectories.

A plain class whose public methods are its RPC surface: `run`, `run_episodes`, `stop`,
`metrics`, `close`, `example_unroll`.

    actor = Actor(actor_id, agent_id, game, network, match_source, params_source,
                  reverb_address, table, ActorConfig())
    actor.run(num_steps=10_000)          # or actor.run(stop_event=event) on its own thread

The actor is the loop (Acme's environment loop: `run` plays unrolls, `_unroll` plays, rewards,
reports and writes one); its parts have one job each, after Acme's actor: the parameter client
(`actors.params_client.ParamsClient`: the players' parameters, the learner's kept fresh), the
adder (`actors.adder.UnrollAdder`: unrolls to Reverb), z (`actors.z_conditioning.ZConditioning`)
and the reporter (`_Reporter`, below: results to the match source).

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
  A background thread of the adder hands whole unrolls to Reverb (one `append` per unroll).
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
  (its `PSEUDO_REWARDS`) is active with probability `z_reward_probability`
  (AlphaStar: 25%); without a bank (exploiters, who AlphaStar does not condition on z, or no
  replays) z = 0 and no pseudo-reward is active. The candidates are drawn on the host once per
  unroll, one per step and game (`_z_plan`: `ZConditioning.plan`), and a game takes its step's candidate when it
  starts. After each unroll the game's tracker of z (`Capabilities.z().tracker(fns)`: the
  device rollout's, jitted over the unroll's steps, its state carried across unrolls) follows
  what side 0 played, and at each game's last step its pseudo-rewards are written with the
  active flags in `Step.pseudo_reward`. The opponent plays with z = 0.
- Parameters (the parameter client). A background thread asks `params_source.latest_params(agent_id,
  min_version=version + 1)` every `param_refresh_seconds` (AlphaStar: 10 s), puts new parameters on
  the device and the loop swaps them in between two steps (two unrolls for fused games): play
  never waits for a refresh.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from actors import rewards as reward_plugins
from actors.adder import ReplayServerMoved, UnrollAdder
from actors.config import ActorConfig
from actors.params_client import ParamsClient
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
from actors.z_conditioning import ZConditioning
from agents import act, head_names, network_key, pseudo_reward_count, z_size
from agents.trajectory import Unroll, zeros_unroll
from league.matchmaking import Match
from league.players import draw_past_withdrawn
from league.results import GameResult


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


def training_rewards(chunk: dict, reward_fn, reward_shape: tuple[int, ...]) -> np.ndarray:
    """Side 0's training rewards [T', B, *reward_shape] of an unroll's new steps, from the reward
    plug-in, told the learner's progress first (`set_progress`: the newest version that played)."""
    done = np.asarray(chunk["done"], bool).T        # [B, T']: each game's steps in order
    fields = {"done": done, "outcome": np.asarray(chunk["outcome"]).T,
              "rewards": np.swapaxes(chunk["rewards"], 0, 1)}
    for name, value in chunk["signals"].items():
        fields[name] = np.swapaxes(value, 0, 1)
    batch = reward_plugins.side_batch(fields, 0)
    if hasattr(reward_fn, "set_progress"):  # e.g. team spirit's annealing
        reward_fn.set_progress(int(np.max(chunk["version"])))
    rewards = reward_plugins.training_reward(reward_fn(batch, False), batch.get("present"),
                                             reward_shape)
    return np.swapaxes(rewards.reshape(*done.shape, *reward_shape), 0, 1)


def game_results(chunk: dict, playing: Playing, agent_id: str, actor_id: str) -> list[GameResult]:
    """The results of the games that finished in an unroll's new steps, in the order they did."""
    match = playing.match
    return [GameResult.one(agent_id, match.opponent_id, result, score, length,
                           actor_id=actor_id, branch=match.branch,
                           **races_played(playing.matchups, b))
            for _, b, result, score, length in finished_games(chunk["done"], chunk["outcome"],
                                                              chunk["score"], chunk["length"])]


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
        self._batch = int(game.batch_size)
        self._policy = make_policy_fn(network)
        # `reward`: an already loaded plug-in (actors.rewards.load_reward_plugin), else by name.
        self._reward_fn = reward or reward_plugins.load_reward_plugin(
            self.config.reward_plugin, game.spec, 0, team_spirit=self.config.team_spirit)
        self._reward_shape = value_shape(network)
        # z (module docstring): the bank of a main agent, None for exploiters (z = 0).
        self._z = None if not z_size(network) else ZConditioning(
            game, network, z_bank, self.config.z_reward_probability, self.config.seed)
        self._teacher = None if teacher_params is None else jax.device_put(teacher_params)
        self._advance_teacher = None if teacher_params is None else make_teacher_advance(network)
        self._rng = jax.random.PRNGKey(self.config.seed)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._params = ParamsClient(params_source, self.agent_id, self.config.param_refresh_seconds,
                                    self.config.params_timeout, self._stop)
        # Where the learner's Reverb server is: an address, or a callable that says where it is
        # now (a learner group that Ray restarted serves from another port: `_drop_learner`).
        self._adder = None if reverb_address is None else UnrollAdder(
            reverb_address if callable(reverb_address) else (lambda: reverb_address), table,
            self.config.write_queue,
            (observation_template(game.spec, network), game.spec.side(0).zero_observation()),
            head_names(network), self.agent_id)
        self._reporter = _Reporter(match_source, retry_reports_if)
        self._match: Playing | None = None
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

    def _start(self):
        """Makes what the actor lacks: its writer, its learner's parameters and their
        refresher, a match."""
        if self._adder is not None and self._adder.failed:
            self._drop_learner()   # a run again after its learner's server was lost
        if self._adder is not None:
            self._adder.start()
        self._params.start()
        if self._match is None:
            self._new_match()

    def _drop_learner(self) -> None:
        """The learner's server was lost (its process restarted, with a new server and the
        parameters of its last checkpoint): drops the writer (the unrolls queued for the lost
        server go with its replay), the parameters and their refresher, so that `_start` makes
        them again at the server's address now, with the restarted learner's parameters
        (older than the ones played: the refresher asks only for newer ones)."""
        self._adder.drop()
        self._params.drop()
        with self._lock:
            self._m["reconnects"] += 1

    def _new_match(self):
        def draw():
            request = Match.of(self.match_source.request_match(self.agent_id), self.agent_id)
            if request.opponent_id == self.agent_id:
                return request, self._params.version, self._params.params
            # a damaged frozen player raises WithdrawnPlayer here, now out of matchmaking
            return (request, *self._params.wait(request.opponent_id))
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
            **({} if self._z is None else self._z.reset()))
        with self._lock:
            self._m["matches"] += 1
            self._m["games_abandoned"] += abandoned

    # ------------------------------------------------------------------ the loop

    def _take_refresh(self):
        if self._params.refresh():
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
            games, played = step_stepwise(self.game, self._policy, self._params.params,
                                          self._match.opponent_params, games, key, obs0=obs0)
            records.append((played._replace(opponent_action=None), None if z is None else z[1]))
            versions.append(self._params.version)
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
            self._params.params, self._match.opponent_params, key,
            s.games._replace(game_state=self.game.state), s.z, self._z_plan(num_steps))
        self.game.state = games.game_state
        self._stream = s._replace(games=games._replace(game_state=None), z=z)
        chunk = jax.device_get(chunk)
        chunk["version"] = np.full(num_steps, self._params.version, np.int32)
        return chunk, last_state

    def _fused(self, num_steps: int):
        if num_steps not in self._fused_fns:
            self._fused_fns[num_steps] = make_fused_unroll(self.network, self.game.fns.step,
                                                           num_steps)
        return self._fused_fns[num_steps]

    def _z_plan(self, num_steps: int):
        """z's candidates for the games starting at each step of the next unroll
        (`ZConditioning.plan`), None without z."""
        return None if self._z is None else self._z.plan(num_steps)

    def _pseudo_rewards(self, chunk: dict) -> dict:
        """z's pseudo-rewards of the new steps (`ZConditioning.follow`), the tracker's state
        carried in the Stream from one unroll to the next."""
        followed, pseudo = self._z.follow(self._stream.z_followed, chunk)
        self._stream = self._stream._replace(z_followed=followed)
        return pseudo

    def _unroll(self):
        """Plays the steps of one unroll, writes it, reports results; may start a new match."""
        steps_needed = self.config.unroll_length - (0 if self._stream.carry is None else 1)
        play = self._play_fused if self._fused_fns is not None else self._play_stepwise
        before = self._stream
        chunk, last_state = play(steps_needed)
        if self._z is not None:
            chunk["pseudo_reward"] = self._pseudo_rewards(chunk)
            del chunk["z_active"]
        chunk["reward"] = training_rewards(chunk, self._reward_fn, self._reward_shape)
        self._report(game_results(chunk, self._match, self.agent_id, self.actor_id))
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

    def _report(self, results: list[GameResult]):
        """Counts the finished games in the match and hands them to the reporter's thread."""
        self._match = self._match._replace(episodes=self._match.episodes + len(results))
        with self._lock:
            self._m["episodes"] += len(results)
        if results:
            self._reporter.put(results)

    def _write(self, chunk: dict, core_state):
        """Hands the unrolls (a time-major [T, B] batch: B items of [T]) to the adder; when the
        learner's server moved, makes the writer and parameters again where it is now."""
        if self._adder is None:
            return
        try:
            items = self._adder.add(chunk, core_state, self._stop)
        except ReplayServerMoved:
            self._drop_learner()
            self._start()
            return
        with self._lock:
            self._m["items"] += items

    # ------------------------------------------------------------------ RPC surface

    def _run_while(self, going) -> None:
        """Plays whole unrolls while `going()` and not stopped; delivers the queued reports."""
        started = time.monotonic()
        try:
            while not self._stop.is_set() and going():
                self._unroll()
        finally:
            with self._lock:
                self._m["running_seconds"] += time.monotonic() - started
            self._reporter.flush(timeout=30.0)

    def run(self, num_steps: int | None = None, stop_event: threading.Event | None = None) -> int:
        """Plays whole unrolls until `num_steps` batch steps (each advances all B games) are
        done, `stop()` is called or `stop_event` is set. Returns the batch steps played."""
        self._stop.clear()
        self._start()
        start_steps = self._m["batch_steps"]
        self._run_while(lambda: not (stop_event is not None and stop_event.is_set()) and (
            num_steps is None or self._m["batch_steps"] - start_steps < num_steps))
        return self._m["batch_steps"] - start_steps

    def run_episodes(self, num_episodes: int) -> int:
        """Plays whole unrolls until at least `num_episodes` more games have finished."""
        self._stop.clear()
        self._start()
        target = self._m["episodes"] + num_episodes
        self._run_while(lambda: self._m["episodes"] < target)
        return self._m["episodes"] - target + num_episodes

    def stop(self) -> None:
        """Stops `run` after the current unroll."""
        self._stop.set()

    def close(self) -> None:
        """Stops the refresh, report and writer threads (flushing what is queued)."""
        self._stop.set()
        self._reporter.close()
        self._params.close()
        if self._adder is not None:
            self._adder.close()

    def metrics(self) -> dict:
        """Env steps (games x steps) and their rate while running, episodes, unrolls and items
        written, parameter refreshes, the acting version, the current match and opponent."""
        with self._lock:
            m = dict(self._m)
        m["env_steps_per_second"] = m["env_steps"] / max(m["running_seconds"], 1e-9)
        m["policy_version"] = self._params.version
        match = self._match
        m["current_opponent"] = None if match is None else match.match.opponent_id
        m["opponent_version"] = None if match is None else match.opponent_version
        m["match"] = None if match is None else dataclasses.asdict(match.match)
        written = None if self._adder is None else self._adder.items_written
        if written is not None:
            m["items_written"] = written
        tau = getattr(self._reward_fn, "tau", None)
        if tau is not None:
            m["team_spirit"] = float(tau)
        if self._params.error is not None:
            m["refresh_error"] = repr(self._params.error)
        return m
