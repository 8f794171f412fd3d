"""The ablation benchmark's report, on a hand-made results database (no training)."""

import numpy as np
import pytest

from benchmarks import ablation


def write(root, rows):
    db = ablation.open_db(str(root))
    db.executemany("INSERT INTO evaluations VALUES (?,?,?,?,?,?,?,?,?)", rows)
    db.commit()


def test_win_rates_forgetting_population_and_elo_by_hand(tmp_path):
    H = ablation.HEURISTIC
    rows = [
        # arm, seed, kind, player, opponent, games, wins, draws, losses
        ("self_play", 0, "test", "a|m", H, 10, 6, 2, 2),          # 0.7
        ("self_play", 0, "test", "a|m", "h|x", 10, 2, 0, 8),      # 0.2
        ("self_play", 0, "past_self", "a|m", "a|m#0", 10, 9, 0, 1),
        ("self_play", 0, "past_self", "a|m", "a|m#1", 10, 3, 2, 5),  # the minimum: 0.4
        ("fsp", 0, "test", "b|m", H, 10, 1, 0, 9),
        ("fsp", 0, "test", "b|m", "h|x", 10, 1, 0, 9),
        ("main_agents", 0, "test", "c|m", H, 10, 5, 0, 5),
        # population 2 x 2 with a dominant row: the value is that row's worst column
        ("main_agents", 0, "population", "c|p", "h|q", 10, 8, 0, 2),
        ("main_agents", 0, "population", "c|p", "h|r", 10, 7, 0, 3),
        ("main_agents", 0, "population", "c|s", "h|q", 10, 1, 0, 9),
        ("main_agents", 0, "population", "c|s", "h|r", 10, 2, 0, 8),
    ]
    write(tmp_path, rows)
    results = ablation.analyse(str(tmp_path))
    sp = results[("self_play", 0)]
    assert sp["test_win_rate"] == pytest.approx((0.7 + 0.2) / 2)
    assert sp["min_win_rate"] == pytest.approx(0.4)
    # the population's Nash-vs-Nash win probability: row p dominates, column r is p's worst
    assert results[("main_agents", 0)]["rpp"] == pytest.approx(0.7, abs=1e-6)
    # Elo: the heuristic is anchored at 1000; self-play beat it, FSP lost to it
    assert results["_opponents"][H] == pytest.approx(1000.0)
    assert sp["elo"] > 1000 > results[("fsp", 0)]["elo"]
    # the off-policy "vtrace_td_upgo" arm shares the pfsp_sp runs: none here
    assert ("vtrace_td_upgo", 0) not in results
    # draws by kind: test 2 of 50 games, past selves 2 of 20, population 0 of 40
    assert ablation.draw_fractions(str(tmp_path)) == pytest.approx(
        {"past_self": 0.1, "population": 0.0, "test": 2 / 50})


def test_orderings_count_only_differences_beyond_the_noise(tmp_path):
    def results(elos):
        return {**{(arm, s): {"elo": e, "min_win_rate": np.nan, "rpp": np.nan, "test_win_rate": np.nan}
                   for arm, values in elos.items() for s, e in enumerate(values)}, "_opponents": {}}

    # paper: self_play (1519) > fsp (1143); ours clearly the same way
    matched, total, lines = ablation.orderings(results({"self_play": [1100, 1110, 1090], "fsp": [900, 910, 890]}))
    assert (matched, total) == (1, 1) and "same" in lines[0]
    # ours clearly the other way
    matched, total, lines = ablation.orderings(results({"self_play": [900, 910, 890], "fsp": [1100, 1110, 1090]}))
    assert (matched, total) == (0, 1) and "DIFFERENT" in lines[0]
    # a difference inside the seeds' noise is not counted as reproduced
    matched, total, lines = ablation.orderings(results({"self_play": [1000, 1200, 800], "fsp": [990, 1190, 790]}))
    assert (matched, total) == (0, 1) and "unresolved" in lines[0]
    # the standard error uses the sample standard deviation (ddof=1), worked by hand: two seeds
    # each 20 apart have s = sqrt(200) = 14.14, so se = sqrt(200/2 + 200/2) = 14.14 > 12, the
    # difference of the means (the population deviation, 10, would give se 10 < 12: "same")
    matched, total, lines = ablation.orderings(results({"self_play": [1000, 1020], "fsp": [988, 1008]}))
    assert (matched, total) == (0, 1) and "unresolved" in lines[0] and "se 14" in lines[0]
    matched, total, lines = ablation.orderings(results({"self_play": [1000, 1020], "fsp": [984, 1004]}))
    assert (matched, total) == (1, 1) and "same" in lines[0]


