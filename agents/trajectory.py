"""The trajectory format shared by actors (who write it) and learners (who read it).

One Reverb item is one `Unroll`: `T` consecutive `Step`s of one actor's stream plus the
recurrent core state the behaviour policy had *before* the first of them.

Per step `t` (every leaf of a `Step` in an item has a leading time axis of length `T`):

| field                  | dtype / shape        | meaning                                            |
|------------------------|----------------------|----------------------------------------------------|
| `observation`          | pytree of arrays     | o_t, what the policy saw before acting             |
| `opponent_observation` | pytree of arrays     | the opponent's o_t; only the value uses it, only in training (AlphaStar, "Value and policy updates") |
| `action`               | {head: int32}        | a_t, one entry per independent action head; `[n]` per step for a unit head (one action per unit: the network's `head_shapes`) |
| `behaviour_log_prob`   | {head: float32}      | log mu(a_t^head | s_t) of the acting policy, per head (and unit) |
| `reward`               | float32, `value_shape` | r_t, received after a_t: one per side (`()`), or one per unit (`[n]`, the unit network: each unit's own, team spirit applied) |
| `discount`             | float32              | gamma_t: 0 if the episode ended after this step, else 1 (the learner multiplies its own discount factor in) |
| `first`                | bool                 | this step starts an episode: the core is reset before processing it |
| `policy_version`       | int32                | the learner parameter version that chose a_t       |
| `pseudo_reward`        | {} or {"reward", "active"}: float32 `[K]` | networks conditioned on z only: z's K pseudo-rewards received after a_t (at a game's last step) and whether each is active in the game of step t (1/0) |

A step holds (o_t, a_t, r_t, gamma_t): after a terminal step (`discount == 0`) the next step is
the first step of the next episode (`first == True`), there is no separate terminal
observation. With this convention the one-step target is r_t + gamma_t V(s_{t+1}).

Unrolls and bootstrapping. An actor cuts its stream into unrolls of `T` steps that overlap by
one step (period `T - 1`): the last step of one unroll is the first of the next. The learner
learns on steps `0 .. T-2` and uses step `T-1` only to bootstrap (V(s_{T-1})), so every step is
learnt on exactly once and every learnt step has a successor to bootstrap from.

Core state. `Unroll.core_state` is the behaviour policy's recurrent state (any pytree, e.g. the
LSTM's (hidden, cell)) immediately before step 0 of the unroll, i.e. the state the actor fed
into the policy together with `steps.observation[0]` (before any reset that `first[0]`
triggers; the network applies that reset itself). The actor remembers the state before the
last step of an unroll and stores it with the next unroll, since that step is the next
unroll's step 0. This is the "stored state" of IMPALA/R2D2: it comes from the behaviour
parameters, which is a small bias on stale data.

Batches: one layout, time-major, from the rollout to the loss (issue 30). The rollout plays
`[T, B, ...]` (`actors.rollout`), an item is one game's `[:, b]` (`take`), a batch of items is
stacked on axis 1 (`stack_unrolls`; `[B, ...]` for `core_state`), and the update and the losses
read `[T, B, ...]`. Only tf.data's batches of Reverb items come batch-major (`time_major`
turns them).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

Array = Any
PyTree = Any


class Step(NamedTuple):
    """One step of experience (see the module docstring for every field)."""

    observation: PyTree
    opponent_observation: PyTree
    action: dict[str, Array]
    behaviour_log_prob: dict[str, Array]
    reward: Array
    discount: Array
    first: Array
    policy_version: Array
    # {"reward", "active"} [K] per step; {} without z (an empty structure, not None: Reverb's
    # signatures and writers take no None leaves).
    pseudo_reward: Any = {}  # noqa: RUF012 -- never mutated


class Unroll(NamedTuple):
    """One Reverb item: `T` steps (leading time axis) and the core state before step 0."""

    steps: Step
    core_state: PyTree


STEP_DTYPES = {
    "reward": np.float32,
    "discount": np.float32,
    "first": np.bool_,
    "policy_version": np.int32,
}


def validate_unroll(unroll: Unroll, unroll_length: int | None = None) -> int:
    """Checks an unbatched unroll's dtypes and that every step leaf has the same length T.

    Returns T. Raises ValueError with the offending field otherwise.
    """
    steps = unroll.steps
    lengths = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree_util.tree_leaves(steps)}
    if len(lengths) != 1 or None in lengths:
        raise ValueError(f"every Step leaf needs the same leading time axis, got lengths {lengths}")
    (length,) = lengths
    if unroll_length is not None and length != unroll_length:
        raise ValueError(f"unroll has {length} steps, expected {unroll_length}")
    if length < 2:
        raise ValueError("an unroll needs at least 2 steps (one to learn, one to bootstrap)")
    for name, dtype in STEP_DTYPES.items():
        got = np.asarray(getattr(steps, name)).dtype
        if got != dtype:
            raise ValueError(f"Step.{name} must be {np.dtype(dtype).name}, got {got}")
    for name, tree, dtype in (("action", steps.action, np.int32),
                              ("behaviour_log_prob", steps.behaviour_log_prob, np.float32)):
        if not isinstance(tree, dict) or not tree:
            raise ValueError(f"Step.{name} must be a non-empty dict head_name -> array")
        for head, x in tree.items():
            if np.asarray(x).dtype != dtype:
                raise ValueError(f"Step.{name}[{head!r}] must be {np.dtype(dtype).name}")
    if set(steps.action) != set(steps.behaviour_log_prob):
        raise ValueError("Step.action and Step.behaviour_log_prob must have the same heads")
    return length


def reverb_signature(example_unroll: Unroll) -> Any:
    """The Reverb table signature (a nest of `tf.TensorSpec`) for items shaped like the example.

    `example_unroll` is one unbatched item (`[T, ...]` step leaves). TensorFlow is imported
    here, not at module level, so that processes without Reverb never load it.
    """
    import tensorflow as tf

    validate_unroll(example_unroll)
    return jax.tree_util.tree_map(
        lambda x: tf.TensorSpec(np.shape(x), tf.as_dtype(np.asarray(x).dtype)), example_unroll)


def write_unroll(writer: Any, table: str, unroll: Unroll, priority: float = 1.0) -> None:
    """Appends a whole unroll to a Reverb `TrajectoryWriter` as one item.

    The writer must have been made with `client.trajectory_writer(num_keep_alive_refs=1)`.
    The unroll is appended as a single writer step whose columns already carry the time
    axis (much faster than appending `T` steps one by one, see DESIGN.md costs), and the
    item takes each column squeezed, so its shapes are exactly the unroll's.
    """
    writer.append(unroll)
    trajectory = jax.tree_util.tree_map(lambda column: column[-1], writer.history)
    writer.create_item(table, priority=priority, trajectory=trajectory)


def unflatten_like(example: PyTree, leaves: list[Any]) -> PyTree:
    """Rebuilds our structure from Reverb's flat leaf list (tf.nest and jax order alike)."""
    treedef = jax.tree_util.tree_structure(example)
    if treedef.num_leaves != len(leaves):
        raise ValueError(f"expected {treedef.num_leaves} leaves, got {len(leaves)}")
    return jax.tree_util.tree_unflatten(treedef, list(leaves))


