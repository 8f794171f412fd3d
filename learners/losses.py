"""Learning math: pure, time-major loss functions.

Shapes: `T` learning steps, `B` sequences. Per-step arrays are `[T, B]`, logits `[T, B, A]`,
`bootstrap_value` is `[B]` (V(s_T), the value of the step after the last one learnt on).
A policy is a dict head_name -> logits; heads are independent categoricals, so
log pi(a|s) = sum_h log pi_h(a^h|s). Conventions of `agents.trajectory`: r_t follows a_t,
gamma_t = 0 if the episode ended after step t, and the one-step target is
r_t + gamma_t V(s_{t+1}).

Sources: AlphaStar (Vinyals et al., Nature 2019, Methods "Value and policy updates"; seed
002), IMPALA (Espeholt et al. 2018, eq. 1 and Sec. 4.2), OpenAI Five (Berner et al. 2019,
Table 2; seed 003), PPO (Schulman et al. 2017, eq. 7), GAE (Schulman et al. 2016, eq. 16),
magnetic mirror descent (Sokota et al. 2023, eq. 3).
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import rlax

from learners.config import LossConfig

Array = Any
Logits = dict[str, Array]

# rlax works on single sequences [T]; map over the batch axis of [T, B] arrays.
_over_batch = dict(in_axes=1, out_axes=1)


def _check_time_major(rewards, discounts, values, bootstrap_value):
    chex.assert_rank([rewards, discounts, values, bootstrap_value], [2, 2, 2, 1])
    chex.assert_type([rewards, discounts, values, bootstrap_value], float)
    chex.assert_equal_shape([rewards, discounts, values])
    chex.assert_equal_shape_suffix([values, bootstrap_value], 1)


def _check_heads(target_log_probs: Logits, behaviour_log_probs: Logits, like: Array):
    if set(target_log_probs) != set(behaviour_log_probs):
        raise ValueError(f"heads differ: {sorted(target_log_probs)} vs {sorted(behaviour_log_probs)}")
    for head in target_log_probs:
        chex.assert_equal_shape([target_log_probs[head], behaviour_log_probs[head], like])


def _next_values(values: Array, bootstrap_value: Array) -> Array:
    """V(s_{t+1}) for t = 0..T-1, with V(s_T) = bootstrap_value."""
    return jnp.concatenate([values[1:], bootstrap_value[None]], axis=0)


def vtrace_advantages(log_rhos: Array, rewards: Array, discounts: Array, values: Array,
                      bootstrap_value: Array, lambda_: float = 1.0, clip_rho_threshold: float = 1.0,
                      clip_pg_rho_threshold: float = 1.0) -> tuple[Array, Array]:
    """V-trace targets v_s and policy-gradient advantages, [T, B] each (IMPALA eq. 1, Sec. 4.2).

        rho_t = min(rho_bar, pi/mu),  c_t = lambda min(1, pi/mu)
        delta_t = rho_t (r_t + gamma_t V(s_{t+1}) - V(s_t))
        v_s = V(s_s) + sum_{t >= s} (prod_{i=s}^{t-1} gamma_i c_i) delta_t
        A_s = min(rho_bar_pg, pi/mu) (r_s + gamma_s v_{s+1} - V(s_s)),  v_T = V(s_T)

    (with lambda < 1 rlax uses q_s = r_s + gamma_s (lambda v_{s+1} + (1 - lambda) V(s_{s+1}))).
    Computed with `rlax.vtrace_td_error_and_advantage`; no gradient flows through either output.
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    chex.assert_equal_shape([log_rhos, rewards])
    rhos = jnp.exp(log_rhos)
    out = jax.vmap(rlax.vtrace_td_error_and_advantage,
                   in_axes=(1, 1, 1, 1, 1, None, None, None), out_axes=1)(
        values, _next_values(values, bootstrap_value), rewards, discounts, rhos,
        lambda_, clip_rho_threshold, clip_pg_rho_threshold)
    targets = jax.lax.stop_gradient(out.errors + values)
    return targets, jax.lax.stop_gradient(out.pg_advantage)


