"""The actors' configuration: one frozen dataclass (no JAX, Reverb or TF at import), the run's
`actor.*` settings (experiments/config.py: `RunConfig.actor`) and what an `actors.actor.Actor`
takes.

Who reads what: on the replay path actors play the games (all of it); on the device path the
learners play their own games and read the settings of the games themselves, whoever plays them
(`param_refresh_seconds` for learning opponents, the reward and its team spirit, z's
pseudo-rewards); `experiments.program.unread_settings` refuses the others there.
"""

from __future__ import annotations

import dataclasses

from league.settings import setting


@dataclasses.dataclass(frozen=True)
class ActorConfig:
    per_learner: int = setting(1, "replay path: actors per learning agent, each playing actor.batch_size games at once")
    batch_size: int = setting(32, "replay path: games per actor, stepped as one batch with one jitted policy step")
    episodes_per_match: int = setting(
        32, "replay path: finished games before an actor asks the coordinator for a new opponent")
    param_refresh_seconds: float = setting(
        10.0, "seconds between refreshes of the parameters of learning players, an actor's own and "
        "its opponent's (AlphaStar: 10)")
    reward_plugin: str | None = setting(
        None, "the training reward: \"outcome\", \"game\" (the game's own rewards), \"openai_five\" "
        "(OpenAI Five's shaped, zero-sum reward), or the path of a .py plug-in; None: the game's "
        "choice (OpenAI Five's for SMAX, whose untrained leagues play ~99% draws on the outcome "
        "alone; the chips for poker; the outcome for matrix games)")
    fused: bool = setting(
        True, "replay path, JAX games: an actor plays an unroll as one jitted scan of policy and game steps")
    team_spirit_start: float = setting(
        0.3, "OpenAI Five's team spirit tau of the openai_five reward at the start (each unit's "
        "reward is (1 - tau) its own + tau the team's mean; OpenAI Five's rerun: 0.3)")
    team_spirit_end: float = setting(
        0.8, "team spirit tau of the openai_five reward after its annealing (OpenAI Five's rerun: 0.8)")
    team_spirit_updates: int = setting(
        2_000, "learner updates over which team spirit anneals linearly from its start to its end (0: end at once)")
    z_reward_probability: float = setting(
        0.25, "main agents conditioned on the game's statistic z: the chance that each pseudo-reward "
        "for following z is active in a game (AlphaStar: 25%)")
    # Set by the run (experiments/config.py: DERIVED, `RunConfig.actor_config`), not flags.
    unroll_length: int = setting(32, "steps per unroll written to the replay table (the learner's unroll_length)")
    seed: int = setting(0, "seed of the actor's games and actions")
    # The actor's internals, not flags.
    write_queue: int = setting(2, "unroll batches waiting for the Reverb writer thread")
    params_timeout: float = setting(60.0, "seconds an actor waits for parameters at a match start")
    def __post_init__(self):
        if self.unroll_length < 2:
            raise ValueError("unroll_length must be >= 2 (one step to learn, one to bootstrap)")
        for name in ("per_learner", "batch_size", "episodes_per_match", "write_queue"):
            if getattr(self, name) < 1:
                raise ValueError(f"--actor.{name} must be at least 1; got {getattr(self, name)}")
        for name in ("param_refresh_seconds", "params_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--actor.{name} must be > 0; got {getattr(self, name)}")
        for name in ("team_spirit_start", "team_spirit_end", "z_reward_probability"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--actor.{name} must be in [0, 1]; got {getattr(self, name)}")
        if self.team_spirit_updates < 0:
            raise ValueError(f"--actor.team_spirit_updates must be >= 0; got {self.team_spirit_updates}")

    @property
    def team_spirit(self) -> tuple[float, float, int]:
        return self.team_spirit_start, self.team_spirit_end, self.team_spirit_updates
