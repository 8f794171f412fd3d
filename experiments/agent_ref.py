"""One way to name an agent, for every command that takes one (issue 85):

    RUN_DIR:PLAYER_ID     any player a run holds: a learning agent (its latest parameters: its
                          learner checkpoint, else its newest snapshot) or a frozen player
                          (`params/<player_id>.npz`); e.g. runs/kuhn:any_main_agent_0
    FILE                  an exported agent (`python -m experiments.export`, agents/exported.py)
    RUN_DIR:result        the run's own agent. A game with an exact meta-game (poker): the league's
                          Nash mixture measured best (`measured_best`): the latest weights league.db
                          holds or the average of every published mixture (`experiments.nashconv
                          --mixture=nash` and `--mixture=nash_average` measure them), whichever the
                          evaluator's newest exact reading found less exploitable; its members
                          (player ids, their parameters as RUN_DIR:PLAYER_ID reads them) and
                          weights. A game without one (pgx, matrix games, a game of one's own):
                          its main agent read as measured best, the average of its final
                          parameters and its AVERAGE_NEWEST newest snapshots' (`result_params`)
    RUN_DIR:result:RACE   the same of a game with races (SMAX): that race's main agent, averaged;
                          RUN_DIR:result names it where the run has one race, and lists the
                          RUN_DIR:result:RACE names where it has several

Why the measured best of two mixtures on poker: neither is best on both games. On Leduc the
average read lower in 18 of 19 runs and on every seed at 30 minutes and at 2 hours (0.156-0.186
against 0.207-0.312 at 30 minutes); on Kuhn, whose league reaches its Nash in minutes, the
latest read 0.0074 where the average kept the early mixtures' weight, 0.0661
(docs/benchmarks-history.md, "The average Nash mixture"). The evaluator measures both exactly
every `evaluator.nash_conv_every_seconds`, so the run names the one its newest reading favours.

Why the average: on SMAX the average of a main agent's final parameters and its 30 newest
snapshots' (Polyak averaging of the iterates) read 7 to 8 of 9 matchups >= 0.80 against the
built-in AI on four runs of the defaults where the final parameters alone read 4 to 7
(docs/benchmark-records.md, "SMAX: the average of the last minutes"; e.g. seed 2: the average
0.854, 8 of 9, the final parameters 0.856, 5 of 9), and the README's headline is read from it.
`benchmarks/builtin_opponent.py --average_newest` reads the same function (`averaged_params`).

`resolve(name)` returns an `Agent` (network, parameters, game, where it came from) or raises
`AgentNameError` (a ValueError) saying what is wrong: no such file or run directory, no such
player (listing the players the run has), a damaged file. Commands print it and exit 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

RESULT = "result"
# The mixtures a poker run's agent may be (`measured_best`), as league.db's `exploitability`
# subjects name them.
MIXTURES = {"nash": "the latest Nash mixture", "nash_average": "the average Nash mixture"}
# The snapshots a main agent's reading averages with its final parameters (module docstring).
AVERAGE_NEWEST = 30
FORMS = ("RUN_DIR:PLAYER_ID (a player of a league run: runs/kuhn:any_main_agent_0)",
         "RUN_DIR:result (the run's agent: on poker its Nash mixture measured best, elsewhere its main agent's "
         f"average with its {AVERAGE_NEWEST} newest snapshots; RUN_DIR:result:RACE on SMAX)",
         "the path of an exported agent (python -m experiments.export AGENT --out=FILE)")


class AgentNameError(ValueError):
    """A name that names no agent; the message says why and what the names are."""


@dataclasses.dataclass
class Agent:
    """A named agent: what a command needs to play it or write it out."""

    name: str
    network: Any
    params: Any                   # nested dict of arrays
    game: str                     # the game as the run names it (RunConfig.game)
    spec: Any                     # agents.specs.GameSpec
    side: int = 0
    source: dict = dataclasses.field(default_factory=dict)   # run_dir, player_id, version, role, ...
    config: Any = None            # the run's RunConfig (None for an exported file)
    policy: Any = None            # agents.exported.Policy (an exported file)
    # A mixture (one member plays each game): `params` is a list, one per member, all played by
    # `network`; `weights` theirs (summing to 1), `members` their sources (player_id, version, ...).
    weights: list | None = None
    members: list | None = None


def describe_forms() -> str:
    return "; ".join(FORMS)


def split(name: str) -> tuple[str, str] | None:
    """(run_dir, player_id) of RUN_DIR:PLAYER_ID, or None for a file's path (an existing file,
    or a name without ':'). RUN_DIR:result:RACE is (RUN_DIR, "result:RACE")."""
    if os.path.isfile(name) or ":" not in name:
        return None
    run_dir, _, player = name.rpartition(":")
    head, _, last = run_dir.rpartition(":")
    if last == RESULT and head and not os.path.isdir(run_dir):
        return head, f"{RESULT}:{player}"
    return run_dir, player


def resolve(name: str) -> Agent:
    """The agent `name` names (module docstring); AgentNameError otherwise."""
    if not name:
        raise AgentNameError(f"no agent named; name one as {describe_forms()}")
    parts = split(name)
    if parts is None:
        return _from_file(name)
    return _from_run(name, *parts)


def result_params(run_dir: str, race: str | None = None, newest: int = AVERAGE_NEWEST) -> Agent:
    """The run's own agent, RUN_DIR:result (`race`: RUN_DIR:result:RACE), as an `Agent`: what
    a progress line, the evaluator or the dashboard shows as the run's agent. AgentNameError
    where the run does not name one yet (the message says why)."""
    name = f"{run_dir}:{RESULT}" + (f":{race}" if race is not None else "")
    config = run_config(run_dir)
    return _result(name, run_dir, config, players(run_dir), race, newest)


def _from_file(name: str) -> Agent:
    from agents.exported import ExportedFileError, load_policy

    if not os.path.exists(name):
        raise AgentNameError(f"{name}: no such file (name an agent as {describe_forms()})")
    if os.path.isdir(name):
        raise AgentNameError(f"{name} is a directory; a run's player is named RUN_DIR:PLAYER_ID "
                             f"(e.g. {name}:any_main_agent_0)")
    try:
        policy = load_policy(name)
    except ExportedFileError as e:
        raise AgentNameError(str(e)) from None
    source = {**policy.source, "file": os.path.abspath(name)}
    if policy.mixture:
        return Agent(name, policy.network, policy.member_params, policy.game, policy.game_spec, policy.side,
                     source, None, policy, [float(w) for w in policy.weights], policy.members)
    return Agent(name, policy.network, policy.params, policy.game, policy.game_spec, policy.side,
                 source, None, policy)


def run_config(run_dir: str):
    """The RunConfig of a run directory (its config.json); AgentNameError if there is none."""
    from experiments.config import ConfigError, RunConfig

    path = os.path.join(run_dir, "config.json")
    if not os.path.isdir(run_dir):
        raise AgentNameError(f"{run_dir}: no such run directory (name an agent as {describe_forms()})")
    if not os.path.isfile(path):
        raise AgentNameError(f"{run_dir} is not a league run directory: it has no config.json")
    try:
        with open(path) as f:
            return RunConfig.from_dict(json.load(f))
    except (OSError, ValueError, ConfigError) as e:
        raise AgentNameError(f"{path}: cannot read the run's config ({type(e).__name__}: {e})") from None


def players(run_dir: str) -> list[dict]:
    """The players league.db lists (learning agents and frozen players)."""
    from coordinator.history_reader import HistoryReader
    from coordinator.league_db import HistoryError

    if not os.path.isfile(os.path.join(run_dir, "league.db")):
        raise AgentNameError(f"{run_dir} has no league.db: the run has no players yet")
    try:
        history = HistoryReader(run_dir)
        try:
            return history.players()
        finally:
            history.close()
    except (HistoryError, OSError, ValueError) as e:
        raise AgentNameError(f"{run_dir}/league.db cannot be read ({type(e).__name__}: {e})") from None


def player_list(rows: list[dict], limit: int = 40) -> str:
    """The players as a command's message lists them: learning agents first, then the frozen."""
    learning = [p["player_id"] for p in rows if not p["parent"]]
    frozen = [p["player_id"] for p in rows if p["parent"]]
    names = learning + frozen
    shown = ", ".join(names[:limit]) + (f" ... ({len(names) - limit} more)" if len(names) > limit else "")
    return f"{len(learning)} learning agents and {len(frozen)} frozen players: {shown}"


