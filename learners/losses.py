"""Learning math: pure, time-major loss functions, vectorised over batch, units and heads.

Shapes: `T` learning steps, `B` sequences, and optionally unit axes `U` (a team game's units,
each with its own reward, value and advantage: OpenAI Five, seed 003 appendix G "Team Spirit";
seed 001). Rewards and values are `[T, B, *U]` (`U = ()`: one value per side, e.g. poker),
`bootstrap_value` is `[B, *U]` (V(s_T), the value of the step after the last one learnt on),
discounts `[T, B]` or `[T, B, *U]` (a game ends for all its units at once).
A policy is a dict head_name -> logits; heads are independent categoricals, so
log pi(a|s) = sum_h log pi_h(a^h|s). A head is a *unit head*, logits `[T, B, *U, A]` (unit i's
own action: it learns from unit i's advantage), or a *team head*, logits `[T, B, A]` (one
action of the whole side, e.g. the army composition: it learns from the mean over units of
their advantages, which for V-trace is exactly the advantage of the team's mean reward and
mean value, V-trace being linear in r and V for fixed ratios). With `U = ()` every head is a
team head and every formula below is the plain single-agent one.

Every loss is the sum over units of that unit's own loss (unit heads weighted 1, team heads
1/|U|), the mean over `t, b`: `L = mean_{t,b} sum_i L_i(t, b)`. All heads and units share
ONE V-trace / UPGO / TD(lambda) computation over a `[T, B, *U, H]` array (rlax's per-sequence
functions vmapped over every axis but time), so the compiled update holds one scan per
estimator instead of one per head and unit.

Conventions of `agents.trajectory`: r_t follows a_t, gamma_t = 0 if the episode ended after
step t, and the one-step target is r_t + gamma_t V(s_{t+1}).

Sources: AlphaStar (Vinyals et al., Nature 2019, Methods "Value and policy updates"; seed
002), IMPALA (Espeholt et al. 2018, eq. 1 and Sec. 4.2), OpenAI Five (Berner et al. 2019,
Table 2 and appendix G; seeds 001, 003), PPO (Schulman et al. 2017, eq. 7), GAE (Schulman
et al. 2016, eq. 16), magnetic mirror descent (Sokota et al. 2023, eq. 3).
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax
import rlax

from learners.config import LossConfig

Array = Any
Logits = dict[str, Array]


def _check_time_major(rewards, discounts, values, bootstrap_value):
    """rewards, values [T, B, *U]; discounts [T, B] or [T, B, *U]; bootstrap [B, *U]."""
    chex.assert_type([rewards, discounts, values, bootstrap_value], float)
    chex.assert_equal_shape([rewards, values])
    assert values.ndim >= 2, f"time-major arrays are [T, B, ...], got shape {values.shape}"
    chex.assert_shape(bootstrap_value, values.shape[1:])
    assert discounts.shape in (values.shape, values.shape[:2]), (
        f"discounts {discounts.shape} must be [T, B] or like the values {values.shape}")


def _expand_to(x: Array, shape: tuple) -> Array:
    """x [d0, .., dk] broadcast to `shape` [d0, .., dk, ...] (new axes at the end)."""
    return jnp.broadcast_to(jnp.reshape(x, x.shape + (1,) * (len(shape) - x.ndim)), shape)


def _per_sequence(fn, *arrays: Array) -> Array:
    """Applies `fn` (rlax: one sequence [T] per argument) to every column of [T, ...] arrays of
    one shape, as one vmapped computation; returns fn's output (any pytree) shaped [T, ...]."""
    shape = arrays[0].shape
    flat = [x.reshape(shape[0], -1) for x in arrays]
    out = jax.vmap(fn, in_axes=1, out_axes=1)(*flat)
    return jax.tree_util.tree_map(lambda y: y.reshape(shape), out)


def _unit_count(values: Array) -> int:
    count = 1
    for d in values.shape[2:]:
        count *= d
    return count


def _check_heads(target_log_probs: Logits, behaviour_log_probs: Logits, like: Array):
    """Every head is [T, B] (a team head) or `like`'s shape [T, B, *U] (a unit head)."""
    if set(target_log_probs) != set(behaviour_log_probs):
        raise ValueError(f"heads differ: {sorted(target_log_probs)} vs {sorted(behaviour_log_probs)}")
    for head in target_log_probs:
        chex.assert_equal_shape([target_log_probs[head], behaviour_log_probs[head]])
        shape = target_log_probs[head].shape
        if shape not in (like.shape, like.shape[:2]):
            raise AssertionError(f"head {head!r} has shape {shape}; expected {like.shape[:2]} "
                                 f"(team head) or {like.shape} (unit head)")


def stack_heads(per_head: dict[str, Array], like: Array) -> tuple[Array, Array]:
    """One [T, B, *U, H] array from per-head [T, B] (team) or [T, B, *U] (unit) arrays, heads
    in sorted order, team heads broadcast over the units; and the heads' weights [H]: 1 for a
    unit head, 1/|U| for a team head (so that summing over units gives a team head the mean
    of the units' terms)."""
    columns, weights = [], []
    for head in sorted(per_head):
        x = per_head[head]
        columns.append(_expand_to(x, like.shape))
        weights.append(1.0 if x.shape == like.shape else 1.0 / _unit_count(like))
    return jnp.stack(columns, axis=-1), jnp.asarray(weights, like.dtype)


