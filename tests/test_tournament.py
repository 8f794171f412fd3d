"""The tournament (issue 85, item 6): `experiments.tournament AGENT AGENT ... --games=N`.

The rating fit is checked against ratings worked out by hand and against synthetic results drawn
from a Bradley-Terry model with known ratings; the games against OpenSpiel's exact expected
payoffs of the same agents (their tabular policies), which the tournament does not compute."""

import json
import math
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from open_spiel.python.algorithms import expected_game_score

from actors.games.poker import openspiel as poker
from actors.games.poker import policy as poker_policy
from coordinator.history import LeagueHistory
from experiments import agent_ref, build, export, tournament
from tests.test_export import MAIN, SNAPSHOT, make_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPLOITER = "any_main_exploiter_0"


def bradley_terry_games(ratings, games, rng):
    """{(i, j): i's per-game scores against j}, each game won by i with the Bradley-Terry
    probability 1 / (1 + 10^((r_j - r_i) / 400))."""
    out = {}
    for i in range(len(ratings)):
        for j in range(i + 1, len(ratings)):
            p = 1.0 / (1.0 + 10.0 ** ((ratings[j] - ratings[i]) / 400.0))
            out[(i, j)] = (rng.random(games) < p).astype(np.float64)
    return out


def test_three_to_one_is_400_log10_3_elo():
    # By hand: 1 / (1 + 10^(-d/400)) = 3/4  <=>  10^(d/400) = 3  <=>  d = 400 log10(3) = 190.85.
    r = tournament.ratings_from_scores([[0, 750], [250, 0]], prior_games=0.0)
    assert r[0] - r[1] == pytest.approx(400 * math.log10(3), abs=0.1)
    assert r[0] - r[1] == pytest.approx(190.85, abs=0.1)
    assert r.mean() == pytest.approx(1500.0)
    # Draws count half: 500 wins, 500 draws, 0 losses is a score of 3/4 too.
    assert tournament.score_matrix({(0, 1): [1.0] * 500 + [0.5] * 500}, 2).tolist() == [[0, 750], [250, 0]]


def test_the_fit_recovers_bradley_terry_ratings_and_intervals_hold_the_truth_and_shrink():
    truth = np.array([1500.0, 1600.0, 1350.0, 1800.0])
    truth = truth - truth.mean() + 1500.0
    rng = np.random.default_rng(1)
    fitted = tournament.ratings_from_scores(tournament.score_matrix(bradley_terry_games(truth, 20_000, rng), 4))
    np.testing.assert_allclose(fitted, truth, atol=10.0)
    widths = []
    for games in (400, 3200):
        pairs = bradley_terry_games(truth, games, rng)
        elo, low, high = tournament.bootstrap_ratings(pairs, 4, replicates=100, seed=3)
        assert ((low <= truth) & (truth <= high)).all(), (games, low, truth, high)
        assert ((low <= elo) & (elo <= high)).all()
        widths.append(high - low)
    # 8 times the games: intervals about sqrt(8) = 2.8 times narrower.
    assert (widths[1] < 0.5 * widths[0]).all(), widths
    # The bootstrap is seeded: the same seed, the same intervals.
    again = tournament.bootstrap_ratings(pairs, 4, replicates=100, seed=3)
    np.testing.assert_array_equal(again[1], low)


@pytest.fixture(scope="module")
def kuhn_run(tmp_path_factory):
    """A hand-made Kuhn run (tests/test_export.py's) with a main exploiter beside the main agent."""
    from learners import checkpoint

    run_dir = tmp_path_factory.mktemp("tournament") / "run"
    config, network = make_run(run_dir)
    spec = config.game_info.functions().spec
    params = jax.tree_util.tree_map(lambda x: x * 4.0, build.initial_params(network, spec, 7, 5))
    history = LeagueHistory(str(run_dir))
    history.add_player(EXPLOITER, "main_exploiter", "any", None, 0, 1.0)
    history.add_nash({MAIN: 0.3, SNAPSHOT: 0.7})   # RUN_DIR:result, the league's Nash mixture
    history.close()
    checkpoint.save(checkpoint.path(str(run_dir), EXPLOITER), checkpoint.Checkpoint(4, 0, 0, params, {}))
    return str(run_dir)


def exact_values(game, a, b):
    """(P(a wins), a's expected chips), seats averaged, of two tabular policies, by walking the
    game tree (win probability) and OpenSpiel's `expected_game_score.policy_value` (chips)."""
    def win(state, policies, seat):
        if state.is_terminal():
            return float(state.returns()[seat] > 0)
        if state.is_chance_node():
            return sum(p * win(state.child(x), policies, seat) for x, p in state.chance_outcomes())
        probs = policies[state.current_player()].action_probabilities(state)
        return sum(p * win(state.child(x), policies, seat) for x, p in probs.items() if p > 0)

    root = game.new_initial_state()
    wins = 0.5 * (win(root, [a, b], 0) + win(root, [b, a], 1))
    chips = 0.5 * (expected_game_score.policy_value(root, [a, b])[0]
                   + expected_game_score.policy_value(root, [b, a])[1])
    return wins, chips


