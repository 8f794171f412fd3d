"""Exact NashConv of a league's players, or of a poker policy, computed by OpenSpiel.

    python -m experiments.nashconv --run_dir=runs/kuhn --mixture=nash     # the league's Nash mixture
    python -m experiments.nashconv --run_dir=runs/kuhn --mixture=nash_average   # their average
    python -m experiments.nashconv --run_dir=runs/kuhn --mixture=main     # the main agent now
    python -m experiments.nashconv --run_dir=runs/kuhn --mixture=nash --weights=exact
    python -m experiments.nashconv --game=leduc_poker --policy=uniform
    python -m experiments.nashconv --game=kuhn_poker --params=policy.npz
    python -m experiments.nashconv --run_dir=runs/kuhn --gaps         # exploiters' gaps to a best response

The last line printed is the NashConv (OpenSpiel: uniform 4.7472 on Leduc, 11/12 on Kuhn).

With --run_dir (the game, network sizes and seed come from its config.json):
- `main`: the main agent's current policy: its learner checkpoint
  (`learners/<agent>/checkpoint.msgpack`, written when a run stops) turned into an exact
  tabular policy by the game's exact tools (`Capabilities.exact_evaluator`: poker's
  `network_policy`; the LSTM is run along every
  history exactly as the actor runs it).
- `nash`: the league's Nash mixture of players. `--weights=league` (default): the weights of
  the latest rows of the `nash` table in league.db (the coordinator's meta-game on the games'
  scores: the chips won, decayed as in AlphaStar's payoff).
  `--weights=exact`: the Nash of the exact chip meta-game between the same players (expected
  chips, computed from their tabular policies: what PSRO's meta-solver would use). Frozen
  players' parameters come from `params/`, learning agents' from their learner checkpoints.
  The players are mixed as an extensive-form mixture (one player per game, per-infostate
  weights by own reach probability; `mix_policies`).
- `nash_average`: the mean of every Nash mixture the league published (the `nash` table's
  rows of each time), each restricted to frozen players (`league.meta.average_nash`:
  fictitious play's average strategy). It moves less than the latest mixture, and on Leduc
  it is less exploitable (BENCHMARKS.md, "The average Nash mixture").

--params=AGENT with no --loader measures an agent named as every command names one
(`experiments.agent_ref`): an exported file (`python -m experiments.export`; the game, network
and parameters come from the file alone) or RUN_DIR:PLAYER_ID, turned into an exact tabular
policy as a run's players are (`network_policy`): the same reading as
`--run_dir=RUN_DIR --player=PLAYER_ID`. A mixture (RUN_DIR:result, the league's Nash mixture,
or its exported file) is mixed as `--mixture=nash` mixes it (`mix_policies` of its
members' tables with its weights): the same reading as `--run_dir=RUN_DIR --mixture=nash`.
A damaged or foreign file: a message and exit 2.

--params with --loader loads saved parameters through a loader hook, a function `load(path, game) -> policy_fn`
where `policy_fn(obs)` maps a batch of the pool's observations (`info_state` [N, dim], `acting`
[N], `action_mask` {"action": [N, A]}) to action probabilities [N, A] (see
the exact tools' `policy_from_callable`). A .npz that is not an exported agent is read as a
tabular policy: one array of probabilities [A] per information-state string (the key).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import sys
from collections.abc import Mapping

import numpy as np
from absl import app, flags

from agents.storage import read_npz
from league.players import MAIN_AGENT

FLAGS = flags.FLAGS


def load_npz_table(path: str, game) -> dict[str, np.ndarray]:
    return read_npz(path)


def exact_tools(game_name: str):
    """The game's exact tools (the module its `exact_evaluator` capability returns: OpenSpiel's
    NashConv, its policies as tables), or ValueError naming the games that have them."""
    from actors.games import registry

    try:
        factory = registry.resolve(game_name).capabilities.exact_evaluator
    except registry.UnknownGame as e:
        raise ValueError(f"{game_name}: {e}") from e
    if factory is None:
        raise ValueError(f"{game_name} has no exact evaluator: NashConv is exact on kuhn_poker and "
                         "leduc_poker (the games whose exact_evaluator capability is set)")
    return factory()


def measure(game_name: str, params: str | None = None, loader: str | None = None) -> float:
    tools = exact_tools(game_name)
    game = tools.load_game(game_name)
    if params is None:
        policy = tools.policy_from_callable(game, tools.uniform_policy_fn)
    elif loader is None:
        policy = tools.policy_from_table(game, load_npz_table(params, game))
    else:
        module_name, _, fn_name = loader.partition(":")
        load = getattr(importlib.import_module(module_name), fn_name)
        policy = tools.policy_from_callable(game, load(params, game))
    return tools.nash_conv(game, policy)


def is_tabular_file(params: str) -> bool:
    """Whether --params names a tabular policy's .npz (the default loader's), not an agent: an
    npz (zip) archive that is not an exported agent (nor a damaged copy of one); anything else
    is read as an agent, whose errors say what the file is not."""
    from agents import exported

    if not os.path.isfile(params):
        return False
    with open(params, "rb") as f:
        zip_archive = f.read(4) == b"PK\x03\x04"
    return zip_archive and not exported.looks_exported(params)


def measure_agent(name: str, game_name: str | None = None):
    """(game name, exact NashConv, the `agent_ref.Agent`) of an agent named as every command
    names one: an exported file, read alone, or RUN_DIR:PLAYER_ID. AgentNameError (a
    ValueError) if it names none, is not a poker agent, or is not of `game_name`."""
    from agents import exported
    from experiments import agent_ref

    agent = agent_ref.resolve(name)
    try:
        tools = exact_tools(agent.game)
    except ValueError:
        raise agent_ref.AgentNameError(f"{name}: an agent of {agent.game!r}; NashConv needs a poker agent "
                                       "(a game with an exact evaluator: kuhn_poker, leduc_poker)") from None
    if game_name and game_name != agent.game:
        raise agent_ref.AgentNameError(f"{name}: an agent of {agent.game}, not of --game={game_name} "
                                       "(leave --game out: the agent says its game)")
    game = tools.load_game(agent.game)
    if exported.side_to_dict(agent.spec.side(agent.side)) != exported.side_to_dict(tools.make_spec(game).side(0)):
        raise agent_ref.AgentNameError(f"{name}: its network observes another {agent.game} than this "
                                       "version's (the observation or the actions differ)")
    # a mixture (RUN_DIR:result, or its file) is mixed as RunReader.measure mixes it
    policy = tools.agent_policy(game, agent.network, agent.params, agent.weights)
    return agent.game, tools.nash_conv(game, policy), agent


# ---------------------------------------------------------------------------------------------
# League runs.


@dataclasses.dataclass
class RunMeasurement:
    """What `measure_run` found: the NashConv and how it was obtained."""

    nash_conv: float
    mixture: str
    weights: dict[str, float]          # player id -> weight (one entry for `main`)
    source: str                        # where the weights came from
    players: int                       # players in the league


class RunReader:
    """Reads a league run directory: its config, network, players' parameters and policies.

    Policies are cached by (player id, parameter version); `params_override` maps a player id to
    (version, params) that replace what is on disk (a benchmark passing a live learner's
    current parameters)."""

    def __init__(self, run_dir: str):
        from experiments.build import make_network
        from experiments.config import RunConfig

        path = os.path.join(run_dir, "config.json")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not found: pass the --run_dir of a league run")
        with open(path) as f:
            self.config = RunConfig.from_dict(json.load(f))
        if not self.config.game_info.capabilities.exact_evaluator:
            raise ValueError(f"NashConv needs a poker run (a game with an exact evaluator); {run_dir} "
                             f"is a {self.config.game} run")
        self.run_dir = run_dir
        self.tools = self.config.game_info.capabilities.exact_evaluator()
        self.game = self.tools.load_game(self.config.game)
        self.network = make_network(self.config, self.tools.make_spec(self.game))
        self._walk = None  # the tools' PolicyWalk, built on the first conversion
        self._policies: dict[tuple[str, int], object] = {}

    def history(self):
        from coordinator.history_reader import HistoryReader

        return HistoryReader(self.run_dir)

    def checkpoint_params(self, agent_id: str):
        """(version, params) of a learning agent's learner checkpoint, or None."""
        from learners import checkpoint

        return checkpoint.read_params(self.run_dir, agent_id)

    def params(self, player_id: str, override: Mapping | None = None):
        from coordinator.param_store import player_params

        if override and player_id in override:
            return override[player_id]
        return player_params(self.run_dir, player_id)

    def policy(self, player_id: str, override: Mapping | None = None):
        version, params = self.params(player_id, override)
        key = (player_id, version)
        if key not in self._policies:
            self._walk = self._walk or self.tools.PolicyWalk(self.game, self.network)
            self._policies[key] = self.tools.network_policy(
                self.game, self.network, params, walk=self._walk)
        return self._policies[key]

    def main_agents(self) -> list[str]:
        """The learning main agents (players with the main-agent role and no parent)."""
        with_role = [p for p in self.history().players() if p["role"] == MAIN_AGENT and not p["parent"]]
        return [p["player_id"] for p in with_role]

    def league_nash(self) -> tuple[dict[str, float], str, int]:
        """The latest Nash weights of the league's meta-game, where they came from, #players.
        (The coordinator writes them with every payoff snapshot, `publish_meta_game`.)"""
        history = self.history()
        latest = history.latest_nash()
        if latest is None:
            raise ValueError(f"{self.run_dir}: no Nash weights yet; let the league run longer (the "
                             "coordinator publishes them every meta_game_every_seconds)")
        when, weights = latest
        return ({p: w for p, w in weights.items() if w > 0}, f"league.db nash table at t={when:.0f}",
                len(history.players()))

    def average_nash(self) -> tuple[dict[str, float], str, int]:
        """The mean of every Nash distribution the league published, over its frozen players
        (`HistoryReader.average_nash`, as the coordinator's `average_nash_weights`), where it
        came from, #players."""
        history = self.history()
        weights, publications = history.average_nash()
        if not weights:
            raise ValueError(f"{self.run_dir}: no Nash weights on a frozen player yet; let the league "
                             "run longer (the coordinator publishes them every meta_game_every_seconds)")
        return weights, f"mean of {publications} Nash publications in league.db", len(history.players())

    def exact_nash(self, player_ids: list[str], override: Mapping | None = None) -> dict[str, float]:
        """Nash of the exact chip meta-game between `player_ids` (seats alternated)."""
        from league import meta

        policies = [self.policy(p, override) for p in player_ids]
        payoff = self.tools.expected_payoffs(self.game, policies)
        weights, _ = meta.zero_sum_nash(payoff)
        return {p: float(w) for p, w in zip(player_ids, weights) if w > 1e-9}

    def measure_player(self, player_id: str) -> RunMeasurement:
        """Exact NashConv of one player of the run: a frozen player's stored parameters or a
        learning agent's checkpoint (e.g. to compare a player before and after surgery)."""
        known = {p["player_id"] for p in self.history().players()}
        if player_id not in known:
            raise ValueError(f"{self.run_dir} has no player {player_id!r}; its players: "
                             f"{sorted(known)[:8]}{' ...' if len(known) > 8 else ''}")
        value = self.tools.nash_conv(self.game, self.policy(player_id))
        return RunMeasurement(value, "player", {player_id: 1.0}, "stored parameters", len(known))

    def measure(self, mixture: str = "nash", weights: str = "league", agent: str | None = None,
                override: Mapping | None = None) -> RunMeasurement:
        if mixture == "main":
            agents = self.main_agents()
            agent = agent or (agents[0] if agents else None)
            if agent is None:
                raise ValueError(f"{self.run_dir}: the league has no main agent")
            if not (override and agent in override) and self.checkpoint_params(agent) is None:
                raise FileNotFoundError(
                    f"no learner checkpoint for {agent} in {self.run_dir}/learners (written when "
                    "a run stops); stop the run or pass the parameters")
            value = self.tools.nash_conv(self.game, self.policy(agent, override))
            return RunMeasurement(value, mixture, {agent: 1.0}, "learner checkpoint",
                                  len(self.history().players()))
        if mixture not in ("nash", "nash_average"):
            raise ValueError(f"unknown mixture {mixture!r}; use nash, nash_average or main")
        league_weights, source, players = (self.league_nash() if mixture == "nash" else self.average_nash())
        if weights == "exact":
            ids = [p["player_id"] for p in self.history().players()]
            league_weights, source = self.exact_nash(ids, override), "exact chip meta-game Nash"
        elif weights != "league":
            raise ValueError(f"unknown weights {weights!r}; use league or exact")
        ids = sorted(league_weights)
        policies = [self.policy(p, override) for p in ids]
        mixed = self.tools.mix_policies(self.game, policies, [league_weights[p] for p in ids])
        value = self.tools.nash_conv(self.game, mixed)
        return RunMeasurement(value, mixture, {p: league_weights[p] for p in ids}, source, players)


