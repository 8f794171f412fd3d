"""JaxMARL envs of two agents or two teams as functional games (actors/games/jaxmarl_game.py):
payoffs worked by hand on tiny envs written here, teams, masks and padding, errors, and SMAX
(3 marines a side) played at random in a jitted, vmapped batch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxmarl.environments.multi_agent_env import MultiAgentEnv, State
from jaxmarl.environments.spaces import Discrete

from actors.games import jaxmarl_game
from actors.games.base import GameFunctions, random_legal_actions
from actors.games.functional import FunctionalBatchGame
from actors.games.registry import UnknownGame, resolve
from agents.specs import DiscreteHead


class Pennies(MultiAgentEnv):
    """agent_0 and agent_1 each show 0 or 1, `length` rounds: agent_0 scores 1 when they match,
    agent_1 scores 1 when they differ. Observation: [round, 1]."""

    def __init__(self, length: int = 1):
        super().__init__(num_agents=2)
        self.length = length
        self.action_spaces = {a: Discrete(2) for a in self.agents}

    def reset(self, key):
        state = State(done=jnp.array(False), step=jnp.array(0))
        return self.get_obs(state), state

    def get_obs(self, state):
        obs = jnp.stack([state.step.astype(jnp.float32), jnp.float32(1.0)])
        return {a: obs for a in self.agents}

    def step_env(self, key, state, actions):
        match = actions["agent_0"] == actions["agent_1"]
        rewards = {"agent_0": match.astype(jnp.float32), "agent_1": (~match).astype(jnp.float32)}
        step = state.step + jnp.int32(1)  # strong, where reset's 0 is weak: the adapter evens them
        done = step >= self.length
        state = State(done=done, step=step)
        return self.get_obs(state), state, rewards, {"agent_0": done, "agent_1": done, "__all__": done}, {}


class Squads(MultiAgentEnv):
    """Two squads, red (3 actions, observations of 2) and blue (2 actions, observations of 3);
    blue_1 has no legal action (a dead unit). Each agent's reward is its action times its
    weight; a game never ends on its own."""

    WEIGHTS = {"red_0": 1.0, "red_1": 10.0, "blue_0": 100.0, "blue_1": 1000.0}

    def __init__(self, agents=("red_0", "red_1", "blue_0", "blue_1")):
        super().__init__(num_agents=len(agents))
        self.agents = list(agents)
        self.action_spaces = {a: Discrete(3 if a.startswith("red") else 2) for a in self.agents}

    def reset(self, key):
        state = State(done=jnp.array(False), step=jnp.array(0))
        return self.get_obs(state), state

    def get_obs(self, state):
        return {a: jnp.full((2,) if a.startswith("red") else (3,), i + 1.0) for i, a in enumerate(self.agents)}

    def get_avail_actions(self, state):
        table = {"red_0": [1, 0, 1], "red_1": [0, 1, 0], "blue_0": [1, 1], "blue_1": [0, 0]}
        return {a: jnp.array(table[a], jnp.uint8) for a in self.agents}

    def step_env(self, key, state, actions):
        rewards = {a: actions[a].astype(jnp.float32) * self.WEIGHTS[a] for a in self.agents}
        state = State(done=jnp.array(False), step=state.step + 1)
        dones = {a: jnp.array(False) for a in self.agents}
        dones["__all__"] = jnp.array(False)
        return self.get_obs(state), state, rewards, dones, {}


def actions(a0, a1):
    return ({"action": np.asarray(a0, np.int32)}, {"action": np.asarray(a1, np.int32)})


def assert_scannable(fns):
    """reset's state and step's state have the same structure, shapes and dtypes (weak types
    included): the device path scans `step` from `reset`'s state."""
    state, obs = jax.eval_shape(fns.reset, jax.random.PRNGKey(0))
    acts = tuple({"action": jnp.zeros(s.action["action"].shape, jnp.int32)} for s in fns.spec.sides)
    stepped = jax.eval_shape(fns.step, state, acts)
    assert jax.tree.structure(stepped[0]) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(stepped[0]), jax.tree.leaves(state)):
        assert (a.shape, a.dtype, a.weak_type) == (b.shape, b.dtype, b.weak_type)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), stepped[1]) == jax.tree.map(lambda x: (x.shape, x.dtype), obs)


