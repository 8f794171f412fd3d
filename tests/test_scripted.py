"""The built-in opponent: league players against jaxmarl's scripted SMAX heuristic.

Two stand-in "networks" with known behaviour check the sides and the counting:
- a passive player (every unit stops) can never win (the heuristic waits at the map's centre
  for enemies it can see, so these games mostly time out as draws);
- the heuristic itself as the player (army 0) against the heuristic (random army) gives the
  win rate of `play_heuristic_games` with both sides scripted, measured independently on the
  same army distribution. The matchup is lopsided (protoss army 0 beats zerg in ~all games),
  so swapped sides would show as a win rate near 0.
Then a real unit network plays, through the function the benchmark uses.
"""

from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from actors.games import smax_races as sr
from actors.games.smax_races import scripted
from agents import Action
from experiments.build import initial_params, make_game, make_network
from experiments.config import RunConfig

# The system tier (docs/testing.md): SMAX leagues and many games against the scripted heuristic.
pytestmark = pytest.mark.system

CONFIG = sr.SmaxRacesConfig()


class ScriptedNetwork:
    """Acts for side 0 with a fixed rule; the 'params' are unused."""

    def __init__(self, rule: str):
        self.rule = rule
        self.fns = sr.functions(CONFIG)
        self.init, self.heuristic = sr.heuristic_policy(self.fns, side=0, composition=0)

    def initial_state(self, batch):
        return jax.vmap(lambda _: self.init())(jnp.arange(batch))

    def act(self, params, rng, obs, state, first, greedy=False):
        batch = obs["units"].shape[0]
        if self.rule == "passive":
            n = self.fns.n
            actions = {"composition": jnp.zeros(batch, jnp.int32),
                       "action_type": jnp.full((batch, n), sr.ACTION_TYPES.index("stop"), jnp.int32),
                       "target": jnp.zeros((batch, n), jnp.int32)}
        else:
            actions, state = jax.vmap(self.heuristic)(jax.random.split(rng, batch), state, obs)
        return Action(game=actions, heads=actions, log_probs={}), state


def test_a_passive_player_never_wins():
    outcomes = scripted.play_against_heuristic(ScriptedNetwork("passive"), {}, ("terran", "terran"), 64, seed=1)
    assert outcomes.shape == (64,) and outcomes.dtype == np.int8
    assert np.all(outcomes <= 0)


def test_the_evaluators_games_play_each_heuristic_army_in_turn():
    """The protocol's `play` (evaluator_0's curve) is the player's own pick against the
    heuristic's armies in turn, not a draw: the same outcomes as those games with the
    heuristic's armies forced to 0, 1, 2, 0, ..."""
    games, races = 30, ("terran", "zerg")
    network = ScriptedNetwork("heuristic")
    forced = scripted.play_detailed(network, {}, races, games, seed=5,
                                    compositions=(None, np.arange(games) % sr.COMPOSITIONS_PER_RACE))
    assert forced.compositions[:, 1].tolist() == [0, 1, 2] * 10
    drawn = scripted.play_detailed(network, {}, races, games, seed=5)
    assert np.bincount(drawn.compositions[:, 1], minlength=3).tolist() != [10, 10, 10]  # a draw differs
    np.testing.assert_array_equal(scripted.play(network, {}, races, games, seed=5), forced.outcomes)
    assert scripted.balanced_armies(7).tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_the_heuristic_as_player_matches_both_sides_scripted():
    games = 240
    races = ("protoss", "zerg")
    ours = scripted.play_against_heuristic(ScriptedNetwork("heuristic"), {}, races, games, seed=3)
    pair = np.tile([sr.RACES.index(r) for r in races], (games, 1))
    armies = np.stack([np.zeros(games, np.int32), np.arange(games) % sr.COMPOSITIONS_PER_RACE], 1)
    reference = sr.play_heuristic_games(CONFIG, pair, armies, seed=4)
    ours_rate, reference_rate = scripted.win_rate(ours), scripted.win_rate(reference)
    assert reference_rate > 0.8  # lopsided, so that a side swap cannot pass
    assert abs(ours_rate - reference_rate) < 0.12, (ours_rate, reference_rate)