def test_a_kuhn_tournament_scores_the_exact_expected_payoffs(kuhn_run, tmp_path):
    main_file = tmp_path / "main.agent.npz"
    assert export.cli([f"{kuhn_run}:{MAIN}"], str(main_file)) == 0
    names = [f"{kuhn_run}:{MAIN}", f"{kuhn_run}:{EXPLOITER}", str(main_file), f"{kuhn_run}:{SNAPSHOT}",
             f"{kuhn_run}:result"]
    result = tournament.play_tournament(names, games=2000, seed=1, bootstrap=50, log=None)
    score, se = np.array(result["payoff"]["score"], dtype=float), np.array(result["payoff"]["standard_error"], dtype=float)
    chips, chips_se = (np.array(result["payoff"][k], dtype=float) for k in ("chips", "chips_standard_error"))
    k = len(names)
    game = poker.load_game("kuhn_poker")
    policies = []
    for name in names:
        agent = agent_ref.resolve(name)
        if agent.weights:   # the Nash mixture: one member per game, as a behaviour policy
            assert [m["player_id"] for m in agent.members] == [MAIN, SNAPSHOT] and agent.weights == [0.3, 0.7]
            tables = [poker_policy.network_policy(game, agent.network, p) for p in agent.params]
            policies.append(poker_policy.mix_policies(game, tables, agent.weights))
        else:
            policies.append(poker_policy.network_policy(game, agent.network, agent.params))
    for i in range(k):
        assert np.isnan(score[i, i])
        for j in range(k):
            if i == j:
                continue
            assert score[i, j] + score[j, i] == pytest.approx(1.0) and chips[i, j] == pytest.approx(-chips[j, i])
            assert result["payoff"]["games"][i][j] == 2000
            want_win, want_chips = exact_values(game, policies[i], policies[j])
            assert abs(score[i, j] - want_win) < 4 * se[i, j], (names[i], names[j], score[i, j], want_win, se[i, j])
            assert abs(chips[i, j] - want_chips) < 4 * chips_se[i, j], (names[i], names[j], chips[i, j], want_chips)
    # The file of the main agent is the main agent: exactly 1/2 expected, within its error.
    assert abs(score[0, 2] - 0.5) < 4 * se[0, 2]
    # Different agents differ here, so the checks above tell seats and agents apart.
    assert abs(exact_values(game, policies[0], policies[3])[0] - 0.5) > 5 * se[0, 3]
    elo, low, high = (np.array(result["ratings"][x]) for x in ("elo", "low", "high"))
    assert len(elo) == k and (low <= elo).all() and (elo <= high).all() and (high - low > 0).all()
    assert [a["name"] for a in result["agents"]] == names
    assert result["agents"][2]["source"]["file"] == str(main_file)
    assert [(m["player_id"], m["weight"]) for m in result["agents"][4]["members"]] == [(MAIN, 0.3), (SNAPSHOT, 0.7)]


def test_the_command_writes_its_table_or_exits_2_writing_nothing(kuhn_run, tmp_path, capsys):
    out = tmp_path / "out"
    leduc = tmp_path / "leduc"
    make_run(leduc, game="leduc_poker")
    cases = {(f"{kuhn_run}:{MAIN}",): "at least two agents",
             (f"{kuhn_run}:{MAIN}", f"{kuhn_run}:nobody"): "has no player 'nobody'",
             (f"{kuhn_run}:{MAIN}", str(tmp_path / "missing.npz")): "no such file",
             (f"{kuhn_run}:{MAIN}", f"{leduc}:{MAIN}"): "different games"}
    for names, why in cases.items():
        capsys.readouterr()
        assert tournament.cli(list(names), 10, out=str(out), bootstrap=5) == 2, names
        assert why in capsys.readouterr().err
    assert tournament.cli([f"{kuhn_run}:{MAIN}", f"{kuhn_run}:{EXPLOITER}"], 1, out=str(out)) == 2
    assert not out.exists()
    done = subprocess.run([sys.executable, "-m", "experiments.tournament", f"{kuhn_run}:{MAIN}",
                           f"{kuhn_run}:{EXPLOITER}", f"{kuhn_run}:{SNAPSHOT}", "--games=40", "--bootstrap=20",
                           f"--out={out}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Elo" in done.stdout and MAIN in done.stdout and EXPLOITER in done.stdout
    result = json.loads((out / "tournament.json").read_text())
    assert result["games_per_pair"] == 40 and len(result["ratings"]["elo"]) == 3
    assert (out / "tournament.png").read_bytes().startswith(b"\x89PNG")
    bad = subprocess.run([sys.executable, "-m", "experiments.tournament", f"{kuhn_run}:{MAIN}",
                          f"{kuhn_run}:nobody", "--games=10", f"--out={tmp_path / 'none'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "nobody" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "none").exists()
