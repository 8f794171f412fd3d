"""Puts a run's league.db back from the coordinator's last backup.

    python -m experiments.restore_history --run_dir=runs/league

The coordinator copies league.db to `<run_dir>/league.db.backup` every
`--backup_every_seconds` (SQLite's online backup: a consistent copy while the league
writes). This command checks the backup, sets the damaged league.db (and its -wal/-shm files)
aside as `league.db.damaged-<time>`, and copies the backup into its place; the same league
command then resumes from it. What the league recorded after the backup is lost; learners keep
their own checkpoints. Frozen players made after the backup are set aside
(`params.after-backup-<time>/`): the resumed league snapshots again under their ids. Refused
while a league or surgery holds the run directory.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

from absl import app, flags

from coordinator.history import BACKUP_NAME, DB_NAME, HistoryError, LeagueHistory, check_file
from experiments import run_lock

FLAGS = flags.FLAGS


def restore(run_dir: str) -> str:
    """Restores `<run_dir>/league.db` from its backup; returns a line saying what was done.
    HistoryError (nothing changed) when there is no good backup."""
    db, backup = os.path.join(run_dir, DB_NAME), os.path.join(run_dir, BACKUP_NAME)
    if not os.path.exists(backup):
        raise HistoryError(f"no backup of the league history at {backup}: the coordinator writes one "
                           "every --backup_every_seconds (300 by default) while a league runs")
    try:
        check_file(backup)
    except HistoryError as e:
        raise HistoryError(f"the backup {backup} is damaged too; nothing was changed ({e})") from None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = []
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            aside = f"{db}.damaged-{stamp}{suffix}"
            os.replace(db + suffix, aside)
            moved.append(aside)
    partial = db + ".restoring"
    shutil.copyfile(backup, partial)
    os.replace(partial, db)
    later = _set_aside_later_players(run_dir, stamp)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(os.path.getmtime(backup)))
    return (f"restored {db} from the backup of {when}" +
            (f"; the damaged file is kept as {moved[0]}" if moved else "") +
            (f"; {len(later)} frozen players made after the backup are set aside in {os.path.dirname(later[0])}"
             if later else "") + ". Rerun the league command to resume.")


def _set_aside_later_players(run_dir: str, stamp: str) -> list[str]:
    """Moves the parameter files of frozen players the restored history does not know (made
    after the backup) out of `params/`: the resumed league makes its snapshots again under the
    same ids, and the store never overwrites a file (it would hand out the old parameters)."""
    known = {p["player_id"] for p in LeagueHistory(run_dir, readonly=True).players()}
    store = os.path.join(run_dir, "params")
    aside = os.path.join(run_dir, f"params.after-backup-{stamp}")
    moved = []
    for name in sorted(os.listdir(store)) if os.path.isdir(store) else []:
        player = name[:-len(".npz")] if name.endswith(".npz") else None
        if player is None or "@" in player or player in known:   # `<agent>@initial`: resets' parameters
            continue
        os.makedirs(aside, exist_ok=True)
        os.replace(os.path.join(store, name), os.path.join(aside, name))
        moved.append(os.path.join(aside, name))
    return moved


def main(argv) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; see --help", file=sys.stderr)
        return 2
    run_dir = FLAGS.run_dir
    if not run_dir or not os.path.isdir(run_dir):
        print(f"error: --run_dir must name a league's run directory (got {run_dir!r})", file=sys.stderr)
        return 2
    try:
        with run_lock.hold(run_dir, "restoring league.db (experiments.restore_history)"):
            print(restore(run_dir))
    except (HistoryError, run_lock.RunLocked) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    flags.DEFINE_string("run_dir", "", "the league's run directory (it holds league.db and league.db.backup)")
    app.run(lambda argv: sys.exit(main(argv)))
