"""Does the league learn poker? Exact NashConv over wall-clock time, league vs self-play vs FSP.

    python -m benchmarks.poker_quality --game=kuhn_poker --minutes=10
    python -m benchmarks.poker_quality --game=leduc_poker --minutes=30 --arms=league
    python -m benchmarks.poker_quality --game=kuhn_poker --minutes=3 --psro   # + OpenSpiel PSRO peer
    python -m benchmarks.poker_quality --game=leduc_poker --minutes=5 --arms= --peers=nfsp \
        --nfsp_source=DIR   # peers only: OpenSpiel NFSP (TF1, v1.5 files under DIR)
    python -m benchmarks.poker_quality --game=kuhn_poker --minutes=3 --seeds=0,1 \
        --arms=league,mlp --arm=mlp:network.core_size=0   # an arm per change, 2 seeds

Each arm trains a league through the real program (`experiments.launchers.run_inprocess`, the
`inprocess` runner) for the same wall-clock budget and seed:
- `league`: the AlphaStar composition (main agent, main exploiter, two league exploiters);
- `self_play`: `--main_agent_matchmaker=self_play`, no exploiters (naive self-play);
- `fsp`: `--main_agent_matchmaker=fsp`, no exploiters (fictitious self-play);
- any arm named by `--arm=NAME:key=value,key=value`: the league with those `RunConfig`
  settings (one change per arm, measured beside the defaults in the same run).
Every arm runs once per seed of `--seeds`, the arms of one seed one after the other.
Every `--every` seconds, while the arm trains, the exact NashConv (OpenSpiel) of (a) the main
agent's current parameters (read from the live learner) and (b) the league's Nash mixture
(weights from league.db, players mixed per information state by reach;
`experiments.nashconv.RunReader`) is recorded, plus (c) the Nash mixture of the exact chip
meta-game over the same players (`--exact`). Measuring runs in the training process and
takes a small share of its time (Kuhn: milliseconds per new player). Learnt steps/s: the
learners' steps (all agents) at the last measurement over the seconds since training began.

The arms use the program's poker defaults: chip rewards (the game's own payoff), random seats,
entropy 0.1, and the coordinator's meta-game on the chips won. `--reward=outcome` trains on
+1/0/-1 instead (measured on Kuhn: every arm stalls at NashConv 2/3, "always bet/call").

Also recorded at every measurement: (d) the mean of every Nash mixture the league has
published so far, over its frozen players (`--mixture=nash_average` of `experiments.nashconv`;
fictitious play's average strategy), "average" in the table.

Writes `docs/poker_<game>_nashconv.png`, a table on stdout and, as its last line,
`RESULT poker nashconv_<game>=<x> latest=<l> average=<a> ratio=<x/target> target=1.0` with x
the best final NashConv of the league arm (latest Nash mixture, average Nash mixture or main
agent; the mean over the seeds), l and a the means of the latest and the average mixture's,
and target 0.02 for Kuhn (in 10 minutes), 0.3 for Leduc (in 30 minutes; OpenSpiel
exploitability 0.15).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

# NashConv targets: Kuhn < 0.02 in 10 minutes; Leduc < 0.3 in 30 (OpenSpiel exploitability 0.15).
TARGETS = {"kuhn_poker": 0.02, "leduc_poker": 0.3}
UNIFORM = {"kuhn_poker": 11 / 12, "leduc_poker": 4.747222222222222}
ARMS = {
    "league": {},
    "self_play": dict(main_agent_matchmaker="self_play", main_exploiters_per_race=0,
                      league_exploiters_per_race=0),
    "fsp": dict(main_agent_matchmaker="fsp", main_exploiters_per_race=0,
                league_exploiters_per_race=0),
}


# ---------------------------------------------------------------------------------------------
# One arm.


@dataclasses.dataclass
class Point:
    seconds: float
    games: int
    players: int
    main: float
    nash: float
    nash_exact: float
    learnt_steps: int = 0   # every learner's steps at this measurement
    nash_average: float = float("nan")   # the mean of the published Nash mixtures (frozen players)


def parse_arm(text: str) -> tuple[str, dict]:
    """`NAME:key=value,key=value` -> (NAME, settings); values are JSON where they parse."""
    name, sep, body = text.partition(":")
    if not sep or not name or name in ARMS:
        raise ValueError(f"--arm={text!r}: write NAME:key=value,key=value with a new NAME "
                         f"(not {', '.join(ARMS)})")
    return name, parse_settings([item for item in body.split(",") if item], f"--arm={text}")


def parse_settings(items: list[str], where: str) -> dict:
    """`key=value` strings -> a dict (JSON values where they parse, strings otherwise)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{where}: {item!r} is not key=value")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def average(reader) -> float:
    """Exact NashConv of the mean of the Nash mixtures the league published so far (frozen
    players only: `RunReader.average_nash`); nan before the first."""
    try:
        return reader.measure("nash_average").nash_conv
    except ValueError:
        return float("nan")


