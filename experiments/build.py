"""Building a league's parts from a `RunConfig`: the game, the network, each learning agent's
initial parameters, its teacher and z bank, and the supervised start (`--init`). The nodes
(experiments/nodes/) and the command line tools (league, record, supervised, surgery) call
these; none of them is a node.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping

import numpy as np

from experiments.config import RunConfig
from league.players import learning_agents

CACHE_MAX_BYTES = 2 << 30   # the compilation cache's bound: two CI runs added ~35 MB


def prune_cache(directory: str, max_bytes: int) -> None:
    """Bounds a cache directory: over `max_bytes`, its least recently used files (by access or
    modification time, whichever is later) are removed until it holds 3/4 of that. (JAX's own
    bound, `jax_compilation_cache_max_size`, takes a lock across processes on every read and
    needs the filelock package, which the Launchpad environment lacks.)"""
    entries = []
    with os.scandir(directory) as it:
        for entry in it:
            if entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                entries.append((max(st.st_atime, st.st_mtime), st.st_size, entry.path))
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return
    for _, size, path in sorted(entries):
        if total <= max_bytes * 3 // 4:
            break
        try:
            os.remove(path)
        except FileNotFoundError:   # another process pruned it
            pass
        total -= size


@functools.cache   # once a process: make_game calls it for every game it builds
def enable_compilation_cache() -> None:
    """JAX's persistent compilation cache: restarts and co-running processes that compile the
    same network and game load the executable instead of compiling it again. Every program,
    however small: a process compiles ~200 small ones besides its few large ones, and loading
    them too took a Kuhn league's warm start from 42 to 34 CPU-seconds (BENCHMARKS.md, "CI
    time")."""
    import jax

    directory = os.environ.get("LEAGUE_JAX_CACHE", os.path.expanduser("~/.cache/league/jax"))
    try:
        os.makedirs(directory, exist_ok=True)
        prune_cache(directory, CACHE_MAX_BYTES)
        jax.config.update("jax_compilation_cache_dir", directory)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    except Exception as e:  # a cache is an optimisation only
        print(f"warning: no JAX compilation cache ({e})")


def make_game(config: RunConfig, batch_size: int):
    from actors.games import make_batch_game

    enable_compilation_cache()
    return make_batch_game(config.game, batch_size)


def make_network(config: RunConfig, spec):
    """The unit network where the game has the `unit_network` capability (SMAX races), the
    MLP + LSTM reference network otherwise."""
    import agents

    z = None
    if config.z_network:  # the game's statistic z (`Capabilities.z`)
        statistic = config.game_info.capabilities.z()
        z = (statistic.Z_SIZE, len(statistic.PSEUDO_REWARDS))
    return agents.make_network(spec, unit=config.game_info.capabilities.unit_network,
                               hidden_size=config.network.hidden_size,
                               core_size=config.network.core_size, z=z)


def load_z_bank(config: RunConfig, spec):
    """The z bank main agents sample z from (the game's `Capabilities.z().ZBank` of `config.z_replay_dir`),
    or None (z = 0, no pseudo-rewards); ConfigError naming the directory and the problem if it
    is not a readable replay directory of this game and spec."""
    from actors import replays
    from experiments.config import ConfigError

    directory = config.z_replay_dir
    if directory is None:
        return None
    try:
        return config.game_info.capabilities.z().ZBank.from_replays(directory, spec, races=len(config.race_names))
    except replays.ReplayError as e:
        raise ConfigError(f"--z_replays={directory}: {e}") from None


def agent_z_banks(config: RunConfig, bank) -> dict:
    """{learning agent: the z bank its actors sample from}: `bank` for main agents, None (z = 0)
    for main and league exploiters (AlphaStar conditions only main agents on z)."""
    return {p.player_id: bank if p.role == "main_agent" else None
            for p in learning_agents(config.league)}


def z_summary(config: RunConfig, bank) -> str:
    """The progress line saying where main agents' z comes from."""
    if not config.z_network:
        return "z: the network takes no z"
    if bank is None:
        why = ("--z_replays=none; --z_replays=start or =DIR conditions main agents on z" if config.z_replays == "none"
               else "no replays: pass --z_replays=DIR or an --init whose report names its replays")
        return f"z: off, every agent plays with z = 0 and no pseudo-rewards ({why})"
    return (f"z: main agents sample z from {int(bank.counts.sum())} recorded sides of "
            f"{bank.source} (their race against the enemy's), each pseudo-reward "
            f"(build order edit distance, attacked types Hamming) active with probability "
            f"{config.actor.z_reward_probability}; exploiters play with z = 0")


def load_teacher(config: RunConfig, like):
    """The teacher's parameters of `--teacher` ("RUN_DIR:PLAYER_ID" or a params .npz file), or
    None without one; ConfigError naming the source and the mismatch if its shapes are not
    those of the run's network (`like`: the run's initial parameters)."""
    from agents.storage import params_from_npz_bytes
    from coordinator.param_store import player_params
    from experiments.config import ConfigError

    source = config.teacher
    if not source:
        return None
    try:
        if os.path.isfile(source):
            with open(source, "rb") as f:
                _, params = params_from_npz_bytes(f.read())
        else:
            run_dir, sep, player = source.rpartition(":")
            if not sep or not os.path.isdir(run_dir):
                raise FileNotFoundError("neither a params .npz file nor RUN_DIR:PLAYER_ID")
            _, params = player_params(run_dir, player)
    except Exception as e:  # noqa: BLE001 -- any failure to read is the flag's problem
        raise ConfigError(f"--teacher={source}: cannot load its parameters ({type(e).__name__}: {e}); "
                          "pass RUN_DIR:PLAYER_ID of a saved player or a params .npz file") from None

    check_shapes(f"--teacher={source}", params, like)
    return params


