"""The device path against the replay path: a league's recorded games/s and learnt steps/s,
both measured in one run (this machine is shared and noisy: compare the ratio).

    python -m benchmarks.device_bench --game=leduc_poker --seconds=120 --warmup=40
    python -m benchmarks.device_bench --game=smax_races --seconds=240 --warmup=150

Each path runs the game's default league (`python -m experiments.league --game=G`, in one
process: `--runner=inprocess`) for `--warmup + --seconds` seconds; the rates are the increments
of league.db's game count and of the learners' learnt steps over the last `--seconds` (compiling
and the first snapshots fall in the warm-up). Issue 25's targets: Leduc >= 20,000 recorded games/s
(Kuhn >= 50,000), every game learnt from (the device path's sample reuse is 1 by construction).

SMAX (`--game=smax_races`: the `--races=3` league, `--init` as given, default none: random
parameters, no supervised start to build): besides, one SMAX learner's update alone on a random
legal batch (`benchmarks.learner_bench.smax_part`) in the same run; the ratio is the league's
learnt steps/s over all its learners to that (issue 25's target: >= 0.6; the replay path's
league was at ~0.3).
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
import time

from absl import app, flags

from benchmarks import learner_bench  # its flags (--rounds, --updates) time the SMAX learner alone

FLAGS = flags.FLAGS
flags.DEFINE_string("game", "leduc_poker", "kuhn_poker, leduc_poker or a matrix game")
flags.DEFINE_float("seconds", 120.0, "measured seconds per path")
flags.DEFINE_float("warmup", 40.0, "seconds per path before measuring (compiles, first snapshots)")
flags.DEFINE_list("paths", ["device", "replay"], "experience paths to measure, in this order")
flags.DEFINE_string("init", "none", "SMAX: the league's --init (none: random parameters)")
flags.DEFINE_multi_string("set", [], "more settings of both leagues, PATH=VALUE (e.g. device.updates_per_chunk=32)")
TARGETS = {"leduc_poker": 20_000, "kuhn_poker": 50_000}


def measure(game: str, path: str, warmup: float, seconds: float, settings: dict | None = None) -> dict:
    """The league's recorded games/s and learnt steps/s over the last `seconds` of a run of
    `warmup + seconds` (`settings`: more {field path: value} over the flags' `--set`)."""
    from coordinator.history import LeagueHistory
    from experiments import launchers
    from experiments.config import RunConfig, prepare_run_dir

    run_dir = tempfile.mkdtemp(prefix=f"device_bench_{path}_")
    extra = {"init": FLAGS.init} if game == "smax_races" else {}
    for setting in FLAGS.set:
        path_, _, value = setting.partition("=")
        kind = type(RunConfig.make(game=game).get(path_))
        if kind is bool and value.lower() not in ("true", "false", "1", "0"):
            raise app.UsageError(f"--set={setting}: {path_} is true or false")
        extra[path_] = value.lower() in ("true", "1") if kind is bool else kind(value)
    extra.update(settings or {})
    config = RunConfig.for_game(game, runner="inprocess", run_dir=run_dir, experience=path,
                                minutes=(warmup + seconds) / 60.0, dashboard_port=-1,
                                progress_every_seconds=5.0, **extra)
    prepare_run_dir(config)
    marks: dict = {}
    stop = threading.Event()
    out = io.StringIO()

    def watch():
        start = time.time()
        for name, at in (("start", warmup), ("end", warmup + seconds - 2.0)):
            if stop.wait(max(0.0, start + at - time.time())):
                return
            history = LeagueHistory(os.path.join(run_dir, "league.db"), readonly=True)
            marks[name] = (time.time(), history.game_count(), _latest_steps(history))
            history.close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    launchers.run_inprocess(config, stop_event=threading.Event(), out=out)
    stop.set()
    watcher.join()
    (t0, g0, s0), (t1, g1, s1) = marks["start"], marks["end"]
    return {"games_per_s": (g1 - g0) / (t1 - t0), "learnt_steps_per_s": (s1 - s0) / (t1 - t0),
            "games": g1, "run_dir": run_dir}


def _latest_steps(history) -> float:
    """Learnt steps summed over the learners, from their latest `steps` metric rows."""
    latest: dict = {}
    for when, agent, name, value in history.learner_metrics():
        if name == "steps" and (agent not in latest or when >= latest[agent][0]):
            latest[agent] = (when, value)
    return sum(v for _, v in latest.values())


def main(argv):
    del argv
    results = {}
    for path in FLAGS.paths:
        results[path] = r = measure(FLAGS.game, path, FLAGS.warmup, FLAGS.seconds)
        print(f"{path:7s} {FLAGS.game}: {r['games_per_s']:,.0f} recorded games/s, "
              f"{r['learnt_steps_per_s']:,.0f} learnt steps/s ({r['games']:,} games; {r['run_dir']})",
              flush=True)
    if FLAGS.game == "smax_races":
        alone = learner_bench.smax_part(1.0)["smax_learnt_steps_per_s"]
        steps = {p: r["learnt_steps_per_s"] for p, r in results.items()}
        print(f"one SMAX learner's update alone: {alone:,.0f} learnt steps/s")
        print("RESULT device_league game=smax_races " + " ".join(
            f"{p}_learnt_steps_per_s={v:.0f} {p}_over_alone={v / alone:.2f}" for p, v in steps.items())
            + f" alone_learnt_steps_per_s={alone:.0f} ratio={steps.get('device', float('nan')) / alone / 0.6:.2f}"
            " target=0.6")
        return
    target = TARGETS.get(FLAGS.game, 0)
    device = results.get("device", {}).get("games_per_s", float("nan"))
    replay = results.get("replay", {}).get("games_per_s", float("nan"))
    print(f"RESULT device_league game={FLAGS.game} device_games_per_s={device:.0f} "
          f"replay_games_per_s={replay:.0f} device_over_replay={device / replay:.1f} "
          f"ratio={device / target if target else float('nan'):.2f} target={target or 'none'}")


if __name__ == "__main__":
    app.run(main)