def test_the_armies_played_are_reported_and_forced_on_request():
    """`play_detailed` reports each side's army and forces either on request. The heuristic as
    the player picks army 0 (stalkers) itself; forced to zealots against forced marauders it
    must win as rarely as both sides scripted with those armies (measured independently:
    0.02, against ~0.4 for stalkers or ~0.3 against the heuristic's random army)."""
    games, races = 96, ("protoss", "terran")
    player = ScriptedNetwork("heuristic")
    own = scripted.play_detailed(player, {}, races, games, seed=5)
    assert np.all(own.compositions[:, 0] == 0)
    assert set(np.unique(own.compositions[:, 1]).tolist()) == {0, 1, 2}  # the heuristic's uniform pick

    forced = scripted.play_detailed(player, {}, races, games, seed=5, compositions=(1, 1))
    assert np.all(forced.compositions == [1, 1])
    pair = np.tile([sr.RACES.index(r) for r in races], (games, 1))
    reference = sr.play_heuristic_games(CONFIG, pair, np.ones((games, 2), np.int32), seed=6)
    assert scripted.win_rate(reference) < 0.1
    assert abs(scripted.win_rate(forced.outcomes) - scripted.win_rate(reference)) < 0.1
    with pytest.raises(ValueError, match="compositions"):
        scripted.play_detailed(player, {}, races, 4, compositions=(3, None))


def test_a_unit_network_plays_and_bad_input_is_refused():
    config = RunConfig(races=1, runner="inprocess", run_dir="unused")
    game = make_game(config, 1)
    network = make_network(config, game.spec)
    params = initial_params(network, game.spec, 0, 0)
    outcomes = scripted.play_against_heuristic(network, params, ("terran", "protoss"), 16, seed=0)
    assert outcomes.shape == (16,) and set(np.unique(outcomes)) <= {-1, 0, 1}
    wins, draws = np.sum(outcomes == 1), np.sum(outcomes == 0)
    assert scripted.win_rate(outcomes) == pytest.approx((wins + 0.5 * draws) / 16)
    assert scripted.win_rate(np.array([1, 0, -1, 1], np.int8)) == pytest.approx(0.625)  # (2 + 0.5) / 4
    with pytest.raises(ValueError, match="num_games"):
        scripted.play_against_heuristic(network, params, ("terran", "protoss"), 0)
    with pytest.raises(ValueError):
        scripted.play_against_heuristic(network, params, ("terran", "elves"), 4)


def test_pick_probabilities_are_the_frequencies_of_the_picks_the_network_samples():
    """pi(army | races) from the composition head's softmax against the armies the network's
    own sampling picks on the strategy step (4,096 samples a race pair); the head's bias is
    set to make the picks uneven, and they differ between the race pairs' z-free inputs."""
    from agents import act

    config = RunConfig(races=3, runner="inprocess", run_dir="unused")
    game = make_game(config, 1)
    network = make_network(config, game.spec)
    params = initial_params(network, game.spec, 0, 0)
    head = "unit_agent/~/policy_composition"
    params = {**params, head: {**params[head], "b": jnp.array([1.5, 0.0, -1.5])}}
    pairs = np.array([[0, 1], [2, 2]])
    probs = scripted.pick_probabilities(network, params, pairs)
    assert probs.shape == (2, 3) and np.allclose(probs.sum(1), 1)
    fns = sr.functions(CONFIG)
    n = 4096
    for pair, p in zip(pairs, probs):
        _, obs = jax.vmap(fns.reset)(jax.random.split(jax.random.PRNGKey(1), n), jnp.tile(pair, (n, 1)))
        action, _ = act(network, params, jax.random.PRNGKey(2), obs[0], network.initial_state(n),
                        jnp.ones(n, bool))
        freq = np.bincount(np.asarray(action.game[sr.COMPOSITION_HEAD]), minlength=3) / n
        np.testing.assert_allclose(p, freq, atol=0.03)
        assert p[0] > p[2] + 0.3, p   # the bias shows: uneven picks
    with pytest.raises(ValueError, match="races must be"):
        scripted.pick_probabilities(network, params, [0, 1])


