"""AlphaStar's Fig. 3 ablations, reproduced in shape on SMAX races.

    python -m benchmarks.ablation --arm=pfsp_sp --seed=0 --minutes=2      # one arm, one seed
    python -m benchmarks.ablation --all --seeds=0,1,2 --minutes=2          # the driver (resumable)
    python -m benchmarks.ablation --report                                  # tables + docs/ablation.png
    python -m benchmarks.ablation --all --init=supervised.npz --root=runs/ablation_sup  # from a supervised start
    python -m benchmarks.ablation --all --arms=main_agents,main_exploiters,league_exploiters \
        --learner_steps=200000 --minutes=15 --heldout_from=runs/ablation --root=runs/ablation_steps
        # league composition with every agent given the same steps (not the same wall-clock)

Every arm trains a league through the real program (`experiments.launchers.run_inprocess`) on
SMAX races with one race (Terran mirror; the army composition is the strategic choice) for the
same wall-clock budget on this machine, then is evaluated; results land in
`<root>/ablation.db` (SQLite: `runs`, `evaluations`) and `--report` prints the tables.

Arms (AlphaStar, Fig. 3b-d, i):
- multi-agent learning, main agents only: `self_play`, `fsp`, `pfsp`, `pfsp_sp` (the main
  agent's matchmaker, `--main_agent_matchmaker`);
- league composition, AlphaStar's matchmakers: `main_agents` (no exploiters), `main_exploiters`
  (+ 1 main exploiter), `league_exploiters` (+ 2 league exploiters: the full league);
- off-policy learning, main agents with PFSP+SP: `vtrace` (policy and value from V-trace
  targets, no UPGO), `vtrace_td` (value from TD(lambda)), `vtrace_td_upgo` (+ UPGO: the
  program's default; the same configuration as `pfsp_sp`, so its runs are shared).

Test opponents (held out from every arm): jaxmarl's scripted heuristic (`actors.games.smax_races.scripted`) and
frozen players of an independent run (the full league with seed 1000, same budget, `heldout`).
Measured per arm and seed, on the main agent's final parameters:
- games against every test opponent -> Elo (one fit over every arm, seed and test opponent,
  `league.meta.elo_ratings`, heuristic anchored at 1000) and the average win rate;
- games against its own past snapshots -> the minimum win rate (forgetting, Fig. 3c);
- composition arms: the relative population performance (Balduzzi et al. 2019;
  `league.meta.relative_population_performance`) of the arm's population of players against
  the held-out run's population, reported as the Nash-vs-Nash win probability;
- the main agent's learner updates in its run (from its league.db): arms share the same
  wall-clock, so an arm with more learners gives its main agent fewer updates.
Tables: mean ± sample standard deviation over seeds; an ordering is reproduced when the means
differ in the paper's direction by more than one standard error (sqrt(s_a^2/n_a + s_b^2/n_b)).
Last line: `RESULT ablation ...` with the fraction of the paper's pairwise orderings reproduced.
"""

from __future__ import annotations

import argparse
import functools
import os
import sqlite3
import sys
import threading
import time

import numpy as np