def time_major(batch: Unroll) -> Unroll:
    """A batch-major batch ([B, T, ...] step leaves, as tf.data batches Reverb's items) in the
    batches' layout, time-major [T, B, ...]; `core_state` ([B, ...]) is left as it is."""
    def swap(x):
        return x.swapaxes(0, 1)

    return Unroll(steps=jax.tree_util.tree_map(swap, batch.steps), core_state=batch.core_state)


def stack_unrolls(unrolls: list[Unroll]) -> Unroll:
    """Unbatched unrolls (items [T, ...]) stacked into one time-major batch: steps [T, B, ...],
    core_state [B, ...]."""
    return Unroll(steps=jax.tree_util.tree_map(lambda *xs: np.stack(xs, 1), *[u.steps for u in unrolls]),
                  core_state=jax.tree_util.tree_map(lambda *xs: np.stack(xs), *[u.core_state for u in unrolls]))


def batch_size(batch: Unroll) -> int:
    """B of a time-major batch."""
    return int(np.shape(batch.steps.reward)[1])


def take(batch: Unroll, index) -> Unroll:
    """Items `index` (an int: one unbatched item [T, ...]; an index array: a batch) of a
    time-major batch."""
    return Unroll(steps=jax.tree_util.tree_map(lambda x: x[:, index], batch.steps),
                  core_state=jax.tree_util.tree_map(lambda x: x[index], batch.core_state))


def concat(a: Unroll, b: Unroll) -> Unroll:
    """Two time-major batches side by side ([T, B_a + B_b, ...])."""
    return Unroll(steps=jax.tree_util.tree_map(lambda x, y: np.concatenate([x, y], 1), a.steps, b.steps),
                  core_state=jax.tree_util.tree_map(lambda x, y: np.concatenate([x, y]), a.core_state,
                                                    b.core_state))


def zeros_unroll(observation: PyTree, opponent_observation: PyTree,
                 heads: list[str] | tuple | dict[str, tuple[int, ...]],
                 core_state: PyTree, unroll_length: int, reward_shape: tuple[int, ...] = (),
                 pseudo_rewards: int = 0) -> Unroll:
    """An all-zero unbatched `Unroll` with the given example shapes (for table signatures,
    warm-up compilations and the learner's structure). `core_state` is unbatched too.
    `heads`: head names (one action per step each) or {head: action shape per step};
    `reward_shape`: () or (n,) for one reward per unit; `pseudo_rewards`: K > 0 for a network
    conditioned on z (`Step.pseudo_reward`)."""
    shapes = dict(heads) if isinstance(heads, dict) else {h: () for h in heads}
    def with_time(x):
        x = np.asarray(x)
        return np.zeros((unroll_length, *x.shape), x.dtype)

    def t(dtype, shape=()):
        return np.zeros((unroll_length, *shape), dtype)

    steps = Step(
        observation=jax.tree_util.tree_map(with_time, observation),
        opponent_observation=jax.tree_util.tree_map(with_time, opponent_observation),
        action={h: t(np.int32, shape) for h, shape in shapes.items()},
        behaviour_log_prob={h: t(np.float32, shape) for h, shape in shapes.items()},
        reward=t(np.float32, tuple(reward_shape)), discount=t(np.float32), first=t(np.bool_),
        policy_version=t(np.int32),
        pseudo_reward={} if not pseudo_rewards else {
            "reward": t(np.float32, (pseudo_rewards,)), "active": t(np.float32, (pseudo_rewards,))})
    return Unroll(steps=steps, core_state=jax.tree_util.tree_map(
        lambda x: np.zeros(np.shape(x), np.asarray(x).dtype), core_state))
