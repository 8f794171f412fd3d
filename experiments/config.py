"""One typed, nested configuration per run, validated at start and written to
`<run_dir>/config.json`.

    RunConfig                 the run: game, races, runner, how long, where, ...
      .network                NetworkSettings       sizes of the agents' network
      .league                 league.players.LeagueConfig (.matchmaking, .snapshots)
      .learner                learners.config.LearnerConfig (.loss: LossConfig, .replay: ReplayConfig)
      .actor                  actors.config.ActorConfig  (the actors' own configuration)
      .evaluator              EvaluatorSettings
      .supervised             SupervisedStartSettings  the automatic supervised start (SMAX)

Every leaf field is a command-line flag named by its path (`--learner.loss.entropy_weight`,
`--league.snapshots.main_agent_snapshot_steps`, ...; `fields()` lists them, and each field
carries its help: `league.settings.setting(default, help)`, read by `help_text`); the short
names that docs/running.md's commands use stay as aliases (`ALIASES`: `--batch_size` is
`--actor.batch_size`). `RunConfig.make(**values)` takes either
spelling, applies the game's measured defaults (`Capabilities.defaults`) under them, and a PPO preset
when `learner.loss.policy_loss` is "ppo". config.json holds the nested dict; `from_dict`
round-trips it (and reads the flat config.json of earlier versions: `EARLIER_NAMES`). Rerunning with the same
`--run_dir` resumes the run; the configuration must then be the same (a different one is
refused, naming the fields that differ) except for `RESUMABLE_CHANGES`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from dataclasses import dataclass, field
from typing import Any

from actors.config import ActorConfig
from actors.games.base import Game
from actors.games.registry import BUILTINS, DEFAULT_GAME, UnknownGame, resolve
from league.players import LeagueConfig, SnapshotConfig
from league.settings import help_of, setting

RUNNERS = ("inprocess", "ray", "launchpad")
EXPERIENCE = ("auto", "device", "replay")
COLOCATIONS = ("all", "race", "agent")
BUILTIN_REWARDS = ("outcome", "game", "openai_five")
# Fields that may change between the runs of one run directory.
RESUMABLE_CHANGES = ("minutes", "learner_steps", "experience", "device.updates_per_chunk",
                     "device.opponent_slots", "device.threads", "device.evaluation_pairs", "device.scripted_slots", "device.scripted_task_slots", "device.scripted_task_levels", "device.main_agent_chunks", "device.population", "device.population_parts", "dashboard_port", "runner", "ray_address",
                     "progress_every_seconds", "backup_every_seconds", "per_game_rows", "learner_groups", "actor_groups", "supervised.cache_dir",
                     "ray.learner_gpus", "ray.learner_resource", "ray.actor_resource",
                     "ray.spread", "ray.ship_code", "ray.gpu_memory_fraction")
# Leaves that are not flags: the league's races come from --game/--races, each learner's
# table is named after its agent, the actors' unroll length is the learner's and their seed the
# run's (`RunConfig.actor_config`); the actors' writer queue and parameter timeout are internals.
DERIVED = ("league.races", "learner.replay.table", "actor.unroll_length", "actor.seed",
           "actor.write_queue", "actor.params_timeout")

# Each game's measured defaults live with its registration (`Capabilities.defaults`,
# actors/games/registry.py) and apply under the flags given.

# A game whose defaults set no snapshot cadence (a game nobody tuned) snapshots and times out
# after these many learner updates (x batch x unroll steps), so its league grows with what it
# learns however fast its games run: Kuhn's measured cadence (40k steps at 16 x 16 steps per
# update) is ~160 updates. The laptop default of 4,000 steps (~16 updates) gave a Kuhn-sized
# game ~2 snapshots a second and 369-445 players after 2 minutes.
UNTUNED_SNAPSHOT_UPDATES = {"league.snapshots.main_agent_snapshot_steps": 160,
                            "league.snapshots.exploiter_min_steps": 160,
                            "league.snapshots.main_exploiter_timeout_steps": 320,
                            "league.snapshots.league_exploiter_timeout_steps": 160}


# Settings by the accelerator the learners run on, applied where not given (experiments.league:
# `device_defaults`). CPU keeps the measured laptop defaults (batch 16 per agent: on 2 cores a
# larger batch adds no learnt steps/s). On a GPU or TPU a chunk fills the device: one SMAX
# learner's update learnt 81k / 1.03M / 1.51M steps/s at B = 16 / 256 / 1024 on an H100
# (docs/devices.md), so each agent plays and learns from 256 games per update there. The
# learning rate is not scaled with the batch (AlphaStar and IMPALA keep Adam's rate at large
# batches); set --learner.learning_rate with it when the batch is changed by hand.
# The population program (`device.population`) is for accelerators: on this 2-core CPU it
# measured 0.53x the learnt steps/s of one program per agent on two threads (Kuhn's league,
# benchmarks/population_bench.py), so CPU keeps one program per agent.
DEVICE_DEFAULTS = {"cpu": {},
                   "gpu": {"learner.batch_size": 256, "device.population": True},
                   "tpu": {"learner.batch_size": 256, "device.population": True}}


def device_defaults(config: RunConfig, backend: str, given: set[str]) -> tuple[RunConfig, str]:
    """The config with `DEVICE_DEFAULTS[backend]` for the settings not `given` (field paths), and
    the first screen's line saying what was chosen and why."""
    chosen = {k: v for k, v in DEVICE_DEFAULTS.get(backend, {}).items() if k not in given}
    if chosen:
        config = _build_over(config, _nest(chosen))
    batch = config.learner.batch_size
    why = ("given" if "learner.batch_size" in given else
           "a chunk fills the accelerator" if chosen else "the measured CPU default")
    programs = ("one program for the agents that share a network (--device.population)"
                if config.device.population else "one program per agent (--device.population=false)")
    return config, (f"device: {backend}: learner batch {batch} games per agent ({why}; "
                    f"--learner.batch_size sets it); {programs}")


