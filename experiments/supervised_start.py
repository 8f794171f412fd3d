"""The automatic supervised start (issue 14 section 1): `python -m experiments.league --races=3`
with no `--init` on a game with a supervised start (SMAX) starts every learning agent from a
supervised agent of its race, as AlphaStar does, without the user recording and cloning games.

`resolve_start(config)` turns the config's `init` into the file the league starts from:
- "auto" (the league command's default where the game has a supervised start): the cached
  start for this config, built first if there is none by the game's `SupervisedStart`
  (`Capabilities.supervised_start`; SMAX: `--supervised.games` games of its scripted heuristic
  on both sides, then `--supervised.steps` behaviour-cloning steps per race of the run), with
  their progress lines;
- a file: used as it is (`--init=FILE`, or the file a resumed run began with: a cached start
  or its --init; the line says which);
- "none" or "": random initial parameters.
It returns the config with `init` replaced by the file (or left as none) and one line saying
which start the run uses; the league prints it.

The cache: under `--supervised.cache_dir`, else `$LEAGUE_SUPERVISED_CACHE`, else
`$XDG_CACHE_HOME/league-trainer/supervised` (default `~/.cache/league-trainer/supervised`):
- `replays-<key>/`: the recorded games, keyed by what determines them (the game's
  `recording(config)`: for SMAX its versions, the replay format version, the game's spec
  fingerprint and menu, the number of games and the recording seed);
- `start-<key>/supervised.npz` (the game's `train` writes it, with its `.json` report) and
  `key.json` (everything the key was made of): keyed by the replays' key, the network (its
  sizes and every parameter's shape), the races and the training settings (`training(config)`).
Each entry is built in a temporary directory beside it and renamed into place when complete,
so an interrupted build leaves nothing that a later run would take for a start; a second run
with the same settings reuses the entry and trains nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time

from experiments.config import ConfigError, RunConfig, SupervisedStartSettings


def cache_root(config: RunConfig) -> str:
    """Where built starts are kept (see the module docstring)."""
    if config.supervised.cache_dir:
        return os.path.abspath(os.path.expanduser(config.supervised.cache_dir))
    if os.environ.get("LEAGUE_SUPERVISED_CACHE"):
        return os.path.abspath(os.path.expanduser(os.environ["LEAGUE_SUPERVISED_CACHE"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "league-trainer", "supervised")


def _digest(description: dict) -> str:
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:16]


def describe(config: RunConfig) -> tuple[dict, dict]:
    """(what determines the recorded games, what determines the start): the cache keys'
    contents, written beside each entry; the game's own parts from its `SupervisedStart`."""
    import jax
    import numpy as np

    from experiments import build

    game = config.game_info.capabilities.supervised_start()
    recorded = game.recording(config)
    spec = config.game_info.functions().spec
    like = build.parameter_shapes(build.make_network(config, spec), spec)
    shapes = {jax.tree_util.keystr(path): list(np.shape(leaf))
              for path, leaf in jax.tree_util.tree_flatten_with_path(like)[0]}
    start = {**game.training(config), "replays": _digest(recorded), "races": list(config.race_names),
             "network": dataclasses.asdict(config.network), "parameter_shapes": shapes,
             "steps": config.supervised.steps, "batch_size": config.supervised.batch_size}
    return recorded, start


def start_paths(config: RunConfig) -> tuple[str, str]:
    """(replay directory, supervised file) of this config's start in the cache."""
    recorded, start = describe(config)
    root = cache_root(config)
    return (os.path.join(root, f"replays-{_digest(recorded)}"),
            os.path.join(root, f"start-{_digest(start)}", "supervised.npz"))


def summary(path: str) -> str:
    """Held-out accuracy per race (action type, target) from the start's report, if any."""
    try:
        with open(path + ".json") as f:
            report = json.load(f)
    except (OSError, ValueError):
        return "no report"
    parts = []
    for race, r in report.get("races", {}).items():
        held = r.get("held_out", {})
        if held:
            parts.append(f"{race} {held['action_type']['accuracy']:.2f}/{held['target']['accuracy']:.2f}")
    return ("held-out accuracy (action type/target) " + ", ".join(parts)) if parts else "no held-out games"


