"""Section 3 of the quality benchmarks, reduced for CI: a short SMAX league, then the table of
its main agent against the built-in opponent (jaxmarl's scripted heuristic).

The full table (three races, ten minutes of training, 256 games per matchup) is in
BENCHMARKS.md; here the league is one race and trains for under a minute, so the test checks
that the table is produced from the run's own parameters (trained vs initial), not a win
rate: a minute of SMAX training decides nothing against the heuristic (measured: mostly draws).
"""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from actors.games import smax_races as sr
from actors.games.smax_races import scripted
from benchmarks import builtin_opponent
from coordinator.param_store import player_params
from experiments import agent_ref, export, launchers
from experiments.config import RunConfig, prepare_run_dir
from learners import checkpoint
from tests.test_export import SMAX_MAIN, make_smax_run
from tests.test_scripted import CONFIG, ScriptedNetwork

# The system tier (docs/testing.md): SMAX leagues against the scripted heuristic.
pytestmark = pytest.mark.system

GAMES = 32


@pytest.mark.long
def test_the_main_agents_table_against_the_heuristic(tmp_path, capfd, monkeypatch):
    run_dir = str(tmp_path / "run")
    # Stopped by learnt steps (a minute under load can pass in compiling), capped at 5 minutes.
    config = RunConfig.make(races=1, runner="inprocess", run_dir=run_dir, minutes=5.0, learner_steps=300, batch_size=16,
                       main_exploiters_per_race=0, league_exploiters_per_race=0, evaluators=0,
                       dashboard_port=-1, progress_every_seconds=30.0)
    prepare_run_dir(config)
    with open(tmp_path / "league.log", "w") as log:
        launchers.run_inprocess(config, stop_event=threading.Event(), out=log)
    version, _ = checkpoint.read_params(run_dir, "terran_main_agent_0")
    assert version > 0  # the main agent learnt: its final parameters differ from the initial

    measured = []   # main's own measurement, read below (measuring twice took ~100 s of CI)
    measure = builtin_opponent.measure
    monkeypatch.setattr(builtin_opponent, "measure", lambda *a, **k: measured.append(measure(*a, **k)) or measured[-1])
    played = []     # the parameters of every batch of games the table plays
    play = scripted.play_detailed
    monkeypatch.setattr(scripted, "play_detailed", lambda network, params, *a, **k: played.append(params) or play(
        network, params, *a, **k))
    # --average_newest=1: the table reads the average of the final parameters and the newest snapshot's
    assert builtin_opponent.main([f"--run_dir={run_dir}", f"--games={GAMES}", "--average_newest=1"]) == 0
    out = capfd.readouterr().out
    lines = out.strip().splitlines()
    assert lines[-1].startswith("RESULT builtin_opponent mean_win_rate=")
    assert " matchups_at_080=" in lines[-1] and " clear_of_080=" in lines[-1] and " actions=sampled " in lines[-1]
    assert " params=mean_of_final_and_1_newest " in lines[-1]
    assert "actions sampled from its policy" in out and "its 1 newest snapshots' (--average_newest; the snapshots from minutes terran " in out
    assert "| terran |" in out and "(final " in out

    result, = measured
    row = result["table"][("terran", "terran")]
    for name in ("trained", "initial", "final"):
        assert sum(row[f"{name}_outcomes"]) == GAMES
        # the heuristic's armies as its games spawned them: its menu in turn, 11 / 11 / 10
        by_army = np.array(row[f"{name}_by_army"])
        assert by_army.sum(1).tolist() == [11, 11, 10]
        assert by_army.sum(0).tolist() == row[f"{name}_outcomes"]
        per_army = [(w + 0.5 * d) / (losses + d + w) for losses, d, w in by_army]
        assert row[name] == pytest.approx(sum(per_army) / 3)
    assert result["games"] > 0 and result["players"] >= 1

    # --pick_history: the main agent's pick from its first snapshot (its start) to its final
    # parameters, which learnt, so the two picks differ
    history = builtin_opponent.pick_history(run_dir, points=3)
    rows = history["terran"]
    assert rows[0][1] == "terran_main_agent_0#0" and rows[-1][1] == "terran_main_agent_0"
    assert [m for m, _, _ in rows] == sorted(m for m, _, _ in rows) and rows[0][0] == 0.0
    for _, _, probs in rows:
        assert probs.shape == (1, sr.COMPOSITIONS_PER_RACE)
        np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    assert np.abs(rows[0][2] - rows[-1][2]).max() > 1e-4
    assert "terran main agent's pick over the run" in builtin_opponent.format_pick_history(history, ["terran"])

    # --win_history: the same games (seed, the heuristic's armies) as the table, so its first
    # snapshot (the start, <agent>#0) reads the table's initial win rate and its last row (the
    # final parameters) the trained one
    wins = builtin_opponent.win_history(run_dir, points=2, games=GAMES)["terran"]
    assert [w[1] for w in wins] == [rows[0][1], rows[-2][1], "terran_main_agent_0"]
    assert wins[0][2] == [pytest.approx(row["initial"])]
    assert wins[-1][2] == [pytest.approx(row["final"])]
    assert "| vs terran |" in builtin_opponent.format_win_history({"terran": wins}, ["terran"], GAMES)

    # --average_newest: the final parameters and the newest snapshot's, averaged leaf by leaf
    _, newest = player_params(run_dir, rows[-2][1])
    _, final = player_params(run_dir, "terran_main_agent_0")
    mean = agent_ref.averaged_params(run_dir, [{"player_id": rows[-2][1]}], final)
    for m, a, b in zip(*(jax.tree_util.tree_leaves(t) for t in (mean, newest, final))):
        np.testing.assert_allclose(m, (np.asarray(a, np.float64) + b) / 2, rtol=1e-6, atol=1e-7)
    assert any(not np.allclose(a, b) for a, b in zip(jax.tree_util.tree_leaves(newest), jax.tree_util.tree_leaves(final)))

    # ... and the table's trained column played that average, its final column the final parameters
    def same(a, b):
        return all(np.allclose(x, y, rtol=1e-6, atol=1e-7)
                   for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))
    assert [same(p, mean) for p in played[:3]] == [True, False, False]
    assert [same(p, final) for p in played[:3]] == [False, False, True]


