"""The learner's update: the one jitted function that turns a batch of unrolls into new
parameters (V-trace, TD(lambda), UPGO, entropy and KL terms: `learners.losses`), its optimiser
and its state. Pure functions; the learner (`learners.learner.Learner`) holds the state, the
device learner (`learners.device`) fuses the update with its own games.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agents import network_key
from agents.trajectory import Unroll
from learners import losses
from learners.config import LearnerConfig, ReplayConfig

PyTree = Any


def shardings(devices) -> tuple[NamedSharding, Unroll]:
    """(replicated, batch-split) shardings over `devices`: data parallel, parameters replicated
    and the batch axis split (XLA averages the gradients: the loss is a mean over the batch).
    The batch's is a prefix of a time-major `Unroll`: steps [T, B, ...] split on axis 1, the
    core state [B, ...] on axis 0."""
    mesh = Mesh(np.array(list(devices)), ("batch",))
    return NamedSharding(mesh, PartitionSpec()), Unroll(
        steps=NamedSharding(mesh, PartitionSpec(None, "batch")),
        core_state=NamedSharding(mesh, PartitionSpec("batch")))


class TrainingState(NamedTuple):
    params: PyTree
    opt_state: PyTree
    version: jax.Array       # int32 scalar
    num_skipped: jax.Array   # int32 scalar: non-finite updates skipped
    # The moving magnet's parameters (`LossConfig.magnet_weight` > 0; else None): the learner's
    # own parameters as they were at the last multiple of `magnet_every` updates. Not in
    # checkpoints: a restored learner starts a new magnet from its restored parameters.
    magnet: PyTree = None


def make_optimizer(config: LearnerConfig, flat: bool = True) -> optax.GradientTransformation:
    """Adam after global-norm clipping, on the parameters flattened into one vector
    (`optax.flatten`; the same arithmetic, elementwise, on one array instead of one per
    parameter: a network of ~45 parameter arrays otherwise compiles ~45 copies of Adam's
    loops, seconds of XLA compile time). `flat=False`: the per-parameter optimiser state of
    checkpoints written before (read by `Learner` to convert them)."""
    adam = optax.adam(config.learning_rate, b1=config.adam_b1, b2=config.adam_b2,
                      eps=config.adam_eps)
    if config.max_grad_norm:
        adam = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), adam)
    return optax.flatten(adam) if flat else adam


def scale_learning_rates(updates: PyTree, scales: tuple[tuple[str, float], ...]) -> PyTree:
    """The optimiser's step of each parameter times K, for the first NAME=K of `scales` whose
    NAME is part of the parameter's path (`LearnerConfig.learning_rate_scales`). Adam's step,
    -alpha m_hat / (sqrt(v_hat) + eps) (Kingma & Ba 2015, Algorithm 1), is linear in alpha, so
    that parameter learns at K alpha with the moments of the plain update. Other parameters keep
    their step. A NAME that is part of no parameter's path is a ValueError naming the paths."""
    if not scales:
        return updates
    leaves, _ = jax.tree_util.tree_flatten_with_path(updates)
    paths = [jax.tree_util.keystr(path) for path, _ in leaves]
    unknown = [name for name, _ in scales if not any(name in p for p in paths)]
    if unknown:
        raise ValueError(f"--learner.learning_rate_scales names {', '.join(unknown)}, part of no parameter's "
                         f"path; the parameters: {', '.join(paths)}")

    def one(path, u):
        key = jax.tree_util.keystr(path)
        return next((u * k for name, k in scales if name in key), u)
    return jax.tree_util.tree_map_with_path(one, updates)