def vtrace_policy_loss(target_log_probs: Logits, behaviour_log_probs: Logits, rewards: Array,
                       discounts: Array, values: Array, bootstrap_value: Array,
                       lambda_: float = 1.0, clip_rho_threshold: float = 1.0,
                       clip_pg_rho_threshold: float = 1.0,
                       importance_correction: bool = True) -> tuple[Array, dict[str, Array]]:
    """Multi-head V-trace policy-gradient loss (IMPALA; AlphaStar's per-head ratios).

        L = - mean_{t,b} sum_h A^h_t log pi_h(a^h_t | s_t)

    where A^h is `vtrace_advantages` computed with head h's own ratio pi_h(a^h)/mu_h(a^h):
    AlphaStar "assume[s] independence between the action type, delay, and all other arguments,
    and so update the components of the policy separately", which keeps a long, structured
    action from truncating the trace early. `importance_correction=False` sets every ratio
    to 1 (the uncorrected actor-critic baseline, for ablations).
    """
    _check_heads(target_log_probs, behaviour_log_probs, rewards)
    loss = 0.0
    metrics = {}
    for head in sorted(target_log_probs):
        log_pi = target_log_probs[head]
        log_rho = jax.lax.stop_gradient(log_pi - behaviour_log_probs[head])
        if not importance_correction:
            log_rho = jnp.zeros_like(log_rho)
        _, advantages = vtrace_advantages(log_rho, rewards, discounts, values, bootstrap_value,
                                          lambda_, clip_rho_threshold, clip_pg_rho_threshold)
        loss = loss - jnp.mean(advantages * log_pi)
        metrics[f"rho_mean/{head}"] = jnp.mean(jnp.exp(log_rho))
        metrics[f"rho_clipped_fraction/{head}"] = jnp.mean(log_rho > jnp.log(clip_pg_rho_threshold))
    return loss, metrics


def lambda_returns(rewards: Array, discounts: Array, values: Array, bootstrap_value: Array,
                   lambda_: float) -> Array:
    """Uncorrected lambda-returns G^lambda [T, B] (Sutton & Barto 12.1; rlax.lambda_returns).

        G_t = r_t + gamma_t ((1 - lambda) V(s_{t+1}) + lambda G_{t+1}),  G_T = V(s_T)

    No importance weights: AlphaStar updates the value "using TD(lambda)" with an
    "uncorrected update of the value function (which introduces bias but reduces variance)".
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    returns = jax.vmap(rlax.lambda_returns, in_axes=(1, 1, 1, None), out_axes=1)(
        rewards, discounts, _next_values(values, bootstrap_value), lambda_)
    return jax.lax.stop_gradient(returns)


def td_lambda_value_loss(values: Array, rewards: Array, discounts: Array, bootstrap_value: Array,
                         lambda_: float = 0.8) -> Array:
    """TD(lambda) value loss L = mean_{t,b} 0.5 (G^lambda_t - V(s_t))^2, G from `lambda_returns`.

    Via `rlax.td_lambda` (targets stop-gradient; the bootstrap value gets no gradient).
    AlphaStar's pseudocode uses lambda = 0.8.
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    errors = jax.vmap(rlax.td_lambda, in_axes=(1, 1, 1, 1, None), out_axes=1)(
        values, rewards, discounts,
        jax.lax.stop_gradient(_next_values(values, bootstrap_value)), lambda_)
    return 0.5 * jnp.mean(jnp.square(errors))