def test_an_exported_agent_reads_the_figure_of_the_run_it_came_from(tmp_path, capsys):
    """The run's agent (RUN_DIR:result:terran: the terran main agent averaged with its newest
    snapshots), its exported file and the run's own table (`--average_newest=30`) play the same
    games: the same figure, loss/draw/win by army and army picked in every game. The final
    parameters alone (RUN_DIR:terran_main_agent_0) read otherwise, as the table's final column. A hand-made run (random
    parameters) and 9 games a matchup: the program is compiled once for all of them
    (`shared_network`)."""
    run_dir = tmp_path / "run"
    make_smax_run(run_dir, snapshots=3)
    file = tmp_path / "terran.agent.npz"
    assert export.cli([f"{run_dir}:result:terran"], str(file)) == 0
    games, keys = 9, ("trained", "trained_se", "trained_outcomes", "trained_by_army", "trained_armies")
    table = builtin_opponent.measure(str(run_dir), games, average_newest=30)["table"][("terran", "terran")]
    rows = {}
    for name in (f"{run_dir}:result:terran", str(file), f"{run_dir}:{SMAX_MAIN}"):
        result = builtin_opponent.measure_agents([name], games)
        (label, race, opponent), row = next(iter(result["table"].items()))
        assert (label, race, opponent) == (name, "terran", "terran") and len(result["table"]) == 1
        rows[name] = row
    run_row, file_row, final_row = rows.values()
    for key in keys:
        assert run_row[key] == file_row[key] == table[key], key
        assert final_row[key] == table[key.replace("trained", "final")], key
    assert any(final_row[key] != run_row[key] for key in keys)   # another agent reads otherwise
    # The command: --agent takes the file, its RESULT line the run's figure.
    capsys.readouterr()
    assert builtin_opponent.main([f"--agent={file}", f"--games={games}"]) == 0
    out = capsys.readouterr().out
    assert f"RESULT builtin_opponent mean_win_rate={run_row['trained']:.3f} " in out
    assert " params=mean_of_final_and_3_newest " in out and "average of final + 3 newest snapshots" in out
    assert f"| {file} (terran) | {run_row['trained']:.2f} ± " in out


def test_a_wrong_agent_exits_2_naming_the_fix(tmp_path, capsys):
    from tests.test_export import make_run

    run_dir = tmp_path / "kuhn"
    make_run(run_dir)
    smax = tmp_path / "smax"
    make_smax_run(smax, snapshots=0, races=2)
    cases = {(f"--agent={run_dir}:any_main_agent_0",): "an agent of kuhn_poker",
             (f"--agent={smax}:result",): f"{smax}:result:protoss",
             (f"--agent={tmp_path / 'missing.npz'}",): "no such file",
             (f"--agent={smax}:result:terran", "--average_newest=30"): "reads a run's snapshots",
             (f"--agent={smax}:result:terran", "--heuristic_races=elves"): "races are terran, protoss, zerg",
             (f"--agent={smax}:result:terran", f"--run_dir={smax}"): "one of the two"}
    for args, why in cases.items():
        capsys.readouterr()
        try:
            rc = builtin_opponent.main([*args, "--games=3"])
        except SystemExit as e:   # argparse's errors
            rc = e.code
        assert rc == 2, args
        assert why in capsys.readouterr().err, args


def test_the_win_rate_weighs_each_heuristic_army_equally():
    """Worked by hand: army 0 won 3 of 3 (1.0), army 1 lost its 1 (0.0), army 2 drew 2 (0.5):
    against a uniform pick (1.0 + 0.0 + 0.5) / 3 = 0.5, where pooling the 6 games reads 4/6."""
    outcomes = np.array([1, 1, 1, -1, 0, 0])
    armies = np.array([0, 0, 0, 1, 2, 2])
    assert builtin_opponent.stratified_win_rate(outcomes, armies) == pytest.approx(0.5)
    assert builtin_opponent.balanced_armies(7).tolist() == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(SystemExit, match="--games=2"):
        builtin_opponent.balanced_armies(2)