def _all_finite(tree: PyTree) -> jax.Array:
    """Every float in the tree is finite: one check over the leaves concatenated."""
    leaves = [jnp.ravel(x) for x in jax.tree_util.tree_leaves(tree)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    return jnp.all(jnp.isfinite(jnp.concatenate(leaves))) if leaves else jnp.asarray(True)


AGENT_SETTINGS = ("learning_rate", "exploration", "entropy_weight", "entropy_weight_end",
                  "entropy_anneal_updates", "kl_teacher_weight")
"""What may differ between the agents of one population program (`learners.population`): data
along its agent axis, not a separate program."""


def agent_settings(config: LearnerConfig) -> dict[str, float]:
    """An agent's `AGENT_SETTINGS` as numbers (a constant entropy weight: its end is its start)."""
    loss = config.loss
    end = loss.entropy_weight if loss.entropy_weight_end is None else loss.entropy_weight_end
    return {"learning_rate": config.learning_rate, "exploration": config.exploration,
            "entropy_weight": loss.entropy_weight, "entropy_weight_end": end,
            "entropy_anneal_updates": float(max(loss.entropy_anneal_updates, 1)),
            "kl_teacher_weight": loss.kl_teacher_weight}


def shared_config(config: LearnerConfig) -> LearnerConfig:
    """The part of an agent's learner configuration that the agents of one population program
    share: all but its `AGENT_SETTINGS` (set to neutral values; the learning rate to 1, so the
    optimiser's step is scaled by each agent's own; the KL-to-teacher weight to 1 where it is on,
    so the term is in the program and each agent's weight scales it) and the role settings that
    made them (`LearnerConfig.for_role`)."""
    return dataclasses.replace(
        config, learning_rate=1.0, exploration=0.0, replay=ReplayConfig(),
        exploiter_learning_rate=None, exploiter_exploration=None,   # roles: already applied
        loss=dataclasses.replace(config.loss, entropy_weight=0.0, entropy_weight_end=None,
                                 entropy_anneal_updates=0, exploiter_entropy_weight=None,
                                 kl_teacher_weight=float(config.loss.kl_teacher_weight > 0)))


def agent_entropy_weight(settings, update: jax.Array) -> jax.Array:
    """`losses.entropy_schedule` from an agent's settings (arrays: traced per agent):

        alpha_k = alpha_0 (alpha_end / alpha_0) ** min(k / K, 1)

    (constant alpha_0 where alpha_end == alpha_0)."""
    w0, end = settings["entropy_weight"], settings["entropy_weight_end"]
    fraction = jnp.minimum(update.astype(jnp.float32) / settings["entropy_anneal_updates"], 1.0)
    ratio = jnp.where(w0 > 0, end / jnp.where(w0 > 0, w0, 1.0), 1.0)
    return jnp.where(end == w0, w0, w0 * ratio ** fraction).astype(jnp.float32)


def make_update_fn(network: Any, config: LearnerConfig, optimizer: optax.GradientTransformation):
    """The pure update: (state, time-major batch [T, B] (`agents.trajectory`), teacher params or
    None[, settings]) -> (state, metrics).

    `settings` (a population program's agent, `agent_settings` as arrays): the learning rate and
    the entropy weight's schedule come from it instead of `config`; `optimizer` must then step
    at learning rate 1 (`shared_config`). Adam's step is linear in the learning rate, so the
    update is the one `config` with the agent's own values gives.

    With a teacher, each unroll's core state is the pair (policy's, teacher's) that the actor
    stored (`actors.actor.example_unroll(..., teacher=True)`).

    With a magnet (`state.magnet`), its logits on the same steps enter the loss
    (`losses.kl_to_magnet_loss`), computed from the policy's own core state at the unroll's
    start (exact for networks without a recurrent core, an approximation for an LSTM), and the
    magnet becomes the new parameters whenever the version reaches a multiple of
    `config.loss.magnet_every`.

    Learns on steps 0..T-2 of each unroll and bootstraps from V(s_{T-1}). The update is applied
    only if the loss, every gradient and every new parameter are finite. Networks with one
    value per unit (the unit network) learn each unit from its own reward, value and advantage
    (`learners.losses`; the trajectories' rewards are per unit): their unit heads must keep the
    unit axis.
    """
    if getattr(getattr(network, "config", None), "split_units", False):
        raise ValueError("the learner needs the unit heads' unit axis (each unit learns from its "
                         "own value and advantage): use UnitNetworkConfig(split_units=False)")

    def loss_fn(params, unroll: Unroll, teacher_params, version, magnet, settings):
        steps = unroll.steps
        # Autoregressive heads (the unit network's pointer target depends on the action type)
        # are evaluated on the actions the behaviour policy took (teacher forcing).
        taken = ({"actions_seq": steps.action}
                 if getattr(network, "unroll_takes_actions", False) else {})
        core_state, teacher_logits = unroll.core_state, None
        if teacher_params is not None:
            # The teacher follows the same observations with its own recurrent state, which
            # the actor stores beside the policy's (`actors.actor.Actor`, `teacher_params`).
            core_state, teacher_state = core_state
            teacher_out, _ = network.unroll(teacher_params, steps.observation, steps.first,
                                            teacher_state, **taken)
            teacher_logits = jax.tree_util.tree_map(lambda x: x[:-1], teacher_out.logits)
        out, _ = network.unroll(params, steps.observation, steps.first, core_state,
                                steps.opponent_observation, **taken)

        def learn(x):
            return jax.tree_util.tree_map(lambda y: y[:-1], x)

        magnet_logits = None
        if magnet is not None:
            magnet_out, _ = network.unroll(magnet, steps.observation, steps.first, core_state,
                                           **taken)
            magnet_logits = learn(magnet_out.logits)

        pseudo = None
        if steps.pseudo_reward and out.pseudo_value is not None:
            # z's pseudo-rewards, each with its own value head (losses.pseudo_reward_losses).
            pseudo = {"reward": steps.pseudo_reward["reward"][:-1],
                      "active": steps.pseudo_reward["active"][:-1],
                      "value": out.pseudo_value[:-1], "bootstrap": out.pseudo_value[-1]}
        return losses.total_loss(
            config.loss, learn(out.logits), out.value[:-1], out.value[-1], learn(steps.action),
            learn(steps.behaviour_log_prob), steps.reward[:-1], steps.discount[:-1],
            teacher_logits,
            losses.entropy_schedule(config.loss, version) if settings is None
            else agent_entropy_weight(settings, version), pseudo, magnet_logits,
            None if settings is None else settings["kl_teacher_weight"])

    def update(state: TrainingState, unroll: Unroll, teacher_params, settings=None):
        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, unroll, teacher_params, state.version, state.magnet, settings)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        if settings is not None:  # the optimiser's step at learning rate 1, times the agent's
            updates = jax.tree_util.tree_map(lambda u: u * settings["learning_rate"], updates)
        updates = scale_learning_rates(updates, config.rate_scales)
        params = optax.apply_updates(state.params, updates)
        finite = jnp.isfinite(loss) & _all_finite(grads) & _all_finite(params)

        def choose(new, old):
            return jax.tree_util.tree_map(lambda a, b: jnp.where(finite, a, b), new, old)

        staleness = (state.version - unroll.steps.policy_version[:-1]).astype(jnp.float32)
        metrics.update(finite=finite, grad_norm=optax.global_norm(grads),
                       staleness_mean=jnp.mean(staleness), staleness_max=jnp.max(staleness))
        version = state.version + finite.astype(jnp.int32)
        new_params = choose(params, state.params)
        magnet = state.magnet
        if magnet is not None:
            replace = finite & (version % config.loss.magnet_every == 0)
            magnet = jax.tree_util.tree_map(lambda p, m: jnp.where(replace, p, m), new_params, magnet)
        new_state = TrainingState(
            params=new_params, opt_state=choose(opt_state, state.opt_state), version=version,
            num_skipped=state.num_skipped + (~finite).astype(jnp.int32), magnet=magnet)
        return new_state, metrics

    return update


_COMPILED: dict = {}
_COMPILED_LOCK = threading.Lock()


def compiled_update(network, config: LearnerConfig, devices, replicated, batch_sharding):
    """(optimizer, jitted update) shared by every learner of one network and configuration in
    a process, so that co-located learners (one per league agent) compile the update once."""
    key = (network_key(network), dataclasses.replace(config, replay=ReplayConfig()).to_json(),
           tuple(d.id for d in devices))
    with _COMPILED_LOCK:
        if key not in _COMPILED:
            optimizer = make_optimizer(config)
            update = jax.jit(make_update_fn(network, config, optimizer),
                             in_shardings=(replicated, batch_sharding, replicated),
                             out_shardings=(replicated, replicated))
            _COMPILED[key] = (optimizer, update)
        optimizer, update = _COMPILED[key]
    return optimizer, update