def _nest(paths: dict) -> dict:
    """{"a.b": v} -> {"a": {"b": v}}."""
    nested: dict = {}
    for path, value in paths.items():
        node = nested
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return nested


def untuned_defaults(game: Game, settings: dict) -> dict:
    """Settings for what `game` does not set itself, from `settings` (its defaults and the flags
    given): snapshot cadences in learner updates (`UNTUNED_SNAPSHOT_UPDATES`), and for a game
    without units whose observations are flat vectors, the MLP network (no LSTM: an observation
    that is the whole state, as a board or an information state, needs no memory)."""
    out = {}
    if not any(k in game.capabilities.defaults for k in UNTUNED_SNAPSHOT_UPDATES):
        learner = _run_learner()
        steps = (settings.get("learner.batch_size", learner.batch_size)
                 * settings.get("learner.unroll_length", learner.unroll_length))
        out.update({k: n * steps for k, n in UNTUNED_SNAPSHOT_UPDATES.items() if k not in settings})
    if "network.core_size" not in settings and not game.capabilities.unit_network and game.device:
        fields = game.functions().spec.side(0).observation.fields.values()
        if all(len(f.shape) <= 1 for f in fields):
            out["network.core_size"] = 0
    return out


# The KL weight to the supervised policy on SMAX runs with a supervised start (--init) when no
# weight is given: without it a league from the start drifts to passive play that draws
# (35% of games decided after 20 minutes); at 0.5 its games stay decided (92-97%) and its main
# agents keep the start's strength (BENCHMARKS.md, "A league from the automatic supervised start").
# A game's defaults may set its own weights (SMAX's measured best: 0.05, zerg's 0.1, with 3 heuristic slots).
SUPERVISED_KL_WEIGHT = 0.5

# The flat names of earlier versions -> field paths: the keys of a flat config.json
# (`RunConfig.from_dict`). Frozen: new settings get no flat name.
EARLIER_NAMES = {
    "main_agents_per_race": "league.main_agents_per_race",
    "main_exploiters_per_race": "league.main_exploiters_per_race",
    "league_exploiters_per_race": "league.league_exploiters_per_race",
    "main_agent_matchmaker": "league.main_agent_matchmaker",
    "initial_snapshots": "league.initial_snapshots",
    "main_pfsp_weighting": "league.matchmaking.main_pfsp_weighting",
    "league_exploiter_weighting": "league.matchmaking.league_exploiter_weighting",
    "pfsp_hard_exponent": "league.matchmaking.pfsp_hard_exponent",
    "main_agent_snapshot_steps": "league.snapshots.main_agent_snapshot_steps",
    "exploiter_min_steps": "league.snapshots.exploiter_min_steps",
    "main_exploiter_timeout_steps": "league.snapshots.main_exploiter_timeout_steps",
    "league_exploiter_timeout_steps": "league.snapshots.league_exploiter_timeout_steps",
    "actors_per_learner": "actor.per_learner",
    "batch_size": "actor.batch_size",
    "episodes_per_match": "actor.episodes_per_match",
    "param_refresh_seconds": "actor.param_refresh_seconds",
    "reward_plugin": "actor.reward_plugin",
    "team_spirit_start": "actor.team_spirit_start",
    "team_spirit_end": "actor.team_spirit_end",
    "team_spirit_updates": "actor.team_spirit_updates",
    "learner_batch_size": "learner.batch_size",
    "heuristic_slots": "device.scripted_slots",
    "heuristic_forced_slots": "device.scripted_task_slots",
    "heuristic_forced_handicap": "device.scripted_task_levels",
    "main_agent_chunks": "device.main_agent_chunks",
    "unroll_length": "learner.unroll_length",
    "learning_rate": "learner.learning_rate",
    "learner_sampler": "learner.sampler",
    "entropy_cost": "learner.loss.entropy_weight",
    "value_target": "learner.loss.value_target",
    "upgo_cost": "learner.loss.upgo_weight",
    "policy_loss": "learner.loss.policy_loss",
    "kl_teacher_cost": "learner.loss.kl_teacher_weight",
    "samples_per_insert": "learner.replay.samples_per_insert",
    "replay_size": "learner.replay.max_size",
    "hidden_size": "network.hidden_size",
    "core_size": "network.core_size",
    "evaluators": "evaluator.count",
    "evaluation_games": "evaluator.games",
}

