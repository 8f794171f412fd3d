"""Whom each learning agent plays: one function per role, as in AlphaStar.

AlphaStar (Methods, "Populating the league", and the Supplementary pseudocode):
- main agent: 50% PFSP(squared) over all historical players; 15% verification
  (past main exploiters it beats < 30%, then forgotten snapshots of a main agent it
  beats < 70%); otherwise self-play against a main agent, or, when it beats that
  agent <= 30%, PFSP(variance) over the agent's snapshots as a curriculum;
- main exploiter: a current main agent; if beaten too often, half of the time
  PFSP(variance) over that main agent's snapshots;
- league exploiter: PFSP(linear_capped) over all historical players.
Also OpenAI Five's past-self sampler (appendix N) and the ablation arms of
AlphaStar's Fig. 3c (self-play, FSP, PFSP, PFSP + SP).

Every matchmaker takes the league's read-only view and the agent and returns the exact
`MatchDistribution` of its next opponent: where the pseudocode tosses a coin between
branches (or picks a main agent uniformly), the branches' own distributions are mixed
with the coin's probabilities. `League.get_match` samples it. With no candidates a
branch falls back to self-play. `MAIN_AGENT_MATCHMAKERS` is the one registry of
main-agent matchmakers by name (`LeagueConfig.main_agent_matchmaker`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from league.payoff import Payoff
from league.pfsp import pfsp_probabilities
from league.players import (
    LEAGUE_EXPLOITER,
    MAIN_AGENT,
    MAIN_AGENT_MATCHMAKER_NAMES,
    MAIN_EXPLOITER,
    LeagueConfig,
    Player,
)


class League(Protocol):
    """What a matchmaker reads of the league (`league.league.League` is one): matchmaking sits
    below the league class, which imports it, so it names only this view."""

    config: LeagueConfig
    payoff: Payoff
    players: dict[str, Player]
    nash_weights: dict[str, float]
    nash_targets: dict[str, dict[str, float]]

    def player(self, player_id: str) -> Player: ...
    def learning_agent_ids(self, role: str | None = None) -> list[str]: ...
    def historical_ids(self) -> list[str]: ...
    def snapshots_of(self, agent_id: str) -> list[str]: ...
    def quality_probabilities(self, agent_id: str) -> np.ndarray: ...


@dataclass(frozen=True)
class Match:
    """The opponent picked for `agent_id` and the matchmaking branch that picked it (the one
    match record: `League.get_match` makes it, `Coordinator.request_match` adds the races the
    games are played in and where the opponent's parameters live: "learner", its learner's
    current ones, or "store", a frozen player's; actors and evaluators play it)."""

    agent_id: str
    opponent_id: str
    branch: str
    home_race: str | None = None
    away_race: str | None = None
    opponent_params: str = "store"

    @classmethod
    def of(cls, match, agent_id: str = "") -> Match:
        """A `Match`, or one from its dict form ({"opponent_id", "branch", ...})."""
        if isinstance(match, cls):
            return match
        fields = dict(match)
        fields.setdefault("agent_id", agent_id)
        fields.setdefault("branch", "")
        return cls(**fields)


@dataclass(frozen=True)
class MatchDistribution:
    """P(opponents[i] picked by branches[i]) = probabilities[i] for `agent_id`'s next match.

    Probabilities are positive and sum to 1 (checked). The matchmakers below list each
    (opponent, branch) pair once (not checked here: it would cost a set per match); an
    opponent reachable by two branches (e.g. PFSP and verification) has one entry per
    branch, so a sampled entry names the branch that picked it.
    """

    agent_id: str
    opponents: tuple[str, ...]
    probabilities: np.ndarray
    branches: tuple[str, ...]

    def __post_init__(self):
        probs = np.array(self.probabilities, dtype=np.float64)
        probs.setflags(write=False)
        object.__setattr__(self, "opponents", tuple(self.opponents))
        object.__setattr__(self, "branches", tuple(self.branches))
        object.__setattr__(self, "probabilities", probs)
        if not (probs.ndim == 1 and len(self.opponents) == len(self.branches) == probs.size > 0):
            raise ValueError(
                f"a match distribution needs as many opponents, branches and probabilities (> 0); got "
                f"{len(self.opponents)}, {len(self.branches)} and shape {probs.shape}"
            )
        if not (np.all(probs > 0) and abs(probs.sum() - 1.0) < 1e-9):
            raise ValueError(f"match probabilities must be positive and sum to 1; got {probs.tolist()[:5]}")

    def marginal(self) -> dict[str, float]:
        """P(opponent), summed over the branches that can pick it."""
        out: dict[str, float] = {}
        for opponent, p in zip(self.opponents, self.probabilities.tolist()):
            out[opponent] = out.get(opponent, 0.0) + p
        return out


Matchmaker = Callable[["League", str], MatchDistribution]


# -- building distributions ---------------------------------------------------------


def _over(agent_id: str, opponents: Sequence[str], probabilities, branch: str) -> MatchDistribution:
    """One branch's distribution; candidates it gives no weight are left out."""
    probs = np.asarray(probabilities, dtype=np.float64)
    if not np.all(probs > 0):
        keep = np.flatnonzero(probs > 0)
        opponents, probs = [opponents[i] for i in keep], probs[keep]
    return MatchDistribution(agent_id, opponents, probs, [branch] * len(probs))


def _only(agent_id: str, opponent: str, branch: str) -> MatchDistribution:
    return MatchDistribution(agent_id, (opponent,), np.ones(1), (branch,))


def _uniform(agent_id: str, opponents: Sequence[str], branch: str) -> MatchDistribution:
    return _over(agent_id, opponents, np.full(len(opponents), 1.0 / len(opponents)), branch)


def _mixture(agent_id: str, parts: Sequence[tuple[float, MatchDistribution]]) -> MatchDistribution:
    """sum_k w_k D_k: the branch k taken with probability w_k (the pseudocode's coins).

    Entries of parts that share a branch name are merged by (opponent, branch); the others
    (e.g. PFSP over the whole league) are concatenated as they are, which keeps this cheap.
    """
    parts = [(weight, part) for weight, part in parts if weight > 0]
    branch_sets = [set(part.branches) for _, part in parts]
    uses = Counter(branch for branches in branch_sets for branch in branches)
    opponents: list[str] = []
    branches: list[str] = []
    probs: list[np.ndarray] = []
    shared: dict[tuple[str, str], float] = {}
    for (weight, part), names in zip(parts, branch_sets):
        if all(uses[name] == 1 for name in names):
            opponents += part.opponents
            branches += part.branches
            probs.append(weight * part.probabilities)
            continue
        for key, p in zip(zip(part.opponents, part.branches), part.probabilities.tolist()):
            shared[key] = shared.get(key, 0.0) + weight * p
    opponents += [opponent for opponent, _ in shared]
    branches += [branch for _, branch in shared]
    probs.append(np.fromiter(shared.values(), np.float64, len(shared)))
    all_probs = np.concatenate(probs)
    if not np.all(all_probs > 0):  # a weight times a probability may underflow
        keep = np.flatnonzero(all_probs > 0)
        opponents, branches, all_probs = [opponents[i] for i in keep], [branches[i] for i in keep], all_probs[keep]
    return MatchDistribution(agent_id, opponents, all_probs, branches)


def _pfsp(league: League, agent_id: str, candidates: list[str], weighting: str, branch: str) -> MatchDistribution:
    rates = league.payoff.win_rates(agent_id, candidates)
    p = league.config.matchmaking.pfsp_hard_exponent if weighting == "hard" else None
    return _over(agent_id, candidates, pfsp_probabilities(rates, weighting, p), branch)


def _self_play_opponents(league: League, agent_id: str) -> list[str]:
    """The current main agents (any race), or the agent itself if the league has none."""
    return league.learning_agent_ids(MAIN_AGENT) or [agent_id]


def remove_monotonic_suffix(win_rates: np.ndarray, players: list[str]):
    """Drops the tail of snapshots the agent beats ever less often.

    AlphaStar pseudocode: a tail over which win rates never increase is normal
    progress (each later snapshot is stronger), not forgetting; keep the prefix up to
    the last index i with win_rates[i-1] < win_rates[i]. Nothing is kept if none exists.
    """
    for i in range(len(win_rates) - 1, 0, -1):
        if win_rates[i - 1] < win_rates[i]:
            return win_rates[: i + 1], players[: i + 1]
    return win_rates[:0], []


# -- AlphaStar's roles ----------------------------------------------------------------


def _main_self_play(league: League, agent_id: str, opponent: str) -> MatchDistribution:
    """Self-play against `opponent`, or PFSP(variance) over its snapshots if it wins too often."""
    config = league.config.matchmaking
    if opponent == agent_id or league.payoff.win_rate(agent_id, opponent) > config.main_self_play_min_win_rate:
        return _only(agent_id, opponent, "self_play")
    snapshots = league.snapshots_of(opponent)
    if not snapshots:
        return _only(agent_id, opponent, "self_play")
    return _pfsp(league, agent_id, snapshots, "variance", "self_play_curriculum")


def _verification_exploiters(league: League, agent_id: str) -> MatchDistribution | None:
    """PFSP(squared) over past main exploiters, if the agent beats one of them < 30%."""
    snapshots = [p for parent in league.learning_agent_ids(MAIN_EXPLOITER) for p in league.snapshots_of(parent)]
    if not snapshots:
        return None
    rates = league.payoff.win_rates(agent_id, snapshots)
    if rates.min() >= league.config.matchmaking.verification_exploiter_win_rate:
        return None
    return _over(agent_id, snapshots, pfsp_probabilities(rates, "squared"), "verification_exploiters")


def _verification_forgotten(league: League, agent_id: str, opponent: str) -> MatchDistribution | None:
    """PFSP(squared) over `opponent`'s forgotten snapshots, if it beats one of them < 70%."""
    snapshots = league.snapshots_of(opponent)
    if not snapshots:
        return None
    rates, snapshots = remove_monotonic_suffix(league.payoff.win_rates(agent_id, snapshots), snapshots)
    if not len(rates) or rates.min() >= league.config.matchmaking.verification_forgotten_win_rate:
        return None
    return _over(agent_id, snapshots, pfsp_probabilities(rates, "squared"), "verification_forgotten")


def main_agent_distribution(league: League, agent_id: str) -> MatchDistribution:
    """AlphaStar's main agent: PFSP over the league, verification, self-play.

    A coin picks PFSP (w_pfsp), verification (w_ver) or self-play (the rest); the latter
    two play a main agent m drawn uniformly. Verification prefers strong past exploiters
    (whatever m is), then m's forgotten snapshots, and falls through to self-play against
    m when neither qualifies; PFSP with no historical players falls back to self-play.
    """
    config = league.config.matchmaking
    w_pfsp, w_ver = config.main_pfsp_probability, config.main_verification_probability
    w_self_play = max(0.0, 1.0 - w_pfsp - w_ver)
    historical, mains = league.historical_ids(), _self_play_opponents(league, agent_id)
    if historical:
        pfsp = _pfsp(league, agent_id, historical, config.main_pfsp_weighting, "pfsp")
    else:
        pfsp = _uniform(agent_id, mains, "self_play_fallback")
    parts = [(w_pfsp, pfsp)]
    exploiters = _verification_exploiters(league, agent_id) if w_ver > 0 else None
    if exploiters is not None:
        parts.append((w_ver, exploiters))
    for opponent in mains:
        self_play = _main_self_play(league, agent_id, opponent)
        parts.append((w_self_play / len(mains), self_play))
        if w_ver > 0 and exploiters is None:
            forgotten = _verification_forgotten(league, agent_id, opponent)
            parts.append((w_ver / len(mains), self_play if forgotten is None else forgotten))
    return _mixture(agent_id, parts)


def main_exploiter_distribution(league: League, agent_id: str) -> MatchDistribution:
    """AlphaStar's main exploiter: the current main agents, with a PFSP(variance) curriculum."""
    config = league.config.matchmaking
    mains = league.learning_agent_ids(MAIN_AGENT)
    if not mains:
        return _only(agent_id, agent_id, "self_play_fallback")
    parts = []
    for opponent in mains:
        plain = _only(agent_id, opponent, "main_agent")
        snapshots = league.snapshots_of(opponent)
        struggling = league.payoff.win_rate(agent_id, opponent) < config.main_exploiter_curriculum_win_rate
        c = config.main_exploiter_curriculum_probability if struggling and snapshots else 0.0
        if c > 0:
            parts.append((c / len(mains), _pfsp(league, agent_id, snapshots, "variance", "main_exploiter_curriculum")))
        parts.append(((1.0 - c) / len(mains), plain))
    return _mixture(agent_id, parts)


def league_exploiter_distribution(league: League, agent_id: str) -> MatchDistribution:
    """AlphaStar's league exploiter: PFSP(linear_capped) over all historical players.

    With `league_exploiter_opponents="nash"`, PSRO's best-response target instead (Lanctot
    et al. 2017, "A Unified Game-Theoretic Approach to Multiagent Reinforcement Learning",
    Alg. 1: each new policy is trained against the meta-strategy of the population): the
    opponent is drawn from the league's latest Nash mixture (`League.nash_weights`)
    restricted to historical players; PFSP until there is one. With "nash_fixed", from the
    mixture the exploiter's current life trains against (`League.nash_targets`: fixed, as each
    PSRO iteration's target is), the latest one until it has one."""
    historical = league.historical_ids()
    if not historical:
        return _uniform(agent_id, _self_play_opponents(league, agent_id), "self_play_fallback")
    mode = league.config.matchmaking.league_exploiter_opponents
    if mode in ("nash", "nash_fixed"):
        target = (mode == "nash_fixed" and league.nash_targets.get(agent_id)) or league.nash_weights
        support = [p for p in historical if target.get(p, 0.0) > 0]
        if support:
            weights = np.asarray([target[p] for p in support])
            return _over(agent_id, support, weights / weights.sum(), "nash")
    return _pfsp(league, agent_id, historical, league.config.matchmaking.league_exploiter_weighting, "pfsp")


# -- ablation arms and OpenAI Five, for main agents -------------------------------


def self_play_distribution(league: League, agent_id: str) -> MatchDistribution:
    """Naive self-play: always the agent's own latest parameters."""
    return _only(agent_id, agent_id, "self_play")


def fsp_distribution(league: League, agent_id: str) -> MatchDistribution:
    """Fictitious self-play: uniform over all historical players."""
    historical = league.historical_ids()
    if not historical:
        return _only(agent_id, agent_id, "self_play_fallback")
    return _uniform(agent_id, historical, "fsp")


def pfsp_distribution(league: League, agent_id: str) -> MatchDistribution:
    """PFSP alone over all historical players, with the main agent's weighting."""
    historical = league.historical_ids()
    if not historical:
        return _only(agent_id, agent_id, "self_play_fallback")
    return _pfsp(league, agent_id, historical, league.config.matchmaking.main_pfsp_weighting, "pfsp")


def pfsp_sp_distribution(league: League, agent_id: str) -> MatchDistribution:
    """AlphaStar Fig. 3's PFSP + SP: a fixed share of self-play, PFSP otherwise."""
    s = league.config.matchmaking.pfsp_sp_self_play_probability
    return _mixture(agent_id, [(s, _only(agent_id, agent_id, "self_play")), (1.0 - s, pfsp_distribution(league, agent_id))])


def openai_five_distribution(league: League, agent_id: str) -> MatchDistribution:
    """OpenAI Five (appendix N): 80% latest self, 20% past selves by softmax of quality."""
    past = league.snapshots_of(agent_id)
    latest = _only(agent_id, agent_id, "self_play")
    if not past:
        return latest
    q = league.config.matchmaking.openai_five_past_probability
    by_quality = _over(agent_id, past, league.quality_probabilities(agent_id), "openai_five_past")
    return _mixture(agent_id, [(1.0 - q, latest), (q, by_quality)])


MAIN_AGENT_MATCHMAKERS: dict[str, Matchmaker] = {
    "alphastar": main_agent_distribution,
    "openai_five": openai_five_distribution,
    "self_play": self_play_distribution,
    "fsp": fsp_distribution,
    "pfsp": pfsp_distribution,
    "pfsp_sp": pfsp_sp_distribution,
}
"""`alphastar` is the full main-agent rule; the rest are the ablation arms of AlphaStar's
Fig. 3c and OpenAI Five's past-self sampler (appendix N)."""
if tuple(MAIN_AGENT_MATCHMAKERS) != MAIN_AGENT_MATCHMAKER_NAMES:
    raise ImportError("league.players.MAIN_AGENT_MATCHMAKER_NAMES must list the registry's names in order")


def match_distribution(league: League, agent_id: str) -> MatchDistribution:
    """The learning agent's opponent distribution, by its role's matchmaker (main agents:
    `MAIN_AGENT_MATCHMAKERS[config.main_agent_matchmaker]`)."""
    role = league.player(agent_id).role
    if role == MAIN_AGENT:
        matchmaker = MAIN_AGENT_MATCHMAKERS[league.config.main_agent_matchmaker]
    elif role == MAIN_EXPLOITER:
        matchmaker = main_exploiter_distribution
    elif role == LEAGUE_EXPLOITER:
        matchmaker = league_exploiter_distribution
    else:
        raise ValueError(f"historical player {agent_id!r} does not learn and gets no matches")
    return matchmaker(league, agent_id)
