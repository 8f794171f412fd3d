"""League core speed at 100, 1,000 and 5,000 players.

Reports get_match cost per call (median, p99) over all learning agents, payoff update
cost, Nash solve time of the meta-game over all players (the league-like one, and a random
tournament: the worst case, its Nash support about half the players), payoff memory, and the
league checkpoint (`League.state` and `coordinator.league_db.pack_state`, written at every
snapshot and reset) with every pair's payoff exact, as a poker league's is, beside the encoding
used before (arrays and exact entries as JSON lists) in the same run.
Targets on this machine: get_match p99 < 1 ms, Nash < 2 s (both cases) and a checkpoint
< 0.25 s at 1,000 players.

    python -m benchmarks.league_bench [--sizes=100,1000,5000] [--nash_max=5000]
"""

from __future__ import annotations

import time

import numpy as np
from absl import app, flags

from coordinator.league_db import pack_state
from league.league import League
from league.meta import nash_distribution
from league.payoff import Payoff
from league.players import HISTORICAL, LEARNING_ROLES, LeagueConfig, Player

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["100", "1000", "5000"], "League sizes (players) to measure.")
flags.DEFINE_integer("nash_max", 1000, "Largest league whose Nash distribution is solved.")
flags.DEFINE_integer("calls", 3000, "get_match calls measured per size.")