# The short flags: the earlier names that the docs' commands use (docs/running.md,
# docs/smax-heuristic.md, docs/supervised-start.md, ...; `tests/test_config.py` checks that each
# is used) and `--learner_batch_size` (tests/test_supervised_start.py). Every other setting is
# given by its path.
ALIASES = {name: EARLIER_NAMES[name] for name in (
    "main_exploiters_per_race", "league_exploiters_per_race", "main_agent_matchmaker",
    "initial_snapshots", "main_pfsp_weighting", "pfsp_hard_exponent", "main_agent_snapshot_steps",
    "exploiter_min_steps", "actors_per_learner", "batch_size", "param_refresh_seconds",
    "reward_plugin", "learner_batch_size", "heuristic_slots", "heuristic_forced_slots",
    "heuristic_forced_handicap", "main_agent_chunks", "unroll_length", "learning_rate",
    "entropy_cost", "policy_loss", "kl_teacher_cost", "hidden_size", "core_size", "evaluators",
    "evaluation_games")}


# Settings renamed when they became generic (issue 86: the game's scripted opponent, its
# curriculum and its statistic z, where they were SMAX's words): a flag or a config.json of the
# earlier name still works.
RENAMED = {"device.heuristic_slots": "device.scripted_slots",
           "device.heuristic_forced_slots": "device.scripted_task_slots",
           "device.heuristic_forced_handicap": "device.scripted_task_levels",
           "actor.z_pseudo_reward_probability": "actor.z_reward_probability"}


class ConfigError(ValueError):
    """A configuration problem, with the fix in its message."""


def game_of(name: str) -> Game:
    """The game `--game` names (actors/games/registry.py); ConfigError naming the forms if none."""
    try:
        return resolve(name)
    except UnknownGame as e:
        raise ConfigError(str(e)) from e


@dataclass(frozen=True)
class NetworkSettings:
    hidden_size: int = setting(64, "network width (encoder / MLP)")
    core_size: int = setting(
        64, "recurrent core (LSTM) size; 0: no LSTM, a two-layer MLP (poker, matrix games)")
    z: bool = setting(
        True, "SMAX: the unit network takes the statistic z as an input (and has a value head per "
        "pseudo-reward for following it; AlphaStar); ignored for other games")


@dataclass(frozen=True)
class DeviceSettings:
    """The device path (--experience=device): learners that play their own games
    (learners/device.py, actors/rollout.py); each plays learner.batch_size games."""

    updates_per_chunk: int = setting(
        8, "device path: updates per jitted call (a chunk) between two talks to the coordinator")
    opponent_slots: int = setting(
        4, "device path: opponents drawn per chunk from the match distribution (divides learner.batch_size)")
    threads: int = setting(
        0, "device path: chunks of a learner group run at once; 0: one per core (at most one per agent)")
    evaluation_pairs: int = setting(
        8, "device path: pairs of players an evaluator plays at once in one vmapped program")
    scripted_slots: int = setting(
        0, "device path: main agents play this many of their opponent slots against the game's "
        "scripted opponent (its built-in AI; a race of the run at random): training on the test "
        "opponent of benchmarks/builtin_opponent.py, which AlphaStar's league did not do; 0: never")
    scripted_task_slots: int = setting(
        0, "device path: of the scripted slots, this many play one task each chunk that the scripted "
        "opponent's curriculum draws for the main agent (SMAX: a forced matchup, an enemy race, the "
        "agent's army and the AI's, drawn by PFSP over those cells, their win rates squared, times "
        "how often the agent picks the cell's army; the agent learns no pick from them; "
        "benchmarks/builtin_opponent.py --by_composition shows the cells). The others keep the "
        "agent's own pick and the AI's uniform one. 0: none")
    scripted_task_levels: bool = setting(
        False, "device path: the curriculum's tasks start at a level the agent can win, and its results "
        "move each task's level (automatic domain randomization; SMAX: the AI's army without some "
        "of its units); false: the full tasks")
    main_agent_chunks: int = setting(
        1, "device path: chunks a main agent plays and learns from per round of its learner group, "
        "where every exploiter plays one: the share of a small machine that goes to the main agents "
        "(AlphaStar gave every agent the same hardware; 1 does the same here)")
    population: bool = setting(
        False, "device path: the agents of a learner group that share a network, rollout and loss "
        "structure play and learn as one jitted program (vmap over agents: learners/population.py); "
        "false: one program per agent, `threads` at a time. Off on CPU, where it measured slower "
        "(XLA:CPU's batched matmuls: Kuhn's league 0.53x); on for a GPU or TPU (DEVICE_DEFAULTS)")
    population_parts: int = setting(
        1, "device path, with population: each population split into this many programs (agents in "
        "contiguous parts, at least two per part), run side by side on `threads`: one jitted program "
        "keeps one CPU core busy; 0: one part per thread; 1: the whole population in one program "
        "(an accelerator)")


