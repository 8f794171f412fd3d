"""Policy networks and their pure functions; parameter (de)serialisation with a version.

The interface every network offers (the learner and the actors only use this):

- `init(rng, example_observation) -> params`;
- `initial_state(batch) -> state`: the recurrent core state, a pytree of `[batch, ...]` arrays;
- `step(params, obs, state, first=None, opponent_obs=None) -> (AgentOutput, state)`: one step
  for a batch `[B, ...]` (what actors call);
- `unroll(params, obs_seq, first_seq, state, opponent_obs_seq=None) -> (AgentOutput, state)`:
  a time-major sequence `[T, B, ...]` (what learners call); the core is reset to its initial
  state before every step whose `first` is set, exactly as `step(..., first=...)` does.

`AgentOutput.logits` is a dict head_name -> logits (one independent categorical per head);
`AgentOutput.value` is `[B, *value_shape]` (or `[T, B, *value_shape]`): `value_shape` is ()
here (one value per side) and `(n,)` for the unit network (one per unit). `head_shapes` gives
each head's action shape per step in trajectories. An observation is an array or a dict of arrays;
if the dict has an `"action_mask"` entry (head_name -> bool `[..., num_actions]`), illegal
actions get the logit `MASKED_LOGIT` before any softmax. Every other leaf is flattened and
concatenated as the input features.

The reference network is AlphaStar's trunk in miniature (seed 002, "Architecture"; OpenAI
Five's shared LSTM): MLP -> LSTM -> a linear policy head per action head and a linear value
head. The value may also see the opponent's observation (AlphaStar uses it "during training
only"); without one (acting) it gets zeros, and actors do not need the value anyway.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp

Array = Any
PyTree = Any

MASKED_LOGIT = -1e9
"""Logit given to illegal actions: exp() underflows to exactly 0 and 0 * logit stays finite."""

MASK_KEY = "action_mask"


class AgentOutput(NamedTuple):
    logits: dict[str, Array]
    value: Array
    # Networks conditioned on z (the unit network with `pseudo_rewards`): one value per
    # pseudo-reward for following z, [..., K]; None for every other network.
    pseudo_value: Array | None = None


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Sizes of the reference network. `heads` maps head name -> number of actions."""

    heads: Mapping[str, int] = dataclasses.field(default_factory=lambda: {"action": 4})
    mlp_sizes: tuple[int, ...] = (256,)
    # 0: no recurrent core, a feed-forward MLP (for games whose observation is the whole
    # information state, like poker's information-state tensor); the core state is then an
    # LSTMState of width 1 that stays as it is, so every caller keeps one interface.
    lstm_size: int = 256
    value_uses_opponent: bool = False

    def __post_init__(self):
        if not self.heads or any(int(n) < 1 for n in self.heads.values()):
            raise ValueError(f"heads must map names to positive action counts, got {self.heads}")
        if not self.mlp_sizes or self.lstm_size < 0:
            raise ValueError("mlp_sizes must be non-empty and lstm_size >= 0 (0: no LSTM)")


def split_observation(obs: PyTree, batch_ndim: int) -> tuple[Array, dict[str, Array] | None]:
    """(features [*batch, F] float32, action masks or None) from an observation pytree."""
    mask = None
    if isinstance(obs, Mapping):
        mask = obs.get(MASK_KEY)
        obs = {k: v for k, v in obs.items() if k != MASK_KEY}
    leaves = jax.tree_util.tree_leaves(obs)
    if not leaves:
        raise ValueError("the observation has no feature leaves")
    batch_shape = jnp.shape(leaves[0])[:batch_ndim]
    features = jnp.concatenate(
        [jnp.reshape(x, (*batch_shape, -1)).astype(jnp.float32) for x in leaves], axis=-1)
    return features, mask


def apply_mask(logits: dict[str, Array], mask: dict[str, Array] | None) -> dict[str, Array]:
    """Sets the logits of illegal actions (mask False) to `MASKED_LOGIT`."""
    if mask is None:
        return logits
    return {h: jnp.where(mask[h], x, MASKED_LOGIT) if h in mask else x for h, x in logits.items()}


class _ReferenceModule(hk.Module):
    def __init__(self, config: NetworkConfig):
        super().__init__(name="agent")
        self._config = config
        self._torso = hk.nets.MLP(config.mlp_sizes, activate_final=True, name="torso")
        self._core = hk.ResetCore(hk.LSTM(config.lstm_size, name="lstm")) if config.lstm_size else None
        self._heads = {h: hk.Linear(int(n), name=f"policy_{h}") for h, n in config.heads.items()}
        self._value = hk.Linear(1, name="value")
        if config.value_uses_opponent:
            self._opponent_torso = hk.nets.MLP(
                config.mlp_sizes, activate_final=True, name="opponent_torso")

    def _outputs(self, core_out, mask, opponent_obs, batch_ndim):
        logits = apply_mask({h: head(core_out) for h, head in self._heads.items()}, mask)
        value_in = core_out
        if self._config.value_uses_opponent:
            if opponent_obs is None:
                opp = jnp.zeros((*core_out.shape[:-1], self._config.mlp_sizes[-1]), core_out.dtype)
            else:
                opp = self._opponent_torso(split_observation(opponent_obs, batch_ndim)[0])
            value_in = jnp.concatenate([core_out, opp], axis=-1)
        return AgentOutput(logits=logits, value=self._value(value_in)[..., 0])

    def step(self, obs, state, first, opponent_obs):
        features, mask = split_observation(obs, 1)
        if first is None:
            first = jnp.zeros(features.shape[:1], bool)
        core_out = self._torso(features)
        if self._core is not None:
            core_out, state = self._core((core_out, first), state)
        return self._outputs(core_out, mask, opponent_obs, 1), state

    def unroll(self, obs_seq, first_seq, state, opponent_obs_seq):
        features, mask = split_observation(obs_seq, 2)
        core_out = hk.BatchApply(self._torso)(features)
        if self._core is not None:
            core_out, state = hk.dynamic_unroll(self._core, (core_out, first_seq), state)
        return self._outputs(core_out, mask, opponent_obs_seq, 2), state


