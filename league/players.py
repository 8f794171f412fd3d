"""Players, roles and the league's configuration.

AlphaStar (Methods, "Populating the league"): three kinds of learning agent differ
only in whom they play, when they add a frozen copy of themselves ("player") to the
league, and whether they are reset. The full composition is, per race, one main
agent, one main exploiter and two league exploiters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from league.settings import setting

MAIN_AGENT = "main_agent"
MAIN_EXPLOITER = "main_exploiter"
LEAGUE_EXPLOITER = "league_exploiter"
HISTORICAL = "historical"
LEARNING_ROLES = (MAIN_AGENT, MAIN_EXPLOITER, LEAGUE_EXPLOITER)
ROLES = (*LEARNING_ROLES, HISTORICAL)

def check_role(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; allowed: {', '.join(ROLES)}")
    return role


MAIN_AGENT_MATCHMAKER_NAMES = ("alphastar", "openai_five", "self_play", "fsp", "pfsp", "pfsp_sp")
"""The names of `league.matchmaking.MAIN_AGENT_MATCHMAKERS` (which imports this module and checks
that its registry has exactly these), for validating a config without importing it."""


@dataclass(frozen=True)
class Player:
    """A league member. Learning agents change; historical players are frozen copies.

    `parent` is the learning agent a historical player was copied from; `step` and
    `wall_time` are the parent's learner step and the time of the snapshot.
    """

    player_id: str
    role: str
    race: str
    parent: str | None = None
    step: int = 0
    wall_time: float = 0.0

    def __post_init__(self):
        check_role(self.role)
        if not isinstance(self.player_id, str) or not self.player_id:
            raise ValueError(f"player ids are non-empty strings; got {self.player_id!r}")
        if self.role == HISTORICAL and not self.parent:
            raise ValueError(f"historical player {self.player_id!r} needs a parent agent")

    @property
    def is_learning(self) -> bool:
        return self.role in LEARNING_ROLES


@dataclass(frozen=True)
class MatchmakingConfig:
    """Every threshold of the matchmakers, with AlphaStar's values as defaults.

    Main agents (AlphaStar): 50% PFSP over all past players, 15% verification, the rest
    self-play."""

    main_pfsp_probability: float = setting(0.5, "main agents: share of PFSP over all past players")
    main_verification_probability: float = setting(0.15, "main agents: share of verification")
    main_pfsp_weighting: str = setting(
        "squared", "main agents' PFSP weighting (league/pfsp.py; hard uses pfsp_hard_exponent)")
    main_self_play_min_win_rate: float = setting(
        0.3, "main agents play self-play only if they beat the chosen main agent more than this; "
        "otherwise PFSP(variance) over that main agent's snapshots as a curriculum")
    verification_exploiter_win_rate: float = setting(
        0.3, "main agents' verification: PFSP over past main exploiters when the agent beats one of "
        "them less often than this")
    verification_forgotten_win_rate: float = setting(
        0.7, "main agents' verification, when no past main exploiter qualifies: PFSP over a main "
        "agent's forgotten snapshots when the agent beats one of them less often than this")
    main_exploiter_curriculum_win_rate: float = setting(
        0.2, "main exploiters: below this win rate against the main agent (paper text: 20%; the "
        "pseudocode uses 10%), half of the time PFSP(variance) over its snapshots")
    main_exploiter_curriculum_probability: float = setting(
        0.5, "main exploiters: share of the curriculum (PFSP over the main agent's snapshots) when "
        "below main_exploiter_curriculum_win_rate")
    league_exploiter_weighting: str = setting("linear_capped", "league exploiters' PFSP weighting")
    league_exploiter_opponents: str = setting(
        "pfsp", "league exploiters' opponents: \"pfsp\" (AlphaStar: PFSP over all historical "
        "players), \"nash\" (PSRO's best-response target: the league's latest meta-game Nash "
        "mixture over historical players; PFSP until the coordinator has published one) or "
        "\"nash_fixed\" (PSRO's fixed target: the Nash mixture published first after the "
        "exploiter's last copy was evaluated, held until its next copy; `League.nash_targets`)")
    pfsp_hard_exponent: float = setting(
        2.0, "the exponent p of the \"hard\" PFSP weighting f_hard(x) = (1 - x)^p, wherever a "
        "weighting is \"hard\" (AlphaStar: \"squared\" is p = 2; larger p focuses harder on the strongest)")
    pfsp_sp_self_play_probability: float = setting(
        0.5, "ablation arm pfsp_sp: self-play share (Fig. 3: a 50%-50% mix of SP and PFSP)")
    openai_five_past_probability: float = setting(
        0.2, "OpenAI Five's matchmaker (appendix N): share of past selves, drawn by quality score "
        "(the rest: the latest self)")
    openai_five_learning_rate: float = setting(
        0.01, "OpenAI Five's matchmaker: step size of the past selves' quality scores")


@dataclass(frozen=True)
class SnapshotConfig:
    """When learning agents add frozen copies of themselves, and when they reset.

    Defaults are AlphaStar's (steps are agent steps); experiments scale them down.
    """

    main_agent_snapshot_steps: float = setting(
        2e9, "a main agent adds a frozen copy every this many agent steps")
    exploiter_min_steps: float = setting(
        2e9, "exploiters add no copy sooner than this many agent steps after their last")
    exploiter_win_rate: float = setting(
        0.7, "an exploiter adds a copy once it beats all its targets above this")
    main_exploiter_timeout_steps: float = setting(
        4e9, "a main exploiter that has not beaten its targets adds a copy (and resets) after this many steps")
    league_exploiter_timeout_steps: float = setting(
        2e9, "a league exploiter that has not beaten its targets adds a copy after this many steps")
    exploiter_plateau_steps: float = setting(
        0.0, "train until beaten no more: an exploiter also adds a copy once its lowest win rate "
        "against its targets has not risen by exploiter_plateau_gain for this many steps (0: off)")
    exploiter_plateau_gain: float = setting(
        0.02, "the rise in an exploiter's lowest win rate that counts as progress (exploiter_plateau_steps)")
    main_exploiter_reset_probability: float = setting(
        1.0, "probability that a main exploiter resets after adding a copy (AlphaStar: 1, every copy)")
    league_exploiter_reset_probability: float = setting(
        0.25, "probability that a league exploiter resets after adding a copy (AlphaStar: 0.25)")
    league_exploiter_reset_to: str = setting(
        "initial", "what a league exploiter restarts from at a reset: \"initial\" (AlphaStar: the "
        "initial parameters, the supervised start where there is one) or \"main_agent\" (the newest "
        "frozen copy of a main agent of its race, a warm start; the initial parameters until one exists)")


RESET_SOURCES = ("initial", "main_agent")   # SnapshotConfig.league_exploiter_reset_to
LEAGUE_EXPLOITER_OPPONENTS = ("pfsp", "nash", "nash_fixed")   # MatchmakingConfig.league_exploiter_opponents


@dataclass(frozen=True)
class LeagueConfig:
    # Derived from the run's races (experiments/config.py: DERIVED), not a flag.
    races: tuple[str, ...] = setting(("terran", "protoss", "zerg"), "the league's races")
    main_agents_per_race: int = setting(1, "main agents per race (AlphaStar: 1)")
    main_exploiters_per_race: int = setting(1, "main exploiters per race (AlphaStar: 1)")
    league_exploiters_per_race: int = setting(2, "league exploiters per race (AlphaStar: 2)")
    main_agent_matchmaker: str = setting(
        "alphastar", "main agents' opponents: alphastar (the full rule), or an ablation arm of "
        "AlphaStar's Fig. 3c (self_play, fsp, pfsp, pfsp_sp) or OpenAI Five's past-self sampler (openai_five)")
    payoff_decay: float = setting(
        0.99, "each pair's counts in the payoff table are multiplied by this before a new result")
    initial_snapshots: bool = setting(
        True, "a frozen copy of every main agent's initial parameters joins the league at the start "
        "(AlphaStar's pseudocode: `initial_snapshot_id`), so PFSP has opponents from the first match")
    matchmaking: MatchmakingConfig = field(default_factory=MatchmakingConfig)
    snapshots: SnapshotConfig = field(default_factory=SnapshotConfig)

    def __post_init__(self):
        if not self.races or len(set(self.races)) != len(self.races):
            raise ValueError(f"races must be distinct and non-empty; got {self.races!r}")
        for name in ("main_agents_per_race", "main_exploiters_per_race", "league_exploiters_per_race"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer; got {value!r}")
        if self.main_agent_matchmaker not in MAIN_AGENT_MATCHMAKER_NAMES:
            raise ValueError(
                f"unknown main_agent_matchmaker {self.main_agent_matchmaker!r}; "
                f"allowed: {', '.join(MAIN_AGENT_MATCHMAKER_NAMES)}"
            )
        _check_probabilities(self.matchmaking, self.snapshots)
        if self.matchmaking.league_exploiter_opponents not in LEAGUE_EXPLOITER_OPPONENTS:
            raise ValueError(f"league_exploiter_opponents must be one of {', '.join(LEAGUE_EXPLOITER_OPPONENTS)}; "
                             f"got {self.matchmaking.league_exploiter_opponents!r}")
        if self.snapshots.league_exploiter_reset_to not in RESET_SOURCES:
            raise ValueError(f"league_exploiter_reset_to must be one of {', '.join(RESET_SOURCES)}; got "
                             f"{self.snapshots.league_exploiter_reset_to!r}")
        if not 0.0 < self.payoff_decay <= 1.0:
            raise ValueError(f"payoff_decay must lie in (0, 1]; got {self.payoff_decay!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LeagueConfig:
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown league config keys {sorted(unknown)}; allowed: {sorted(known)}")
        if "matchmaking" in data:
            data["matchmaking"] = MatchmakingConfig(**data["matchmaking"])
        if "snapshots" in data:
            data["snapshots"] = SnapshotConfig(**data["snapshots"])
        if "races" in data:
            data["races"] = tuple(data["races"])
        return cls(**data)


def _check_probabilities(matchmaking: MatchmakingConfig, snapshots: SnapshotConfig) -> None:
    from league.pfsp import ALL_WEIGHTINGS

    for config in (matchmaking, snapshots):
        for f in dataclasses.fields(config):
            value = getattr(config, f.name)
            if f.name.endswith(("probability", "win_rate")) and not 0.0 <= value <= 1.0:
                raise ValueError(f"{f.name} must lie in [0, 1]; got {value!r}")
            if f.name.endswith("steps") and not value >= 0:
                raise ValueError(f"{f.name} must be >= 0; got {value!r}")
            if f.name.endswith("weighting") and value not in ALL_WEIGHTINGS:
                raise ValueError(f"unknown PFSP weighting {value!r} for {f.name}; allowed: {', '.join(ALL_WEIGHTINGS)}")
    if not (np.isfinite(matchmaking.pfsp_hard_exponent) and matchmaking.pfsp_hard_exponent > 0):
        raise ValueError(f"pfsp_hard_exponent must be a positive number; got {matchmaking.pfsp_hard_exponent!r}")
    if matchmaking.main_pfsp_probability + matchmaking.main_verification_probability > 1.0:
        raise ValueError(
            "main_pfsp_probability + main_verification_probability must be <= 1 "
            f"(the rest is self-play); got {matchmaking.main_pfsp_probability} + "
            f"{matchmaking.main_verification_probability}"
        )


def learning_agent_id(race: str, role: str, index: int) -> str:
    return f"{race}_{role}_{index}"


def snapshot_id(agent_id: str, snapshot_index: int) -> str:
    return f"{agent_id}#{snapshot_index}"


def initial_snapshot_id(agent_id: str) -> str:
    """The frozen copy of a main agent's initial parameters (`LeagueConfig.initial_snapshots`)."""
    return snapshot_id(agent_id, 0)


