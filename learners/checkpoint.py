"""Learner checkpoints: the one home of their path, format, writing and reading.

A learning agent's checkpoint is `<run_dir>/learners/<agent_id>/checkpoint.msgpack`, flax
msgpack of

    {"format": 2, "sha256": hex digest of body, "body": msgpack of
        {"format": 1, "version": int, "steps": int, "num_skipped": int,
         "params": state dict, "opt_state": state dict}}

written to a temporary file and `os.replace`d, so a kill leaves the old file or the new one,
never half of one; the checksum finds a file changed after it was written (format 1 files,
without it, are still read). `version` counts applied updates (+1 per reset), `steps` the agent
steps learnt on. Each save first moves the last checkpoint to `checkpoint.previous.msgpack`:
the learner keeps its last two, and `restore_good` falls back to the previous one when the
latest is damaged (setting the damaged file aside, beside them, as `*.damaged-<time>`). Everyone reads and writes it through these functions: the learner (`save`,
`restore`, `restore_migrating`), the league's tools (`read_params`), the tests.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from agents.storage import write_atomic

FORMAT = 1          # the payload's
ENVELOPE = 2        # the file's: the payload with its checksum
FILENAME = "checkpoint.msgpack"
PREVIOUS = "checkpoint.previous.msgpack"
PyTree = Any


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be restored; the file is left untouched. `reason`: why,
    in a few words."""

    reason = ""


class Checkpoint(NamedTuple):
    version: int
    steps: int
    num_skipped: int
    params: PyTree
    opt_state: PyTree


def directory(run_dir: str, agent_id: str) -> str:
    """`<run_dir>/learners/<agent_id>`: the learner's own files."""
    return os.path.join(run_dir, "learners", agent_id)


def path(run_dir: str, agent_id: str) -> str:
    return os.path.join(directory(run_dir, agent_id), FILENAME)


def previous(file: str) -> str:
    """The checkpoint before `file`'s (the one `save` moved aside)."""
    return os.path.join(os.path.dirname(file), PREVIOUS)


def save(file: str, checkpoint: Checkpoint) -> str:
    """Writes `checkpoint` to `file` atomically, with its checksum, moving the one there to
    `previous(file)` once the new one is written whole (a failed write, a full disk, changes
    neither); returns `file`."""
    payload = {
        "format": FORMAT, "version": int(checkpoint.version), "steps": int(checkpoint.steps),
        "num_skipped": int(checkpoint.num_skipped),
        "params": serialization.to_state_dict(jax.device_get(checkpoint.params)),
        "opt_state": serialization.to_state_dict(jax.device_get(checkpoint.opt_state))}
    body = serialization.msgpack_serialize(payload)
    envelope = {"format": ENVELOPE, "sha256": hashlib.sha256(body).hexdigest(), "body": body}
    return write_atomic(file, serialization.msgpack_serialize(envelope), previous=previous(file))


def read_payload(file: str) -> dict:
    """The payload of a checkpoint file ({"format", "version", "steps", "num_skipped", "params",
    "opt_state"} as state dicts), its checksum verified; ValueError naming the problem."""
    with open(file, "rb") as f:
        payload = serialization.msgpack_restore(f.read())
    if isinstance(payload, dict) and payload.get("format") == ENVELOPE:
        body = payload.get("body")
        if not isinstance(body, bytes) or hashlib.sha256(body).hexdigest() != payload.get("sha256"):
            raise ValueError("the file is damaged: its checksum does not match its contents "
                             "(it was changed after it was written)")
        payload = serialization.msgpack_restore(body)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"not a learner checkpoint of format {FORMAT}")
    return payload


