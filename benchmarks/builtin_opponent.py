"""The main agents against the built-in opponent (jaxmarl's scripted SMAX heuristic), per matchup.

    python -m experiments.league --races=3 --minutes=10 --run_dir=runs/builtin   # train (any run)
    python -m benchmarks.builtin_opponent --run_dir=runs/builtin --games=256     # the table

For every race matchup (the main agent of race r against the heuristic playing race r'), the
win rate (draws count half) of (a) the main agent's final parameters (learner checkpoint,
written when the run stops) and (b) the same agent's initial parameters (its frozen copy
`<agent>#0`: the supervised start when the run had one), the baseline before any training,
over `--games` games each (`actors.games.smax_races.scripted.play_detailed`). The agent picks
its army with its own composition head. The heuristic picks uniformly from its race's menu, and
the benchmark measures that pick by stratifying it: game i gets the heuristic's army i mod K,
and the win rate is the mean over its K armies of the win rate against each (`stratified_win_rate`),
the expectation against the uniform pick without the error of drawing the armies. Drawn at
random, seed 0 gave the heuristic's zerglings 28 of 64 games against terran (21.3 expected),
so every run read terran vs zerg at 0.56-0.58 where marauders that lose only to zerglings
reach 0.67. Each trained cell shows its standard error (`stratified_standard_error`; at 64 games
about 0.04 where the agent wins half its games against one army and all against the others).
Prints a markdown table and, last,
`RESULT builtin_opponent mean_win_rate=<x> matchups_at_080=<n> clear_of_080=<n> lowest=<x>
actions=sampled|greedy params=final|mean_of_final_and_<M>_newest ratio=<x/0.5> target=1.0`
(`clear_of_080`: the matchups at least one
standard error above 0.80; 0.5: an even match with the built-in opponent, on average over the
matchups).

`--by_composition` says what limits a matchup: the agent's army picks, its win rate with each
of its race's armies against each of the heuristic's (both forced, `--games` games per pair),
and the best single army against the heuristic's uniform pick, the ceiling of any pick with
the agent's micro (`composition_breakdown`; `--by_composition=initial`: of the initial
parameters). A matchup below 0.80 whose ceiling is above it is
held back by the pick; one whose ceiling is below it, by the micro.

`--pick_history[=N]` says how each main agent's pick moved during the run: its probability of
each army (`scripted.pick_probabilities`, the composition head against each enemy race) at N
of its frozen snapshots spread over the run (default 8) and at its final parameters.
`--win_history[=N]` says how its win rate against the heuristic moved: the stratified win rate
per matchup (`--games` games, the same games each time) at N snapshots and at the final
parameters, so a reader sees whether a matchup still climbs at the end or has levelled off.

`--average_newest=M` reads each main agent as the uniform average of its final parameters and
its M newest snapshots' (`experiments.agent_ref.averaged_params`, Polyak averaging of the
iterates: the function that reads a run's agent, RUN_DIR:result:RACE) in every table, the
final parameters alone in brackets, and adds that average as the last row of `--win_history`.
A main agent's parameters jitter from update to update (consecutive snapshots read up to 0.19
apart in one cell), and the average of its last minutes is the steadier agent to take from a
run.

`--agent=NAME` (repeatable; in place of `--run_dir`) measures named agents instead, each in its
own race against every heuristic race of its league (`--heuristic_races` to choose): any name of
`experiments.agent_ref`, an exported file included (`python -m experiments.export
RUN_DIR:result:terran --out=F`, then `--agent=F`), so a file and the run it came from read the
same figure on the same games. `RUN_DIR:result:RACE` is the run's agent, the same average of the
final parameters and the newest snapshots as `--average_newest=30` (`agent_ref.result_params`).

    python -m benchmarks.builtin_opponent --agent=runs/smax:result:terran --agent=terran.agent.npz

The agent samples its army, action types and targets from its policy, as in the league's games.
`--greedy` makes it take the most likely of each instead (`agents.act`'s `greedy`; the
evaluator's `--evaluator.heuristic_greedy`): against a fixed opponent such as the heuristic the best
response is a pure one, so acting greedily reads what the agent knows without its exploration.
The table's footer and the RESULT line say which was played.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from experiments.agent_ref import averaged_params, frozen_snapshots


def _run(run_dir: str):
    """(RunConfig, LeagueHistory read-only) of a SMAX races run; exits naming another game."""
    from coordinator.history import LeagueHistory
    from experiments.config import RunConfig

    with open(os.path.join(run_dir, "config.json")) as f:
        config = RunConfig.from_dict(json.load(f))
    if config.game != "smax_races":
        raise SystemExit(f"{run_dir} is a {config.game} run; the built-in opponent is SMAX's heuristic")
    return config, LeagueHistory(run_dir, readonly=True)


def measure(run_dir: str, games: int, seed: int = 0, by_composition: str | None = None,
            greedy: bool = False, average_newest: int = 0) -> dict:
    """{(agent race, heuristic race): {"trained", "initial"}} win rates, plus run facts; with
    `by_composition` ("trained" or "initial") each row also holds the `composition_breakdown`
    of those parameters; `greedy`: the agent takes its most likely army, action and target
    instead of sampling them; `average_newest` N > 0: "trained" is the average of each main
    agent's final parameters and its N newest snapshots' (`averaged_params`), and the row also
    holds "final", the final parameters alone."""
    from actors.games.smax_races import COMPOSITIONS_PER_RACE as K
    from actors.games.smax_races import scripted
    from coordinator.param_store import player_params
    from experiments.build import initial_params, make_game, make_network
    from experiments.program import agent_indices
    from league.players import initial_snapshot_id

    config, history = _run(run_dir)
    players = history.players()
    mains = [p for p in players if p["role"] == "main_agent" and not p["parent"]]
    game = make_game(config, 1)
    network = shared_network(make_network(config, game.spec))
    agent_index = agent_indices(config)  # the index that seeded each agent's initial params
    heuristic_armies = balanced_armies(games)
    table = {}
    start_time, spans = min(p["wall_time"] for p in players), {}
    for main in mains:
        _, final = player_params(run_dir, main["player_id"])
        trained = final
        if average_newest:
            window = frozen_snapshots(players, main["player_id"])[-average_newest:]
            trained = averaged_params(run_dir, window, final)
            if window:  # the minutes into the run its newest snapshots span
                spans[main["race"]] = [(p["wall_time"] - start_time) / 60 for p in (window[0], window[-1])]
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
            versions = {"trained": trained, "initial": initial, **({"final": final} if average_newest else {})}
            played = {}
            for name, params in versions.items():
                played[name] = scripted.play_detailed(network, params, races, games, seed=seed, greedy=greedy,
                                                      compositions=(None, heuristic_armies))
                outcomes = played[name].outcomes
                row[name] = stratified_win_rate(outcomes, heuristic_armies)
                row[f"{name}_se"] = stratified_standard_error(outcomes, heuristic_armies)
                row[f"{name}_outcomes"] = np.bincount(outcomes + 1, minlength=3).tolist()
                row[f"{name}_armies"] = played[name].compositions[:, 0].tolist()   # the agent's pick, game by game
                # [army][loss, draw, win] by the heuristic's army its games spawned
                spawned = played[name].compositions[:, 1]
                row[f"{name}_by_army"] = [np.bincount(outcomes[spawned == h] + 1, minlength=3).tolist()
                                          for h in range(K)]
            if by_composition:  # its own picks: the games just played
                row["by_composition"] = composition_breakdown(
                    network, versions[by_composition], races, games, seed, played[by_composition], greedy)
            table[races] = row
            print(f"  {races[0]:>8} vs heuristic {races[1]:<8} trained {row['trained']:.3f} "
                  f"(loss/draw/win {row['trained_outcomes']})  initial {row['initial']:.3f}", flush=True)
    return {"table": table, "games": history.game_count(), "players": len(players), "config": config,
            "greedy": greedy, "average_newest": average_newest, "average_spans": spans}


_NETWORKS: dict = {}


def shared_network(network):
    """One network object for every network of one description (`agents.network_key`): the
    games' program is compiled once per network object (`scripted.play_detailed`), so a run's
    agent and its exported file, or a run's agents and their snapshots, share one compilation."""
    from agents import network_key

    return _NETWORKS.setdefault(network_key(network), network)