@dataclass(frozen=True)
class EvaluatorSettings:
    count: int = setting(1, "evaluator nodes filling the payoff matrix for pairs with few games")
    games: int = setting(16, "games an evaluator plays per pair of players")
    greedy: bool = setting(False, "evaluators play the most likely actions instead of sampled ones")
    exact: bool = setting(
        True, "games with an exact meta-game (poker): frozen players' payoffs against each other are "
        "computed exactly (tabular policies, one tree walk) instead of sampled")
    nash_conv_every_seconds: float = setting(
        60.0, "games with an exact meta-game (poker): seconds between measurements of the exact "
        "NashConv of the Nash mixture and of each main agent (league.db `exploitability`, the "
        "dashboard's curve); 0: never")
    heuristic_every_seconds: float = setting(
        300.0, "SMAX: evaluator_0 plays each main agent (current parameters, z = 0) against jaxmarl's "
        "scripted heuristic in every race of the run this often (league.db `heuristic`, the "
        "dashboard's curve; OpenAI Five's fixed reference agents); 0: never")
    core_share: float = setting(
        1.0, "the share of the wall time each evaluator works: after a piece of work of w seconds it "
        "rests w (1 - share) / share, leaving the cores to the learners (on one machine an evaluator "
        "busy all the time takes a core from them under Ray, where it is a process of its own); 1: "
        "no rest. Its measured share is the evaluator's `core_share` metric")
    heuristic_games: int = setting(16, "games per main agent and heuristic race in each heuristic measurement")
    heuristic_greedy: bool = setting(
        False, "the heuristic measurement plays the main agents' most likely actions (army, action "
        "type, target) instead of sampled ones; the payoff games keep --evaluator.greedy")


@dataclass(frozen=True)
class SupervisedStartSettings:
    """The automatic supervised start (--init=auto: experiments/supervised_start.py)."""

    games: int = setting(
        324, "heuristic games recorded for the automatic supervised start (all races and armies)")
    steps: int = setting(
        600, "behaviour-cloning steps per race of the automatic supervised start (BENCHMARKS.md)")
    batch_size: int = setting(16, "games per behaviour-cloning step of the automatic supervised start")
    cache_dir: str = setting(
        "", "where automatic supervised starts are cached (\"\": $LEAGUE_SUPERVISED_CACHE, else "
        "$XDG_CACHE_HOME/league-trainer/supervised, else ~/.cache/league-trainer/supervised)")


@dataclass(frozen=True)
class RaySettings:
    """How the Ray launcher places the program's nodes (experiments/launchers.py: `placement`).

    - coordinator: on the driver's node (it owns league.db and params/; the dashboard and the
      driver read them there);
    - learner groups: `learner_gpus` GPUs each when asked or when the cluster has GPUs (one
      per group, shared fractions when groups outnumber GPUs); else one unit of the custom
      resource `learner_resource` when some node offers it (`ray start --resources=
      '{"learner": 4}'`); else the driver's node, next to the run directory their checkpoints
      go to;
    - actors and evaluators: one unit of `actor_resource` when some node offers it, and Ray's
      SPREAD strategy (`spread`) over the nodes that qualify;
    - code: the repository as the job's `working_dir` (`ship_code`: "auto" on a cluster given
      by --ray_address, "always", "never" when every host has it installed);
    - GPU memory: every JAX process with `XLA_PYTHON_CLIENT_PREALLOCATE=false` (no 75% grab
      per process), or a fixed `gpu_memory_fraction` per learner group; nodes that asked for
      no GPU on a cluster that has some run JAX on CPU (`JAX_PLATFORMS=cpu`).
    """

    learner_gpus: float = setting(
        -1.0, "GPUs per learner group; -1: 1 when the cluster has GPUs (shared if fewer), else 0")
    learner_resource: str = setting(
        "learner", "Ray custom resource a learner group requests when some node offers it")
    actor_resource: str = setting(
        "actor", "Ray custom resource actors and evaluators request when some node offers it")
    spread: bool = setting(True, "actors and evaluators spread over the nodes (Ray's SPREAD strategy)")
    ship_code: str = setting(
        "auto", "the repository as Ray's working_dir: auto (with --ray_address), always, never")
    gpu_memory_fraction: float = setting(
        0.0, "XLA_PYTHON_CLIENT_MEM_FRACTION of learner groups; 0: no preallocation")

    def __post_init__(self):
        if self.ship_code not in ("auto", "always", "never"):
            raise ConfigError(f"--ray.ship_code must be auto, always or never; got {self.ship_code!r}")
        if not 0.0 <= self.gpu_memory_fraction < 1.0:
            raise ConfigError(f"--ray.gpu_memory_fraction must be in [0, 1); got {self.gpu_memory_fraction}")


def _run_league() -> LeagueConfig:
    # AlphaStar's snapshot steps (2e9) scaled to a laptop.
    return LeagueConfig(snapshots=SnapshotConfig(
        main_agent_snapshot_steps=4_000, exploiter_min_steps=4_000,
        main_exploiter_timeout_steps=8_000, league_exploiter_timeout_steps=4_000))


def _run_learner():
    # 12 co-located learners share one process: small batches and tables (~160 KB per SMAX
    # unroll) and Reverb's client sampler (0.4 GB less than 12 TF datasets, measured).
    from learners.config import LearnerConfig, ReplayConfig

    return LearnerConfig(batch_size=16, unroll_length=16, sampler="client",
                         replay=ReplayConfig(max_size=256, samples_per_insert=2.0))


