"""Surgery: carry a network's parameters over to a wider network (OpenAI Five, seed 003,
appendix B "Surgery"; Net2Net, Chen et al. 2016).

A parameter's axes are described by `Axis`: a concatenation of blocks, each block a product
of named dimensions (`("H", "K")` is the `[heads * key_size]` axis of an attention projection,
`(4, "C")` the LSTM's four gates of `C` units, `(("C",), ("C",))` the LSTM's input of
[x, h]). Widening a dimension adds coordinates to every axis it appears in; the old
coordinates keep their values. For a layer `y = W1 x + b1` whose output `y` widens and a
consumer `z = W2 y + b2` (seed 003, equation 6):

    W1' = [W1 | R()]     b1' = [b1 | R()]      W2' = [W2 ; 0]

new input weights random (R: the new network's own initialisation, which breaks the symmetry
between the new units), new output weights zero, so `z' = z` exactly. A new observation
feature is the same rule on the first layer's input axis (seed 003, equation 9: W' = [W 0]).
In a parameter, an entry is set to zero when one of its coordinates on an *input* axis is new
and none on an *output* axis is (the old outputs must not read the new units); entries with a
new output coordinate keep the new network's random initialisation.

Widening an LSTM this way is exact too: the new units' recurrent weights into the old gates
are zero, so the old units never read the new ones, whose outputs the next layers ignore.
Seed 003 instead gave those weights "random small values"; `lstm_noise` > 0 does that (an
approximate surgery: the caller measures the change). A LayerNorm normalises over its whole
axis, so widening the unit network's residual stream (`embed_size`, read and written around
two LayerNorms) with fresh coordinates changes their mean and variance: `plan` reports that as
approximate. Widened by a whole multiple it is exact: every layer writing the stream writes
each new coordinate as a copy of an old one (Net2WiderNet's replication: copied output
weights, biases and LayerNorm parameters), which keeps the mean and variance, while every
reader ignores the copies (zero input weights, as above). Widening an attention layer's key size keeps the scores `q.k / sqrt(K)`: the new key columns
are zero and the old query weights are scaled by sqrt(K'/K).

Pure functions of numpy arrays and the networks' configs; `widen` returns a new tree.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.networks import NetworkConfig
from agents.unit_network import COMPOSITION, UnitNetworkConfig

# The unit network's sizes that surgery widens (`plan`'s dims); every other field of its config
# (the game's layout: units, heads, the pointer's types, z) must stay the same.
UNIT_WIDENED = ("embed_size", "replica_size", "core_size", "value_size", "pointer_size", "attention_heads",
                "attention_key_size", "unit_feature_size", "pointer_hidden_size")

IN, OUT = "in", "out"


class SurgeryError(ValueError):
    """The widening asked for cannot be done (a shrink, an unknown parameter, a shape that
    does not match the network); the message says which parameter and why."""


@dataclasses.dataclass(frozen=True)
class Dim:
    """A named dimension's old and new size; `positions` are the new coordinates of the old
    ones (default: the first `old`), e.g. a new observation feature inserted in the middle."""

    old: int
    new: int
    positions: tuple[int, ...] | None = None
    copy: bool = False  # new coordinate j of an OUT axis copies old coordinate j mod old

    def __post_init__(self):
        if self.new < self.old:
            raise SurgeryError(f"cannot shrink a dimension from {self.old} to {self.new}: surgery "
                               "only widens (a smaller network cannot compute the same function)")
        if self.copy and (self.positions is not None or self.new % self.old):
            raise SurgeryError(f"copying needs a whole multiple of {self.old}, got {self.new}")
        if self.positions is not None:
            pos = np.asarray(self.positions)
            if len(pos) != self.old or len(set(pos.tolist())) != self.old or (
                    self.old and (pos.min() < 0 or pos.max() >= self.new)):
                raise SurgeryError(f"positions {self.positions} must be {self.old} distinct "
                                   f"coordinates in 0..{self.new - 1}")

    def old_positions(self) -> np.ndarray:
        return np.arange(self.old) if self.positions is None else np.asarray(self.positions)


@dataclasses.dataclass(frozen=True)
class Axis:
    """One axis of a parameter: concatenated blocks, each a product of dims (names or fixed
    ints). `role` is IN (the layer reads these coordinates) or OUT (it writes them).
    `zero_dims`: on an OUT axis, coordinates new only because of these dims are treated as
    inputs (zero), e.g. an attention key's new key-size columns."""

    blocks: tuple[tuple[str | int, ...], ...]
    role: str
    zero_dims: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Rule:
    axes: tuple[Axis, ...]
    scale_old: str | None = None  # a dim name: old entries times sqrt(new/old) of that dim
    noise: bool = False  # zeroed entries get `lstm_noise` * N(0, 1) instead (the LSTM)