def params_label(agent) -> str:
    """How a named agent's parameters were read: the RESULT line's `params=`."""
    source = agent.source or {}
    reading = source.get("reading", "")
    if source.get("averaged"):
        return f"mean_of_final_and_{len(source['averaged'])}_newest"
    if reading.startswith("final") or not source.get("parent"):
        return "final"
    return "snapshot"


def named_agents(names: list[str]) -> list:
    """The `experiments.agent_ref.Agent`s of `names`, each a SMAX agent of one race; SystemExit
    (exit 2 from `main`) naming the problem otherwise."""
    from actors.games.smax_races import RACES
    from experiments.agent_ref import AgentNameError, describe_forms, resolve

    out = []
    for name in names:
        try:
            agent = resolve(name)
        except AgentNameError as e:
            raise SystemExit(f"error: {e}") from None
        if agent.game != "smax_races":
            raise SystemExit(f"error: {name} is an agent of {agent.game}; the built-in opponent is SMAX's heuristic "
                             f"(name a SMAX agent as {describe_forms()})")
        if agent.weights:
            raise SystemExit(f"error: {name} is a mixture of agents; name one agent")
        race = (agent.source or {}).get("race")
        if race not in RACES:
            raise SystemExit(f"error: {name} does not say which race it plays (its source's race is {race!r}); "
                             f"name a race's player or RUN_DIR:result:RACE ({', '.join(RACES)})")
        out.append(agent)
    return out