def _per_head(rewards, discounts, values, bootstrap_value, like_heads: Array):
    """rewards, discounts, values [T, B, *U, H] and bootstrap [B, *U, H], like `like_heads`."""
    shape = like_heads.shape
    return (_expand_to(rewards, shape), _expand_to(discounts, shape), _expand_to(values, shape),
            _expand_to(bootstrap_value, shape[1:]))


def _next_values(values: Array, bootstrap_value: Array) -> Array:
    """V(s_{t+1}) for t = 0..T-1, with V(s_T) = bootstrap_value."""
    return jnp.concatenate([values[1:], bootstrap_value[None]], axis=0)


def vtrace_advantages(log_rhos: Array, rewards: Array, discounts: Array, values: Array,
                      bootstrap_value: Array, lambda_: float = 1.0, clip_rho_threshold: float = 1.0,
                      clip_pg_rho_threshold: float = 1.0) -> tuple[Array, Array]:
    """V-trace targets v_s and policy-gradient advantages, [T, B, *U] each (IMPALA eq. 1, Sec. 4.2),
    every column [T] (one sequence of one unit) on its own:

        rho_t = min(rho_bar, pi/mu),  c_t = lambda min(1, pi/mu)
        delta_t = rho_t (r_t + gamma_t V(s_{t+1}) - V(s_t))
        v_s = V(s_s) + sum_{t >= s} (prod_{i=s}^{t-1} gamma_i c_i) delta_t
        A_s = min(rho_bar_pg, pi/mu) (r_s + gamma_s v_{s+1} - V(s_s)),  v_T = V(s_T)

    (with lambda < 1 rlax uses q_s = r_s + gamma_s (lambda v_{s+1} + (1 - lambda) V(s_{s+1}))).
    Computed with `rlax.vtrace_td_error_and_advantage`; no gradient flows through either output.
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    chex.assert_equal_shape([log_rhos, rewards])
    discounts = _expand_to(discounts, values.shape)

    def one(v, v_next, r, g, rho):
        return rlax.vtrace_td_error_and_advantage(v, v_next, r, g, rho, lambda_,
                                                  clip_rho_threshold, clip_pg_rho_threshold)

    out = _per_sequence(one, values, _next_values(values, bootstrap_value), rewards, discounts,
                        jnp.exp(log_rhos))
    targets = jax.lax.stop_gradient(out.errors + values)
    return targets, jax.lax.stop_gradient(out.pg_advantage)


def vtrace_policy_loss(target_log_probs: Logits, behaviour_log_probs: Logits, rewards: Array,
                       discounts: Array, values: Array, bootstrap_value: Array,
                       lambda_: float = 1.0, clip_rho_threshold: float = 1.0,
                       clip_pg_rho_threshold: float = 1.0,
                       importance_correction: bool = True) -> tuple[Array, dict[str, Array]]:
    """Multi-head V-trace policy-gradient loss (IMPALA; AlphaStar's per-head ratios), per unit:

        L = - mean_{t,b} sum_i sum_h w_h A^{h,i}_t log pi_h(a^{h,i}_t | s_t)

    where A^{h,i} is `vtrace_advantages` of unit i's rewards and values computed with head h's
    own ratio pi_h(a^h)/mu_h(a^h) (unit i's action for a unit head), and w_h is 1 for a unit
    head, 1/|U| for a team head (module docstring). AlphaStar "assume[s] independence between
    the action type, delay, and all other arguments, and so update the components of the
    policy separately", which keeps a long, structured action from truncating the trace early.
    `importance_correction=False` sets every ratio to 1 (the uncorrected actor-critic
    baseline, for ablations). All heads and units: one V-trace over [T, B, *U, H].
    """
    _check_heads(target_log_probs, behaviour_log_probs, rewards)
    log_pi, weights = stack_heads(target_log_probs, values)
    log_mu, _ = stack_heads(behaviour_log_probs, values)
    log_rho = jax.lax.stop_gradient(log_pi - log_mu)
    if not importance_correction:
        log_rho = jnp.zeros_like(log_rho)
    _, advantages = vtrace_advantages(
        log_rho, *_per_head(rewards, discounts, values, bootstrap_value, log_pi),
        lambda_, clip_rho_threshold, clip_pg_rho_threshold)
    T, B = values.shape[:2]
    loss = -jnp.sum(weights * advantages * log_pi) / (T * B)
    metrics = {}
    for k, head in enumerate(sorted(target_log_probs)):
        metrics[f"rho_mean/{head}"] = jnp.mean(jnp.exp(log_rho[..., k]))
        metrics[f"rho_clipped_fraction/{head}"] = jnp.mean(
            log_rho[..., k] > jnp.log(clip_pg_rho_threshold))
    return loss, metrics


def neurd_moves(logits: Array, advantages: Array, legal: Array, beta: float) -> Array:
    """NeuRD's threshold (Hennes et al. 2020, sec. 4): the legal logits free to move the way their
    advantage pushes them, y < beta where A > 0 and y > -beta where A <= 0."""
    return jnp.where(advantages > 0, logits < beta, logits > -beta) & legal


def neurd_policy_loss(logits: Logits, actions: dict[str, Array], target_log_probs: Logits,
                      behaviour_log_probs: Logits, rewards: Array, discounts: Array, values: Array,
                      bootstrap_value: Array, lambda_: float = 1.0, clip_rho_threshold: float = 1.0,
                      clip_pg_rho_threshold: float = 1.0, beta: float = 2.0,
                      clip: float = 10_000.0) -> tuple[Array, dict[str, Array]]:
    """Neural Replicator Dynamics on sampled steps (Hennes et al. 2020, eq. 8; as R-NaD's learner,
    Perolat et al. 2022, uses it), per unit like every loss here (module docstring):

        L = - mean_{t,b} sum_h sum_{a legal} sg(clip(A_h(t, a))) F(ybar_h(t, a))
        A_h(t, a) = q_h(t, a) - sum_b pi_h(b) q_h(t, b),
        q_h(t, a) = V(s_t) + [a = a_t] A^h_t / pi_h(a_t | s_t)
                  = V(s_t) + [a = a_t] (r_t + gamma_t v_{t+1} - V(s_t)) / mu_h(a_t)   (rho unclipped)

    A^h_t is V-trace's policy-gradient advantage (`vtrace_advantages`, head h's ratio), so q is the
    importance-sampled action value of every action (V for the ones not taken) and
    A_h(t, a) = A^h_t ([a = a_t] / pi_h(a_t) - 1). ybar are the logits centred over the legal
    actions; F(ybar) = ybar where it may still move the way A pushes it (ybar < beta for A > 0,
    ybar > -beta for A < 0) and sg(ybar) beyond. The gradient on the logits is A itself: no
    pi(a) factor, so an action whose probability fell near 0 still learns (softmax's gradient,
    pi(a) (q(a) - sum pi q), vanishes there). A step with one legal action has A = 0.
    With units (values [T, B, *U]) a unit head's A^h_t is its unit's own (the sum over units of
    each unit's term) and a team head's is the mean over units, as in `vtrace_policy_loss`."""
    from agents.networks import MASKED_LOGIT

    _check_heads(target_log_probs, behaviour_log_probs, rewards)
    log_pi, _ = stack_heads(target_log_probs, values)
    log_mu, _ = stack_heads(behaviour_log_probs, values)
    log_rho = jax.lax.stop_gradient(log_pi - log_mu)
    _, taken_advantage = vtrace_advantages(
        log_rho, *_per_head(rewards, discounts, values, bootstrap_value, log_pi),
        lambda_, clip_rho_threshold, clip_pg_rho_threshold)
    T, B = values.shape[:2]
    loss, metrics = 0.0, {}
    for k, head in enumerate(sorted(target_log_probs)):
        y = logits[head]
        legal = y > MASKED_LOGIT / 2
        taken = jax.nn.one_hot(actions[head], y.shape[-1], dtype=y.dtype)
        pi_taken = jax.lax.stop_gradient(jnp.exp(target_log_probs[head]))[..., None]
        head_advantage = taken_advantage[..., k]          # [T, B, *U]
        if y.ndim == values.ndim:                         # a team head: the units' mean
            head_advantage = jnp.mean(head_advantage.reshape(T, B, -1), axis=-1)
        advantage = head_advantage[..., None] * (taken / pi_taken - 1.0)
        advantage = jax.lax.stop_gradient(jnp.clip(jnp.where(legal, advantage, 0.0), -clip, clip))
        centred = y - (jnp.sum(jnp.where(legal, y, 0.0), -1, keepdims=True)
                       / jnp.maximum(jnp.sum(legal, -1, keepdims=True), 1))
        moves = neurd_moves(centred, advantage, legal, beta)
        loss = loss - jnp.sum(jnp.where(moves, advantage * centred, 0.0)) / (T * B)
        metrics[f"neurd_held_fraction/{head}"] = jnp.sum(legal & ~moves & (advantage != 0)) / jnp.maximum(
            jnp.sum(legal & (advantage != 0)), 1)
    return loss, metrics


def lambda_returns(rewards: Array, discounts: Array, values: Array, bootstrap_value: Array,
                   lambda_: float) -> Array:
    """Uncorrected lambda-returns G^lambda [T, B, *U] (Sutton & Barto 12.1; rlax.lambda_returns),
    each unit's from its own rewards and values:

        G_t = r_t + gamma_t ((1 - lambda) V(s_{t+1}) + lambda G_{t+1}),  G_T = V(s_T)

    No importance weights: AlphaStar updates the value "using TD(lambda)" with an
    "uncorrected update of the value function (which introduces bias but reduces variance)".
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    returns = _per_sequence(lambda r, g, v: rlax.lambda_returns(r, g, v, lambda_),
                            rewards, _expand_to(discounts, values.shape),
                            _next_values(values, bootstrap_value))
    return jax.lax.stop_gradient(returns)


def td_lambda_value_loss(values: Array, rewards: Array, discounts: Array, bootstrap_value: Array,
                         lambda_: float = 0.8) -> Array:
    """TD(lambda) value loss L = mean_{t,b} sum_i 0.5 (G^{lambda,i}_t - V^i(s_t))^2, G from
    `lambda_returns` (one value per unit i; `U = ()`: the plain mean over t, b).

    Via `rlax.td_lambda` (targets stop-gradient; the bootstrap value gets no gradient).
    AlphaStar's pseudocode uses lambda = 0.8.
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    errors = _per_sequence(lambda v, r, g, v_next: rlax.td_lambda(v, r, g, v_next, lambda_),
                           values, rewards, _expand_to(discounts, values.shape),
                           jax.lax.stop_gradient(_next_values(values, bootstrap_value)))
    T, B = values.shape[:2]
    return 0.5 * jnp.sum(jnp.square(errors)) / (T * B)


def _joint_log_ratio(target_log_probs: Logits, behaviour_log_probs: Logits, like: Array) -> Array:
    """log pi(a)/mu(a) of each unit's whole action [T, B, *U]: the sum over heads of the heads'
    log-ratios, unit i's own for a unit head, the side's for a team head."""
    return sum(_expand_to(target_log_probs[h] - behaviour_log_probs[h], like.shape)
               for h in sorted(target_log_probs))


def vtrace_value_loss(target_log_probs: Logits, behaviour_log_probs: Logits, values: Array,
                      rewards: Array, discounts: Array, bootstrap_value: Array,
                      lambda_: float = 1.0, clip_rho_threshold: float = 1.0) -> Array:
    """V-trace value loss L = mean_{t,b} sum_i 0.5 (v^i_t - V^i(s_t))^2 (IMPALA Sec. 4.1), v_t
    the V-trace targets of `vtrace_advantages` with the whole action's ratio pi(a)/mu(a) (the
    product of the heads' ratios; per unit: its own heads and the team heads). The
    off-policy-corrected value of IMPALA, which AlphaStar replaced by the uncorrected
    TD(lambda) (Fig. 3i: "V-trace" vs "+ TD(lambda)"); for that ablation."""
    _check_heads(target_log_probs, behaviour_log_probs, rewards)
    log_rho = jax.lax.stop_gradient(_joint_log_ratio(target_log_probs, behaviour_log_probs, values))
    targets, _ = vtrace_advantages(log_rho, rewards, discounts, values,
                                   jax.lax.stop_gradient(bootstrap_value), lambda_,
                                   clip_rho_threshold, clip_rho_threshold)
    T, B = values.shape[:2]
    return 0.5 * jnp.sum(jnp.square(targets - values)) / (T * B)


FORCED_LOG_PROB = -1e-6  # a step whose actions had log mu above this (mu = 1): no choice was made


def upgo_returns(rewards: Array, discounts: Array, values: Array, bootstrap_value: Array,
                 chose: Array | None = None) -> Array:
    """Upgoing returns G [T, B, *U] (AlphaStar, Methods "Value and policy updates"), per unit:

        G_{T-1} = r_{T-1} + gamma_{T-1} V(s_T)
        G_t     = r_t + gamma_t * ( G_{t+1}     if Q(s_{t+1}, a_{t+1}) >= V(s_{t+1})
                                                or no choice was made at t+1
                                    V(s_{t+1})  otherwise )               for t < T-1
        Q(s_{t+1}, a_{t+1}) = r_{t+1} + gamma_{t+1} V(s_{t+2})   (AlphaStar's one-step target)

    with V(s_T) = `bootstrap_value`: the return keeps following the behaviour trajectory while
    its next action looks at least as good as average, and bootstraps as soon as it does not.
    `chose` [T, B, *U] (None: every step) marks the steps where the agent chose its action.
    At a step where it did not (the other player's turn in a turn-based game, a dead unit),
    Q = V in truth, so "Q >= V" would only test the noise of the opponent's reply or the deal,
    and keep the lucky outcomes of the action before it while bootstrapping the unlucky ones:
    an optimistic bias toward high-variance actions. There the return is followed (this
    project's reading of UPGO for turn-based games; AlphaStar's agents choose at every step).
    Hand-written with a reverse `lax.scan` (elementwise over every axis but time); no gradient
    flows through it.
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    discounts = _expand_to(discounts, values.shape)
    chose = jnp.ones(values.shape, bool) if chose is None else _expand_to(chose, values.shape)
    next_values = _next_values(values, bootstrap_value)          # V(s_{t+1})
    one_step_q = rewards + discounts * next_values                # Q(s_t, a_t)
    last = one_step_q[-1]                                         # G_{T-1}

    def body(g_next, xs):
        r_t, gamma_t, v_next, q_next, chose_next = xs
        g_t = r_t + gamma_t * jnp.where((q_next >= v_next) | ~chose_next, g_next, v_next)
        return g_t, g_t

    xs = (rewards[:-1], discounts[:-1], next_values[:-1], one_step_q[1:], chose[1:])
    _, earlier = jax.lax.scan(body, last, xs, reverse=True)
    return jax.lax.stop_gradient(jnp.concatenate([earlier, last[None]], axis=0))


def upgo_policy_loss(target_log_probs: Logits, behaviour_log_probs: Logits, rewards: Array,
                     discounts: Array, values: Array, bootstrap_value: Array,
                     importance_correction: bool = True, follow_forced: bool = False) -> Array:
    """UPGO policy term (AlphaStar), per unit:

        L = - mean_{t,b} sum_i sum_h w_h rho^{h,i}_t (G^i_t - V^i(s_t)) log pi_h(a^{h,i}_t|s_t)

    with G^i from `upgo_returns` of unit i's rewards and values, rho^h_t =
    min(pi_h(a^h_t|s_t) / mu_h(a^h_t|s_t), 1), each head with its own clipped ratio as for
    V-trace, and w_h as in `vtrace_policy_loss`. rho and the advantage are constants.
    `follow_forced`: steps where the behaviour policy had no choice (mu(a_t|s_t) = 1 over every
    head, e.g. poker's non-acting steps) are passed to `upgo_returns` as not chosen.
    """
    _check_heads(target_log_probs, behaviour_log_probs, rewards)
    log_pi, weights = stack_heads(target_log_probs, values)
    log_mu, _ = stack_heads(behaviour_log_probs, values)
    chose = jnp.sum(log_mu, axis=-1) < FORCED_LOG_PROB if follow_forced else None
    advantages = upgo_returns(rewards, discounts, values, bootstrap_value, chose) - values
    advantages = jax.lax.stop_gradient(advantages)
    rho = jnp.minimum(jnp.exp(jax.lax.stop_gradient(log_pi - log_mu)), 1.0)
    if not importance_correction:
        rho = jnp.ones_like(rho)
    T, B = values.shape[:2]
    return -jnp.sum(weights * rho * advantages[..., None] * log_pi) / (T * B)


def _sum_beyond_time_and_batch(x: Array) -> Array:
    return jnp.sum(x, axis=tuple(range(2, x.ndim))) if x.ndim > 2 else x


def entropy(logits: Logits) -> Array:
    """Summed entropy of the heads (and of every unit's), H = - sum_h sum_a pi_h(a) log pi_h(a),
    shape [T, B]."""
    total = 0.0
    for head in sorted(logits):
        log_p = jax.nn.log_softmax(logits[head])
        total = total - _sum_beyond_time_and_batch(jnp.sum(jnp.exp(log_p) * log_p, axis=-1))
    return total


def entropy_schedule(config: LossConfig, update: Array) -> Array:
    """The entropy weight after `update` learner updates: geometric annealing

        alpha_k = alpha_0 (alpha_end / alpha_0) ** min(k / K, 1),   K = entropy_anneal_updates,

    (`optax.exponential_decay`), or the constant alpha_0 without `entropy_weight_end`. With the
    entropy weight read as magnetic mirror descent's temperature (uniform magnet; Sokota et al.
    2023, eq. 3 and Sec. 5: the regularised equilibrium is a quantal response equilibrium that
    tends to a Nash equilibrium as alpha -> 0), annealing lowers the floor that a fixed bonus
    puts under the NashConv reachable (BENCHMARKS.md, "Poker")."""
    if config.entropy_weight_end is None:
        return jnp.asarray(config.entropy_weight, jnp.float32)
    schedule = optax.exponential_decay(
        init_value=config.entropy_weight, transition_steps=config.entropy_anneal_updates,
        decay_rate=config.entropy_weight_end / config.entropy_weight,
        end_value=config.entropy_weight_end)
    return schedule(update)


def entropy_loss(logits: Logits) -> Array:
    """Entropy regularisation (A3C, Mnih et al. 2016; AlphaStar "standard entropy
    regularization loss"): L = - mean_{t,b} H(pi(.|s_t)). Minimising it raises the entropy."""
    return -jnp.mean(entropy(logits))


def kl_to_teacher_loss(logits: Logits, teacher_logits: Logits, heads: tuple[str, ...] = ()) -> Array:
    """KL towards a frozen teacher (AlphaStar's supervised policy):

        L = mean_{t,b} sum_{h in H} KL(pi_teacher,h || pi_h),
        KL(p_T || pi) = sum_a p_T(a) (log p_T(a) - log pi(a))

    (summed over units for unit heads) as in AlphaStar's pseudocode
    (`kl(student_logits, teacher_logits)`). The teacher is constant. H is `heads`, or every head
    when empty (AlphaStar's); a head left out is free of the teacher (`LossConfig.kl_teacher_heads`).
    """
    if set(logits) != set(teacher_logits):
        raise ValueError("student and teacher must have the same heads")
    unknown = sorted(set(heads) - set(logits))
    if unknown:
        raise ValueError(f"--learner.loss.kl_teacher_heads names {', '.join(unknown)}, not a head of this "
                         f"game's policy; its heads: {', '.join(sorted(logits))}")
    total = 0.0
    for head in sorted(heads or logits):
        chex.assert_equal_shape([logits[head], teacher_logits[head]])
        log_t = jax.nn.log_softmax(jax.lax.stop_gradient(teacher_logits[head]))
        log_s = jax.nn.log_softmax(logits[head])
        total = total + _sum_beyond_time_and_batch(jnp.sum(jnp.exp(log_t) * (log_t - log_s), axis=-1))
    return jnp.mean(total)


def kl_to_magnet_loss(logits: Logits, magnet_logits: Logits) -> Array:
    """The moving magnet's term: exact KL from the policy to the magnet at every step,

        L = mean_{t,b} sum_h KL(pi_h || rho_h) = sum_a pi(a) (log pi(a) - log rho(a))

    (summed over units for unit heads), rho constant. Magnetic mirror descent (Sokota et al.
    2023, "A Unified Approach to Reinforcement Learning, Quantal Response Equilibria, and
    Two-Player Zero-Sum Games", ICLR; eq. 3):

        pi_{k+1} = argmax_pi  E_pi[q_k] - alpha KL(pi || rho) - (1/eta) KL(pi || pi_k);

    with a fixed magnet rho its fixed point is the regularised (quantal response) equilibrium,
    alpha away from a Nash equilibrium. Replacing the magnet by the current policy every so
    many updates is R-NaD's outer loop (Perolat et al. 2022, "Mastering the Game of Stratego
    with Model-Free Multiagent Reinforcement Learning", Science, Sec. "R-NaD": the regularisation
    policy pi_reg := the fixed point of the last iteration; Perolat et al. 2021, ICML, Thm. 3:
    the sequence of fixed points converges to a Nash equilibrium in two-player zero-sum games),
    here as a loss term (MMD's form) rather than R-NaD's reward transformation
    r - eta log(pi/pi_reg). Unlike the entropy bonus (the uniform magnet) its floor moves with
    the policy, so the last iterate need not stay alpha away from a Nash equilibrium.
    Heads whose step has one legal action (poker's other player's turn) contribute 0.
    """
    if set(logits) != set(magnet_logits):
        raise ValueError("the policy and its magnet must have the same heads")
    total = 0.0
    for head in sorted(logits):
        chex.assert_equal_shape([logits[head], magnet_logits[head]])
        log_pi = jax.nn.log_softmax(logits[head])
        log_rho = jax.nn.log_softmax(jax.lax.stop_gradient(magnet_logits[head]))
        total = total + _sum_beyond_time_and_batch(jnp.sum(jnp.exp(log_pi) * (log_pi - log_rho), axis=-1))
    return jnp.mean(total)


def kl_to_behaviour_loss(target_log_probs: Logits, behaviour_log_probs: Logits
                         ) -> tuple[Array, dict[str, Array]]:
    """Magnetic mirror descent's proximal term toward the previous policy, estimated from the
    behaviour policy's log-probabilities of the actions it took (all the trajectories carry).

    MMD (Sokota et al. 2023, "A Unified Approach to Reinforcement Learning, Quantal Response
    Equilibria, and Two-Player Zero-Sum Games", ICLR; eq. (3) and Sec. 5):

        pi_{k+1} = argmax_pi  E_pi[q_k] - alpha KL(pi || magnet) - (1/eta) KL(pi || pi_k)

    With a uniform magnet, alpha KL(pi || uniform) = -alpha H(pi) + const: the entropy term
    (`entropy_weight` = alpha). This function is the other term, KL(pi || pi_k), with pi_k the
    behaviour policy mu that produced the data (the actors' parameters, refreshed every
    `param_refresh_seconds`: a lagged iterate of the learner, as in the paper's deep-RL
    implementation on PPO, whose "previous policy" is the one that collected the batch).
    Only mu(a_t | s_t) of the action taken is known, so per head h and step, with a_t ~ mu and
    rho = pi_h(a_t | s_t) / mu_h(a_t | s_t):

        k(rho) = rho log rho - (rho - 1)                  (>= 0, = 0 iff rho = 1)
        L = mean_{t,b} sum_h k(rho^h_t)                   (summed over units for unit heads)

    E_{a~mu}[rho log rho] = sum_a pi(a) log(pi(a)/mu(a)) = KL(pi || mu) and E_{a~mu}[rho - 1] = 0,
    so L is an unbiased estimate of KL(pi || mu) (the "f-divergence" control-variate form of
    Schulman 2020, "Approximating KL divergence"), as is its gradient
    d k / d log pi(a_t) = rho log rho. Steps where mu had one legal action (log pi = log mu = 0,
    e.g. poker's non-acting steps) contribute 0. mu is a constant.
    """
    if set(target_log_probs) != set(behaviour_log_probs):
        raise ValueError(f"heads differ: {sorted(target_log_probs)} vs {sorted(behaviour_log_probs)}")
    total = 0.0
    metrics = {}
    for head in sorted(target_log_probs):
        chex.assert_equal_shape([target_log_probs[head], behaviour_log_probs[head]])
        log_rho = target_log_probs[head] - jax.lax.stop_gradient(behaviour_log_probs[head])
        rho = jnp.exp(log_rho)
        k = jnp.mean(_sum_beyond_time_and_batch(rho * log_rho - (rho - 1.0)))
        total = total + k
        metrics[f"kl_behaviour/{head}"] = k
    return total, metrics


def gae_advantages(rewards: Array, discounts: Array, values: Array, bootstrap_value: Array,
                   lambda_: float = 0.95) -> Array:
    """Generalised advantage estimates [T, B, *U], each unit's from its own rewards and values
    (GAE eq. 16; rlax.truncated_generalized_advantage_estimation).

        delta_t = r_t + gamma_t V(s_{t+1}) - V(s_t);  A_t = sum_{k>=0} (prod_{i<k} gamma_{t+i} lambda) delta_{t+k}

    truncated at the end of the sequence (V(s_T) = bootstrap_value). Constant (no gradient).
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    all_values = jnp.concatenate([values, bootstrap_value[None]], axis=0)       # [T + 1, ...]
    T = values.shape[0]
    flat = [x.reshape(x.shape[0], -1) for x in
            (rewards, _expand_to(discounts, values.shape), all_values)]
    adv = jax.vmap(rlax.truncated_generalized_advantage_estimation,
                   in_axes=(1, 1, None, 1), out_axes=1)(flat[0], flat[1], lambda_, flat[2])
    return jax.lax.stop_gradient(adv.reshape((T, *values.shape[1:])))


def ppo_clip_policy_loss(target_log_probs: Logits, behaviour_log_probs: Logits, advantages: Array,
                         epsilon: float = 0.2) -> tuple[Array, dict[str, Array]]:
    """PPO clipped surrogate (PPO eq. 7; rlax.clipped_surrogate_pg_loss), OpenAI Five's loss,
    per unit i (OpenAI Five: each hero's own action and advantage):

        r^i_t = pi(a^i_t|s_t) / mu(a^i_t|s_t) = exp(sum_h log pi_h - log mu_h)   (unit i's whole
                action: its unit heads and the team heads)
        L = - mean_{t,b} sum_i min(r^i_t A^i_t, clip(r^i_t, 1 - eps, 1 + eps) A^i_t)

    The "old" policy is the behaviour policy that produced the data (as in asynchronous PPO).
    """
    _check_heads(target_log_probs, behaviour_log_probs, advantages)
    ratio = jnp.exp(_joint_log_ratio(target_log_probs, behaviour_log_probs, advantages))
    # rlax returns the mean over every element; sum over units = mean * |U|.
    loss = rlax.clipped_surrogate_pg_loss(ratio.reshape(-1), advantages.reshape(-1), epsilon)
    clipped = jnp.mean(jnp.abs(ratio - 1.0) > epsilon)
    return loss * _unit_count(advantages), {"ppo_clipped_fraction": clipped}


def log_prob(logits: Array, actions: Array) -> Array:
    """log pi(a | s) of integer actions [...] under logits [..., A]: sum_a onehot(a) log_softmax.
    A one-hot product, not a gather: its gradient is a product too, where a gather's is a
    scatter, slow to compile and to run on XLA's CPU backend (the heads have few actions)."""
    one_hot = jax.nn.one_hot(actions, logits.shape[-1], dtype=logits.dtype)
    return jnp.sum(one_hot * jax.nn.log_softmax(logits), axis=-1)


def side_log_probs(log_probs: Logits) -> Logits:
    """Per head, the log-probability of the whole side's action [T, B]: unit heads' summed over
    the units (the side's joint action of that head), team heads as they are."""
    return {h: _sum_beyond_time_and_batch(x) for h, x in log_probs.items()}


def pseudo_reward_losses(target_log_probs: Logits, behaviour_log_probs: Logits, rewards: Array,
                         active: Array, discounts: Array, values: Array, bootstrap_value: Array,
                         td_lambda: float = 0.8, vtrace_lambda: float = 1.0,
                         clip_rho_threshold: float = 1.0, clip_pg_rho_threshold: float = 1.0,
                         importance_correction: bool = True) -> tuple[Array, Array]:
    """The policy and value terms of the pseudo-rewards for following z (AlphaStar, Methods:
    "separate value functions and losses are computed for each of the pseudo-rewards"; each
    pseudo-reward is active in a game with probability 25%), summed over the K pseudo-rewards:

        L_pi = - mean_{t,b} sum_k a^k_t sum_h A^{k,h}_t log pi_h(a^h_t | s_t)
        L_V  =   mean_{t,b} sum_k a^k_t 0.5 (G^{lambda,k}_t - V^k(s_t))^2

    with r^k, V^k the k-th pseudo-reward and its own value head [T, B, K] (one per side, not
    per unit: z is the side's), a^k_t in {0, 1} [T, B, K] whether pseudo-reward k is active in
    the game of step t, A^{k,h} the V-trace advantage (`vtrace_advantages`) of r^k and V^k with
    head h's ratio of the side's whole action of that head (`side_log_probs`: unit heads'
    log-probs summed over units), and G^{lambda,k} the uncorrected TD(lambda) target
    (`lambda_returns`, as the main value). V^k's gradient comes from r^k alone.
    discounts [T, B]; bootstrap_value [B, K]."""
    _check_time_major(rewards, discounts, values, bootstrap_value)
    chex.assert_equal_shape([rewards, active])
    pi = side_log_probs(target_log_probs)
    mu = side_log_probs(behaviour_log_probs)
    like = values[..., None]  # [T, B, K, 1]
    log_pi = jnp.stack([pi[h] for h in sorted(pi)], -1)              # [T, B, H]
    log_mu = jnp.stack([mu[h] for h in sorted(mu)], -1)
    shape = values.shape + (log_pi.shape[-1],)                         # [T, B, K, H]
    log_pi = jnp.broadcast_to(log_pi[:, :, None], shape)
    log_rho = jax.lax.stop_gradient(log_pi - jnp.broadcast_to(log_mu[:, :, None], shape))
    if not importance_correction:
        log_rho = jnp.zeros_like(log_rho)
    _, advantages = vtrace_advantages(
        log_rho, jnp.broadcast_to(rewards[..., None], shape),
        jnp.broadcast_to(_expand_to(discounts, like.shape), shape),
        jnp.broadcast_to(jax.lax.stop_gradient(like), shape),
        jnp.broadcast_to(jax.lax.stop_gradient(bootstrap_value)[..., None], shape[1:]),
        vtrace_lambda, clip_rho_threshold, clip_pg_rho_threshold)
    T, B = values.shape[:2]
    active = jax.lax.stop_gradient(active.astype(values.dtype))
    policy = -jnp.sum(active[..., None] * advantages * log_pi) / (T * B)
    returns = lambda_returns(rewards, discounts, values, bootstrap_value, td_lambda)
    value = 0.5 * jnp.sum(active * jnp.square(returns - values)) / (T * B)
    return policy, value


def total_loss(config: LossConfig, logits: Logits, values: Array, bootstrap_value: Array,
               actions: dict[str, Array], behaviour_log_probs: Logits, rewards: Array,
               discounts: Array, teacher_logits: Logits | None = None,
               entropy_weight: Array | None = None, pseudo: dict | None = None,
               magnet_logits: Logits | None = None,
               kl_teacher_weight: Array | None = None) -> tuple[Array, dict[str, Array]]:
    """The weighted sum of the terms above, every weight from `config`:

        L = w_pi L_pi + w_upgo L_upgo + w_V L_TD(lambda) + w_H L_entropy + w_KL L_KL
            + w_mu L_KL(pi || mu) + alpha_rho L_KL(pi || rho)

    where L_pi is V-trace (`config.policy_loss == "vtrace"`), NeuRD on V-trace's advantage
    (`"neurd"`, `neurd_policy_loss`) or PPO-clip on GAE advantages,
    and the value loss is TD(lambda) or, with `config.value_target == "vtrace"`, V-trace;
    L_KL(pi || mu) (`kl_to_behaviour_loss`, MMD's proximal term) only when its weight > 0;
    L_KL(pi || rho) (`kl_to_magnet_loss`, the moving magnet) when `magnet_logits` are given and
    `config.magnet_weight` > 0.
    All inputs time-major over the `T` learning steps: `values`, `rewards` [T, B, *U] (one per
    unit, or [T, B]), `bootstrap_value` [B, *U], `discounts` [T, B] (the data's; multiplied by
    `config.discount`), unit heads' logits [T, B, *U, A] and team heads' [T, B, A] (module
    docstring). Each term is the sum over units of the unit's own term. `entropy_weight`, if
    given, replaces `config.entropy_weight` (the learner passes `entropy_schedule`'s value);
    `kl_teacher_weight`, if given, replaces `config.kl_teacher_weight` where that is > 0 (a
    population program's agent's own weight; `learners.update.shared_config`).
    `pseudo` (z's pseudo-rewards: {"reward", "active", "value" [T, B, K], "bootstrap" [B, K]})
    adds w_zpi L_pi^z + w_zV L_V^z (`pseudo_reward_losses`) when their weights are > 0.
    Returns (loss, metrics).
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    discounts = discounts * config.discount
    target_log_probs = {h: log_prob(logits[h], actions[h]) for h in logits}
    behaviour_log_probs = {h: behaviour_log_probs[h] for h in logits}
    metrics = {}
    if config.policy_loss == "vtrace":
        policy, pm = vtrace_policy_loss(
            target_log_probs, behaviour_log_probs, rewards, discounts, values, bootstrap_value,
            config.vtrace_lambda, config.clip_rho_threshold, config.clip_pg_rho_threshold,
            config.importance_correction)
    elif config.policy_loss == "neurd":
        policy, pm = neurd_policy_loss(
            logits, actions, target_log_probs, behaviour_log_probs, rewards, discounts, values,
            bootstrap_value, config.vtrace_lambda, config.clip_rho_threshold,
            config.clip_pg_rho_threshold, config.neurd_beta, config.neurd_clip)
    else:
        advantages = gae_advantages(rewards, discounts, values, bootstrap_value, config.gae_lambda)
        policy, pm = ppo_clip_policy_loss(target_log_probs, behaviour_log_probs, advantages,
                                          config.ppo_clip_epsilon)
    metrics.update(pm)
    terms = {"policy": (config.policy_weight, policy)}
    if config.upgo_weight:
        terms["upgo"] = (config.upgo_weight, upgo_policy_loss(
            target_log_probs, behaviour_log_probs, rewards, discounts, values, bootstrap_value,
            config.importance_correction, config.upgo_follow_forced))
    if config.value_target == "vtrace":
        value = vtrace_value_loss(target_log_probs, behaviour_log_probs, values, rewards,
                                  discounts, bootstrap_value, config.vtrace_lambda,
                                  config.clip_rho_threshold)
    else:
        value = td_lambda_value_loss(values, rewards, discounts, bootstrap_value, config.td_lambda)
    terms["value"] = (config.value_weight, value)
    if entropy_weight is None:
        entropy_weight = config.entropy_weight
    terms["entropy"] = (entropy_weight, entropy_loss(logits))
    metrics["entropy_weight"] = jnp.asarray(entropy_weight, jnp.float32)
    if config.kl_teacher_weight and teacher_logits is not None:
        kl = kl_to_teacher_loss(logits, teacher_logits, config.teacher_heads)
        terms["kl_teacher"] = (config.kl_teacher_weight if kl_teacher_weight is None else kl_teacher_weight, kl)
    if config.kl_behaviour_weight:
        kl_mu, km = kl_to_behaviour_loss(target_log_probs, behaviour_log_probs)
        terms["kl_behaviour"] = (config.kl_behaviour_weight, kl_mu)
        metrics.update(km)
    if config.magnet_weight and magnet_logits is not None:
        terms["kl_magnet"] = (config.magnet_weight, kl_to_magnet_loss(logits, magnet_logits))
    if pseudo is not None and (config.pseudo_policy_weight or config.pseudo_value_weight):
        z_policy, z_value = pseudo_reward_losses(
            target_log_probs, behaviour_log_probs, pseudo["reward"], pseudo["active"], discounts,
            pseudo["value"], pseudo["bootstrap"], config.td_lambda, config.vtrace_lambda,
            config.clip_rho_threshold, config.clip_pg_rho_threshold, config.importance_correction)
        terms["pseudo_policy"] = (config.pseudo_policy_weight, z_policy)
        terms["pseudo_value"] = (config.pseudo_value_weight, z_value)
        metrics["pseudo_active"] = jnp.mean(pseudo["active"])
    loss = 0.0
    for name, (weight, term) in terms.items():
        loss = loss + weight * term
        metrics[f"loss/{name}"] = term
    metrics["loss/total"] = loss
    return loss, metrics