def run_arm(arm: str, game: str, minutes: float, run_dir: str, every: float, seed: int,
            exact: bool, reward: str, overrides: dict, log, settings: dict | None = None) -> list[Point]:
    """Trains one arm in this process and measures it while it trains (`settings`: an arm's
    own settings, over `overrides`)."""
    from experiments import launchers
    from experiments.config import RunConfig, prepare_run_dir
    from experiments.nashconv import RunReader

    values = dict(ARMS.get(arm, {}), **overrides, **(settings or {}))
    config = RunConfig.for_game(game, races=1, runner="inprocess", run_dir=run_dir, minutes=minutes,
                       seed=seed, dashboard_port=-1,
                       reward_plugin=None if reward == "chips" else reward,
                       **values)
    prepare_run_dir(config)
    captured = {}

    def capture(handles):  # the live learners, to read the main agent's current parameters
        captured["group"] = handles["learners"]

    stop = threading.Event()
    failure = []

    def train():
        try:
            launchers.run_inprocess(config, stop_event=stop, out=log, on_launch=capture)
        except BaseException as e:  # noqa: BLE001 -- reported by the caller
            failure.append(e)

    thread = threading.Thread(target=train, name=f"league-{arm}", daemon=True)
    thread.start()
    while "group" not in captured and thread.is_alive():
        time.sleep(0.2)
    group = captured.get("group")
    started = time.time()
    reader = None
    points: list[Point] = []

    def measure():
        nonlocal reader
        reader = reader or RunReader(run_dir)
        override = {a: group.params(a) for a in group.agent_ids}
        main = reader.measure("main", override=override).nash_conv
        try:
            nash = reader.measure("nash", "league", override=override).nash_conv
        except ValueError:  # no meta-game published yet
            nash = float("nan")
        nash_exact = (reader.measure("nash", "exact", override=override).nash_conv
                      if exact else float("nan"))
        history = reader.history()
        point = Point(time.time() - started, history.game_count(), len(history.players()),
                      main, nash, nash_exact, sum(group.steps(a) for a in group.agent_ids),
                      average(reader))
        points.append(point)
        print(f"  [{arm} seed {seed}] {point.seconds:6.0f} s  games {point.games:8d}  players "
              f"{point.players:4d}  learnt steps/s {point.learnt_steps / point.seconds:8.0f}  "
              f"NashConv main {main:.4f}  nash {nash:.4f}  average {point.nash_average:.4f}  "
              f"exact-nash {nash_exact:.4f}", flush=True)

    next_at = every
    while thread.is_alive():
        thread.join(timeout=max(0.0, min(1.0, next_at - (time.time() - started))))
        if group is not None and thread.is_alive() and time.time() - started >= next_at:
            measure()
            next_at += every
    if failure:
        raise RuntimeError(f"arm {arm} failed") from failure[0]
    # The run has stopped: the learner checkpoints hold the final parameters.
    reader = RunReader(run_dir)
    history = reader.history()
    last = points[-1] if points else Point(1.0, 0, 0, 0.0, 0.0, 0.0)
    final = Point(time.time() - started, history.game_count(), len(history.players()),
                  reader.measure("main").nash_conv, reader.measure("nash").nash_conv,
                  reader.measure("nash", "exact").nash_conv if exact else float("nan"),
                  # steps/s as at the last live measurement (the stopped learners are gone)
                  int(last.learnt_steps / last.seconds * (time.time() - started)), average(reader))
    points.append(final)
    print(f"  [{arm} seed {seed}] final: NashConv main {final.main:.4f}  nash {final.nash:.4f}  "
          f"average {final.nash_average:.4f}  exact-nash {final.nash_exact:.4f}", flush=True)
    return points


# ---------------------------------------------------------------------------------------------
# OpenSpiel's PSRO as a peer.