@dataclass(frozen=True)
class RunConfig:
    game: str = setting(
        DEFAULT_GAME, f"the game: a built-in ({', '.join(BUILTINS)}), "
        "your own (package.module:factory), pgx/<env_id>, jaxmarl/<env_id> or openspiel/<name> (docs/games.md)")
    races: int = setting(3, "a game with races (SMAX: terran, protoss, zerg) plays the first N; other games one")
    runner: str = setting(
        "ray", "where the program's nodes run: \"ray\" (Ray actors on a local instance, or on a cluster "
        "with ray_address), \"inprocess\" (threads of this one process: debugging) or \"launchpad\" "
        "(a Launchpad program; Launchpad needs its own Python 3.10 environment: docs/launchpad.md)")
    experience: str = setting(
        "auto", "where learners' experience comes from: \"device\" (each learner plays its own games in "
        "the jitted program of its update: games with a JAX step), \"replay\" (actors write to Reverb, "
        "learners sample), \"auto\" (device wherever the game and settings allow; --print_program "
        "says which and why; docs/experience.md)")
    ray_address: str | None = setting(None, "an existing Ray cluster (\"auto\", \"ray://host:10001\")")
    run_dir: str = setting(
        "", "the run's directory (config.json, league.db, params/, learners/); rerun to resume")
    minutes: float = setting(0.0, "stop after this many minutes; 0: until Ctrl-C (or learner_steps)")
    learner_steps: int = setting(0, "stop once every learner has learnt this many agent steps; 0: no limit")
    seed: int = setting(0, "seed of the league, the initial parameters and the games")
    teacher: str = setting(
        "", "the KL term's teacher (weight: learner.loss.kl_teacher_weight) for every agent: "
        "\"RUN_DIR:PLAYER_ID\" (any saved player of a run) or a params .npz file; it keeps its own "
        "recurrent state. Left out with a weight and a supervised start (init): each agent's "
        "teacher is its own race's supervised policy (AlphaStar's KL to the supervised policy)")
    init: str = setting(
        "", "SMAX's start: a file of experiments.supervised ({race: params}), every learning agent "
        "starting from its race's supervised parameters and exploiters resetting to them "
        "(AlphaStar); \"auto\" (experiments.league's default on SMAX) builds or reuses the cached "
        "supervised start (experiments/supervised_start.py); \"none\" or \"\": random parameters")
    z_replays: str = setting(
        "", "where main agents sample z from at each game's start (network.z): a replay directory "
        "of experiments.record; \"start\" (or \"\"): the replays the --init start was trained on "
        "(named in its .json report); \"none\" (SMAX's measured default): no z bank (z = 0, no "
        "pseudo-rewards: the unconditioned policy, the one the evaluator and the benchmarks play). "
        "Exploiters always play with z = 0")
    kl_teacher_by_race: str = setting(
        "", "the KL-to-teacher weight of some races' agents in place of learner.loss.kl_teacher_weight: "
        "\"RACE=WEIGHT\", comma-separated (e.g. \"zerg=0.1\"); the races left out take "
        "learner.loss.kl_teacher_weight")
    learner_groups: str = setting(
        "all", "co-location of the learners (experiments/program.py): all in one node (one process: "
        "a laptop), one node per race, or one per agent (a cluster)")
    actor_groups: str = setting("all", "co-location of actors and evaluators: all, race or agent (as learner_groups)")
    dashboard_port: int = setting(0, "live dashboard on 127.0.0.1: 0 any free port, -1 none")
    progress_every_seconds: float = setting(10.0, "seconds between progress lines in the terminal")
    meta_game_every_seconds: float = setting(10.0, "seconds between payoff/Nash/ratings rows in league.db")
    checkpoint_every_seconds: float = setting(30.0, "seconds between league and learner checkpoints")
    backup_every_seconds: float = setting(
        300.0, "seconds between online backups of league.db (<run_dir>/league.db.backup; restore "
        "with python -m experiments.restore_history --run_dir=...); 0: none")
    per_game_rows: bool = setting(
        False, "league.db: a row per single game (~180 bytes each) besides the rows of counts that it "
        "always keeps (one per batch of games against one opponent in the same races)")
    network: NetworkSettings = field(default_factory=NetworkSettings)
    league: LeagueConfig = field(default_factory=_run_league)
    learner: Any = field(default_factory=_run_learner)  # learners.config.LearnerConfig
    actor: ActorConfig = field(default_factory=ActorConfig)
    evaluator: EvaluatorSettings = field(default_factory=EvaluatorSettings)
    device: DeviceSettings = field(default_factory=DeviceSettings)
    ray: RaySettings = field(default_factory=RaySettings)
    supervised: SupervisedStartSettings = field(default_factory=SupervisedStartSettings)

    def __post_init__(self):
        caps = game_of(self.game).capabilities
        for check in RUN_CHECKS:
            check(self, caps)
        # The league plays the run's races; actors write the learner's unrolls.
        object.__setattr__(self, "league", dataclasses.replace(self.league, races=self.race_names))
        object.__setattr__(self, "actor", dataclasses.replace(
            self.actor, unroll_length=self.learner.unroll_length, seed=self.seed))

    # -- building ---------------------------------------------------------------------

    @classmethod
    def make(cls, **values) -> RunConfig:
        """A config from `values` keyed by field path ("learner.loss.entropy_weight") or alias
        ("entropy_cost"), over the game's measured defaults (`Capabilities.defaults`; one race
        for a game without races), OpenAI Five's loss (`LossConfig.ppo`, Table 2) for the loss fields not given when
        the policy loss is "ppo", and on SMAX with a supervised start (`init`) and no `teacher`
        the KL to it at the game's default weight (and its races' own, `kl_teacher_by_race`) or
        `SUPERVISED_KL_WEIGHT` unless one is given: a weight given is every race's."""
        given = {}
        for key, value in values.items():
            path = ALIASES.get(key) or RENAMED.get(key, key)
            if path in given:
                raise ConfigError(f"--{key} and another flag both set {path}; pass one of them")
            given[path] = value
        game = given.get("game", cls.game)
        caps = game_of(game).capabilities
        settings = dict(caps.defaults)
        if not caps.races:
            settings["races"] = 1  # one race (a --races=3 given is refused below)
        if given.get("learner.loss.policy_loss") == "ppo":
            from learners.config import LossConfig

            settings.update({f"learner.loss.{k}": v for k, v in dataclasses.asdict(LossConfig.ppo()).items()})
        settings.update(given)
        settings.update(untuned_defaults(game_of(game), settings))
        kl = "learner.loss.kl_teacher_weight"
        if caps.supervised_start and kl not in given and not settings.get("teacher"):
            if settings.get("init", cls.init) in ("", "none"):
                settings.pop(kl, None)  # no start to pull to: the game's KL default does not apply
            else:
                settings.setdefault(kl, SUPERVISED_KL_WEIGHT)  # AlphaStar's recipe, or the game's own
        by_race = "kl_teacher_by_race"
        if by_race not in given and (kl in given or not settings.get(kl)):
            settings.pop(by_race, None)  # a weight given is every race's; a KL that is off is off for every race
        heads = "learner.loss.kl_teacher_heads"
        if heads not in given and not settings.get(kl) and not settings.get(by_race):
            settings.pop(heads, None)  # the game's heads of a KL that is off: nothing to choose
        return cls.from_paths(settings)

    @classmethod
    def for_game(cls, game: str, **values) -> RunConfig:
        """`make(game=game, **values)`."""
        return cls.make(game=game, **values)

    @classmethod
    def from_paths(cls, values: dict) -> RunConfig:
        """A config from {field path: value} over the defaults (no game defaults)."""
        known = {path for path, _ in fields()}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown settings {unknown}; `python -m experiments.league --help` lists them")
        return _build(cls, _nest(values))

    def actor_config(self, index: int) -> ActorConfig:
        """The configuration of the run's actor number `index`: its own seed, and the reward the
        run trains on (`reward`: the game's where --actor.reward_plugin is not given)."""
        return dataclasses.replace(self.actor, seed=self.seed * 7919 + index, reward_plugin=self.reward)

    def get(self, path: str):
        value = self
        for part in path.split("."):
            value = getattr(value, part)
        return value

    # -- derived ----------------------------------------------------------------------

    @property
    def reward(self) -> str:
        """The reward plug-in the games train on (see `ActorConfig.reward_plugin`)."""
        if self.actor.reward_plugin:
            return self.actor.reward_plugin
        return self.game_info.capabilities.reward

    @property
    def init_file(self) -> str | None:
        """The supervised start's file, or None for random initial parameters. "auto" must have
        been replaced by its file (`experiments.supervised_start.resolve_start`, which
        experiments.league calls before building the program)."""
        if self.init in ("", "none"):
            return None
        if self.init == "auto":
            raise ConfigError("--init=auto is built by experiments.league before the program starts; "
                              "a program built in code needs --init=FILE (or none)")
        return self.init

    @property
    def teacher_source(self) -> str | None:
        """Where the KL term's teacher comes from: "teacher" (--teacher, one for every agent),
        "init" (each agent's race's supervised parameters of the start), or None (no KL term)."""
        if not self.kl_teacher_on:
            return None
        if self.teacher:
            return "teacher"
        return "init" if self.init not in ("", "none") else None

    @property
    def kl_teacher_on(self) -> bool:
        """Some race's agents learn with the KL to a teacher (`kl_teacher_weights`)."""
        return any(self.kl_teacher_weights.values())

    @property
    def kl_teacher_weights(self) -> dict[str, float]:
        """{race of this run: its agents' KL-to-teacher weight}: `kl_teacher_by_race` where it
        names the race, else learner.loss.kl_teacher_weight. ConfigError for a malformed
        `kl_teacher_by_race` or one naming no race of the game."""
        weights = dict.fromkeys(self.race_names, self.learner.loss.kl_teacher_weight)
        if not self.kl_teacher_by_race:
            return weights
        known = self.game_info.race_names
        for item in self.kl_teacher_by_race.split(","):
            race, sep, value = (part.strip() for part in item.partition("="))
            try:
                weight = float(value) if sep else -1.0
            except ValueError:
                weight = -1.0
            if race not in known or not weight >= 0:  # NaN too
                raise ConfigError(f"--kl_teacher_by_race={self.kl_teacher_by_race}: {item.strip()!r} is not "
                                  f"RACE=WEIGHT with RACE one of {', '.join(known)} and WEIGHT >= 0 "
                                  f"(e.g. --kl_teacher_by_race={known[-1]}=0.1)")
            if race in weights:
                weights[race] = weight
        return weights

    @property
    def z_network(self) -> bool:
        """The agents' network takes z (a game with z, and network.z)."""
        return bool(self.game_info.capabilities.z) and self.network.z

    @property
    def z_replay_dir(self) -> str | None:
        """The replay directory main agents sample z from, or None (z = 0, no pseudo-rewards):
        --z_replays, else the replays named in the --init file's report (`<init>.json`, written
        by experiments.supervised), if it names one that exists."""
        if not self.z_network or self.z_replays == "none":
            return None
        if self.z_replays not in ("", "start"):
            return self.z_replays
        init = self.init if self.init not in ("", "none", "auto") else None
        if init is None:
            return None
        try:
            with open(init + ".json") as f:
                replays = json.load(f).get("replays")
        except (OSError, ValueError, AttributeError):
            return None
        return replays if isinstance(replays, str) and os.path.isdir(replays) else None

    @property
    def race_names(self) -> tuple[str, ...]:
        return self.game_info.race_names[: self.races]

    @property
    def game_info(self) -> Game:
        """The run's game as declared (actors/games/base.py, `Game`): its capabilities."""
        return game_of(self.game)

    # -- config.json --------------------------------------------------------------------

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        """The config of a config.json: nested (this version) or flat (earlier ones). A run
        saved before z was a network input (no `network.z`) resumes without z: its checkpoints
        hold a network without the z input."""
        if not any(isinstance(v, dict) for v in data.values()):
            flat = {EARLIER_NAMES.get(k, k): v for k, v in data.items()
                    if v is not None or k not in EARLIER_NAMES}
            flat.setdefault("network.z", False)
            return cls.make(**flat)
        if "z" not in data.get("network", {"z": True}):
            data = {**data, "network": {**data["network"], "z": False}}
        return _build(cls, _renamed(data))