def _from_run(name: str, run_dir: str, player_id: str) -> Agent:
    from experiments import build

    config = run_config(run_dir)
    rows = players(run_dir)
    if player_id == RESULT or player_id.startswith(f"{RESULT}:"):
        race = player_id.partition(":")[2] if ":" in player_id else None
        return _result(name, run_dir, config, rows, race)
    row = next((p for p in rows if p["player_id"] == player_id), None)
    if row is None:
        raise AgentNameError(f"{name}: {run_dir} has no player {player_id!r}; it has {player_list(rows)}")
    version, params, source = _player(name, run_dir, row, config)
    spec = config.game_info.functions().spec
    network = build.make_network(config, spec)
    return Agent(name, network, params, config.game, spec, 0, source, config)


def _player(name: str, run_dir: str, row: dict, config=None):
    """(version, params, source) of the player league.db's `row` describes; of a game with
    races (`config`'s) the source also names the league's races (`league_races`: the races its
    games met)."""
    from coordinator.param_store import player_params

    player_id = row["player_id"]
    try:
        version, params = player_params(run_dir, player_id)
    except (KeyError, ValueError, OSError) as e:
        raise AgentNameError(f"{name}: cannot read the parameters of {player_id} ({e})") from None
    source = {"run_dir": os.path.abspath(run_dir), "player_id": player_id, "version": int(version),
              "role": row["role"], "race": row["race"], "parent": row["parent"], "step": row["step"]}
    if config is not None and config.game_info.capabilities.races:
        source["league_races"] = list(config.race_names)
    return version, params, source


