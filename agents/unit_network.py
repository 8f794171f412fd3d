"""The unit network for team games of units (SMAX races): attention over units, an LSTM core,
a shared policy replica per unit, and autoregressive action heads with a pointer.

Architecture (AlphaStar, seed 002 "Architecture"; OpenAI Five, seed 003 appendix H), per step:

    units[i]  (unit i's own view: allies, enemies, own features)  -> MLP       -> token_i
    tokens    -> transformer layer (haiku MultiHeadAttention, alive units only)  -> token_i
    team      = MLP(max-pool_i token_i ++ global features)      (races, compositions, time)
    core      = LSTM(team)                                       one recurrent core per team
    replica_i = MLP(token_i ++ core);  h_i = MLP(replica_i ++ max-pool_k replica_k)
                (OpenAI Five: one shared policy replica per controlled unit, with a max-pool
                across the units so that every replica sees what the others intend)
    action_type_i ~ softmax(Linear(h_i))                         masked by the game
    target_i      ~ softmax_j(q_i . key_ij / sqrt(d))            pointer over enemy units j:
                    q_i = Linear(h_i) + Embed(action_type_i)     autoregressive on the type,
                    key_ij = MLP(enemy j's features as unit i sees them)
    composition   ~ softmax(Linear(core))                        team head, the strategy step
    value_i       = Linear(relu(Linear(core ++ opponent encoding) + Linear(h_i)))
                    one value per unit (OpenAI Five: each hero's own value and advantage, for
                    team spirit), training only: the opponent's observation (zeros if absent)

The statistic z (`z_size` > 0; AlphaStar, seed 002: the policy is conditioned on z, a build
order and cumulative statistics). z is the observation field `obs["z"]`, float [..., z_size]
(`actors.games.smax_races.z.encode_z`: army one-hot, attack order one-hot per rank, attacked types),
added by whoever acts or learns (actors, behaviour cloning); an observation without "z" (the
game's own: evaluators, the scripted matches) is read as z = 0, the unconditioned policy.

    z_embed   = MLP(z)                                           (relu, embed_size)
    team      = MLP(max-pool_i token_i ++ global features ++ z_embed)

so z reaches the core, every replica and every value. With `pseudo_rewards` = K > 0 the
network also has one team value per pseudo-reward for following z (AlphaStar: a separate
value function per pseudo-reward), `AgentOutput.pseudo_value` [..., K]:

    pseudo_value = MLP(core ++ opponent encoding)                (value_size, K)

The target is used by the game only for the action types in `pointer_action_types` (the
spec's: the action-type head's `pointer_types`, agents/specs.py). For every other type the network forces the target to 0 (a one-hot mask), so the
target contributes log-prob 0 and no gradient where it does not matter -- this is what the
autoregressive conditioning buys, and why `unroll` needs the taken action types.

Interface (the one of `agents.networks.ReferenceNetwork`, plus sampling):

- `init(rng, example_observation, example_opponent_observation=None) -> params`
- `initial_state(batch) -> hk.LSTMState`
- `step(params, obs, state, first=None, opponent_obs=None, actions=None)`: one step `[B]`;
- `unroll(params, obs_seq, first_seq, state, opponent_obs_seq=None, actions_seq=None)`:
  `[T, B]`. With `actions` / `actions_seq` (the taken actions, by head name) the target head is
  conditioned on the taken action types (teacher forcing: what the learner must pass to
  recompute log-probs of stored actions); without them on the most likely legal action type.
- `act(params, rng, obs, state, first=None, greedy=False) -> (Action, state)`: samples the
  action type, then the target given it, and the composition (what actors call).

Heads and values. `AgentOutput.logits` is a dict of independent categoricals: the unit heads
`"action_type"` and `"target"` keep their unit axis, `[B, n, A]`, and `"composition"` is the
team head, `[B, A]`; `AgentOutput.value` is one value per unit, `[B, n]`. The learner's losses
(`learners.losses`) take exactly these: one importance ratio per head and unit (AlphaStar's
independence assumption), each unit learning from its own reward, value and advantage, all of
them in one vectorised computation. Trajectories store actions and behaviour log-probs per
head, `[T, n]` for unit heads (`head_shapes`), and one reward per unit (`value_shape`).
`split_units=True` splits every unit head per unit (`"action_type/3"`, `[B, A]`) for tools
that want one head per unit; the learner refuses it (its per-unit credit needs the unit axis).

Speed. Every layer is applied to its input with the leading axes merged into one (`_flat`):
XLA's CPU dot is several times faster on rank-2 operands than on the [T, B, n, m, d] arrays
the units and their enemies make. The enemy-key MLP runs once per (unit, enemy) pair -- 256
pairs a step with 16 units -- so its hidden width is `pointer_hidden_size`, not `embed_size`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from agents.networks import MASK_KEY, MASKED_LOGIT, AgentOutput, RecurrentNetwork

Array = Any
PyTree = Any

ACTION_TYPE, TARGET, COMPOSITION = "action_type", "target", "composition"
UNIT_HEADS = (ACTION_TYPE, TARGET)


class Action(NamedTuple):
    """A sampled action of one side for a batch.

    game: the action in the game's format (head -> [B] or [B, n]);
    heads: the same action per network head (the trajectory's `Step.action`);
    log_probs: log mu(a^head | s) per network head, float32.
    """

    game: dict[str, Array]
    heads: dict[str, Array]
    log_probs: dict[str, Array]


@dataclasses.dataclass(frozen=True)
class UnitNetworkConfig:
    """Sizes of the unit network and the layout of the SMAX unit observation.

    `num_units` (n) own units, `num_action_types`, `num_targets` (enemy slots, also n in SMAX),
    `num_compositions`; `unit_feature_size` is jaxmarl's per-other-unit feature count (13 for
    its six unit types): unit i's observation row is [n-1 allies, num_targets enemies] x
    unit_feature_size followed by its own features, and enemy slot j is target j.
    """

    num_units: int = 5
    num_action_types: int = 6
    num_targets: int = 5
    num_compositions: int = 3
    unit_feature_size: int = 13
    pointer_action_types: tuple[int, ...] = ()  # from_spec: the action-type head's pointer_types
    embed_size: int = 32
    attention_heads: int = 2
    attention_key_size: int = 16
    attention_layers: int = 1
    core_size: int = 64
    replica_size: int = 32
    pointer_size: int = 16
    value_size: int = 32
    value_uses_opponent: bool = True
    split_units: bool = False
    pointer_hidden_size: int = 16  # hidden width of the enemy-key MLP (one per unit-enemy pair)
    z_size: int = 0  # length of the z input obs["z"] (0: no z; actors.games.smax_races.z.Z_SIZE for SMAX)
    pseudo_rewards: int = 0  # value heads for z's pseudo-rewards (needs z_size > 0)

    def __post_init__(self):
        for name in ("num_units", "num_action_types", "num_targets", "num_compositions",
                     "unit_feature_size", "embed_size", "attention_heads", "attention_key_size",
                     "core_size", "replica_size", "pointer_size", "value_size",
                     "pointer_hidden_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.z_size < 0 or self.pseudo_rewards < 0:
            raise ValueError("z_size and pseudo_rewards must be >= 0")
        if self.pseudo_rewards and not self.z_size:
            raise ValueError("pseudo_rewards (for following z) need a z input: set z_size")
        bad = [t for t in self.pointer_action_types if not 0 <= t < self.num_action_types]
        if bad:
            raise ValueError(f"pointer_action_types {bad} outside 0..{self.num_action_types - 1}")

    @classmethod
    def from_spec(cls, side_spec, **overrides) -> UnitNetworkConfig:
        """Sizes and the pointer's action types from a unit game's `SideSpec` (agents/specs.py:
        heads "composition", "action_type" and "target"); `overrides` set the rest."""
        heads = side_spec.action.heads
        missing = [h for h in (COMPOSITION, *UNIT_HEADS) if h not in heads]
        if missing:
            raise ValueError(f"the unit network needs the action heads {[COMPOSITION, *UNIT_HEADS]}; "
                             f"the spec lacks {missing} (it has {sorted(heads)})")
        values = dict(num_units=int(side_spec.num_units),
                      num_action_types=int(heads[ACTION_TYPE].num_values),
                      num_targets=int(heads[TARGET].num_values),
                      num_compositions=int(heads[COMPOSITION].num_values),
                      pointer_action_types=tuple(heads[ACTION_TYPE].pointer_types))
        values.update(overrides)
        return cls(**values)

    def head_names(self) -> list[str]:
        """The network's heads (the keys of `AgentOutput.logits` and of trajectory actions)."""
        if not self.split_units:
            return [COMPOSITION, ACTION_TYPE, TARGET]
        return [COMPOSITION] + [f"{h}/{i}" for h in UNIT_HEADS for i in range(self.num_units)]

    def head_values(self) -> dict[str, int]:
        """Each head's number of values: the team head's (the army pick), the action type's, the
        target's."""
        return {COMPOSITION: self.num_compositions, ACTION_TYPE: self.num_action_types, TARGET: self.num_targets}

    def head_shapes(self) -> dict[str, tuple[int, ...]]:
        """Each head's action shape per step: () for the team head, (n,) for unit heads."""
        if self.split_units:
            return {h: () for h in self.head_names()}
        return {COMPOSITION: (), ACTION_TYPE: (self.num_units,), TARGET: (self.num_units,)}