def build_league(num_players: int, seed: int = 0) -> League:
    """The full 3-race composition plus frozen players, with random decayed counts."""
    rng = np.random.default_rng(seed)
    league = League(LeagueConfig(), rng)
    agents = league.learning_agent_ids()
    k = 0
    while len(league.players) < num_players:
        parent = agents[k % len(agents)]
        league._add(Player(f"{parent}#b{k}", HISTORICAL, league.players[parent].race, parent=parent, step=k))
        k += 1
    n = len(league.players)
    # League-like results: later players are stronger (an Elo trend) with a strategic
    # cycle on top (a disc-game component), 20 decayed games per pair.
    elo = np.arange(n) * 1.0 + rng.normal(0, 50, n)
    angle = rng.uniform(0, 2 * np.pi, n)
    point = np.stack([np.cos(angle), np.sin(angle)], 1) * rng.uniform(0, 1, (n, 1))
    logit = (elo[:, None] - elo[None, :]) * np.log(10) / 400 + 3 * (
        point[:, :1] * point[None, :, 1] - point[:, 1:] * point[None, :, 0]
    )
    wins = (20.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    draws = np.zeros((n, n), np.float32)
    league.payoff = Payoff.from_state({"decay": 0.99, "players": list(league.players), "wins": wins, "draws": draws})
    return league


def _lists_encoding(state: dict) -> bytes:
    """The checkpoint's encoding before session 39: zlib JSON, arrays as lists, the exact
    entries as (i, j, win rate, score) rows."""
    import json
    import zlib

    payoff = dict(state["payoff"])
    pairs, rates, scores = payoff.pop("exact_pairs"), payoff.pop("exact_rates"), payoff.pop("exact_scores")
    payoff["exact"] = [(int(i), int(j), float(r), float(s)) for (i, j), r, s in zip(pairs, rates, scores)]

    def lists(value):
        if isinstance(value, np.ndarray):
            return {"__array__": value.tolist(), "dtype": str(value.dtype)}
        if isinstance(value, dict):
            return {k: lists(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [lists(v) for v in value]
        return value.item() if isinstance(value, np.generic) else value
    return zlib.compress(json.dumps(lists({**state, "payoff": payoff})).encode(), 1)


def checkpoint_seconds(league: League) -> tuple[float, float]:
    """(seconds to checkpoint the league with every pair exact, the same in the earlier
    encoding), each the median of 3 (measured up to --nash_max players)."""
    n = len(league.players)
    pairs = np.argwhere(np.triu(np.ones((n, n), bool))).astype(np.int32)
    rates = np.random.default_rng(3).uniform(0, 1, len(pairs))
    league.payoff = Payoff.from_state({**league.payoff.state(), "exact_pairs": pairs, "exact_rates": rates,
                                       "exact_scores": 2 * rates - 1})
    now, before = [], []
    for _ in range(3):
        t = time.perf_counter()
        pack_state({"league": league.state(), "last_game_id": 0})
        now.append(time.perf_counter() - t)
        t = time.perf_counter()
        _lists_encoding(league.state())
        before.append(time.perf_counter() - t)
    return float(np.median(now)), float(np.median(before))


def measure(num_players: int, calls: int, nash_max: int) -> dict:
    league = build_league(num_players)
    agents = league.learning_agent_ids()
    for agent in agents:  # warm up
        league.get_match(agent)
    per_call = []
    for i in range(calls):
        agent = agents[i % len(agents)]
        t = time.perf_counter()
        league.get_match(agent)
        per_call.append(time.perf_counter() - t)
    per_call = np.array(per_call) * 1e3
    ids = list(league.players)
    rng = np.random.default_rng(1)
    pairs = rng.integers(len(ids), size=(calls, 2))
    t = time.perf_counter()
    for h, a in pairs:
        league.record_result(ids[h], ids[a], "win")
    update_us = (time.perf_counter() - t) / calls * 1e6
    nash_s = nash_random_s = float("nan")
    if num_players <= nash_max:
        matrix = league.payoff.win_rate_matrix()
        t = time.perf_counter()
        nash_distribution(matrix)
        nash_s = time.perf_counter() - t
        # Worst case: a random tournament, whose Nash support is about half the players.
        w = np.random.default_rng(2).gamma(1.0, 2.0, (num_players, num_players))
        random_matrix = w / (w + w.T)
        t = time.perf_counter()
        nash_distribution(random_matrix)
        nash_random_s = time.perf_counter() - t
    by_role = {
        role: float(np.median(per_call[[i for i in range(calls) if league.players[agents[i % len(agents)]].role == role]]))
        for role in LEARNING_ROLES
    }
    return {
        "players": num_players,
        "get_match_median_ms": float(np.median(per_call)),
        "get_match_p99_ms": float(np.percentile(per_call, 99)),
        "by_role_median_ms": by_role,
        "update_us": update_us,
        "nash_s": nash_s,
        "nash_random_s": nash_random_s,
        "payoff_mb": league.payoff.nbytes / 2**20,
        **dict(zip(("checkpoint_s", "checkpoint_lists_s"),
                   checkpoint_seconds(league) if num_players <= nash_max else (float("nan"),) * 2)),
    }


def main(argv):
    del argv
    results = {}
    print("| players | get_match median (ms) | get_match p99 (ms) | payoff update (us) | Nash, league-like (s) "
          "| Nash, random tournament (s) | payoff memory (MB) | checkpoint, all pairs exact (s) | the same, as JSON lists (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in map(int, FLAGS.sizes):
        r = measure(size, FLAGS.calls, FLAGS.nash_max)
        results[size] = r
        print(
            f"| {size} | {r['get_match_median_ms']:.3f} | {r['get_match_p99_ms']:.3f} | "
            f"{r['update_us']:.1f} | {r['nash_s']:.3f} | {r['nash_random_s']:.2f} | {r['payoff_mb']:.1f} | "
            f"{r['checkpoint_s']:.3f} | {r['checkpoint_lists_s']:.3f} |",
            flush=True,
        )
    ref = results.get(1000) or results[max(results)]
    ratios = {
        "get_match": ref["get_match_p99_ms"] / 1.0,
        "nash": ref["nash_s"] / 2.0,
        "nash_random": ref["nash_random_s"] / 2.0,
        "checkpoint": ref["checkpoint_s"] / 0.25,
    }
    print(
        f"limits at {ref['players']} players: get_match p99 {ref['get_match_p99_ms']:.3f} ms / 1 ms = "
        f"{ratios['get_match']:.2f}; Nash {ref['nash_s']:.2f} s / 2 s = {ratios['nash']:.2f}; "
        f"Nash, random tournament {ref['nash_random_s']:.2f} s / 2 s = {ratios['nash_random']:.2f}; "
        f"checkpoint {ref['checkpoint_s']:.3f} s / 0.25 s = {ratios['checkpoint']:.2f} (as JSON lists, "
        f"same run: {ref['checkpoint_lists_s']:.3f} s, {ref['checkpoint_lists_s'] / ref['checkpoint_s']:.1f}x)"
    )
    # ratio: the worst of the four (nan, i.e. not measured, counts as missing).
    print(
        f"RESULT league get_match_p99_ms={ref['get_match_p99_ms']:.3f} nash_1000_s={ref['nash_s']:.2f} "
        f"nash_random_1000_s={ref['nash_random_s']:.2f} nash_random_ratio={ratios['nash_random']:.2f} "
        f"checkpoint_1000_s={ref['checkpoint_s']:.3f} checkpoint_lists_1000_s={ref['checkpoint_lists_s']:.3f} "
        f"ratio={np.nanmax(list(ratios.values())):.2f} target=1.0"
    )


if __name__ == "__main__":
    app.run(main)
