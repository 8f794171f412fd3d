"""The league core against values worked by hand from AlphaStar's formulas and pseudocode."""

import collections
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.games.smax_races.handicap import handicap_units, next_level
from league.league import League
from league.matchmaking import (
    MAIN_AGENT_MATCHMAKERS,
    Match,
    MatchDistribution,
    remove_monotonic_suffix,
)
from league.payoff import Payoff
from league.pfsp import pfsp_probabilities, weighted_pfsp_probabilities
from league.players import (
    MATCH_ATTEMPTS,
    LeagueConfig,
    MatchmakingConfig,
    Player,
    SnapshotConfig,
    WithdrawnPlayer,
    draw_past_withdrawn,
    learning_agents,
)
from league.rules import AddSnapshot, ResetAgent, snapshot_reason

# -- PFSP ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "weighting, p, rates, expected",
    [
        ("squared", None, [0.2, 0.5, 1.0], [0.64 / 0.89, 0.25 / 0.89, 0.0]),
        ("linear", None, [0.2, 0.6], [0.8 / 1.2, 0.4 / 1.2]),
        ("linear_capped", None, [0.2, 0.6], [5 / 9, 4 / 9]),
        ("variance", None, [0.5, 0.9, 0.0], [25 / 34, 9 / 34, 0.0]),
        ("hard", 3.0, [0.5, 0.0], [1 / 9, 8 / 9]),
    ],
)
def test_pfsp_weightings_worked_by_hand(weighting, p, rates, expected):
    np.testing.assert_allclose(pfsp_probabilities(rates, weighting, p), expected, rtol=1e-12)


@pytest.mark.parametrize("weighting, rates", [("squared", [1.0, 1.0, 1.0]), ("variance", [0.0, 1.0])])
def test_pfsp_all_zero_weights_fall_back_to_uniform(weighting, rates):
    np.testing.assert_allclose(pfsp_probabilities(rates, weighting), np.full(len(rates), 1 / len(rates)))


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=50), st.sampled_from(["squared", "linear", "linear_capped", "variance"]))
def test_pfsp_is_a_distribution_that_never_favours_beaten_opponents(rates, weighting):
    probs = pfsp_probabilities(rates, weighting)
    assert probs.shape == (len(rates),)
    assert np.all(probs >= 0) and abs(probs.sum() - 1) < 1e-9
    if weighting != "variance" and probs.max() < 1 - 1e-9:
        # f_hard, linear and capped are non-increasing: harder opponents are at least as likely.
        order = np.argsort(rates)
        assert np.all(np.diff(probs[order]) <= 1e-12)


def test_weighted_pfsp_worked_by_hand():
    """P(c) = s_c (1 - x_c)^2 / sum: rates 0.2, 0.5, 1.0 with shares 0.5, 0.25, 0.25 give
    0.32, 0.0625, 0 over 0.3825; all beaten: the shares; shares and weights all zero: uniform."""
    np.testing.assert_allclose(weighted_pfsp_probabilities([0.2, 0.5, 1.0], [0.5, 0.25, 0.25]),
                               [0.32 / 0.3825, 0.0625 / 0.3825, 0.0], rtol=1e-12)
    np.testing.assert_allclose(weighted_pfsp_probabilities([1.0, 1.0], [3.0, 1.0]), [0.75, 0.25])
    np.testing.assert_allclose(weighted_pfsp_probabilities([1.0, 0.5], [1.0, 0.0]), [1.0, 0.0])
    np.testing.assert_allclose(weighted_pfsp_probabilities([0.5, 0.5], [0.0, 0.0]), [0.5, 0.5])
    for shares in ([0.5], [-1.0, 1.0], [np.nan, 1.0]):
        with pytest.raises(ValueError, match="shares must be finite"):
            weighted_pfsp_probabilities([0.5, 0.5], shares)