def measure_agents(names: list[str], games: int, seed: int = 0, greedy: bool = False,
                   heuristic_races: list[str] | None = None) -> dict:
    """{"table": {(label, agent race, heuristic race): row}, "agents": [Agent]} of named agents
    (`named_agents`): each plays its own race against the heuristic of each race of
    `heuristic_races` (None: the races of the league it came from, `source.league_races`, else
    every race), `games` games a matchup, stratified as `measure` plays its table (the same
    games for the same `seed`); each row "trained", "trained_se", "trained_outcomes",
    "trained_armies", "trained_by_army" as `measure`'s."""
    from actors.games.smax_races import COMPOSITIONS_PER_RACE as K
    from actors.games.smax_races import RACES, scripted

    agents = named_agents(names)
    armies = balanced_armies(games)
    table = {}
    for agent in agents:
        race = agent.source["race"]
        opponents = heuristic_races or agent.source.get("league_races") or list(RACES)
        network = shared_network(agent.network)
        for opponent in opponents:
            played = scripted.play_detailed(network, agent.params, (race, opponent), games, seed=seed, greedy=greedy,
                                            compositions=(None, armies))
            outcomes = played.outcomes
            spawned = played.compositions[:, 1]
            row = {"trained": stratified_win_rate(outcomes, armies),
                   "trained_se": stratified_standard_error(outcomes, armies),
                   "trained_outcomes": np.bincount(outcomes + 1, minlength=3).tolist(),
                   "trained_armies": played.compositions[:, 0].tolist(),
                   "trained_by_army": [np.bincount(outcomes[spawned == h] + 1, minlength=3).tolist() for h in range(K)]}
            table[(agent.name, race, opponent)] = row
            print(f"  {agent.name} ({race}) vs heuristic {opponent:<8} {row['trained']:.3f} "
                  f"(loss/draw/win {row['trained_outcomes']})", flush=True)
    return {"table": table, "agents": agents, "greedy": greedy}


def format_agents_table(result: dict, games: int) -> str:
    """The named agents' table: a row per agent, a column per heuristic race it met."""
    races = list(dict.fromkeys(o for _, _, o in result["table"]))
    lines = ["| agent (its race) \\ heuristic | " + " | ".join(races) + " |", "|---|" + "---|" * len(races)]
    for agent in result["agents"]:
        race = agent.source["race"]
        cells = []
        for o in races:
            row = result["table"].get((agent.name, race, o))
            cells.append("n/a" if row is None else f"{row['trained']:.2f} ± {row['trained_se']:.2f}")
        lines.append(f"| {agent.name} ({race}) | " + " | ".join(cells) + " |")
    actions = "its most likely actions (--greedy)" if result["greedy"] else "actions sampled from its policy"
    lines.append("")
    for agent in result["agents"]:
        source = agent.source or {}
        what = source.get("reading") or f"{source.get('player_id', '?')} version {source.get('version', '?')}"
        lines.append(f"- {agent.name}: {what}" + (f" (file of {source.get('run_dir')})" if "file" in source else ""))
    lines.append(f"\n{games} games per cell; win rate of the agent, draws half, ± one standard error "
                 f"(the heuristic's armies in turn: `stratified_standard_error`), {actions}.")
    return "\n".join(lines)