def measure_run(run_dir: str, mixture: str = "nash", weights: str = "league",
                agent: str | None = None) -> RunMeasurement:
    """Exact NashConv of a league run's Nash mixture (`nash`) or main agent (`main`)."""
    return RunReader(run_dir).measure(mixture, weights, agent)


def gap_summary(rows: list[dict]) -> dict[str, dict[str, float]]:
    """{exploiter role: {"count", "mean", "min", "max"}} of the gaps in league.db's
    `exploiter_gaps` rows (`HistoryReader.exploiter_gaps`)."""
    out = {}
    for role in sorted({r["role"] for r in rows}):
        gaps = np.asarray([r["gap"] for r in rows if r["role"] == role], np.float64)
        out[role] = {"count": len(gaps), "mean": float(gaps.mean()), "min": float(gaps.min()),
                     "max": float(gaps.max())}
    return out


def print_gaps(run_dir: str) -> None:
    """The run's exploiter snapshots' gaps to a best response (league.db), one line each, and
    their count, mean, min and max per role."""
    from coordinator.history_reader import HistoryReader

    history = HistoryReader(run_dir)
    try:
        rows = history.exploiter_gaps()
    finally:
        history.close()
    print(f"{'player':32} {'target':20} {'br_value':>9} {'exploiter':>9} {'gap':>9}")
    for r in rows:
        print(f"{r['player_id']:32} {r['target']:20} {r['br_value']:9.4f} {r['exploiter_value']:9.4f} {r['gap']:9.4f}")
    for role, s in gap_summary(rows).items():
        print(f"{role}: {s['count']} snapshots, gap mean {s['mean']:.4f} min {s['min']:.4f} max {s['max']:.4f}")
    if not rows:
        print("no exploiter gaps recorded (not a poker run, or no exploiter snapshot measured yet)")