def _size(dim: str | int, sizes: Mapping[str, Dim], new: bool) -> int:
    if isinstance(dim, int):
        return dim
    return sizes[dim].new if new else sizes[dim].old


def _axis_map(axis: Axis, sizes: Mapping[str, Dim]) -> tuple[np.ndarray, ...]:
    """(new index of each old coordinate [old length], new-coordinate mask [new length],
    coordinates new only because of `zero_dims` [new length], the coordinate each new one
    copies [new length]: itself unless a `copy` dim makes it a copy)."""
    old_index, is_new, zero_new, source, offset = [], [], [], [], 0
    for block in axis.blocks:
        new_shape = [_size(d, sizes, True) for d in block]
        # new position of each old coordinate, per dim; outer product -> flat new indices
        grids = np.meshgrid(*[sizes[d].old_positions() if isinstance(d, str) else np.arange(d)
                              for d in block], indexing="ij")
        old_index.append(offset + np.ravel_multi_index([g.ravel() for g in grids], new_shape).astype(np.int64))
        coords = np.meshgrid(*[np.arange(n) for n in new_shape], indexing="ij")
        new_by_dim = []
        for d, c in zip(block, coords):
            if isinstance(d, int):
                new_by_dim.append(np.zeros(c.size, bool))
            else:
                new_by_dim.append(~np.isin(c.ravel(), sizes[d].old_positions()))
        any_new = np.any(new_by_dim, axis=0) if new_by_dim else np.zeros(1, bool)
        only_zero = np.zeros_like(any_new)
        if axis.zero_dims:
            zero = [n for d, n in zip(block, new_by_dim) if d in axis.zero_dims]
            other = [n for d, n in zip(block, new_by_dim) if d not in axis.zero_dims]
            if zero:
                other_new = np.any(other, axis=0) if other else np.zeros_like(any_new)
                only_zero = np.any(zero, axis=0) & ~other_new
        copied = [(c.ravel() % sizes[d].old) if isinstance(d, str) and sizes[d].copy else c.ravel()
                  for d, c in zip(block, coords)]
        source.append(offset + np.ravel_multi_index(copied, new_shape).astype(np.int64))
        is_new.append(any_new)
        zero_new.append(only_zero)
        offset += int(np.prod(new_shape))
    return (np.concatenate(old_index), np.concatenate(is_new), np.concatenate(zero_new),
            np.concatenate(source))


def _axis_length(axis: Axis, sizes: Mapping[str, Dim], new: bool) -> int:
    return sum(int(np.prod([_size(d, sizes, new) for d in block])) for block in axis.blocks)


def widen_leaf(name: str, old: np.ndarray, template: np.ndarray, rule: Rule,
               sizes: Mapping[str, Dim], rng: np.random.Generator | None = None,
               lstm_noise: float = 0.0) -> np.ndarray:
    """One parameter of the wider network: `old` at the old coordinates, zero where an input
    coordinate is new and no output one is, `template` (the new network's initialisation)
    elsewhere. SurgeryError if the shapes are not the rule's."""
    old, template = np.asarray(old), np.asarray(template)
    want_old = tuple(_axis_length(a, sizes, False) for a in rule.axes)
    want_new = tuple(_axis_length(a, sizes, True) for a in rule.axes)
    if old.shape != want_old or template.shape != want_new:
        raise SurgeryError(f"parameter {name}: saved shape {old.shape} and new shape "
                           f"{template.shape}, expected {want_old} -> {want_new}")
    maps = [_axis_map(a, sizes) for a in rule.axes]
    zero = np.zeros(template.shape, bool)
    out_new = np.zeros(template.shape, bool)
    for k, (axis, (_, is_new, zero_new, _)) in enumerate(zip(rule.axes, maps)):
        shape = [1] * template.ndim
        shape[k] = -1
        if axis.role == IN:
            zero |= is_new.reshape(shape)
        else:
            zero |= zero_new.reshape(shape)
            out_new |= (is_new & ~zero_new).reshape(shape)
    result = np.array(template, dtype=template.dtype, copy=True)
    mask = zero & ~out_new
    if rule.noise and lstm_noise > 0:
        rng = rng or np.random.default_rng(0)
        result[mask] = lstm_noise * rng.standard_normal(int(mask.sum())).astype(result.dtype)
    else:
        result[mask] = 0
    values = old
    if rule.scale_old is not None:
        d = sizes[rule.scale_old]
        values = old * np.asarray(math.sqrt(d.new / d.old), old.dtype)
    result[np.ix_(*[m[0] for m in maps])] = values
    for k, (axis, m) in enumerate(zip(rule.axes, maps)):
        if axis.role == OUT:  # copies of old output coordinates (Net2WiderNet), if any
            result = np.take(result, m[3], axis=k)
    return result


