"""One typed configuration per run, validated at start and written to `<run_dir>/config.json`.

Rerunning with the same `--run_dir` resumes the run; the configuration must then be the
same (a different one is refused, naming the fields that differ) except for how long to
run and where the dashboard listens.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from league.players import LeagueConfig, MatchmakingConfig, SnapshotConfig

RACES = ("terran", "protoss", "zerg")
MATRIX_GAMES = ("matrix_rps", "matrix_disc", "matrix_blotto", "matrix_random")
POKER_GAMES = ("kuhn_poker", "leduc_poker")
GAMES = ("smax_races", *POKER_GAMES, *MATRIX_GAMES)
RUNNERS = ("inprocess", "ray")
# Fields that may change between the runs of one run directory.
RESUMABLE_CHANGES = ("minutes", "learner_steps", "dashboard_port", "runner", "ray_address",
                     "progress_every_seconds", "learner_groups", "actor_groups")


BUILTIN_REWARDS = ("outcome", "game", "openai_five")


# Per-game values that differ from RunConfig's defaults, measured on this machine
# (BENCHMARKS.md, "Poker"): the command line applies them to every flag not given, and
# `RunConfig.for_game` to every field not given. Leduc: learning rate 3e-4 -> 2e-3 and 32
# unrolls per update roughly halve the NashConv reached in 4 minutes; snapshots every 20k
# steps keep the league at tens of players, not hundreds.
GAME_DEFAULTS = {
    "kuhn_poker": dict(learning_rate=1e-3),
    "leduc_poker": dict(learning_rate=2e-3, learner_batch_size=32,
                        main_agent_snapshot_steps=20_000, exploiter_min_steps=20_000,
                        main_exploiter_timeout_steps=40_000, league_exploiter_timeout_steps=20_000),
}


class ConfigError(ValueError):
    """A configuration problem, with the fix in its message."""


@dataclass(frozen=True)
class RunConfig:
    game: str = "smax_races"
    races: int = 3
    runner: str = "ray"
    ray_address: str | None = None
    run_dir: str = ""
    minutes: float = 0.0  # 0: until Ctrl-C (or learner_steps)
    learner_steps: int = 0  # stop once every learner has consumed this many agent steps; 0: no limit
    seed: int = 0
    # League composition per race (AlphaStar: 1 / 1 / 2).
    main_agents_per_race: int = 1
    main_exploiters_per_race: int = 1
    league_exploiters_per_race: int = 2
    main_agent_matchmaker: str = "alphastar"
    # PFSP weightings (league/pfsp.py): main agents' PFSP branch and league exploiters; "hard"
    # is (1 - x)^p with p = pfsp_hard_exponent (AlphaStar's "squared" is p = 2).
    main_pfsp_weighting: str = "squared"
    league_exploiter_weighting: str = "linear_capped"
    pfsp_hard_exponent: float = 2.0
    # AlphaStar's pseudocode: a frozen copy of every main agent's initial parameters joins the
    # league at the start, so PFSP has opponents from the first match.
    initial_snapshots: bool = True
    # Snapshot rules, in agent steps (AlphaStar's 2e9 scaled to a laptop).
    main_agent_snapshot_steps: int = 4_000
    exploiter_min_steps: int = 4_000
    main_exploiter_timeout_steps: int = 8_000
    league_exploiter_timeout_steps: int = 4_000
    # Co-location of the program's nodes (experiments/program.py): all learners in one node
    # (one process: a laptop), one node per race, or one per agent (a cluster); actors alike.
    learner_groups: str = "all"
    actor_groups: str = "all"
    # Actors.
    actors_per_learner: int = 1
    batch_size: int = 32  # games per actor, stepped as one batch
    episodes_per_match: int = 32  # a new opponent every this many finished games
    param_refresh_seconds: float = 10.0  # AlphaStar: 10 s
    # None: OpenAI Five's shaped, zero-sum reward for SMAX (damage, kills, deaths, win 5; with
    # the outcome alone, untrained SMAX leagues play ~99% draws: no signal, measured), the
    # game's payoff (chips) for poker, the outcome (+1/0/-1) for matrix games; or "outcome",
    # "game", "openai_five" or the path of a .py file.
    reward_plugin: str | None = None
    # Learners.
    learner_batch_size: int = 16
    unroll_length: int = 16
    learning_rate: float = 3e-4
    # Weight of the entropy bonus; None: 0.1 for poker (at 0.01 the policies saturate on
    # "always bet/call" within ~100 updates, measured), 0.01 otherwise (OpenAI Five).
    entropy_cost: float | None = None
    # Off-policy learning (AlphaStar Fig. 3i ablation): the value's target, "td_lambda"
    # (AlphaStar, uncorrected) or "vtrace" (IMPALA, corrected); the UPGO term's weight.
    value_target: str = "td_lambda"
    upgo_cost: float = 1.0
    # The policy loss: "vtrace" (AlphaStar: V-trace + UPGO + TD(lambda)) or "ppo" (OpenAI Five:
    # PPO's clipped objective on GAE advantages, learners/losses.py `LossConfig.ppo`).
    policy_loss: str = "vtrace"
    # KL(teacher || policy) weight (AlphaStar's penalty for differing from the supervised
    # policy) and the teacher: "RUN_DIR:PLAYER_ID" (any saved player of a run) or a params
    # .npz file (coordinator/param_store.py format). The teacher keeps its own recurrent state.
    kl_teacher_cost: float = 0.0
    teacher: str = ""
    samples_per_insert: float = 2.0  # AlphaStar replays each datum twice
    # "client": each learner samples with Reverb's Client on a thread; "dataset": a TF
    # TrajectoryDataset per learner (faster alone, ~0.4 GB more for 12 co-located learners).
    learner_sampler: str = "client"
    replay_size: int = 256  # unrolls per table; 12 tables of SMAX unrolls (~160 KB each) share one process
    # Network sizes.
    hidden_size: int = 64
    core_size: int = 64
    # Evaluators.
    evaluators: int = 1
    evaluation_games: int = 16
    # Coordinator and dashboard.
    dashboard_port: int = 0  # 0: any free port; -1: no dashboard
    progress_every_seconds: float = 10.0
    meta_game_every_seconds: float = 10.0
    checkpoint_every_seconds: float = 30.0

    def __post_init__(self):
        if self.game not in GAMES:
            raise ConfigError(f"unknown --game {self.game!r}; allowed: {', '.join(GAMES)}")
        if self.runner == "launchpad":
            raise ConfigError(
                "--runner=launchpad is not available yet: dm-launchpad's last release (0.5.2) supports "
                "Python 3.9-3.10 and TF 2.8 only; use --runner=ray (a local instance or a cluster via "
                "--ray_address) or --runner=inprocess")
        if self.runner not in RUNNERS:
            raise ConfigError(f"unknown --runner {self.runner!r}; allowed: {', '.join(RUNNERS)}")
        if self.game == "smax_races" and not 1 <= self.races <= len(RACES):
            raise ConfigError(f"--races must be 1, 2 or 3 (the first N of {', '.join(RACES)}); got {self.races}")
        if self.game != "smax_races" and self.races != 1:
            raise ConfigError(f"--game={self.game} has one race; pass --races=1 (or leave --races out)")
        positive = ("actors_per_learner", "batch_size", "episodes_per_match", "learner_batch_size",
                    "replay_size", "hidden_size", "core_size", "evaluation_games")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name} must be at least 1; got {getattr(self, name)}")
        for name in ("learner_groups", "actor_groups"):
            if getattr(self, name) not in ("all", "race", "agent"):
                raise ConfigError(f"--{name} must be all, race or agent; got {getattr(self, name)!r}")
        if self.learner_sampler not in ("client", "dataset"):
            raise ConfigError(f"--learner_sampler must be 'client' or 'dataset'; got {self.learner_sampler!r}")
        if self.value_target not in ("td_lambda", "vtrace"):
            raise ConfigError(f"--value_target must be 'td_lambda' or 'vtrace'; got {self.value_target!r}")
        if self.upgo_cost < 0:
            raise ConfigError(f"--upgo_cost must be >= 0; got {self.upgo_cost}")
        if self.policy_loss not in ("vtrace", "ppo"):
            raise ConfigError(f"--policy_loss must be 'vtrace' or 'ppo'; got {self.policy_loss!r}")
        if self.kl_teacher_cost < 0:
            raise ConfigError(f"--kl_teacher_cost must be >= 0; got {self.kl_teacher_cost}")
        if bool(self.kl_teacher_cost) != bool(self.teacher):
            raise ConfigError("--kl_teacher_cost and --teacher go together: pass both (e.g. "
                              "--kl_teacher_cost=0.1 --teacher=RUN_DIR:PLAYER_ID) or neither")
        if self.unroll_length < 2:
            raise ConfigError(f"--unroll_length must be at least 2; got {self.unroll_length}")
        for name in ("minutes", "learner_steps", "evaluators"):
            if getattr(self, name) < 0:
                raise ConfigError(f"--{name} must be >= 0; got {getattr(self, name)}")
        if self.main_agents_per_race < 1:
            raise ConfigError("a league needs at least one main agent per race (--main_agents_per_race >= 1)")
        if self.reward_plugin and self.reward_plugin not in BUILTIN_REWARDS and not os.path.isfile(self.reward_plugin):
            raise ConfigError(f"--reward_plugin {self.reward_plugin!r} is not a file; pass the path of a .py file defining get_reward(batch, contiguous)")
        self.league_config()  # validates the league part

    @classmethod
    def for_game(cls, game: str, **values) -> RunConfig:
        """A config with the game's defaults (`GAME_DEFAULTS`) under `values`."""
        return cls(game=game, **{**GAME_DEFAULTS.get(game, {}), **values})

    @property
    def entropy(self) -> float:
        if self.entropy_cost is not None:
            return self.entropy_cost
        return 0.1 if self.game in POKER_GAMES else 0.01

    def loss_config(self):
        """The learners' `LossConfig`: "ppo" starts from OpenAI Five's Table 2
        (`LossConfig.ppo`), "vtrace" from AlphaStar's defaults; the run's weights on top."""
        from learners.losses import LossConfig

        base = LossConfig.ppo() if self.policy_loss == "ppo" else LossConfig()
        upgo = 0.0 if self.policy_loss == "ppo" else self.upgo_cost
        return dataclasses.replace(base, entropy_weight=self.entropy, value_target=self.value_target,
                                   upgo_weight=upgo, kl_teacher_weight=self.kl_teacher_cost)

    @property
    def reward(self) -> str:
        """The reward plug-in actors use (see `reward_plugin`)."""
        if self.reward_plugin:
            return self.reward_plugin
        if self.game in POKER_GAMES:
            return "game"
        return "openai_five" if self.game == "smax_races" else "outcome"

    @property
    def race_names(self) -> tuple[str, ...]:
        return RACES[: self.races] if self.game == "smax_races" else ("any",)

    def league_config(self) -> LeagueConfig:
        try:
            return LeagueConfig(
                races=self.race_names,
                main_agents_per_race=self.main_agents_per_race,
                main_exploiters_per_race=self.main_exploiters_per_race,
                league_exploiters_per_race=self.league_exploiters_per_race,
                main_agent_matchmaker=self.main_agent_matchmaker,
                initial_snapshots=self.initial_snapshots,
                matchmaking=MatchmakingConfig(
                    main_pfsp_weighting=self.main_pfsp_weighting,
                    league_exploiter_weighting=self.league_exploiter_weighting,
                    pfsp_hard_exponent=self.pfsp_hard_exponent,
                ),
                snapshots=SnapshotConfig(
                    main_agent_snapshot_steps=self.main_agent_snapshot_steps,
                    exploiter_min_steps=self.exploiter_min_steps,
                    main_exploiter_timeout_steps=self.main_exploiter_timeout_steps,
                    league_exploiter_timeout_steps=self.league_exploiter_timeout_steps,
                ),
            )
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown config keys {unknown}; allowed: {sorted(known)}")
        return cls(**data)


