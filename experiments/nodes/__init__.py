"""The nodes of a league program besides the coordinator: plain classes whose public methods
are their RPC surface, so a launcher can place them in one process or as Ray actors
(experiments/program.py builds the graph, experiments/launchers.py runs it). One module a node:

- `base`: what they share: `lost_node`, `ParamsSource` and the learner groups' `_Learners`.
- `learner_group`: `LearnerGroup`, the replay path's learners and their Reverb server.
- `device_learners`: `DeviceLearnerGroup`, the device path's learners, with `chunk_order`,
  `OpponentBank` and `make_populations`.
- `actor_group`: `ActorGroup`, the replay path's actors, each on its own thread.
- `evaluator_node`: `EvaluatorNode`, the payoff's evaluation games, NashConv and the heuristic curve.

Handles to other nodes are the nodes themselves or proxies that read like them (Ray).
"""

from experiments.nodes.actor_group import ActorGroup
from experiments.nodes.base import ParamsSource, lost_node
from experiments.nodes.device_learners import (
    DeviceLearnerGroup,
    OpponentBank,
    chunk_order,
    make_populations,
)
from experiments.nodes.evaluator_node import EvaluatorNode
from experiments.nodes.learner_group import LearnerGroup

__all__ = [
    "ActorGroup",
    "DeviceLearnerGroup",
    "EvaluatorNode",
    "LearnerGroup",
    "OpponentBank",
    "ParamsSource",
    "chunk_order",
    "lost_node",
    "make_populations",
]
