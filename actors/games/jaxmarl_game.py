"""A JaxMARL `MultiAgentEnv` of two agents or two teams as a game of the functional protocol
(`GameFunctions`, actors/games/base.py): `--game=jaxmarl/<env_id>`, or your own environment
through a factory (`package.module:factory` returning `MyEnv()`, adapted by the registry and named
by the path, or `jaxmarl_game.adapt(MyEnv(), "mine", teams=...)` for teams of its own).

    game("SMAX", scenario=map_name_to_scenario("3m"))   # jaxmarl's registry, then adapt
    adapt(env, "mine", teams=(["red_0"], ["blue_0"]))     # any MultiAgentEnv instance

The adapter's rules (jaxmarl 0.2.0):

Teams. Side 0 plays `teams[0]`, side 1 `teams[1]`; together they hold every agent of the env,
once, and are of equal size. Unless `teams=` is given: an env of exactly 2 agents is one agent
a side; otherwise the agents are grouped by their name less a trailing `_<number>` (SMAX's
`ally_i` / `enemy_i`, MPE's `adversary_i` / `agent_i`): two groups are the two teams (in the
order of `env.agents`), one group of an even number of agents splits into its first and second
half; anything else (three groups, an odd count, unequal teams) raises ValueError naming the
fix, `teams=`.

Spaces. Every agent's action space is `Discrete` (`.n`): continuous envs are refused. Both sides
have the same spec (the league builds one network from side 0's): n_units = the team size, the
observation field `observation` float32 [n_units, obs_dim] (an agent's observation, any pytree,
flattened and padded with zeros to the largest agent's size), one action head `action` =
DiscreteHead(num_actions, shape=(n_units,)) with num_actions the largest agent's `n`. With one
agent a side the unit axis is dropped: `observation` [obs_dim], head shape (). `acting` is
always True (every agent acts every step; a turn-based env such as Hanabi says with its masks
who may do more than wait).

Masks. `env.get_avail_actions(state)` where the env defines it (SMAX), else
`env.get_legal_moves(state)` (Hanabi), else every value of the agent's own space; values past an
agent's own `n` are illegal. A row with no legal value (SMAX never has one; a dead agent of an
env that masks it out entirely) is one-hot at 0, as the protocol requires; the action is passed
on unchanged (clipped to the agent's `n`).

Steps. The env's `step_env` (its transition without reset) then, where the episode ended, a
fresh `env.reset` from the adapter state's own key: the same auto-reset as jaxmarl's
`MultiAgentEnv.step`, with one more end: the adapter ends an episode after `max_steps` steps
(`max_steps=`, else `env.max_steps` where the env has it (SMAX, MPE, Overcooked), else
1000), so the spec's bound holds for every env (Hanabi and the coin game have no attribute;
they end on their own). An env that defines no `step_env` but its own `step` is stepped by
`step` (its own auto-reset, then ours).

Payoff. Each step's team reward is the mean of its agents' rewards (signal `team_reward` [2],
raw, for the shaped reward plug-ins); the adapter sums them over the episode in its state. On
the final step p = sign(sum of team 0's - sum of team 1's) and rewards = [p, -p], outcome = p
(+1 / 0 / -1): zero-sum by construction whatever the env's rewards are. SMAX with its default
reward: the side that destroyed more of the other's health (normalised, plus the won-battle
bonus) wins, also at the time limit; with `use_self_play_reward=True` only a won battle scores.
An env whose agents share one reward (cooperative: Overcooked, Hanabi, MPE speaker-listener)
therefore always draws; it runs, but there is nothing to learn.

Loading. `game(env_id)` imports only the one module of the ids listed in `TWO_SIDED` and
`SHARED_REWARD` (jaxmarl's package `__init__` imports every env, prints and takes ~5 s; see
`actors.games._register_jaxmarl_packages`); any other id of jaxmarl's registry goes through
`jaxmarl.make`, which loads the whole package once (quietly). `game` raises UnknownGame for an
id jaxmarl does not register, or one that cannot be adapted, naming the ids that can.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import io
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxmarl.environments.multi_agent_env import MultiAgentEnv

from actors.games import fingerprint
from actors.games.base import Capabilities, Game, UnknownGame
from agents.specs import (
    MASK_KEY,
    ActionSpec,
    ArraySpec,
    DiscreteHead,
    GameSpec,
    ObservationSpec,
    SideSpec,
)

ACTION_HEAD = "action"
DEFAULT_MAX_STEPS = 1000

# jaxmarl 0.2.0's ids that adapt with their default arguments (2 agents or 2 equal teams,
# discrete actions, observations and rewards keyed by agent), as module:class: the class
# `jaxmarl.make(env_id, **kwargs)` calls with the kwargs, imported alone. Not here: the MPE
# envs of 1, 3 or more agents, or unequal teams (simple_tag 3 v 1, simple_adversary,
# simple_crypto; pass teams= or their num_* kwargs), continuous ones (facmac, world_comm,
# jaxnav, MABrax), HeuristicEnemySMAX (one team; its enemy is scripted), storm (observations
# and rewards by position, not agent).
TWO_SIDED = {
    "SMAX": "jaxmarl.environments.smax.smax_env:SMAX",
    "MPE_simple_push_v3": "jaxmarl.environments.mpe.simple_push:SimplePushMPE",
    "coin_game": "jaxmarl.environments.coin_game.coin_game:CoinGame",
    # cooperative, but each agent's reward has a part of its own (local_ratio): not always a draw
    "MPE_simple_reference_v3": "jaxmarl.environments.mpe.simple_reference:SimpleReferenceMPE",
}
# The same, with one reward shared by both agents: every game is a draw.
SHARED_REWARD = {
    "MPE_simple_speaker_listener_v4": "jaxmarl.environments.mpe.simple_speaker_listener:SimpleSpeakerListenerMPE",
    "hanabi": "jaxmarl.environments.hanabi.hanabi:HanabiEnv",
    "overcooked": "jaxmarl.environments.overcooked.overcooked:Overcooked",
    "overcooked_v2": "jaxmarl.environments.overcooked_v2.overcooked:OvercookedV2",
}


# -- teams -----------------------------------------------------------------------------------


def _group(agent) -> str:
    return re.sub(r"_?\d+$", "", str(agent))


def default_teams(agents: Sequence) -> tuple[list, list]:
    """The two teams of `agents` by the rule of the module docstring; ValueError if none."""
    agents = list(agents)
    hint = "pass teams=([side 0's agents], [side 1's agents]) to adapt()"
    if len(agents) == 2:
        return [agents[0]], [agents[1]]
    groups: dict[str, list] = {}
    for agent in agents:
        groups.setdefault(_group(agent), []).append(agent)
    if len(groups) == 2:
        team0, team1 = groups.values()
    elif len(groups) == 1 and len(agents) % 2 == 0 and agents:
        team0, team1 = agents[: len(agents) // 2], agents[len(agents) // 2:]
    else:
        raise ValueError(f"cannot split the agents {agents} into two teams: {len(agents)} agents in "
                         f"{len(groups)} groups by name ({', '.join(map(repr, groups))}); {hint}")
    if len(team0) != len(team1):
        raise ValueError(f"unequal teams: {team0} ({len(team0)}) against {team1} ({len(team1)}); both "
                         f"sides need as many agents; {hint}")
    return list(team0), list(team1)


def check_teams(agents: Sequence, teams) -> tuple[list, list]:
    """`teams` checked against the env's `agents` (every agent once, equal sizes)."""
    if len(teams) != 2:
        raise ValueError(f"teams: expected two lists of agent names, got {len(teams)}")
    team0, team1 = list(teams[0]), list(teams[1])
    named = team0 + team1
    unknown = [a for a in named if a not in agents]
    missing = [a for a in agents if a not in named]
    if unknown or missing or len(set(named)) != len(named):
        raise ValueError(f"teams {team0} / {team1} must name every agent of the env {list(agents)} once "
                         f"(unknown: {unknown}, missing: {missing})")
    if not team0 or len(team0) != len(team1):
        raise ValueError(f"unequal teams: {team0} ({len(team0)}) against {team1} ({len(team1)}); both "
                         f"sides need as many agents (and at least one)")
    return team0, team1