# -- the checks of a run's settings together ----------------------------------------


def _check_basics(config: RunConfig, caps) -> None:
    """The runner, experience, races, co-locations and the ranges of numbers."""
    if config.runner not in RUNNERS:
        raise ConfigError(f"unknown --runner {config.runner!r}; allowed: {', '.join(RUNNERS)}")
    if config.experience not in EXPERIENCE:
        raise ConfigError(f"unknown --experience {config.experience!r}; allowed: {', '.join(EXPERIENCE)}")
    if caps.races and not 1 <= config.races <= len(caps.races):
        raise ConfigError(f"--races must be 1 to {len(caps.races)} (the first N of {', '.join(caps.races)}); "
                          f"got {config.races}")
    if not caps.races and config.races != 1:
        raise ConfigError(f"--game={config.game} has one race; pass --races=1 (or leave --races out)")
    for name in ("learner_groups", "actor_groups"):
        if getattr(config, name) not in COLOCATIONS:
            raise ConfigError(f"--{name} must be all, race or agent; got {getattr(config, name)!r}")
    for name in ("network.hidden_size", "evaluator.games", "evaluator.heuristic_games",
                 "supervised.games", "supervised.steps", "supervised.batch_size",
                 "device.updates_per_chunk", "device.opponent_slots", "device.evaluation_pairs",
                 "device.main_agent_chunks"):
        if config.get(name) < 1:
            raise ConfigError(f"--{name} must be at least 1; got {config.get(name)}")
    if config.network.core_size < (1 if caps.unit_network else 0):
        raise ConfigError(f"--network.core_size must be at least {1 if caps.unit_network else 0} "
                          f"on --game={config.game}; got {config.network.core_size}"
                          + (" (0, no LSTM, is for the reference network of games without units)"
                             if caps.unit_network else ""))
    if not 0.0 < config.evaluator.core_share <= 1.0:
        raise ConfigError(f"--evaluator.core_share must be in (0, 1]; got {config.evaluator.core_share}")
    for name in ("minutes", "learner_steps", "evaluator.count", "device.threads",
                 "evaluator.heuristic_every_seconds"):
        if config.get(name) < 0:
            raise ConfigError(f"--{name} must be >= 0; got {config.get(name)}")


