"""Run a league: `python -m experiments.league --races=3`.

Builds the program of nodes from the flags (experiments/program.py: coordinator, one learner
per learning agent, actors, evaluators, Reverb tables) and launches it in this process, on
Ray or as a Launchpad program (experiments/launchers.py; Launchpad needs its own Python 3.10
environment, and `--runner=launchpad` elsewhere says how to create it). The run directory holds `config.json`, the league's history
`league.db` (SQLite), frozen players' parameters and the learners' checkpoints; rerunning with the same --run_dir resumes. Ctrl-C stops cleanly
with checkpoints written.

The start (AlphaStar's): on SMAX every learning agent starts from a supervised agent of its race.
With no --init the command builds one from the scripted heuristic's games, or reuses the one it
cached before (experiments/supervised_start.py; `--supervised.*` sets its size); --init=FILE
names a file of experiments.supervised; --init=none starts from random parameters. The output
says which start the run uses. Other games start from random parameters.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys

from absl import app, flags

from actors.games import registry
from coordinator.history import DB_NAME, HistoryError, check_file
from experiments import distributed_league, run_lock
from experiments.config import (
    ALIASES,
    RENAMED,
    ConfigError,
    RunConfig,
    device_defaults,
    field_kind,
    fields,
    game_of,
    help_text,
    prepare_run_dir,
)

FLAGS = flags.FLAGS


def config_from_flags() -> RunConfig:
    """The run's config from the flags given (by path or alias) over the game's defaults."""
    values = {name: FLAGS[name].value for name in [*(p for p, _ in fields()), *ALIASES, *RENAMED]
              if FLAGS[name].present and name not in ("races", "run_dir")}
    values["game"] = FLAGS.game
    if FLAGS.races is not None:
        values["races"] = FLAGS.races
    if game_of(FLAGS.game).capabilities.supervised_start and not FLAGS["init"].present:
        values["init"] = "auto"  # AlphaStar's start: the supervised agents (experiments/supervised_start.py)
    config = RunConfig.make(**values)
    run_dir = FLAGS.run_dir or f"runs/{config.game}-r{config.races}"
    return dataclasses.replace(config, run_dir=run_dir)


def choose_start(config: RunConfig, init_given: bool, kl_given: bool = False) -> tuple[RunConfig, str]:
    """The run's start (experiments.supervised_start.resolve_start: the automatic supervised
    start is built here if not cached) and the line saying which; a resumed run without
    --init keeps the start it was started with, and without a KL weight the one it was
    started with, and its heads and races' weights with it (runs begun before
    `SUPERVISED_KL_WEIGHT` became the default resume; so do runs begun with the KL on every
    head, or with none)."""
    from experiments.supervised_start import resolve_start, saved_config

    saved = saved_config(config.run_dir)
    if (not init_given and config.init == "auto" and saved is not None
            and (saved.init in ("", "none") or os.path.isfile(saved.init))):
        config = dataclasses.replace(config, init=saved.init)
    if not kl_given and saved is not None and saved.teacher == config.teacher:
        loss = dataclasses.replace(config.learner.loss,
                                   kl_teacher_weight=saved.learner.loss.kl_teacher_weight,
                                   kl_teacher_heads=saved.learner.loss.kl_teacher_heads)
        config = dataclasses.replace(config, learner=dataclasses.replace(config.learner, loss=loss),
                                     kl_teacher_by_race=saved.kl_teacher_by_race)
    return resolve_start(config)


def given_paths() -> set[str]:
    """The field paths set on the command line (by path or alias)."""
    return {ALIASES.get(name) or RENAMED.get(name, name) for name in [*(p for p, _ in fields()), *ALIASES, *RENAMED]
            if FLAGS[name].present}


def learner_backend(config: RunConfig) -> str:
    """The accelerator the run's learners get: on a Ray cluster, "gpu" where it offers GPUs
    (and --ray.learner_gpus does not refuse them), "tpu" where it offers TPUs; else this
    machine's JAX backend (called after Ray has started: JAX's threads must not see a fork)."""
    if config.runner == "ray" and config.ray_address:
        import ray

        resources = ray.cluster_resources()
        if resources.get("GPU", 0) and config.ray.learner_gpus != 0:
            return "gpu"
        return "tpu" if resources.get("TPU", 0) else "cpu"
    import jax

    return jax.default_backend()


def choose_device_defaults(config: RunConfig, given: set[str]) -> tuple[RunConfig, str]:
    """The settings that follow the learners' accelerator (`experiments.config.device_defaults`)
    and the first screen's line; a resumed run keeps the batch it was started with unless one
    is given."""
    from experiments.supervised_start import saved_config

    saved = saved_config(config.run_dir)
    if saved is not None and "learner.batch_size" not in given:
        config = dataclasses.replace(config, learner=dataclasses.replace(
            config.learner, batch_size=saved.learner.batch_size))
        given = given | {"learner.batch_size"}
        _, line = device_defaults(config, learner_backend(config), given)
        return config, line.replace("(given;", "(as the run was started;")
    return device_defaults(config, learner_backend(config), given)


def define_flags() -> None:
    """One flag per setting of RunConfig and its sub-configs, named by its path
    (`--learner.loss.entropy_weight`), with the help its field carries (`help_text`); the short
    names the docs use as aliases (`--entropy_cost`, `ALIASES`). Defined only when run as a program, so
    importing this module registers no flags."""
    for path, default in fields():
        text = help_text(path)
        if path == "game":
            flags.DEFINE_string("game", default, text)
        elif path == "races":
            flags.DEFINE_integer("races", None, text + " (default: 3 for SMAX, 1 otherwise)")
        elif path == "run_dir":
            flags.DEFINE_string("run_dir", None, text + " (default: runs/<game>-r<races>)")
        else:
            _define(path, default, text)
    for alias, path in ALIASES.items():
        _define(alias, None, f"alias of --{path}: {help_text(path)}", kind=_kind(path))
    for old, path in RENAMED.items():
        _define(old, None, f"the earlier name of --{path}", kind=_kind(path))
    distributed_league.define_flags()   # --distributed.*: one league over several hosts' devices
    flags.DEFINE_bool("print_program", False, "Print the program's graph of nodes (experiments/program.py) and exit.")
    if importlib.util.find_spec("launchpad") is not None:  # the Launchpad environment
        from experiments.launchpad_launcher import define_flags as define_launchpad_flags

        define_launchpad_flags()  # --lp_launch_type=local_mp|local_mt


def _kind(path: str) -> type:
    """The type of a setting's flag: its default's, or its annotation's where the default is None."""
    default = dict(fields())[path]
    return field_kind(path) if default is None else type(default)