def prepare_run_dir(config: RunConfig) -> bool:
    """Creates the run directory and writes config.json; returns True when resuming.

    A run directory holding a different configuration is refused and left untouched.
    """
    run_dir = config.run_dir
    path = os.path.join(run_dir, "config.json")
    try:
        os.makedirs(run_dir, exist_ok=True)
        probe = os.path.join(run_dir, ".write_test")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"cannot write to the run directory {run_dir!r} ({e.strerror}); pass a writable --run_dir") from None
    if os.path.exists(path):
        try:
            with open(path) as f:
                saved = RunConfig.from_dict(json.load(f))
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{path} is not a readable run config ({e}); pass another --run_dir or fix the file") from None
        mine, theirs = config.to_dict(), saved.to_dict()
        differ = sorted(k for k in mine if k not in RESUMABLE_CHANGES and k != "run_dir" and mine[k] != theirs[k])
        if differ:
            details = ", ".join(f"{k}: saved {theirs[k]!r}, now {mine[k]!r}" for k in differ)
            raise ConfigError(
                f"--run_dir {run_dir} holds a run with a different config ({details}). "
                "Rerun with the saved flags to resume it, or pass a new --run_dir."
            )
        return True
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(config.to_dict(), f, indent=2, sort_keys=True)
    os.replace(tmp, path)
    return False
