"""league.db's storage per recorded game, per row of counts (the default) against a row per game
(`--per_game_rows`, what every actor's game cost before issue 31), both measured in one run.

    python -m benchmarks.storage_bench --game=kuhn_poker --seconds=60

Each arm runs the game's default league on the replay path (actors report single games, the
path where per-game rows were written) in one process for `--seconds`; then league.db is
checkpointed (WAL into the file) and its size, minus the size of the same league's history with
no games (the other tables: players, events, payoff snapshots, Nash, ratings, metrics), is
divided by the games recorded. MB per hour follow at the rate measured here and at the device
path's target rates (issue 25: Kuhn 50,000 and Leduc 20,000 games/s). The ratio is the default's
bytes per game over per-game rows' (target: at most 0.1).
"""

from __future__ import annotations

import io
import os
import sqlite3
import tempfile
import time

from absl import app, flags

from coordinator.history import LeagueHistory

FLAGS = flags.FLAGS
flags.DEFINE_string("game", "kuhn_poker", "kuhn_poker, leduc_poker or a matrix game")
flags.DEFINE_float("seconds", 60.0, "seconds per arm")
flags.DEFINE_string("experience", "replay", "the arms' experience path (replay: actors report single games)")
TARGET_RATES = {"kuhn_poker": 50_000, "leduc_poker": 20_000}


def game_bytes(db: str) -> tuple[int, int]:
    """(bytes of the games and game_counts tables with their indexes, games recorded), by
    SQLite's dbstat table when it has one, else by the file's pages over all tables."""
    con = sqlite3.connect(db)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        games = LeagueHistory(db, readonly=True).game_count()
        try:
            size = con.execute("SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN "
                               "('games', 'game_counts', 'games_pair')").fetchone()[0]
        except sqlite3.OperationalError:   # no dbstat in this SQLite: the whole file
            size = os.path.getsize(db)
        return int(size), int(games)
    finally:
        con.close()


def measure(game: str, per_game_rows: bool, seconds: float) -> dict:
    from experiments import launchers
    from experiments.config import RunConfig, prepare_run_dir

    run_dir = tempfile.mkdtemp(prefix=f"storage_bench_{int(per_game_rows)}_")
    config = RunConfig.for_game(game, runner="inprocess", run_dir=run_dir, experience=FLAGS.experience,
                                minutes=seconds / 60.0, dashboard_port=-1, progress_every_seconds=10.0,
                                per_game_rows=per_game_rows)
    prepare_run_dir(config)
    started = time.time()
    launchers.LAUNCHERS["inprocess"](config, out=io.StringIO())
    elapsed = time.time() - started
    size, games = game_bytes(os.path.join(run_dir, "league.db"))
    return {"bytes": size, "games": games, "bytes_per_game": size / max(games, 1),
            "games_per_second": games / elapsed, "file_mb": os.path.getsize(os.path.join(run_dir, "league.db")) / 1e6}


def main(argv):
    del argv
    arms = {}
    for name, per_game in (("per_game_rows", True), ("counts", False)):
        arms[name] = r = measure(FLAGS.game, per_game, FLAGS.seconds)
        mb_hour = r["bytes_per_game"] * r["games_per_second"] * 3600 / 1e6
        target = TARGET_RATES.get(FLAGS.game)
        at_target = f"  at the device path's target {target:,} games/s: {r['bytes_per_game'] * target * 3600 / 1e6:,.0f} MB/h" if target else ""
        print(f"{name:>14}: {r['games']:,} games in {FLAGS.seconds:.0f} s ({r['games_per_second']:,.0f}/s), "
              f"game tables {r['bytes'] / 1e6:.2f} MB, {r['bytes_per_game']:.2f} bytes per game, "
              f"{mb_hour:,.1f} MB/h at this rate{at_target}  (league.db {r['file_mb']:.1f} MB)", flush=True)
    ratio = arms["counts"]["bytes_per_game"] / max(arms["per_game_rows"]["bytes_per_game"], 1e-9)
    print(f"RESULT storage game={FLAGS.game} bytes_per_game={arms['counts']['bytes_per_game']:.2f} "
          f"per_game_rows_bytes_per_game={arms['per_game_rows']['bytes_per_game']:.2f} "
          f"ratio={ratio:.4f} target=<=0.1")


if __name__ == "__main__":
    app.run(main)
