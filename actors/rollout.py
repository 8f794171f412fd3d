"""The device rollout: a batch of games of a JAX game played on the device, in one `lax.scan`.

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
  per step on side 0's fields and shaped as the network's values (one per side, or per unit).
- Results: per slot, the finished games' wins, draws and losses (side 0's view), the sum of
  their scores (the game's own payoff to side 0: chips in poker) and of their lengths. Games
  still running when a chunk ends are abandoned (the next chunk resets every game for its new
  opponents): never reported.
- z (SMAX networks conditioned on it): side 0 plays with z = 0 and no pseudo-reward (the
  device path does not yet sample z from a bank: `experiments.program.experience_path`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from agents import act, z_size
from agents.trajectory import Step, Unroll

PyTree = Any


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


class Carry(NamedTuple):
    """What one unroll hands the next: the games, both sides' core states, the last step played
    (its record and side 0's core state before it) and each running game's length and score."""

    game_state: PyTree
    obs: tuple
    state0: PyTree
    state1: PyTree
    first: jax.Array
    last: dict
    last_state0: PyTree
    teacher_state: PyTree
    lengths: jax.Array
    scores: jax.Array


class DeviceRollout:
    """See the module docstring. `fns`: a JAX game's pure per-game functions (`reset(key[,
    races])`, `step(state, actions)`, e.g. `actors.games.jax_poker.PokerFunctions`)."""

    def __init__(self, network, fns, batch_size: int, num_slots: int, unroll_length: int,
                 reward_fn, value_shape: tuple[int, ...] = (), races: bool = False):
        if batch_size % num_slots:
            raise ValueError(f"the batch of {batch_size} games does not split into {num_slots} "
                             "opponent slots; pick a number of slots that divides it")
        if unroll_length < 2:
            raise ValueError("unroll_length must be >= 2 (one step to learn, one to bootstrap)")
        self.network, self.fns = network, fns
        self.batch_size, self.num_slots, self.unroll_length = batch_size, num_slots, unroll_length
        self.reward_fn, self.value_shape, self.races = reward_fn, tuple(value_shape), races
        self.z_size = z_size(network)
        self.key = ("rollout", type(fns).__qualname__, getattr(fns, "config", None), batch_size,
                    num_slots, unroll_length, getattr(reward_fn, "key", id(reward_fn)),
                    self.value_shape, races)

    # -- acting ---------------------------------------------------------------------------

    def _act_opponents(self, params, opponents: Opponents, key, obs, state, first):
        """Side 1's actions: slot m's parameters (or `params`) on its B / M games."""
        m = self.num_slots

        def per_slot(x):
            return x.reshape((m, x.shape[0] // m) + x.shape[1:])

        def choose(bank, own):
            flag = opponents.use_self.reshape((m,) + (1,) * own.ndim)
            return jnp.where(flag, own[None], bank)

        slot_params = jax.tree_util.tree_map(choose, opponents.params, params)
        action, state = jax.vmap(
            lambda p, k, o, s, f: act(self.network, p, k, o, s, f))(
            slot_params, jax.random.split(key, m), jax.tree_util.tree_map(per_slot, obs),
            jax.tree_util.tree_map(per_slot, state), per_slot(first))
        return jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[2:]), (action, state))

    def _with_z(self, obs):
        if not self.z_size:
            return obs
        return {**obs, "z": jnp.zeros((self.batch_size, self.z_size), jnp.float32)}

    def _step(self, params, version, opponents, c: Carry, key):
        """One step of every game: (carry with the new game state, the step's record, its
        results per slot)."""
        from actors import rewards
        from actors.actor import training_reward

        k0, k1 = jax.random.split(key)
        obs0 = self._with_z(c.obs[0])
        a0, state0 = act(self.network, params, k0, obs0, c.state0, c.first)
        a1, state1 = self._act_opponents(params, opponents, k1, c.obs[1], c.state1, c.first)
        game_state, obs, game_rewards, done, outcome, signals = jax.vmap(self.fns.step)(
            c.game_state, (a0.game, a1.game))
        fields = {"done": done, "outcome": outcome, "rewards": game_rewards, **signals}
        batch = rewards.side_batch(fields, 0, xp=jnp)
        reward = training_reward(self.reward_fn(batch, False), batch.get("present"),
                                 self.value_shape, xp=jnp)
        record = dict(observation=obs0, opponent_observation=c.obs[1], action=a0.heads,
                      behaviour_log_prob=a0.log_probs, reward=reward,
                      discount=1.0 - done.astype(jnp.float32), first=c.first,
                      policy_version=jnp.full(self.batch_size, version, jnp.int32))
        lengths = c.lengths + 1
        scores = c.scores + game_rewards[:, 0]
        results = self._results(done, outcome, lengths, scores)
        keep = ~done
        c = c._replace(game_state=game_state, obs=obs, state0=state0, state1=state1, first=done,
                       lengths=jnp.where(keep, lengths, 0), scores=jnp.where(keep, scores, 0.0))
        return c, record, results

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

    def start(self, params, version, opponents: Opponents, teacher, key, races=None):
        """Resets every game (in `races` [B, 2] where the game has races) and plays one step:
        (carry, results of that step)."""
        reset_key, step_key = jax.random.split(key)
        keys = jax.random.split(reset_key, self.batch_size)
        if self.races:
            game_state, obs = jax.vmap(self.fns.reset)(keys, races)
        else:
            game_state, obs = jax.vmap(self.fns.reset)(keys)
        initial = self.network.initial_state(self.batch_size)
        c = Carry(game_state=game_state, obs=obs, state0=initial, state1=initial,
                  first=jnp.ones(self.batch_size, bool), last={}, last_state0=initial,
                  teacher_state=None if teacher is None else initial,
                  lengths=jnp.zeros(self.batch_size, jnp.int32),
                  scores=jnp.zeros(self.batch_size, jnp.float32))
        c, record, results = self._step(params, version, opponents, c, step_key)
        return c._replace(last=record, last_state0=initial), results

    def unroll(self, params, version, opponents: Opponents, teacher, c: Carry, key):
        """T - 1 more steps: (carry, the unroll of T steps [T, B] with the core state (and, with
        a teacher, the teacher's) before its step 0, results of the new steps)."""
        def body(carry, k):
            carry, results = carry
            state_before = carry.state0
            carry, record, new = self._step(params, version, opponents, carry, k)
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
        unroll = Unroll(steps=Step(pseudo_reward={}, **steps), core_state=core_state)
        last = jax.tree_util.tree_map(lambda x: x[-1], records)
        last_state0 = jax.tree_util.tree_map(lambda x: x[-1], before)
        c_new = c_new._replace(last=last, last_state0=last_state0, teacher_state=teacher_state)
        return c_new, unroll, results


def advance_teacher(network, teacher_params, state, steps: dict):
    """The teacher's core state before an unroll's last step, from its state before step 0:
    it follows the same observations as the policy (steps 0 .. T-2) with its own recurrent
    state (as `actors.actor.make_teacher_advance` does on the replay path)."""
    learnt = jax.tree_util.tree_map(lambda x: x[:-1], steps)
    taken = ({"actions_seq": learnt["action"]}
             if getattr(network, "unroll_takes_actions", False) else {})
    _, state = network.unroll(teacher_params, learnt["observation"], learnt["first"], state, **taken)
    return state