def test_pennies_payoff_by_hand():
    """One round: a match is +1 for side 0 (agent_0), a mismatch -1; zero-sum, as outcome."""
    game = jaxmarl_game.adapt(Pennies(), "pennies")
    fns = game.functions()
    assert isinstance(fns, GameFunctions) and game.capabilities.races == ()
    side = fns.spec.side(0)
    assert side.action["action"] == DiscreteHead(2) and side.num_units == 1
    assert side.observation["observation"].shape == (2,)
    batch = FunctionalBatchGame(fns, 4)
    ts = batch.reset(0)
    ts = batch.step(actions([0, 0, 1, 1], [0, 1, 0, 1]))
    np.testing.assert_array_equal(ts.rewards, [[1, -1], [-1, 1], [-1, 1], [1, -1]])
    np.testing.assert_array_equal(ts.outcome, [1, -1, -1, 1])
    assert ts.outcome.dtype == jnp.int8 and bool(np.all(ts.done))
    np.testing.assert_array_equal(ts.signals["team_reward"], [[1, 0], [0, 1], [0, 1], [1, 0]])
    assert_scannable(fns)


def test_payoff_sums_the_episode_and_restarts():
    """Three rounds, the payoff on the last: (match, differ, differ) is 1 point against 2, so -1;
    then a new game from round 0 with a fresh sum: (match, match, differ) is +1. Before the end
    rewards and outcome are 0; the observation after the end is the new game's."""
    batch = FunctionalBatchGame(jaxmarl_game.adapt(Pennies(length=3), "pennies3").functions(), 2)
    batch.reset(1)
    rounds = [([0, 1], [0, 1], 0), ([0, 1], [1, 0], 0), ([1, 0], [0, 1], -1),
              ([1, 1], [1, 1], 0), ([0, 0], [0, 0], 0), ([0, 0], [1, 1], 1)]
    for i, (a0, a1, payoff) in enumerate(rounds):
        ts = batch.step(actions(a0, a1))
        end = (i + 1) % 3 == 0
        np.testing.assert_array_equal(ts.done, [end, end])
        np.testing.assert_array_equal(ts.rewards, [[payoff, -payoff]] * 2)
        np.testing.assert_array_equal(ts.outcome, [payoff] * 2)
        np.testing.assert_array_equal(ts.observations[0]["observation"][:, 0], [(i + 1) % 3] * 2)


def test_max_steps_ends_a_game():
    """`max_steps` ends an episode the env would continue: after 2 of 5 rounds, 1 point each,
    a draw; the env's own `max_steps` is the default, else 1000."""
    fns = jaxmarl_game.adapt(Pennies(length=5), "pennies5", max_steps=2).functions()
    assert fns.spec.max_steps == 2
    assert_scannable(fns)
    batch = FunctionalBatchGame(fns, 1)
    batch.reset(0)
    ts = batch.step(actions([0], [0]))
    assert not ts.done[0]
    ts = batch.step(actions([0], [1]))
    assert ts.done[0] and ts.outcome[0] == 0 and ts.rewards[0, 0] == 0
    assert jaxmarl_game.adapt(Pennies(), "p").functions().spec.max_steps == jaxmarl_game.DEFAULT_MAX_STEPS