def _check_scripted_slots(config: RunConfig, caps) -> None:
    """The device path's games against the game's scripted opponent and its curriculum's tasks."""
    device = config.device
    if device.scripted_slots:
        if not caps.scripted_opponent:
            raise ConfigError(f"--device.scripted_slots: --game={config.game} has no scripted opponent; "
                              "leave it at 0")
        if not 0 < device.scripted_slots < device.opponent_slots:
            raise ConfigError(f"--device.scripted_slots must be in [0, --device.opponent_slots) = "
                              f"[0, {device.opponent_slots}) (the other slots play league "
                              f"opponents); got {device.scripted_slots}")
    if not 0 <= device.scripted_task_slots <= device.scripted_slots:
        raise ConfigError(f"--device.scripted_task_slots must be in [0, --device.scripted_slots] = "
                          f"[0, {device.scripted_slots}] (some of the scripted slots' games play the "
                          f"curriculum's tasks); got {device.scripted_task_slots}")
    if device.scripted_task_levels and not device.scripted_task_slots:
        raise ConfigError("--device.scripted_task_levels moves the levels of the curriculum's tasks: "
                          "set --device.scripted_task_slots >= 1 with it, or leave it off")


def _check_start(config: RunConfig, caps) -> None:
    """Main agents, the supervised start and z."""
    if config.league.main_agents_per_race < 1:
        raise ConfigError("a league needs at least one main agent per race (--league.main_agents_per_race >= 1)")
    if config.init not in ("", "none") and not caps.supervised_start:
        raise ConfigError(f"--init={config.init}: --game={config.game} has no supervised start; "
                          "leave --init out")
    if config.z_replays not in ("", "none"):
        if not caps.z:
            raise ConfigError(f"--z_replays={config.z_replays}: --game={config.game} has no statistic z; "
                              "leave --z_replays out")
        if not config.network.z:
            raise ConfigError(f"--z_replays={config.z_replays} needs a network that takes z: "
                              "drop --network.z=false (or --z_replays)")
        if config.z_replays == "start" and config.init in ("", "none"):
            raise ConfigError("--z_replays=start takes z from the supervised start's replays, and "
                              "--init=none has none: drop --init=none, or pass --z_replays=DIR")