def test_the_device_rollouts_scripted_slots_are_played_by_the_heuristic():
    """`DeviceRollout(scripted=..., scripted_slots=S)`: side 0 plays the heuristic itself (army 0,
    as in the test above); side 1's network slots a passive player, which side 0 never loses
    to; the first S slots the real heuristic, which beats it in some games. Games in the
    scripted slots are lost, the others never: slots swapped, or the scripted slots left to the
    network, would fail it."""
    import functools

    from actors.rollout import DeviceRollout, Opponents

    fns = sr.functions(CONFIG)
    batch, slots, scripted_slots = 32, 4, 2
    rollout = DeviceRollout(
        ScriptedNetwork("heuristic"), fns, batch_size=batch, num_slots=slots, unroll_length=40,
        reward_fn=lambda b, contiguous, version: b["reward"], races=True,
        opponent_network=ScriptedNetwork("passive"),
        scripted=functools.partial(sr.heuristic_side, fns, 1), scripted_slots=scripted_slots)
    opponents = Opponents(jnp.zeros((slots, 1)), jnp.zeros(slots, bool))
    races = jnp.asarray(np.tile([sr.RACES.index("terran"), sr.RACES.index("terran")], (batch, 1)))
    start = jax.jit(rollout.start)
    unroll = jax.jit(rollout.unroll)
    carry, results = start({}, 0, opponents, None, jax.random.PRNGKey(0), races)
    for k in jax.random.split(jax.random.PRNGKey(1), 6):
        carry, _, new = unroll({}, 0, opponents, None, carry, k)
        results = results + new
    losses, games = np.asarray(results.losses), np.asarray(results.wins + results.draws + results.losses)
    assert games.min() > 0, games
    assert losses[:scripted_slots].sum() > 0 and losses[scripted_slots:].sum() == 0, (losses, games)
    with pytest.raises(ValueError, match="scripted_slots"):
        DeviceRollout(ScriptedNetwork("heuristic"), fns, batch_size=batch, num_slots=slots,
                      unroll_length=40, reward_fn=None, races=True, scripted_slots=1)


def test_main_agents_heuristic_slots_stay_out_of_the_league(tmp_path):
    """--heuristic_slots=2 on a 2-race device league: a main agent's chunk draws the heuristic in
    its first 2 of 4 slots (its own race at home, an enemy race of the run), league opponents in
    the others; its games against the heuristic reach the learner metric `heuristic_win_rate`,
    never league.db or the payoff; exploiters draw no heuristic slot."""
    from coordinator.coordinator import Coordinator
    from experiments.nodes import DeviceLearnerGroup
    from experiments.program import agent_indices

    config = RunConfig.make(game="smax_races", races=2, hidden_size=16, core_size=16, init="none",
                            heuristic_slots=2, learner_batch_size=8, unroll_length=32,
                            run_dir=str(tmp_path / "run"), runner="inprocess",
                            **{"device.updates_per_chunk": 4})
    coordinator = Coordinator(config.league, config.run_dir, seed=0)
    indices = agent_indices(config)
    group = DeviceLearnerGroup(config, list(indices), indices, coordinator)
    coordinator.connect_learners(group, list(indices))
    main, exploiter = "protoss_main_agent_0", "protoss_main_exploiter_0"
    try:
        enemies = set()
        for _ in range(5):
            _, races, slots, dist = group.draw_opponents(main)
            assert slots[:2] == [(group.HEURISTIC, group.HEURISTIC)] * 2
            assert all(opp in dist["opponents"] for opp, _ in slots[2:])
            races = np.asarray(races)
            assert (races[:, 0] == sr.RACES.index("protoss")).all()
            enemies |= set(races[:4, 1].tolist())
            want = [sr.RACES.index(dist["races"][opp]) for opp, _ in slots[2:] for _ in range(2)]
            assert races[4:, 1].tolist() == want
        assert enemies == {0, 1}  # terran and protoss, the run's races
        assert all(opp != group.HEURISTIC for opp, _ in group.draw_opponents(exploiter)[2])

        outcomes = []   # the heuristic slots' (wins, draws, losses) of each chunk, as the games returned them
        play_and_learn = group.learners[main].play_and_learn

        def recorded(*args):
            results = play_and_learn(*args)
            outcomes.append([int(np.sum(getattr(results, k)[:2])) for k in ("wins", "draws", "losses")])
            return results

        group.learners[main].play_and_learn = recorded
        reported = sum(group.play_chunk(main) for _ in range(3))
        metrics = group.metrics()
        played = group.learners[main].games_played
        assert metrics[main]["heuristic_games"] > 0 and 0 <= metrics[main]["heuristic_win_rate"] <= 1
        # the draw rate: the heuristic slots' draws over their games, from the games' own results
        wins, draws, losses = np.sum(outcomes, 0)
        assert metrics[main]["heuristic_games"] == wins + draws + losses
        assert metrics[main]["heuristic_draw_rate"] == pytest.approx(draws / (wins + draws + losses))
        assert played == reported + metrics[main]["heuristic_games"]
        rows = coordinator.history.game_counts()
        assert rows and sum(r["wins"] + r["draws"] + r["losses"] for r in rows) == reported
        assert all(r["away"] != group.HEURISTIC for r in rows)
        assert "heuristic_win_rate" not in metrics[exploiter]
    finally:
        group.close()
        coordinator.close()