def test_teams_masks_and_padding():
    """Teams by name (red, blue); both sides' spec from the largest agent (3 actions, 3
    features); masks from get_avail_actions, values past an agent's own space illegal, the dead
    blue_1 one-hot at 0; actions reach the agents of their side in order."""
    fns = jaxmarl_game.adapt(Squads(), "squads").functions()
    assert fns.teams == (["red_0", "red_1"], ["blue_0", "blue_1"])
    for side in fns.spec.sides:
        assert side.num_units == 2 and side.action["action"] == DiscreteHead(3, (2,))
        assert side.observation["observation"].shape == (2, 3)
    batch = FunctionalBatchGame(fns, 2)
    ts = batch.reset(0)
    red, blue = ts.observations
    np.testing.assert_array_equal(red["action_mask"]["action"][0], [[1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(blue["action_mask"]["action"][0], [[1, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(red["observation"][0], [[1, 1, 0], [2, 2, 0]])
    np.testing.assert_array_equal(blue["observation"][0], [[3, 3, 3], [4, 4, 4]])
    for side, obs in zip(fns.spec.sides, ts.observations):
        side.check_observation(obs, (2,))
    ts = batch.step(actions([[2, 1], [0, 0]], [[1, 1], [0, 1]]))
    # red: mean(2 * 1, 1 * 10), blue: mean(1 * 100, 1 * 1000); the second game blue_1's 1 alone
    np.testing.assert_allclose(ts.signals["team_reward"], [[6, 550], [0, 500]])
    assert not np.any(ts.done) and not np.any(ts.rewards)


def test_teams_given_and_refused():
    """Unequal or unsplittable teams raise naming the fix (teams=); teams= picks any split that
    names every agent once."""
    with pytest.raises(ValueError, match=r"unequal teams.*teams="):
        jaxmarl_game.adapt(Squads(("red_0", "red_1", "blue_0")), "uneven")
    with pytest.raises(ValueError, match=r"3 agents in 1 groups.*teams="):
        jaxmarl_game.adapt(Squads(("red_0", "red_1", "red_2")), "three")
    mixed = jaxmarl_game.adapt(Squads(), "mixed", teams=(["red_0", "blue_0"], ["red_1", "blue_1"])).functions()
    assert mixed.teams == (["red_0", "blue_0"], ["red_1", "blue_1"])
    with pytest.raises(ValueError, match="missing"):
        jaxmarl_game.adapt(Squads(), "short", teams=(["red_0"], ["blue_0"]))
    from jaxmarl.environments.smax import HeuristicEnemySMAX

    with pytest.raises(ValueError, match="teams="):  # its enemy is scripted: one team
        jaxmarl_game.adapt(HeuristicEnemySMAX(), "heuristic")


def test_configs_tell_envs_apart():
    same = [jaxmarl_game.adapt(Pennies(3), "p").functions().config for _ in range(2)]
    assert same[0] == same[1]
    assert jaxmarl_game.adapt(Pennies(2), "p").functions().config != same[0]
    hash(same[0])


def test_unknown_ids():
    with pytest.raises(UnknownGame, match=r"no environment 'no_such_env'.*SMAX.*MPE_simple_push_v3"):
        jaxmarl_game.game("no_such_env")
    with pytest.raises(UnknownGame, match="SMAX"):
        resolve("jaxmarl/no_such_env")


def test_smax_random_play():
    """SMAX, 3 marines a side, games of at most 20 steps, 8 at a time at random: every
    observation matches the spec, the masks are SMAX's own with a legal value in every row,
    payoffs are zero-sum and only on final steps, and games end with outcomes."""
    from jaxmarl.environments.smax import map_name_to_scenario

    fns = jaxmarl_game.game("SMAX", scenario=map_name_to_scenario("3m"), max_steps=20).functions()
    assert fns.spec.max_steps == 20 and fns.teams == ([f"ally_{i}" for i in range(3)], [f"enemy_{i}" for i in range(3)])
    assert fns.spec.side(0).action["action"] == DiscreteHead(8, (3,))
    assert fns.config != resolve("jaxmarl/SMAX").functions().config  # 5 marines a side
    assert_scannable(fns)
    batch = FunctionalBatchGame(fns, 8)
    ts = batch.reset(3)
    rng = np.random.default_rng(0)
    avail = jax.jit(jax.vmap(fns.env.get_avail_actions))
    outcomes = []
    for step in range(60):
        ts = batch.step(random_legal_actions(rng, batch.spec, ts.observations))
        rewards, done, outcome = np.asarray(ts.rewards), np.asarray(ts.done), np.asarray(ts.outcome)
        np.testing.assert_array_equal(rewards[:, 1], -rewards[:, 0])
        np.testing.assert_array_equal(rewards[~done], 0)
        np.testing.assert_array_equal(outcome, rewards[:, 0])
        assert ts.signals["team_reward"].shape == (8, 2)
        outcomes += list(outcome[done])
        for i, obs in enumerate(ts.observations):
            batch.spec.side(i).check_observation(obs, (8,))
            assert np.all(np.any(obs["action_mask"]["action"], axis=-1))
        if step % 15 == 0:
            own = avail(batch.state.env_state)
            for i, team in enumerate(fns.teams):
                expected = np.stack([np.asarray(own[a], bool) for a in team], axis=1)
                np.testing.assert_array_equal(ts.observations[i]["action_mask"]["action"], expected)
    assert len(outcomes) >= 8 * 2  # every game ends by step 20
    assert set(outcomes) <= {-1, 0, 1} and any(outcomes)
