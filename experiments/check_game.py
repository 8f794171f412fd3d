"""Checks a game against the protocol the league plays (actors/games/base.py, `GameFunctions`):
what is wrong with it, and how to fix it.

    python -m experiments.check_game --game=mygames.rps:make
    python -m experiments.check_game --game=leduc_poker --batch_size=16 --steps=300 --seed=0

--game takes every form of `actors.games.registry.resolve` (a built-in, package.module:factory,
pgx/..., jaxmarl/..., openspiel/..., an entry point). Each check prints as it finishes, `ok`,
`skipped` (why) or `PROBLEM` (what is wrong and how to fix it); the checks are listed in
actors/games/check.py. The last line is `check_game: NAME passes the protocol (N checks)`
(exit 0) or `check_game: NAME: K problems` (exit 1); a --game that names no game prints
`error: ...` to stderr (exit 2).
"""

from __future__ import annotations

import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the command-line flags (only when run as a program)."""
    flags.DEFINE_string("game", None, "The game to check: any --game of the league (a built-in such as "
                        "kuhn_poker, package.module:factory, pgx/<env>, jaxmarl/<env>, openspiel/<name>).")
    flags.DEFINE_integer("batch_size", 16, "Games played side by side (the vmapped batch).")
    flags.DEFINE_integer("steps", 300, "Steps of random legal actions to play (each game auto-resets).")
    flags.DEFINE_integer("seed", 0, "Seed of the games' keys and of the random actions.")


def main(argv) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; see --help", file=sys.stderr)
        return 2
    from absl import logging as absl_logging

    if not FLAGS["verbosity"].present:   # absl's app.run makes libraries' INFO lines visible
        absl_logging.set_verbosity(absl_logging.WARNING)
    name = FLAGS.game
    if not name:
        print("error: --game=NAME is required (a built-in such as kuhn_poker, or package.module:factory)",
              file=sys.stderr)
        return 2
    if FLAGS.batch_size < 1 or FLAGS.steps < 1:
        print(f"error: --batch_size and --steps must be >= 1, got {FLAGS.batch_size} and {FLAGS.steps}",
              file=sys.stderr)
        return 2
    from actors.games import registry
    from actors.games.registry import UnknownGame, resolve

    try:
        game = resolve(name)
    except UnknownGame as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from actors.games.check import format_check, run_checks, summary
    from experiments.build import enable_compilation_cache

    enable_compilation_cache()   # a second check of the same game loads its programs
    print(f"check_game: {name} ({FLAGS.batch_size} games, {FLAGS.steps} steps, seed {FLAGS.seed})", flush=True)
    if adapted := registry.describe(name):
        print(adapted, flush=True)
    checks = run_checks(game, FLAGS.batch_size, FLAGS.steps, FLAGS.seed,
                        report=lambda check: print(format_check(check), flush=True))
    print(summary(name, checks), flush=True)
    return 1 if any(c.problems for c in checks) else 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
