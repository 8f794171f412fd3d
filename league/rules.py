"""When a learning agent adds a frozen copy of itself to the league, and when it resets.

AlphaStar (Methods, "Populating the league", and the Supplementary pseudocode):
- main agents add a copy every 2e9 steps and never reset;
- main exploiters add a copy when they beat every main agent in > 70% of games, or
  after a 4e9-step timeout, and are then reset to the initial parameters;
- league exploiters add a copy when they beat every player in the league > 70%, or
  after a 2e9-step timeout, and are then reset with probability 25%.
The pseudocode also requires 2e9 steps since the last copy before an exploiter may
add one (`exploiter_min_steps`). Beyond AlphaStar, an exploiter may also add a copy when it
has stopped improving against its targets (`exploiter_plateau_steps`: its lowest win rate
against them has not risen by `exploiter_plateau_gain` for that many steps), so that at a
high learning speed it trains until it is as good as it gets, not for a fixed step count.
The league only decides; the coordinator acts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from league.players import LEAGUE_EXPLOITER, MAIN_AGENT, MAIN_EXPLOITER, SnapshotConfig


@dataclass(frozen=True)
class AddSnapshot:
    """Freeze `agent_id`'s current parameters as the new historical player `player_id`."""

    agent_id: str
    player_id: str
    step: int
    wall_time: float
    reason: str


@dataclass(frozen=True)
class ResetAgent:
    """Reset `agent_id` (a fresh optimiser) to the parameters of the frozen player `source`, or
    to its initial parameters when `source` is None."""

    agent_id: str
    step: int
    source: str | None = None


def snapshot_reason(
    role: str, steps_since_snapshot: float, target_win_rates: np.ndarray, config: SnapshotConfig,
    steps_without_gain: float = 0.0,
) -> str | None:
    """Why the agent should add a copy of itself now ("steps", "beats_all", "plateau",
    "timeout"), or None.

    `target_win_rates` are the agent's win rates against its targets: the current main
    agents for a main exploiter, all historical players for a league exploiter.
    `steps_without_gain`: steps since the lowest of those rates last rose by
    `exploiter_plateau_gain` (`League` keeps it), read when `exploiter_plateau_steps` > 0.
    """
    if role == MAIN_AGENT:
        return "steps" if steps_since_snapshot >= config.main_agent_snapshot_steps else None
    if role == MAIN_EXPLOITER:
        timeout = config.main_exploiter_timeout_steps
    elif role == LEAGUE_EXPLOITER:
        timeout = config.league_exploiter_timeout_steps
    else:
        raise ValueError(
            f"only learning agents snapshot; got role {role!r} "
            f"(allowed: {MAIN_AGENT}, {MAIN_EXPLOITER}, {LEAGUE_EXPLOITER})"
        )
    if steps_since_snapshot < config.exploiter_min_steps:
        return None
    rates = np.asarray(target_win_rates, dtype=np.float64)
    if rates.size and rates.min() > config.exploiter_win_rate:
        return "beats_all"
    if config.exploiter_plateau_steps > 0 and steps_without_gain >= config.exploiter_plateau_steps:
        return "plateau"
    if steps_since_snapshot >= timeout:
        return "timeout"
    return None


def reset_probability(role: str, config: SnapshotConfig) -> float:
    """Probability that an agent of `role` is reset after adding a copy of itself."""
    return {
        MAIN_AGENT: 0.0,
        MAIN_EXPLOITER: config.main_exploiter_reset_probability,
        LEAGUE_EXPLOITER: config.league_exploiter_reset_probability,
    }[role]