# -- the functions -----------------------------------------------------------------------------


class State(NamedTuple):
    """The adapter's state of one game."""

    env_state: Any
    key: jax.Array  # for stepping and the next episode's reset
    t: jax.Array  # int32, steps into the episode
    returns: jax.Array  # float32 [2], the team rewards summed over the episode


def _overrides(env, method: str) -> bool:
    """Whether `env` defines `method` itself (on its class, or an instance attribute as the coin
    game's `step_env`)."""
    return method in vars(env) or getattr(type(env), method) is not getattr(MultiAgentEnv, method)


def _strong(tree):
    """`tree` with weak types made strong (reset's and step's states must agree exactly: the
    device path scans over step)."""
    def cast(x):
        x = jnp.asarray(x)
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            return x
        return jnp.asarray(x, x.dtype)

    return jax.tree.map(cast, tree)


def _num_actions(env, agent) -> int:
    space = env.action_space(agent)
    n = getattr(space, "n", None)
    if n is None or np.ndim(n) != 0:
        raise ValueError(f"agent {agent!r}: action space {type(space).__name__} is not Discrete; the "
                         f"adapter plays discrete actions only")
    return int(n)


def _flat_size(tree) -> int:
    return int(sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(tree)))


class JaxMarlFunctions:
    """The pure, jittable reset and step of ONE game of a two-sided MultiAgentEnv (the rules of
    the module docstring)."""

    def __init__(self, env: MultiAgentEnv, name: str, teams=None, max_steps: int | None = None):
        agents = list(env.agents)
        self.env = env
        self.name = name
        self.teams = default_teams(agents) if teams is None else check_teams(agents, teams)
        self.agents = self.teams[0] + self.teams[1]
        self.num_units = len(self.teams[0])
        self.agent_actions = [_num_actions(env, a) for a in self.agents]
        self.num_actions = max(self.agent_actions)
        self.max_steps = int(max_steps or getattr(env, "max_steps", None) or DEFAULT_MAX_STEPS)
        self._step_env = env.step_env if _overrides(env, "step_env") else env.step
        if _overrides(env, "get_avail_actions"):
            self._avail = env.get_avail_actions
        elif callable(getattr(env, "get_legal_moves", None)):
            self._avail = env.get_legal_moves
        else:
            self._avail = None

        obs, env_state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
        self._check_keyed("reset's observations", obs)
        self.obs_sizes = [_flat_size(obs[a]) for a in self.agents]
        self.obs_dim = max(self.obs_sizes)
        actions = {a: jnp.zeros((), jnp.int32) for a in self.agents}
        _, _, rewards, dones, _ = jax.eval_shape(self._step_env, jax.random.PRNGKey(0), env_state, actions)
        self._check_keyed("step's rewards", rewards)
        if not isinstance(dones, Mapping) or "__all__" not in dones:
            raise ValueError(f"{type(env).__qualname__}: step's dones have no '__all__' entry")

        n = self.num_units
        unit = (n,) if n > 1 else ()
        head = DiscreteHead(self.num_actions, shape=unit)
        fields = {"observation": ArraySpec(unit + (self.obs_dim,), np.float32), "acting": ArraySpec((), np.bool_)}
        side = SideSpec(ObservationSpec(fields), ActionSpec({ACTION_HEAD: head}), num_units=n)
        self.spec = GameSpec(name, (side, side), self.max_steps, {"team_reward": ArraySpec((2,), np.float32)})
        self.config = (name, type(env).__module__, type(env).__qualname__,
                       tuple(tuple(t) for t in self.teams), self.max_steps, fingerprint(env))

    def _check_keyed(self, what: str, tree) -> None:
        if not isinstance(tree, Mapping) or any(a not in tree for a in self.agents):
            raise ValueError(f"{type(self.env).__qualname__}: {what} are not a dict keyed by agent name "
                             f"(agents {self.agents}); the adapter needs jaxmarl's per-agent dicts")

    # -- observations

    def _stack_obs(self, env_obs):
        """[2 * n_units, obs_dim] float32: each agent's observation flattened and zero-padded."""
        rows = []
        for agent, size in zip(self.agents, self.obs_sizes):
            leaves = [jnp.ravel(leaf).astype(jnp.float32) for leaf in jax.tree.leaves(env_obs[agent])]
            flat = jnp.concatenate(leaves) if leaves else jnp.zeros((0,), jnp.float32)
            rows.append(jnp.pad(flat, (0, self.obs_dim - size)))
        return jnp.stack(rows)

    def _masks(self, env_state):
        """[2 * n_units, num_actions] bool, at least one legal value in every row."""
        avail = self._avail(env_state) if self._avail is not None else None
        rows = []
        for agent, n in zip(self.agents, self.agent_actions):
            own = jnp.ones((n,), bool) if avail is None else jnp.ravel(jnp.asarray(avail[agent])).astype(bool)[:n]
            rows.append(jnp.pad(own, (0, self.num_actions - own.shape[0])))
        masks = jnp.stack(rows)
        none = ~jnp.any(masks, axis=-1, keepdims=True)
        return masks | (none & (jnp.arange(self.num_actions) == 0))

    def _observe(self, stacked, env_state):
        masks = self._masks(env_state)
        n = self.num_units
        out = []
        for i in range(2):
            o, m = stacked[i * n:(i + 1) * n], masks[i * n:(i + 1) * n]
            if n == 1:
                o, m = o[0], m[0]
            out.append({"observation": o, "acting": jnp.ones((), bool), MASK_KEY: {ACTION_HEAD: m}})
        return tuple(out)

    # -- the protocol

    def reset(self, key):
        key, reset_key = jax.random.split(key)
        env_obs, env_state = self.env.reset(reset_key)
        env_state = _strong(env_state)
        state = State(env_state, key, jnp.zeros((), jnp.int32), jnp.zeros((2,), jnp.float32))
        return state, self._observe(self._stack_obs(env_obs), env_state)

    def step(self, state: State, actions):
        key, step_key, reset_key = jax.random.split(state.key, 3)
        env_actions = {}
        for side in range(2):
            chosen = jnp.reshape(jnp.asarray(actions[side][ACTION_HEAD]), (self.num_units,))
            for j, agent in enumerate(self.teams[side]):
                n = self.agent_actions[self.agents.index(agent)]
                env_actions[agent] = jnp.clip(chosen[j], 0, n - 1).astype(jnp.int32)
        obs_step, state_step, env_rewards, dones, _ = self._step_env(step_key, state.env_state, env_actions)
        team_reward = jnp.stack([jnp.mean(jnp.stack([jnp.asarray(env_rewards[a], jnp.float32).reshape(())
                                                     for a in team])) for team in self.teams])
        returns = state.returns + team_reward
        t = state.t + 1
        done = jnp.asarray(dones["__all__"], bool).reshape(()) | (t >= self.max_steps)
        p = jnp.where(done, jnp.sign(returns[0] - returns[1]), 0.0)
        rewards = jnp.stack([p, -p]).astype(jnp.float32)
        outcome = p.astype(jnp.int8)

        obs_reset, state_reset = self.env.reset(reset_key)
        env_state = jax.tree.map(lambda r, s: jax.lax.select(done, r, s), _strong(state_reset), _strong(state_step))
        stacked = jnp.where(done, self._stack_obs(obs_reset), self._stack_obs(obs_step))
        new_state = State(env_state, key, jnp.where(done, 0, t).astype(jnp.int32),
                          jnp.where(done, 0.0, returns).astype(jnp.float32))
        return (new_state, self._observe(stacked, env_state), rewards, done, outcome,
                {"team_reward": team_reward.astype(jnp.float32)})


