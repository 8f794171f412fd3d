"""The league program as one graph of nodes, built once from a RunConfig; launchers run it.

    program = build_program(config)
    print(program)                        # python -m experiments.league --print_program
    launchers.run_inprocess(config)       # or run_ray: the same graph, other processes

The graph (Acme's `make_distributed_experiment`, in small):

    coordinator      Coordinator: league, payoff, matchmaking, history, parameter store
    learners[/key]   LearnerGroup: the learners of some agents and their Reverb tables (replay
                     path), or DeviceLearnerGroup: learners that play their own games (device
                     path: no actors, no Reverb; `experience_path` picks the path)
    actors[/key]     ActorGroup: `actors_per_learner` actors per agent of the group (replay path)
    evaluator_<i>    EvaluatorNode: fills the payoff matrix for pairs with few games

Co-location is a parameter (`--learner_groups`, `--actor_groups`): "all" agents in one node
(one process: a dozen JAX learners would not fit a laptop apart), one node per "race", or one
per "agent" (a cluster). A node's arguments may hold `Ref(name)`s, edges to other nodes that
the launcher resolves into the node itself (in one process) or a proxy to it (Ray). After
every node is built the launcher makes the program's `calls` (the coordinator connects to
each learner group and keeps its agents' initial parameters), then runs every node that
`runs`, and stops and closes them in reverse order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinator.coordinator import Coordinator, CoordinatorConfig
from experiments.config import ConfigError, RunConfig
from experiments.nodes import ActorGroup, DeviceLearnerGroup, EvaluatorNode, LearnerGroup
from league.players import learning_agents


@dataclass(frozen=True)
class Ref:
    """An edge: the node named `node`, as the launcher resolves it."""

    node: str


@dataclass(frozen=True)
class Node:
    name: str
    cls: type
    kwargs: Mapping[str, Any]
    runs: bool = True          # the launcher calls `run()` on a thread / as a Ray task
    # Ray restarts its process if it dies: actors and evaluators; on the device path also the
    # learner groups (their learners restore their checkpoints) and the coordinator (it
    # restores the league from league.db; the launcher makes its wiring calls again). Other
    # nodes' calls to it fail meanwhile, and their `run()` is resubmitted.
    restartable: bool = False

    def refs(self) -> list[str]:
        """Names of the nodes this one talks to."""
        return sorted({r.node for r in _refs(self.kwargs)})


@dataclass(frozen=True)
class Call:
    """A wiring call the launcher makes once every node is built: node.method(**kwargs)."""

    node: str
    method: str
    kwargs: Mapping[str, Any]


@dataclass
class Program:
    config: RunConfig
    nodes: list[Node]
    calls: list[Call] = field(default_factory=list)
    experience: tuple[str, str] = ("replay", "")  # (path, why): `experience_path`

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def learner_groups(self) -> list[str]:
        return [n.name for n in self.nodes if n.cls in (LearnerGroup, DeviceLearnerGroup)]

    def __str__(self) -> str:
        c = self.config
        path, why = self.experience
        lines = [f"program: game={c.game} races={','.join(c.race_names)} "
                 f"learner_groups={c.learner_groups} actor_groups={c.actor_groups}",
                 f"experience: {path} ({why})"]
        for n in self.nodes:
            what = _describe(n)
            talks = ", ".join(n.refs())
            lines.append(f"  {n.name:<34} {n.cls.__name__:<14} {what}" + (f"  -> {talks}" if talks else ""))
        for call in self.calls:
            lines.append(f"  then {call.node}.{call.method}({', '.join(_short(v) for v in call.kwargs.values())})")
        return "\n".join(lines)


def _refs(value) -> list[Ref]:
    if isinstance(value, Ref):
        return [value]
    if isinstance(value, Mapping):
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list | tuple):
        return [r for v in value for r in _refs(v)]
    return []


def _short(value) -> str:
    if isinstance(value, Ref):
        return value.node
    if isinstance(value, list | tuple):
        return f"{len(value)} agents"
    return repr(value)


def _describe(node: Node) -> str:
    k = node.kwargs
    if node.cls is LearnerGroup:
        return f"{len(k['agent_ids'])} learners"
    if node.cls is DeviceLearnerGroup:
        c = k["config"]
        return (f"{len(k['agent_ids'])} learners playing their own games: {c.learner.batch_size} games x "
                f"{c.learner.unroll_length} steps per update, {c.device.updates_per_chunk} updates per "
                f"chunk, {c.device.opponent_slots} opponents per chunk")
    if node.cls is ActorGroup:
        return f"{len(k['assignments'])} actors x {k['config'].actor.batch_size} games"
    if node.cls is EvaluatorNode:
        if k.get("device"):
            return (f"{k['config'].evaluator.games} games per pair, "
                    f"{k['config'].device.evaluation_pairs} pairs at once on the device")
        return f"{k['config'].evaluator.games} games per pair"
    if node.cls is Coordinator:
        c = k["config"]
        return (f"league, history, params; its control loop: snapshots and resets every "
                f"{c.poll_every_seconds:g} s, meta-game every {c.meta_game_every_seconds:g} s, "
                f"checkpoint every {c.checkpoint_every_seconds:g} s, learner metrics every "
                f"{c.metrics_every_seconds:g} s")
    return ""


def resolve(value, handles: Mapping[str, Any]):
    """`value` with every `Ref` replaced by its node's handle."""
    if isinstance(value, Ref):
        return handles[value.node]
    if isinstance(value, Mapping):
        return {k: resolve(v, handles) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(resolve(v, handles) for v in value)
    return value


def _group_key(colocation: str, agent) -> str:
    return {"all": "", "race": agent.race, "agent": agent.player_id}[colocation]


def _grouped(prefix: str, colocation: str, agents) -> dict[str, list]:
    groups: dict[str, list] = {}
    for agent in agents:
        key = _group_key(colocation, agent)
        groups.setdefault(prefix + (f"/{key}" if key else ""), []).append(agent)
    return groups


def agent_indices(config: RunConfig) -> dict[str, int]:
    """Each learning agent's index, which seeds its initial parameters
    (`experiments.build.initial_params`)."""
    return {a.player_id: i for i, a in enumerate(learning_agents(config.league))}


def device_problem(config: RunConfig) -> str | None:
    """Why the run cannot take the device path (None: it can)."""
    from actors import rewards

    if not config.game_info.device:
        return (f"--game={config.game} has no JAX step (no GameFunctions: the device path plays games "
                "that declare them; docs/games.md)")
    if config.learner.batch_size % config.device.opponent_slots:
        return (f"--learner.batch_size={config.learner.batch_size} games do not split into "
                f"--device.opponent_slots={config.device.opponent_slots}; pick slots that divide the batch")
    try:
        spec = None
        if config.reward not in (None, "", "outcome", "game", "openai_five"):
            from experiments.build import make_game

            spec = make_game(config, 1).spec
        rewards.device_reward(config.reward, spec)
    except rewards.RewardPluginError as e:
        return str(e)
    return None


REPLAY_INSTALL = "pip install -c constraints-replay.txt -e '.[replay]'"
"""The replay path's environment (docs/experience.md, "The replay environment"): Reverb and TensorFlow 2.15."""


def replay_problem() -> str | None:
    """Why this environment cannot run the replay path (None: it can): Reverb is the `replay`
    extra, installed apart from the base stack."""
    import importlib.util

    if importlib.util.find_spec("reverb") is None:
        return ("the replay path needs Reverb and TensorFlow, the [replay] extra, which this "
                "environment lacks (they hold numpy < 2 and JAX 0.4.34, so they live in an "
                f"environment of their own): python3.11 -m venv .venv-replay && "
                f". .venv-replay/bin/activate && {REPLAY_INSTALL}")
    return None


def experience_path(config: RunConfig) -> tuple[str, str]:
    """("device" | "replay", why) of a run: `--experience=replay` or `device` as asked (device
    refused with ConfigError naming what it cannot do), `auto` the device path wherever
    `device_problem` finds nothing in the way, else replay. Whether this environment has
    the replay path's packages is `replay_problem`'s to say. On the replay path the reason says
    that exploration (`learner.exploration`, `exploiter_exploration`: Leduc's default) is not used:
    its actors play the policy itself."""
    path, why = _experience_path(config)
    defaults = config.game_info.capabilities.defaults  # a game's device defaults (SMAX's) are not asked for
    for name, off in (("device.scripted_slots", 0), ("device.main_agent_chunks", 1)):
        if path == "replay" and config.get(name) not in (off, defaults.get(name, off)):
            raise ConfigError(f"--{name} acts on the device path only, and this run takes "
                              f"the replay path ({why}); pass --experience=device or leave it at {off}")
    if path == "replay" and (config.learner.exploration or config.learner.exploiter_exploration):
        why += ("; learner.exploration and learner.exploiter_exploration act on the device path "
                "only: not used here (the actors play the policy itself)")
    return path, why


# Settings that one experience path reads and the other never does, with what does their job
# on the other path (docs/experience.md). A prefix ending in "." stands for every setting under it.
REPLAY_ONLY = {
    "actor.per_learner": "each learner plays its own games: --learner.batch_size of them",
    "actor.batch_size": "the learners' games are --learner.batch_size",
    "actor.episodes_per_match": ("a learner draws --device.opponent_slots opponents per chunk of "
                                 "--device.updates_per_chunk updates"),
    "actor.fused": "a learner's games and updates are always one jitted program",
    "learner.sampler": "a learner learns from its games as it plays them, without a replay table",
    "learner.prefetch_batches": "a learner learns from its games as it plays them, without a replay table",
    "learner.replay.": "a learner learns from its games as it plays them, without a replay table",
}
DEVICE_ONLY = {
    "device.updates_per_chunk": "the learners sample the actors' replay tables, one batch per update",
    "device.opponent_slots": "each actor plays one opponent for --actor.episodes_per_match games",
    "device.threads": "the actors play on threads of their own (--actor.per_learner per learner)",
    "device.population": "each learner is a program of its own",
    "device.population_parts": "each learner is a program of its own",
    "device.evaluation_pairs": "evaluators play one pair at a time (--evaluator.games games each)",
    "device.scripted_slots": "nothing does it (training against the scripted opponent is the device path's)",
    "device.scripted_task_slots": "nothing does it (training against the scripted opponent is the device path's)",
    "device.scripted_task_levels": "nothing does it (training against the scripted opponent is the device path's)",
    "device.main_agent_chunks": "every learner learns from what its actors play",
    "learner.exploration": "the actors play the policy itself",
    "learner.exploiter_exploration": "the actors play the policy itself",
}


def unread_settings(path: str, why: str, given: set[str]) -> None:
    """ConfigError naming a setting given on the command line (`given`: field paths) that the
    run's experience path `path` ("device" | "replay", chosen for `why`) never reads, and what
    does its job there. Defaults and a game's defaults are not given, so they never count."""
    other, unread = ("replay", REPLAY_ONLY) if path == "device" else ("device", DEVICE_ONLY)
    for name in sorted(given):
        job = next((j for key, j in unread.items()
                    if name == key or (key.endswith(".") and name.startswith(key))), None)
        if job is not None:
            raise ConfigError(
                f"--{name} is read by the {other} path only, and this run takes the {path} path "
                f"({why}): on the {path} path {job}. Leave --{name} out, or pass "
                f"--experience={other} (docs/experience.md)")


def _experience_path(config: RunConfig) -> tuple[str, str]:
    if config.experience == "replay":
        return "replay", "--experience=replay"
    problem = device_problem(config)
    if config.experience == "device":
        if problem:
            raise ConfigError(f"--experience=device: {problem}")
        return "device", "--experience=device"
    if problem:
        return "replay", f"auto: {problem}"
    return "device", "auto: every learner plays its own games in the jitted program of its update"


def build_program(config: RunConfig) -> Program:
    """The graph of nodes of a league run (see the module docstring)."""
    experience = experience_path(config)
    if experience[0] == "device":
        return _device_program(config, experience)
    agents = learning_agents(config.league)
    index = agent_indices(config)
    coordinator = Ref("coordinator")
    nodes = [_coordinator_node(config)]
    calls, learner_of = [], {}
    for name, members in _grouped("learners", config.learner_groups, agents).items():
        ids = [a.player_id for a in members]
        # Restartable: Ray restarts its process from the learners' checkpoints, with a new
        # Reverb server (the replay in the lost one is gone); the actors find it again.
        nodes.append(Node(name, LearnerGroup, dict(
            config=config, agent_ids=ids, agent_indices={a: index[a] for a in ids}),
            restartable=True))
        calls.append(Call("coordinator", "connect_learners", dict(group=Ref(name), agent_ids=ids)))
        learner_of.update(dict.fromkeys(ids, Ref(name)))
    for name, members in _grouped("actors", config.actor_groups, agents).items():
        assignments = [(f"actor_{a.player_id}_{k}", a.player_id)
                       for a in members for k in range(config.actor.per_learner)]
        nodes.append(Node(name, ActorGroup, dict(
            config=config, assignments=assignments, coordinator=coordinator,
            # Every learning agent's group: opponents are any agent, not only the group's.
            learner_groups=dict(learner_of)),
            restartable=True))
    nodes += _evaluators(config, coordinator, learner_of)
    return Program(config, nodes, calls, experience)


def _evaluators(config: RunConfig, coordinator: Ref, learner_of: dict, device: bool = False) -> list[Node]:
    return [Node(f"evaluator_{i}", EvaluatorNode, dict(
        config=config, coordinator=coordinator, learner_groups=dict(learner_of),
        evaluator_id=f"evaluator_{i}", device=device), restartable=True)
        for i in range(config.evaluator.count)]


def _coordinator_node(config: RunConfig) -> Node:
    """The coordinator; restartable on both paths (Ray restarts its process, it resumes from
    league.db and its wiring calls are made again; actors and learner groups call it again
    once it is back: benchmarks/chaos.py, tests/test_chaos.py, tests/test_program.py)."""
    return Node("coordinator", Coordinator, dict(
        league_config=config.league, run_dir=config.run_dir, seed=config.seed,
        config=CoordinatorConfig(meta_game_every_seconds=config.meta_game_every_seconds,
                                 checkpoint_every_seconds=config.checkpoint_every_seconds,
                                 metrics_every_seconds=config.progress_every_seconds,
                                 backup_every_seconds=config.backup_every_seconds,
                                 per_game_rows=config.per_game_rows)), restartable=True)


def _device_program(config: RunConfig, experience: tuple[str, str]) -> Program:
    """The device path's graph: the coordinator, learner groups that play their own games,
    evaluators; no actors and no Reverb."""
    index = agent_indices(config)
    coordinator = Ref("coordinator")
    nodes, calls, learner_of = [_coordinator_node(config)], [], {}
    for name, members in _grouped("learners", config.learner_groups, learning_agents(config.league)).items():
        ids = [a.player_id for a in members]
        nodes.append(Node(name, DeviceLearnerGroup, dict(
            config=config, agent_ids=ids, agent_indices={a: index[a] for a in ids},
            coordinator=coordinator, name=name), restartable=True))
        calls.append(Call("coordinator", "connect_learners", dict(group=Ref(name), agent_ids=ids)))
        learner_of.update(dict.fromkeys(ids, Ref(name)))
    nodes += _evaluators(config, coordinator, learner_of, device=True)
    return Program(config, nodes, calls, experience)
