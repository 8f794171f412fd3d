"""The population program (learners/population.py): several device learners' chunks as one
vmapped program. Checked against each agent's own program (`DeviceLearner.play_and_learn`,
itself checked against the batch game driven from Python in tests/test_device_path.py) with the
same keys, for agents whose learning rate, exploration, entropy weight and schedule (their
roles' losses) differ; and the entropy schedule against a numpy loop of its formula."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from actors import rewards
from actors.actor import example_unroll
from actors.games import make_batch_game
from actors.rollout import DeviceRollout, Opponents
from experiments import build
from experiments.config import RunConfig
from learners.device import DeviceLearner
from learners.population import Population, population_key
from learners.update import agent_entropy_weight, agent_settings

B, M, T, K = 8, 2, 6, 3


def kuhn_setup():
    """(learner config, game, network, rollout, 4 agents' initial params) of a small Kuhn population."""
    config = RunConfig.make(game="kuhn_poker", runner="inprocess", hidden_size=16, core_size=16,
                            learner_batch_size=B, unroll_length=T)
    game = make_batch_game("kuhn_poker", B)
    network = build.make_network(config, game.spec)
    rollout = DeviceRollout(network, game.fns, B, M, T, rewards.device_reward("game", game.spec))
    params = [build.initial_params(network, game.spec, i, 0) for i in range(4)]
    return config.learner, game, network, rollout, params


@pytest.fixture(scope="module")
def kuhn():
    return kuhn_setup()


def agent_configs(base):
    """A main agent (annealed entropy), and exploiters with their own learning rate, exploration
    and entropy weight (LearnerConfig.for_role)."""
    main = dataclasses.replace(base, learning_rate=1e-3, loss=dataclasses.replace(
        base.loss, entropy_weight=0.1, entropy_weight_end=0.01, entropy_anneal_updates=4,
        exploiter_entropy_weight=0.02))
    exploiter = dataclasses.replace(main, exploiter_learning_rate=5e-3, exploiter_exploration=0.2)
    return [main.for_role(True), exploiter.for_role(False),
            dataclasses.replace(exploiter, exploiter_learning_rate=2e-2).for_role(False)]


def make_learners(kuhn, configs):
    base, game, network, rollout, params = kuhn
    return [DeviceLearner(network, params[i], c, example_unroll(game.spec, network, T), rollout,
                          updates_per_chunk=K, seed=11 + i) for i, c in enumerate(configs)]


def opponents_of(params, i):
    bank = jax.tree_util.tree_map(lambda a, b: jnp.stack([jnp.asarray(a), jnp.asarray(b)]),
                                  params[3], params[(i + 1) % 3])
    return Opponents(bank, jnp.array([False, i == 0]))   # the main agent's second slot: itself


def test_the_population_update_is_each_agents_own_update(kuhn):
    configs = agent_configs(kuhn[0])
    assert len({c.learning_rate for c in configs}) == 3 and len({c.exploration for c in configs}) == 2
    alone, together = make_learners(kuhn, configs), make_learners(kuhn, configs)
    assert len({population_key(learner) for learner in together}) == 1
    population = Population(together)
    params = kuhn[4]
    for chunk in range(2):   # the second chunk starts from the first's state and keys
        expected = [learner.play_and_learn(opponents_of(params, i)) for i, learner in enumerate(alone)]
        got = population.play_and_learn([opponents_of(params, i) for i in range(3)])
        for i in range(3):
            for name in ("wins", "draws", "losses"):
                np.testing.assert_array_equal(getattr(got[i], name), getattr(expected[i], name))
            a_version, a_params = alone[i].params()
            b_version, b_params = together[i].params()
            assert a_version == b_version == K * (chunk + 1)
            for x, y in zip(jax.tree_util.tree_leaves(a_params), jax.tree_util.tree_leaves(b_params)):
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-6)
    # The agents moved apart: their settings are not one program's constants.
    moved = [jax.tree_util.tree_leaves(together[i].params()[1])[0] - jax.tree_util.tree_leaves(params[i])[0]
             for i in range(3)]
    assert not np.allclose(moved[1], moved[2])


def test_agents_with_their_own_kl_weights_share_one_program(kuhn):
    """Each agent's KL-to-teacher weight (a race's own, `--kl_teacher_by_race`) is data along
    the agent axis: the population's updates are each agent's own, with its teacher."""
    base, game, network, rollout, params = kuhn
    configs = [dataclasses.replace(c, loss=dataclasses.replace(c.loss, kl_teacher_weight=w))
               for c, w in zip(agent_configs(base), (0.03, 0.1, 2.0))]
    example = example_unroll(game.spec, network, T, teacher=True)

    def learners():
        return [DeviceLearner(network, params[i], c, example, rollout, updates_per_chunk=K, seed=11 + i,
                              teacher_params=params[(i + 2) % 4]) for i, c in enumerate(configs)]
    alone, together = learners(), learners()
    assert len({population_key(learner) for learner in together}) == 1
    expected = [learner.play_and_learn(opponents_of(params, i)) for i, learner in enumerate(alone)]
    got = Population(together).play_and_learn([opponents_of(params, i) for i in range(3)])
    for i in range(3):
        np.testing.assert_array_equal(got[i].wins, expected[i].wins)
        for x, y in zip(jax.tree_util.tree_leaves(alone[i].params()[1]),
                        jax.tree_util.tree_leaves(together[i].params()[1])):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-6)