# -- the entry points ----------------------------------------------------------------------------


def adapt(env: MultiAgentEnv, name: str, teams: tuple[list, list] | None = None,
          max_steps: int | None = None) -> Game:
    """The `Game` of a two-sided MultiAgentEnv instance (rules: the module docstring). ValueError
    if it cannot be one (teams, continuous actions, observations not keyed by agent)."""
    fns = JaxMarlFunctions(env, name, teams, max_steps)
    return Game(name, functions=lambda: fns, capabilities=Capabilities())


def _quiet_full_jaxmarl():
    """The jaxmarl package, fully imported (what `jaxmarl.make` needs): where
    `actors.games._register_jaxmarl_packages` registered its packages unexecuted, they are
    executed now. Its prints are swallowed: mabrax's module sets sys.stdout/stderr to
    sys.__stdout__/__stderr__ (whether or not brax is installed), so those are swapped too, and
    all four are put back."""
    saved = sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__
    try:
        sys.stdout = sys.__stdout__ = io.StringIO()
        sys.__stderr__ = sys.stderr
        for name in ("jaxmarl.environments", "jaxmarl"):
            module = sys.modules.get(name)
            if module is None:
                importlib.import_module(name)
            elif not hasattr(module, "__all__"):  # registered unexecuted
                module.__spec__.loader.exec_module(module)
    finally:
        sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__ = saved
    return sys.modules["jaxmarl"]


