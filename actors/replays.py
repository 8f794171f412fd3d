"""Replays on disk: recorded two-sided games for supervised learning (AlphaStar, seed 002,
"Supervised learning"; issue 14 section 1), and the statistic z of SMAX races.

Format, version 1 (`FORMAT_VERSION`). A replay set is one directory:

    DIR/header.json     written once: {"format": "league-replays", "version": 1, "game": name,
                        "spec_fingerprint": sha256 of the observation/action shapes (both
                        sides), "spec": those shapes, "game_config": what the recorder says
                        of the game (SMAX races: the menu of armies), "created": UTC time}
    DIR/chunks.jsonl    one line per chunk, appended after the chunk's file is in place:
                        {"file": "chunk_000003.npz", "sha256": ..., "games": G, "steps": S}
    DIR/chunk_NNNNNN.npz  G games, numpy's compressed npz (zip + deflate), no pickled objects

A chunk holds arrays with a leading game axis [G], time-major per game and padded to the
chunk's longest game `T` (zeros after a game's `length`):

    side{s}/obs/<field>                 [G, T, ...]  side s's observation before step t, as the
    side{s}/obs/action_mask/<head>      [G, T, ...]  game gives it (agents/specs.py), masks too
    side{s}/action/<head>               [G, T, ...]  side s's action at step t in the network's
                                        head format (SMAX: composition [], action_type [n],
                                        target [n]); actions the mask forbids (dead units, the
                                        composition after the first step) are stored as the
                                        first legal value, the target of a non-attack as 0
    length  [G] int32                   steps of the game (the strategy step included)
    outcome [G] int8                    side 0's result: +1 win, 0 draw, -1 loss
    races [G, 2], compositions [G, 2]   race and army (menu index) of each side
    unit_types [G, 2, n] int8           SMAX unit type of each slot of each side's army, -1 empty
    z/<name> [G, 2, ...]                each side's statistic z (`smax_z`)

Appending adds a chunk (atomically: temporary file, rename, then its line in chunks.jsonl);
nothing is ever rewritten. Reading (`open_replays`) checks the header's format, version, game
and spec fingerprint against what the caller expects and every chunk's sha256, and raises
`ReplayError` naming the file, the problem and the fix; a command line tool then exits 2.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import os
from collections.abc import Iterator, Mapping

import numpy as np

from agents.storage import read_npz, write_atomic

FORMAT_NAME = "league-replays"
FORMAT_VERSION = 1
HEADER_FILE = "header.json"
INDEX_FILE = "chunks.jsonl"


class ReplayError(ValueError):
    """A replay directory or chunk that cannot be read as asked; the message names the file."""


# ---------------------------------------------------------------------------------------------
# The spec fingerprint.


def spec_description(spec) -> dict:
    """The shapes a replay depends on: per side, every observation field's shape and dtype and
    every head's number of values and shape (a `agents.specs.GameSpec`), plus max_steps."""
    sides = []
    for side in spec.sides:
        sides.append({
            "observation": {k: [list(v.shape), v.dtype.str] for k, v in sorted(side.observation.fields.items())},
            "heads": {k: [h.num_values, list(h.shape)] for k, h in sorted(side.action.heads.items())},
            "num_units": int(side.num_units),
        })
    return {"name": spec.name, "max_steps": int(spec.max_steps), "sides": sides}


