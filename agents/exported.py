"""An exported agent: one self-contained, versioned file, and the policy it loads into.

    policy = agents.load_policy("kuhn.agent.npz")       # no run directory, no game code needed
    actions, state = policy.act(obs, key)                # a batch of the game's observations
    probs, state = policy.probabilities(obs)             # {head: [B, num_values]}
    jax.jit(policy.act, static_argnames="greedy")(obs, key, greedy=True)

    mixture = agents.load_policy("kuhn.result.npz")     # a run's Nash mixture (RUN_DIR:result)
    actions, state = mixture.act(obs, key)               # each game plays one member, drawn at its start
    state.member                                         # [B]: which member plays each game

The file (written by `python -m experiments.export AGENT --out=F`) is an ordinary uncompressed
npz archive (a zip; `numpy.load(F)` reads it, no pickle anywhere):

- `header.json`: JSON, `{"format": "league-agent", "format_version": 2, ...}`: the network
  (`network.class`: ReferenceNetwork or UnitNetwork, `network.config`: its config's fields),
  the side it plays and the game's spec (`spec`: every observation field's shape and dtype,
  every action head), the game (`game.name`, `game.module_path` for a game given as
  `package.module:factory`), where it came from (`source`: run directory, player, parameter
  version, role, race, parent, exported at; a run's agent, `RUN_DIR:result` of a game without
  an exact meta-game: player "result", `main_agent`, `reading` ("average of final + N newest
  snapshots", or the final parameters while it has none) and `averaged`, the snapshots' ids),
  and `leaves`: each parameter's key path, shape and dtype;
- `leaf_<i>.npy`: the parameters, in the order of `leaves`;
- a mixture of agents (a run's Nash mixture; version 2) has `mixture` in its header instead: a
  list of members, each `{"weight", "source" (its player, version, role), "leaves"}`, all
  playing the header's network; member k's parameters are `member<k>_leaf_<i>.npy`, and the
  header's own `leaves` is empty;
- the archive's comment, `league-agent sha256=<hex>`: SHA-256 of every byte before the digest,
  so any changed or missing byte is found before anything is used.

`read` refuses a file that is not one of these, damaged, truncated, or of a newer format version
with `ExportedFileError` (a ValueError naming the file and what is wrong); a file of an older
version is upgraded on reading by `_UPGRADES`: version 1 (one agent, no `mixture`) reads as it is.
A version 1 loader refuses a version 2 file as newer ("update the league package").

A unit network (SMAX) takes the statistic z as an optional input, `obs["z"]` (float [B,
z_size], `Policy.z_size`; left out: z = 0, the unconditioned policy, as the league's evaluator
plays), beside the game's own fields. Its core state (an LSTM's) is carried in `state`.

A mixture's policy plays one member per game (as the league's Nash mixture does): `act` draws
each game's member from the weights with its `key` where a game starts (`first`, or no member
yet), and the member is carried in the state (`MixtureState(member [B], core)`);
`probabilities` and `logits` are those of each game's member in the state given (required).

"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import zipfile
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from agents.specs import (
    MASK_KEY,
    ActionSpec,
    ArraySpec,
    DiscreteHead,
    GameSpec,
    ObservationSpec,
    SideSpec,
)
from agents.storage import flatten, read_npz, unflatten, write_atomic

FORMAT = "league-agent"
VERSION = 2
HEADER = "header.json"
_DIGEST_PREFIX = b"league-agent sha256="
_DIGEST_LEN = 64   # hex characters
# format_version -> function(header) -> the header of the next version. A reader of version N
# reads every older file through these, in order. 1 -> 2: version 2 added the optional `mixture`;
# a version 1 header is a version 2 header of one agent.
_UPGRADES: dict[int, Any] = {1: lambda header: header}
MIXTURE = "mixture"
Z_KEY = "z"   # the unit network's optional input (agents/unit_network.py): not a game's field


class ExportedFileError(ValueError):
    """A file that is not a readable exported agent: the message names the file and what is
    wrong with it (not an npz, no header, truncated, damaged, a newer format version)."""


# -- descriptions (JSON) -----------------------------------------------------------------------

def _array_spec(spec: ArraySpec) -> dict:
    return {"shape": list(spec.shape), "dtype": np.dtype(spec.dtype).name}


def _head(head: DiscreteHead) -> dict:
    out = {"num_values": int(head.num_values), "shape": list(head.shape), "dtype": np.dtype(head.dtype).name}
    if head.pointer_types:   # the action types a pointer head serves (absent: none, as in older files)
        out["pointer_types"] = [int(t) for t in head.pointer_types]
    return out


def side_to_dict(side: SideSpec) -> dict:
    return {"num_units": int(side.num_units),
            "observation": {k: _array_spec(v) for k, v in side.observation.fields.items()},
            "action": {k: _head(v) for k, v in side.action.heads.items()}}


def side_from_dict(data: Mapping) -> SideSpec:
    return SideSpec(
        observation=ObservationSpec({k: ArraySpec(tuple(v["shape"]), v["dtype"])
                                     for k, v in data["observation"].items()}),
        action=ActionSpec({k: DiscreteHead(int(v["num_values"]), tuple(v["shape"]), v["dtype"],
                                           pointer_types=tuple(v.get("pointer_types", ())))
                           for k, v in data["action"].items()}),
        num_units=int(data["num_units"]))


def spec_to_dict(spec: GameSpec) -> dict:
    """The game's structures as JSON: enough to rebuild the network and check observations."""
    return {"name": spec.name, "max_steps": int(spec.max_steps),
            "sides": [side_to_dict(s) for s in spec.sides],
            "signal_fields": {k: _array_spec(v) for k, v in spec.signal_fields.items()}}