def test_handicap_curriculum_worked_by_hand():
    """A cell scoring 0, 2 and 4.5 of 16 chunk after chunk climbs a level each time (<= 0.3),
    holds between (8: 0.5), steps down from 0.6 (11: 0.69; then 16) and stops at the ends; no
    games, no change. 10 levels over an army of 20 zerglings remove 0, 2, 6, 18 units
    at levels 0, 1, 3, 9; over 1 unit none; over 5, level 10 removes 4 (one stays)."""
    level = 0
    for score, want in ((0, 1), (2, 2), (4.5, 3), (8, 3), (11, 2), (16, 1), (16, 0), (16, 0)):
        level = next_level(level, score, 16)
        assert level == want, (score, level, want)
    assert next_level(10, 0, 16) == 10 and next_level(4, 0, 0) == 4
    assert next_level(3, 0.3 * 10, 10) == 4 and next_level(3, 0.6 * 10, 10) == 2   # thresholds inclusive
    assert [handicap_units(level, 20) for level in (0, 1, 3, 9, 10)] == [0, 2, 6, 18, 19]
    assert handicap_units(7, 1) == 0 and handicap_units(10, 5) == 4 and handicap_units(3, 5) == 1
    with pytest.raises(ValueError, match="low < high"):
        next_level(0, 1, 2, low=0.7, high=0.6)
    with pytest.raises(ValueError, match="0 <= level <= 10"):
        next_level(11, 1, 2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(win_rates=[0.5], weighting="cubic"), "unknown PFSP weighting 'cubic'"),
        (dict(win_rates=[1.5], weighting="squared"), "must lie in \\[0, 1\\]"),
        (dict(win_rates=[np.nan], weighting="squared"), "must lie in \\[0, 1\\]"),
        (dict(win_rates=[0.5], weighting="hard"), "exponent p > 0"),
        (dict(win_rates=[], weighting="squared"), "non-empty"),
    ],
)
def test_pfsp_bad_input_names_the_problem(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pfsp_probabilities(**kwargs)


# -- payoff -------------------------------------------------------------------------


def test_payoff_decay_worked_by_hand():
    payoff = Payoff(decay=0.99)
    for p in ("a", "b", "c"):
        payoff.add_player(p)
    assert payoff.win_rate("a", "b") == 0.5  # never played: the prior
    payoff.update("a", "b", "win")
    assert payoff.win_rate("a", "b") == pytest.approx(1.0)
    payoff.update("a", "b", "loss")  # old counts x0.99, then one loss
    assert payoff.win_rate("a", "b") == pytest.approx(0.99 / 1.99, rel=1e-6)
    assert payoff.win_rate("b", "a") == pytest.approx(1.0 / 1.99, rel=1e-6)
    payoff.update("b", "a", "draw")
    assert payoff.win_rate("a", "b") == pytest.approx((0.9801 + 0.5) / (0.9801 + 0.99 + 1), rel=1e-6)
    counts = payoff.counts("a", "b")
    assert counts["wins"] == pytest.approx(0.9801) and counts["losses"] == pytest.approx(0.99)
    assert counts["draws"] == pytest.approx(1.0) and counts["games"] == pytest.approx(2.9701)
    np.testing.assert_allclose(payoff.win_rates("a", ["b", "c", "a"]), [(0.9801 + 0.5) / 2.9701, 0.5, 0.5], rtol=1e-6)
    assert payoff.win_rate("a", "c") == 0.5  # other pairs untouched by the decay


class ReferencePayoff:
    """AlphaStar's pseudocode Payoff, as dicts of pairs: slow and obvious."""

    def __init__(self, decay):
        self.decay = decay
        self.stats = {k: collections.defaultdict(float) for k in ("games", "wins", "draws", "losses")}

    def update(self, home, away, result):
        for stats in self.stats.values():
            stats[home, away] *= self.decay
            stats[away, home] *= self.decay
        self.stats["games"][home, away] += 1
        self.stats["games"][away, home] += 1
        if result == "win":
            self.stats["wins"][home, away] += 1
            self.stats["losses"][away, home] += 1
        elif result == "draw":
            self.stats["draws"][home, away] += 1
            self.stats["draws"][away, home] += 1
        else:
            self.stats["wins"][away, home] += 1
            self.stats["losses"][home, away] += 1

    def win_rate(self, home, away):
        games = self.stats["games"][home, away]
        if games == 0:
            return 0.5
        return (self.stats["wins"][home, away] + 0.5 * self.stats["draws"][home, away]) / games


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.sampled_from(["win", "draw", "loss"])).filter(lambda r: r[0] != r[1]), max_size=60))
def test_payoff_matches_the_pseudocode_and_is_symmetric(results):
    ids = ["p0", "p1", "p2", "p3"]
    payoff, reference = Payoff(decay=0.99), ReferencePayoff(0.99)
    for p in ids:
        payoff.add_player(p)
    for h, a, outcome in results:
        payoff.update(ids[h], ids[a], outcome)
        reference.update(ids[h], ids[a], outcome)
    matrix = payoff.win_rate_matrix()
    for i, h in enumerate(ids):
        for j, a in enumerate(ids):
            if i != j:
                assert matrix[i, j] == pytest.approx(reference.win_rate(h, a), abs=1e-5)
                assert matrix[i, j] + matrix[j, i] == pytest.approx(1.0, abs=1e-5)


def test_payoff_scores_worked_by_hand():
    payoff = Payoff(decay=0.99)
    for p in ("a", "b", "c"):
        payoff.add_player(p)
    payoff.update("a", "b", "win", 3.0)    # a won 3 chips
    payoff.update("b", "a", "win", 13.0)   # then b won 13 chips (a's counts x0.99 first)
    payoff.update("a", "c", "draw")        # no score: the outcome's 0
    payoff.update("c", "a", "loss")        # no score: c's -1, a's +1 (a-c counts x0.99 first)
    scores = payoff.score_matrix(["a", "b", "c"])
    games_ab = 0.99 + 1.0
    assert scores[0, 1] == pytest.approx((0.99 * 3.0 - 13.0) / games_ab, rel=1e-6)
    assert scores[0, 2] == pytest.approx((0.99 * 0.0 + 1.0) / (0.99 + 1.0), rel=1e-6)
    np.testing.assert_allclose(scores, -scores.T, atol=1e-7)  # zero-sum
    assert scores[1, 2] == 0.0  # never played
    # without scores the score matrix is the win-rate game: 2 W - 1
    for h, a, o in [("b", "c", "win"), ("c", "b", "draw"), ("b", "c", "loss")]:
        payoff.update(h, a, o)
    w = payoff.win_rate_matrix(["b", "c"])
    np.testing.assert_allclose(payoff.score_matrix(["b", "c"]), 2 * w - 1, atol=1e-6)
    copy = Payoff.from_state(payoff.state())
    np.testing.assert_allclose(copy.score_matrix(), payoff.score_matrix())
    old = payoff.state()
    del old["scores"]  # a state saved before scores existed: the outcome scores
    np.testing.assert_allclose(Payoff.from_state(old).score_matrix(["b", "c"]), 2 * w - 1, atol=1e-6)
    with pytest.raises(ValueError, match="finite score"):
        payoff.update("a", "b", "win", float("nan"))


def test_payoff_grows_past_its_capacity_and_round_trips():
    payoff = Payoff(capacity=2)
    for i in range(10):
        payoff.add_player(f"p{i}")
    payoff.update("p9", "p0", "win")
    copy = Payoff.from_state(payoff.state())
    assert copy.win_rate("p9", "p0") == 1.0 and copy.players == payoff.players


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda p: p.win_rate("a", "zz"), "unknown player id 'zz'"),
        (lambda p: p.update("a", "b", "victory"), "unknown outcome 'victory'"),
        (lambda p: p.add_player(""), "non-empty strings"),
    ],
)
def test_payoff_bad_input_names_the_problem(call, message):
    payoff = Payoff()
    payoff.add_player("a")
    payoff.add_player("b")
    with pytest.raises(ValueError, match=message):
        call(payoff)


def test_corrupt_payoff_state_is_refused():
    payoff = Payoff()
    payoff.add_player("a")
    state = payoff.state()
    state["wins"][0, 0] = np.nan
    with pytest.raises(ValueError, match="corrupt"):
        Payoff.from_state(state)


# -- players and composition --------------------------------------------------------