class RecurrentNetwork:
    """What every network here shares: an LSTM core state, and parameters initialised from
    one unbatched example observation. Subclasses set `config` (with `value_uses_opponent`),
    `core_size` and `_transformed` (a haiku multi-transform whose init takes
    (obs, first, state, opponent_obs))."""

    config: Any
    core_size: int
    _transformed: Any

    def initial_state(self, batch: int) -> hk.LSTMState:
        size = self.core_size
        return hk.LSTMState(hidden=jnp.zeros((batch, size), jnp.float32),
                            cell=jnp.zeros((batch, size), jnp.float32))

    def initial_state_unbatched(self) -> hk.LSTMState:
        """The initial core state of one game (no batch axis), e.g. for `zeros_unroll`."""
        return jax.tree_util.tree_map(lambda x: x[0], self.initial_state(1))

    def init(self, rng: Array, example_observation: PyTree,
             example_opponent_observation: PyTree = None, *,
             opponent_observation: PyTree = None) -> PyTree:
        """Parameters from an unbatched example observation (and opponent observation;
        `opponent_observation=` is an alias)."""
        if example_opponent_observation is None:
            example_opponent_observation = opponent_observation

        def add_axes(x):
            return jnp.asarray(x)[None, None]

        obs = jax.tree_util.tree_map(add_axes, example_observation)
        opp = None
        if self.config.value_uses_opponent:
            opp = jax.tree_util.tree_map(
                add_axes, example_observation if example_opponent_observation is None
                else example_opponent_observation)
        return self._transformed.init(rng, obs, jnp.zeros((1, 1), bool), self.initial_state(1), opp)


class ReferenceNetwork(RecurrentNetwork):
    """MLP -> LSTM -> policy logits per head + value; see the module docstring for the API.
    With `lstm_size=0` there is no LSTM: MLP -> heads, and the core state (width 1) is unused.

    All methods are pure functions of their arguments (safe to `jax.jit`); the object only
    holds the configuration.
    """

    def __init__(self, config: NetworkConfig | None = None):
        self.config = config or NetworkConfig()

        def build():
            module = _ReferenceModule(self.config)

            def init(obs, first, state, opponent_obs):
                return module.unroll(obs, first, state, opponent_obs)

            return init, (module.step, module.unroll)

        self._transformed = hk.without_apply_rng(hk.multi_transform(build))

    @property
    def core_size(self) -> int:
        # Without an LSTM the state is one zero per game, passed through unchanged (a zero
        # width would break reshapes with -1 along the way: the rollout's opponent slots).
        return self.config.lstm_size or 1

    @property
    def head_shapes(self) -> dict[str, tuple[int, ...]]:
        """Each head's action shape per step in trajectories: one action per head."""
        return {h: () for h in sorted(self.config.heads)}

    @property
    def value_shape(self) -> tuple[int, ...]:
        """The value's (and the training reward's) shape per step: one per side."""
        return ()

    def step(self, params, obs, state, first=None, opponent_obs=None):
        return self._transformed.apply[0](params, obs, state, first, opponent_obs)

    def unroll(self, params, obs_seq, first_seq, state, opponent_obs_seq=None):
        return self._transformed.apply[1](params, obs_seq, first_seq, state, opponent_obs_seq)


def log_probs(logits: dict[str, Array], actions: dict[str, Array]) -> dict[str, Array]:
    """log pi(a^head | s) per head, for integer actions of the logits' batch shape."""
    return {h: jnp.take_along_axis(jax.nn.log_softmax(x), actions[h][..., None].astype(jnp.int32),
                                   axis=-1)[..., 0]
            for h, x in logits.items()}


def exploring_log_probs(logits: dict[str, Array], epsilon: float) -> dict[str, Array]:
    """log mu per head for the epsilon-exploring behaviour policy

        mu(a | s) = (1 - epsilon) pi(a | s) + epsilon / |legal(s)|  for legal a, 0 otherwise,

    pi = softmax(logits) and the legal actions those whose logit is not `MASKED_LOGIT`: the
    epsilon-greedy-style exploration of IMPALA-era actors (Espeholt et al. 2018 learn from a
    behaviour policy mu != pi through V-trace's importance ratios pi / mu)."""
    out = {}
    for h, x in logits.items():
        legal = (x > MASKED_LOGIT / 2).astype(jnp.float32)
        mu = (1.0 - epsilon) * jax.nn.softmax(x) + epsilon * legal / legal.sum(-1, keepdims=True)
        out[h] = jnp.where(legal > 0, jnp.log(jnp.maximum(mu, 1e-30)), -jnp.inf)
    return out


def sample_actions(rng: Array, logits: dict[str, Array]) -> tuple[dict[str, Array], dict[str, Array]]:
    """Samples every head independently; returns (actions int32, their log-probabilities)."""
    keys = jax.random.split(rng, len(logits))
    actions = {h: jax.random.categorical(k, x).astype(jnp.int32)
               for k, (h, x) in zip(keys, sorted(logits.items()))}
    return actions, log_probs(logits, actions)
