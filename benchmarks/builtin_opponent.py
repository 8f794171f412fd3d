"""The main agents against the built-in opponent (jaxmarl's scripted SMAX heuristic), per matchup.

    python -m experiments.league --races=3 --minutes=10 --run_dir=runs/builtin   # train (any run)
    python -m benchmarks.builtin_opponent --run_dir=runs/builtin --games=256     # the table

For every race matchup (the main agent of race r against the heuristic playing race r'), the
win rate (draws count half) of (a) the main agent's final parameters (learner checkpoint,
written when the run stops) and (b) the same agent's initial parameters (its frozen copy
`<agent>#0`: the supervised start when the run had one), the baseline before any training,
over `--games` games each (`actors.scripted.play_against_heuristic`). The
heuristic picks its army uniformly from its race's menu; the agent picks with its own
composition head. Prints a markdown table and, last,
`RESULT builtin_opponent mean_win_rate=<x> ratio=<x/0.5> target=1.0`
(0.5: an even match with the built-in opponent, on average over the matchups).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np


def measure(run_dir: str, games: int, seed: int = 0) -> dict:
    """{(agent race, heuristic race): {"trained", "initial"}} win rates, plus run facts."""
    from actors import scripted
    from coordinator.history import LeagueHistory
    from coordinator.param_store import player_params
    from experiments.build import initial_params, make_game, make_network
    from experiments.config import RunConfig
    from experiments.program import agent_indices
    from league.players import initial_snapshot_id

    with open(os.path.join(run_dir, "config.json")) as f:
        config = RunConfig.from_dict(json.load(f))
    if config.game != "smax_races":
        raise SystemExit(f"{run_dir} is a {config.game} run; the built-in opponent is SMAX's heuristic")
    history = LeagueHistory(run_dir, readonly=True)
    players = history.players()
    mains = [p for p in players if p["role"] == "main_agent" and not p["parent"]]
    game = make_game(config, 1)
    network = make_network(config, game.spec)
    agent_index = agent_indices(config)  # the index that seeded each agent's initial params
    table = {}
    for main in mains:
        _, trained = player_params(run_dir, main["player_id"])
        # The run's start: the frozen copy of the initial parameters (the supervised start with
        # --init or the automatic start), else the random parameters the agent was seeded with.
        start = initial_snapshot_id(main["player_id"])
        if start in {p["player_id"] for p in players}:
            _, initial = player_params(run_dir, start)
        else:
            initial = initial_params(network, game.spec, agent_index[main["player_id"]], config.seed)
        for opponent_race in config.race_names:
            races = (main["race"], opponent_race)
            row = {}
            for name, params in (("trained", trained), ("initial", initial)):
                outcomes = scripted.play_against_heuristic(network, params, races, games, seed=seed)
                row[name] = scripted.win_rate(outcomes)
                row[f"{name}_outcomes"] = np.bincount(outcomes + 1, minlength=3).tolist()
            table[races] = row
            print(f"  {races[0]:>8} vs heuristic {races[1]:<8} trained {row['trained']:.3f} "
                  f"(loss/draw/win {row['trained_outcomes']})  initial {row['initial']:.3f}", flush=True)
    return {"table": table, "games": history.game_count(), "players": len(players), "config": config}


def format_table(result: dict, games: int) -> str:
    races = result["config"].race_names
    lines = ["| main agent \\ heuristic | " + " | ".join(races) + " |",
             "|---|" + "---|" * len(races)]
    for r in races:
        cells = []
        for o in races:
            row = result["table"].get((r, o))
            cells.append("n/a" if row is None else f"{row['trained']:.2f} (initial {row['initial']:.2f})")
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    lines.append(f"\n{games} games per cell; win rate of the main agent, draws half; league games "
                 f"played: {result['games']}, players: {result['players']}.")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run_dir", required=True, help="a SMAX races league run (stopped, so "
                        "that its learner checkpoints hold the final parameters)")
    parser.add_argument("--games", type=int, default=256, help="games per matchup")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.games < 1:
        parser.error("--games must be at least 1")
    if not os.path.exists(os.path.join(args.run_dir, "config.json")):
        parser.error(f"{args.run_dir} holds no config.json: pass the --run_dir of a league run")
    result = measure(args.run_dir, args.games, args.seed)
    print(format_table(result, args.games))
    rates = [row["trained"] for row in result["table"].values()]
    mean = float(np.mean(rates))
    print(f"RESULT builtin_opponent mean_win_rate={mean:.3f} ratio={mean / 0.5:.2f} target=1.0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