def test_full_composition_is_one_one_two_per_race():
    agents = learning_agents(LeagueConfig())
    assert len(agents) == 12
    by_race = collections.Counter((a.race, a.role) for a in agents)
    for race in ("terran", "protoss", "zerg"):
        assert by_race[race, "main_agent"] == 1
        assert by_race[race, "main_exploiter"] == 1
        assert by_race[race, "league_exploiter"] == 2


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Player("x", "commander", "terran"), "unknown role 'commander'"),
        (lambda: Player("x", "historical", "terran"), "needs a parent"),
        (lambda: LeagueConfig(main_agent_matchmaker="elo"), "unknown main_agent_matchmaker 'elo'"),
        (lambda: LeagueConfig(matchmaking=MatchmakingConfig(main_pfsp_weighting="cubic")), "unknown PFSP weighting 'cubic'"),
        (lambda: LeagueConfig(matchmaking=MatchmakingConfig(main_pfsp_probability=1.5)), "must lie in \\[0, 1\\]"),
        (lambda: LeagueConfig.from_dict({"racez": ["terran"]}), "unknown league config keys"),
    ],
)
def test_bad_config_names_the_problem(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_config_round_trips_through_a_dict():
    config = LeagueConfig(races=("zerg",), snapshots=SnapshotConfig(main_agent_snapshot_steps=10))
    assert LeagueConfig.from_dict(config.to_dict()) == config


# -- matchmaking --------------------------------------------------------------------


def play(league, home, away, wins, losses):
    for _ in range(wins):
        league.record_result(home, away, "win")
    for _ in range(losses):
        league.record_result(home, away, "loss")


def snapshot(league, agent, step=1):
    (add, *_) = [d for d in league.decide(agent, 10**12, 0.0) if isinstance(d, AddSnapshot)] or [None]
    assert add is not None, f"{agent} was not ready to snapshot"
    return league.apply(AddSnapshot(agent, add.player_id, step, 0.0, "test")).player_id


def tiny_snapshots():
    return SnapshotConfig(main_agent_snapshot_steps=1, exploiter_min_steps=0, main_exploiter_timeout_steps=1, league_exploiter_timeout_steps=1)


def entries(distribution):
    """{(opponent, branch): probability} of a `MatchDistribution`."""
    out = dict(zip(zip(distribution.opponents, distribution.branches), distribution.probabilities.tolist()))
    assert len(out) == len(distribution.opponents), "an (opponent, branch) pair appears twice"
    return out


def assert_exact(distribution, expected):
    """Exactly the (opponent, branch) pairs of `expected`, with its probabilities (worked by hand)."""
    actual = entries(distribution)
    assert set(actual) == set(expected), (sorted(actual), sorted(expected))
    keys = sorted(expected)
    np.testing.assert_allclose([actual[k] for k in keys], [expected[k] for k in keys], rtol=1e-12)


def verification_league(rng=1):
    """One main agent, its two snapshots and two past main exploiters, one of them strong."""
    config = LeagueConfig(initial_snapshots=False, races=("terran",), league_exploiters_per_race=0, payoff_decay=1.0, snapshots=tiny_snapshots())
    league = League(config, rng=rng)
    main, exploiter = "terran_main_agent_0", "terran_main_exploiter_0"
    me0, me1 = snapshot(league, exploiter), snapshot(league, exploiter)
    ma0, ma1 = snapshot(league, main), snapshot(league, main)
    play(league, main, me0, 1, 4)  # 0.2 < 0.3: a strong past exploiter -> verification over both
    play(league, main, me1, 3, 2)  # 0.6
    play(league, main, ma1, 4, 1)  # 0.8; ma0 never played: 0.5
    return league, main, (me0, me1, ma0, ma1)


def test_main_agent_opponents_are_pfsp_verification_and_self_play():
    league, main, (me0, me1, ma0, ma1) = verification_league()
    pfsp = np.array([0.8**2, 0.4**2, 0.5**2, 0.2**2]) / (0.64 + 0.16 + 0.25 + 0.04)  # me0, me1, ma0, ma1
    expected = {
        (me0, "pfsp"): 0.5 * pfsp[0],
        (me1, "pfsp"): 0.5 * pfsp[1],
        (ma0, "pfsp"): 0.5 * pfsp[2],
        (ma1, "pfsp"): 0.5 * pfsp[3],
        # PFSP(squared) over the past exploiters: 0.64 / 0.8 and 0.16 / 0.8
        (me0, "verification_exploiters"): 0.15 * 0.8,
        (me1, "verification_exploiters"): 0.15 * 0.2,
        (main, "self_play"): 0.35,  # the only main agent is itself
    }
    distribution = league.match_distribution(main)
    assert distribution.agent_id == main
    assert_exact(distribution, expected)
    marginal = distribution.marginal()
    assert set(marginal) == {me0, me1, ma0, ma1, main}
    np.testing.assert_allclose(marginal[me0], 0.5 * pfsp[0] + 0.12, rtol=1e-12)


class RecordingGenerator(np.random.Generator):
    """A numpy Generator that records the probabilities and the result of every `choice`."""

    def __init__(self, seed):
        super().__init__(np.random.PCG64(seed))
        self.probabilities, self.choices = [], []

    def choice(self, a, size=None, replace=True, p=None):
        self.probabilities.append(None if p is None else np.array(p))
        self.choices.append(super().choice(a, size, replace, p))
        return self.choices[-1]


def test_get_match_samples_the_distribution():
    """`get_match` draws one entry of `match_distribution` with the league's Generator: the
    probabilities it passes are the distribution's, the match is the drawn entry (opponent
    and branch), and frequencies agree within 4 sigma."""
    rng = RecordingGenerator(3)
    league, main, _ = verification_league(rng)
    distribution = league.match_distribution(main)
    n = 4000
    counts = collections.Counter()
    for _ in range(n):
        match = league.get_match(main)
        np.testing.assert_array_equal(rng.probabilities[-1], distribution.probabilities)
        i = rng.choices[-1]
        assert match == Match(main, distribution.opponents[i], distribution.branches[i])
        counts[match.opponent_id, match.branch] += 1
    for key, p in entries(distribution).items():
        assert abs(counts[key] / n - p) < 4 * np.sqrt(p * (1 - p) / n), (key, counts[key] / n, p)


def test_main_agent_verification_finds_forgotten_snapshots():
    mm = MatchmakingConfig(main_pfsp_probability=0.0, main_verification_probability=1.0)
    config = LeagueConfig(initial_snapshots=False, races=("terran",), main_exploiters_per_race=0, league_exploiters_per_race=0,
                          payoff_decay=1.0, matchmaking=mm, snapshots=tiny_snapshots())
    league = League(config, rng=2)
    main = "terran_main_agent_0"
    snaps = [snapshot(league, main) for _ in range(5)]
    # win rates against its snapshots: [0.9, 0.5, 0.8, 0.6, 0.4] -> the non-increasing tail
    # (0.8, 0.6, 0.4) after index 2 is dropped: PFSP(squared) over the first three.
    for s, (won, lost) in zip(snaps, [(9, 1), (1, 1), (4, 1), (3, 2), (2, 3)]):
        play(league, main, s, won, lost)
    weights = np.array([0.1, 0.5, 0.2]) ** 2
    expected = {(s, "verification_forgotten"): w for s, w in zip(snaps[:3], weights / weights.sum())}
    assert_exact(league.match_distribution(main), expected)
    # [0.9, 0.75, 0.8, 0.6, 0.4]: the prefix kept is beaten >= 70% throughout, so verification
    # finds nothing and falls through to self-play (the only main agent is itself)
    play(league, main, snaps[1], 2, 0)  # 3 / 4 = 0.75
    assert_exact(league.match_distribution(main), {(main, "self_play"): 1.0})


def test_remove_monotonic_suffix_worked_by_hand():
    players = list("abcde")
    rates, kept = remove_monotonic_suffix(np.array([0.9, 0.5, 0.8, 0.6, 0.4]), players)
    assert kept == ["a", "b", "c"] and rates.tolist() == [0.9, 0.5, 0.8]
    rates, kept = remove_monotonic_suffix(np.array([0.9, 0.8, 0.7]), players[:3])
    assert kept == [] and rates.size == 0
    assert remove_monotonic_suffix(np.array([0.1, 0.5]), players[:2])[1] == ["a", "b"]


def test_struggling_main_agent_gets_a_curriculum_of_the_opponents_snapshots():
    mm = MatchmakingConfig(main_pfsp_probability=0.0, main_verification_probability=0.0)
    config = LeagueConfig(initial_snapshots=False, races=("terran", "zerg"), main_exploiters_per_race=0, league_exploiters_per_race=0,
                          payoff_decay=1.0, matchmaking=mm, snapshots=tiny_snapshots())
    league = League(config, rng=3)
    terran, zerg = "terran_main_agent_0", "zerg_main_agent_0"
    z0, z1 = snapshot(league, zerg), snapshot(league, zerg)
    play(league, terran, zerg, 1, 4)  # 0.2 <= 0.3: too strong for plain self-play
    play(league, terran, z1, 9, 1)  # 0.9; z0 unplayed: 0.5 -> variance weights 0.25, 0.09
    expected = {
        (terran, "self_play"): 0.5,  # each main agent with probability 1/2; itself: plain self-play
        (z0, "self_play_curriculum"): 0.5 * 25 / 34,
        (z1, "self_play_curriculum"): 0.5 * 9 / 34,
    }
    assert_exact(league.match_distribution(terran), expected)


def test_main_exploiter_plays_main_agents_with_a_curriculum_when_struggling():
    config = LeagueConfig(initial_snapshots=False, races=("terran",), league_exploiters_per_race=0, payoff_decay=1.0, snapshots=tiny_snapshots())
    league = League(config, rng=4)
    main, exploiter = "terran_main_agent_0", "terran_main_exploiter_0"
    m0, m1 = snapshot(league, main), snapshot(league, main)
    assert_exact(league.match_distribution(exploiter), {(main, "main_agent"): 1.0})  # 0.5 >= 0.2
    play(league, exploiter, main, 1, 9)  # 0.1 < 0.2: half the time PFSP(variance) over snapshots
    play(league, exploiter, m1, 9, 1)  # 0.9 vs m1, m0 unplayed 0.5
    expected = {
        (main, "main_agent"): 0.5,
        (m0, "main_exploiter_curriculum"): 0.5 * 25 / 34,
        (m1, "main_exploiter_curriculum"): 0.5 * 9 / 34,
    }
    assert_exact(league.match_distribution(exploiter), expected)


def test_league_exploiter_uses_capped_linear_pfsp_over_all_past_players():
    config = LeagueConfig(initial_snapshots=False, races=("terran",), league_exploiters_per_race=1, payoff_decay=1.0, snapshots=tiny_snapshots())
    league = League(config, rng=5)
    exploiter = "terran_league_exploiter_0"
    a = snapshot(league, "terran_main_agent_0")
    b = snapshot(league, "terran_main_exploiter_0")
    play(league, exploiter, a, 1, 4)  # 0.2 -> min(0.5, 0.8) = 0.5
    play(league, exploiter, b, 3, 2)  # 0.6 -> 0.4
    assert_exact(league.match_distribution(exploiter), {(a, "pfsp"): 5 / 9, (b, "pfsp"): 4 / 9})


def nash_league(mode):
    """A one-race league whose league exploiter targets the Nash mixture (`mode`), with a copy
    of the main agent and of the main exploiter: (league, league exploiter, copy, copy)."""
    config = LeagueConfig(initial_snapshots=False, races=("terran",), league_exploiters_per_race=1,
                          payoff_decay=1.0, matchmaking=MatchmakingConfig(league_exploiter_opponents=mode),
                          snapshots=tiny_snapshots())
    league = League(config, rng=5)
    return (league, "terran_league_exploiter_0", snapshot(league, "terran_main_agent_0"),
            snapshot(league, "terran_main_exploiter_0"))


def test_league_exploiter_targets_the_nash_mixture_when_asked():
    """PSRO's target: opponents drawn from the published Nash weights over historical players
    (learning players' weight dropped, renormalised by hand); PFSP before any is published."""
    league, exploiter, a, b = nash_league("nash")
    c = snapshot(league, "terran_main_agent_0")
    play(league, exploiter, a, 1, 4)
    play(league, exploiter, b, 3, 2)
    play(league, exploiter, c, 1, 1)
    before = league.match_distribution(exploiter)
    assert set(before.branches) == {"pfsp"}
    league.set_nash_weights({a: 0.3, b: 0.0, c: 0.1, "terran_main_agent_0": 0.6})
    assert_exact(league.match_distribution(exploiter), {(a, "nash"): 0.75, (c, "nash"): 0.25})
    with pytest.raises(ValueError, match="not in the league"):
        league.set_nash_weights({"nobody": 1.0})
    with pytest.raises(ValueError, match="league_exploiter_opponents must be one of pfsp, nash, nash_fixed"):
        LeagueConfig(matchmaking=MatchmakingConfig(league_exploiter_opponents="psro"))


def test_league_exploiter_keeps_a_fixed_nash_target_for_its_life():
    """PSRO's fixed target ("nash_fixed"): the first Nash published becomes the exploiter's
    target, and later ones do not move it (with "nash" they would); after its copy the latest
    Nash is used until a publication whose solved players include that copy, which becomes the
    next target. The copy remembers what its life trained against; a resumed league too."""
    league, exploiter, a, b = nash_league("nash_fixed")
    league.set_nash_weights({"terran_main_agent_0": 1.0})        # on a learning agent: no target
    assert not league.nash_targets
    league.set_nash_weights({a: 0.2, b: 0.6, "terran_main_agent_0": 0.2})
    first = {(a, "nash"): 0.25, (b, "nash"): 0.75}
    assert_exact(league.match_distribution(exploiter), first)
    league.set_nash_weights({a: 1.0, b: 0.0})
    assert_exact(league.match_distribution(exploiter), first)       # fixed for its life
    copy = snapshot(league, exploiter)
    assert league.snapshot_targets[copy] == {a: 0.2, b: 0.6}
    assert_exact(league.match_distribution(exploiter), {(a, "nash"): 1.0})   # the latest, meanwhile
    league.set_nash_weights({a: 0.5, b: 0.5}, evaluated={a, b})      # its copy not solved yet
    league.set_nash_weights({a: 0.0, b: 0.5, copy: 0.5}, evaluated={a, b, copy})
    league.set_nash_weights({a: 1.0}, evaluated={a, b, copy})
    second = {(b, "nash"): 0.5, (copy, "nash"): 0.5}
    assert_exact(league.match_distribution(exploiter), second)
    resumed = League.from_state(league.state())
    assert_exact(resumed.match_distribution(exploiter), second)
    assert resumed.snapshot_targets == league.snapshot_targets
    moving, *_ = nash_league("nash")
    c = snapshot(moving, "terran_main_agent_0")
    moving.set_nash_weights({c: 1.0})
    moving.set_nash_weights({c: 1.0, snapshot(moving, "terran_main_agent_0"): 1.0})
    assert len(moving.match_distribution(exploiter).opponents) == 2 and not moving.nash_targets


@pytest.mark.parametrize("role_weighting", ["main_pfsp_weighting", "league_exploiter_weighting"])
def test_hard_pfsp_uses_its_exponent(role_weighting):
    """f_hard(x) = (1 - x)^p with the configured p; x = 0.2, 0.5, 0.9 and p = 3 by hand."""
    mm = MatchmakingConfig(**{role_weighting: "hard"}, pfsp_hard_exponent=3.0, main_pfsp_probability=1.0,
                           main_verification_probability=0.0)
    config = LeagueConfig(initial_snapshots=False, races=("terran",), main_exploiters_per_race=0,
                          league_exploiters_per_race=1, payoff_decay=1.0, matchmaking=mm,
                          snapshots=tiny_snapshots())
    rng = RecordingGenerator(8)
    league = League(config, rng=rng)
    agent = "terran_main_agent_0" if role_weighting == "main_pfsp_weighting" else "terran_league_exploiter_0"
    snaps = [snapshot(league, "terran_main_agent_0") for _ in range(3)]
    for s, (won, lost) in zip(snaps, [(1, 4), (1, 1), (9, 1)]):
        play(league, agent, s, won, lost)
    weights = np.array([0.8**3, 0.5**3, 0.1**3])
    assert_exact(league.match_distribution(agent), {(s, "pfsp"): w for s, w in zip(snaps, weights / weights.sum())})
    rng.probabilities.clear()
    match = league.get_match(agent)
    assert match.branch == "pfsp" and match.opponent_id in snaps
    np.testing.assert_allclose(rng.probabilities[-1], weights / weights.sum(), rtol=1e-12)
    with pytest.raises(ValueError, match="pfsp_hard_exponent must be a positive number"):
        MatchmakingConfig(pfsp_hard_exponent=0.0) and LeagueConfig(
            matchmaking=MatchmakingConfig(pfsp_hard_exponent=0.0))


def test_main_agents_initial_copies_are_in_the_league_from_the_start():
    """AlphaStar's pseudocode: every main agent's initial parameters join as a frozen player,
    so its first PFSP match has an opponent; exploiters get no initial copy."""
    mm = MatchmakingConfig(main_pfsp_probability=1.0, main_verification_probability=0.0)
    league = League(LeagueConfig(races=("terran", "zerg"), matchmaking=mm), rng=9)
    assert league.historical_ids() == ["terran_main_agent_0#0", "zerg_main_agent_0#0"]
    for main in ("terran_main_agent_0", "zerg_main_agent_0"):
        (initial,) = league.snapshots_of(main)
        assert league.players[initial].parent == main and league.players[initial].step == 0
        # PFSP(squared) over the two initial copies, both unplayed (0.5): 1/2 each
        assert_exact(league.match_distribution(main), {(h, "pfsp"): 0.5 for h in league.historical_ids()})
        match = league.get_match(main)
        assert match.branch == "pfsp" and match.opponent_id in league.historical_ids()
    assert league.snapshots_of("terran_main_exploiter_0") == []
    # the next snapshot of a main agent is its second frozen copy
    config = league.config
    league.config = LeagueConfig(**{**vars(config), "snapshots": tiny_snapshots()})
    assert snapshot(league, "terran_main_agent_0") == "terran_main_agent_0#1"
    restored = League.from_state(league.state())
    assert restored.players == league.players and restored.historical_ids() == league.historical_ids()
    # a league saved before initial copies existed resumes without them
    old = League(LeagueConfig(initial_snapshots=False, races=("terran",)), rng=0).state()
    del old["config"]["initial_snapshots"]
    assert League.from_state(old).historical_ids() == []


MAINS = ["terran_main_agent_0", "protoss_main_agent_0", "zerg_main_agent_0"]
EMPTY_LEAGUE_MAIN_AGENT = {
    # 50% PFSP -> no past players -> a main agent uniformly; verification finds nothing and
    # falls through to self-play; self-play: each main agent, beaten 0.5 > 0.3, uniformly.
    "alphastar": lambda agent: {**{(m, "self_play_fallback"): 0.5 / 3 for m in MAINS}, **{(m, "self_play"): 0.5 / 3 for m in MAINS}},
    "openai_five": lambda agent: {(agent, "self_play"): 1.0},  # no past selves
    "self_play": lambda agent: {(agent, "self_play"): 1.0},
    "fsp": lambda agent: {(agent, "self_play_fallback"): 1.0},
    "pfsp": lambda agent: {(agent, "self_play_fallback"): 1.0},
    "pfsp_sp": lambda agent: {(agent, "self_play"): 0.5, (agent, "self_play_fallback"): 0.5},
}


def test_one_registry_of_main_agent_matchmakers():
    assert set(MAIN_AGENT_MATCHMAKERS) == set(EMPTY_LEAGUE_MAIN_AGENT)
    for name in MAIN_AGENT_MATCHMAKERS:
        assert LeagueConfig(main_agent_matchmaker=name).main_agent_matchmaker == name
    with pytest.raises(ValueError, match="allowed: " + ", ".join(MAIN_AGENT_MATCHMAKERS)):
        LeagueConfig(main_agent_matchmaker="elo")


@pytest.mark.parametrize("matchmaker", sorted(EMPTY_LEAGUE_MAIN_AGENT))
def test_empty_league_falls_back_to_self_play(matchmaker):
    league = League(LeagueConfig(initial_snapshots=False, main_agent_matchmaker=matchmaker), rng=6)
    assert league.learning_agent_ids("main_agent") == MAINS
    for agent in league.learning_agent_ids():
        role = league.players[agent].role
        if role == "main_agent":
            expected = EMPTY_LEAGUE_MAIN_AGENT[matchmaker](agent)
        elif role == "main_exploiter":
            expected = {(m, "main_agent"): 1 / 3 for m in MAINS}
        else:
            expected = {(m, "self_play_fallback"): 1 / 3 for m in MAINS}
        assert_exact(league.match_distribution(agent), expected)
        assert (league.get_match(agent).opponent_id, league.get_match(agent).branch) in expected


def test_ablation_arms_fsp_is_uniform_and_pfsp_sp_mixes_self_play():
    config = LeagueConfig(initial_snapshots=False, races=("t",), main_exploiters_per_race=0, league_exploiters_per_race=0,
                          payoff_decay=1.0, main_agent_matchmaker="fsp", snapshots=tiny_snapshots())
    league = League(config, rng=7)
    main = "t_main_agent_0"
    snaps = [snapshot(league, main) for _ in range(4)]
    play(league, main, snaps[0], 9, 1)
    assert_exact(league.match_distribution(main), {(s, "fsp"): 0.25 for s in snaps})
    league.config = LeagueConfig(**{**vars(config), "main_agent_matchmaker": "pfsp"})
    w = np.array([0.1**2, 0.25, 0.25, 0.25])
    assert_exact(league.match_distribution(main), {(s, "pfsp"): p for s, p in zip(snaps, w / w.sum())})
    league.config = LeagueConfig(**{**vars(config), "main_agent_matchmaker": "pfsp_sp"})
    expected = {(main, "self_play"): 0.5, **{(s, "pfsp"): p for s, p in zip(snaps, 0.5 * w / w.sum())}}
    assert_exact(league.match_distribution(main), expected)


def test_openai_five_quality_scores_worked_by_hand():
    config = LeagueConfig(initial_snapshots=False, races=("t",), main_exploiters_per_race=0, league_exploiters_per_race=0,
                          main_agent_matchmaker="openai_five", snapshots=tiny_snapshots())
    league = League(config, rng=8)
    main = "t_main_agent_0"
    s0, s1 = snapshot(league, main), snapshot(league, main)
    np.testing.assert_allclose(league.quality_probabilities(main), [0.5, 0.5])
    league.record_result(main, s0, "win")  # q0 -= 0.01 / (2 * 0.5)
    q = np.array([-0.01, 0.0])
    np.testing.assert_allclose(league.quality_probabilities(main), np.exp(q) / np.exp(q).sum())
    league.record_result(s1, main, "loss")  # the agent beat s1, seen from s1's side
    p1 = np.exp(q)[1] / np.exp(q).sum()
    q[1] -= 0.01 / (2 * p1)
    np.testing.assert_allclose(league.quality_probabilities(main), np.exp(q) / np.exp(q).sum())
    snapshot(league, main)  # a new past self enters with max(q)
    q = np.append(q, q.max())
    np.testing.assert_allclose(league.quality_probabilities(main), np.exp(q) / np.exp(q).sum())
    probs = np.exp(q) / np.exp(q).sum()
    expected = {(main, "self_play"): 0.8, **{(s, "openai_five_past"): 0.2 * p for s, p in zip(league.snapshots_of(main), probs)}}
    assert_exact(league.match_distribution(main), expected)


def test_match_distribution_refuses_what_is_not_a_distribution():
    with pytest.raises(ValueError, match="as many opponents, branches and probabilities"):
        MatchDistribution("a", ("b", "c"), np.array([1.0]), ("x", "x"))
    with pytest.raises(ValueError, match="positive and sum to 1"):
        MatchDistribution("a", ("b", "c"), np.array([0.5, 0.6]), ("x", "x"))
    with pytest.raises(ValueError, match="positive and sum to 1"):
        MatchDistribution("a", ("b", "c"), np.array([1.0, 0.0]), ("x", "x"))


def test_matches_are_deterministic_for_a_seed():
    def sequence(seed):
        league = League(LeagueConfig(initial_snapshots=False, snapshots=tiny_snapshots()), rng=seed)
        for agent in league.learning_agent_ids()[:4]:
            snapshot(league, agent)
        return [league.get_match(a).opponent_id for a in league.learning_agent_ids() for _ in range(20)]

    assert sequence(11) == sequence(11)
    assert sequence(11) != sequence(12)


def test_unknown_player_and_historical_requests_are_refused():
    league = League(LeagueConfig(initial_snapshots=False, snapshots=tiny_snapshots()), rng=0)
    with pytest.raises(ValueError, match="unknown player id 'nobody'"):
        league.get_match("nobody")
    past = snapshot(league, "terran_main_agent_0")
    for ask in (league.get_match, league.match_distribution):
        with pytest.raises(ValueError, match="does not learn"):
            ask(past)


# -- snapshot and reset rules -------------------------------------------------------


def test_snapshot_reasons_follow_the_paper():
    cfg = SnapshotConfig(main_agent_snapshot_steps=100, exploiter_min_steps=50, exploiter_win_rate=0.7,
                         main_exploiter_timeout_steps=400, league_exploiter_timeout_steps=200)
    assert snapshot_reason("main_agent", 99, [], cfg) is None
    assert snapshot_reason("main_agent", 100, [], cfg) == "steps"
    assert snapshot_reason("main_exploiter", 49, [0.9, 0.9], cfg) is None  # too soon
    assert snapshot_reason("main_exploiter", 60, [0.9, 0.71], cfg) == "beats_all"
    assert snapshot_reason("main_exploiter", 60, [0.9, 0.7], cfg) is None  # > 70%, strictly
    assert snapshot_reason("main_exploiter", 399, [0.1], cfg) is None
    assert snapshot_reason("main_exploiter", 400, [0.1], cfg) == "timeout"
    assert snapshot_reason("league_exploiter", 200, [0.1], cfg) == "timeout"
    assert snapshot_reason("league_exploiter", 60, [], cfg) is None  # nobody to beat yet
    with pytest.raises(ValueError, match="only learning agents"):
        snapshot_reason("historical", 1, [], cfg)


def test_an_exploiter_that_stops_improving_adds_a_copy():
    """Train until beaten no more: with `exploiter_plateau_steps` = 300 a main exploiter whose
    win rate against the main agent rises by more than 0.02 keeps training past the point of
    its last gain; once it has gained nothing for 300 steps it adds a copy ("plateau"), before
    its 10,000-step timeout. After the copy (and reset) its progress is measured afresh."""
    assert snapshot_reason("main_exploiter", 60, [0.5], SnapshotConfig(
        exploiter_min_steps=50, exploiter_plateau_steps=100), steps_without_gain=100) == "plateau"
    assert snapshot_reason("main_exploiter", 60, [0.5], SnapshotConfig(
        exploiter_min_steps=50, exploiter_plateau_steps=0), steps_without_gain=10**6) is None  # off
    assert snapshot_reason("main_agent", 60, [0.5], SnapshotConfig(
        main_agent_snapshot_steps=100, exploiter_plateau_steps=10), steps_without_gain=99) is None
    config = LeagueConfig(initial_snapshots=False, races=("t",), league_exploiters_per_race=0,
                          snapshots=SnapshotConfig(main_agent_snapshot_steps=10**9,
                                                   exploiter_min_steps=100,
                                                   main_exploiter_timeout_steps=10_000,
                                                   exploiter_plateau_steps=300,
                                                   exploiter_plateau_gain=0.02))
    league = League(config, rng=3)
    exploiter, main = "t_main_exploiter_0", "t_main_agent_0"
    # Its win rate against the main agent at steps 100, 200, ...: it gains more than 0.02 at
    # every reading up to step 400 (0.40), then 0.41, 0.415, 0.42 are no gain over 0.40 + 0.02;
    # 300 steps after step 400 it adds a copy.
    rates = [0.1, 0.2, 0.3, 0.4, 0.41, 0.415, 0.42, 0.42, 0.42, 0.42]
    decided = {}
    for i, rate in enumerate(rates):
        step = 100 * (i + 1)
        league.payoff.set_exact(exploiter, main, rate, 0.0)
        decisions = league.decide(exploiter, step, float(step))
        if decisions:
            decided[step] = decisions
            break
    (when, decisions), = decided.items()
    assert decisions[0].reason == "plateau"
    assert when == 700
    league.apply(decisions[0])
    assert league.decide(exploiter, when + 100, 0.0) == []  # progress measured afresh from 800
    assert league.decide(exploiter, when + 350, 0.0) == []
    assert league.decide(exploiter, when + 400, 0.0)[0].reason == "plateau"
    state = League.from_state(league.state())
    assert state.best_target_step == league.best_target_step


def test_resets_main_exploiter_always_league_exploiter_a_quarter_main_never():
    config = LeagueConfig(initial_snapshots=False, races=("t",), league_exploiters_per_race=1, snapshots=tiny_snapshots())
    league = League(config, rng=9)
    n = 4000
    resets = collections.Counter()
    for agent in league.learning_agent_ids():
        for _ in range(n):
            decisions = league.decide(agent, 10, 0.0)
            assert isinstance(decisions[0], AddSnapshot)
            resets[agent] += any(isinstance(d, ResetAgent) for d in decisions)
    assert resets["t_main_agent_0"] == 0
    assert resets["t_main_exploiter_0"] == n
    assert abs(resets["t_league_exploiter_0"] / n - 0.25) < 4 * np.sqrt(0.25 * 0.75 / n)


def test_league_exploiters_reset_to_the_newest_main_agent_copy_of_their_race_when_asked():
    """`league_exploiter_reset_to="main_agent"`: a reset league exploiter restarts from the newest
    frozen copy of its race's main agent (not withdrawn; any race's when its own has none; the
    initial parameters, source None, when there is none); main exploiters, and the default
    "initial", always restart from the initial parameters."""
    snapshots = dataclasses.replace(tiny_snapshots(), league_exploiter_reset_probability=1.0,
                                    league_exploiter_reset_to="main_agent")
    league = League(LeagueConfig(initial_snapshots=False, races=("t", "z"), snapshots=snapshots), rng=3)

    def reset_source(agent, step):
        decisions = league.decide(agent, step, float(step))
        for d in decisions:
            league.apply(d)
        (reset,) = [d for d in decisions if isinstance(d, ResetAgent)]
        return reset.source

    assert reset_source("t_league_exploiter_0", 10) is None   # no main agent copy yet
    for step, wall in ((10, 1.0), (20, 5.0)):
        for d in league.decide("z_main_agent_0", step, wall):
            league.apply(d)
    assert reset_source("t_league_exploiter_0", 20) == "z_main_agent_0#1"   # no t copy: any race's newest
    for d in league.decide("t_main_agent_0", 10, 2.0):
        league.apply(d)
    assert reset_source("t_league_exploiter_0", 30) == "t_main_agent_0#0"   # its own race's, though older
    for d in league.decide("t_main_agent_0", 20, 3.0):
        league.apply(d)
    assert reset_source("t_league_exploiter_0", 40) == "t_main_agent_0#1"   # the newest
    league.withdraw("t_main_agent_0#1", "damaged")
    assert reset_source("t_league_exploiter_0", 50) == "t_main_agent_0#0"   # not a withdrawn one
    assert reset_source("t_main_exploiter_0", 10) is None
    default = League(LeagueConfig(initial_snapshots=False, races=("t",), snapshots=dataclasses.replace(
        snapshots, league_exploiter_reset_to="initial")), rng=3)
    for d in default.decide("t_main_agent_0", 10, 1.0):
        default.apply(d)
    assert [d.source for d in default.decide("t_league_exploiter_0", 10, 2.0) if isinstance(d, ResetAgent)] == [None]
    with pytest.raises(ValueError, match="league_exploiter_reset_to must be one of initial, main_agent"):
        LeagueConfig(snapshots=dataclasses.replace(snapshots, league_exploiter_reset_to="supervised"))


def test_decisions_are_applied_not_acted_on():
    config = LeagueConfig(initial_snapshots=False, races=("t",), snapshots=SnapshotConfig(main_agent_snapshot_steps=100))
    league = League(config, rng=10)
    main = "t_main_agent_0"
    assert league.decide(main, 99, 1.0) == []
    (decision,) = league.decide(main, 150, 2.0)
    assert league.historical_ids() == []  # deciding changes nothing
    player = league.apply(decision)
    assert player == Player(f"{main}#0", "historical", "t", parent=main, step=150, wall_time=2.0)
    assert league.decide(main, 249, 3.0) == []  # counted from the snapshot's step
    assert league.decide(main, 250, 3.0)[0].player_id == f"{main}#1"


def test_league_state_round_trips():
    league = League(LeagueConfig(initial_snapshots=False, snapshots=tiny_snapshots(), main_agent_matchmaker="openai_five"), rng=12)
    for agent in league.learning_agent_ids():
        snapshot(league, agent)
    play(league, "terran_main_agent_0", "terran_main_agent_0#0", 3, 1)
    copy = League.from_state(league.state())
    assert copy.players == league.players
    np.testing.assert_allclose(copy.payoff.win_rate_matrix(), league.payoff.win_rate_matrix())
    assert [copy.get_match(a) for a in copy.learning_agent_ids()] == [league.get_match(a) for a in league.learning_agent_ids()]


def test_exact_payoffs_override_sampled_ones_and_round_trip():
    payoff = Payoff(decay=1.0)
    for p in "abc":
        payoff.add_player(p)
    for _ in range(3):
        payoff.update("a", "b", "win", 2.0)
    payoff.update("a", "c", "loss", -1.0)
    payoff.set_exact("a", "c", 0.75, 0.5)
    assert payoff.win_rate("a", "c") == 0.75 and payoff.win_rate("c", "a") == 0.25
    assert payoff.win_rate("a", "b") == 1.0                        # sampled where no exact one
    np.testing.assert_allclose(payoff.score_matrix(), [[0, 2, 0.5], [-2, 0, 0], [-0.5, 0, 0]])
    np.testing.assert_array_equal(payoff.exact_mask(["a", "c"]), [[False, True], [True, False]])
    assert payoff.counts("a", "c")["games"] == 1                   # counts stay what was played
    payoff.set_exact("b", "b", 0.9, 3.0)                          # a player against itself: even
    restored = Payoff.from_state(payoff.state())
    np.testing.assert_allclose(restored.win_rate_matrix(), payoff.win_rate_matrix())
    np.testing.assert_allclose(restored.score_matrix(), payoff.score_matrix())
    np.testing.assert_array_equal(restored.exact_mask(), payoff.exact_mask())
    # a state saved before the exact entries were arrays: (i, j, win rate, score) rows, i <= j
    old = payoff.state()
    for key in ("exact_pairs", "exact_rates", "exact_scores"):
        del old[key]
    old["exact"] = [(0, 2, 0.75, 0.5), (1, 1, 0.5, 0.0)]
    np.testing.assert_allclose(Payoff.from_state(old).score_matrix(), payoff.score_matrix())
    np.testing.assert_array_equal(Payoff.from_state(old).exact_mask(), payoff.exact_mask())
    with pytest.raises(ValueError, match="win rate in \\[0, 1\\]"):
        payoff.set_exact("a", "b", 1.5, 0.0)
    for key, bad in [("exact_rates", np.array([1.5, 0.5])), ("exact_pairs", np.array([[0, 7], [1, 1]]))]:
        with pytest.raises(ValueError, match="exact entries are corrupt"):
            Payoff.from_state({**payoff.state(), key: bad})


def test_a_draw_goes_past_any_number_of_withdrawn_players_but_not_past_one_the_league_keeps_offering():
    # 50 damaged players, each withdrawn at its first draw (the draw after it no longer offers
    # it): the 51st draw is played, though 50 draws in a row met withdrawn players.
    damaged = iter([f"frozen_{k}" for k in range(50)])

    def each_new():
        player = next(damaged, None)
        if player is not None:
            raise WithdrawnPlayer(player)
        return "match"
    assert draw_past_withdrawn(each_new, "any_main_agent_0") == "match"
    # One withdrawn player offered again and again (the league did not take it out): the node
    # gives up after MATCH_ATTEMPTS repeats and says who and why.
    calls = []

    def same_again():
        calls.append(1)
        raise WithdrawnPlayer("frozen_7")
    with pytest.raises(RuntimeError, match="any_main_agent_0: 20 draws met players already withdrawn"):
        draw_past_withdrawn(same_again, "any_main_agent_0")
    assert len(calls) == MATCH_ATTEMPTS + 1 == 21   # the first meeting, then 20 repeats