def define_flags() -> None:
    """Defines the command-line flags (only when run as a program)."""
    flags.DEFINE_string("run_dir", None, "A league run directory: measure its players "
                        "(the game comes from its config.json).")
    flags.DEFINE_enum("mixture", "nash", ["nash", "nash_average", "main"], "With --run_dir: the "
                      "league's latest Nash mixture of players, the mean of every Nash mixture it "
                      "published (over its frozen players), or the main agent's current policy.")
    flags.DEFINE_enum("weights", "league", ["league", "exact"], "With --mixture=nash: the "
                      "league's meta-game Nash (observed chips, league.db) or the exact chip meta-game's.")
    flags.DEFINE_string("agent", None, "With --mixture=main: which main agent (default: the first).")
    flags.DEFINE_string("player", None, "With --run_dir: measure this one player (any frozen player "
                        "or learning agent of the run) instead of --mixture.")
    flags.DEFINE_bool("gaps", False, "With --run_dir: print the exploiter snapshots' gaps to a best "
                      "response against their targets (league.db's exploiter_gaps) instead of a NashConv.")
    flags.DEFINE_string("game", "leduc_poker", "OpenSpiel two-player zero-sum game, e.g. kuhn_poker "
                        "(without --run_dir).")
    flags.DEFINE_enum("policy", "uniform", ["uniform"], "Built-in policy to measure (without --params).")
    flags.DEFINE_string("params", None, "What to measure instead of --policy: an agent (an exported file "
                        "of experiments.export, or RUN_DIR:PLAYER_ID; its game comes with it), or a .npz "
                        "tabular policy keyed by information-state string, or a file --loader reads.")
    flags.DEFINE_string("loader", None, "module:function loading --params into a policy callable "
                        "(default: an agent, or a .npz tabular policy).")


