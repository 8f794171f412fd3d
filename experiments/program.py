"""The league program as one graph of nodes, built once from a RunConfig; launchers run it.

    program = build_program(config)
    print(program)                        # python -m experiments.league --print_program
    launchers.run_inprocess(config)       # or run_ray: the same graph, other processes

The graph (Acme's `make_distributed_experiment`, in small):

    coordinator      Coordinator: league, payoff, matchmaking, history, parameter store
    learners[/key]   LearnerGroup: the learners of some agents and their Reverb tables
    actors[/key]     ActorGroup: `actors_per_learner` actors per agent of the group
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
from experiments.config import RunConfig
from experiments.nodes import ActorGroup, EvaluatorNode, LearnerGroup
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
    restartable: bool = False  # Ray restarts its process if it dies (actors, evaluators)

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

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def learner_groups(self) -> list[str]:
        return [n.name for n in self.nodes if n.cls is LearnerGroup]

    def __str__(self) -> str:
        c = self.config
        lines = [f"program: game={c.game} races={','.join(c.race_names)} "
                 f"learner_groups={c.learner_groups} actor_groups={c.actor_groups}"]
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
    if node.cls is ActorGroup:
        return f"{len(k['assignments'])} actors x {k['config'].actor.batch_size} games"
    if node.cls is EvaluatorNode:
        return f"{k['config'].evaluator.games} games per pair"
    return "league, history, params"


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
    (`experiments.nodes.initial_params`)."""
    return {a.player_id: i for i, a in enumerate(learning_agents(config.league))}


def build_program(config: RunConfig) -> Program:
    """The graph of nodes of a league run (see the module docstring)."""
    agents = learning_agents(config.league)
    index = agent_indices(config)
    coordinator = Ref("coordinator")
    nodes = [Node("coordinator", Coordinator, dict(
        league_config=config.league, run_dir=config.run_dir, seed=config.seed,
        config=CoordinatorConfig(meta_game_every_seconds=config.meta_game_every_seconds,
                                 checkpoint_every_seconds=config.checkpoint_every_seconds)),
        runs=False)]
    calls, learner_of = [], {}
    for name, members in _grouped("learners", config.learner_groups, agents).items():
        ids = [a.player_id for a in members]
        nodes.append(Node(name, LearnerGroup, dict(
            config=config, agent_ids=ids, agent_indices={a: index[a] for a in ids})))
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
    for i in range(config.evaluator.count):
        nodes.append(Node(f"evaluator_{i}", EvaluatorNode, dict(
            config=config, coordinator=coordinator, learner_groups=dict(learner_of),
            evaluator_id=f"evaluator_{i}"), restartable=True))
    return Program(config, nodes, calls)
