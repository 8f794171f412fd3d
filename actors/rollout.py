"""The one rollout: every batch of games in the project is played here.

- `play_step` (one step of every game of a JAX game: both sides act, the game's pure per-game
  step is vmapped over the batch), `play` (its `lax.scan` over T steps) and `play_to_end` (one
  game per slot, a `lax.while_loop`); `step_stepwise` / `play_stepwise` beside them for games
  that hold their own state (OpenSpiel's pool), with the same outputs: the running games
  (`Games`) and what each step produced (`Played`, time-major [T, B]).
- Callers: the replay path's actor (`actors.actor`: fused and stepwise), the evaluator
  (`actors.evaluator`), matches against a game's scripted AI (`actors.games.base.ScriptedOpponent`), a
  game's replay recording (SMAX's), the
  surgery check (`experiments.surgery.record`), and the device learner's `DeviceRollout` below
  (with `evaluate_pairs`).

The device rollout: a batch of games of a JAX game played on the device, in one `lax.scan`.

Podracer's Anakin (Hessel et al. 2021, "Podracer architectures for scalable RL", Sec. 3): the
environment, the acting and the learning in one compiled program, so that nothing per step
crosses to the host. `DeviceRollout` is the playing half; `learners.device` composes it with the
update into one jitted chunk of K updates.

    rollout = DeviceRollout(network, game.fns, batch_size=B, num_slots=M, unroll_length=T,
                            reward_fn=actors.rewards.device_reward("game", spec))
    carry, results = rollout.start(params, version, opponents, teacher, key, races)
    carry, unroll, results = rollout.unroll(params, version, opponents, teacher, carry, key)

- Side 0 is the learning agent (`params`, the learner's current parameters); side 1 is played
  by `opponents`: M slots of parameters stacked on a leading axis (`Opponents.params`), game b
  played by slot b // (B / M); a slot whose `use_self` is set plays `params` (self-play).
  Side 1's actions are one `vmap` over the slots of the network applied to B / M games each.
- `start` resets every game (in `races` [B, 2], SMAX) and plays one step; each `unroll` then
  plays T - 1 more and returns the T steps (`agents.trajectory`'s format, time-major [T, B])
  whose first is the previous unroll's last: unrolls overlap by one step, as the replay
  path's actor writes them, so every step but a chunk's very last is learnt on exactly once.
- Rewards: `reward_fn` is a traceable reward plug-in (`actors.rewards.device_reward`), called
  per step on side 0's fields with the version that plays (OpenAI Five's team spirit anneals
  with it) and shaped as the network's values (one per side, or per unit).
- Results: per slot, the finished games' wins, draws and losses (side 0's view), the sum of
  their scores (the game's own payoff to side 0: chips in poker) and of their lengths. Games
  still running when a chunk ends are abandoned (the next chunk resets every game for its new
  opponents): never reported.
- z (SMAX networks conditioned on it; AlphaStar): at each game's start side 0 takes a z drawn
  uniformly from its z bank (`ZSource`: the table and counts of the game's z bank (`Capabilities.z().ZBank`) for its
  matchup; counts of 0, as for exploiters, give z = 0) and each of z's pseudo-rewards is
  active with probability `z_probability` (where the game lets side 0 follow z:
  the tracker's `followable`); during the game the game's tracker of z
  (`Capabilities.z().tracker(fns)`, which the replay path's actor runs too) follows what side 0
  plays, and at the game's last step its pseudo-rewards are written with the active flags in
  `Step.pseudo_reward`. The opponent plays with z = 0.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from agents import act, network_key, pseudo_reward_count, z_size
from agents.trajectory import Step, Unroll

PyTree = Any


# ---------------------------------------------------------------------------------------------
# The one rollout (issue 30): every batch of games in the project is played by `play_step` (a JAX
# game's pure per-game step, traced: `play`'s `lax.scan`, `play_to_end`'s `while_loop`,
# `DeviceRollout`) or by `play_stepwise` (a game that holds its own state, e.g. OpenSpiel's
# pool: one jitted policy call and one `game.step` per step), with the same outputs: the running
# games (`Games`) and what each step produced (`Played`, time-major [T, B] over a rollout).
#
# A side acts through `act(key, obs, state, first) -> (Action, state)` (`network_policy`: a
# network with its parameters; a game's `ScriptedOpponent.side`: its scripted AI);
# `Action.game` is what the game is given.


class Games(NamedTuple):
    """A batch of B running games between two steps: the game's state (None where the game
    holds it), both sides' observations of the current step (obs0, obs1), both sides' core
    states, `first` [B] (the current step starts a game), and each game's steps and payoff to
    side 0 so far (`lengths` [B], `scores` [B])."""

    game_state: PyTree
    obs: tuple
    state0: PyTree
    state1: PyTree
    first: Any
    lengths: Any
    scores: Any

    @staticmethod
    def start(game_state, obs, state0, state1, batch_size: int, xp=jnp) -> Games:
        """Fresh games (every `first` set, nothing played)."""
        return Games(game_state, obs, state0, state1, xp.ones(batch_size, bool),
                     xp.zeros(batch_size, xp.int32), xp.zeros(batch_size, xp.float32))


class Played(NamedTuple):
    """What one step of every game produced, [B] (a rollout's: [T, B], time-major):

    observation / opponent_observation: what side 0 / side 1 acted on; action /
    opponent_action: their `Action`s; first: the step started its game; done, outcome, rewards
    [B, 2], signals: what the game returned (actors/games/base.py); length / score: the game's
    steps and payoff to side 0 including this step (where `done`: the finished game's result);
    state_before: side 0's core state before the step."""

    observation: PyTree
    opponent_observation: PyTree
    action: Any
    opponent_action: Any
    first: Any
    done: Any
    outcome: Any
    rewards: Any
    signals: PyTree
    length: Any
    score: Any
    state_before: PyTree


def network_policy(network, params, greedy: bool = False, exploration: float = 0.0):
    """A network's `act(key, obs, state, first) -> (Action, state)` with `params`
    (`exploration`: epsilon of `agents.act`'s exploring behaviour policy)."""
    return lambda key, obs, state, first: act(network, params, key, obs, state, first, greedy,
                                              exploration)


def _advance(games: Games, obs0, a0, a1, game_state, obs, state0, state1, rewards, done,
             outcome, signals, xp) -> tuple[Games, Played]:
    """The games after a step and the step's record: lengths and scores count up, and restart
    at 0 for the games that ended (the game has already reset them: auto-reset)."""
    lengths = games.lengths + 1
    scores = games.scores + xp.asarray(rewards)[:, 0].astype(xp.float32)
    played = Played(observation=obs0, opponent_observation=games.obs[1], action=a0,
                    opponent_action=a1, first=games.first, done=done, outcome=outcome,
                    rewards=rewards, signals=signals, length=lengths, score=scores,
                    state_before=games.state0)
    keep = ~xp.asarray(done, bool)
    games = Games(game_state, obs, state0, state1, xp.asarray(done, bool),
                  xp.where(keep, lengths, 0), xp.where(keep, scores, 0.0).astype(xp.float32))
    return games, played


def play_step(game_step, act0, act1, games: Games, key, obs0=None) -> tuple[Games, Played]:
    """One step of every game (traceable): side 0 acts on `obs0` (default: its observation;
    e.g. with z added), side 1 on its own, and the JAX game's pure per-game
    `game_step(state, (actions0, actions1)) -> (state, obs, rewards, done, outcome, signals)`
    steps them, vmapped over the batch."""
    k0, k1 = jax.random.split(key)
    obs0 = games.obs[0] if obs0 is None else obs0
    a0, state0 = act0(k0, obs0, games.state0, games.first)
    a1, state1 = act1(k1, games.obs[1], games.state1, games.first)
    game_state, obs, rewards, done, outcome, signals = jax.vmap(game_step)(
        games.game_state, (a0.game, a1.game))
    return _advance(games, obs0, a0, a1, game_state, obs, state0, state1, rewards, done, outcome,
                    signals, jnp)


def play(game_step, act0, act1, games: Games, key, num_steps: int) -> tuple[Games, Played]:
    """`num_steps` steps of every game in one `lax.scan`: (games, `Played` [T, B])."""
    def body(g, k):
        return play_step(game_step, act0, act1, g, k)

    return jax.lax.scan(body, games, jax.random.split(key, num_steps))


def play_to_end(game_step, act0, act1, games: Games, key, max_steps: int):
    """Every slot's first game played to its end (a `lax.while_loop` until every slot's game
    has ended; at most `max_steps` steps): one game per slot, so short games are not
    over-sampled. Returns (outcome [B] int8, score [B], length [B], ended [B] bool)."""
    b = games.first.shape[0]
    zero = jnp.zeros(b, jnp.int32)
    init = (games, key, jnp.zeros(b, bool), jnp.zeros(b, jnp.int8), jnp.zeros(b, jnp.float32),
            zero, 0)

    def running(s):
        return (~s[2].all()) & (s[-1] < max_steps)

    def body(s):
        g, k, ended, outcome, score, length, t = s
        k, step_key = jax.random.split(k)
        g, p = play_step(game_step, act0, act1, g, step_key)
        now = p.done & ~ended
        return (g, k, ended | p.done, jnp.where(now, p.outcome.astype(jnp.int8), outcome),
                jnp.where(now, p.score, score), jnp.where(now, p.length, length), t + 1)

    _, _, ended, outcome, score, length, _ = jax.lax.while_loop(running, body, init)
    return outcome, score, length, ended


def step_stepwise(game, policy, params0, params1, games: Games, key, obs0=None) -> tuple[Games, Played]:
    """`play_step` for a game that holds its own state (`game.step(actions) -> TimeStep`,
    actors/games/base.py): `policy` is the jitted acting step of both sides
    (`actors.actor.make_policy_fn`)."""
    obs0 = games.obs[0] if obs0 is None else obs0
    a0, a1, state0, state1 = policy(params0, params1, key, obs0, games.obs[1], games.state0,
                                    games.state1, games.first)
    t = game.step((a0.game, a1.game))
    xp = np if isinstance(t.done, np.ndarray) else jnp
    return _advance(games, obs0, a0, a1, None, t.observations, state0, state1, t.rewards, t.done,
                    t.outcome, t.signals, xp)


def play_stepwise(game, policy, params0, params1, games: Games, key, num_steps: int):
    """`play` for a game that holds its own state: `num_steps` calls of `step_stepwise`, the
    records kept where they are until the one transfer at the end. Returns (games, `Played`
    [T, B] as numpy arrays)."""
    records = []
    for k in jax.random.split(key, num_steps):
        games, played = step_stepwise(game, policy, params0, params1, games, k)
        records.append(played)
    return games, stack_host(records)


def stack_host(records: list) -> Any:
    """Records of single steps stacked time-major on the host ([T, B, ...] numpy)."""
    host = jax.device_get(records)   # one synchronisation for all of them
    return jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *host)


def finished_games(done, outcome, score, length) -> list[tuple[int, int, int, float, int]]:
    """The games that ended in a [T, B] record (`Played`'s fields, host arrays), in the order
    they ended: (step t, slot b, outcome +1/0/-1 of side 0, score, length)."""
    done = np.asarray(done, bool)
    outcome, score, length = (np.asarray(x) for x in (outcome, score, length))
    return [(int(t), int(b), int(np.sign(outcome[t, b])), float(score[t, b]), int(length[t, b]))
            for t, b in zip(*np.nonzero(done))]


# ---------------------------------------------------------------------------------------------
# The device rollout (Podracer's Anakin): the learner's own games against a bank of opponents.


class Opponents(NamedTuple):
    """Side 1's parameters: M slots stacked on a leading axis; `use_self` [M] bool: the slot
    plays the learner's own current parameters instead (its `params` entry is ignored)."""

    params: PyTree
    use_self: jax.Array


class Results(NamedTuple):
    """Finished games per opponent slot [M]: side 0's wins, draws, losses; the sums of their
    scores (the game's own payoff to side 0) and lengths (steps)."""

    wins: jax.Array
    draws: jax.Array
    losses: jax.Array
    score: jax.Array
    length: jax.Array

    @staticmethod
    def zeros(num_slots: int) -> Results:
        z = jnp.zeros(num_slots, jnp.int32)
        return Results(z, z, z, jnp.zeros(num_slots, jnp.float32), z)

    def __add__(self, other: Results) -> Results:  # type: ignore[override]
        return Results(*(a + b for a, b in zip(self, other)))


class ZSource(NamedTuple):
    """Where side 0's z comes from: `table` [R * R, N, Z] and `counts` [R * R] of the
    game's `Capabilities.z().ZBank` (matchup own * R + enemy); all counts 0: z = 0, nothing
    active."""

    table: jax.Array
    counts: jax.Array


class Carry(NamedTuple):
    """What one unroll hands the next: the running games, the last step played (its record and
    side 0's core state before it) and the teacher's core state; with z, the z tracker's state
    of the running games (the game's, held opaquely) and where side 0's z comes from."""

    games: Games
    last: dict
    last_state0: PyTree
    teacher_state: PyTree
    z: PyTree = None
    z_source: ZSource | None = None


class DeviceRollout:
    """See the module docstring. `fns`: a JAX game's pure per-game functions (`reset(key[,
    races])`, `step(state, actions)`: `actors.games.base.GameFunctions`)."""

    def __init__(self, network, fns, batch_size: int, num_slots: int, unroll_length: int,
                 reward_fn, value_shape: tuple[int, ...] = (), races: bool = False,
                 z_probability: float = 0.25, devices: list | None = None,
                 opponent_network=None, scripted=None, scripted_slots: int = 0, z_statistic=None):
        """`opponent_network` (None: `network`): what side 1 runs, for opponents of another
        shape than the learner (`benchmarks.best_response_bench`: a wider learner against a
        league's players). Its recurrent state must have the learner's shapes, and the
        learner's own parameters cannot be an opponent (`Opponents.use_self` all False).

        `scripted` (a function `games -> (act, initial state)` of a scripted side 1 for that
        many games, e.g. `functools.partial(scripted_opponent.side, fns, 1)`)
        and `scripted_slots` S: the first S opponent slots are played by it (their
        `Opponents` entries are ignored), the other M - S by their parameters."""
        if batch_size % num_slots:
            raise ValueError(f"the batch of {batch_size} games does not split into {num_slots} "
                             "opponent slots; pick a number of slots that divides it")
        if unroll_length < 2:
            raise ValueError("unroll_length must be >= 2 (one step to learn, one to bootstrap)")
        self.network, self.fns = network, fns
        self.opponent_network = opponent_network
        self.batch_size, self.num_slots, self.unroll_length = batch_size, num_slots, unroll_length
        self.reward_fn, self.value_shape, self.races = reward_fn, tuple(value_shape), races
        self.z_size, self.pseudo_count = z_size(network), pseudo_reward_count(network)
        self.z_probability = float(z_probability)
        # the game's statistic z (`Capabilities.z()`, e.g. actors/games/smax_races/z.py): what
        # playing a network with a z input needs, its tracker of z in a game (`step_games`)
        self.z_statistic = z_statistic
        self._z_tracker = (z_statistic.tracker(fns)
                           if z_statistic is not None and self.z_size and self.pseudo_count else None)
        if not 0 <= scripted_slots < num_slots or (scripted_slots and scripted is None):
            raise ValueError(f"scripted_slots must be in [0, {num_slots}) (the opponent slots) and "
                             f"needs a scripted side; got {scripted_slots}")
        self.scripted_slots = int(scripted_slots)
        self._scripted_games = self.scripted_slots * (batch_size // num_slots)
        self._scripted = scripted(self._scripted_games) if self.scripted_slots else None
        # Data parallel over `devices`: every array with the games' axis is split over them
        # (GSPMD: XLA partitions the program and averages the update's gradients across them).
        self.devices = list(devices or jax.local_devices()[:1])
        if batch_size % len(self.devices):
            raise ValueError(f"the batch of {batch_size} games does not split over "
                             f"{len(self.devices)} devices")
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        mesh = Mesh(np.array(self.devices), ("games",))
        self._games = NamedSharding(mesh, PartitionSpec("games"))
        self.key = ("rollout", type(fns).__qualname__, getattr(fns, "config", None), batch_size,
                    num_slots, unroll_length, getattr(reward_fn, "key", id(reward_fn)),
                    self.value_shape, races, self.z_probability, tuple(d.id for d in self.devices),
                    None if opponent_network is None else network_key(opponent_network),
                    self.scripted_slots, scripted)   # the scripted side is its own key

    def _shard(self, tree, axis: int = 0):
        """Every array of `tree` with the games' axis at `axis` split over the devices."""
        if len(self.devices) == 1:
            return tree
        from jax.sharding import NamedSharding, PartitionSpec

        spec = NamedSharding(self._games.mesh, PartitionSpec(*([None] * axis), "games"))

        def constrain(x):
            if hasattr(x, "ndim") and x.ndim > axis and x.shape[axis] == self.batch_size:
                return jax.lax.with_sharding_constraint(x, spec)
            return x

        return jax.tree_util.tree_map(constrain, tree)

    # -- acting ---------------------------------------------------------------------------

    def _act_opponents(self, params, opponents: Opponents, key, obs, state, first):
        """Side 1's actions: slot m's parameters (or `params`) on its B / M games; with
        `scripted_slots` S, the scripted side on the first S slots' games (`state`: the
        scripted side's state and the network's, one for each part)."""
        from agents import Action

        if not self.scripted_slots:
            return self._act_network(params, opponents, key, obs, state, first)
        n, s = self._scripted_games, self.scripted_slots
        head, tail = (lambda x: x[:n]), (lambda x: x[n:])
        k_scripted, k_network = jax.random.split(key)
        a_s, state_s = self._scripted[0](k_scripted, jax.tree_util.tree_map(head, obs), state[0],
                                         first[:n])
        rest = Opponents(jax.tree_util.tree_map(lambda x: x[s:], opponents.params),
                         opponents.use_self[s:])
        a_n, state_n = self._act_network(params, rest, k_network, jax.tree_util.tree_map(tail, obs),
                                         state[1], first[n:])
        game = {k: jnp.concatenate([a_s.game[k].astype(v.dtype), v]) for k, v in a_n.game.items()}
        return Action(game=game, heads={}, log_probs={}), (state_s, state_n)

    def _act_network(self, params, opponents: Opponents, key, obs, state, first):
        """Side 1's actions on the games of `opponents`' slots, B' / M' games each."""
        m = opponents.use_self.shape[0]

        def per_slot(x):
            return x.reshape((m, x.shape[0] // m) + x.shape[1:])

        def choose(bank, own):
            flag = opponents.use_self.reshape((m,) + (1,) * own.ndim)
            return jnp.where(flag, own[None], bank)

        network = self.network if self.opponent_network is None else self.opponent_network
        slot_params = (opponents.params if self.opponent_network is not None
                       else jax.tree_util.tree_map(choose, opponents.params, params))
        action, state = jax.vmap(
            lambda p, k, o, s, f: act(network, p, k, o, s, f))(
            slot_params, jax.random.split(key, m), jax.tree_util.tree_map(per_slot, obs),
            jax.tree_util.tree_map(per_slot, state), per_slot(first))
        return jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[2:]), (action, state))

    def _with_z(self, obs):
        if not self.z_size:
            return obs
        return {**obs, "z": jnp.zeros((self.batch_size, self.z_size), jnp.float32)}

    def _z_start(self, c: Carry, obs0, key):
        """Games starting this step take a z from the source (module docstring)."""
        b, k = self.batch_size, self.pseudo_count
        races = obs0["races"]                                          # [B, 2, races]
        n_races = int(round(c.z_source.counts.shape[0] ** 0.5))
        matchup = jnp.argmax(races[:, 0], -1) * n_races + jnp.argmax(races[:, 1], -1)
        counts = c.z_source.counts[matchup]
        k_pick, k_active = jax.random.split(key)
        pick = jnp.floor(jax.random.uniform(k_pick, (b,)) * jnp.maximum(counts, 1)).astype(jnp.int32)
        have = counts > 0
        candidate = c.z_source.table[matchup, pick] * have[:, None]
        free = self._z_tracker.followable(obs0)
        active = ((jax.random.uniform(k_active, (b, k)) < self.z_probability) & (have & free)[:, None])
        return self._z_tracker.start(c.z, c.games.first, candidate, active)

    def _step(self, params, version, opponents, c: Carry, key, exploration: float = 0.0):
        """One step of every game: (carry with the new game state, the step's record, its
        results per slot)."""
        c, record, finished = self.step_games(params, version, opponents, c, key, exploration)
        return c, record, self._results(*finished)

    def step_games(self, params, version, opponents, c: Carry, key, exploration: float = 0.0):
        """One step of every game (`play_step`): (carry, the step's record, (done, outcome,
        length, score) [B] of the games: the ones that ended this step have done set). Side 0
        samples from its epsilon-exploring behaviour policy when `exploration` > 0 (the
        record's log-probabilities are then mu's: V-trace corrects for it)."""
        from actors import rewards

        k_play, kz = jax.random.split(key)
        obs0 = self._with_z(c.games.obs[0])
        z = c.z
        if z is None and self.z_size and self.pseudo_count:
            raise ValueError("a network with a z input plays with the game's statistic z: pass "
                             "DeviceRollout(z_statistic=capabilities.z()) (actors.games.base.Capabilities)")
        if z is not None:
            z = self._z_start(c, obs0, kz)
            obs0 = {**obs0, "z": z.z}
        games, p = play_step(
            self.fns.step, network_policy(self.network, params, exploration=exploration),
            lambda k, o, s, f: self._act_opponents(params, opponents, k, o, s, f),
            c.games, k_play, obs0=obs0)
        fields = {"done": p.done, "outcome": p.outcome, "rewards": p.rewards, **p.signals}
        batch = rewards.side_batch(fields, 0, xp=jnp)
        reward = rewards.training_reward(self.reward_fn(batch, False, version), batch.get("present"),
                                         self.value_shape, xp=jnp)
        record = dict(observation=obs0, opponent_observation=p.opponent_observation,
                      action=p.action.heads, behaviour_log_prob=p.action.log_probs, reward=reward,
                      discount=1.0 - p.done.astype(jnp.float32), first=p.first,
                      policy_version=jnp.full(self.batch_size, version, jnp.int32))
        if z is not None:
            z, pseudo = self._z_tracker.after(z, obs0, p.action.heads, p.done)
            record["pseudo_reward"] = {"reward": pseudo, "active": z.active}
        c = c._replace(games=games, z=z)
        return self._shard(c), self._shard(record), (p.done, p.outcome, p.length, p.score)

    def _results(self, done, outcome, lengths, scores) -> Results:
        m = self.num_slots

        def per_slot(x):
            return x.reshape(m, -1).sum(1)

        done_i = done.astype(jnp.int32)
        return Results(
            wins=per_slot(done_i * (outcome > 0)), draws=per_slot(done_i * (outcome == 0)),
            losses=per_slot(done_i * (outcome < 0)),
            score=per_slot(jnp.where(done, scores, 0.0)).astype(jnp.float32),
            length=per_slot(jnp.where(done, lengths, 0)))

    # -- the public surface ----------------------------------------------------------------

    def reset(self, key, teacher=None, races=None, z_source: ZSource | None = None) -> Carry:
        """Every game reset (in `races` [B, 2] where the game has races), nothing played."""
        keys = jax.random.split(key, self.batch_size)
        if self.races:
            game_state, obs = jax.vmap(self.fns.reset)(keys, races)
        else:
            game_state, obs = jax.vmap(self.fns.reset)(keys)
        initial = self.network.initial_state(self.batch_size)
        opponent = initial
        if self.scripted_slots:
            opponent = (self._scripted[1],
                        self.network.initial_state(self.batch_size - self._scripted_games))
        c = Carry(games=Games.start(game_state, obs, initial, opponent, self.batch_size),
                  last={}, last_state0=initial, teacher_state=None if teacher is None else initial)
        if self._z_tracker is not None:
            if z_source is None:
                z_source = ZSource(jnp.zeros((1, 1, self.z_size), jnp.float32), jnp.zeros(1, jnp.int32))
            c = c._replace(z_source=z_source, z=self._z_tracker.init_state(
                self.batch_size, self.z_size, self.pseudo_count))
        return self._shard(c)

    def start(self, params, version, opponents: Opponents, teacher, key, races=None,
              z_source: ZSource | None = None, exploration: float = 0.0):
        """Resets every game (in `races` [B, 2] where the game has races) and plays one step:
        (carry, results of that step). `z_source`: side 0's z (networks with z; None: z = 0).
        `exploration`: see `step_games`."""
        reset_key, step_key = jax.random.split(key)
        c = self.reset(reset_key, teacher, races, z_source)
        initial = c.games.state0
        c, record, results = self._step(params, version, opponents, c, step_key, exploration)
        return c._replace(last=record, last_state0=initial), results

    def unroll(self, params, version, opponents: Opponents, teacher, c: Carry, key,
               exploration: float = 0.0):
        """T - 1 more steps: (carry, the unroll of T steps [T, B] with the core state (and, with
        a teacher, the teacher's) before its step 0, results of the new steps). `exploration`:
        see `step_games`."""
        def body(carry, k):
            carry, results = carry
            state_before = carry.games.state0
            carry, record, new = self._step(params, version, opponents, carry, k, exploration)
            return (carry, results + new), (record, state_before)

        keys = jax.random.split(key, self.unroll_length - 1)
        (c_new, results), (records, before) = jax.lax.scan(
            body, (c, Results.zeros(self.num_slots)), keys)
        steps = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), c.last, records)
        core_state = c.last_state0
        teacher_state = c.teacher_state
        if teacher is not None:
            core_state = (core_state, teacher_state)
            teacher_state = advance_teacher(self.network, teacher, teacher_state, steps)
        pseudo = steps.pop("pseudo_reward", {})
        unroll = Unroll(steps=self._shard(Step(pseudo_reward=pseudo, **steps), axis=1),
                        core_state=self._shard(core_state))
        last = jax.tree_util.tree_map(lambda x: x[-1], records)
        last_state0 = jax.tree_util.tree_map(lambda x: x[-1], before)
        c_new = c_new._replace(last=last, last_state0=last_state0, teacher_state=teacher_state)
        return c_new, unroll, results