def _forced_slot_group(tmp_path, **settings):
    """A coordinator and the device learner group of a small 2-race SMAX league whose main
    agents play 2 heuristic slots, the first forced (`settings`: more RunConfig settings)."""
    from coordinator.coordinator import Coordinator
    from experiments.nodes import DeviceLearnerGroup
    from experiments.program import agent_indices

    config = RunConfig.make(game="smax_races", races=2, hidden_size=16, core_size=16, init="none",
                            heuristic_slots=2, heuristic_forced_slots=1, learner_batch_size=8,
                            unroll_length=32, run_dir=str(tmp_path / "run"), runner="inprocess",
                            **{"device.updates_per_chunk": 4}, **settings)
    coordinator = Coordinator(config.league, config.run_dir, seed=0)
    indices = agent_indices(config)
    group = DeviceLearnerGroup(config, list(indices), indices, coordinator)
    coordinator.connect_learners(group, list(indices))
    return coordinator, group


def test_forced_slots_play_the_cells_pfsp_draws_and_learn_their_win_rates(tmp_path):
    """--heuristic_slots=2 --heuristic_forced_slots=1: a main agent's first slot plays one
    forced cell (enemy race, own army, heuristic's army) for all its games: the races array
    carries the armies for those games (-1 for the others); a cell the agent loses while it
    wins every other is the only one drawn; the forced slot's results reach that cell's win
    rate and `heuristic_forced_win_rate`, the other heuristic slot alone `heuristic_win_rate`."""
    coordinator, group = _forced_slot_group(tmp_path)
    main = "protoss_main_agent_0"
    try:
        cells = set()
        for _ in range(6):
            _, races, slots, _ = group.draw_opponents(main)
            (first, cell), second = slots[0], slots[1]
            assert first == group.HEURISTIC and second == (group.HEURISTIC, group.HEURISTIC)
            races = np.asarray(races)
            assert races.shape == (8, 2, 2)
            enemy, own, army = cell
            assert enemy in (0, 1) and 0 <= own < 3 and 0 <= army < 3
            np.testing.assert_array_equal(races[:2, 0], [[1, enemy]] * 2)   # protoss at home
            np.testing.assert_array_equal(races[:2, 1], [[own, army]] * 2)
            assert (races[2:, 1] == -1).all()
            cells.add(cell)
        assert len(cells) > 1   # no cell played yet: drawn by the agent's picks alone
        hard = (1, 2, 0)
        for c in [(e, o, a) for e in (0, 1) for o in range(3) for a in range(3)]:
            group.curricula[main].cells[c] = deque([(0.0 if c == hard else 5.0, 5)])
        assert {group.draw_opponents(main)[2][0][1] for _ in range(8)} == {hard}
        group.curricula[main].cells.clear()

        outcomes = []   # each chunk's (wins, draws, losses) in the forced slot and in the other
        play_and_learn = group.learners[main].play_and_learn
        drawn = []

        def recorded(opponents, races):
            (_, enemy), (own, army) = np.asarray(races)[0].tolist()   # game 0: the forced slot's
            drawn.append((enemy, own, army))
            results = play_and_learn(opponents, races)
            outcomes.append([[int(getattr(results, k)[m]) for k in ("wins", "draws", "losses")]
                             for m in (0, 1)])
            return results

        group.learners[main].play_and_learn = recorded
        reported = sum(group.play_chunk(main) for _ in range(2))
        metrics = group.metrics()
        forced, other = np.sum(outcomes, 0)
        assert forced.sum() > 0 and other.sum() > 0
        assert metrics[main]["heuristic_forced_games"] == forced.sum()
        assert metrics[main]["heuristic_forced_win_rate"] == pytest.approx(
            (forced[0] + 0.5 * forced[1]) / forced.sum())
        assert metrics[main]["heuristic_games"] == other.sum()
        assert metrics[main]["heuristic_win_rate"] == pytest.approx((other[0] + 0.5 * other[1]) / other.sum())
        assert group.learners[main].games_played == reported + forced.sum() + other.sum()
        # each chunk's forced results went to the cell its races array forced
        per_cell = {}
        for (enemy, own, army), (w, d, lost) in zip(drawn, [o[0] for o in outcomes]):
            score, games = per_cell.get((enemy, own, army), (0.0, 0))
            per_cell[(enemy, own, army)] = (score + w + 0.5 * d, games + w + d + lost)
        assert set(group.curricula[main].cells) == set(per_cell)
        for c, (score, games) in per_cell.items():
            assert group.curricula[main].win_rate(c) == pytest.approx(score / games)
    finally:
        group.close()
        coordinator.close()