def restore(file: str, params_like: PyTree, opt_state_like: PyTree) -> Checkpoint:
    """The checkpoint in `file`, its params and optimiser state shaped like the templates
    (e.g. the network's initial parameters and `jax.eval_shape(optimizer.init, params)`).
    CheckpointError (file untouched, the fix in the message) if it cannot be restored."""
    advice = ("The file was left as it is. Move it aside (or delete it) to start this "
              "learner from its initial parameters, or put back a good copy to resume.")
    try:
        payload = read_payload(file)
        params = serialization.from_state_dict(params_like, payload["params"])
        opt_state = serialization.from_state_dict(opt_state_like, payload["opt_state"])
        for got, want in zip(jax.tree_util.tree_leaves((params, opt_state)),
                             jax.tree_util.tree_leaves((params_like, opt_state_like))):
            if np.shape(got) != np.shape(want):
                raise ValueError(f"shape {np.shape(got)} where the network has {np.shape(want)}")
        return Checkpoint(int(payload["version"]), int(payload["steps"]),
                          int(payload["num_skipped"]), params, opt_state)
    except Exception as e:
        error = CheckpointError(
            f"cannot restore learner checkpoint {file}: {type(e).__name__}: {e}. {advice}")
        error.reason = f"{type(e).__name__}: {e}"
        raise error from e


def restore_migrating(file: str, params_like: PyTree, optimizer, per_param_optimizer) -> Checkpoint:
    """A checkpoint with the flat optimiser state of `optimizer` (`learners.update.make_optimizer`),
    or one written before it with `per_param_optimizer`'s per-parameter Adam moments, whose
    moments are then flattened the way `optax.flatten` lays them out (the same leaf order):
    the run resumes with the same optimiser state."""
    try:
        return restore(file, params_like, jax.eval_shape(optimizer.init, params_like))
    except CheckpointError as flat_error:
        try:
            saved = restore(file, params_like, jax.eval_shape(per_param_optimizer.init, params_like))
        except CheckpointError:
            raise flat_error from None
    structure = jax.tree_util.tree_structure(params_like)

    def flatten(node):
        if jax.tree_util.tree_structure(node) != structure:
            return node
        return jnp.concatenate([jnp.ravel(x) for x in jax.tree_util.tree_leaves(node)])

    opt_state = jax.tree_util.tree_map(
        flatten, saved.opt_state,
        is_leaf=lambda node: jax.tree_util.tree_structure(node) == structure)
    return saved._replace(opt_state=opt_state)


def restore_good(file: str, params_like: PyTree, optimizer, per_param_optimizer,
                 log=print) -> Checkpoint | None:
    """The newest good checkpoint of the two a learner keeps (`restore_migrating`): `file`, or
    when it is damaged or unreadable the previous one, after setting `file` aside (renamed
    `<file>.damaged-<UTC time>`) and logging a line that names it and the updates lost. None
    when neither exists. CheckpointError, every file left as it is, when none of them is good."""
    older = previous(file)
    if not os.path.exists(file) and not os.path.exists(older):
        return None
    errors = []
    for candidate in (file, older):
        if not os.path.exists(candidate):
            continue
        try:
            saved = restore_migrating(candidate, params_like, optimizer, per_param_optimizer)
        except CheckpointError as e:
            errors.append(e)
            continue
        if candidate == older:
            if os.path.exists(file):
                aside = f"{file}.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
                os.replace(file, aside)
                log(f"warning: learner checkpoint {file} is damaged ({errors[0].reason}); it was "
                    f"moved to {aside} and the previous one restored: version {saved.version}, "
                    f"{saved.steps} steps. The updates after it are lost.", flush=True)
            else:
                log(f"warning: learner checkpoint {file} is missing; the previous one was restored "
                    f"(version {saved.version}, {saved.steps} steps).", flush=True)
        return saved
    if len(errors) == 1:
        raise errors[0]
    raise CheckpointError(
        f"no good learner checkpoint: {file} and {older} cannot be restored ({errors[0].reason}; "
        f"{errors[1].reason}). Both were left as they are. Move them aside (or delete them) "
        "to start this learner from its initial parameters, or put back a good copy to resume.")


def read_params(run_dir: str, agent_id: str) -> tuple[int, PyTree] | None:
    """(version, params as nested dicts) of a learning agent's checkpoint, or None if the run
    has written none (it is written when a run stops and every `checkpoint_every_seconds`)."""
    file = path(run_dir, agent_id)
    if not os.path.exists(file):
        return None
    payload = read_payload(file)
    return int(payload["version"]), payload["params"]