NO_EXPLOITERS = dict(main_exploiters_per_race=0, league_exploiters_per_race=0)
ARMS = {
    "self_play": dict(main_agent_matchmaker="self_play", **NO_EXPLOITERS),
    "fsp": dict(main_agent_matchmaker="fsp", **NO_EXPLOITERS),
    "pfsp": dict(main_agent_matchmaker="pfsp", **NO_EXPLOITERS),
    "pfsp_sp": dict(main_agent_matchmaker="pfsp_sp", **NO_EXPLOITERS),
    "main_agents": dict(**NO_EXPLOITERS),
    "main_exploiters": dict(league_exploiters_per_race=0),
    "league_exploiters": {},
    "vtrace": {"main_agent_matchmaker": "pfsp_sp", "learner.loss.value_target": "vtrace",
               "learner.loss.upgo_weight": 0.0, **NO_EXPLOITERS},
    "vtrace_td": {"main_agent_matchmaker": "pfsp_sp", "learner.loss.upgo_weight": 0.0, **NO_EXPLOITERS},
    "heldout": {},  # the independent run whose frozen players are test opponents
}
SHARED = {"vtrace_td_upgo": "pfsp_sp"}  # identical configurations: one set of runs
GROUPS = {
    "multi-agent learning": ["self_play", "fsp", "pfsp", "pfsp_sp"],
    "league composition": ["main_agents", "main_exploiters", "league_exploiters"],
    "off-policy learning": ["vtrace", "vtrace_td", "vtrace_td_upgo"],
}
# AlphaStar Fig. 3 (reduced-scale runs), as quoted in the issue.
PAPER = {
    "elo": {"self_play": 1519, "fsp": 1143, "pfsp": 1273, "pfsp_sp": 1540,
            "main_agents": 1540, "main_exploiters": 1693, "league_exploiters": 1824},
    "min_win_rate": {"self_play": 0.46, "fsp": 0.69, "pfsp": 0.70, "pfsp_sp": 0.71},
    "rpp": {"main_agents": 0.06, "main_exploiters": 0.35, "league_exploiters": 0.62},
}
HELDOUT_SEED = 1000
RACES = ("terran", "terran")
# Every arm: one race, small networks' default sizes, snapshots often enough that a short run
# has a history to forget.
COMMON = dict(game="smax_races", races=1, runner="inprocess", dashboard_port=-1,
              main_agent_snapshot_steps=20_000, exploiter_min_steps=20_000,
              **{"league.snapshots.main_exploiter_timeout_steps": 40_000,
                 "league.snapshots.league_exploiter_timeout_steps": 20_000},
              progress_every_seconds=30.0,
              # AlphaStar's recipe, as Fig. 3 measures it: equal shares, no games against the
              # built-in AI it is measured on (SMAX's own defaults train on it: registry.py)
              **{"device.scripted_slots": 0, "device.main_agent_chunks": 1})
HEURISTIC = "heuristic"


def arm_config(arm: str, seed: int, minutes: float, run_dir: str, init: str = "", learner_steps: int = 0):
    """The arm's run config; with `init` (a supervised start file) every agent starts from its
    terran parameters and learns with the KL to them (AlphaStar's weight, 0.5). With
    `learner_steps` the run stops once every learner has learnt that many agent steps (`minutes`
    is then a cap): every agent gets the same budget, as if each had its own hardware."""
    from experiments.config import SUPERVISED_KL_WEIGHT, RunConfig

    settings = {**COMMON, **ARMS[arm], **({"init": init} if init else {})}
    if init:  # AlphaStar's KL weight (SMAX's own default, 0.1, goes with its heuristic slots)
        settings["learner.loss.kl_teacher_weight"] = SUPERVISED_KL_WEIGHT
    if learner_steps:  # the stop rule reads the learners' steps at every progress report
        settings.update(learner_steps=learner_steps, progress_every_seconds=5.0)
    return RunConfig.make(run_dir=run_dir, minutes=minutes, seed=seed, **settings)


# ---------------------------------------------------------------------------------------------
# Results database.

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (arm TEXT, seed INTEGER, run_dir TEXT, minutes REAL,  -- minutes trained
    games INTEGER, players INTEGER, main_agent TEXT, finished REAL,
    PRIMARY KEY (arm, seed));
CREATE TABLE IF NOT EXISTS evaluations (arm TEXT, seed INTEGER, kind TEXT, player TEXT,
    opponent TEXT, games INTEGER, wins INTEGER, draws INTEGER, losses INTEGER);