def advance_teacher(network, teacher_params, state, steps: dict):
    """The teacher's core state before an unroll's last step, from its state before step 0:
    it follows the same observations as the policy (steps 0 .. T-2) with its own recurrent
    state (the replay path's actor calls it too: `actors.actor.make_teacher_advance`)."""
    learnt = jax.tree_util.tree_map(lambda x: x[:-1], steps)
    taken = ({"actions_seq": learnt["action"]}
             if getattr(network, "unroll_takes_actions", False) else {})
    _, state = network.unroll(teacher_params, learnt["observation"], learnt["first"], state, **taken)
    return state


def evaluate_pairs(rollout: DeviceRollout, params_a, params_b, key, races=None, max_steps: int = 10_000):
    """One game in each of the B slots of every pair: player a (side 0) against player b,
    `params_a` / `params_b` stacked on a leading pair axis [P, ...] (`races` [P, B, 2]), all
    pairs in one vmapped program (a `lax.while_loop` until every slot's game has ended; at most
    `max_steps` steps). Every slot counts its first game only, so short games are not
    over-sampled (as `actors.evaluator.Evaluator`'s quotas). Returns `Results` [P] (one slot:
    each pair) of numpy-able arrays."""

    network = rollout.network

    def one_pair(pa, pb, k, r):
        reset_key, play_key = jax.random.split(k)
        games = rollout.reset(reset_key, races=r).games
        outcome, score, length, ended = play_to_end(
            rollout.fns.step,
            lambda kk, o, s, f: act(network, pa, kk, rollout._with_z(o), s, f),  # z = 0
            network_policy(network, pb), games, play_key, max_steps)
        return Results(wins=(ended & (outcome > 0)).sum(), draws=(ended & (outcome == 0)).sum(),
                       losses=(ended & (outcome < 0)).sum(), score=jnp.where(ended, score, 0.0).sum(),
                       length=jnp.where(ended, length, 0).sum())

    keys = jax.random.split(key, jax.tree_util.tree_leaves(params_a)[0].shape[0])
    return jax.vmap(one_pair)(params_a, params_b, keys, races)
