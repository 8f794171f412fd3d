"""Run a league: `python -m experiments.league --races=3`.

Builds the program of nodes from the flags (experiments/program.py: coordinator, one learner
per learning agent, actors, evaluators, Reverb tables) and launches it in this process or on
Ray (experiments/launchers.py). The run directory holds `config.json`, the league's history
`league.db` (SQLite), frozen players' parameters and the learners' checkpoints; rerunning with the same --run_dir resumes. Ctrl-C stops cleanly
with checkpoints written.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags

from experiments.config import (
    GAME_DEFAULTS,
    GAMES,
    RUNNERS,
    ConfigError,
    RunConfig,
    prepare_run_dir,
)

FLAGS = flags.FLAGS
_DEFAULTS = RunConfig()


def config_from_flags() -> RunConfig:
    races = FLAGS.races if FLAGS.races is not None else (3 if FLAGS.game == "smax_races" else 1)
    run_dir = FLAGS.run_dir or f"runs/{FLAGS.game}-r{races}"
    game_defaults = GAME_DEFAULTS.get(FLAGS.game, {})
    values = {
        f.name: (getattr(FLAGS, f.name) if FLAGS[f.name].present or f.name not in game_defaults
                 else game_defaults[f.name])
        for f in dataclasses.fields(RunConfig)
        if f.name in FLAGS and f.name not in ("races", "run_dir")
    }
    return RunConfig(**values, races=races, run_dir=run_dir)


def define_flags() -> None:
    """Defines the command-line flags (only when run as a program, so importing this module
    for its functions registers no flags)."""
    flags.DEFINE_enum("game", _DEFAULTS.game, list(GAMES), "The game: SMAX races (StarCraft micro with an army-composition choice), OpenSpiel Kuhn/Leduc poker, or a matrix game.")
    flags.DEFINE_integer("races", None, "SMAX races: the first N of Terran, Protoss, Zerg (default 3); each race gets 1 main agent, 1 main exploiter and 2 league exploiters. Poker and matrix games have one race.")
    flags.DEFINE_string("runner", _DEFAULTS.runner, f"How the nodes run: {', '.join(RUNNERS)}. 'ray' (default) starts a local Ray instance unless --ray_address is given; 'inprocess' runs every node on threads of this process.")
    flags.DEFINE_string("ray_address", None, "Address of an existing Ray cluster (e.g. 'auto' or 'ray://host:10001'); default: a local Ray instance bound to 127.0.0.1.")
    flags.DEFINE_string("run_dir", None, "Run directory (config.json, league.db, params/, learners/). Default: runs/<game>-r<races>. Rerunning with the same directory resumes the run.")
    flags.DEFINE_float("minutes", _DEFAULTS.minutes, "Stop after this many minutes (0: run until Ctrl-C or --learner_steps).")
    flags.DEFINE_integer("learner_steps", _DEFAULTS.learner_steps, "Stop once every learner has learnt from this many agent steps (0: no limit).")
    flags.DEFINE_integer("seed", _DEFAULTS.seed, "Random seed of the league, the initial parameters and the games.")
    flags.DEFINE_integer("actors_per_learner", _DEFAULTS.actors_per_learner, "Actors per learning agent (each plays --batch_size games at once).")
    flags.DEFINE_integer("batch_size", _DEFAULTS.batch_size, "Games per actor, stepped together as one batch with one jitted policy step.")
    flags.DEFINE_integer("learner_batch_size", _DEFAULTS.learner_batch_size, "Unrolls per learner update.")
    flags.DEFINE_integer("unroll_length", _DEFAULTS.unroll_length, "Steps per unroll written to Reverb (consecutive unrolls overlap by one step).")
    flags.DEFINE_float("learning_rate", _DEFAULTS.learning_rate, "Adam learning rate of every learner.")
    flags.DEFINE_integer("hidden_size", _DEFAULTS.hidden_size, "Network width (encoder/MLP).")
    flags.DEFINE_integer("core_size", _DEFAULTS.core_size, "Recurrent core (LSTM) size.")
    flags.DEFINE_integer("main_agent_snapshot_steps", _DEFAULTS.main_agent_snapshot_steps, "A main agent adds a frozen copy of itself every this many agent steps (AlphaStar: 2e9).")
    flags.DEFINE_integer("exploiter_min_steps", _DEFAULTS.exploiter_min_steps, "Exploiters snapshot no sooner than this many steps after their last snapshot.")
    flags.DEFINE_integer("main_exploiter_timeout_steps", _DEFAULTS.main_exploiter_timeout_steps, "A main exploiter snapshots (and resets) after this many steps even if it has not beaten the main agents (AlphaStar: 4e9).")
    flags.DEFINE_integer("league_exploiter_timeout_steps", _DEFAULTS.league_exploiter_timeout_steps, "A league exploiter snapshots after this many steps even if it has not beaten the league (AlphaStar: 2e9).")
    flags.DEFINE_integer("main_exploiters_per_race", _DEFAULTS.main_exploiters_per_race, "Main exploiters per race (AlphaStar: 1).")
    flags.DEFINE_integer("league_exploiters_per_race", _DEFAULTS.league_exploiters_per_race, "League exploiters per race (AlphaStar: 2).")
    flags.DEFINE_string("main_agent_matchmaker", _DEFAULTS.main_agent_matchmaker, "Main agents' opponent selection: alphastar, openai_five, self_play, fsp, pfsp, pfsp_sp.")
    flags.DEFINE_integer("evaluators", _DEFAULTS.evaluators, "Evaluator nodes filling the payoff matrix for pairs of players with few games.")
    flags.DEFINE_string("reward_plugin", None, "Path of a Python file defining get_reward(batch, contiguous) (see actors/rewards.py), or a built-in: outcome (+1/0/-1 at the end), game (the game's own payoff), openai_five (shaped, zero-sum). Default: openai_five for SMAX, game (chips) for poker, outcome for matrix games.")
    flags.DEFINE_integer("dashboard_port", _DEFAULTS.dashboard_port, "Port of the live dashboard on 127.0.0.1 (0: any free port, -1: no dashboard).")
    flags.DEFINE_float("progress_every_seconds", _DEFAULTS.progress_every_seconds, "Seconds between progress lines in the terminal.")
    flags.DEFINE_bool("print_program", False, "Print the program's graph of nodes (experiments/program.py) and exit.")


_MORE_HELP = {
    "episodes_per_match": "Finished games an actor plays before asking the coordinator for a new opponent.",
    "param_refresh_seconds": "Seconds between an actor's parameter refreshes from its learner (AlphaStar: 10).",
    "samples_per_insert": "Reverb rate limiter: target times each unroll is sampled (AlphaStar replays each datum twice).",
    "replay_size": "Unrolls each learner's Reverb table holds.",
    "evaluation_games": "Games an evaluator plays per pair of players.",
    "meta_game_every_seconds": "Seconds between writing payoff, Nash distribution and ratings to league.db.",
    "checkpoint_every_seconds": "Seconds between league-state checkpoints (besides after every snapshot/reset).",
    "main_agents_per_race": "Main agents per race (AlphaStar: 1).",
    "learner_sampler": "How learners read Reverb: 'client' (a sampling thread; less memory for co-located learners) or 'dataset' (a TF TrajectoryDataset).",
    "value_target": "The value's target: 'td_lambda' (AlphaStar: uncorrected TD(lambda)) or 'vtrace' (IMPALA's corrected target).",
    "upgo_cost": "Weight of the UPGO policy term (0: off; always off with --policy_loss=ppo).",
    "policy_loss": "The policy loss: 'vtrace' (AlphaStar: V-trace, UPGO, TD(lambda) value) or 'ppo' (OpenAI Five Table 2: PPO clip 0.2 on GAE(0.95) advantages, discount 0.9993).",
    "kl_teacher_cost": "Weight of KL(teacher || policy), AlphaStar's penalty for leaving the supervised policy; needs --teacher.",
    "teacher": "The KL term's teacher: RUN_DIR:PLAYER_ID (any saved player of a run) or a params .npz file; it must have the run's network shapes.",
    "main_pfsp_weighting": "PFSP weighting of main agents' PFSP branch: squared, linear, linear_capped, variance, hard ((1-x)^p, p = --pfsp_hard_exponent).",
    "league_exploiter_weighting": "PFSP weighting of league exploiters (AlphaStar: linear_capped); 'hard' uses --pfsp_hard_exponent.",
    "pfsp_hard_exponent": "Exponent p of the 'hard' PFSP weighting (1-x)^p (AlphaStar's squared: p = 2).",
    "initial_snapshots": "Add a frozen copy of every main agent's initial parameters to the league at the start (AlphaStar's pseudocode), so PFSP has opponents from the first match.",
    "learner_groups": "Learner co-location: all (every learner in one process), race (one node per race) or agent (one per learning agent, for a cluster).",
    "actor_groups": "Actor co-location: all, race or agent (as --learner_groups).",
    "entropy_cost": "Weight of the entropy bonus (default: 0.1 for poker, 0.01 otherwise).",
}


def define_remaining_flags() -> None:
    """A flag for every other RunConfig field, so that any run's config.json can be given back."""
    for field in dataclasses.fields(RunConfig):
        if field.name in FLAGS or field.name in ("races", "run_dir"):
            continue
        default = getattr(_DEFAULTS, field.name)
        kind = type(default) if default is not None else {"entropy_cost": float}.get(field.name, str)
        define = {int: flags.DEFINE_integer, float: flags.DEFINE_float, bool: flags.DEFINE_bool}.get(kind, flags.DEFINE_string)
        define(field.name, default, _MORE_HELP.get(field.name, f"RunConfig.{field.name} (experiments/config.py)."))