"""


def open_db(root: str) -> sqlite3.Connection:
    os.makedirs(root, exist_ok=True)
    db = sqlite3.connect(os.path.join(root, "ablation.db"))
    db.executescript(SCHEMA)
    return db


def done(db, arm: str, seed: int) -> bool:
    return db.execute("SELECT 1 FROM runs WHERE arm=? AND seed=?", (arm, seed)).fetchone() is not None


# ---------------------------------------------------------------------------------------------
# Training and evaluation of one arm.


def train(arm: str, seed: int, minutes: float, root: str, log, init: str = "", learner_steps: int = 0) -> str:
    from experiments import launchers
    from experiments.config import prepare_run_dir

    run_dir = os.path.join(root, f"{arm}-s{seed}")
    config = arm_config(arm, seed, minutes, run_dir, init, learner_steps)
    if prepare_run_dir(config):
        print(f"  {run_dir} exists: resuming it for another {minutes} min", flush=True)
    launchers.run_inprocess(config, stop_event=threading.Event(), out=log)
    return run_dir


class Players:
    """Parameters of players of several runs, by "<run_dir>|<player_id>" (the evaluator's
    params source)."""

    def __init__(self):
        self._cache = {}

    def latest_params(self, key: str, min_version=None):
        from coordinator.param_store import player_params

        if key not in self._cache:
            run_dir, _, player_id = key.partition("|")
            self._cache[key] = player_params(run_dir, player_id)
        return self._cache[key]


@functools.lru_cache(maxsize=4)
def game_and_network(games: int):
    """One batch game and network per process: `--all` evaluates every arm with the same
    compiled policy and game steps (their jit caches are keyed by these objects)."""
    from experiments.build import make_game, make_network
    from experiments.config import RunConfig

    config = RunConfig(races=1, runner="inprocess", run_dir="unused")
    game = make_game(config, games)
    return game, make_network(config, game.spec)


class Arena:
    """Plays players (or the heuristic) against each other in the Terran mirror."""

    def __init__(self, games: int, seed: int):
        from actors.evaluator import Evaluator, EvaluatorConfig

        self.games = games
        self.game, self.network = game_and_network(games)
        self.players = Players()
        self.evaluator = Evaluator(self.game, self.network, self.players,
                                   config=EvaluatorConfig(seed=seed))
        self.seed = seed

    def play(self, player: str, opponent: str) -> tuple[int, int, int]:
        """(wins, draws, losses) of `player` against `opponent` over `self.games` games."""
        if opponent == HEURISTIC:
            from actors.games.smax_races import scripted

            _, params = self.players.latest_params(player)
            outcomes = scripted.play_against_heuristic(self.network, params, RACES, self.games,
                                                       seed=self.seed)
        else:
            results = self.evaluator.evaluate(player, opponent, self.games, races=RACES)
            outcomes = np.array([{"win": 1, "draw": 0, "loss": -1}[r.outcome] for r in results])
        return int((outcomes > 0).sum()), int((outcomes == 0).sum()), int((outcomes < 0).sum())


def evenly(items: list, k: int) -> list:
    if len(items) <= k:
        return list(items)
    return [items[int(round(i))] for i in np.linspace(0, len(items) - 1, k)]


def population(run_dir: str, k: int) -> list[str]:
    """Up to k players of a run, evenly spread over its history, with its learning agents."""
    from coordinator.history import LeagueHistory

    players = LeagueHistory(run_dir, readonly=True).players()
    learning = [p["player_id"] for p in players if not p["parent"]]
    frozen = [p["player_id"] for p in players if p["parent"]]
    return learning + evenly(frozen, max(0, k - len(learning)))


def test_opponents(root: str) -> list[str]:
    heldout = os.path.join(root, f"heldout-s{HELDOUT_SEED}")
    return [HEURISTIC] + [f"{heldout}|{p}" for p in population(heldout, 5)]


def evaluate(db, arm: str, seed: int, run_dir: str, root: str, games: int, log=print) -> None:
    from coordinator.history import LeagueHistory

    history = LeagueHistory(run_dir, readonly=True)
    players = history.players()
    main_id = next(p["player_id"] for p in players if p["role"] == "main_agent" and not p["parent"])
    main = f"{run_dir}|{main_id}"
    match = Arena(games, seed)
    rows = []

    def record(kind, player, opponent):
        w, d, lo = match.play(player, opponent)
        rows.append((arm, seed, kind, player, opponent, w + d + lo, w, d, lo))
        log(f"    {kind:<10} {player.split('|')[-1]:<28} vs {opponent.split('/')[-1]:<40} "
            f"win {w:4d} draw {d:4d} loss {lo:4d}")

    for opponent in test_opponents(root):
        record("test", main, opponent)
    past = [p["player_id"] for p in players if p["parent"] == main_id]
    for snapshot in evenly(past, 6):
        record("past_self", main, f"{run_dir}|{snapshot}")
    if arm in GROUPS["league composition"]:
        heldout = os.path.join(root, f"heldout-s{HELDOUT_SEED}")
        mine = population(run_dir, 6)
        theirs = population(heldout, 6)
        for p in mine:
            for q in theirs:
                record("population", f"{run_dir}|{p}", f"{heldout}|{q}")
    db.executemany("INSERT INTO evaluations VALUES (?,?,?,?,?,?,?,?,?)", rows)
    db.execute("INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?)",
               (arm, seed, run_dir, None, history.game_count(), len(players), main_id, time.time()))
    db.commit()


def run_one(arm: str, seed: int, minutes: float, root: str, games: int, init: str = "",
            learner_steps: int = 0) -> None:
    db = open_db(root)
    if done(db, arm, seed):
        print(f"{arm} seed {seed}: already in {root}/ablation.db", flush=True)
        return
    started = time.time()
    budget = f"{learner_steps:,} agent steps per learner (at most {minutes} min)" if learner_steps else f"{minutes} min"
    print(f"{arm} seed {seed}: training {budget} ...", flush=True)
    with open(os.path.join(root, f"{arm}-s{seed}.log"), "a") as log:
        run_dir = train(arm, seed, minutes, root, log, init, learner_steps)
    trained = time.time() - started
    if arm == "heldout":
        from coordinator.history import LeagueHistory

        history = LeagueHistory(run_dir, readonly=True)
        db.execute("INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?)",
                   (arm, seed, run_dir, trained / 60, history.game_count(), len(history.players()),
                    None, time.time()))
        db.commit()
    else:
        print(f"{arm} seed {seed}: evaluating ...", flush=True)
        evaluate(db, arm, seed, run_dir, root, games)
        db.execute("UPDATE runs SET minutes=? WHERE arm=? AND seed=?", (trained / 60, arm, seed))
        db.commit()
    print(f"{arm} seed {seed}: done (train {trained:.0f} s, total {time.time() - started:.0f} s)", flush=True)


def link_heldout(source_root: str, root: str) -> str:
    """Use `source_root`'s finished held-out run in `root` (a symbolic link and its `runs` row),
    so several roots share one set of test opponents. Returns an error message, or "" (and
    writes nothing when it fails)."""
    missing = f"--heldout_from={source_root} has no finished held-out run; run the driver there first"
    if not os.path.isfile(os.path.join(source_root, "ablation.db")):
        return missing
    source = open_db(source_root)
    row = source.execute("SELECT * FROM runs WHERE arm='heldout' AND seed=?", (HELDOUT_SEED,)).fetchone()
    source.close()
    run_dir = os.path.join(source_root, f"heldout-s{HELDOUT_SEED}")
    if row is None or not os.path.isdir(run_dir):
        return missing
    link = os.path.join(root, f"heldout-s{HELDOUT_SEED}")
    if os.path.lexists(link) and os.path.realpath(link) != os.path.realpath(run_dir):
        return f"{link} already holds another held-out run; use a fresh --root"
    db = open_db(root)
    if not os.path.lexists(link):
        os.symlink(os.path.abspath(run_dir), link)
    db.execute("INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?)", (row[0], row[1], link, *row[3:]))
    db.commit()
    db.close()
    return ""


# ---------------------------------------------------------------------------------------------
# Report.


def load(root: str):
    db = open_db(root)
    runs = {(a, s): dict(run_dir=r, minutes=m, games=g, players=p, updates=main_agent_updates(r, main))
            for a, s, r, m, g, p, main, _ in db.execute("SELECT * FROM runs")}
    evaluations = db.execute("SELECT * FROM evaluations").fetchall()
    return runs, evaluations


def main_agent_updates(run_dir: str, main_id: str | None) -> float:
    """The learner updates the main agent made in its run (its last reported `version`); NaN
    when the run has no main agent (the held-out run) or its league.db is gone."""
    from coordinator.history import LeagueHistory

    path = os.path.join(run_dir or "", "league.db")
    if not main_id or not os.path.isfile(path):
        return float("nan")
    versions = [v for _, agent, name, v in LeagueHistory(run_dir, readonly=True).learner_metrics()
                if agent == main_id and name == "version"]
    return float(max(versions)) if versions else float("nan")


def rate(w, d, n):
    return (w + 0.5 * d) / n if n else float("nan")


def analyse(root: str) -> dict:
    """Per arm and seed: elo, test win rate, min win rate vs past selves, RPP."""
    from league import meta

    runs, evaluations = load(root)
    entities = sorted({f"{a}|{s}" for a, s, k, *_ in evaluations if k == "test"})
    opponents = sorted({o for a, s, k, p, o, *_ in evaluations if k == "test"})
    index = {e: i for i, e in enumerate(entities + opponents)}
    n = len(index)
    wins, draws = np.zeros((n, n)), np.zeros((n, n))
    per = {}
    for arm, seed, kind, player, opponent, games, w, d, lo in evaluations:
        entry = per.setdefault((arm, seed), {"test": [], "past_self": [], "population": {}})
        if kind == "test":
            i, j = index[f"{arm}|{seed}"], index[opponent]
            wins[i, j] += w
            wins[j, i] += lo
            draws[i, j] += d
            draws[j, i] += d
            entry["test"].append(rate(w, d, games))
        elif kind == "past_self":
            entry["past_self"].append(rate(w, d, games))
        else:
            entry["population"][(player, opponent)] = rate(w, d, games)
    elo = meta.elo_ratings(wins, draws) if n else np.zeros(0)
    if HEURISTIC in index:
        elo = elo - elo[index[HEURISTIC]] + 1000.0
    results = {}
    for (arm, seed), entry in per.items():
        out = {"elo": float(elo[index[f"{arm}|{seed}"]]) if f"{arm}|{seed}" in index else float("nan"),
               "test_win_rate": float(np.mean(entry["test"])) if entry["test"] else float("nan"),
               "min_win_rate": float(min(entry["past_self"])) if entry["past_self"] else float("nan"),
               "rpp": float("nan")}
        if entry["population"]:
            mine = sorted({p for p, _ in entry["population"]})
            theirs = sorted({q for _, q in entry["population"]})
            table = np.array([[entry["population"][(p, q)] for q in theirs] for p in mine])
            out["rpp"] = 0.5 + meta.relative_population_performance(table)
        out.update(runs.get((arm, seed), {}))
        results[(arm, seed)] = out
    for shared, arm in SHARED.items():
        for (a, seed), out in list(results.items()):
            if a == arm:
                results[(shared, seed)] = out
    results["_opponents"] = {o: float(elo[index[o]]) for o in opponents}
    return results


def arm_stats(results: dict, arm: str, metric: str) -> tuple[float, float, int]:
    values = [v[metric] for (a, _), v in ((k, v) for k, v in results.items() if k != "_opponents")
              if a == arm and np.isfinite(v.get(metric, np.nan))]
    if not values:
        return float("nan"), float("nan"), 0
    # the sample standard deviation (ddof=1): the standard error below is std / sqrt(n)
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, len(values)


def orderings(results: dict) -> tuple[int, int, list[str]]:
    """How many of the paper's pairwise orderings (within a group) our means reproduce. A pair
    counts as reproduced only if our difference is in the paper's direction and larger than its
    standard error over seeds; smaller differences are reported as unresolved."""
    matched, total, lines = 0, 0, []
    for metric, paper in PAPER.items():
        arms = list(paper)
        for group in GROUPS.values():
            in_group = [a for a in arms if a in group]
            for i, a in enumerate(in_group):
                for b in in_group[i + 1:]:
                    (ma, sa, na), (mb, sb, nb) = arm_stats(results, a, metric), arm_stats(results, b, metric)
                    if not (np.isfinite(ma) and np.isfinite(mb)) or paper[a] == paper[b]:
                        continue
                    total += 1
                    error = np.sqrt(sa ** 2 / na + sb ** 2 / nb)
                    if abs(ma - mb) <= max(error, 1e-9):
                        verdict = "unresolved (within one standard error)"
                    elif (paper[a] > paper[b]) == (ma > mb):
                        verdict, matched = "same", matched + 1
                    else:
                        verdict = "DIFFERENT"
                    lines.append(f"{metric}: paper {a} {'>' if paper[a] > paper[b] else '<'} {b}; "
                                 f"ours {ma:.3g} vs {mb:.3g} (se {error:.2g}) -> {verdict}")
    return matched, total, lines


def draw_fractions(root: str) -> dict[str, float]:
    """The fraction of evaluation games drawn, by kind (test, past_self, population)."""
    rows = open_db(root).execute("SELECT kind, SUM(draws), SUM(games) FROM evaluations GROUP BY kind "
                                 "HAVING SUM(games) > 0 ORDER BY kind")
    return {kind: draws / games for kind, draws, games in rows}


def report(root: str, png: str) -> int:
    results = analyse(root)
    print("Games drawn: " + ", ".join(f"{kind} {f:.1%}" for kind, f in draw_fractions(root).items()))
    # mean ± the sample standard deviation over seeds (the number of seeds)
    fmt = lambda m, s, k, p=0: "n/a" if k == 0 else f"{m:.{p}f} ± {s:.{p}f} ({k})"  # noqa: E731
    print("Test opponents' Elo: " + ", ".join(f"{o.split('/')[-1]} {e:.0f}" for o, e in results["_opponents"].items()))
    for group, arms in GROUPS.items():
        print(f"\n### {group}\n")
        print("| arm | Elo (paper) | Elo (ours) | win rate vs test opponents | min win rate vs past selves (paper) | min win rate (ours) | RPP vs held-out (paper) | RPP (ours) | main agent's updates | minutes trained |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for arm in arms:
            paper_elo = PAPER["elo"].get(arm, "")
            paper_min = PAPER["min_win_rate"].get(arm, "")
            paper_rpp = PAPER["rpp"].get(arm, "")
            print(f"| {arm} | {paper_elo} | {fmt(*arm_stats(results, arm, 'elo'))} | "
                  f"{fmt(*arm_stats(results, arm, 'test_win_rate'), 3)} | "
                  f"{'' if paper_min == '' else f'{paper_min:.0%}'} | {fmt(*arm_stats(results, arm, 'min_win_rate'), 3)} | "
                  f"{'' if paper_rpp == '' else f'{paper_rpp:.0%}'} | {fmt(*arm_stats(results, arm, 'rpp'), 3)} | "
                  f"{fmt(*arm_stats(results, arm, 'updates'))} | {fmt(*arm_stats(results, arm, 'minutes'), 1)} |")
    matched, total, lines = orderings(results)
    print("\nOrderings (the paper's pairwise order within a group, on the mean over seeds):")
    for line in lines:
        print("  " + line)
    plot(results, png)
    print(f"curve: {png}")
    print(f"RESULT ablation orderings_matched={matched}/{total} ratio={matched / max(total, 1):.2f} target=1.0")
    return 0


def plot(results: dict, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("multi-agent learning", "elo", "Elo vs held-out opponents"),
              ("multi-agent learning", "min_win_rate", "min win rate vs past selves"),
              ("league composition", "elo", "Elo vs held-out opponents"),
              ("league composition", "rpp", "RPP vs held-out population"),
              ("off-policy learning", "test_win_rate", "win rate vs test opponents")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for ax, (group, metric, title) in zip(axes, panels):
        arms = GROUPS[group]
        stats = [arm_stats(results, a, metric) for a in arms]
        ax.bar(range(len(arms)), [m for m, _, _ in stats], yerr=[s for _, s, _ in stats],
               color="tab:blue", alpha=0.8, capsize=3)
        seeds = [[v[metric] for (a, _), v in ((k, v) for k, v in results.items() if k != "_opponents") if a == arm]
                 for arm in arms]
        for i, values in enumerate(seeds):
            ax.plot([i] * len(values), values, "k.", ms=4)
        ax.set_xticks(range(len(arms)))
        ax.set_xticklabels(arms, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{group}:\n{title}", fontsize=9)
        if metric == "elo":
            ax.set_ylim(min(900, np.nanmin([m for m, _, _ in stats] + [1000]) - 50), None)
    fig.tight_layout()
    os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arm", choices=sorted(ARMS) + sorted(SHARED), help="run one arm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--all", action="store_true", help="run every arm for every --seeds (skips finished ones)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--minutes", type=float, default=2.0, help="training wall-clock budget per arm "
                        "(with --learner_steps: its cap)")
    parser.add_argument("--learner_steps", type=int, default=0,
                        help="train each arm until every learner has learnt this many agent steps instead "
                        "of for equal wall-clock: every agent the same budget, as if on its own hardware "
                        "(AlphaStar's setting), so arms with exploiters take longer")
    parser.add_argument("--arms", default="", help="with --all: only these arms (comma-separated)")
    parser.add_argument("--heldout_from", default="",
                        help="a root whose held-out run to use (linked, not retrained) as test opponents")
    parser.add_argument("--games", type=int, default=64, help="evaluation games per pair")
    parser.add_argument("--root", default="runs/ablation")
    parser.add_argument("--report", action="store_true", help="print the tables from <root>/ablation.db")
    parser.add_argument("--png", default="docs/ablation.png")
    parser.add_argument("--init", default="", help="a supervised start file (experiments.supervised, "
                        "or the automatic start's supervised.npz): every arm starts from its terran "
                        "parameters with the KL to them (AlphaStar's recipe); default: random parameters")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.games < 1 or args.learner_steps < 0:
        parser.error("--minutes must be > 0, --games >= 1 and --learner_steps >= 0")
    arms = [SHARED.get(a.strip(), a.strip()) for a in args.arms.split(",") if a.strip()] or \
        [a for a in ARMS if a != "heldout"]
    unknown = [a for a in arms if a not in ARMS or a == "heldout"]
    if unknown:
        allowed = [a for a in ARMS if a != "heldout"] + list(SHARED)
        parser.error(f"unknown --arms {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    if args.init and not os.path.isfile(args.init):
        parser.error(f"--init={args.init} is not a file; pass a supervised start (.npz)")
    if args.heldout_from:
        error = link_heldout(args.heldout_from, args.root)
        if error:
            parser.error(error)
    run = functools.partial(run_one, minutes=args.minutes, root=args.root, games=args.games, init=args.init,
                            learner_steps=args.learner_steps)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.arm:
        arm = SHARED.get(args.arm, args.arm)
        if arm != "heldout" and not done(open_db(args.root), "heldout", HELDOUT_SEED):
            run("heldout", HELDOUT_SEED)
        run(arm, args.seed if arm != "heldout" else HELDOUT_SEED)
    if args.all:
        run("heldout", HELDOUT_SEED)
        for seed in seeds:  # seed-major: every arm has some seeds early
            for arm in arms:
                run(arm, seed)
    if args.report or args.all or args.arm:
        return report(args.root, args.png)
    parser.error("pass --arm, --all or --report")
    return 2


if __name__ == "__main__":
    sys.exit(main())