def build_start(config: RunConfig, log=print) -> tuple[str, bool]:
    """(the supervised file of this config's start, whether it was built now): reuses the
    cached one, else records the heuristic's games (unless cached) and trains the run's races
    (`log` None: quietly). ConfigError if the cache cannot be written."""
    replay_dir, path = start_paths(config)
    if os.path.isfile(path):
        return path, False
    say = log or _silent
    root = cache_root(config)
    try:
        os.makedirs(root, exist_ok=True)
        probe = tempfile.mkdtemp(dir=root, prefix=".probe-")
        os.rmdir(probe)
    except OSError as e:
        raise ConfigError(f"cannot write the supervised start's cache {root} ({e.strerror}); pass "
                          "--supervised.cache_dir=DIR (or set LEAGUE_SUPERVISED_CACHE) to a writable "
                          "directory, or --init=none to start from random parameters") from None
    s = config.supervised
    say(f"[start] building the supervised start for {', '.join(config.race_names)} (once; cached in "
        f"{root}): {s.games} games of the scripted heuristic, then {s.steps} behaviour-cloning steps "
        f"of {s.batch_size} games per race (at the defaults 5-9 minutes for 3 races on 2 CPU cores); "
        "--init=none skips it", flush=True)
    started = time.time()
    recorded, start = describe(config)
    if not os.path.isdir(replay_dir):
        tmp = tempfile.mkdtemp(dir=root, prefix=".replays-")
        try:
            _in_child("record", config, log, os.path.join(tmp, "replays"))
            _write_json(os.path.join(tmp, "replays", "key.json"), recorded)
            _move_into_place(os.path.join(tmp, "replays"), replay_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        say(f"[start] reusing the recorded games {replay_dir}", flush=True)
    tmp = tempfile.mkdtemp(dir=root, prefix=".start-")
    try:
        out = os.path.join(tmp, "start", "supervised.npz")
        os.makedirs(os.path.dirname(out))
        try:
            _in_child("train", config, log, replay_dir, out)
        except ValueError as e:   # the recorded games cannot train this start (too few of a race)
            raise ConfigError(
                f"the supervised start cannot be trained from {s.games} recorded games: {e}. Pass a larger "
                f"--supervised.games (default {SupervisedStartSettings().games}), or --init=none to start from "
                "random parameters") from None
        _write_json(os.path.join(tmp, "start", "key.json"), start)
        _move_into_place(os.path.join(tmp, "start"), os.path.dirname(path))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"[start] built the supervised start in {time.time() - started:.0f}s: {path}", flush=True)
    return path, True


def _in_child(step: str, config: RunConfig, log, *paths: str) -> None:
    """The game's supervised-start `step` ("record" or "train") on `paths`, in a new process
    (spawned: no state of this one), waited for; its exception is raised here. The league's
    driver goes on for the whole run, and recording and cloning in it left ~0.7 GB (the game's
    and the cloning's compiled programs and buffers) held by the driver to the end of the run; a
    child's memory goes back to the OS when it exits. The child prints its own lines to the
    standard output it inherits (`log` None: none): a function is pickled by name to reach a
    spawned process, and the driver's `print` is no longer `builtins.print` once Ray is started
    (Ray puts its own in its place), so passing `log` failed every build under `--runner=ray`."""
    import concurrent.futures
    import multiprocessing

    others = set(multiprocessing.active_children())
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            pool.submit(_step, step, config, log is not None, *paths).result()
        except BaseException:   # Ctrl-C (or an error here): the child is not waited for
            for child in set(multiprocessing.active_children()) - others:
                child.terminate()
            raise


def _step(step: str, config: RunConfig, verbose: bool, *paths: str) -> None:
    from experiments import build

    build.enable_compilation_cache()  # a rebuild (other settings, other races) compiles less
    log = print if verbose else _silent
    getattr(config.game_info.capabilities.supervised_start(), step)(*paths, config, log)


def _silent(*args, **kwargs) -> None:
    pass


def _write_json(path: str, data: dict) -> None:
    from agents.storage import write_atomic

    write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode())


def _move_into_place(built: str, final: str) -> None:
    """Renames a complete entry into the cache; if another run put it there first, keeps theirs."""
    try:
        os.rename(built, final)
    except OSError:
        if not os.path.isdir(final):
            raise


def resolve_start(config: RunConfig, log=print) -> tuple[RunConfig, str]:
    """(the config with `init` a file or none, the line saying which start the run uses);
    builds the automatic start if it is not cached (see the module docstring)."""
    if config.init == "auto":
        path, built = build_start(config, log)
        how = "built now" if built else "reused from the cache"
        return (dataclasses.replace(config, init=path),
                f"start: supervised agents of the scripted heuristic, {how} ({path}; {summary(path)})")
    if config.init_file:
        saved = saved_config(config.run_dir) if config.run_dir else None
        resumed = saved is not None and saved.init == config.init
        if is_cached_start(config.init):
            which = "this run began with" if resumed else "given by --init"
            return config, (f"start: supervised agents from the cached supervised start {which} "
                            f"({config.init}; {summary(config.init)})")
        if resumed:
            return config, (f"start: supervised agents from {config.init}, the --init file this run "
                            f"began with ({summary(config.init)})")
        return config, f"start: supervised agents from --init={config.init} ({summary(config.init)})"
    why = "--init=none" if config.init == "none" else "no supervised start for this game"
    return config, f"start: random parameters ({why})"


def is_cached_start(path: str) -> bool:
    """Whether `path` is a start of a supervised-start cache (`start-<key>/supervised.npz` with
    its key.json), whichever cache directory holds it."""
    entry = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(entry)
    return (os.path.basename(path) == "supervised.npz" and name.startswith("start-")
            and len(name) == len("start-") + 16 and os.path.isfile(os.path.join(entry, "key.json")))


def saved_config(run_dir: str) -> RunConfig | None:
    """The config a run directory was started with (its config.json), or None if it holds no
    readable config: a resumed run keeps its own start unless --init is given."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            return RunConfig.from_dict(json.load(f))
    except (OSError, ValueError, TypeError):
        return None
