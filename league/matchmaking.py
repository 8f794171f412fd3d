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

Every function takes the league's read-only view, the agent and a numpy Generator
and returns a `Match`. With no candidates a branch falls back to self-play.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from league.pfsp import pfsp_probabilities
from league.players import MAIN_AGENT, MAIN_EXPLOITER

if TYPE_CHECKING:
    from league.league import League


@dataclass(frozen=True)
class Match:
    """The opponent picked for `agent_id`, and the matchmaking branch that picked it."""

    agent_id: str
    opponent_id: str
    branch: str


def _pfsp_pick(league: League, agent_id: str, candidates: list[str], weighting: str, rng) -> str:
    rates = league.payoff.win_rates(agent_id, candidates)
    p = league.config.matchmaking.pfsp_hard_exponent if weighting == "hard" else None
    probs = pfsp_probabilities(rates, weighting, p)
    return candidates[rng.choice(len(candidates), p=probs)]


def _self_play_opponent(league: League, agent_id: str, rng) -> str:
    """A current main agent (any race), or the agent itself if the league has none."""
    mains = league.learning_agent_ids(MAIN_AGENT)
    return mains[rng.integers(len(mains))] if mains else agent_id


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


def _main_self_play_branch(league: League, agent_id: str, opponent: str, rng) -> Match:
    config = league.config.matchmaking
    if opponent == agent_id or league.payoff.win_rate(agent_id, opponent) > config.main_self_play_min_win_rate:
        return Match(agent_id, opponent, "self_play")
    snapshots = league.snapshots_of(opponent)
    if not snapshots:
        return Match(agent_id, opponent, "self_play")
    return Match(agent_id, _pfsp_pick(league, agent_id, snapshots, "variance", rng), "self_play_curriculum")


def _main_verification_branch(league: League, agent_id: str, opponent: str, rng) -> Match | None:
    config = league.config.matchmaking
    exploiter_snapshots = [
        p for parent in league.learning_agent_ids(MAIN_EXPLOITER) for p in league.snapshots_of(parent)
    ]
    if exploiter_snapshots:
        rates = league.payoff.win_rates(agent_id, exploiter_snapshots)
        if rates.min() < config.verification_exploiter_win_rate:
            probs = pfsp_probabilities(rates, "squared")
            return Match(agent_id, exploiter_snapshots[rng.choice(len(rates), p=probs)], "verification_exploiters")
    snapshots = league.snapshots_of(opponent)
    if snapshots:
        rates, snapshots = remove_monotonic_suffix(league.payoff.win_rates(agent_id, snapshots), snapshots)
        if len(rates) and rates.min() < config.verification_forgotten_win_rate:
            probs = pfsp_probabilities(rates, "squared")
            return Match(agent_id, snapshots[rng.choice(len(rates), p=probs)], "verification_forgotten")
    return None


def main_agent_match(league: League, agent_id: str, rng: np.random.Generator) -> Match:
    """AlphaStar's main agent: PFSP over the league, verification, self-play."""
    config = league.config.matchmaking
    coin = rng.random()
    historical = league.historical_ids()
    if coin < config.main_pfsp_probability:
        if historical:
            return Match(agent_id, _pfsp_pick(league, agent_id, historical, config.main_pfsp_weighting, rng), "pfsp")
        return Match(agent_id, _self_play_opponent(league, agent_id, rng), "self_play_fallback")
    opponent = _self_play_opponent(league, agent_id, rng)
    if coin < config.main_pfsp_probability + config.main_verification_probability:
        match = _main_verification_branch(league, agent_id, opponent, rng)
        if match is not None:
            return match
    return _main_self_play_branch(league, agent_id, opponent, rng)


def main_exploiter_match(league: League, agent_id: str, rng: np.random.Generator) -> Match:
    """AlphaStar's main exploiter: the current main agents, with a PFSP(variance) curriculum."""
    config = league.config.matchmaking
    mains = league.learning_agent_ids(MAIN_AGENT)
    if not mains:
        return Match(agent_id, agent_id, "self_play_fallback")
    opponent = mains[rng.integers(len(mains))]
    struggling = league.payoff.win_rate(agent_id, opponent) < config.main_exploiter_curriculum_win_rate
    snapshots = league.snapshots_of(opponent)
    if struggling and snapshots and rng.random() < config.main_exploiter_curriculum_probability:
        return Match(agent_id, _pfsp_pick(league, agent_id, snapshots, "variance", rng), "main_exploiter_curriculum")
    return Match(agent_id, opponent, "main_agent")


def league_exploiter_match(league: League, agent_id: str, rng: np.random.Generator) -> Match:
    """AlphaStar's league exploiter: PFSP(linear_capped) over all historical players."""
    historical = league.historical_ids()
    if not historical:
        return Match(agent_id, _self_play_opponent(league, agent_id, rng), "self_play_fallback")
    weighting = league.config.matchmaking.league_exploiter_weighting
    return Match(agent_id, _pfsp_pick(league, agent_id, historical, weighting, rng), "pfsp")


# -- ablation arms and OpenAI Five, for main agents -------------------------------


def self_play_match(league: League, agent_id: str, rng) -> Match:
    """Naive self-play: always the agent's own latest parameters."""
    return Match(agent_id, agent_id, "self_play")


def fsp_match(league: League, agent_id: str, rng) -> Match:
    """Fictitious self-play: uniform over all historical players."""
    historical = league.historical_ids()
    if not historical:
        return Match(agent_id, agent_id, "self_play_fallback")
    return Match(agent_id, historical[rng.integers(len(historical))], "fsp")


def pfsp_match(league: League, agent_id: str, rng) -> Match:
    """PFSP alone over all historical players, with the main agent's weighting."""
    historical = league.historical_ids()
    if not historical:
        return Match(agent_id, agent_id, "self_play_fallback")
    weighting = league.config.matchmaking.main_pfsp_weighting
    return Match(agent_id, _pfsp_pick(league, agent_id, historical, weighting, rng), "pfsp")


def pfsp_sp_match(league: League, agent_id: str, rng) -> Match:
    """AlphaStar Fig. 3's PFSP + SP: a fixed share of self-play, PFSP otherwise."""
    if rng.random() < league.config.matchmaking.pfsp_sp_self_play_probability:
        return Match(agent_id, agent_id, "self_play")
    return pfsp_match(league, agent_id, rng)


def openai_five_match(league: League, agent_id: str, rng) -> Match:
    """OpenAI Five (appendix N): 80% latest self, 20% past selves by softmax of quality."""
    config = league.config.matchmaking
    past = league.snapshots_of(agent_id)
    if not past or rng.random() >= config.openai_five_past_probability:
        return Match(agent_id, agent_id, "self_play")
    probs = league.quality_probabilities(agent_id)
    return Match(agent_id, past[rng.choice(len(past), p=probs)], "openai_five_past")


MAIN_AGENT_MATCHMAKERS = {
    "alphastar": main_agent_match,
    "openai_five": openai_five_match,
    "self_play": self_play_match,
    "fsp": fsp_match,
    "pfsp": pfsp_match,
    "pfsp_sp": pfsp_sp_match,
}