def _result(name: str, run_dir: str, config, rows: list[dict], race: str | None = None,
            newest: int = AVERAGE_NEWEST) -> Agent:
    """RUN_DIR:result[:RACE]: the league's Nash mixture measured best where the game has an
    exact meta-game (`_nash_result`), else the race's main agent averaged (`_main_agent_result`)."""
    if not config.game_info.capabilities.exact_evaluator:
        return _main_agent_result(name, run_dir, config, rows, race, newest)
    if race is not None:
        raise AgentNameError(f"{name}: {config.game} has no races; its agent is {run_dir}:{RESULT} "
                             "(the league's Nash mixture)")
    return _nash_result(name, run_dir, config, rows)


def measured_best(readings: dict[str, float]) -> str:
    """The mixture a poker run names as its agent: of `MIXTURES`, the one the evaluator's
    newest exact readings (`readings`: subject -> NashConv, measured together) found less
    exploitable; the latest ("nash") where the average was not read (none yet, or a run
    from before the average was measured) or ties."""
    if "nash" in readings and "nash_average" in readings and readings["nash_average"] < readings["nash"]:
        return "nash_average"
    return "nash"


def frozen_snapshots(rows: list[dict], player_id: str) -> list[dict]:
    """A learning agent's frozen snapshots (league.db's player rows), oldest first."""
    from league.players import HISTORICAL

    return sorted((p for p in rows if p["parent"] == player_id and p["role"] == HISTORICAL),
                  key=lambda p: p["step"])


def averaged_params(run_dir: str, snapshots: list[dict], final):
    """The uniform average of a learning agent's `final` parameters and those of its frozen
    `snapshots` (league.db's player rows, e.g. the newest of `frozen_snapshots`): Polyak averaging
    of the iterates, Polyak & Juditsky 1992: theta_bar = (1/n) sum_i theta_i over the n =
    len(snapshots) + 1 parameter sets, leaf by leaf, in the dtype of the first. The run's agent
    (`result_params`) and the benchmark's `--average_newest` are this function."""
    from coordinator.param_store import player_params

    return average_trees([player_params(run_dir, p["player_id"])[1] for p in snapshots] + [final])


def average_trees(trees: list):
    """theta_bar = (1/n) sum_i theta_i over n parameter trees, leaf by leaf, in the dtype of the
    first (Polyak & Juditsky 1992): `averaged_params`' arithmetic, which the evaluator node uses
    on the parameters it holds (the run's agent against the scripted opponent)."""
    import jax
    import numpy as np

    return jax.tree_util.tree_map(lambda *leaves: np.mean(np.stack(leaves), 0).astype(leaves[0].dtype), *trees)