def test_agents_of_different_roles_rates_and_kl_weights_share_one_program_per_structure(kuhn):
    """One program per agent (`DeviceLearner.play_and_learn`, the CPU default): the learning
    rate, entropy schedule and KL weight are inputs of the program, so the two exploiters (their
    own learning rates and KL weights) run ONE compiled program and the main agent (another
    epsilon, an annealed entropy) a second: 2 programs for 3 agents, where keying on the whole
    configuration gave 3. Each agent's chunk equals its reference: the chunk built from its own
    whole configuration as constants (`make_update_fn(network, its config, its optimiser)`),
    from the same state and keys."""
    import functools

    from learners.device import compiled_programs, make_chunk_fn
    from learners.update import make_optimizer, make_update_fn

    base, game, network, rollout, params = kuhn
    configs = [dataclasses.replace(c, loss=dataclasses.replace(c.loss, kl_teacher_weight=w))
               for c, w in zip(agent_configs(base), (0.03, 0.1, 2.0))]
    assert len({c.learning_rate for c in configs[1:]}) == 2 and configs[1].exploration == configs[2].exploration
    example = example_unroll(game.spec, network, T, teacher=True)

    def learners():
        return [DeviceLearner(network, params[i], c, example, rollout, updates_per_chunk=K, seed=11 + i,
                              teacher_params=params[(i + 2) % 4]) for i, c in enumerate(configs)]
    agents, references = learners(), learners()
    assert len({id(agent._chunk_fn) for agent in agents}) == 2 and compiled_programs() >= 2
    assert agents[1]._chunk_fn is agents[2]._chunk_fn and agents[0]._chunk_fn is not agents[1]._chunk_fn
    traces = []
    for i, (agent, reference, config) in enumerate(zip(agents, references, configs)):
        got = agent.play_and_learn(opponents_of(params, i))
        traces.append(agent._chunk_fn._cache_size())
        state, k_start, k_chunk = reference.chunk_inputs()
        opponents = opponents_of(params, i)
        start = jax.jit(functools.partial(rollout.start, exploration=config.exploration))
        chunk = jax.jit(make_chunk_fn(make_update_fn(network, config, make_optimizer(config)), rollout, K,
                                      config.exploration))
        carry, first = start(state.params, state.version, opponents, reference.teacher, k_start, None, None)
        new_state, _, _, results = chunk(state, carry, opponents, reference.teacher, k_chunk)
        np.testing.assert_array_equal(got.wins, np.asarray(first.wins + results.wins))
        for x, y in zip(jax.tree_util.tree_leaves(agent.params()[1]), jax.tree_util.tree_leaves(new_state.params)):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-6)
    # the second exploiter reused the first's executable: no new trace
    assert traces[2] == traces[1]


def test_resetting_one_agent_changes_only_its_slice(kuhn):
    configs = agent_configs(kuhn[0])
    learners = make_learners(kuhn, configs)
    population = Population(learners)
    params = kuhn[4]
    population.play_and_learn([opponents_of(params, i) for i in range(3)])
    before = [learner.params() for learner in learners]
    learners[1].reset(params[1])
    after = [learner.params() for learner in learners]
    assert after[1][0] == before[1][0] + 1
    for x, y in zip(jax.tree_util.tree_leaves(after[1][1]), jax.tree_util.tree_leaves(params[1])):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for i in (0, 2):
        assert after[i][0] == before[i][0]
        for x, y in zip(jax.tree_util.tree_leaves(after[i][1]), jax.tree_util.tree_leaves(before[i][1])):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # The next chunk starts agent 1 from its reset parameters.
    population.play_and_learn([opponents_of(params, i) for i in range(3)])
    assert learners[1].params()[0] == before[1][0] + 1 + K


