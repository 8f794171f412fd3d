"""The command that clones one supervised agent per race of a game from its replays (AlphaStar,
seed 002, "Supervised learning"). The cloning, its loss and its output are the game's
(`SupervisedStart.clone`, named in the game's registration):

    python -m experiments.supervised --replays=replays/heuristic --out=supervised.npz

Output: ONE file of the project's params format holding {race: parameters}, and beside it
`<out>.json` (network sizes, replay directory, held-out accuracies, win rates against the
heuristic with `--eval_games`). Bad input (not a replay directory, another game, spec or format
version, a corrupt chunk, no games of a race): a message naming the file, exit 2, nothing
written.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
    """The command line flags (defined only when run as a command: importing the module for
    its functions defines none)."""
    flags.DEFINE_string("game", "", "the game, one with a supervised start (default: the league's, "
                        "experiments.league --game)")
    flags.DEFINE_string("replays", "", "replay directory (experiments.record --out)")
    flags.DEFINE_string("out", "", "the supervised parameters file (.npz), written at the end")
    flags.DEFINE_integer("steps", 2000, "training steps (batches) per race")
    flags.DEFINE_integer("batch_size", 16, "sequences per batch")
    flags.DEFINE_float("learning_rate", 1e-3, "Adam learning rate")
    flags.DEFINE_float("holdout", 0.1, "fraction of games held out for the accuracy")
    flags.DEFINE_integer("hidden_size", 64, "network width (as experiments.league --network.hidden_size)")
    flags.DEFINE_integer("core_size", 64, "LSTM size (as experiments.league --network.core_size)")
    flags.DEFINE_integer("eval_games", 0, "games per matchup against the heuristic after training (0: none)")
    flags.DEFINE_integer("seed", 0, "seed of the initial parameters, batches and split")
    flags.DEFINE_string("races", "", "races to train, comma-separated (default: every race of the game)")
    flags.DEFINE_bool("z", True, "the network takes z (as experiments.league --network.z)")


def cli(replay_dir: str, out: str, races=(), config=None, game: str = "", **settings) -> int:
    """The command: trains, or prints what is wrong with the input and returns 2 (nothing
    written). `game`: "" for the league's default; `races`: () for every race of the game;
    `config`: the game's own settings."""
    from actors.games import registry
    from experiments.config import RunConfig

    game = game or RunConfig().game

    try:
        info = registry.resolve(game)
    except registry.UnknownGame as e:
        print(f"error: --game={game}: {e}", file=sys.stderr)
        return 2
    if info.capabilities.supervised_start is None:
        print(f"error: --game={game}: the game has no supervised start to clone (see "
              "`python -m experiments.record`)", file=sys.stderr)
        return 2
    if not replay_dir or not out:
        print("error: --replays=DIR and --out=FILE are required", file=sys.stderr)
        return 2
    known = info.capabilities.races
    races = tuple(races) or known
    bad = [r for r in races if r not in known]
    if bad or not races:
        print(f"error: --races: unknown {bad or 'none'}; choose from {known}", file=sys.stderr)
        return 2
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        print(f"error: --out={out}: directory {out_dir} does not exist; create it", file=sys.stderr)
        return 2
    start = info.capabilities.supervised_start()
    try:
        start.clone(replay_dir, out, races, config, **settings)
    except start.errors() as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv):
    del argv
    races = tuple(r for r in FLAGS.races.split(",") if r)
    return cli(FLAGS.replays, FLAGS.out, races, game=FLAGS.game, steps=FLAGS.steps, batch_size=FLAGS.batch_size,
               learning_rate=FLAGS.learning_rate, holdout=FLAGS.holdout,
               hidden_size=FLAGS.hidden_size, core_size=FLAGS.core_size,
               eval_games=FLAGS.eval_games, seed=FLAGS.seed, z=FLAGS.z)


if __name__ == "__main__":
    define_flags()
    app.run(lambda argv: sys.exit(main(argv)))