def test_forced_cells_start_from_a_handicap_their_results_move(tmp_path):
    """--heuristic_forced_handicap: the forced games carry a third row in the races array, the
    units the heuristic's army starts without (its level over the army's size,
    `league.curriculum.handicap_units`; 0 for every other game and side); after a chunk the
    cell's level moves by `next_level` on that chunk's results in it (set here: all lost, a
    step easier; all won, a step harder; 1.5 of 4, held: 7 -> 8 -> 7 -> 7), and
    `heuristic_forced_handicap` is the mean fraction of the army removed."""
    from actors.games.smax_races.handicap import handicap_units

    coordinator, group = _forced_slot_group(tmp_path, heuristic_forced_handicap=True)
    main = "protoss_main_agent_0"
    try:
        hard = (0, 1, 1)    # against terran: the agent's second army, the heuristic's second
        size = group._fns.config.menu[0][1].size
        for c in [(e, o, a) for e in (0, 1) for o in range(3) for a in range(3)]:
            group.curricula[main].cells[c] = deque([(0.0 if c == hard else 5.0, 5)])   # the one cell drawn
        group.curricula[main].levels[hard] = 7
        assert handicap_units(7, size) > 0
        seen, levels, fractions = [], [], []
        play_and_learn = group.learners[main].play_and_learn

        scripted = iter([(0, 0, 4), (4, 0, 0), (1, 1, 2)])   # the forced slot's (wins, draws, losses)

        def recorded(opponents, races):
            seen.append(np.asarray(races))
            levels.append(group.curricula[main].levels[hard])
            results = play_and_learn(opponents, races)
            fields = {k: np.array(getattr(results, k)) for k in ("wins", "draws", "losses")}
            for k, v in zip(fields, next(scripted)):
                fields[k][0] = v
            return results._replace(**fields)

        group.learners[main].play_and_learn = recorded
        for _ in range(3):
            group.play_chunk(main)
            fractions.append(handicap_units(levels[-1], size) / size)
        assert levels + [group.curricula[main].levels[hard]] == [7, 8, 7, 7]
        for races, level in zip(seen, levels):
            assert races.shape == (8, 3, 2)
            np.testing.assert_array_equal(races[:2, 1], [[1, 1]] * 2)                 # the hard cell
            np.testing.assert_array_equal(races[:2, 2], [[0, handicap_units(level, size)]] * 2)
            assert (races[2:, 2] == 0).all()                                         # no other game
        assert group.metrics()[main]["heuristic_forced_handicap"] == pytest.approx(np.mean(fractions))
    finally:
        group.close()
        coordinator.close()


def test_heuristic_slots_are_refused_where_they_cannot_act():
    from experiments.config import ConfigError
    from experiments.program import experience_path

    with pytest.raises(ConfigError, match="scripted_slots: --game=kuhn_poker has no scripted opponent"):
        RunConfig.make(game="kuhn_poker", heuristic_slots=1)
    with pytest.raises(ConfigError, match=r"scripted_slots must be in \[0, --device.opponent_slots\) = \[0, 4\)"):
        RunConfig.make(game="smax_races", init="none", heuristic_slots=4)
    with pytest.raises(ConfigError, match="scripted_slots must be in"):
        RunConfig.make(game="smax_races", init="none", heuristic_slots=-1)
    with pytest.raises(ConfigError, match=r"scripted_task_slots must be in \[0, --device.scripted_slots\] = \[0, 2\]"):
        RunConfig.make(game="smax_races", init="none", heuristic_slots=2, heuristic_forced_slots=3)
    with pytest.raises(ConfigError, match="scripted_task_slots must be in"):
        RunConfig.make(game="smax_races", init="none", heuristic_slots=0, heuristic_forced_slots=1)
    with pytest.raises(ConfigError, match="scripted_task_levels moves the levels of the curriculum's tasks: "
                                          "set --device.scripted_task_slots >= 1"):
        RunConfig.make(game="smax_races", init="none", heuristic_slots=2, heuristic_forced_handicap=True)
    with pytest.raises(ConfigError, match="device path only.*--experience=device"):
        experience_path(RunConfig.make(game="smax_races", init="none", experience="replay", heuristic_slots=1))
    assert experience_path(RunConfig.make(game="smax_races", init="none", heuristic_slots=3))[0] == "device"