def balanced_armies(games: int) -> np.ndarray:
    """The heuristic's army in each of `games` games (`scripted.balanced_armies`: its menu in
    turn); SystemExit below one game an army."""
    from actors.games.smax_races import COMPOSITIONS_PER_RACE as K
    from actors.games.smax_races import scripted

    if games < K:
        raise SystemExit(f"--games={games}: at least {K}, one game against each of the heuristic's armies")
    return scripted.balanced_armies(games)


def stratified_win_rate(outcomes: np.ndarray, armies: np.ndarray) -> float:
    """The win rate (draws half) against a uniform pick, from games whose opponent armies were
    stratified: sum_h P(h) rate_h with P(h) = 1/K over the K armies in `armies`, rate_h the win
    rate of the games against army h (stratified sampling's estimator of the mean)."""
    return float(np.mean([g.mean() for g in _scores_by_army(outcomes, armies)]))


def _scores_by_army(outcomes: np.ndarray, armies: np.ndarray) -> list[np.ndarray]:
    """The games' scores (`scripted.scores`), one array per heuristic army in `armies`."""
    from actors.games.smax_races import scripted

    game_scores, armies = scripted.scores(outcomes), np.asarray(armies)
    return [game_scores[armies == h] for h in np.unique(armies)]


def stratified_standard_error(outcomes: np.ndarray, armies: np.ndarray) -> float:
    """The standard error of `stratified_win_rate`: sqrt(sum_h P(h)^2 s_h^2 / n_h) with P(h) = 1/K,
    n_h the games against army h and s_h^2 their scores' sample variance (`scripted.scores`;
    ddof 1), stratified sampling's variance of the mean (Cochran, Sampling Techniques, eq. 5.6).
    An army the agent always beats or always loses to adds nothing."""
    groups = _scores_by_army(outcomes, armies)
    if any(len(g) < 2 for g in groups):
        return float("nan")
    return float(np.sqrt(sum(np.var(g, ddof=1) / len(g) for g in groups)) / len(groups))