def split_heads(tree: dict[str, Array], num_units: int, unit_axis: int = -2) -> dict[str, Array]:
    """{"action_type": [..., n, A]} -> {"action_type/i": [..., A]}; the team head as it is.

    `unit_axis` is -2 for logits and -1 for actions and log-probs (`[..., n]`).
    """
    out = {COMPOSITION: tree[COMPOSITION]}
    for h in UNIT_HEADS:
        for i in range(num_units):
            out[f"{h}/{i}"] = jnp.take(tree[h], i, axis=unit_axis)
    return out


def merge_heads(tree: dict[str, Array], num_units: int) -> dict[str, Array]:
    """Inverse of `split_heads` for actions (integer leaves): stacks "h/i" into "h" [..., n]."""
    if ACTION_TYPE in tree:
        return dict(tree)
    out = {COMPOSITION: tree[COMPOSITION]}
    for h in UNIT_HEADS:
        out[h] = jnp.stack([tree[f"{h}/{i}"] for i in range(num_units)], axis=-1)
    return out


def _flat(fn, x: Array, keep: int = 1, *rest: Array) -> Array:
    """`fn(x, *rest)` with the leading axes of x (all but the last `keep`) merged into one, and
    of each of `rest` likewise (they share x's leading axes); the output gets them back.
    Numerically the same; XLA's CPU dot is much faster on rank-2 operands."""
    lead = x.shape[:x.ndim - keep]
    merged = [a.reshape((-1,) + a.shape[len(lead):]) for a in (x, *rest)]
    y = fn(*merged)
    return y.reshape(lead + y.shape[1:])