def test_the_standard_error_of_the_stratified_win_rate():
    """Worked by hand (Cochran's stratified variance, ddof 1): scores army 0 [1, 0] (variance
    0.5), army 1 [1, 1] (0), army 2 [0.5, 0] (0.125); standard error
    sqrt(0.5 / 2 + 0 / 2 + 0.125 / 2) / 3 = sqrt(0.3125) / 3 = 0.18634. Pooling the 6 games
    as one sample reads 0.2007, with ddof 0 0.1318; a stratum of one game has no sample
    variance, so the error is undefined (nan)."""
    outcomes = np.array([1, -1, 1, 1, 0, -1])
    armies = np.array([0, 0, 1, 1, 2, 2])
    assert builtin_opponent.stratified_standard_error(outcomes, armies) == pytest.approx(0.186339, abs=1e-6)
    assert np.isnan(builtin_opponent.stratified_standard_error(np.array([1, 0, -1]), np.array([0, 0, 1])))


def test_a_run_of_another_game_is_refused(tmp_path):
    run_dir = str(tmp_path / "kuhn")
    prepare_run_dir(RunConfig(game="kuhn_poker", races=1, runner="inprocess", run_dir=run_dir))
    with pytest.raises(SystemExit, match="kuhn_poker run"):
        builtin_opponent.measure(run_dir, 4)


def test_the_breakdown_by_army_matches_both_sides_scripted():
    """`composition_breakdown` of the heuristic as the player (it picks army 0 itself): every
    forced pair's win rate must match both sides scripted with the same armies
    (`play_heuristic_games`, an independent measurement), and its picks are all army 0.
    Checked: with the forced pairs swapped it reads 0.69 from the reference on average (bar 0.08;
    right: 0.03)."""
    games, races = 48, ("protoss", "protoss")  # a mirror: a swapped pair reads 1 - its rate
    b = builtin_opponent.composition_breakdown(ScriptedNetwork("heuristic"), {}, races, games, seed=2)
    assert b["picks"].tolist() == [1.0, 0.0, 0.0]
    k = sr.COMPOSITIONS_PER_RACE
    armies = np.array([(a, h) for a in range(k) for h in range(k) for _ in range(games)], np.int32)
    pair = np.tile([sr.RACES.index(r) for r in races], (len(armies), 1))
    outcomes = sr.play_heuristic_games(CONFIG, pair, armies, seed=7).reshape(k, k, games)
    reference = np.mean((outcomes > 0) + 0.5 * (outcomes == 0), axis=-1)
    assert np.ptp(reference) > 0.5  # the pairs differ, so a mixed-up pair cannot pass
    assert np.abs(b["rates"] - reference).mean() < 0.08, (b["rates"], reference)
    assert np.allclose(b["army_rates"], reference.mean(1), atol=0.1)
    assert abs(b["ceiling"] - reference.mean(1).max()) < 0.1
    assert abs(b["with_picks"] - reference.mean(1)[0]) < 0.1  # it always picks army 0


class _FightsWhenGreedy(ScriptedNetwork):
    """Greedy: picks army 2 and plays the heuristic's micro. Sampling: picks a uniformly random
    army and stops every unit (so it never wins)."""

    def __init__(self):
        super().__init__("heuristic")
        self.passive = ScriptedNetwork("passive")

    def act(self, params, rng, obs, state, first, greedy=False):
        player = self if greedy else self.passive
        action, state = ScriptedNetwork.act(player, params, rng, obs, state, first, greedy)
        batch = obs["units"].shape[0]
        pick = (jnp.full(batch, 2, jnp.int32) if greedy
                else jax.random.randint(rng, (batch,), 0, sr.COMPOSITIONS_PER_RACE, jnp.int32))
        game = {**action.game, "composition": pick}
        return action._replace(game=game, heads=game), state


def test_greedy_reaches_the_agents_own_games_and_the_forced_armies():
    """`--greedy` plays the agent's most likely actions in both parts of the breakdown. With a
    stand-in that picks army 2 and fights when greedy, and picks at random and stands still
    when sampling: its own games pick army 2 in every game only with greedy (without it, in
    about a third); its forced-army games win some cells only with greedy (a player that stands
    still never wins, so no cell reads above 0.5)."""
    network, races, games = _FightsWhenGreedy(), ("zerg", "terran"), 30
    greedy = builtin_opponent.composition_breakdown(network, {}, races, games, seed=1, greedy=True)
    assert greedy["picks"].tolist() == [0.0, 0.0, 1.0]
    assert greedy["rates"].max() > 0.7, greedy["rates"]
    sampled = builtin_opponent.composition_breakdown(network, {}, races, games, seed=1)
    assert 0.1 < sampled["picks"][2] < 0.7 and sampled["picks"].min() > 0
    assert sampled["rates"].max() <= 0.5, sampled["rates"]