PSRO_RUNNER = '''
import runpy, sys, types
# networkx (alpharank plotting) and cvxpy (the LP meta-solver) are not in the pinned stack.
sys.modules.setdefault("networkx", types.ModuleType("networkx"))
cvxpy = types.ModuleType("cvxpy"); cvxpy.ECOS = "ECOS"; sys.modules.setdefault("cvxpy", cvxpy)
sys.argv = ["psro_v2_example"] + sys.argv[1:]
runpy.run_module("open_spiel.python.examples.psro_v2_example", run_name="__main__")
'''


def run_psro(game: str, minutes: float, oracle: str) -> list[tuple[float, float]]:
    """OpenSpiel's psro_v2_example (meta-solver prd; cvxpy for the LP one is not installed;
    `oracle` BR: exact best responses, PG: policy-gradient RL best responses of 1e4 episodes
    each, the example's defaults) for `minutes`; returns (seconds, NashConv) per iteration."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PSRO_RUNNER)
    cmd = [sys.executable, f.name, f"--game_name={game}", f"--oracle_type={oracle}",
           "--meta_strategy_method=prd", "--gpsro_iterations=1000", "--sims_per_entry=1000",
           "--verbose=true"]
    points, started, seconds = [], time.time(), 0.0
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("Time so far:"):
                seconds = float(line.split(":")[1])
            elif line.startswith("Exploitabilities :"):
                points.append((seconds, float(line.split(":")[1])))
                print(f"  [psro-{oracle}] {seconds:6.0f} s  NashConv {points[-1][1]:.4f}", flush=True)
            if time.time() - started > minutes * 60:
                break
    finally:
        proc.kill()
        proc.wait()
        os.unlink(f.name)
    return points


def run_timed(name: str, train, measure, minutes: float, every: float) -> list[tuple]:
    """The peers' clock: calls `train()` (one chunk of training; returns how many iterations or
    episodes it ran) until `minutes` of training wall-clock have passed, and after the chunk
    that crosses each multiple of `every` seconds (the arms' measuring times) and at the end
    records (seconds, measure(), iterations so far). Time spent measuring is not training
    time."""
    points, started, measuring, work = [], time.time(), 0.0, 0
    next_at = every
    while time.time() - started - measuring < minutes * 60:
        work += train()
        elapsed = time.time() - started - measuring
        if elapsed >= next_at or elapsed >= minutes * 60:
            t = time.time()
            points.append((elapsed, measure(), work))
            measuring += time.time() - t          # measuring is not training time
            print(f"  [{name}] {elapsed:6.0f} s  {work:10d} it  NashConv {points[-1][1]:.4f}",
                  flush=True)
            while next_at <= elapsed:
                next_at += every
    return points


def run_mccfr(game: str, minutes: float, every: float) -> list[tuple]:
    """OpenSpiel's outcome-sampling MCCFR (C++, tabular, sample-based) for `minutes` of
    wall-clock: (seconds, NashConv of its average policy, iterations) every `every` seconds."""
    import pyspiel

    spiel_game = pyspiel.load_game(game)
    solver = pyspiel.OutcomeSamplingMCCFRSolver(spiel_game)

    def train():
        for _ in range(1000):
            solver.run_iteration()
        return 1000

    return run_timed("mccfr", train,
                     lambda: pyspiel.nash_conv(spiel_game, solver.average_policy(), True),
                     minutes, every)


# OpenSpiel's NFSP (Heinrich & Silver 2016), TF1 version. OpenSpiel 2.0.2 (the pinned stack)
# ships none that runs here: the TF1 one (open_spiel/python/algorithms/nfsp.py with dqn.py and
# simple_nets.py) moved to algorithms/tf/ in 1.6 (commit 38d4aa0d, "no longer maintained"; its
# `from open_spiel.python.algorithms import dqn` no longer resolved there) and was deleted in
# 1.6.12 (commit 9b0c942a, "Planned TFv1 cleanup"); the JAX one calls flax nnx's
# merge(..., copy=True) (flax >= 0.11; the stack pins 0.10.3: "TypeError: merge() got an
# unexpected keyword argument 'copy'"); the PyTorch one needs torch (not installed).
# `--nfsp_source=DIR` loads the TF1 modules, unmodified, from an OpenSpiel v1.5 source tree
# (they run on TensorFlow 2.15 through tf.compat.v1), e.g.
#   git -C open_spiel archive v1.5 open_spiel/python/simple_nets.py \
#       open_spiel/python/algorithms/dqn.py open_spiel/python/algorithms/nfsp.py | tar -x -C DIR
NFSP_FILES = ("open_spiel/python/simple_nets.py", "open_spiel/python/algorithms/dqn.py",
              "open_spiel/python/algorithms/nfsp.py")
# The hyperparameters of OpenSpiel v1.5's examples: open_spiel/python/examples/kuhn_nfsp.py
# (hidden [128], replay 2e5, reservoir 2e6, anticipatory 0.1, epsilon 0.06 -> 0.001 over the
# 3e6 training episodes, the rest the classes' defaults) and examples/leduc_nfsp.py (the same
# plus min buffer 1000, batch 128, learn every 64, SGD at 0.01 for both networks, MSE loss,
# target network every 19200 steps, discount 1, epsilon over 20e6 steps).
NFSP_SETTINGS = {
    "kuhn_poker": dict(hidden_layers_sizes=[128], reservoir_buffer_capacity=int(2e6),
                       anticipatory_param=0.1, replay_buffer_capacity=int(2e5),
                       epsilon_decay_duration=int(3e6), epsilon_start=0.06, epsilon_end=0.001),
    "leduc_poker": dict(hidden_layers_sizes=[128], reservoir_buffer_capacity=int(2e6),
                        anticipatory_param=0.1, replay_buffer_capacity=int(2e5),
                        min_buffer_size_to_learn=1000, batch_size=128, learn_every=64,
                        rl_learning_rate=0.01, sl_learning_rate=0.01, optimizer_str="sgd",
                        loss_str="mse", update_target_network_every=19200, discount_factor=1.0,
                        epsilon_decay_duration=int(20e6), epsilon_start=0.06, epsilon_end=0.001),
}


def load_nfsp(source: str | None):
    """OpenSpiel's TF1 NFSP module: the installed one (OpenSpiel <= 1.5), or the unmodified
    v1.5 files under `source`. Importing it calls tf.disable_v2_behavior() for the whole
    process, so the benchmark runs this peer last. Exits with the reason if there is none."""
    import importlib
    import importlib.util

    if source is None:
        try:
            return importlib.import_module("open_spiel.python.algorithms.nfsp")
        except ModuleNotFoundError as e:
            from importlib.metadata import version

            raise SystemExit(
                f"--peers=nfsp: OpenSpiel {version('open_spiel')} has no TF1 NFSP ({e}; moved to "
                "algorithms/tf in 1.6, deleted in 1.6.12); its JAX NFSP needs flax >= 0.11 "
                f"(installed: {version('flax')}) and its PyTorch one torch. Pass "
                "--nfsp_source=DIR with OpenSpiel v1.5's " + ", ".join(NFSP_FILES)) from e
    for path in NFSP_FILES:   # dependencies first, under their own names
        name = path[:-3].replace("/", ".")
        spec = importlib.util.spec_from_file_location(name, os.path.join(source, path))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules["open_spiel.python.algorithms.nfsp"]


def run_nfsp(game: str, minutes: float, every: float, source: str | None = None,
             seed: int = 0) -> list[tuple]:
    """OpenSpiel's NFSP (TF1, `load_nfsp`) with its example's hyperparameters
    (`NFSP_SETTINGS`), trained as in the example (one agent per seat, `rl_environment`) for
    `minutes` of wall-clock: (seconds, NashConv of the average policy, episodes) every `every`
    seconds. NashConv: `exploitability.nash_conv` of the average-policy networks, read once
    per information state into a tabular policy (the same value as on the callable)."""
    import random

    from open_spiel.python import policy, rl_environment
    from open_spiel.python.algorithms import exploitability

    nfsp = load_nfsp(source)
    tf = nfsp.tf
    env = rl_environment.Environment(game, players=2)
    info_size = env.observation_spec()["info_state"][0]
    num_actions = env.action_spec()["num_actions"]
    settings = dict(NFSP_SETTINGS[game])
    random.seed(seed)
    np.random.seed(seed)
    with tf.Graph().as_default(), tf.Session() as session:
        tf.set_random_seed(seed)
        agents = [nfsp.NFSP(session, p, info_size, num_actions, **settings) for p in range(2)]
        session.run(tf.global_variables_initializer())

        def average_policy(state):
            player = state.current_player()
            legal = state.legal_actions(player)
            observations = {"info_state": [None, None], "legal_actions": [None, None],
                            "current_player": player}
            observations["info_state"][player] = state.information_state_tensor(player)
            observations["legal_actions"][player] = legal
            step = rl_environment.TimeStep(observations=observations, rewards=None,
                                           discounts=None, step_type=None)
            with agents[player].temp_mode_as(nfsp.MODE.average_policy):
                probs = agents[player].step(step, is_evaluation=True).probs
            return {a: probs[a] for a in legal}

        def train(episodes=100):
            for _ in range(episodes):
                time_step = env.reset()
                while not time_step.last():
                    player = time_step.observations["current_player"]
                    time_step = env.step([agents[player].step(time_step).action])
                for agent in agents:   # the episode is over: both see the final step
                    agent.step(time_step)
            return episodes

        def measure():
            table = policy.tabular_policy_from_callable(env.game, average_policy)
            return exploitability.nash_conv(env.game, table)

        return run_timed("nfsp", train, measure, minutes, every)


# ---------------------------------------------------------------------------------------------


def plot(results: dict, psro: dict, game: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    palette = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:cyan", "tab:olive")
    arms = list(dict.fromkeys(arm.split(" seed ")[0] for arm in results))
    for arm, points in results.items():
        t = [p.seconds / 60 for p in points]
        c = palette[arms.index(arm.split(" seed ")[0]) % len(palette)]
        ax.plot(t, [p.main for p in points], "-", color=c, label=f"{arm}: main agent")
        ax.plot(t, [p.nash for p in points], "--", color=c, label=f"{arm}: Nash mixture")
        if not all(np.isnan(p.nash_average) for p in points):
            ax.plot(t, [p.nash_average for p in points], "-.", color=c, lw=2,
                    label=f"{arm}: average Nash mixture")
        if not all(np.isnan(p.nash_exact) for p in points):
            ax.plot(t, [p.nash_exact for p in points], ":", color=c,
                    label=f"{arm}: exact chip meta-game Nash")
    for (name, points), color in zip(psro.items(), ("dimgray", "silver", "tab:brown",
                                                    "tab:pink", "tab:olive")):
        ax.plot([p[0] / 60 for p in points], [p[1] for p in points], "-", color=color,
                label=f"OpenSpiel {name}")
    ax.axhline(UNIFORM[game], color="red", lw=0.8, label="uniform random")
    ax.axhline(TARGETS[game], color="black", lw=0.8, ls="-.",
               label="target")
    ax.set_yscale("log")
    ax.set_xlabel("wall-clock minutes (2 CPU cores)")
    ax.set_ylabel("exact NashConv (OpenSpiel)")
    ax.set_title(f"{game}: NashConv over training")
    ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--game", default="kuhn_poker", choices=sorted(UNIFORM))
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget per arm")
    parser.add_argument("--arms", default="league,self_play,fsp")
    parser.add_argument("--arm", action="append", default=[], help="a league arm of its own, "
                        "NAME:key=value,key=value (RunConfig settings); name it in --arms")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds: every arm once per "
                        "seed (default: --seed)")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between measurements")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run_root", default=None, help="where the arms' run dirs go (default: tmp)")
    parser.add_argument("--reward", default="chips", choices=["chips", "outcome"])
    parser.add_argument("--exact", type=int, default=None, help="also the exact chip meta-game "
                        "Nash (default: on for Kuhn)")
    parser.add_argument("--psro", action="store_true", help="also OpenSpiel's PSRO as a peer, with "
                        "the RL (policy-gradient) oracle and with the exact best-response oracle")
    parser.add_argument("--peers", default="", help="also these peers, same wall-clock, "
                        "comma-separated: mccfr (OpenSpiel's outcome-sampling MCCFR, C++), nfsp "
                        "(OpenSpiel's NFSP, TF1; see --nfsp_source)")
    parser.add_argument("--nfsp_source", default=None, help="OpenSpiel v1.5 source tree to load "
                        "the TF1 NFSP from (OpenSpiel 2.0.2 ships none that runs here; "
                        "see NFSP_FILES)")
    parser.add_argument("--set", action="append", default=[], help="RunConfig override k=v (JSON value)")
    parser.add_argument("--png", default=None)
    args = parser.parse_args(argv)

    try:
        overrides = parse_settings(args.set, "--set")
        custom = dict(parse_arm(text) for text in args.arm)
    except ValueError as e:
        parser.error(str(e))
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS and a not in custom]
    if unknown:
        parser.error(f"--arms names {', '.join(unknown)}: define each with --arm=NAME:key=value "
                     f"or use {', '.join(ARMS)}")
    seeds = [int(x) for x in (args.seeds or str(args.seed)).split(",") if x]
    exact = bool(args.exact) if args.exact is not None else args.game == "kuhn_poker"
    root = args.run_root or tempfile.mkdtemp(prefix="poker_quality_")
    log_path = os.path.join(root, "league.log")
    os.makedirs(root, exist_ok=True)
    print(f"game={args.game} minutes/arm={args.minutes} seeds={seeds} reward={args.reward} "
          f"overrides={overrides} arms={ {a: custom.get(a, ARMS.get(a)) for a in arms} } "
          f"runs in {root}", flush=True)
    results = {}
    with open(log_path, "a") as log:
        for seed in seeds:
            for arm in arms:
                name = arm if len(seeds) == 1 else f"{arm} seed {seed}"
                run_dir = os.path.join(root, arm if len(seeds) == 1 else f"{arm}-s{seed}")
                results[name] = run_arm(arm, args.game, args.minutes, run_dir, args.every, seed,
                                        exact, args.reward, overrides, log, custom.get(arm))
    psro = {}
    if args.psro:  # OpenSpiel's PSRO, same wall-clock: the RL oracle (policy gradient), and the
        # exact best-response oracle as the ceiling
        psro["PSRO, PG oracle, prd"] = run_psro(args.game, args.minutes, "PG")
        psro["PSRO, exact BR oracle, prd"] = run_psro(args.game, args.minutes, "BR")
    peers = [p for p in args.peers.split(",") if p]
    if "mccfr" in peers:
        psro["outcome-sampling MCCFR"] = run_mccfr(args.game, args.minutes, args.every)
    if "nfsp" in peers:   # last: importing the TF1 NFSP turns TF2 behaviour off process-wide
        psro["NFSP (TF1)"] = run_nfsp(args.game, args.minutes, args.every, args.nfsp_source,
                                      args.seed)
    png = args.png or os.path.join("docs", f"poker_{args.game.split('_')[0]}_nashconv.png")
    plot(results, psro, args.game, png)

    print(f"\nNashConv on {args.game} (uniform {UNIFORM[args.game]:.4f}), {args.minutes} min per arm:")
    print(f"{'arm':<20}{'games':>10}{'players':>9}{'steps/s':>9}{'main':>10}{'nash':>10}"
          f"{'average':>10}{'exact-nash':>12}{'best main':>11}{'best nash':>11}")
    for arm, points in results.items():
        last = points[-1]
        print(f"{arm:<20}{last.games:>10}{last.players:>9}{last.learnt_steps / last.seconds:>9.0f}"
              f"{last.main:>10.4f}{last.nash:>10.4f}{last.nash_average:>10.4f}"
              f"{last.nash_exact:>12.4f}{min(p.main for p in points):>11.4f}"
              f"{np.nanmin([p.nash for p in points]):>11.4f}")
    if len(seeds) > 1:
        print("\nper arm over the seeds (final Nash mixture: mean, each seed; learnt steps/s mean):")
        for arm in arms:
            runs = [results[f"{arm} seed {s}"][-1] for s in seeds]
            print(f"  {arm:<18} nash {np.mean([p.nash for p in runs]):.4f} "
                  f"({', '.join(f'{p.nash:.4f}' for p in runs)})  average "
                  f"{np.mean([p.nash_average for p in runs]):.4f} "
                  f"({', '.join(f'{p.nash_average:.4f}' for p in runs)})  main "
                  f"{np.mean([p.main for p in runs]):.4f}  steps/s "
                  f"{np.mean([p.learnt_steps / p.seconds for p in runs]):.0f}")
    for name, points in psro.items():
        if points:
            work = f", {points[-1][2]} iterations/episodes" if len(points[-1]) > 2 else ""
            print(f"OpenSpiel {name}: {points[-1][1]:.4f} after {points[-1][0]:.0f} s "
                  f"({len(points)} measurements{work}; best {min(p[1] for p in points):.4f})")
        curve = "  ".join(f"{p[0]:.0f}s:{p[1]:.3f}" for p in points)
        print(f"  curve {name}: {curve}")
    print(f"curve: {png}")
    if not results:   # peers only (--arms=)
        return 0
    base = "league" if "league" in arms else arms[0]
    finals = [points[-1] for name, points in results.items() if name.split(" seed ")[0] == base]
    x = float(np.mean([np.nanmin([p.main, p.nash, p.nash_average]) for p in finals]))
    latest, averaged = (float(np.mean([getattr(p, k) for p in finals])) for k in ("nash", "nash_average"))
    print(f"RESULT poker nashconv_{args.game.split('_')[0]}={x:.4f} latest={latest:.4f} "
          f"average={averaged:.4f} ratio={x / TARGETS[args.game]:.2f} target=1.0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
