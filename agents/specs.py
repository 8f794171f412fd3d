"""Observation and action structures shared by the games (actors/games) and the networks (agents/).

One module, so a game and a network agree on shapes by construction: a game publishes a
`GameSpec`; a network is built from one `SideSpec`. Pure Python and numpy; no JAX here.

Conventions
- Every array in an observation or action carries a leading batch axis [B] at run time; the
  specs give the shape of one game (without the batch axis).
- An action is a dict of named discrete heads. A head of shape (n_units,) holds one choice per
  unit (SMAX unit micro); a head of shape () holds one choice for the whole side (a poker move,
  the first-step army `composition` of a team).
- The legal-action masks ride in the observation as `obs[MASK_KEY][head]` (the key the networks
  of agents/networks.py read), boolean, of shape `head.shape + (head.num_values,)`. At least one
  value is legal in every mask row, so a masked softmax is always defined. Where a side does not act (the other poker player's turn,
  SMAX unit heads during the composition step, a dead unit) the mask is one-hot at value 0 and
  the action is ignored by the game; the observation field `acting` says whether the side's
  choice counts this step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

MASK_KEY = "action_mask"  # obs[MASK_KEY][head] -> bool [*head.shape, head.num_values]


def legal_mask(obs, head: str):
    """The legal-action mask of action head `head` in observation `obs`."""
    return obs[MASK_KEY][head]


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """Shape and dtype of one array of one game (no batch axis)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    def zeros(self, batch: tuple[int, ...] = ()) -> np.ndarray:
        return np.zeros(tuple(batch) + self.shape, self.dtype)

    def check(self, name: str, value, batch: tuple[int, ...] = ()) -> None:
        """Raise ValueError unless `value` has shape batch + self.shape."""
        shape = tuple(np.shape(value))
        if shape != tuple(batch) + self.shape:
            raise ValueError(f"{name}: expected shape {tuple(batch) + self.shape}, got {shape}")


@dataclasses.dataclass(frozen=True)
class DiscreteHead:
    """One discrete action head: `num_values` choices for each entry of `shape`.

    `pointer_types`: the values of this head (an action-type head) whose action takes a target
    that a pointer head chooses (a unit game's attack); for every other value the game ignores
    the target, and the unit network forces it (agents/unit_network.py). () for every head that
    is not a unit network's action type."""

    num_values: int
    shape: tuple[int, ...] = ()
    dtype: np.dtype = np.dtype(np.int32)
    pointer_types: tuple[int, ...] = ()

    def __post_init__(self):
        if self.num_values < 1:
            raise ValueError(f"a discrete head needs at least one value, got {self.num_values}")
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "pointer_types", tuple(int(t) for t in self.pointer_types))
        bad = [t for t in self.pointer_types if not 0 <= t < self.num_values]
        if bad:
            raise ValueError(f"pointer_types {bad} outside the head's values 0..{self.num_values - 1}")

    @property
    def mask_spec(self) -> ArraySpec:
        return ArraySpec(self.shape + (self.num_values,), np.bool_)

    @property
    def value_spec(self) -> ArraySpec:
        return ArraySpec(self.shape, self.dtype)


@dataclasses.dataclass(frozen=True)
class ObservationSpec:
    """Named feature arrays one side observes each step (the masks are added from the ActionSpec)."""

    fields: Mapping[str, ArraySpec]

    def __post_init__(self):
        if MASK_KEY in self.fields:
            raise ValueError(f"{MASK_KEY!r} is reserved for the legal-action masks")

    def __getitem__(self, name: str) -> ArraySpec:
        return self.fields[name]


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """Named discrete heads one side chooses each step."""

    heads: Mapping[str, DiscreteHead]

    def __getitem__(self, name: str) -> DiscreteHead:
        return self.heads[name]

    def zeros(self, batch: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
        return {name: head.value_spec.zeros(batch) for name, head in self.heads.items()}


@dataclasses.dataclass(frozen=True)
class SideSpec:
    """What one side of a two-sided game sees and chooses; `num_units` is 1 for a single player."""

    observation: ObservationSpec
    action: ActionSpec
    num_units: int = 1

    @property
    def mask_specs(self) -> dict[str, ArraySpec]:
        return {name: head.mask_spec for name, head in self.action.heads.items()}

    def zero_observation(self, batch: tuple[int, ...] = ()) -> dict:
        """A zero observation (all masks False) with the full structure, e.g. to init a network."""
        obs = {name: spec.zeros(batch) for name, spec in self.observation.fields.items()}
        obs[MASK_KEY] = {name: spec.zeros(batch) for name, spec in self.mask_specs.items()}
        return obs

    def check_observation(self, obs, batch: tuple[int, ...] = ()) -> None:
        """Raise ValueError naming the field unless `obs` has this side's structure and shapes."""
        expected = set(self.observation.fields) | {MASK_KEY}
        if set(obs) != expected:
            raise ValueError(f"observation keys {sorted(obs)} != {sorted(expected)}")
        for name, spec in self.observation.fields.items():
            spec.check(name, obs[name], batch)
        if set(obs[MASK_KEY]) != set(self.action.heads):
            raise ValueError(f"mask heads {sorted(obs[MASK_KEY])} != {sorted(self.action.heads)}")
        for name, spec in self.mask_specs.items():
            spec.check(f"{MASK_KEY}[{name!r}]", obs[MASK_KEY][name], batch)

    def network_heads(self) -> dict[str, int]:
        """{head: number of values}, the `heads` of agents.networks.NetworkConfig."""
        return {name: head.num_values for name, head in self.action.heads.items()}


@dataclasses.dataclass(frozen=True)
class GameSpec:
    """A two-sided zero-sum game's structures, side 0 first; `max_steps` bounds an episode."""

    name: str
    sides: tuple[SideSpec, SideSpec]
    max_steps: int
    signal_fields: Mapping[str, ArraySpec] = dataclasses.field(default_factory=dict)

    def side(self, i: int) -> SideSpec:
        return self.sides[i]
