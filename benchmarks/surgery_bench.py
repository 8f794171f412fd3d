"""A SMAX league widened mid-run by surgery: does it keep its skill and go on learning?

    python -m benchmarks.surgery_bench --minutes=4 --hidden_size=128 --core_size=128

1. Runs a 1-race SMAX league (`experiments.league --runner=inprocess`) for `--minutes` at the
   default sizes (64, 64).
2. Measures the main agent: its win rate against jaxmarl's scripted heuristic (draws half,
   `--games` games, fixed seed) and its score in league games over the phase's last third.
3. `experiments.surgery` widens every player (the change of any action probability and value
   on recorded games is printed), then the same heuristic games are played by the widened
   main agent: with an exact surgery they are the same games.
4. Resumes the league at the new sizes for `--minutes` and measures again (league games over
   the phase's first third, the heuristic after training on).

Last line: `RESULT surgery max_prob_change=<x> max_value_change=<x> heuristic_before=<x>
heuristic_widened=<x> heuristic_after=<x> league_before=<x> league_after=<x>
updates_per_s_before=<x> updates_per_s_after=<x> ratio=<heuristic_widened/heuristic_before>
target=1.0`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

SCORE = {"win": 1.0, "draw": 0.5, "loss": 0.0}


def league(run_dir: str, minutes: float, sizes: dict[str, int]) -> tuple[float, float, float]:
    """Runs (or resumes) the league; returns (start time, end time, mean learner updates/s of
    its progress lines after the first minute)."""
    args = [sys.executable, "-m", "experiments.league", "--races=1", "--runner=inprocess",
            "--init=none", f"--minutes={minutes}", "--dashboard_port=-1", f"--run_dir={run_dir}",
            *(f"--{k}={v}" for k, v in sizes.items())]
    print(" ".join(args[2:]), flush=True)
    start = time.time()
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the league failed:\n{out.stderr[-3000:]}")
    rates = [float(m.group(2)) for m in re.finditer(r"\[\s*([\d.]+) min\].*learner updates ([\d.]+)/s",
                                                    out.stdout) if float(m.group(1)) >= 1.0]
    return start, time.time(), float(np.mean(rates)) if rates else float("nan")


def league_score(run_dir: str, agent: str, since: float, until: float) -> tuple[float, str]:
    """The agent's mean score (win 1, draw 1/2) in the games recorded in [since, until], and
    its losses/draws/wins there."""
    from coordinator.history import LeagueHistory

    scores = []
    for g in LeagueHistory(run_dir, readonly=True).result_rows():
        if since <= g["time"] <= until and agent in (g["home"], g["away"]) and g["home"] != g["away"]:
            home = [SCORE["win"]] * g["wins"] + [SCORE["draw"]] * g["draws"] + [SCORE["loss"]] * g["losses"]
            scores.extend(home if g["home"] == agent else [1.0 - s for s in home])
    counts = np.bincount((np.asarray(scores) * 2).astype(int), minlength=3) if scores else [0, 0, 0]
    return (float(np.mean(scores)) if scores else float("nan")), "/".join(str(int(c)) for c in counts)


def heuristic(run_dir: str, agent: str, games: int) -> tuple[float, str]:
    """The agent's win rate (draws half) against the scripted heuristic, same race and seed,
    and its losses/draws/wins."""
    from actors.games.smax_races import scripted
    from coordinator.param_store import player_params
    from experiments.build import make_game, make_network
    from experiments.config import RunConfig

    with open(os.path.join(run_dir, "config.json")) as f:
        config = RunConfig.from_dict(json.load(f))
    network = make_network(config, make_game(config, 1).spec)
    _, params = player_params(run_dir, agent)
    race = config.race_names[0]
    outcomes = scripted.play_against_heuristic(network, params, (race, race), games, seed=0)
    counts = "/".join(str(int(c)) for c in np.bincount(np.asarray(outcomes) + 1, minlength=3))
    return scripted.win_rate(outcomes), counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--hidden_size", type=int, default=128)
    parser.add_argument("--core_size", type=int, default=128)
    parser.add_argument("--games", type=int, default=64)
    parser.add_argument("--run_dir", default=None)
    args = parser.parse_args(argv)
    from experiments import surgery

    run_dir = args.run_dir or os.path.join(tempfile.mkdtemp(prefix="surgery_bench_"), "run")
    agent = "terran_main_agent_0"
    t0, t1, rate_before = league(run_dir, args.minutes, {})
    league_before, n_before = league_score(run_dir, agent, t1 - (t1 - t0) / 3, t1)
    heuristic_before, h_before = heuristic(run_dir, agent, args.games)
    report = surgery.operate(run_dir, {"hidden_size": args.hidden_size, "core_size": args.core_size})
    heuristic_widened, h_widened = heuristic(run_dir, agent, args.games)
    sizes = {"hidden_size": args.hidden_size, "core_size": args.core_size}
    t2, t3, rate_after = league(run_dir, args.minutes, sizes)
    league_after, n_after = league_score(run_dir, agent, t2, t2 + (t3 - t2) / 3)
    heuristic_after, h_after = heuristic(run_dir, agent, args.games)
    print(f"main agent vs the scripted heuristic ({args.games} games; losses/draws/wins): before "
          f"{heuristic_before:.3f} ({h_before}), widened {heuristic_widened:.3f} ({h_widened}), after "
          f"{args.minutes} more minutes {heuristic_after:.3f} ({h_after})")
    print(f"main agent's score in league games (losses/draws/wins): last third before {league_before:.3f} "
          f"({n_before}), first third after {league_after:.3f} ({n_after})")
    print(f"learner updates/s: before {rate_before:.2f}, after (wider) {rate_after:.2f}")
    print(f"surgery: {dataclasses.asdict(report)}")
    ratio = heuristic_widened / heuristic_before if heuristic_before else float("nan")
    print(f"RESULT surgery max_prob_change={report.max_prob:.3g} max_value_change={report.max_value:.3g} "
          f"heuristic_before={heuristic_before:.3f} heuristic_widened={heuristic_widened:.3f} "
          f"heuristic_after={heuristic_after:.3f} league_before={league_before:.3f} "
          f"league_after={league_after:.3f} updates_per_s_before={rate_before:.2f} "
          f"updates_per_s_after={rate_after:.2f} ratio={ratio:.3f} target=1.0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