def test_the_main_agents_learner_updates_come_from_its_runs_league_db(tmp_path):
    """The report's "main agent's updates": the last `version` its learner reported in the run's
    league.db, other agents' ignored; NaN when the run has no main agent (the held-out run)."""
    from coordinator.history import LeagueHistory

    run_dir = tmp_path / "pfsp-s0"
    run_dir.mkdir()
    history = LeagueHistory(str(run_dir / "league.db"))
    history.add_learner_metrics("terran_main_agent_0", {"version": 40.0, "steps": 9600.0}, when=1.0)
    history.add_learner_metrics("terran_main_agent_0", {"version": 96.0, "steps": 23040.0}, when=2.0)
    history.add_learner_metrics("terran_main_exploiter_0", {"version": 500.0}, when=2.0)
    history.close()
    db = ablation.open_db(str(tmp_path))
    db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?)",
               ("pfsp", 0, str(run_dir), 2.0, 100, 3, "terran_main_agent_0", 0.0))
    db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?)",
               ("heldout", 1000, str(run_dir), 2.0, 100, 3, None, 0.0))
    db.execute("INSERT INTO evaluations VALUES (?,?,?,?,?,?,?,?,?)",
               ("pfsp", 0, "test", f"{run_dir}|terran_main_agent_0", ablation.HEURISTIC, 10, 5, 0, 5))
    db.commit()
    runs, _ = ablation.load(str(tmp_path))
    assert runs[("pfsp", 0)]["updates"] == 96.0
    assert np.isnan(runs[("heldout", 1000)]["updates"])
    assert ablation.arm_stats(ablation.analyse(str(tmp_path)), "pfsp", "updates") == (96.0, 0.0, 1)


def test_arms_start_from_a_supervised_start_with_its_kl_when_given():
    """--init: every arm (and the held-out run) starts from the supervised file and learns with
    the KL to it; without it, random parameters and no KL."""
    config = ablation.arm_config("pfsp", 0, 1.0, "unused", init="supervised.npz")
    assert config.init == "supervised.npz" and config.teacher_source == "init"
    assert config.learner.loss.kl_teacher_weight == 0.5
    assert config.league.main_agent_matchmaker == "pfsp"
    # Fig. 3's recipe, not SMAX's defaults: no games against the built-in AI, equal shares
    assert config.device.scripted_slots == 0 and config.device.main_agent_chunks == 1
    plain = ablation.arm_config("pfsp", 0, 1.0, "unused")
    assert plain.init_file is None and plain.learner.loss.kl_teacher_weight == 0.0


def test_equal_steps_budget_and_a_shared_held_out_run(tmp_path, capsys):
    """--learner_steps: every learner of an arm gets the same agent steps (the run's stop rule);
    --heldout_from links another root's finished held-out run instead of training one; bad
    values exit 2 naming the fix."""
    config = ablation.arm_config("league_exploiters", 0, 15.0, "unused", learner_steps=200_000)
    assert config.learner_steps == 200_000 and config.minutes == 15.0
    assert config.progress_every_seconds == 5.0  # the stop rule's resolution (30 s would overshoot)
    assert ablation.arm_config("pfsp", 0, 2.0, "unused").learner_steps == 0

    source, root = tmp_path / "wallclock", tmp_path / "steps"
    assert "no finished held-out run" in ablation.link_heldout(str(source), str(root))
    assert not source.exists() and not root.exists()  # a failed link writes nothing
    (source / f"heldout-s{ablation.HELDOUT_SEED}").mkdir(parents=True)
    db = ablation.open_db(str(source))
    db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?)",
               ("heldout", ablation.HELDOUT_SEED, "old", 2.2, 5972, 8, None, 0.0))
    db.commit()
    assert ablation.link_heldout(str(source), str(root)) == ""
    link = root / f"heldout-s{ablation.HELDOUT_SEED}"
    assert link.is_symlink() and link.resolve() == (source / f"heldout-s{ablation.HELDOUT_SEED}").resolve()
    assert ablation.done(ablation.open_db(str(root)), "heldout", ablation.HELDOUT_SEED)
    assert ablation.link_heldout(str(source), str(root)) == ""  # again: the same link, no error
    runs, _ = ablation.load(str(root))
    assert runs[("heldout", ablation.HELDOUT_SEED)]["games"] == 5972

    for argv, message in ((["--all", "--arms=main_agents,nope"], "unknown --arms nope"),
                          (["--all", "--arms=heldout"], "unknown --arms heldout"),
                          (["--all", "--learner_steps=-1"], "--learner_steps >= 0"),
                          (["--all", f"--heldout_from={tmp_path / 'none'}", f"--root={tmp_path / 'x'}"],
                           "no finished held-out run"),
                          (["--all", f"--heldout_from={source}", f"--root={tmp_path / 'y'}",
                            f"--init={tmp_path / 'no.npz'}"], "is not a file")):
        with pytest.raises(SystemExit) as exit_:
            ablation.main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "none").exists() and not (tmp_path / "y").exists()  # bad input writes nothing
    # the off-policy arm that shares pfsp_sp's runs is accepted by its own name
    with pytest.raises(SystemExit):
        ablation.main(["--all", "--arms=vtrace_td_upgo", f"--init={tmp_path / 'no.npz'}"])
    err = capsys.readouterr().err
    assert "unknown --arms" not in err and "is not a file" in err  # past the arms' check