def _linear(inputs, outputs, **extra) -> dict[str, Rule]:
    """Rules of an `hk.Linear`: w [in, out], b [out]."""
    out = Axis(outputs, OUT, extra.pop("zero_dims", ()))
    return {"w": Rule((Axis(inputs, IN), out), **extra),
            "b": Rule((out,), **extra)}


def reference_rules(config: NetworkConfig) -> dict[str, dict[str, Rule]]:
    """Rules for `agents.networks.ReferenceNetwork` (one MLP layer of width H, an LSTM of C):
    dims F (observation features), H, C."""
    if not config.lstm_size:
        raise SurgeryError("surgery knows the reference network with an LSTM; this one has none "
                           "(--network.core_size=0, the poker games' default): widening it is not built yet; a "
                           "league started with --core_size=64 can be widened")
    if len(config.mlp_sizes) != 1:
        raise SurgeryError("surgery knows the reference network with one MLP layer (the run "
                           f"config's hidden_size); this one has {config.mlp_sizes}")
    rules = {
        "agent/~/torso/~/linear_0": _linear((("F",),), (("H",),)),
        "agent/~/lstm/linear": _linear((("H",), ("C",)), ((4, "C"),), noise=True),
        "agent/~/value": _linear((("C",), ("H",)) if config.value_uses_opponent else (("C",),), ((1,),)),
    }
    for head, n in config.heads.items():
        rules[f"agent/~/policy_{head}"] = _linear((("C",),), ((int(n),),))
    if config.value_uses_opponent:
        rules["agent/~/opponent_torso/~/linear_0"] = _linear((("F",),), (("H",),))
    return rules


def unit_rules(config: UnitNetworkConfig, own_features: int, global_features: int
               ) -> dict[str, dict[str, Rule]]:
    """Rules for `agents.unit_network.UnitNetwork`: dims E (embed: the residual stream), Eh
    (embed: hidden layers), R (replica), C (core), V (value), P (pointer), Q (the enemy-key
    MLP's hidden width), A (attention heads), K (key size), f (features per other unit).
    `own_features` / `global_features`: the sizes of the unit's own features and of the team
    input's global features (fixed)."""
    c = config
    units = ((c.num_units - 1, "f"), (c.num_targets, "f"), (own_features,))
    norm = {"scale": Rule((Axis((("E",),), OUT),)), "offset": Rule((Axis((("E",),), OUT),))}
    rules = {
        "unit_agent/~/enemy_encoder/~/linear_0": _linear((("f",),), (("Q",),)),
        # the keys' new pointer columns are zero, the query's old weights scaled by sqrt(P'/P)
        "unit_agent/~/enemy_encoder/~/linear_1": _linear((("Q",),), (("P",),), zero_dims=("P",)),
        "unit_agent/~/unit_encoder/~/linear_0": _linear((*units, (1,)), (("Eh",),)),
        "unit_agent/~/unit_encoder/~/linear_1": _linear((("Eh",),), (("E",),)),
        "unit_agent/~/team/~/linear_0": _linear((("E",), (global_features,)), (("C",),)),
        "unit_agent/~/lstm/linear": _linear((("C",), ("C",)), ((4, "C"),), noise=True),
        "unit_agent/~/replica/~/linear_0": _linear((("E",), ("C",)), (("R",),)),
        "unit_agent/~/replica_pooled/~/linear_0": _linear((("R",), ("R",)), (("R",),)),
        "unit_agent/~/policy_action_type": _linear((("R",),), ((c.num_action_types,),)),
        "unit_agent/~/policy_composition": _linear((("C",),), ((c.head_values()[COMPOSITION],),)),
        "unit_agent/~/pointer_query": _linear((("R",),), (("P",),), scale_old="P"),
        "unit_agent/~/action_type_embed": {
            "embeddings": Rule((Axis(((c.num_action_types,),), IN), Axis((("P",),), OUT)),
                               scale_old="P")},
        "unit_agent/~/value/~/linear_0": _linear(
            (("C",), ("V",)) if c.value_uses_opponent else (("C",),), (("V",),)),
        "unit_agent/~/value/~/linear_1": _linear((("V",),), ((1,),)),
        "unit_agent/~/value_unit": {"w": Rule((Axis((("R",),), IN), Axis((("V",),), OUT)))},
    }
    for k in range(c.attention_layers):
        a = f"unit_agent/~/attention_{k}"
        rules[f"{a}/query"] = _linear((("E",),), (("A", "K"),), scale_old="K")
        rules[f"{a}/key"] = _linear((("E",),), (("A", "K"),), zero_dims=("K",))
        rules[f"{a}/value"] = _linear((("E",),), (("A", "K"),))
        rules[f"{a}/linear"] = _linear((("A", "K"),), (("E",),))
        rules[f"unit_agent/~/attention_norm_{k}"] = norm
        rules[f"unit_agent/~/attention_mlp_{k}/~/linear_0"] = _linear((("E",),), ((2, "Eh"),))
        rules[f"unit_agent/~/attention_mlp_{k}/~/linear_1"] = _linear(((2, "Eh"),), (("E",),))
        rules[f"unit_agent/~/attention_mlp_norm_{k}"] = norm
    if c.value_uses_opponent:
        rules["unit_agent/~/opponent_unit/~/linear_0"] = _linear(units, (("V",),))
        rules["unit_agent/~/opponent/~/linear_0"] = _linear((("V",), (global_features,)), (("V",),))
    return rules