@functools.cache
def registered_ids() -> tuple[str, ...]:
    """jaxmarl's `registered_envs`, read from jaxmarl/registration.py without importing it
    (importing it imports every env)."""
    module = sys.modules.get("jaxmarl.registration")
    if module is None:
        spec = importlib.util.find_spec("jaxmarl.registration")
        if spec is not None and spec.origin:
            with open(spec.origin) as f:
                tree = ast.parse(f.read())
            for node in tree.body:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "registered_envs"
                                                        for t in node.targets):
                    return tuple(ast.literal_eval(node.value))
        module = _quiet_full_jaxmarl().registration
    return tuple(module.registered_envs)


def ids_message() -> str:
    return (f"the jaxmarl ids of two agents or two equal teams: {', '.join(TWO_SIDED)}; with one reward "
            f"shared by both sides (every game a draw): {', '.join(SHARED_REWARD)}. Any other "
            f"MultiAgentEnv: a factory (--game=package.module:factory) returning the env, or "
            f"actors.games.jaxmarl_game.adapt(env, name, teams=(...)) for teams of its own")


def make_env(env_id: str, **env_kwargs) -> MultiAgentEnv:
    """jaxmarl's env `env_id` (what `jaxmarl.make(env_id, **env_kwargs)` builds); UnknownGame if
    jaxmarl has none or it fails to build."""
    where = {**TWO_SIDED, **SHARED_REWARD}.get(env_id)
    try:
        if where is not None:
            module_name, _, cls = where.partition(":")
            return getattr(importlib.import_module(module_name), cls)(**env_kwargs)
        if env_id not in registered_ids():
            raise UnknownGame(f"--game=jaxmarl/{env_id}: jaxmarl has no environment {env_id!r}; "
                              f"{ids_message()}")
        return _quiet_full_jaxmarl().make(env_id, **env_kwargs)
    except UnknownGame:
        raise
    except Exception as e:
        raise UnknownGame(f"--game=jaxmarl/{env_id}: building it raised {type(e).__name__}: {e}; "
                          f"{ids_message()}") from e


def game(env_id: str, **env_kwargs) -> Game:
    """`--game=jaxmarl/<env_id>`: jaxmarl's env, adapted (named `jaxmarl/<env_id>`)."""
    env = make_env(env_id, **env_kwargs)
    try:
        return adapt(env, f"jaxmarl/{env_id}")
    except ValueError as e:
        raise UnknownGame(f"--game=jaxmarl/{env_id}: {e}. {ids_message()}") from e