def spec_from_dict(data: Mapping) -> GameSpec:
    return GameSpec(name=data["name"], sides=tuple(side_from_dict(s) for s in data["sides"]),
                    max_steps=int(data["max_steps"]),
                    signal_fields={k: ArraySpec(tuple(v["shape"]), v["dtype"])
                                   for k, v in data.get("signal_fields", {}).items()})


def _networks():
    from agents.networks import NetworkConfig, ReferenceNetwork
    from agents.unit_network import UnitNetwork, UnitNetworkConfig

    return {"ReferenceNetwork": (ReferenceNetwork, NetworkConfig), "UnitNetwork": (UnitNetwork, UnitNetworkConfig)}


def network_to_dict(network) -> dict:
    """{"class", "config"} of a network the project builds (`agents.make_network`)."""
    name = type(network).__name__
    if name not in _networks():
        raise ValueError(f"cannot describe a {name}: the exported format knows {sorted(_networks())}")
    return {"class": name, "config": json.loads(json.dumps(dataclasses.asdict(network.config)))}


def network_from_dict(data: Mapping):
    """The network a `network_to_dict` describes (lists back to tuples)."""
    cls, config_cls = _networks()[data["class"]]
    values = dict(data["config"])
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"the network's config has fields this version does not know: {unknown}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    return cls(config_cls(**values))


# -- the file ----------------------------------------------------------------------------------

def _leaves(params: Mapping) -> tuple[list[dict], list[np.ndarray]]:
    flat = flatten(jax.device_get(params))
    arrays = [np.ascontiguousarray(a) for a in flat.values()]
    if any(a.dtype == object for a in arrays):
        raise ValueError("parameters must be numeric arrays")
    return ([{"path": list(p), "shape": list(a.shape), "dtype": a.dtype.name} for p, a in zip(flat, arrays)],
            arrays)


