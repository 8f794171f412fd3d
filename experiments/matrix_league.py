"""A whole league on a matrix game, in one process: the league rules on exact payoffs.

Each learning agent's parameters are a strategy of the game: logits of a mixed
strategy (rock-paper-scissors, Blotto, a random non-transitive game) or a point of the
unit disc (the disc game). Every iteration each learning agent asks the league for an
opponent, plays `games_per_match` sampled games against it (the results go into the
league's payoff matrix), and takes `updates_per_match` gradient-ascent steps on its
exact expected payoff against that opponent. Snapshots and resets follow the league
rules with step counts measured in games played.

What is measured, exactly, in the full game (not just among the league's players):
- the exploitability of the league's Nash mixture: the Nash distribution of the
  meta-game over all players (from their exact win rates, as ideal evaluators would
  give), mixed into one strategy, against the game's best response;
- the exploitability of the current main agent.
Both are in win-rate units (best response's win rate - 1/2), as `league.meta`.

    python -m experiments.matrix_league --game=disc --matchmaker=league
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
from absl import app, flags

from actors.games import matrix_games
from coordinator.coordinator import Coordinator, CoordinatorConfig
from coordinator.history import DB_NAME
from league.meta import nash_distribution
from league.players import MAIN_AGENT, LeagueConfig, SnapshotConfig
from league.results import GameResult

MATCHMAKERS = ("self_play", "fsp", "pfsp", "pfsp_sp", "league")


@dataclass(frozen=True)
class MatrixLeagueConfig:
    game: str = "disc"
    matchmaker: str = "league"
    iterations: int = 200
    seed: int = 0
    games_per_match: int = 20
    updates_per_match: int = 1
    learning_rate: float = 0.1
    snapshot_every_games: int = 200
    # Total learner updates of the run, summed over learning agents; the same for every
    # matchmaker so that a league with four learners runs a quarter of the iterations.
    budget_updates: int | None = None
    # Write payoff, Nash and ratings to the run's history every this many iterations (0: never).
    publish_every: int = 0

    def __post_init__(self):
        if self.game not in matrix_games.GAMES:
            raise ValueError(f"unknown --game {self.game!r}; allowed: {', '.join(matrix_games.GAMES)}")
        if self.matchmaker not in MATCHMAKERS:
            raise ValueError(f"unknown --matchmaker {self.matchmaker!r}; allowed: {', '.join(MATCHMAKERS)}")
        for name in ("iterations", "games_per_match", "updates_per_match", "snapshot_every_games"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be positive; got {getattr(self, name)}")


def league_config(config: MatrixLeagueConfig) -> LeagueConfig:
    """One race; self-play-style arms have only a main agent, `league` the full composition."""
    every = config.snapshot_every_games
    snapshots = SnapshotConfig(
        main_agent_snapshot_steps=every,
        exploiter_min_steps=every,
        main_exploiter_timeout_steps=2 * every,
        league_exploiter_timeout_steps=2 * every,
    )
    if config.matchmaker == "league":
        return LeagueConfig(races=("any",), snapshots=snapshots)
    return LeagueConfig(
        races=("any",), main_exploiters_per_race=0, league_exploiters_per_race=0,
        main_agent_matchmaker=config.matchmaker, snapshots=snapshots,
    )


class StrategySpace:
    """Strategies of one game: their initial value, mixing, payoffs and gradient steps."""

    def __init__(self, game: str, rng: np.random.Generator):
        self.is_disc = game == "disc"
        self.game = None if self.is_disc else matrix_games.FINITE_GAMES[game]()
        if self.is_disc:
            angle = rng.uniform(0, 2 * np.pi)
            self.initial = 0.3 * np.array([np.cos(angle), np.sin(angle)])
        else:
            self.initial = rng.normal(0.0, 1.0, self.game.num_actions)

    def strategy(self, params: np.ndarray) -> np.ndarray:
        """The point (disc) or mixed strategy (softmax of logits) a parameter vector plays."""
        if self.is_disc:
            return params
        e = np.exp(params - params.max())
        return e / e.sum()

    def payoff(self, x: np.ndarray, y: np.ndarray) -> float:
        return matrix_games.disc_payoff(x, y) if self.is_disc else self.game.payoff(x, y)

    def payoff_matrix(self, strategies: np.ndarray) -> np.ndarray:
        if self.is_disc:
            return strategies @ matrix_games.DISC_MATRIX @ strategies.T
        return strategies @ self.game.payoff_matrix @ strategies.T

    def ascend(self, params: np.ndarray, opponent: np.ndarray, lr: float) -> np.ndarray:
        """One ascent step on payoff(strategy(params), opponent).

        Disc: projected gradient ascent. Mixed strategies: exponentiated gradient
        (Hedge, mirror ascent on the simplex), logits += lr * M y; plain gradients
        through a softmax vanish as the strategy saturates and the agent would freeze.
        """
        if self.is_disc:
            return matrix_games.project_to_disc(params + lr * matrix_games.disc_payoff_gradient(opponent))
        logits = params + lr * self.game.payoff_gradient(opponent)
        return logits - logits.max()

    def exploitability(self, mixture_strategy: np.ndarray) -> float:
        """Best response's win rate against the strategy, minus 1/2."""
        if self.is_disc:
            return 0.5 * matrix_games.disc_best_response_payoff(mixture_strategy)
        return 0.5 * self.game.best_response_payoff(mixture_strategy)