def unit_input_sizes(config: UnitNetworkConfig, params: Mapping) -> tuple[int, int]:
    """(own features per unit, global features of the team input) of a unit network's
    parameters: the fixed input sizes `unit_rules` needs."""
    rows = np.shape(params["unit_agent/~/unit_encoder/~/linear_0"]["w"])[0]
    own = rows - 1 - (config.num_units - 1 + config.num_targets) * config.unit_feature_size
    global_features = np.shape(params["unit_agent/~/team/~/linear_0"]["w"])[0] - config.embed_size
    if own < 0 or global_features < 0:
        raise SurgeryError("the saved parameters do not match the unit network's config")
    return int(own), int(global_features)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a widening does: the rules per parameter, the dims' old and new sizes, and the
    reasons it is approximate (empty: exactly function preserving)."""

    rules: Mapping[str, Mapping[str, Rule]]
    sizes: Mapping[str, Dim]
    approximate: tuple[str, ...]

    @property
    def exact(self) -> bool:
        return not self.approximate


def plan(old_config, new_config, *, old_features: int | None = None, new_features: int | None = None,
         feature_positions: Sequence[int] | None = None, lstm_noise: float = 0.0,
         own_features: int = 0, global_features: int = 0) -> Plan:
    """The widening from a network config to a wider one of the same kind.

    Reference network: `old_features` / `new_features` are the observation's feature counts
    (F) and `feature_positions` the new coordinates of the old features (default: new ones
    appended). Unit network: a larger `unit_feature_size` adds features at the end of every
    other unit's block; `own_features` and `global_features` are the fixed input sizes."""
    if type(old_config) is not type(new_config):
        raise SurgeryError(f"cannot turn a {type(old_config).__name__} into a {type(new_config).__name__}")
    approximate = []
    if isinstance(old_config, NetworkConfig):
        if dict(old_config.heads) != dict(new_config.heads) or (
                old_config.value_uses_opponent != new_config.value_uses_opponent):
            raise SurgeryError("surgery widens layers; the action heads and the value's inputs must stay the same")
        if len(old_config.mlp_sizes) != len(new_config.mlp_sizes):
            raise SurgeryError("surgery widens layers; it does not add or remove them")
        old_f = old_features if old_features is not None else new_features
        new_f = new_features if new_features is not None else old_f
        if old_f is None:
            raise SurgeryError("the reference network's rules need the observation's feature count")
        sizes = {"F": Dim(old_f, new_f, tuple(feature_positions) if feature_positions is not None else None),
                 "H": Dim(old_config.mlp_sizes[0], new_config.mlp_sizes[0]),
                 "C": Dim(old_config.lstm_size, new_config.lstm_size)}
        rules = reference_rules(old_config)
    elif isinstance(old_config, UnitNetworkConfig):
        fixed = [f.name for f in dataclasses.fields(UnitNetworkConfig) if f.name not in UNIT_WIDENED]
        changed = [f for f in fixed if getattr(old_config, f) != getattr(new_config, f)]
        if changed:
            raise SurgeryError(f"surgery widens layers; these must stay the same: {', '.join(changed)}")
        o, n = old_config, new_config
        doubles = n.embed_size % o.embed_size == 0
        sizes = {"E": Dim(o.embed_size, n.embed_size, copy=doubles), "Eh": Dim(o.embed_size, n.embed_size),
                 "R": Dim(o.replica_size, n.replica_size),
                 "C": Dim(o.core_size, n.core_size), "V": Dim(o.value_size, n.value_size),
                 "P": Dim(o.pointer_size, n.pointer_size), "A": Dim(o.attention_heads, n.attention_heads),
                 "K": Dim(o.attention_key_size, n.attention_key_size),
                 "f": Dim(o.unit_feature_size, n.unit_feature_size),
                 "Q": Dim(o.pointer_hidden_size, n.pointer_hidden_size)}
        rules = unit_rules(old_config, own_features, global_features)
        if sizes["E"].new > sizes["E"].old and not doubles:
            approximate.append(
                f"embed_size {sizes['E'].old} -> {sizes['E'].new}: the attention block's LayerNorms "
                "normalise over the widened axis, so their mean and variance change (a whole "
                "multiple of the old size is exact: the new coordinates copy the old ones)")
    else:
        raise SurgeryError(f"surgery does not know the network config {type(old_config).__name__}")
    if lstm_noise > 0 and sizes["C"].new > sizes["C"].old:
        approximate.append(f"core_size {sizes['C'].old} -> {sizes['C'].new} with random small "
                           f"recurrent weights (lstm_noise={lstm_noise}, OpenAI Five's way)")
    return Plan(rules, sizes, tuple(approximate))