def _main_agent_result(name: str, run_dir: str, config, rows: list[dict], race: str | None,
                       newest: int) -> Agent:
    """A game without an exact meta-game: the race's main agent (of a game without races, the
    main agent) read as measured best, its final parameters averaged with its `newest` newest
    snapshots' (`averaged_params`); its final parameters alone, said so, while it has none."""
    from experiments import build
    from league.players import MAIN_AGENT

    races = list(config.race_names) if config.game_info.capabilities.races else []
    if races and race is None:
        if len(races) > 1:
            raise AgentNameError(f"{name}: a {config.game} run's agent is one per race: name "
                                 + ", ".join(f"{run_dir}:{RESULT}:{r}" for r in races))
        race = races[0]
    if race is not None and race not in races:
        known = (", ".join(f"{run_dir}:{RESULT}:{r}" for r in races) if races
                 else f"{config.game} has no races: {run_dir}:{RESULT}")
        raise AgentNameError(f"{name}: the run has no race {race!r}; its agents: {known}")
    mains = [p for p in rows if p["role"] == MAIN_AGENT and not p["parent"] and (race is None or p["race"] == race)]
    if not mains:
        raise AgentNameError(f"{name}: league.db lists no main agent{f' of {race}' if race else ''} yet; "
                             f"name one of its players: {player_list(rows)}")
    if len(mains) > 1:
        raise AgentNameError(f"{name}: the run has {len(mains)} main agents{f' of {race}' if race else ''} "
                             "and no measurement picks one: name it, "
                             + ", ".join(f"{run_dir}:{p['player_id']}" for p in mains))
    main = mains[0]
    _, final, source = _player(name, run_dir, main, config)
    window = frozen_snapshots(rows, main["player_id"])[-newest:] if newest > 0 else []
    try:
        params = averaged_params(run_dir, window, final) if window else final
    except (KeyError, ValueError, OSError) as e:
        raise AgentNameError(f"{name}: cannot read a snapshot of {main['player_id']} to average ({e}); "
                             f"name the final parameters: {run_dir}:{main['player_id']}") from None
    if window:
        reading = f"average of final + {len(window)} newest snapshots"
    else:
        reading = "final parameters (the run has no snapshots of it yet to average)"
    source = {**source, "player_id": RESULT, "main_agent": main["player_id"], "reading": reading,
              "averaged": [p["player_id"] for p in window]}
    spec = config.game_info.functions().spec
    network = build.make_network(config, spec)
    return Agent(name, network, params, config.game, spec, 0, source, config)


def _nash_result(name: str, run_dir: str, config, rows: list[dict]) -> Agent:
    """The league's Nash mixture measured best (`measured_best`): the latest weights or the
    average of every publication (`HistoryReader.average_nash`, as `nashconv.RunReader` reads
    them), its members sorted by player id as `nashconv.RunReader.measure` mixes them."""
    from coordinator.history_reader import HistoryReader
    from experiments import build

    history = HistoryReader(run_dir)
    try:
        latest = history.latest_nash()
        reading = history.latest_exploitability()
        average, publications = history.average_nash()
    finally:
        history.close()
    if latest is None:
        raise AgentNameError(f"{name}: the run's agent (its Nash mixture) is not named yet: league.db has no "
                             "Nash weights yet (the coordinator publishes them every meta_game_every_seconds; "
                             f"let the league run longer); name one of its players: {player_list(rows)}")
    readings = reading[1] if reading else {}
    mixture = measured_best(readings) if average else "nash"
    if mixture == "nash_average":
        weights, where = average, f"mean of {publications} Nash publications in league.db"
    else:
        when, weights = latest
        weights, where = {p: w for p, w in weights.items() if w > 0}, f"league.db nash table at t={when:.0f}"
    chosen = MIXTURES[mixture] + (f", NashConv at t={reading[0]:.0f}: " + ", ".join(
        f"{m} {readings[m]:.4f}" for m in MIXTURES if m in readings) if readings else " (not measured yet)")
    by_id = {p["player_id"]: p for p in rows}
    missing = sorted(set(weights) - set(by_id))
    if missing:
        raise AgentNameError(f"{name}: the Nash mixture names players league.db does not list: {missing}")
    ids = sorted(weights)
    members, params = [], []
    for player_id in ids:
        _, member_params, source = _player(name, run_dir, by_id[player_id])
        members.append(source)
        params.append(member_params)
    spec = config.game_info.functions().spec
    network = build.make_network(config, spec)
    total = sum(weights[p] for p in ids)
    source = {"run_dir": os.path.abspath(run_dir), "player_id": RESULT, "mixture": mixture, "chosen": chosen,
              "weights_from": where}
    return Agent(name, network, params, config.game, spec, 0, source, config,
                 weights=[weights[p] / total for p in ids], members=members)