def to_bytes(params, header: Mapping) -> bytes:
    """The file's bytes: `header` (JSON-able: network, side, spec, game, source) with the format,
    its version and the leaves' description added, the parameters, and the checksum. A mixture
    (`header["mixture"]`: [{"weight", "source"}]) gives `params` as a list, one per member."""
    full = {**header, "format": FORMAT, "format_version": VERSION}
    files = {}
    if header.get(MIXTURE):
        members = list(header[MIXTURE])
        if not isinstance(params, list | tuple) or len(params) != len(members):
            raise ValueError(f"a mixture of {len(members)} members needs a list of as many parameter sets")
        full[MIXTURE], full["leaves"] = [], []
        for k, (member, member_params) in enumerate(zip(members, params)):
            leaves, arrays = _leaves(member_params)
            full[MIXTURE].append({**member, "leaves": leaves})
            files.update({f"member{k}_leaf_{i}": a for i, a in enumerate(arrays)})
    else:
        full["leaves"], arrays = _leaves(params)
        files.update({f"leaf_{i}": a for i, a in enumerate(arrays)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(HEADER, json.dumps(full, indent=1, sort_keys=True))
        for name, array in files.items():
            leaf = io.BytesIO()
            np.lib.format.write_array(leaf, array, allow_pickle=False)
            archive.writestr(f"{name}.npy", leaf.getvalue())
        archive.comment = _DIGEST_PREFIX + b"0" * _DIGEST_LEN
    data = buffer.getvalue()[:-_DIGEST_LEN]
    return data + hashlib.sha256(data).hexdigest().encode()


def write(path: str, params: Mapping, header: Mapping) -> str:
    """Writes the file atomically (a kill leaves no half of one); returns `path`."""
    return write_atomic(path, to_bytes(params, header))


def looks_exported(path: str) -> bool:
    """Whether `path` is (or was meant to be: a truncated or damaged copy) an exported agent,
    rather than some other npz: it names the header, or ends with the checksum."""
    with open(path, "rb") as f:
        data = f.read()
    return HEADER.encode() in data[:4096] or data[-_DIGEST_LEN - len(_DIGEST_PREFIX):].startswith(_DIGEST_PREFIX)


def _refuse(path: str, why: str) -> ExportedFileError:
    return ExportedFileError(f"{path}: {why}")


def read(path: str) -> tuple[dict, dict]:
    """(header, params) of an exported file, its checksum verified, upgraded to this version;
    ExportedFileError naming the file and the problem otherwise."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise _refuse(path, f"cannot read it ({e.strerror or e})") from None
    hint = "export an agent with: python -m experiments.export RUN_DIR:PLAYER_ID --out=FILE"
    if not data.startswith(b"PK\x03\x04"):
        return _raise(path, f"not an exported agent: not an npz (zip) archive (it begins {data[:8]!r}); {hint}")
    tail = data[-_DIGEST_LEN - len(_DIGEST_PREFIX):]
    if not tail.startswith(_DIGEST_PREFIX):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, ValueError, OSError):
            if HEADER.encode() in data[:4096]:
                return _raise(path, f"truncated or damaged: an exported agent's archive, but not a whole "
                              f"one ({len(data)} bytes, its end is missing or changed)")
            return _raise(path, f"not an exported agent: a damaged or truncated zip archive; {hint}")
        if HEADER not in names:
            shown = ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")
            return _raise(path, f"not an exported agent: an npz without the header {HEADER} (members: "
                          f"{shown or 'none'}); {hint}")
        return _raise(path, "damaged: its checksum (the archive's comment) is missing or changed")
    digest = tail[len(_DIGEST_PREFIX):]
    if hashlib.sha256(data[:-_DIGEST_LEN]).hexdigest().encode() != digest:
        return _raise(path, "damaged: its SHA-256 checksum does not match its contents (the file was "
                      "changed or cut after it was written); export it again")
    try:
        arrays = read_npz(data)
        header = json.loads(arrays.pop(HEADER))
    except Exception as e:  # checksum good, contents not: written by something else
        return _raise(path, f"not a readable exported agent ({type(e).__name__}: {e})")
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        got = header.get("format") if isinstance(header, dict) else type(header).__name__
        return _raise(path, f"not an exported agent: its header's format is {got!r}, not {FORMAT!r}")
    version = header.get("format_version")
    if not isinstance(version, int) or version < 1:
        return _raise(path, f"unknown format version {version!r} (this loader reads 1 to {VERSION})")
    if version > VERSION:
        return _raise(path, f"written in format version {version}, newer than this loader's {VERSION}: "
                      "update the league package to load it")
    while version < VERSION:  # an older file: upgraded step by step, or refused with the reason
        upgrade = _UPGRADES.get(version)
        if upgrade is None:
            return _raise(path, f"format version {version} can no longer be read (this loader reads "
                          f"{min([*_UPGRADES, VERSION])} to {VERSION}); export it again from its run")
        header, version = upgrade(header), version + 1
    try:
        if header.get(MIXTURE):
            members = header[MIXTURE]
            weights = [m["weight"] for m in members]
            if not all(isinstance(w, int | float) and np.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
                raise ValueError(f"the mixture's weights {weights} are not non-negative numbers summing above 0")
            params = [_unflatten_leaves(arrays, m["leaves"], f"member{k}_") for k, m in enumerate(members)]
        else:
            params = _unflatten_leaves(arrays, header["leaves"], "")
        if arrays:
            raise ValueError(f"members the header does not list: {sorted(arrays)}")
    except (KeyError, TypeError, ValueError) as e:
        return _raise(path, f"its parameters do not match its header ({type(e).__name__}: {e})")
    return header, params


def _unflatten_leaves(arrays: dict, leaves: list, prefix: str) -> dict:
    """The parameters `leaves` describe, taken out of `arrays` (`<prefix>leaf_<i>`)."""
    flat = {}
    for i, leaf in enumerate(leaves):
        array = arrays.pop(f"{prefix}leaf_{i}")
        if list(array.shape) != list(leaf["shape"]) or array.dtype.name != leaf["dtype"]:
            raise ValueError(f"{prefix}leaf {i} ({'/'.join(leaf['path'])}) is {array.dtype.name}{list(array.shape)}, "
                             f"the header says {leaf['dtype']}{leaf['shape']}")
        flat[tuple(leaf["path"])] = array
    return unflatten(flat)


def is_mixture(header: Mapping) -> bool:
    """Whether an exported file's header is a mixture of agents."""
    return bool(header.get(MIXTURE))


# -- a mixture of agents -----------------------------------------------------------------------

class MixtureState(NamedTuple):
    """A mixture's state for a batch: `member` [B] int32, the member playing each game (-1: none
    drawn yet), and `core`, the members' network's core state."""

    member: Any
    core: Any


def stack_members(params: list):
    """The members' parameters stacked on a leading axis [M, ...] (one network plays them all)."""
    return jax.tree_util.tree_map(lambda *x: jnp.stack([jnp.asarray(a) for a in x]), *params)


def mixture_initial_state(network, batch: int) -> MixtureState:
    """No member drawn yet (`mixture_policy` draws at the first step) and fresh core states."""
    return MixtureState(jnp.full(batch, -1, jnp.int32), network.initial_state(batch))


def mixture_policy(network, stacked, weights, greedy: bool = False):
    """`act(key, obs, state, first) -> (Action, MixtureState)` of a mixture (as
    `actors.rollout.network_policy` is of one agent): where a game starts (`first`, or no member
    yet) its member is drawn from `weights` (normalised) with `key`; every member steps on the
    batch and each game takes its own member's action and core state. Jittable."""
    from agents import act

    log_weights = jnp.log(jnp.asarray(weights, jnp.float32) / jnp.sum(jnp.asarray(weights, jnp.float32)))

    def act_fn(key, obs, state: MixtureState, first):
        member_key, act_key = jax.random.split(key)
        batch = state.member.shape[0]
        drawn = jax.random.categorical(member_key, log_weights, shape=(batch,)).astype(jnp.int32)
        member = jnp.where(jnp.asarray(first, bool) | (state.member < 0), drawn, state.member)
        actions, core = jax.vmap(lambda p: act(network, p, act_key, obs, state.core, first, greedy))(stacked)
        own = jnp.arange(batch)
        pick = lambda x: x[member, own]   # noqa: E731
        return jax.tree_util.tree_map(pick, actions), MixtureState(member, jax.tree_util.tree_map(pick, core))

    return act_fn


def _raise(path: str, why: str):
    raise _refuse(path, why)


# -- the policy --------------------------------------------------------------------------------

class Policy:
    """An exported agent's network and parameters, acting on batches of the game's observations.

    `obs` is the game's observation for a batch [B] (`spec.zero_observation((B,))` has its
    structure: every field, and `obs["action_mask"][head]` the legal actions). Recurrent
    networks carry a core `state` from step to step: `None` starts every game of the batch
    afresh (`initial_state(B)`), and `first` [B] (bool) restarts the games where it is set.
    Every method is a pure function of its arguments (the parameters are constants) and runs
    compiled (one step and one act program per policy); jit them further at will
    (`jax.jit(policy.act, static_argnames="greedy")`)."""

    def __init__(self, path: str, header: dict, params: dict):
        self.path = path
        self.header = header
        self.game = header.get("game", {}).get("name", "")
        self.side = int(header.get("side", 0))
        self.game_spec = spec_from_dict(header["spec"])
        self.spec = self.game_spec.side(self.side)
        self.network = network_from_dict(header["network"])
        example = self.spec.zero_observation()
        want = jax.eval_shape(lambda: self.network.init(jax.random.PRNGKey(0), example, opponent_observation=example))
        # A mixture: its members' parameters (`member_params`), normalised weights, sources;
        # `params` holds them stacked [M, ...]. One agent: weights None.
        self.weights = self.members = None
        self.member_params = params if is_mixture(header) else [params]
        self.member_params = [jax.tree_util.tree_map(np.asarray, p) for p in self.member_params]
        for member in self.member_params:
            got_tree, want_tree = jax.tree_util.tree_structure(member), jax.tree_util.tree_structure(want)
            if got_tree != want_tree or any(np.shape(a) != b.shape for a, b in
                                            zip(jax.tree_util.tree_leaves(member), jax.tree_util.tree_leaves(want))):
                raise _refuse(path, "its parameters do not fit the network its header describes")
        # One compiled step and one compiled act (greedy or sampled) per policy, the parameters
        # passed as arguments: op by op, the unit network's step took ~20 s on 2 cores.
        self._step = jax.jit(self.network.step)
        self._act = jax.jit(functools.partial(_act, self.network), static_argnames="greedy")
        if is_mixture(header):
            weights = np.asarray([m["weight"] for m in header[MIXTURE]], np.float64)
            self.weights = weights / weights.sum()
            self.members = [dict(m.get("source", {})) for m in header[MIXTURE]]
            self.params = jax.tree_util.tree_map(lambda *x: np.stack(x), *self.member_params)
        else:
            self.params = self.member_params[0]

    @property
    def mixture(self) -> bool:
        """Whether it is a mixture of agents (one member plays each game)."""
        return self.weights is not None

    @property
    def source(self) -> dict:
        """Where it came from: run directory, player, parameter version, exported at."""
        return dict(self.header.get("source", {}))

    def initial_state(self, batch: int, key=None):
        """The state of `batch` fresh games: the network's core state; a mixture's
        `MixtureState`, its members drawn with `key` (None: drawn by the first `act`)."""
        if not self.mixture:
            return self.network.initial_state(batch)
        state = mixture_initial_state(self.network, batch)
        if key is not None:
            log_weights = jnp.log(jnp.asarray(self.weights, jnp.float32))
            state = state._replace(member=jax.random.categorical(key, log_weights, shape=(batch,)).astype(jnp.int32))
        return state

    @property
    def z_size(self) -> int:
        """The length of the network's optional z input `obs["z"]` (float [B, z_size]; left out:
        z = 0, the unconditioned policy, as the game's own observation is read); 0: none."""
        return int(getattr(self.network.config, "z_size", 0))

    def _prepare(self, obs, state, first):
        if not isinstance(obs, Mapping) or MASK_KEY not in obs:
            raise ValueError(f"obs must be a dict with the game's fields and {MASK_KEY!r}: "
                             f"{sorted(self.spec.observation.fields)}")
        batch = np.shape(obs[next(iter(self.spec.observation.fields))])[:1]
        game_obs = obs
        if self.z_size and Z_KEY in obs:   # the statistic z, which the actors add to the game's observation
            ArraySpec((self.z_size,), np.float32).check(Z_KEY, obs[Z_KEY], batch)
            game_obs = {k: v for k, v in obs.items() if k != Z_KEY}
        self.spec.check_observation(game_obs, batch)
        if state is None:
            state = self.initial_state(batch[0])
        if first is None:
            first = np.zeros(batch, bool)
        return obs, state, first

    def logits(self, obs, state=None, first=None):
        """({head: logits [B, ...]} with illegal actions masked, new state). A mixture's: each
        game's member's, the members named by `state` (`act`'s, or `initial_state(B, key)`)."""
        if self.mixture:
            if state is None:
                raise ValueError("a mixture's logits are its members': pass the state act returned or "
                                 "initial_state(batch, key), which names each game's member")
            obs, state, first = self._prepare(obs, state, first)
            outs, core = jax.vmap(lambda p: self.network.step(p, obs, state.core, first))(self.params)
            own = jnp.arange(state.member.shape[0])
            member = jnp.maximum(state.member, 0)
            pick = lambda x: x[member, own]   # noqa: E731
            return ({h: pick(x) for h, x in outs.logits.items()},
                    MixtureState(state.member, jax.tree_util.tree_map(pick, core)))
        obs, state, first = self._prepare(obs, state, first)
        out, state = self._step(self.params, obs, state, first)
        return out.logits, state

    def probabilities(self, obs, state=None, first=None):
        """({head: action probabilities [B, ..., num_values]}, new state)."""
        logits, state = self.logits(obs, state, first)
        return {h: jax.nn.softmax(x.astype(np.float32), axis=-1) for h, x in logits.items()}, state

    def act(self, obs, key, state=None, first=None, greedy: bool = False):
        """({head: action [B, ...] int32}: the game's action, new state); sampled with `key`,
        or the most likely action with `greedy=True` (as the league's actors act)."""
        obs, state, first = self._prepare(obs, state, first)
        if self.mixture:
            action, state = mixture_policy(self.network, self.params, self.weights, greedy)(key, obs, state, first)
            return action.game, state
        action, state = self._act(self.params, key, obs, state, first, greedy=greedy)
        return action.game, state

    def __repr__(self) -> str:
        source = self.source
        if self.mixture:
            return (f"Policy({self.path!r}: {self.game or self.game_spec.name}, a mixture of "
                    f"{len(self.members)} of {source.get('run_dir', '?')})")
        if source.get("reading"):   # a run's agent (RUN_DIR:result): a main agent, averaged
            return (f"Policy({self.path!r}: {self.game or self.game_spec.name}, the run's agent: "
                    f"{source.get('main_agent', '?')}, {source['reading']})")
        return (f"Policy({self.path!r}: {self.game or self.game_spec.name}, "
                f"{source.get('player_id', '?')} version {source.get('version', '?')})")


def _act(network, params, key, obs, state, first, greedy: bool = False):
    from agents import act

    return act(network, params, key, obs, state, first, greedy=greedy)


def load_policy(path: str) -> Policy:
    """The policy of an exported agent file (module docstring); ExportedFileError if the file
    cannot be used."""
    header, params = read(path)
    try:
        return Policy(path, header, params)
    except ExportedFileError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise _refuse(path, f"its header does not describe a network this version builds "
                      f"({type(e).__name__}: {e})") from None