def check_shapes(what: str, params, like) -> None:
    """ConfigError naming the first parameter of `params` whose shape is not `like`'s."""
    import jax

    from experiments.config import ConfigError

    want = jax.tree_util.tree_flatten_with_path(like)[0]
    got = dict(jax.tree_util.tree_flatten_with_path(params)[0])
    for path, leaf in want:
        if path not in got or np.shape(got[path]) != np.shape(leaf):
            where = jax.tree_util.keystr(path)
            shape = np.shape(got[path]) if path in got else "missing"
            hint = ""
            if "z_encoder" in where or "pseudo_value" in where or "team" in where:
                hint = (" (a network without the z input, e.g. a supervised start made before z "
                        "was an input: rebuild it with experiments.supervised, or run with "
                        "--network.z=false)")
            raise ConfigError(f"{what}: parameter {where} has shape {shape}, the run's network has "
                              f"{np.shape(leaf)}; it must come from the same game and network sizes "
                              f"(--hidden_size, --core_size, --network.z){hint}")


def load_init(config: RunConfig, like) -> dict | None:
    """`--init`'s supervised parameters by race (None without one), shape-checked against the
    run's network (`like`: its initial parameters); ConfigError naming the file and the
    problem if a race is missing or a shape differs."""
    from experiments.config import ConfigError

    path = config.init_file
    if path is None:
        return None
    init = {}
    for race in config.race_names:
        try:
            init[race] = load_supervised(path, race)
        except Exception as e:  # noqa: BLE001 -- any failure to read is the flag's problem
            raise ConfigError(f"--init={path}: cannot load race {race!r} ({type(e).__name__}: "
                              f"{e}); pass a file written by experiments.supervised with every race "
                              f"of the run ({', '.join(config.race_names)}), or --init=none") from None
        check_shapes(f"--init={path} ({race})", init[race], like)
    return init


def load_teachers(config: RunConfig, like, init: dict | None = None) -> dict | None:
    """The KL term's teacher by race ({race: params}), or None without a KL weight: the
    `--teacher` player for every race, else each race's supervised parameters of `--init`
    (AlphaStar: "a penalty whenever their action probabilities differ from the supervised
    policy", each agent's own race's). `init`: `load_init`'s result if already loaded.
    ConfigError naming the source if it cannot be loaded or does not fit `like`."""
    source = config.teacher_source
    if source == "teacher":
        teacher = load_teacher(config, like)
        return {race: teacher for race in config.race_names}
    if source == "init":
        return init if init is not None else load_init(config, like)
    return None


def agent_learner_configs(config: RunConfig, agent_ids) -> dict:
    """{learning agent: its LearnerConfig}: the run's, with the learning rate and loss of its
    role (`LearnerConfig.for_role`: exploiters learn best responses) and its race's KL-to-teacher
    weight (`RunConfig.kl_teacher_weights`)."""
    agents = {p.player_id: p for p in learning_agents(config.league)}
    weights = config.kl_teacher_weights

    def one(agent):
        learner = config.learner.for_role(agents[agent].role == "main_agent")
        loss = dataclasses.replace(learner.loss, kl_teacher_weight=weights[agents[agent].race])
        return dataclasses.replace(learner, loss=loss)
    return {a: one(a) for a in agent_ids}


def agent_races(config: RunConfig) -> dict[str, str]:
    """Each learning agent's race."""
    return {p.player_id: p.race for p in learning_agents(config.league)}


def initial_params(network, spec, agent_index: int, seed: int):
    """Each learning agent's initial (and reset) parameters, seeded by its index
    (`agents.initial_params`, imported here when called: this module imports no JAX)."""
    import agents

    return agents.initial_params(network, spec, agent_index, seed)


def parameter_shapes(network, spec):
    """The shapes of a network's parameters, compiling nothing (`agents.parameter_shapes`)."""
    import agents

    return agents.parameter_shapes(network, spec)


def learner_setup(config: RunConfig, agent_ids: list[str], agent_indices: Mapping[str, int]):
    """What every learner group builds first: (game spec, network, {agent: initial params},
    {agent: teacher params or None}) -- the supervised start (--init) replaces the random
    initial parameters, and each agent's teacher is its race's (`load_teachers`)."""
    probe = make_game(config, 1)
    network = make_network(config, probe.spec)
    initial = {a: initial_params(network, probe.spec, agent_indices[a], config.seed) for a in agent_ids}
    like = next(iter(initial.values()))
    races = agent_races(config)
    init = load_init(config, like)
    if init:  # AlphaStar: every agent starts (and exploiters reset) from the supervised agent
        initial = {a: init[races[a]] for a in agent_ids}
    teachers = load_teachers(config, like, init)
    return probe, network, initial, {a: None if teachers is None else teachers[races[a]] for a in agent_ids}

def load_supervised(path: str, race: str) -> dict:
    """One race's supervised parameters from a file written by this module."""
    from agents.storage import params_from_npz_bytes

    with open(path, "rb") as f:
        _, tree = params_from_npz_bytes(f.read())
    if race not in tree:
        raise KeyError(f"{path}: no supervised parameters for race {race!r} (has {sorted(tree)})")
    return tree[race]