def check_teacher(config: RunConfig) -> None:
    """Loads `--teacher` once before anything is written: ConfigError if it cannot be read or
    its shapes are not the run's network's."""
    if not config.teacher:
        return
    from experiments.nodes import initial_params, load_teacher, make_game, make_network

    spec = make_game(config, 1).spec
    load_teacher(config, initial_params(make_network(config, spec), spec, 0, config.seed))


def main(argv) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; see --help", file=sys.stderr)
        return 2
    try:
        config = config_from_flags()
        if FLAGS.print_program:
            from experiments.program import build_program

            print(build_program(config))
            return 0
        check_teacher(config)
        resuming = prepare_run_dir(config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{'resuming' if resuming else 'starting'} a league: game={config.game} races={config.race_names} "
          f"runner={config.runner} run_dir={config.run_dir}", flush=True)
    from experiments.launchers import LAUNCHERS

    try:
        LAUNCHERS[config.runner](config)
    except Exception as e:
        from learners.learner import CheckpointError

        if isinstance(e, CheckpointError | ValueError):
            print(f"error: {e}", file=sys.stderr)
            return 1
        raise
    return 0


def main_and_exit(argv) -> None:
    code = main(argv)
    # Reverb's and TensorFlow's C++ threads can abort the interpreter's own shutdown
    # ("terminate called without an active exception") after everything is saved: leave at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    define_flags()
    define_remaining_flags()
    app.run(main_and_exit)
