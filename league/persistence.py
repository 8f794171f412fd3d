"""A league as plain data and back (`League.state`, `League.from_state`): the checkpoint the
coordinator saves (`coordinator/league_state.py`) and a resumed run restores, its players, payoff,
per-agent bookkeeping and Generator. Pure: plain dicts and lists, no I/O."""

from __future__ import annotations

import numpy as np

from league.payoff import Payoff
from league.players import LeagueConfig, Player


def league_state(league) -> dict:
    """The league (`league.league.League`) as plain data (`League.state`)."""
    return {
        "config": league.config.to_dict(),
        "players": [vars(p).copy() for p in league.players.values()],
        "payoff": league.payoff.state(),
        "last_snapshot_step": dict(league.last_snapshot_step),
        "snapshot_count": dict(league.snapshot_count),
        "quality": {k: list(v) for k, v in league._quality.items()},
        "rng": league.rng.bit_generator.state,
        "withdrawn": dict(league.withdrawn),
        "best_target_rate": dict(league.best_target_rate),
        "best_target_step": dict(league.best_target_step),
        "nash_targets": {k: dict(v) for k, v in league.nash_targets.items()},
        "snapshot_targets": {k: dict(v) for k, v in league.snapshot_targets.items()},
    }


def league_from_state(cls, state: dict):
    """A league of class `cls` (`league.league.League`) as `league_state` saved it
    (`League.from_state`)."""
    # Leagues saved before `initial_snapshots` existed started without initial copies.
    config = LeagueConfig.from_dict({"initial_snapshots": False, **state["config"]})
    league = cls(config, np.random.default_rng())
    league.rng.bit_generator.state = state["rng"]
    for data in state["players"]:
        player = Player(**data)
        if player.player_id not in league.players:
            league._add(player)
    league.payoff = Payoff.from_state(state["payoff"])
    if league.payoff.players != list(league.players):
        raise ValueError("league state is inconsistent: payoff players differ from league players")
    league.last_snapshot_step.update(state["last_snapshot_step"])
    league.snapshot_count.update(state["snapshot_count"])
    league.best_target_rate.update(state.get("best_target_rate", {}))
    league.best_target_step.update(state.get("best_target_step", {}))
    league.nash_targets = {k: dict(v) for k, v in state.get("nash_targets", {}).items()}
    league.snapshot_targets = {k: dict(v) for k, v in state.get("snapshot_targets", {}).items()}
    # The saved quality scores are already without the withdrawn players' entries.
    for player_id, reason in state.get("withdrawn", {}).items():
        league._leave_pools(league.players[player_id])
        league.withdrawn[player_id] = reason
    league._quality = {k: list(v) for k, v in state["quality"].items()}
    return league