class _BackendProbe(logging.Filter):
    """Drops JAX's INFO lines of backends it probed and did not find."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.getMessage().startswith("Unable to initialize backend")


def quiet_backend_probe() -> None:
    """With JAX_PLATFORMS unset JAX tries every backend it knows and logs each one this host
    lacks at INFO ("Unable to initialize backend 'tpu': ... libtpu.so"); absl's `app.run`
    shows INFO, so the command's first lines were that probe. Only the probe's lines go: a
    backend that was asked for and fails still raises, and JAX's warnings still show."""
    logger = logging.getLogger("jax._src.xla_bridge")
    if not any(isinstance(f, _BackendProbe) for f in logger.filters):
        logger.addFilter(_BackendProbe())


def main(argv):
    del argv
    quiet_backend_probe()
    if FLAGS.run_dir and FLAGS.gaps:
        print_gaps(FLAGS.run_dir)
        return
    if FLAGS.run_dir:
        try:
            result = (RunReader(FLAGS.run_dir).measure_player(FLAGS.player) if FLAGS.player
                      else measure_run(FLAGS.run_dir, FLAGS.mixture, FLAGS.weights, FLAGS.agent))
        except (FileNotFoundError, ValueError) as e:   # no run, no such player, not poker
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"run_dir={FLAGS.run_dir} game={RunReader(FLAGS.run_dir).config.game} "
              f"mixture={result.mixture} weights={result.source} players={result.players}")
        for player, weight in sorted(result.weights.items(), key=lambda kv: -kv[1]):
            print(f"  {weight:.4f}  {player}")
        print(f"{result.nash_conv:.6f}")
        return
    if FLAGS.params and not FLAGS.loader and not is_tabular_file(FLAGS.params):
        from agents.exported import ExportedFileError
        from experiments.agent_ref import AgentNameError

        try:
            game, value, agent = measure_agent(FLAGS.params, FLAGS.game if FLAGS["game"].present else None)
        except (AgentNameError, ExportedFileError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        source = agent.source
        print(f"game={game} agent={FLAGS.params} player={source.get('player_id', '?')} "
              f"version={source.get('version', '?')} run_dir={source.get('run_dir', '?')}")
        for weight, member in zip(agent.weights or [], agent.members or []):
            print(f"  {weight:.4f}  {member.get('player_id', '?')} version {member.get('version', '?')}")
        print(f"{value:.6f}")
        return 0
    what = FLAGS.params or f"{FLAGS.policy} policy"
    value = measure(FLAGS.game, FLAGS.params, FLAGS.loader)
    print(f"game={FLAGS.game} policy={what}")
    print(f"{value:.6f}")
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(lambda argv: sys.exit(main(argv)))