def widen(the_plan: Plan, old_params: Mapping[str, Mapping[str, Any]],
          new_template: Mapping[str, Mapping[str, Any]], *, seed: int = 0,
          lstm_noise: float = 0.0) -> dict[str, dict[str, np.ndarray]]:
    """The wider network's parameters (nested dicts of numpy arrays, haiku's layout):
    `old_params` carried over into `new_template` (the wider network's initialisation) by the
    plan's rules. Parameters whose shape does not change are copied. SurgeryError naming the
    parameter if the trees differ or a changed shape has no rule."""
    if set(old_params) != set(new_template):
        missing, extra = set(new_template) - set(old_params), set(old_params) - set(new_template)
        raise SurgeryError(f"the saved parameters are not this network's (modules missing: "
                           f"{sorted(missing)}, unknown: {sorted(extra)})")
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, np.ndarray]] = {}
    for module, leaves in new_template.items():
        out[module] = {}
        for name, template in leaves.items():
            if name not in old_params[module]:
                raise SurgeryError(f"parameter {module}/{name} is missing from the saved parameters")
            old = np.asarray(old_params[module][name])
            rule = the_plan.rules.get(module, {}).get(name)
            if rule is None:
                if old.shape != np.shape(template):
                    raise SurgeryError(f"parameter {module}/{name} changes shape {old.shape} -> "
                                       f"{np.shape(template)} and surgery has no rule for it")
                out[module][name] = np.array(old, copy=True)
                continue
            out[module][name] = widen_leaf(f"{module}/{name}", old, np.asarray(template), rule,
                                           the_plan.sizes, rng, lstm_noise)
    return out


def widen_zeros(the_plan: Plan, old_tree: Mapping, new_shapes: Mapping) -> dict:
    """A parameter-shaped tree (e.g. Adam's moments) carried over with zeros at every new
    coordinate: new units start with no optimiser history."""
    out = {}
    for module, leaves in new_shapes.items():
        out[module] = {}
        for name, like in leaves.items():
            old = np.asarray(old_tree[module][name])
            rule = the_plan.rules.get(module, {}).get(name)
            if rule is None:
                out[module][name] = np.array(old, copy=True)
                continue
            result = np.zeros(np.shape(like), old.dtype)
            maps = [_axis_map(a, the_plan.sizes)[0] for a in rule.axes]
            result[np.ix_(*maps)] = old
            out[module][name] = result
    return out
