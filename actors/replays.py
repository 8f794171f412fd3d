"""Replays on disk: recorded two-sided games for supervised learning (AlphaStar, seed 002,
"Supervised learning"; issue 14 section 1): the format only. A game's statistics of a recorded
game (SMAX races: its statistic z, `Capabilities.z`, actors/games/smax_races/z.py) are arrays the
recorder adds to each chunk (`make_chunk`'s `statistics`).

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
    <name> [G, ...]                     the game's arrays per game (`make_chunk`'s `per_game`;
                                        SMAX races: the race, the army (menu index) and each
                                        slot's unit type (-1 empty) of each side, int8)
    z/<name> [G, 2, ...]                SMAX races: each side's statistic z (its `smax_z`,
                                        added by `make_chunk`'s `statistics`)

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
from collections.abc import Callable, Iterator, Mapping

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
               per_game: Mapping[str, np.ndarray] | None = None,
               statistics: Callable[[dict], Mapping[str, np.ndarray]] | None = None) -> dict[str, np.ndarray]:
    """The arrays of one chunk: obs/actions per side as trees of [G, T, ...] arrays (padded
    after each game's length), `length` and `outcome` [G], `per_game` (name -> [G, ...], stored
    as given) the game's own arrays of each game; `statistics` (the chunk's arrays -> more
    arrays, e.g. SMAX's z/<name>) adds the game's statistics of the recorded games."""
    arrays = {"length": np.asarray(length, np.int32), "outcome": np.asarray(outcome, np.int8)}
    arrays.update({k: np.asarray(v) for k, v in (per_game or {}).items()})
    for s in range(2):
        arrays.update(flatten_tree(obs[s], f"side{s}/obs"))
        arrays.update(flatten_tree(actions[s], f"side{s}/action"))
    if statistics is not None:
        arrays.update(statistics(arrays))
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