def learning_agents(config: LeagueConfig) -> list[Player]:
    """The learning agents of a league: races x (main agents, main exploiters, league exploiters)."""
    counts = {
        MAIN_AGENT: config.main_agents_per_race,
        MAIN_EXPLOITER: config.main_exploiters_per_race,
        LEAGUE_EXPLOITER: config.league_exploiters_per_race,
    }
    return [
        Player(learning_agent_id(race, role, k), role, race)
        for race in config.races
        for role in LEARNING_ROLES
        for k in range(counts[role])
    ]


T = TypeVar("T")

# Draws that may meet an already withdrawn player again before a node gives up (each draw after
# a withdrawal comes from the distribution without that player, so a repeat means the league has
# not taken it out yet).
MATCH_ATTEMPTS = 20


class WithdrawnPlayer(LookupError):
    """A frozen player taken out of matchmaking (`League.withdraw`: its parameters cannot be
    read); raised where its parameters are asked for, so the caller asks for another match."""

    def __init__(self, player_id: str):
        super().__init__(f"{player_id!r} was withdrawn from the league (its parameters cannot be read or are "
                         "not finite)")
        self.player_id = player_id


def draw_past_withdrawn(draw: Callable[[], T], who: str) -> T:
    """`draw()`, called again while it raises WithdrawnPlayer: a match or an opponent bank drawn
    until it meets no withdrawn player. Any number of damaged players is withdrawn, one draw each;
    only draws that meet a player already met withdrawn count, and after MATCH_ATTEMPTS of them a
    RuntimeError names `who`."""
    met: set[str] = set()
    repeats = 0
    while repeats < MATCH_ATTEMPTS:
        try:
            return draw()
        except WithdrawnPlayer as withdrawn:
            repeats += withdrawn.player_id in met
            met.add(withdrawn.player_id)
    raise RuntimeError(f"{who}: {MATCH_ATTEMPTS} draws met players already withdrawn (the league does not take "
                       "them out of matchmaking)")
