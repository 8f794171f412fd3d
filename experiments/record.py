"""The command that records SMAX races games to a replay directory (the recording itself:
`actors.games.smax_races.record`; the format: actors/replays.py), for supervised learning
(issue 14 section 1; AlphaStar learnt first from human replays, we have none: jaxmarl's
scripted heuristic stands in for the humans).

    python -m experiments.record --game=smax_races --policy=heuristic --games=324 --out=replays/heuristic
    python -m experiments.record --policy=runs/smax_races-r3:terran_main_agent_0 --games=90 --out=replays/main

`--policy=heuristic`: jaxmarl's scripted micro on both sides, every race pairing and army
evenly; `--policy=RUN_DIR:PLAYER_ID`: a player of a league run (its learner checkpoint or
frozen parameters, `coordinator.param_store.player_params`; the network from the run's
config.json) on both sides. The command lives here, above the game's package, because it
reads a league run. Bad input (another game, a directory of other replays, a player that
cannot be loaded): a message naming it, exit code 2, nothing written.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
    """The command line flags (defined only when run as a command: importing the module for
    its functions defines none)."""
    flags.DEFINE_string("game", "smax_races", "the game (only smax_races has replays)")
    flags.DEFINE_string("policy", "heuristic", "heuristic, or RUN_DIR:PLAYER_ID of a league run")
    flags.DEFINE_integer("games", 81, "games to record")
    flags.DEFINE_string("out", "", "the replay directory (created, or appended to)")
    flags.DEFINE_integer("chunk_games", 27, "games per chunk (one jitted batch)")
    flags.DEFINE_integer("seed", 0, "seed of the games")


def load_player(source: str, spec):
    """(network, params) of RUN_DIR:PLAYER_ID; RecordError naming it if it cannot be loaded."""
    import jax
    import numpy as np

    from actors.games.smax_races.record import RecordError
    from coordinator.param_store import player_params
    from experiments import build
    from experiments.config import RunConfig

    run_dir, sep, player = source.rpartition(":")
    config_path = os.path.join(run_dir, "config.json")
    if not sep or not os.path.isfile(config_path):
        raise RecordError(f"--policy={source}: no run config {config_path}; pass --policy=heuristic "
                          "or RUN_DIR:PLAYER_ID of a league run directory")
    try:
        with open(config_path) as f:
            config = RunConfig.from_dict(json.load(f))
        if not config.game_info.capabilities.supervised_start:
            raise ValueError(f"the run plays {config.game}, which has no replays")
        network = build.make_network(config, spec)
        _, params = player_params(run_dir, player)
        like = build.initial_params(network, spec, 0, 0)
        want = jax.tree_util.tree_structure(like)
        if jax.tree_util.tree_structure(params) != want or any(
                np.shape(a) != np.shape(b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(like))):
            raise ValueError("its parameters do not match the run's network")
    except (KeyError, ValueError, OSError) as e:
        raise RecordError(f"--policy={source}: cannot load the player ({type(e).__name__}: {e}); pass "
                          "RUN_DIR:PLAYER_ID of a saved player of a smax_races run") from None
    return network, params


def cli(game: str, policy: str, games: int, out: str, chunk_games: int = 27, seed: int = 0,
        config=None) -> int:
    """The command: records, or prints what is wrong with the input and returns 2 (nothing written)."""
    if game != "smax_races":
        print(f"error: --game={game}: replays are recorded for smax_races only", file=sys.stderr)
        return 2
    if not out:
        print("error: --out=DIR is required (the replay directory)", file=sys.stderr)
        return 2
    from actors import replays
    from actors.games import smax_races
    from actors.games.smax_races import record

    config = config or smax_races.SmaxRacesConfig()
    try:
        if policy != "heuristic":
            policy = load_player(policy, smax_races.functions(config).spec)
        record.record(out, policy, games, chunk_games, seed, config)
    except (record.RecordError, replays.ReplayError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv):
    del argv
    return cli(FLAGS.game, FLAGS.policy, FLAGS.games, FLAGS.out, FLAGS.chunk_games, FLAGS.seed)


if __name__ == "__main__":
    define_flags()
    app.run(lambda argv: sys.exit(main(argv)))