def _masked_max(x: Array, mask: Array) -> Array:
    """max over axis -2 of x [..., n, d] where mask [..., n]; zeros where nothing is masked in."""
    masked = jnp.where(mask[..., None], x, -jnp.inf)
    return jnp.where(jnp.any(mask, -1)[..., None], jnp.max(masked, axis=-2), 0.0)


class _UnitModule(hk.Module):
    def __init__(self, config: UnitNetworkConfig):
        super().__init__(name="unit_agent")
        c = self._c = config
        self._unit_encoder = hk.nets.MLP((c.embed_size, c.embed_size), activate_final=True,
                                         name="unit_encoder")
        self._enemy_encoder = hk.nets.MLP((c.pointer_hidden_size, c.pointer_size),
                                          name="enemy_encoder")
        self._attention = [
            (hk.MultiHeadAttention(c.attention_heads, c.attention_key_size,
                                   w_init=hk.initializers.VarianceScaling(1.0),
                                   model_size=c.embed_size, name=f"attention_{k}"),
             hk.LayerNorm(-1, True, True, name=f"attention_norm_{k}"),
             hk.nets.MLP((2 * c.embed_size, c.embed_size), name=f"attention_mlp_{k}"),
             hk.LayerNorm(-1, True, True, name=f"attention_mlp_norm_{k}"))
            for k in range(c.attention_layers)]
        self._team = hk.nets.MLP((c.core_size,), activate_final=True, name="team")
        self._core = hk.ResetCore(hk.LSTM(c.core_size, name="lstm"))
        self._replica = hk.nets.MLP((c.replica_size,), activate_final=True, name="replica")
        self._replica_pooled = hk.nets.MLP((c.replica_size,), activate_final=True,
                                           name="replica_pooled")
        self._action_type = hk.Linear(c.num_action_types, name="policy_action_type")
        self._query = hk.Linear(c.pointer_size, name="pointer_query")
        # one-hot lookup: a matmul whose gradient is a matmul (a gather's is a slow scatter)
        self._type_embed = hk.Embed(c.num_action_types, c.pointer_size, lookup_style="ONE_HOT",
                                    name="action_type_embed")
        self._composition = hk.Linear(c.num_compositions, name="policy_composition")
        self._value = hk.nets.MLP((c.value_size, 1), name="value")
        self._value_unit = hk.Linear(c.value_size, with_bias=False, name="value_unit")
        if c.z_size:
            self._z_encoder = hk.nets.MLP((c.embed_size,), activate_final=True, name="z_encoder")
        if c.pseudo_rewards:
            self._pseudo_value = hk.nets.MLP((c.value_size, c.pseudo_rewards), name="pseudo_value")
        if c.value_uses_opponent:
            self._opponent_unit = hk.nets.MLP((c.value_size,), activate_final=True,
                                              name="opponent_unit")
            self._opponent = hk.nets.MLP((c.value_size,), activate_final=True, name="opponent")

    # -- encoders (any leading batch shape) ------------------------------------------------
    @staticmethod
    def _global(obs) -> Array:
        lead = obs["alive"].shape[:-1]
        parts = [obs[k].reshape(*lead, -1).astype(jnp.float32)
                 for k in ("races", "compositions", "choosing", "time") if k in obs]
        return jnp.concatenate(parts, axis=-1)

    def _encode(self, obs):
        """(tokens [..., n, E], enemy keys [..., n, M, P], alive [..., n], team input)."""
        c = self._c
        units = obs["units"].astype(jnp.float32)
        alive = obs["alive"].astype(bool)
        f = c.unit_feature_size
        start = (c.num_units - 1) * f
        enemies = units[..., start:start + c.num_targets * f]
        enemies = enemies.reshape(*units.shape[:-1], c.num_targets, f)
        keys = _flat(self._enemy_encoder, enemies)
        tokens = _flat(self._unit_encoder, jnp.concatenate([units, alive[..., None]], -1))
        # Attention among the alive own units (a unit always attends to itself, so every row
        # has a key even when the whole team is dead).
        eye = jnp.eye(c.num_units, dtype=bool)
        mask = (alive[..., None, :] & alive[..., :, None]) | eye
        mask = mask[..., None, :, :]  # [..., heads, n, n]
        for attention, norm, mlp, mlp_norm in self._attention:
            attended = _flat(lambda x, m, a=attention: a(x, x, x, m), tokens, 2, mask)
            tokens = norm(tokens + attended)
            tokens = mlp_norm(tokens + _flat(mlp, tokens))
        parts = [_masked_max(tokens, alive), self._global(obs)]
        if c.z_size:
            z = obs.get("z")
            if z is None:  # the game's own observation: z = 0 (unconditioned)
                z = jnp.zeros((*alive.shape[:-1], c.z_size), jnp.float32)
            parts.append(_flat(self._z_encoder, jnp.asarray(z, jnp.float32)))
        team = jnp.concatenate(parts, -1)
        return tokens, keys, alive, _flat(self._team, team)

    def _encode_opponent(self, opponent_obs, like: Array) -> Array:
        c = self._c
        if opponent_obs is None:
            return jnp.zeros((*like.shape[:-1], c.value_size), like.dtype)
        units = opponent_obs["units"].astype(jnp.float32)
        alive = opponent_obs["alive"].astype(bool)
        pooled = _masked_max(_flat(self._opponent_unit, units), alive)
        return _flat(self._opponent, jnp.concatenate([pooled, self._global(opponent_obs)], -1))

    # -- heads ------------------------------------------------------------------------------
    def _replicas(self, tokens, core_out):
        c = self._c
        core_b = jnp.broadcast_to(core_out[..., None, :], (*tokens.shape[:-1], c.core_size))
        r = _flat(self._replica, jnp.concatenate([tokens, core_b], -1))
        pooled = jnp.max(r, axis=-2, keepdims=True)  # cross-unit max-pool (OpenAI Five)
        return _flat(self._replica_pooled,
                     jnp.concatenate([r, jnp.broadcast_to(pooled, r.shape)], -1))

    def _target_logits(self, h, keys, action_type, target_mask):
        c = self._c
        query = _flat(self._query, h) + self._type_embed(action_type)
        logits = jnp.einsum("...p,...jp->...j", query, keys) / np.sqrt(c.pointer_size)
        uses = jnp.isin(action_type, jnp.asarray(c.pointer_action_types))
        forced = jnp.arange(c.num_targets) == 0
        mask = jnp.where(uses[..., None], target_mask, forced)
        return jnp.where(mask, logits, MASKED_LOGIT)

    def _heads(self, obs, tokens, keys, core_out, opponent_obs, actions, rng, greedy):
        """Logits (game heads), value and, if `rng` is given, sampled actions (game format)."""
        masks = obs[MASK_KEY]
        h = self._replicas(tokens, core_out)
        type_logits = jnp.where(masks[ACTION_TYPE], _flat(self._action_type, h), MASKED_LOGIT)
        comp_logits = jnp.where(masks[COMPOSITION], _flat(self._composition, core_out),
                                MASKED_LOGIT)
        sampled = None
        if rng is not None:
            k_type, k_target, k_comp = jax.random.split(rng, 3)
            action_type = _choose(k_type, type_logits, greedy)
            composition = _choose(k_comp, comp_logits, greedy)
        elif actions is not None:
            action_type = jnp.asarray(actions[ACTION_TYPE]).astype(jnp.int32)
        else:
            action_type = jnp.argmax(type_logits, axis=-1).astype(jnp.int32)
        target_logits = self._target_logits(h, keys, action_type, masks[TARGET])
        if rng is not None:
            target = _choose(k_target, target_logits, greedy)
            sampled = {COMPOSITION: composition, ACTION_TYPE: action_type, TARGET: target}
        logits = {COMPOSITION: comp_logits, ACTION_TYPE: type_logits, TARGET: target_logits}
        return logits, self._unit_values(core_out, h, opponent_obs), sampled

    def _unit_values(self, core_out, h, opponent_obs):
        """(V^i [..., n], pseudo-reward values [..., K] or None): V^i = Linear(relu(Linear(core
        ++ opponent) + Linear(h_i))), the team's part computed once and shared by the units
        (the value module's own two layers)."""
        value_in = core_out
        if self._c.value_uses_opponent:
            value_in = jnp.concatenate([core_out, self._encode_opponent(opponent_obs, core_out)], -1)
        first, last = self._value.layers
        team = _flat(first, value_in)[..., None, :]
        hidden = jax.nn.relu(team + _flat(self._value_unit, h))
        pseudo = _flat(self._pseudo_value, value_in) if self._c.pseudo_rewards else None
        return _flat(last, hidden)[..., 0], pseudo

    # -- the pure functions -----------------------------------------------------------------
    def step(self, obs, state, first, opponent_obs, actions, rng, greedy):
        tokens, keys, _, team = self._encode(obs)
        if first is None:
            first = jnp.zeros(team.shape[:1], bool)
        core_out, state = self._core((team, first), state)
        logits, value, sampled = self._heads(obs, tokens, keys, core_out, opponent_obs, actions,
                                             rng, greedy)
        return logits, value, sampled, state

    def unroll(self, obs_seq, first_seq, state, opponent_obs_seq, actions_seq):
        tokens, keys, _, team = self._encode(obs_seq)
        core_out, state = hk.dynamic_unroll(self._core, (team, first_seq), state)
        logits, value, _ = self._heads(obs_seq, tokens, keys, core_out, opponent_obs_seq,
                                       actions_seq, None, False)
        return logits, value, state