@dataclass
class IterationReport:
    iteration: int
    league_size: int
    nash_exploitability: float
    main_exploitability: float
    main_strategy: np.ndarray


class StrategyLearner:
    """A learning agent of the matrix league: the learner-node surface the coordinator polls."""

    def __init__(self, initial: np.ndarray):
        self.strategy_params = initial.copy()
        self.agent_steps = 0
        self.version = 0

    def steps(self) -> int:
        return self.agent_steps

    def snapshot(self) -> tuple[int, dict]:
        return self.version, {"strategy": self.strategy_params.copy()}

    def reset(self, params: dict) -> int:
        self.strategy_params = np.array(params["strategy"])
        self.version += 1
        return self.version


def run(config: MatrixLeagueConfig, report=None, run_dir: str | None = None) -> list[IterationReport]:
    """Runs one league through the real coordinator (SQLite history in `run_dir`, or a
    temporary directory); calls `report(IterationReport)` after every iteration."""
    if run_dir is None:
        with tempfile.TemporaryDirectory() as tmp:
            return run(config, report, tmp)
    if os.path.exists(os.path.join(run_dir, DB_NAME)):
        raise ValueError(f"{run_dir} already holds a league history; pass a new --run_dir")
    rng = np.random.default_rng(config.seed)
    space = StrategySpace(config.game, rng)
    coordinator = Coordinator(
        league_config(config), run_dir, seed=config.seed,
        # a row per game: a demonstration of a few thousand games, whose history the
        # dashboard's tests read game by game
        config=CoordinatorConfig(meta_game_every_seconds=float("inf"), checkpoint_every_seconds=float("inf"),
                                 per_game_rows=True),
    )
    agents = coordinator.agent_ids()
    learners = {agent: StrategyLearner(space.initial) for agent in agents}
    coordinator.set_learners(learners)
    for agent in agents:
        coordinator.store_initial_params(agent, {"strategy": space.initial})
    iterations = config.iterations
    if config.budget_updates is not None:
        iterations = max(1, config.budget_updates // (len(agents) * config.updates_per_match))
    (main,) = coordinator.league.learning_agent_ids(MAIN_AGENT)

    def strategy_of(player_id: str) -> np.ndarray:
        if player_id in learners:
            return space.strategy(learners[player_id].strategy_params)
        return space.strategy(coordinator.params.load(player_id)[1]["strategy"])

    reports = []
    for it in range(iterations):
        for agent in agents:
            match = coordinator.request_match(agent)
            opponent = match.opponent_id
            mine, theirs = strategy_of(agent), strategy_of(opponent)
            win_p = 0.5 * (1.0 + space.payoff(mine, theirs))
            coordinator.report([
                GameResult.one(agent, opponent, "win" if won else "loss", length=1,
                               branch=match.branch, actor_id="matrix")
                for won in rng.random(config.games_per_match) < win_p
            ])
            learner = learners[agent]
            for _ in range(config.updates_per_match):
                learner.strategy_params = space.ascend(learner.strategy_params, theirs, config.learning_rate)
                learner.version += 1
            learner.agent_steps += config.games_per_match
        coordinator.poll()
        players = list(coordinator.league.players)
        strategies = np.stack([strategy_of(p) for p in players])
        win_rates = 0.5 * (1.0 + space.payoff_matrix(strategies))
        nash = nash_distribution(np.clip(win_rates, 0.0, 1.0))
        entry = IterationReport(
            iteration=it,
            league_size=len(coordinator.league.historical_ids()),
            nash_exploitability=space.exploitability(nash @ strategies),
            main_exploitability=space.exploitability(strategy_of(main)),
            main_strategy=strategy_of(main).copy(),
        )
        reports.append(entry)
        if config.publish_every and (it % config.publish_every == 0 or it == iterations - 1):
            coordinator.publish_meta_game()
        if report is not None:
            report(entry)
    coordinator.close()
    return reports


def compare(base: MatrixLeagueConfig, seeds: list[int]) -> dict[str, dict[str, float]]:
    """Every matchmaker on the same total update budget and seeds; means over seeds."""
    budget = base.budget_updates or base.iterations
    table = {}
    for matchmaker in MATCHMAKERS:
        runs = [
            run(dataclasses.replace(base, matchmaker=matchmaker, seed=s, budget_updates=budget))
            for s in seeds
        ]
        finals = [r[-1] for r in runs]
        table[matchmaker] = {
            "mean_nash_exploitability": float(np.mean([[e.nash_exploitability for e in r] for r in runs])),
            "nash_exploitability": float(np.mean([f.nash_exploitability for f in finals])),
            "main_exploitability": float(np.mean([f.main_exploitability for f in finals])),
            "league_size": float(np.mean([f.league_size for f in finals])),
        }
    return table


def format_table(game: str, table: dict[str, dict[str, float]], seeds: list[int]) -> str:
    lines = [
        f"game={game} seeds={seeds} (exploitability in win-rate units; 0 is unexploitable, 0.5 always loses to a best response)",
        "| matchmaker | Nash mixture exploitability, mean over the run | at the end | main agent exploitability at the end | snapshots |",
        "|---|---|---|---|---|",
    ]
    for name, row in table.items():
        lines.append(
            f"| {name} | {row['mean_nash_exploitability']:.3f} | {row['nash_exploitability']:.3f} | {row['main_exploitability']:.3f} | {row['league_size']:.0f} |"
        )
    return "\n".join(lines)


FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the command-line flags (only when run as a program, so importing this module
    for its functions registers no flags)."""
    flags.DEFINE_enum("game", "disc", list(matrix_games.GAMES), "The matrix game: rps, blotto, random (non-transitive) or disc.")
    flags.DEFINE_enum("matchmaker", "league", list(MATCHMAKERS), "Opponent selection: naive self-play, FSP, PFSP, PFSP+SP, or the full AlphaStar league (main agent, main exploiter, two league exploiters).")
    flags.DEFINE_integer("iterations", 200, "Iterations of the run (every learning agent plays one match per iteration).")
    flags.DEFINE_integer("seed", 0, "Random seed (initial strategy, matchmaking, sampled game outcomes).")
    flags.DEFINE_integer("games_per_match", 20, "Games sampled per match; their outcomes feed the payoff matrix.")
    flags.DEFINE_float("learning_rate", 0.1, "Gradient-ascent step size on the exact expected payoff.")
    flags.DEFINE_integer("snapshot_every_games", 200, "Games between a main agent's snapshots (exploiters: minimum games, with a timeout of twice that).")
    flags.DEFINE_string("run_dir", None, "If set, the league's history (league.db: players, games, payoff, Nash, ratings) is kept here, for the dashboard.")
    flags.DEFINE_integer("publish_every", 10, "With --run_dir: write payoff, Nash and ratings to the history every this many iterations.")
    flags.DEFINE_integer("compare_seeds", 3, "At the end, compare every matchmaker on the same budget over this many seeds (0 to skip).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}; see --help")
    try:
        config = MatrixLeagueConfig(
            game=FLAGS.game, matchmaker=FLAGS.matchmaker, iterations=FLAGS.iterations,
            seed=FLAGS.seed, games_per_match=FLAGS.games_per_match,
            learning_rate=FLAGS.learning_rate, snapshot_every_games=FLAGS.snapshot_every_games,
            publish_every=FLAGS.publish_every if FLAGS.run_dir else 0,
        )
        if FLAGS.run_dir and os.path.exists(os.path.join(FLAGS.run_dir, DB_NAME)):
            raise ValueError(f"{FLAGS.run_dir} already holds a league history; pass a new --run_dir")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    def show(r: IterationReport):
        print(
            f"iter {r.iteration:4d}  league size {r.league_size:4d}  "
            f"Nash mixture exploitability {r.nash_exploitability:.3f}  "
            f"main agent exploitability {r.main_exploitability:.3f}",
            flush=True,
        )

    print(f"matrix league: game={config.game} matchmaker={config.matchmaker} iterations={config.iterations}")
    run(config, show, FLAGS.run_dir)
    if FLAGS.run_dir:
        print(f"league history written to {os.path.join(FLAGS.run_dir, DB_NAME)}")
    if FLAGS.compare_seeds > 0:
        seeds = list(range(FLAGS.compare_seeds))
        print(f"\ncomparing matchmakers on the same budget ({config.iterations} updates in total) ...", flush=True)
        print(format_table(config.game, compare(config, seeds), seeds))
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