def _check_teacher_and_reward(config: RunConfig, caps) -> None:
    """The KL term's teacher and weight, and the reward plug-in."""
    kl = config.kl_teacher_on
    if config.teacher and not kl:
        raise ConfigError("--learner.loss.kl_teacher_weight (--kl_teacher_cost) and --teacher go together: "
                          "--teacher is the KL term's teacher; pass its weight too (e.g. --kl_teacher_cost=0.1)")
    if kl and config.teacher_source is None:
        raise ConfigError("--learner.loss.kl_teacher_weight (--kl_teacher_cost) and --teacher go together: "
                          "a KL weight needs a teacher: --teacher=RUN_DIR:PLAYER_ID, or on a game with a "
                          "supervised start (--init=FILE, or --init=auto) whose race's policy is each "
                          "agent's teacher")
    if config.learner.loss.kl_teacher_heads and not kl:
        raise ConfigError(f"--learner.loss.kl_teacher_heads={config.learner.loss.kl_teacher_heads} chooses the "
                          "heads of the KL to the teacher, which is off: pass its weight too "
                          "(--kl_teacher_cost), or leave the heads out")
    plugin = config.actor.reward_plugin
    if plugin and plugin not in BUILTIN_REWARDS and not os.path.isfile(plugin):
        raise ConfigError(f"--actor.reward_plugin {plugin!r} is not a file; pass the path of a .py "
                          "file defining get_reward(batch, contiguous)")


RUN_CHECKS = (_check_basics, _check_scripted_slots, _check_start, _check_teacher_and_reward)
"""`RunConfig`'s checks of its settings together, in order (each a ConfigError naming the fix)."""


def _renamed(data: dict) -> dict:
    """A nested config.json's settings under their names of today (`RENAMED`)."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for old, new in RENAMED.items():
        (group, leaf), (_, now) = old.split("."), new.split(".")
        if isinstance(data.get(group), dict) and leaf in data[group]:
            data[group].setdefault(now, data[group].pop(leaf))
    return data


def _build(cls, data: dict):
    """A `cls` (RunConfig) from a nested dict over its defaults; ConfigError for unknown keys
    or values that a (sub-)config's validation refuses."""
    try:
        return _replace(cls(), data)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None


def _build_over(config: RunConfig, data: dict) -> RunConfig:
    """`config` with the nested settings `data` replaced (validated as `_build`)."""
    try:
        return _replace(config, data)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None


def _replace(instance, data: dict):
    """`instance` with the fields in `data` replaced, sub-configs (dicts) recursively."""
    known = {f.name for f in dataclasses.fields(instance)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown config keys {unknown} in {type(instance).__name__}; "
                          f"allowed: {sorted(known)}")
    values = {}
    for name, value in data.items():
        current = getattr(instance, name)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            value = _replace(current, value)
        elif isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return dataclasses.replace(instance, **values)


def fields(config: Any = None, prefix: str = ""):
    """[(path, default)] of every leaf setting of a RunConfig (default: the defaults), in
    order; sub-configs are walked, derived leaves (`DERIVED`) left out."""
    config = RunConfig() if config is None else config
    out = []
    for f in dataclasses.fields(config):
        value, path = getattr(config, f.name), prefix + f.name
        if dataclasses.is_dataclass(value):
            out += fields(value, path + ".")
        elif path not in DERIVED:
            out.append((path, value))
    return out


def field_kind(path: str) -> type:
    """A setting's type from its field's annotation: int, float, bool or str (`float | None` is
    float; str where none of them is named). The flags of settings whose default is None parse as it."""
    *parents, name = path.split(".")
    owner = RunConfig()
    for parent in parents:
        owner = getattr(owner, parent)
    hint = typing.get_type_hints(type(owner))[name]
    kinds = [k for k in (typing.get_args(hint) or (hint,)) if k in (bool, int, float, str)]
    return kinds[0] if kinds else str


def help_text(path: str, config: Any = None) -> str:
    """A flag's help: the metadata "help" of its field (`league.settings.setting`) in `config`
    (default: a RunConfig); "" where the field has none."""
    *parents, leaf = path.split(".")
    owner = RunConfig() if config is None else config
    for p in parents:
        owner = getattr(owner, p)
    return help_of({f.name: f for f in dataclasses.fields(owner)}[leaf])


def undocumented(config: Any = None) -> list[str]:
    """The settings of `config` (default: a RunConfig; every path of `fields`, each a flag)
    whose field carries no help: each must have one."""
    config = RunConfig() if config is None else config
    return [path for path, _ in fields(config) if not help_text(path, config)]


def _flatten(data: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


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
        mine, theirs = _flatten(config.to_dict()), _flatten(saved.to_dict())
        differ = sorted(k for k in mine if k not in RESUMABLE_CHANGES and k != "run_dir" and mine[k] != theirs.get(k))
        if differ:
            details = ", ".join(f"{k}: saved {theirs.get(k)!r}, now {mine[k]!r}" for k in differ)
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