def _choose(rng, logits, greedy) -> Array:
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return jax.random.categorical(rng, logits).astype(jnp.int32)


def _log_prob(logits, action) -> Array:
    return jnp.take_along_axis(jax.nn.log_softmax(logits), action[..., None], axis=-1)[..., 0]


class UnitNetwork(RecurrentNetwork):
    """See the module docstring. All methods are pure functions of their arguments (safe to
    `jax.jit`); the object holds only the configuration."""

    def __init__(self, config: UnitNetworkConfig | None = None):
        self.config = config or UnitNetworkConfig()
        self.unroll_takes_actions = True  # the learner should pass actions_seq=steps.action

        def build():
            module = _UnitModule(self.config)

            def init(obs, first, state, opponent_obs):
                return module.unroll(obs, first, state, opponent_obs, None)

            return init, (module.step, module.unroll)

        self._transformed = hk.without_apply_rng(hk.multi_transform(build))

    @property
    def head_names(self) -> list[str]:
        return self.config.head_names()

    @property
    def core_size(self) -> int:
        return self.config.core_size

    @property
    def head_shapes(self) -> dict[str, tuple[int, ...]]:
        """Each head's action shape per step in trajectories (the team head's (), n units')."""
        return self.config.head_shapes()

    @property
    def value_shape(self) -> tuple[int, ...]:
        """The value's (and the training reward's) shape per step: one per unit."""
        return (self.config.num_units,)

    def _output(self, logits, values) -> AgentOutput:
        if self.config.split_units:
            logits = split_heads(logits, self.config.num_units)
        value, pseudo_value = values
        return AgentOutput(logits=logits, value=value, pseudo_value=pseudo_value)

    def _game_actions(self, actions):
        return None if actions is None else merge_heads(actions, self.config.num_units)

    def step(self, params, obs, state, first=None, opponent_obs=None, actions=None):
        logits, value, _, state = self._transformed.apply[0](
            params, obs, state, first, opponent_obs, self._game_actions(actions), None, False)
        return self._output(logits, value), state

    def unroll(self, params, obs_seq, first_seq, state, opponent_obs_seq=None, actions_seq=None):
        logits, value, state = self._transformed.apply[1](
            params, obs_seq, first_seq, state, opponent_obs_seq, self._game_actions(actions_seq))
        return self._output(logits, value), state

    def act(self, params, rng, obs, state, first=None, greedy: bool = False):
        """Samples (or, `greedy`, takes the most likely) composition, action types and targets
        given the types; returns (Action, new state)."""
        logits, _, sampled, state = self._transformed.apply[0](
            params, obs, state, first, None, None, rng, greedy)
        log_probs = {h: _log_prob(logits[h], sampled[h]) for h in logits}
        heads = sampled
        if self.config.split_units:
            heads = split_heads(sampled, self.config.num_units, unit_axis=-1)
            log_probs = split_heads(log_probs, self.config.num_units, unit_axis=-1)
        return Action(game=sampled, heads=heads, log_probs=log_probs), state