def composition_breakdown(network, params, races: tuple[str, str], games: int, seed: int = 0,
                          own=None, greedy: bool = False) -> dict:
    """Which armies the agent picks against the heuristic, and how each army fares.

    `picks` [K]: the agent's army frequencies in `games` games of its own choosing; `rates`
    [K, K] / `draws` [K, K]: its win rate (draws half) / draw fraction with army a forced
    against the heuristic's army h forced, `games` games each; `army_rates` [K]: rates averaged
    over h, the win rate of always picking army a against the heuristic's uniform pick;
    `ceiling`: the best of those (what a best-responding pick reaches with this agent's micro);
    `with_picks`: picks @ army_rates (what its own picks should reach; its measured win rate
    differs by sampling only). `own`: the agent's `games` games of its own choosing
    (`scripted.HeuristicGames`) where already played, else played here; `greedy`: the agent's
    most likely actions (and army, in its own games)."""
    from actors.games.smax_races import COMPOSITIONS_PER_RACE as K
    from actors.games.smax_races import scripted

    if own is None:
        own = scripted.play_detailed(network, params, races, games, seed, greedy=greedy,
                                     compositions=(None, balanced_armies(games)))
    picks = np.bincount(own.compositions[:, 0], minlength=K) / games
    # Every pair of armies in one batch: games [K, K, games] in row-major order.
    pairs = np.repeat(np.arange(K * K), games)
    forced = scripted.play_detailed(network, params, races, K * K * games, seed, greedy=greedy,
                                    compositions=(pairs // K, pairs % K))
    outcomes = forced.outcomes.reshape(K, K, games)
    rates = scripted.win_rate(outcomes, axis=-1)
    draws = np.mean(outcomes == 0, axis=-1)
    army_rates = rates.mean(1)
    return {"picks": picks, "rates": rates, "draws": draws, "army_rates": army_rates,
            "ceiling": float(army_rates.max()), "best": int(np.argmax(army_rates)),
            "with_picks": float(picks @ army_rates)}


def format_breakdown(result: dict, games: int, params: str = "trained") -> str:
    """Per matchup, the agent's armies against the heuristic's (`composition_breakdown` of the
    `params` named), then the ceiling table: each matchup's best single army against the
    heuristic's uniform pick."""
    from actors.games.smax_races import DEFAULT_MENU, RACES

    races = result["config"].race_names
    lines = []
    for (r, o), row in result["table"].items():
        b = row.get("by_composition")
        if b is None:
            continue
        own, theirs = (DEFAULT_MENU[RACES.index(x)] for x in (r, o))
        lines += [f"\n**{r} main agent ({params}) vs heuristic {o}** (win rate, draws half; in brackets the "
                  f"draws; {games} games a cell, armies forced)\n",
                  f"| {r} army (picked) \\ heuristic {o} army | " + " | ".join(c.name for c in theirs)
                  + " | vs uniform pick |", "|---|" + "---|" * (len(theirs) + 1)]
        for a, comp in enumerate(own):
            cells = [f"{b['rates'][a, h]:.2f}" + (f" ({b['draws'][a, h]:.0%})" if b["draws"][a, h] else "")
                     for h in range(len(theirs))]
            lines.append(f"| {comp.name} ({b['picks'][a]:.0%}) | " + " | ".join(cells)
                         + f" | {b['army_rates'][a]:.2f} |")
    lines += [f"\n**Best single army against the heuristic's uniform pick, {params} parameters** (ceiling of a pick "
              "with this micro; in brackets what the agent's own picks reach)\n",
              "| main agent \\ heuristic | " + " | ".join(races) + " |", "|---|" + "---|" * len(races)]
    for r in races:
        cells = []
        for o in races:
            b = result["table"].get((r, o), {}).get("by_composition")
            name = "n/a" if b is None else DEFAULT_MENU[RACES.index(r)][b["best"]].name
            cells.append("n/a" if b is None else f"{name} {b['ceiling']:.2f} ({b['with_picks']:.2f})")
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def snapshots_over_run(run_dir: str, points: int = 8):
    """(config, network, {race: [(minutes into the run, player id)]}): each main agent at
    `points` of its frozen snapshots spread evenly over the run (the first and the newest always
    among them), then at its final parameters."""
    from experiments.build import make_game, make_network

    config, history = _run(run_dir)
    players = history.players()
    start, end = min(p["wall_time"] for p in players), max(p["wall_time"] for p in players)
    out = {}
    for main in (p for p in players if p["role"] == "main_agent" and not p["parent"]):
        snapshots = frozen_snapshots(players, main["player_id"])
        chosen = [snapshots[i] for i in sorted({round(k * (len(snapshots) - 1) / max(points - 1, 1))
                                                for k in range(points)})] if snapshots else []
        out[main["race"]] = [((p["wall_time"] - start) / 60, p["player_id"]) for p in chosen] + [
            ((end - start) / 60, main["player_id"])]
    return config, shared_network(make_network(config, make_game(config, 1).spec)), out


def pick_history(run_dir: str, points: int = 8) -> dict:
    """{race: [(minutes into the run, player id, probs [enemy races, K])]}: each main agent's
    army pick pi(army | its race, the enemy's) at `points` of its snapshots spread evenly over
    the run (`snapshots_over_run`), then at its final parameters."""
    from actors.games.smax_races import RACES, scripted
    from coordinator.param_store import player_params

    config, network, over_run = snapshots_over_run(run_dir, points)
    out = {}
    for race, rows in over_run.items():
        races = np.asarray([[RACES.index(race), RACES.index(o)] for o in config.race_names])
        out[race] = [(minutes, player_id,
                      scripted.pick_probabilities(network, player_params(run_dir, player_id)[1], races))
                     for minutes, player_id in rows]
    return out


def win_history(run_dir: str, points: int, games: int, seed: int = 0, average_newest: int = 0,
                greedy: bool = False) -> dict:
    """{race: [(minutes into the run, player id, [win rate against each heuristic race])]}: each
    main agent against the heuristic (stratified, `games` games a matchup, the same games for
    every snapshot) at `points` of its snapshots over the run (`snapshots_over_run`) and at its
    final parameters: whether a matchup still climbs at the end or has levelled off, and how far
    the final parameters sit from the run's last snapshots. With `average_newest` N, a last row
    plays the average of the final parameters and the N newest snapshots' (`averaged_params`)."""
    from actors.games.smax_races import scripted
    from coordinator.param_store import player_params

    config, network, over_run = snapshots_over_run(run_dir, points)
    armies = balanced_armies(games)

    def rates(race, params) -> list[float]:
        return [stratified_win_rate(scripted.play_detailed(network, params, (race, o), games, seed=seed,
                                                           greedy=greedy, compositions=(None, armies)).outcomes,
                                    armies)
                for o in config.race_names]

    out = {race: [(minutes, player_id, rates(race, player_params(run_dir, player_id)[1]))
                  for minutes, player_id in rows] for race, rows in over_run.items()}
    if average_newest:
        players = _run(run_dir)[1].players()
        for race, rows in over_run.items():
            minutes, player_id = rows[-1]
            mean = averaged_params(run_dir, frozen_snapshots(players, player_id)[-average_newest:],
                                   player_params(run_dir, player_id)[1])
            out[race].append((minutes, f"mean of {player_id} and its {average_newest} newest snapshots",
                              rates(race, mean)))
    return out


def format_win_history(history: dict, race_names, games: int) -> str:
    lines = []
    for race, rows in history.items():
        lines += [f"\n**{race} main agent against the heuristic over the run** (stratified, "
                  f"{games} games a matchup, draws half)\n",
                  "| minutes | player | " + " | ".join(f"vs {o}" for o in race_names) + " |",
                  "|---|---|" + "---|" * len(race_names)]
        lines += [f"| {minutes:.1f} | {player_id} | " + " | ".join(f"{r:.2f}" for r in rates) + " |"
                  for minutes, player_id, rates in rows]
    return "\n".join(lines)


def format_pick_history(history: dict, race_names) -> str:
    from actors.games.smax_races import DEFAULT_MENU, RACES

    lines = []
    for race, rows in history.items():
        armies = [c.name for c in DEFAULT_MENU[RACES.index(race)]]
        lines += [f"\n**{race} main agent's pick over the run** (probability of "
                  + " / ".join(armies) + ", against each enemy race)\n",
                  "| minutes | player | " + " | ".join(f"vs {o}" for o in race_names) + " |",
                  "|---|---|" + "---|" * len(race_names)]
        for minutes, player_id, probs in rows:
            lines.append(f"| {minutes:.1f} | {player_id} | "
                         + " | ".join(" / ".join(f"{x:.2f}" for x in row) for row in probs) + " |")
    return "\n".join(lines)


def format_table(result: dict, games: int) -> str:
    races = result["config"].race_names
    lines = ["| main agent \\ heuristic | " + " | ".join(races) + " |",
             "|---|" + "---|" * len(races)]
    for r in races:
        cells = []
        for o in races:
            row = result["table"].get((r, o))
            final = f"final {row['final']:.2f}, " if row and "final" in row else ""
            cells.append("n/a" if row is None
                         else f"{row['trained']:.2f} ± {row['trained_se']:.2f} ({final}initial {row['initial']:.2f})")
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    actions = "its most likely actions (--greedy)" if result["greedy"] else "actions sampled from its policy"
    if result["average_newest"]:
        spans = ", ".join(f"{race} {a:.1f}-{b:.1f}" for race, (a, b) in result["average_spans"].items())
        lines.append(f"\nThe main agent: the average of its final parameters and its {result['average_newest']} "
                     f"newest snapshots' (--average_newest; the snapshots from minutes {spans} of the run); "
                     "in brackets its final parameters alone.")
    lines.append(f"\n{games} games per cell; win rate of the main agent, draws half, ± one standard error "
                 f"(the heuristic's armies in turn: `stratified_standard_error`), {actions}; league "
                 f"games played: {result['games']}, players: {result['players']}.")
    return "\n".join(lines)


def result_line(rows, greedy: bool, params: str) -> str:
    """The RESULT line of a table's rows (each with "trained" and "trained_se")."""
    rates = [row["trained"] for row in rows]
    mean = float(np.mean(rates))
    at_080 = sum(rate >= 0.8 for rate in rates)
    clear = sum(row["trained"] - row["trained_se"] >= 0.8 for row in rows)
    return (f"RESULT builtin_opponent mean_win_rate={mean:.3f} matchups_at_080={at_080} clear_of_080={clear} "
            f"lowest={min(rates):.3f} actions={'greedy' if greedy else 'sampled'} params={params} "
            f"ratio={mean / 0.5:.2f} target=1.0")


def main(argv=None) -> int:
    from actors.games.smax_races import RACES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run_dir", help="a SMAX races league run (stopped, so "
                        "that its learner checkpoints hold the final parameters)")
    parser.add_argument("--agent", action="append", default=[], metavar="NAME",
                        help="in place of --run_dir: an agent to measure in its own race (repeatable), named as "
                        "experiments.agent_ref names agents: RUN_DIR:result:RACE (the run's agent), "
                        "RUN_DIR:PLAYER_ID, or an exported file")
    parser.add_argument("--heuristic_races", default=None, metavar="R,R",
                        help="with --agent: the heuristic's races to play (default: those of the agent's "
                        "league, else all of " + ", ".join(RACES) + ")")
    parser.add_argument("--games", type=int, default=256, help="games per matchup")
    parser.add_argument("--pick_history", nargs="?", type=int, const=8, default=0, metavar="N",
                        help="also each main agent's army pick at N of its snapshots over the run "
                        "(default 8) and at its final parameters")
    parser.add_argument("--win_history", nargs="?", type=int, const=8, default=0, metavar="N",
                        help="also each main agent's win rate against the heuristic (--games games "
                        "a matchup) at N of its snapshots over the run (default 8) and at its final "
                        "parameters")
    parser.add_argument("--average_newest", type=int, default=0, metavar="N",
                        help="read each main agent as the average of its final parameters and its N "
                        "newest snapshots' (Polyak averaging; the final parameters alone in brackets), "
                        "and with --win_history add that average as a last row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--greedy", action="store_true",
                        help="the agents take their most likely army, action type and target instead of "
                        "sampling them (every table of this run)")
    parser.add_argument("--by_composition", nargs="?", const="trained", choices=("trained", "initial"),
                        help="also each matchup's armies: the agent's picks and its win rate "
                        "with every army against every heuristic army (--games games per pair, "
                        "9x the games), of its trained (default) or initial parameters")
    args = parser.parse_args(argv)
    if args.games < 1:
        parser.error("--games must be at least 1")
    if args.pick_history < 0:
        parser.error("--pick_history takes the number of snapshots to show, at least 1")
    if args.win_history < 0:
        parser.error("--win_history takes the number of snapshots to measure, at least 1")
    if args.average_newest < 0:
        parser.error("--average_newest takes a number of snapshots, at least 1 (left out: the final parameters alone)")
    if bool(args.run_dir) == bool(args.agent):
        parser.error("name a run (--run_dir=RUN_DIR: its main agents) or agents (--agent=NAME, repeatable), one of the two")
    if args.agent:
        run_only = [f for f in ("pick_history", "win_history", "average_newest", "by_composition") if getattr(args, f)]
        if run_only:
            parser.error(f"--{run_only[0]} reads a run's snapshots: pass --run_dir, or name the agents alone "
                         "(RUN_DIR:result:RACE is the average of the final parameters and the 30 newest snapshots)")
        races = None
        if args.heuristic_races:
            races = [r.strip() for r in args.heuristic_races.split(",") if r.strip()]
            unknown = [r for r in races if r not in RACES]
            if unknown or not races:
                parser.error(f"--heuristic_races={args.heuristic_races}: races are {', '.join(RACES)}")
        try:
            result = measure_agents(args.agent, args.games, args.seed, args.greedy, races)
        except SystemExit as e:
            print(e, file=sys.stderr)
            return 2
        print(format_agents_table(result, args.games))
        labels = sorted({params_label(a) for a in result["agents"]})
        print(result_line(list(result["table"].values()), args.greedy, labels[0] if len(labels) == 1 else "mixed"))
        return 0
    if not os.path.exists(os.path.join(args.run_dir, "config.json")):
        parser.error(f"{args.run_dir} holds no config.json: pass the --run_dir of a league run")
    result = measure(args.run_dir, args.games, args.seed, args.by_composition, args.greedy, args.average_newest)
    print(format_table(result, args.games))
    if args.by_composition:
        print(format_breakdown(result, args.games, args.by_composition))
    if args.pick_history:
        print(format_pick_history(pick_history(args.run_dir, args.pick_history), result["config"].race_names))
    if args.win_history:
        history = win_history(args.run_dir, args.win_history, args.games, args.seed, args.average_newest,
                              args.greedy)
        print(format_win_history(history, result["config"].race_names, args.games))
    print(result_line(list(result["table"].values()), args.greedy,
                      f"mean_of_final_and_{args.average_newest}_newest" if args.average_newest else "final"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