def test_the_device_resident_population_equals_each_agents_own_chunks_across_a_reset_and_a_snapshot(kuhn):
    """The population's states stay stacked on the device between chunks (each agent's state a
    view of its slice): over four chunks, with a snapshot read after the first and agent 1 reset
    after the second, every agent's parameters equal those of the same agent playing alone with
    the same keys and the same reset (compared leaf by leaf, not by versions); a chunk with no
    reset before it takes the last chunk's stacked states as they are (no stacking), and after
    the reset the next chunk starts agent 1 from the reset parameters."""
    configs = agent_configs(kuhn[0])
    params = kuhn[4]
    alone, together = make_learners(kuhn, configs), make_learners(kuhn, configs)
    population = Population(together)
    fed, made = [], []   # each chunk's states in, and its new states out
    program = population.program

    def spied(states, *args):
        fed.append(states)
        made.append(program(states, *args))
        return made[-1]

    population.program = spied
    for chunk in range(4):
        for i, learner in enumerate(alone):
            learner.play_and_learn(opponents_of(params, i))
        population.play_and_learn([opponents_of(params, i) for i in range(3)])
        if chunk == 0:   # a snapshot: a slice read, the same parameters as alone
            a, b = alone[2].snapshot(), together[2].snapshot()
            assert a[0] == b[0] == K
            for x, y in zip(jax.tree_util.tree_leaves(a[1]), jax.tree_util.tree_leaves(b[1])):
                np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-6)
        if chunk == 1:
            alone[1].reset(params[3])
            together[1].reset(params[3])
        for i in range(3):
            for x, y in zip(jax.tree_util.tree_leaves(alone[i].params()[1]),
                            jax.tree_util.tree_leaves(together[i].params()[1])):
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-6)
    # chunks 1 and 3 took the last chunk's new states as they were; chunk 2 those with agent
    # 1's slice written
    assert fed[1] is made[0][0] and fed[3] is made[2][0] and fed[2] is not made[1][0]
    for x, y in zip(jax.tree_util.tree_leaves(fed[2].params), jax.tree_util.tree_leaves(params[3])):
        np.testing.assert_array_equal(np.asarray(x)[1], np.asarray(y))
    assert together[1].params()[0] == 2 * K + 1 + 2 * K


def test_learners_of_different_structure_are_refused(kuhn):
    base, game, network, rollout, params = kuhn
    configs = agent_configs(base)
    other = dataclasses.replace(configs[0], loss=dataclasses.replace(configs[0].loss, upgo_weight=0.0))
    with pytest.raises(ValueError, match="must share"):
        Population(make_learners(kuhn, [configs[0], other]))


def test_the_entropy_schedule_follows_its_formula():
    configs = [(0.1, 0.01, 4), (0.05, None, 0), (0.2, 0.02, 100)]
    for w0, end, anneal in configs:
        config = RunConfig.make(game="kuhn_poker").learner
        config = dataclasses.replace(config, loss=dataclasses.replace(
            config.loss, entropy_weight=w0, entropy_weight_end=end, entropy_anneal_updates=anneal))
        settings = {k: jnp.float32(v) for k, v in agent_settings(config).items()}
        for k in (0, 1, 2, 3, 4, 7, 50, 150):
            expected = w0 if end is None else w0 * (end / w0) ** min(k / anneal, 1.0)
            assert float(agent_entropy_weight(settings, jnp.int32(k))) == pytest.approx(expected, rel=1e-5)


def test_eight_devices_give_the_same_updates_as_one(tmp_path):
    """The population program over 8 virtual CPU devices (each agent's games split over them)
    and over one: the same results and parameters (XLA_FLAGS must be set before JAX starts:
    a subprocess)."""
    import os
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "eight.py"
    script.write_text(textwrap.dedent("""
        import jax
        import numpy as np
        from actors import rewards
        from actors.actor import example_unroll
        from actors.games import make_batch_game
        from actors.rollout import DeviceRollout
        from experiments import build
        from experiments.config import RunConfig
        from learners.device import DeviceLearner
        from learners.population import Population
        from tests.test_population import K, M, T, agent_configs, opponents_of

        B = 16
        assert len(jax.local_devices()) == 8
        config = RunConfig.make(game="kuhn_poker", runner="inprocess", hidden_size=16, core_size=16,
                                learner_batch_size=B, unroll_length=T)
        game = make_batch_game("kuhn_poker", B)
        network = build.make_network(config, game.spec)
        params = [build.initial_params(network, game.spec, i, 0) for i in range(4)]
        out = []
        for devices in (jax.local_devices()[:1], jax.local_devices()):
            rollout = DeviceRollout(network, game.fns, B, M, T, rewards.device_reward("game", game.spec),
                                    devices=devices)
            learners = [DeviceLearner(network, params[i], c, example_unroll(game.spec, network, T), rollout,
                                      updates_per_chunk=K, seed=11 + i)
                        for i, c in enumerate(agent_configs(config.learner))]
            results = Population(learners).play_and_learn([opponents_of(params, i) for i in range(3)])
            placed = jax.tree_util.tree_leaves(learners[0].current_params())[0].sharding.device_set
            out.append(([learner.params()[1] for learner in learners], results, len(placed)))
        assert (out[0][2], out[1][2]) == (1, 8), (out[0][2], out[1][2])
        for a, b in zip(out[0][0], out[1][0]):
            for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)
        for ra, rb in zip(out[0][1], out[1][1]):
            np.testing.assert_array_equal(ra.wins, rb.wins)
            np.testing.assert_array_equal(ra.losses, rb.losses)
        print("same updates")
    """))
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0 and "same updates" in result.stdout, result.stdout[-2000:] + result.stderr[-3000:]
