"""One way to name an agent, for every command that takes one (issue 85):

    RUN_DIR:PLAYER_ID     any player a run holds: a learning agent (its latest parameters: its
                          learner checkpoint, else its newest snapshot) or a frozen player
                          (`params/<player_id>.npz`); e.g. runs/kuhn:any_main_agent_0
    FILE                  an exported agent (`python -m experiments.export`, agents/exported.py)
    RUN_DIR:result        the run's own agent: not yet (issue 85, item 2)

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
FORMS = ("RUN_DIR:PLAYER_ID (a player of a league run: runs/kuhn:any_main_agent_0)",
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


def describe_forms() -> str:
    return "; ".join(FORMS)


def split(name: str) -> tuple[str, str] | None:
    """(run_dir, player_id) of RUN_DIR:PLAYER_ID, or None for a file's path (an existing file,
    or a name without ':')."""
    if os.path.isfile(name) or ":" not in name:
        return None
    run_dir, _, player = name.rpartition(":")
    return run_dir, player


def resolve(name: str) -> Agent:
    """The agent `name` names (module docstring); AgentNameError otherwise."""
    if not name:
        raise AgentNameError(f"no agent named; name one as {describe_forms()}")
    parts = split(name)
    if parts is None:
        return _from_file(name)
    return _from_run(name, *parts)


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
    if player_id == RESULT:
        raise AgentNameError(f"{name}: the run's own agent (RUN_DIR:result) is not named yet (issue 85, "
                             f"item 2); name one of its players: {player_list(rows)}")
    row = next((p for p in rows if p["player_id"] == player_id), None)
    if row is None:
        raise AgentNameError(f"{name}: {run_dir} has no player {player_id!r}; it has {player_list(rows)}")
    from coordinator.param_store import player_params

    try:
        version, params = player_params(run_dir, player_id)
    except (KeyError, ValueError, OSError) as e:
        raise AgentNameError(f"{name}: cannot read the player's parameters ({e})") from None
    spec = config.game_info.functions().spec
    network = build.make_network(config, spec)
    source = {"run_dir": os.path.abspath(run_dir), "player_id": player_id, "version": int(version),
              "role": row["role"], "race": row["race"], "parent": row["parent"], "step": row["step"]}
    return Agent(name, network, params, config.game, spec, 0, source, config)
