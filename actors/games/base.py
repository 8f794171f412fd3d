"""The two-sided zero-sum batch protocol that actors and evaluators drive.

A game holds a batch of B independent games. Both sides act every step (a side that is not to
move -- the other poker player -- has its action ignored; see `agents.specs`).

    game.spec                      -> GameSpec (per-side observation and action specs)
    game.batch_size                -> B
    game.reset(seed)               -> TimeStep   start B fresh games
    game.step((actions0, actions1))-> TimeStep   actions_i: dict head -> array [B, *head.shape]

`TimeStep` fields, all with leading axis [B]:
    observations: (obs0, obs1), dicts name -> array, the legal-action masks under
                  obs["action_mask"][head] (agents/specs.py)
    rewards:      [B, 2] float32, per side, the game's own zero-sum payoff on the final step
                  (rewards[:, 1] == -rewards[:, 0]): +1 / 0 / -1 for SMAX and matrix games'
                  outcomes, chips for poker; actors/rewards.py turns steps into training rewards
    done:         [B] bool, the game ended at this step
    outcome:      [B] int8, +1 win / 0 draw / -1 loss from side 0's view where done, else 0
    signals:      dict name -> array, raw signals for reward shaping (see actors/rewards.py)

Finished games restart at once (auto-reset): where `done`, `observations` are the first
observation of the next game, while `rewards`, `outcome` and `signals` belong to the game that
ended. JAX games step the whole batch with one jitted, vmapped function (their pure functions are
exposed for fused loops); Python games (OpenSpiel) run as a pool of instances.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from agents.specs import GameSpec, legal_mask

WIN, DRAW, LOSS = 1, 0, -1


class TimeStep(NamedTuple):
    observations: tuple[Mapping[str, Any], Mapping[str, Any]]
    rewards: Any
    done: Any
    outcome: Any
    signals: Mapping[str, Any]


@runtime_checkable
class BatchGame(Protocol):
    spec: GameSpec
    batch_size: int

    def reset(self, seed: int) -> TimeStep: ...

    def step(self, actions: tuple[Mapping[str, Any], Mapping[str, Any]]) -> TimeStep: ...


def random_legal_actions(rng: np.random.Generator, spec: GameSpec, observations) -> tuple[dict, dict]:
    """Uniformly random legal actions for both sides, from the legal masks (numpy)."""
    out = []
    for side_spec, obs in zip(spec.sides, observations):
        actions = {}
        for head_name in side_spec.action.heads:
            mask = np.asarray(legal_mask(obs, head_name), bool)
            noise = rng.random(mask.shape)
            actions[head_name] = np.argmax(np.where(mask, noise, -1.0), axis=-1).astype(np.int32)
        out.append(actions)
    return tuple(out)


def check_actions(spec: GameSpec, actions, batch_size: int) -> None:
    """Raise ValueError naming the side and head if `actions` do not match the spec."""
    if len(actions) != 2:
        raise ValueError(f"expected actions for 2 sides, got {len(actions)}")
    for i, (side_spec, side_actions) in enumerate(zip(spec.sides, actions)):
        missing = set(side_spec.action.heads) - set(side_actions)
        if missing:
            raise ValueError(f"side {i}: missing action heads {sorted(missing)}")
        for name, head in side_spec.action.heads.items():
            head.value_spec.check(f"side {i} head {name!r}", side_actions[name], (batch_size,))