def _define(name: str, default, text: str, kind=None) -> None:
    kind = kind or _kind(name)
    define = {int: flags.DEFINE_integer, float: flags.DEFINE_float, bool: flags.DEFINE_bool}.get(
        kind, flags.DEFINE_string)
    define(name, default, text)


def check_teacher(config: RunConfig) -> None:
    """Loads `--init` and the KL term's teachers (`--teacher`, or each race's supervised
    parameters) once before anything is written: ConfigError if they cannot be read, a race is
    missing or their shapes are not the run's network's."""
    if not config.teacher and config.init_file is None:
        return
    from experiments.build import (
        load_init,
        load_teachers,
        make_game,
        make_network,
        parameter_shapes,
    )

    spec = make_game(config, 1).spec
    like = parameter_shapes(make_network(config, spec), spec)
    load_teachers(config, like, load_init(config, like))


def check_z(config: RunConfig) -> str:
    """Loads the z bank once before anything is written (ConfigError naming the directory if
    it is not a replay directory of this game and spec); returns the line saying where main
    agents' z comes from."""
    from experiments.build import load_z_bank, make_game, z_summary

    if not config.z_network:
        return z_summary(config, None)
    return z_summary(config, load_z_bank(config, make_game(config, 1).spec))


def main(argv) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; see --help", file=sys.stderr)
        return 2
    quiet_libraries()
    try:   # before anything else uses JAX
        distributed_line = distributed_league.start()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if distributed_league.is_follower():   # process > 0: lends process 0 its devices
        return distributed_league.follow()
    try:
        config = config_from_flags()
        if FLAGS.print_program:
            from experiments.program import build_program

            print(build_program(config))
            return 0
        from experiments.launchers import problem
        from experiments.program import experience_path, replay_problem, unread_settings

        if config.experience != "auto":   # the path is known: a flag it never reads is refused now
            unread_settings(config.experience, f"--experience={config.experience}", given_paths())
        if config.experience == "replay" and (missing := replay_problem()):
            raise ConfigError(f"--experience=replay: {missing}")
        runner_problem = problem(config)
        if runner_problem:
            raise ConfigError(runner_problem)
        if config.runner == "ray":   # before the checks below run JAX here: starting Ray forks
            from experiments.launchers import init_ray

            init_ray(config)
        kl_given = (FLAGS["kl_teacher_cost"].present or FLAGS["learner.loss.kl_teacher_weight"].present
                    or FLAGS["learner.loss.kl_teacher_heads"].present or FLAGS["kl_teacher_by_race"].present)
        config, start = choose_start(config, FLAGS["init"].present, kl_given)
        config, device_line = choose_device_defaults(config, given_paths())
        check_teacher(config)
        z_line = check_z(config)
        path, why = experience_path(config)  # --experience=device that cannot be: refused here
        if path == "replay" and (missing := replay_problem()):
            raise ConfigError(f"experience: replay ({why}): {missing}")
        unread_settings(path, why, given_paths())   # auto's choice: a flag it never reads is refused
        experience_line = f"experience: {path} ({why})"
        check_file(os.path.join(config.run_dir, DB_NAME))   # a damaged league.db: exit 2, untouched
        resuming = prepare_run_dir(config)
        # Held until the league stops: a second league or a surgery on the run is refused.
        lock = run_lock.hold(config.run_dir, f"a league (experiments.league --runner={config.runner})")
    except (ConfigError, run_lock.RunLocked, HistoryError) as e:
        _stop_ray()
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _stop_ray()
        print("interrupted before the league started (a supervised start being built is not cached)",
              file=sys.stderr)
        return 130
    print(f"{'resuming' if resuming else 'starting'} a league: game={config.game} races={config.race_names} "
          f"runner={config.runner} run_dir={config.run_dir}", flush=True)
    print(start, flush=True)
    if adapted := registry.describe(config.game):   # an environment a factory returned, adapted
        print(adapted, flush=True)
    print(device_line, flush=True)
    print(z_line, flush=True)
    print(experience_line, flush=True)
    if distributed_line:
        print(distributed_line, flush=True)
    from agents.memory import release_periodically
    from experiments.launchers import LAUNCHERS
    from experiments.supervisor import catch_ctrl_c_while_building

    # The checks above leave ~0.5 GB freed but held by malloc (SMAX's start): back to the OS.
    release_periodically()
    catch_ctrl_c_while_building()
    try:
        LAUNCHERS[config.runner](config)
    except KeyboardInterrupt:   # Ctrl-C while the nodes were being built (before the league's own
        _stop_ray()             # handler), or a second Ctrl-C while it stopped
        print("interrupted: the league stopped without writing checkpoints (those written before are kept); "
              "rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as e:
        # learners.checkpoint, not learners.learner: rlax would import TensorFlow here (~10 s)
        from experiments.supervisor import NodeFailed
        from learners.checkpoint import CheckpointError

        if isinstance(e, CheckpointError):   # no good checkpoint: nothing was overwritten
            print(f"error: {e}", file=sys.stderr)
            return 2
        if isinstance(e, ValueError | NodeFailed):
            print(f"error: {e}", file=sys.stderr)
            return 1
        raise
    finally:
        lock.close()
    return 0


def _stop_ray() -> None:
    """Stops the local Ray instance `init_ray` started, when the run is refused before launching."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def quiet_libraries() -> None:
    """absl's `app.run` makes INFO the default level of Python's logging, so libraries' INFO
    lines reach the terminal (JAX's "Unable to initialize backend 'rocm'/'tpu'" probe,
    matplotlib's "generated new fontManager"): back to WARNING unless --verbosity was given.
    Warnings and errors still show; the project itself prints, it does not log."""
    from absl import logging as absl_logging

    if not FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)


def main_and_exit(argv) -> None:
    try:
        code = main(argv)
    finally:
        distributed_league.stop()   # process 0, however its run ended: the followers return
    # Reverb's and TensorFlow's C++ threads can abort the interpreter's own shutdown
    # ("terminate called without an active exception") after everything is saved: leave at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    define_flags()
    app.run(main_and_exit)