def spec_fingerprint(spec) -> str:
    text = json.dumps(spec_description(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# z for SMAX races.

ATTACK = 5  # SMAX's attack action type (kept here so that z needs no JAX; a test checks)
NUM_UNIT_TYPES = 6  # SMAX's unit types (a test checks)


def enemy_slot(side: int, target, num_units: int):
    """The enemy army slot that target value `target` of side `side` attacks (jaxmarl: team 0's
    attack j hits enemy j, team 1's hits ally n-1-j; `RacesSMAX._world_step`)."""
    target = np.asarray(target)
    return target if side == 0 else num_units - 1 - target


def smax_z(actions: Mapping[str, np.ndarray], alive: np.ndarray, length: int,
           unit_types: np.ndarray, side: int) -> dict[str, np.ndarray]:
    """The statistic z of one side of one recorded SMAX races game.

    AlphaStar's z is the build order (first 20 units and buildings) plus cumulative statistics.
    In SMAX races the only build decision is the army chosen at the first step, and the
    opening is which enemy units one goes for. For side `side`:

    - `army` (int): the composition (menu index) chosen at step 0, `actions["composition"][0]`;
    - `attack_order` [6] int: the SMAX unit types (indices into SMAX's unit types) of the
      enemy units this side ordered attacks on, in the order of the first such order per type,
      -1 padded. An attack order is `action_type == ATTACK` by a unit alive at that step
      (`alive[t, i]`, the observation's field); its unit type is that of the enemy slot
      `enemy_slot(side, target)` in `unit_types[1 - side]`. Types first attacked at the same
      step are in type-index order. Steps 1 .. length-1 (the battle) count;
    - `attack_counts` [6] int: the cumulative statistic, attack orders per enemy unit type over
      the game (unit-steps).

    actions: this side's actions, head -> [T, ...] (composition [T], action_type/target [T, n]);
    alive: [T, n] bool; unit_types: [2, n] (-1 empty slot). A pure function of the record.
    """
    n = np.shape(alive)[1]
    a_type = np.asarray(actions["action_type"])[1:length]
    target = np.asarray(actions["target"])[1:length]
    live = np.asarray(alive, bool)[1:length]
    attacking = (a_type == ATTACK) & live
    types = np.asarray(unit_types)[1 - side][np.clip(enemy_slot(side, target, n), 0, n - 1)]
    attacking &= types >= 0
    order, counts = [], np.zeros(NUM_UNIT_TYPES, np.int32)
    for t in range(attacking.shape[0]):
        step_types = types[t][attacking[t]]
        np.add.at(counts, step_types, 1)
        order.extend(int(k) for k in np.unique(step_types) if k not in order)
    attack_order = np.full(NUM_UNIT_TYPES, -1, np.int32)
    attack_order[:len(order)] = order
    return {"army": np.int32(np.asarray(actions["composition"])[0]),
            "attack_order": attack_order, "attack_counts": counts}


def smax_z_of_chunk(chunk: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """z/<name> arrays [G, 2, ...] for every game and side of a chunk's arrays."""
    games = chunk["length"].shape[0]
    out: dict[str, list] = {}
    for g in range(games):
        per_side = []
        for s in range(2):
            actions = {h: chunk[f"side{s}/action/{h}"][g] for h in ("composition", "action_type", "target")}
            per_side.append(smax_z(actions, chunk[f"side{s}/obs/alive"][g], int(chunk["length"][g]),
                                   chunk["unit_types"][g], s))
        for k in per_side[0]:
            out.setdefault(k, []).append(np.stack([per_side[0][k], per_side[1][k]]))
    return {f"z/{k}": np.stack(v) for k, v in out.items()}



# ---------------------------------------------------------------------------------------------
# z as a network input and the pseudo-rewards for following it (issue 14 section 1, "z").

Z_ARMIES = 3  # SMAX's armies per race (a test checks)
Z_SIZE = Z_ARMIES + NUM_UNIT_TYPES * NUM_UNIT_TYPES + NUM_UNIT_TYPES
"""The length of z's fixed-size numeric encoding (`encode_z`): 3 + 36 + 6 = 45."""
PSEUDO_REWARDS = ("build_order", "attacked_types")
"""The pseudo-rewards for following z, in this order (value heads, `Step.pseudo_reward`)."""


def encode_z(army, attack_order, attack_counts) -> np.ndarray:
    """z's fixed-size encoding, float32 [..., Z_SIZE] (any leading axes), in three parts:

    - [0:3]   the army: one-hot of the menu index (all zero for -1, no army);
    - [3:39]  the attack order: 6 ranks x 6 unit types, row k the one-hot of the k-th enemy unit
              type first attacked (all zero past the end of the order, -1);
    - [39:45] the cumulative statistic binarised: 1 for each enemy unit type attacked at all
              (attack_counts > 0).

    The all-zero vector is "no z" (AlphaStar's z = 0: the unconditioned policy). `decode_z`
    inverts it."""
    army = np.asarray(army)
    order = np.asarray(attack_order)
    counts = np.asarray(attack_counts)
    lead = army.shape
    out = np.zeros(lead + (Z_SIZE,), np.float32)
    arange = np.arange(Z_ARMIES)
    out[..., :Z_ARMIES] = army[..., None] == arange
    ranks = (order[..., :, None] == np.arange(NUM_UNIT_TYPES)).reshape(*lead, -1)
    out[..., Z_ARMIES:Z_ARMIES + NUM_UNIT_TYPES ** 2] = ranks
    out[..., Z_ARMIES + NUM_UNIT_TYPES ** 2:] = counts > 0
    return out


def decode_z(z) -> tuple[int, list[int], np.ndarray]:
    """(army or -1, attack order as a list of unit types, attacked types bool [6]) of one
    encoded z [Z_SIZE] (`encode_z`)."""
    z = np.asarray(z)
    army_part = z[:Z_ARMIES]
    army = int(np.argmax(army_part)) if army_part.any() else -1
    ranks = z[Z_ARMIES:Z_ARMIES + NUM_UNIT_TYPES ** 2].reshape(NUM_UNIT_TYPES, NUM_UNIT_TYPES)
    order = [int(np.argmax(row)) for row in ranks if row.any()]
    return army, order, z[Z_ARMIES + NUM_UNIT_TYPES ** 2:] > 0.5


def build_order(army: int, attack_order) -> list[int]:
    """SMAX's "build order": the army (token NUM_UNIT_TYPES + army; left out for -1) then the
    enemy unit types in the order first attacked (-1 padding dropped)."""
    head = [NUM_UNIT_TYPES + int(army)] if army >= 0 else []
    return head + [int(t) for t in attack_order if t >= 0]


def edit_distance(a, b) -> int:
    """Levenshtein distance between two sequences (insertions, deletions, substitutions, each
    cost 1; Wagner-Fischer dynamic programme)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def z_pseudo_rewards(target_z, army: int, attack_order, attacked) -> np.ndarray:
    """The two pseudo-rewards of one finished game, float32 [2] (`PSEUDO_REWARDS` order), given
    at the game's last step (AlphaStar, Methods "Supervised learning"/"Reinforcement learning":
    the agent is rewarded for following the sampled z, by the edit distance between build
    orders and the Hamming distance between cumulative statistics; here reduced to our z and
    given once, at the end, as the negated distance between the sampled z and the z the game
    produced, each normalised to [-1, 0]):

        r_build_order    = - edit(build_order(z), build_order(produced)) / max(len of both, 1)
        r_attacked_types = - hamming(attacked types of z, produced attacked types) / 6

    target_z: the encoded z the agent was given ([Z_SIZE]); army, attack_order, attacked:
    what it played (the army index, the types in first-attack order, bool [6])."""
    z_army, z_order, z_attacked = decode_z(target_z)
    want, got = build_order(z_army, z_order), build_order(army, attack_order)
    r_build = -edit_distance(want, got) / max(len(want), len(got), 1)
    r_types = -np.sum(z_attacked != np.asarray(attacked, bool)) / NUM_UNIT_TYPES
    return np.asarray([r_build, r_types], np.float32)


def attacked_types(action_type, target, alive, enemy_types, side: int = 0) -> np.ndarray:
    """bool [..., 6]: the SMAX unit types side `side` orders attacks on this step (as `smax_z`
    counts them: `action_type == ATTACK` by a live unit, on enemy slot `enemy_slot(side,
    target)` of type `enemy_types[..., slot]`, -1 empty). action_type, target, alive: [..., n];
    enemy_types [..., n]."""
    n = np.shape(alive)[-1]
    slot = np.clip(enemy_slot(side, target, n), 0, n - 1)
    types = np.take_along_axis(np.asarray(enemy_types), slot, axis=-1)
    attacking = (np.asarray(action_type) == ATTACK) & np.asarray(alive, bool) & (types >= 0)
    return np.any((types[..., None] == np.arange(NUM_UNIT_TYPES)) & attacking[..., None], axis=-2)


def produced_order(first_attack_step) -> list[int]:
    """The attack order from each type's first attack step (float [6], inf never): types by
    step, ties in type-index order (as `smax_z`)."""
    steps = np.asarray(first_attack_step, np.float64)
    return [int(k) for k in sorted(np.flatnonzero(np.isfinite(steps)), key=lambda k: (steps[k], k))]


# -- the same z pseudo-rewards in jax.numpy, for the device path (actors/rollout.py) ----------


def _compact(tokens, valid):
    """(tokens with the valid ones first, in order; their number) -- one game, jnp."""
    import jax.numpy as jnp

    order = jnp.argsort(~valid, stable=True)
    return tokens[order], valid.sum()


def _edit_distance_jax(a, la, b, lb):
    """Levenshtein distance of a[:la] and b[:lb] (padded int arrays of static lengths): the
    Wagner-Fischer table of `edit_distance` over the padded arrays, read at (la, lb)."""
    import jax.numpy as jnp

    n, m = a.shape[0], b.shape[0]
    rows = [jnp.arange(m + 1)]
    for i in range(1, n + 1):
        row = [jnp.asarray(i)]
        for j in range(1, m + 1):
            row.append(jnp.minimum(jnp.minimum(rows[i - 1][j] + 1, row[j - 1] + 1),
                                   rows[i - 1][j - 1] + (a[i - 1] != b[j - 1])))
        rows.append(jnp.stack(row))
    return jnp.stack(rows)[la, lb]


def z_pseudo_rewards_jax(target_z, army, first_attack_step):
    """`z_pseudo_rewards` of one finished game in jax.numpy (vmap it over games): target_z
    [Z_SIZE]; army: the army played (-1 none); first_attack_step [6]: each enemy type's first
    attack step (inf: never), from which the attack order and attacked types follow
    (`produced_order`, `isfinite`). Returns float32 [2]."""
    import jax.numpy as jnp

    k = NUM_UNIT_TYPES
    army_part = target_z[:Z_ARMIES]
    z_army = jnp.where(army_part.any(), jnp.argmax(army_part), -1)
    ranks = target_z[Z_ARMIES:Z_ARMIES + k * k].reshape(k, k) > 0.5
    z_order = jnp.where(ranks.any(-1), jnp.argmax(ranks, -1), -1)
    want, want_len = _compact(jnp.concatenate([jnp.reshape(k + z_army, (1,)), z_order]),
                              jnp.concatenate([jnp.reshape(z_army >= 0, (1,)), z_order >= 0]))
    steps = jnp.asarray(first_attack_step, jnp.float32)
    attacked = jnp.isfinite(steps)
    by_step = jnp.argsort(jnp.where(attacked, steps, jnp.inf), stable=True)  # ties: type order
    got, got_len = _compact(jnp.concatenate([jnp.reshape(k + army, (1,)), by_step]),
                            jnp.concatenate([jnp.reshape(army >= 0, (1,)), attacked[by_step]]))
    distance = _edit_distance_jax(want, want_len, got, got_len)
    r_build = -distance / jnp.maximum(jnp.maximum(want_len, got_len), 1)
    r_types = -jnp.sum((target_z[Z_ARMIES + k * k:] > 0.5) != attacked) / k
    return jnp.stack([r_build, r_types]).astype(jnp.float32)


def attacked_types_jax(action_type, target, alive, enemy_types):
    """`attacked_types` of side 0 in jax.numpy: bool [..., 6]."""
    import jax.numpy as jnp

    n = alive.shape[-1]
    slot = jnp.clip(target, 0, n - 1)
    types = jnp.take_along_axis(enemy_types, slot, axis=-1)
    attacking = (action_type == ATTACK) & alive & (types >= 0)
    return jnp.any((types[..., None] == jnp.arange(NUM_UNIT_TYPES)) & attacking[..., None], axis=-2)


class ZBank:
    """The z of every recorded side of a replay directory, by (own race, enemy race): what a
    main agent samples its z from at each game's start (AlphaStar: z sampled from the human
    games of the agent's race). `table` [R * R, N, Z_SIZE] float32 and `counts` [R * R]
    int32 (matchup index own * R + enemy); a matchup without games of its own falls back to
    every game of the own race; a race without any game has count 0 (z = 0)."""

    def __init__(self, table: np.ndarray, counts: np.ndarray, source: str = ""):
        self.table = np.asarray(table, np.float32)
        self.counts = np.asarray(counts, np.int32)
        self.source = source

    @property
    def races(self) -> int:
        return int(round(np.sqrt(self.counts.shape[0])))

    @classmethod
    def from_replays(cls, directory: str, spec=None, races: int = 3) -> ZBank:
        """Reads `directory` (ReplayError naming the file for another game, spec or version)."""
        data = open_replays(directory, game=None if spec is None else spec.name, spec=spec)
        by: dict[tuple[int, int], list] = {}
        for chunk in data.iter_chunks():
            if "z/army" not in chunk:
                raise ReplayError(f"{directory}: its chunks hold no z (not SMAX races replays)")
            z = encode_z(chunk["z/army"], chunk["z/attack_order"], chunk["z/attack_counts"])
            for g in range(z.shape[0]):
                for s in range(2):
                    key = (int(chunk["races"][g, s]), int(chunk["races"][g, 1 - s]))
                    by.setdefault(key, []).append(z[g, s])
        lists = []
        for own in range(races):
            for enemy in range(races):
                rows = by.get((own, enemy)) or [v for (o, _), vs in sorted(by.items()) if o == own for v in vs]
                lists.append(rows)
        size = max(1, max(len(r) for r in lists))
        table = np.zeros((races * races, size, Z_SIZE), np.float32)
        for m, rows in enumerate(lists):
            if rows:
                table[m, :len(rows)] = np.stack(rows)
        return cls(table, [len(r) for r in lists], directory)

    def sample(self, rng: np.random.Generator, own: int, enemy: int) -> np.ndarray:
        """One z of the matchup (zeros if it has none)."""
        m = own * self.races + enemy
        if self.counts[m] == 0:
            return np.zeros(Z_SIZE, np.float32)
        return self.table[m, rng.integers(self.counts[m])]

# ---------------------------------------------------------------------------------------------
# Writing.


def flatten_tree(tree: Mapping, prefix: str) -> dict[str, np.ndarray]:
    """{"a": {"b": x}} -> {"prefix/a/b": x} (keys must not contain '/')."""
    flat = {}
    for key, value in tree.items():
        if "/" in str(key):
            raise ValueError(f"key {key!r} contains '/'")
        path = f"{prefix}/{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_tree(value, path))
        else:
            flat[path] = np.asarray(value)
    return flat


def unflatten_prefix(arrays: Mapping[str, np.ndarray], prefix: str) -> dict:
    """The inverse of `flatten_tree` for the keys under `prefix/`."""
    tree: dict = {}
    for key, value in arrays.items():
        if not key.startswith(prefix + "/"):
            continue
        node = tree
        parts = key[len(prefix) + 1:].split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return tree


def _read_header(directory: str) -> dict | None:
    path = os.path.join(directory, HEADER_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            header = json.load(f)
        if not isinstance(header, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise ReplayError(f"{path}: not a readable replay header ({e}); "
                          "point to a directory written by experiments.record") from None
    return header


def _check_header(header: dict, path: str, game: str | None, spec) -> None:
    if header.get("format") != FORMAT_NAME:
        raise ReplayError(f"{path}: not a replay header (format {header.get('format')!r}, expected "
                          f"{FORMAT_NAME!r}); point to a directory written by experiments.record")
    if header.get("version") != FORMAT_VERSION:
        raise ReplayError(f"{path}: replay format version {header.get('version')!r}, this code reads "
                          f"version {FORMAT_VERSION}; re-record the games with this version "
                          "(python -m experiments.record)")
    if game is not None and header.get("game") != game:
        raise ReplayError(f"{path}: replays of game {header.get('game')!r}, expected {game!r}; "
                          f"record {game} games or point to another directory")
    if spec is not None and header.get("spec_fingerprint") != spec_fingerprint(spec):
        raise ReplayError(
            f"{path}: replays of another observation/action spec (fingerprint "
            f"{header.get('spec_fingerprint')}, this game's is {spec_fingerprint(spec)}: the game's "
            "configuration or code changed since they were recorded); re-record the games")


class ReplayWriter:
    """Creates a replay directory or appends to one of the same game, spec and version."""

    def __init__(self, directory: str, spec, game_config: Mapping | None = None):
        self.directory = directory
        self.spec = spec
        os.makedirs(directory, exist_ok=True)
        header_path = os.path.join(directory, HEADER_FILE)
        header = _read_header(directory)
        if header is None:
            header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "game": spec.name,
                      "spec_fingerprint": spec_fingerprint(spec), "spec": spec_description(spec),
                      "game_config": dict(game_config or {}),
                      "created": datetime.datetime.now(datetime.UTC).isoformat()}
            write_atomic(header_path, json.dumps(header, indent=1, sort_keys=True).encode())
        else:
            _check_header(header, header_path, spec.name, spec)
            if game_config is not None and header.get("game_config") != json.loads(json.dumps(dict(game_config))):
                raise ReplayError(f"{header_path}: recorded with another game configuration "
                                  f"({header.get('game_config')}); use a new --out directory")
        self.header = header
        self._next = len(_read_index(directory))

    def append(self, arrays: Mapping[str, np.ndarray]) -> str:
        """Writes one chunk (the arrays of `make_chunk`); returns its file name."""
        games = int(np.shape(arrays["length"])[0])
        steps = int(np.sum(arrays["length"]))
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        data = buffer.getvalue()
        name = f"chunk_{self._next:06d}.npz"
        write_atomic(os.path.join(self.directory, name), data)
        line = json.dumps({"file": name, "sha256": hashlib.sha256(data).hexdigest(),
                           "games": games, "steps": steps}, sort_keys=True)
        with open(os.path.join(self.directory, INDEX_FILE), "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._next += 1
        return name


def make_chunk(obs: tuple[Mapping, Mapping], actions: tuple[Mapping, Mapping], length, outcome,
               races, compositions, unit_types) -> dict[str, np.ndarray]:
    """The arrays of one chunk: obs/actions per side as trees of [G, T, ...] arrays (padded
    after each game's length), the rest [G, ...]; z is computed here (`smax_z`) when the
    actions have SMAX's heads."""
    arrays = {"length": np.asarray(length, np.int32), "outcome": np.asarray(outcome, np.int8),
              "races": np.asarray(races, np.int8), "compositions": np.asarray(compositions, np.int8),
              "unit_types": np.asarray(unit_types, np.int8)}
    for s in range(2):
        arrays.update(flatten_tree(obs[s], f"side{s}/obs"))
        arrays.update(flatten_tree(actions[s], f"side{s}/action"))
    if "side0/action/action_type" in arrays:
        arrays.update(smax_z_of_chunk(arrays))
    return arrays


# ---------------------------------------------------------------------------------------------
# Reading.


def _read_index(directory: str) -> list[dict]:
    path = os.path.join(directory, INDEX_FILE)
    if not os.path.exists(path):
        return []
    entries = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                entry["file"], entry["sha256"], entry["games"]  # noqa: B018 -- required keys
            except (ValueError, KeyError, TypeError) as e:
                raise ReplayError(f"{path}: line {number} is not a chunk entry ({e}); the index is "
                                  "damaged: re-record the games") from None
            entries.append(entry)
    return entries


class Replays:
    """A replay directory opened for reading: `header`, `chunks` (index entries), `num_games`,
    and `iter_chunks()` yielding each chunk's arrays after its checksum is verified."""

    def __init__(self, directory: str, header: dict, chunks: list[dict]):
        self.directory = directory
        self.header = header
        self.chunks = chunks

    @property
    def num_games(self) -> int:
        return sum(int(c["games"]) for c in self.chunks)

    def read_chunk(self, entry: Mapping) -> dict[str, np.ndarray]:
        path = os.path.join(self.directory, entry["file"])
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ReplayError(f"{path}: listed in {INDEX_FILE} but cannot be read ({e.strerror}); "
                              "restore it or re-record the games") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry["sha256"]:
            raise ReplayError(f"{path}: corrupt chunk (sha256 {digest[:16]}..., {INDEX_FILE} says "
                              f"{entry['sha256'][:16]}...); delete the directory and re-record the games")
        try:
            return read_npz(data)
        except Exception as e:  # noqa: BLE001 -- a chunk that passes its checksum yet fails
            raise ReplayError(f"{path}: unreadable chunk ({type(e).__name__}: {e}); re-record") from None

    def iter_chunks(self) -> Iterator[dict[str, np.ndarray]]:
        for entry in self.chunks:
            yield self.read_chunk(entry)

    def verify(self) -> None:
        """Reads every chunk once (checksums); raises ReplayError on the first bad one."""
        for _ in self.iter_chunks():
            pass


def open_replays(directory: str, game: str | None = None, spec=None, verify: bool = True) -> Replays:
    """Opens a replay directory; ReplayError (naming the file, the problem and the fix) if it is
    not one, holds another game, spec or format version, or (with `verify`) a corrupt chunk."""
    if not os.path.isdir(directory):
        raise ReplayError(f"{directory}: no such replay directory; record games first "
                          "(python -m experiments.record --out=DIR)")
    header = _read_header(directory)
    header_path = os.path.join(directory, HEADER_FILE)
    if header is None:
        raise ReplayError(f"{header_path}: missing; {directory} is not a replay directory "
                          "(record games with python -m experiments.record --out=DIR)")
    _check_header(header, header_path, game, spec)
    chunks = _read_index(directory)
    if not chunks:
        raise ReplayError(f"{os.path.join(directory, INDEX_FILE)}: no recorded games; "
                          "record some with python -m experiments.record")
    replays = Replays(directory, header, chunks)
    if verify:
        replays.verify()
    return replays
