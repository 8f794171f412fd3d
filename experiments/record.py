"""The command that records a game's games to a replay directory (the format:
actors/replays.py), for supervised learning (issue 14 section 1; AlphaStar learnt first from
human replays, we have none: the game's scripted AI stands in for the humans). The recording
is the game's (`SupervisedStart.record_games`, named in the game's registration); a game
without a supervised start has no replays.

    python -m experiments.record --policy=heuristic --games=324 --out=replays/heuristic
    python -m experiments.record --policy=runs/league:terran_main_agent_0 --games=90 --out=replays/main

`--policy=heuristic`: the game's scripted AI on both sides (SMAX: jaxmarl's scripted micro,
every race pairing and army evenly); `--policy=RUN_DIR:PLAYER_ID`: a player of a league run
(its learner checkpoint or frozen parameters, `coordinator.param_store.player_params`; the
network from the run's config.json) on both sides. The command lives here, above the game's package, because it
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
    flags.DEFINE_string("game", "", "the game, one with a supervised start (default: the league's, "
                        "experiments.league --game)")
    flags.DEFINE_string("policy", "heuristic", "heuristic, or RUN_DIR:PLAYER_ID of a league run")
    flags.DEFINE_integer("games", 81, "games to record")
    flags.DEFINE_string("out", "", "the replay directory (created, or appended to)")
    flags.DEFINE_integer("chunk_games", 27, "games per chunk (one jitted batch)")
    flags.DEFINE_integer("seed", 0, "seed of the games")


class PolicyError(ValueError):
    """--policy names no player that can be loaded."""


def load_player(source: str):
    """(network, params) of RUN_DIR:PLAYER_ID (the network and the game's spec from the run's
    config.json); PolicyError naming it if it cannot be loaded."""
    import jax
    import numpy as np

    from coordinator.param_store import player_params
    from experiments import build
    from experiments.config import RunConfig

    run_dir, sep, player = source.rpartition(":")
    config_path = os.path.join(run_dir, "config.json")
    if not sep or not os.path.isfile(config_path):
        raise PolicyError(f"--policy={source}: no run config {config_path}; pass --policy=heuristic "
                          "or RUN_DIR:PLAYER_ID of a league run directory")
    try:
        with open(config_path) as f:
            config = RunConfig.from_dict(json.load(f))
        if not config.game_info.capabilities.supervised_start:
            raise ValueError(f"the run plays {config.game}, which has no replays")
        spec = config.game_info.functions().spec
        network = build.make_network(config, spec)
        _, params = player_params(run_dir, player)
        like = build.initial_params(network, spec, 0, 0)
        want = jax.tree_util.tree_structure(like)
        if jax.tree_util.tree_structure(params) != want or any(
                np.shape(a) != np.shape(b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(like))):
            raise ValueError("its parameters do not match the run's network")
    except (KeyError, ValueError, OSError) as e:
        raise PolicyError(f"--policy={source}: cannot load the player ({type(e).__name__}: {e}); pass "
                          "RUN_DIR:PLAYER_ID of a saved player of a run of a game with replays") from None
    return network, params


def cli(game: str, policy: str, games: int, out: str, chunk_games: int = 27, seed: int = 0,
        config=None) -> int:
    """The command: records, or prints what is wrong with the input and returns 2 (nothing
    written). `game`: "" for the league's default; `config`: the game's own settings (its default
    when None)."""
    from actors.games import registry
    from experiments.config import RunConfig

    game = game or RunConfig().game

    try:
        start = registry.resolve(game).capabilities.supervised_start
    except registry.UnknownGame as e:
        print(f"error: --game={game}: {e}", file=sys.stderr)
        return 2
    if start is None:
        with_replays = [n for n in registry.names() if registry.resolve(n).capabilities.supervised_start]
        print(f"error: --game={game}: the game has no scripted AI to record and no replays; "
              f"games with replays: {', '.join(with_replays)}", file=sys.stderr)
        return 2
    if not out:
        print("error: --out=DIR is required (the replay directory)", file=sys.stderr)
        return 2
    start = start()
    try:
        if policy != "heuristic":
            policy = load_player(policy)
        start.record_games(out, policy, games, chunk_games, seed, config)
    except (PolicyError, *start.errors()) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv):
    del argv
    return cli(FLAGS.game, FLAGS.policy, FLAGS.games, FLAGS.out, FLAGS.chunk_games, FLAGS.seed)


if __name__ == "__main__":
    define_flags()
    app.run(lambda argv: sys.exit(main(argv)))