def vtrace_value_loss(target_log_probs: Logits, behaviour_log_probs: Logits, values: Array,
                      rewards: Array, discounts: Array, bootstrap_value: Array,
                      lambda_: float = 1.0, clip_rho_threshold: float = 1.0) -> Array:
    """V-trace value loss L = mean_{t,b} 0.5 (v_t - V(s_t))^2 (IMPALA Sec. 4.1), v_t the V-trace
    targets of `vtrace_advantages` with the whole action's ratio pi(a)/mu(a) (the product of the
    heads' ratios). The off-policy-corrected value of IMPALA, which AlphaStar replaced by the
    uncorrected TD(lambda) (Fig. 3i: "V-trace" vs "+ TD(lambda)"); for that ablation."""
    _check_heads(target_log_probs, behaviour_log_probs, rewards)
    log_rho = sum(jax.lax.stop_gradient(target_log_probs[h] - behaviour_log_probs[h])
                  for h in sorted(target_log_probs))
    targets, _ = vtrace_advantages(log_rho, rewards, discounts, values,
                                   jax.lax.stop_gradient(bootstrap_value), lambda_,
                                   clip_rho_threshold, clip_rho_threshold)
    return 0.5 * jnp.mean(jnp.square(targets - values))


def upgo_returns(rewards: Array, discounts: Array, values: Array, bootstrap_value: Array) -> Array:
    """Upgoing returns G [T, B] (AlphaStar, Methods "Value and policy updates").

        G_{T-1} = r_{T-1} + gamma_{T-1} V(s_T)
        G_t     = r_t + gamma_t * ( G_{t+1}     if Q(s_{t+1}, a_{t+1}) >= V(s_{t+1})
                                    V(s_{t+1})  otherwise )               for t < T-1
        Q(s_{t+1}, a_{t+1}) = r_{t+1} + gamma_{t+1} V(s_{t+2})   (AlphaStar's one-step target)

    with V(s_T) = `bootstrap_value`: the return keeps following the behaviour trajectory while
    its next action looks at least as good as average, and bootstraps as soon as it does not.
    Hand-written with a reverse `lax.scan`; no gradient flows through it.
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    next_values = _next_values(values, bootstrap_value)          # V(s_{t+1})
    one_step_q = rewards + discounts * next_values                # Q(s_t, a_t)
    last = one_step_q[-1]                                         # G_{T-1}

    def body(g_next, xs):
        r_t, gamma_t, v_next, q_next = xs
        g_t = r_t + gamma_t * jnp.where(q_next >= v_next, g_next, v_next)
        return g_t, g_t

    xs = (rewards[:-1], discounts[:-1], next_values[:-1], one_step_q[1:])
    _, earlier = jax.lax.scan(body, last, xs, reverse=True)
    return jax.lax.stop_gradient(jnp.concatenate([earlier, last[None]], axis=0))


def upgo_policy_loss(target_log_probs: Logits, behaviour_log_probs: Logits, rewards: Array,
                     discounts: Array, values: Array, bootstrap_value: Array,
                     importance_correction: bool = True) -> Array:
    """UPGO policy term (AlphaStar): L = - mean_{t,b} sum_h rho^h_t (G_t - V(s_t)) log pi_h(a^h_t|s_t)

    with G from `upgo_returns` and rho^h_t = min(pi_h(a^h_t|s_t) / mu_h(a^h_t|s_t), 1), each
    head with its own clipped ratio as for V-trace. rho and the advantage are constants.
    """
    _check_heads(target_log_probs, behaviour_log_probs, rewards)
    advantages = upgo_returns(rewards, discounts, values, bootstrap_value) - values
    advantages = jax.lax.stop_gradient(advantages)
    loss = 0.0
    for head in sorted(target_log_probs):
        log_pi = target_log_probs[head]
        rho = jnp.minimum(jnp.exp(jax.lax.stop_gradient(log_pi - behaviour_log_probs[head])), 1.0)
        if not importance_correction:
            rho = jnp.ones_like(rho)
        loss = loss - jnp.mean(rho * advantages * log_pi)
    return loss


def entropy(logits: Logits) -> Array:
    """Summed entropy of the heads, H = - sum_h sum_a pi_h(a) log pi_h(a), shape [T, B]."""
    total = 0.0
    for head in sorted(logits):
        log_p = jax.nn.log_softmax(logits[head])
        total = total - jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
    return total


def entropy_loss(logits: Logits) -> Array:
    """Entropy regularisation (A3C, Mnih et al. 2016; AlphaStar "standard entropy
    regularization loss"): L = - mean_{t,b} H(pi(.|s_t)). Minimising it raises the entropy."""
    return -jnp.mean(entropy(logits))


def kl_to_teacher_loss(logits: Logits, teacher_logits: Logits) -> Array:
    """KL towards a frozen teacher (AlphaStar's supervised policy):

        L = mean_{t,b} sum_h KL(pi_teacher,h || pi_h) = sum_a p_T(a) (log p_T(a) - log pi(a))

    as in AlphaStar's pseudocode (`kl(student_logits, teacher_logits)`). The teacher is constant.
    """
    if set(logits) != set(teacher_logits):
        raise ValueError("student and teacher must have the same heads")
    total = 0.0
    for head in sorted(logits):
        chex.assert_equal_shape([logits[head], teacher_logits[head]])
        log_t = jax.nn.log_softmax(jax.lax.stop_gradient(teacher_logits[head]))
        log_s = jax.nn.log_softmax(logits[head])
        total = total + jnp.sum(jnp.exp(log_t) * (log_t - log_s), axis=-1)
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
        L = mean_{t,b} sum_h k(rho^h_t)

    E_{a~mu}[rho log rho] = sum_a pi(a) log(pi(a)/mu(a)) = KL(pi || mu) and E_{a~mu}[rho - 1] = 0,
    so L is an unbiased estimate of KL(pi || mu) (the "f-divergence" control-variate form of
    Schulman 2020, "Approximating KL divergence"), as is its gradient
    d k / d log pi(a_t) = rho log rho. Steps where mu had one legal action (log pi = log mu = 0,
    e.g. poker's non-acting steps) contribute 0. mu is a constant.
    """
    _check_heads(target_log_probs, behaviour_log_probs, next(iter(target_log_probs.values())))
    total = 0.0
    metrics = {}
    for head in sorted(target_log_probs):
        log_rho = target_log_probs[head] - jax.lax.stop_gradient(behaviour_log_probs[head])
        rho = jnp.exp(log_rho)
        k = rho * log_rho - (rho - 1.0)
        total = total + jnp.mean(k)
        metrics[f"kl_behaviour/{head}"] = jnp.mean(k)
    return total, metrics


def gae_advantages(rewards: Array, discounts: Array, values: Array, bootstrap_value: Array,
                   lambda_: float = 0.95) -> Array:
    """Generalised advantage estimates [T, B] (GAE eq. 16; rlax.truncated_generalized_advantage_estimation).

        delta_t = r_t + gamma_t V(s_{t+1}) - V(s_t);  A_t = sum_{k>=0} (prod_{i<k} gamma_{t+i} lambda) delta_{t+k}

    truncated at the end of the sequence (V(s_T) = bootstrap_value). Constant (no gradient).
    """
    _check_time_major(rewards, discounts, values, bootstrap_value)
    all_values = jnp.concatenate([values, bootstrap_value[None]], axis=0)
    adv = jax.vmap(rlax.truncated_generalized_advantage_estimation,
                   in_axes=(1, 1, None, 1), out_axes=1)(rewards, discounts, lambda_, all_values)
    return jax.lax.stop_gradient(adv)


def ppo_clip_policy_loss(target_log_probs: Logits, behaviour_log_probs: Logits, advantages: Array,
                         epsilon: float = 0.2) -> tuple[Array, dict[str, Array]]:
    """PPO clipped surrogate (PPO eq. 7; rlax.clipped_surrogate_pg_loss), OpenAI Five's loss:

        r_t = pi(a_t|s_t) / mu(a_t|s_t) = exp(sum_h log pi_h - log mu_h)   (the joint action)
        L = - mean_{t,b} min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)

    The "old" policy is the behaviour policy that produced the data (as in asynchronous PPO).
    """
    _check_heads(target_log_probs, behaviour_log_probs, advantages)
    log_ratio = sum(target_log_probs[h] - behaviour_log_probs[h] for h in sorted(target_log_probs))
    ratio = jnp.exp(log_ratio)
    loss = rlax.clipped_surrogate_pg_loss(ratio.reshape(-1), advantages.reshape(-1), epsilon)
    clipped = jnp.mean(jnp.abs(ratio - 1.0) > epsilon)
    return loss, {"ppo_clipped_fraction": clipped}


def total_loss(config: LossConfig, logits: Logits, values: Array, bootstrap_value: Array,
               actions: dict[str, Array], behaviour_log_probs: Logits, rewards: Array,
               discounts: Array, teacher_logits: Logits | None = None
               ) -> tuple[Array, dict[str, Array]]:
    """The weighted sum of the terms above, every weight from `config`:

        L = w_pi L_pi + w_upgo L_upgo + w_V L_TD(lambda) + w_H L_entropy + w_KL L_KL
            + w_mu L_KL(pi || mu)

    where L_pi is V-trace (`config.policy_loss == "vtrace"`) or PPO-clip on GAE advantages,
    and the value loss is TD(lambda) or, with `config.value_target == "vtrace"`, V-trace;
    L_KL(pi || mu) (`kl_to_behaviour_loss`, MMD's proximal term) only when its weight > 0.
    All inputs time-major over the `T` learning steps; `discounts` are the data's and get
    multiplied by `config.discount`. Returns (loss, metrics).
    """
    chex.assert_rank([values, rewards, discounts], 2)
    discounts = discounts * config.discount
    target_log_probs = {
        h: jnp.take_along_axis(jax.nn.log_softmax(logits[h]),
                               actions[h][..., None].astype(jnp.int32), axis=-1)[..., 0]
        for h in logits}
    behaviour_log_probs = {h: behaviour_log_probs[h] for h in logits}
    metrics = {}
    if config.policy_loss == "vtrace":
        policy, pm = vtrace_policy_loss(
            target_log_probs, behaviour_log_probs, rewards, discounts, values, bootstrap_value,
            config.vtrace_lambda, config.clip_rho_threshold, config.clip_pg_rho_threshold,
            config.importance_correction)
    else:
        advantages = gae_advantages(rewards, discounts, values, bootstrap_value, config.gae_lambda)
        policy, pm = ppo_clip_policy_loss(target_log_probs, behaviour_log_probs, advantages,
                                          config.ppo_clip_epsilon)
    metrics.update(pm)
    terms = {"policy": (config.policy_weight, policy)}
    if config.upgo_weight:
        terms["upgo"] = (config.upgo_weight, upgo_policy_loss(
            target_log_probs, behaviour_log_probs, rewards, discounts, values, bootstrap_value,
            config.importance_correction))
    if config.value_target == "vtrace":
        value = vtrace_value_loss(target_log_probs, behaviour_log_probs, values, rewards,
                                  discounts, bootstrap_value, config.vtrace_lambda,
                                  config.clip_rho_threshold)
    else:
        value = td_lambda_value_loss(values, rewards, discounts, bootstrap_value, config.td_lambda)
    terms["value"] = (config.value_weight, value)
    terms["entropy"] = (config.entropy_weight, entropy_loss(logits))
    if config.kl_teacher_weight and teacher_logits is not None:
        terms["kl_teacher"] = (config.kl_teacher_weight, kl_to_teacher_loss(logits, teacher_logits))
    if config.kl_behaviour_weight:
        kl_mu, km = kl_to_behaviour_loss(target_log_probs, behaviour_log_probs)
        terms["kl_behaviour"] = (config.kl_behaviour_weight, kl_mu)
        metrics.update(km)
    loss = 0.0
    for name, (weight, term) in terms.items():
        loss = loss + weight * term
        metrics[f"loss/{name}"] = term
    metrics["loss/total"] = loss
    return loss, metrics
