"""Agents: networks, their pure initial_state/step/unroll functions, versioned parameters and their (de)serialisation.

    from agents import make_network, act
    network = make_network(game.spec, unit=capabilities.unit_network)   # UnitNetwork or ReferenceNetwork
    action, state = act(network, params, rng, obs, state, first)   # what actors call (jittable)
    policy = load_policy("agent.npz")          # an exported agent (experiments.export): agents/exported.py
"""

from __future__ import annotations

from typing import Any

import jax

from agents.exported import ExportedFileError, Policy, load_policy
from agents.networks import NetworkConfig, ReferenceNetwork, exploring_log_probs, sample_actions
from agents.unit_network import Action, UnitNetwork, UnitNetworkConfig

__all__ = ["Action", "ExportedFileError", "NetworkConfig", "Policy", "ReferenceNetwork", "UnitNetwork",
           "UnitNetworkConfig", "act", "head_names", "load_policy", "make_network"]

SMALL_REFERENCE = dict(mlp_sizes=(64,), lstm_size=64)
"""Reference-network sizes for a laptop league (poker, matrix games)."""


def initial_params(network, game_spec, index: int, seed: int):
    """A network's initial parameters (numpy arrays), seeded by `seed` and an index (a learning
    agent's, a race's): `network.init` on side 0's zero observation."""
    import numpy as np

    return jax.tree_util.tree_map(np.asarray, _init(network, game_spec, jax.random.PRNGKey(seed * 1000 + index)))


def parameter_shapes(network, game_spec):
    """The shapes and dtypes of a network's parameters (`jax.ShapeDtypeStruct` leaves), without
    running it: `jax.eval_shape` traces `network.init` and compiles nothing. For checks in a
    process that does not learn (the league's driver): `initial_params` runs the init op by op,
    which left the SMAX league's driver holding ~0.4 GB for its whole run (issue 55)."""
    return jax.eval_shape(lambda: _init(network, game_spec, jax.random.PRNGKey(0)))


def _init(network, game_spec, key):
    obs = game_spec.sides[0].zero_observation()
    return network.init(key, obs, opponent_observation=obs)


def make_network(game_spec, config: UnitNetworkConfig | NetworkConfig | dict | None = None,
                 side: int = 0, *, unit: bool = False, hidden_size: int | None = None,
                 core_size: int | None = None, z: tuple[int, int] | None = None):
    """The network for a game: `UnitNetwork` where `unit` (the game's `unit_network` capability,
    `actors.games.base.Capabilities`, which the caller that knows the game passes: the spec's
    heads "composition", "action_type" and "target"), the MLP+LSTM `ReferenceNetwork` otherwise
    (poker, matrix games). A config object picks its own network whatever `unit` says.

    `config` is a full config object, or a dict of overrides of the small defaults (sizes
    and head counts are taken from the spec). `hidden_size` / `core_size` are the two sizes a
    run config usually sets: the embedding (unit network: unit embedding and policy replica;
    reference network: its MLP) and the recurrent core (reference network: 0 is no
    LSTM, an MLP of two layers of `hidden_size` in its place). `z` = (z's length, pseudo-reward
    count): the unit network takes the statistic z as an input (`obs["z"]`,
    `actors.games.smax_races.z.encode_z`: `Z_SIZE`) and has a value head per pseudo-reward for following
    it (`actors.games.smax_races.z.PSEUDO_REWARDS`); ignored for other games. The caller passes the sizes
    (agents sit below actors in the layers and do not import them)."""
    side_spec = game_spec.side(side)
    if isinstance(config, UnitNetworkConfig | NetworkConfig):
        return UnitNetwork(config) if isinstance(config, UnitNetworkConfig) else ReferenceNetwork(config)
    overrides = {}
    if unit:
        if hidden_size:
            overrides.update(embed_size=hidden_size, replica_size=hidden_size)
        if core_size:
            overrides.update(core_size=core_size)
        if z:
            overrides.update(z_size=int(z[0]), pseudo_rewards=int(z[1]))
        overrides.update(config or {})
        return UnitNetwork(UnitNetworkConfig.from_spec(side_spec, **overrides))
    values = dict(SMALL_REFERENCE, heads=side_spec.network_heads(), value_uses_opponent=True)
    if hidden_size:
        values.update(mlp_sizes=(hidden_size,))
    if core_size is not None:
        values.update(lstm_size=core_size)
        if not core_size:
            # Without a recurrent core the MLP takes the LSTM's place: two layers of its width.
            values.update(mlp_sizes=values["mlp_sizes"] * 2)
    values.update(config or {})
    return ReferenceNetwork(NetworkConfig(**values))


def network_key(network):
    """A hashable key of what a network computes (its class and configuration), for caches
    of compiled functions: two network objects with the same key share them. A network
    without a `config` is its own key (the cache then holds it: never confused with another)."""
    config = getattr(network, "config", None)
    return network if config is None else (type(network).__qualname__, repr(config))


def z_size(network) -> int:
    """The length of the network's z input (0: the network takes no z)."""
    return int(getattr(getattr(network, "config", None), "z_size", 0))


def pseudo_reward_count(network) -> int:
    """How many pseudo-rewards (value heads) for following z the network has (0: none)."""
    return int(getattr(getattr(network, "config", None), "pseudo_rewards", 0))


def head_names(network) -> list[str]:
    """The network's action heads: the keys of its logits and of trajectory actions."""
    if hasattr(network, "head_names"):
        return list(network.head_names)
    return sorted(network.config.heads)


def act(network, params, rng, obs, state, first=None, greedy: bool = False,
        exploration: float = 0.0) -> tuple[Action, Any]:
    """One acting step for a batch: (Action(game, heads, log_probs), new core state).

    Networks with autoregressive heads sample inside (`network.act`); for the others every head
    is an independent categorical sampled from `step`'s logits, and the game's action is the
    heads' action. `exploration` = epsilon > 0 samples from the epsilon-exploring behaviour
    policy instead, and its log-probabilities are mu's (`networks.exploring_log_probs`)."""
    # A population program passes each agent's epsilon as an array (traced): it explores
    # (epsilon 0 gives pi itself).
    explore = not isinstance(exploration, int | float) or exploration > 0
    if hasattr(network, "act"):
        if explore:
            raise ValueError("exploration needs a network whose heads are sampled independently "
                             f"({type(network).__name__} samples its own); leave it at 0")
        return network.act(params, rng, obs, state, first, greedy=greedy)
    out, state = network.step(params, obs, state, first)
    if greedy:
        actions = {h: x.argmax(-1).astype("int32") for h, x in out.logits.items()}
        log_probs = {h: jax.nn.log_softmax(x).max(-1) for h, x in out.logits.items()}
    elif explore:
        actions, log_probs = sample_actions(rng, exploring_log_probs(out.logits, exploration))
    else:
        actions, log_probs = sample_actions(rng, out.logits)
    return Action(game=actions, heads=actions, log_probs=log_probs), state
