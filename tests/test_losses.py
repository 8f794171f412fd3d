"""Every loss against a slow numpy loop written from the paper's formula, plus hand-worked cases.

The numpy references below never call `learners.losses`; they index time and batch one
element at a time, the way the formulas are written in the papers.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from learners import losses

# ----------------------------------------------------------------------------- references


def np_vtrace(log_rhos, r, g, v, boot, lam=1.0, rho_bar=1.0, pg_rho_bar=1.0):
    """IMPALA eq. 1 (forward sum) and Sec. 4.2, per-step discounts; returns (v_s, A_s)."""
    T, B = r.shape
    rho = np.exp(log_rhos)
    vs = np.zeros((T, B))
    adv = np.zeros((T, B))
    for b in range(B):
        V = list(v[:, b]) + [boot[b]]
        for s in range(T):
            total = V[s]
            for t in range(s, T):
                coef = 1.0
                for i in range(s, t):
                    coef *= g[i, b] * lam * min(1.0, rho[i, b])
                delta = min(rho_bar, rho[t, b]) * (r[t, b] + g[t, b] * V[t + 1] - V[t])
                total += coef * delta
            vs[s, b] = total
        for s in range(T):
            if s + 1 < T:
                nxt = lam * vs[s + 1, b] + (1 - lam) * V[s + 1]
            else:
                nxt = V[T]
            adv[s, b] = min(pg_rho_bar, rho[s, b]) * (r[s, b] + g[s, b] * nxt - V[s])
    return vs, adv


def np_lambda_returns(r, g, v, boot, lam):
    """Forward view (Sutton & Barto eq. 12.9, truncated): mixture of n-step returns."""
    T, B = r.shape
    out = np.zeros((T, B))
    for b in range(B):
        V = list(v[:, b]) + [boot[b]]

        def n_step(t, n, b=b, V=V):
            ret, disc = 0.0, 1.0
            for k in range(n):
                ret += disc * r[t + k, b]
                disc *= g[t + k, b]
            return ret + disc * V[t + n]

        for t in range(T):
            horizon = T - t
            total = sum((1 - lam) * lam ** (n - 1) * n_step(t, n) for n in range(1, horizon))
            out[t, b] = total + lam ** (horizon - 1) * n_step(t, horizon)
    return out


def np_upgo(r, g, v, boot, chose=None):
    """The issue's formula, one element at a time; `chose` [T, B] (None: all True): a step
    where the agent made no choice is followed whatever its one-step Q says."""
    T, B = r.shape
    chose = np.ones((T, B), bool) if chose is None else chose
    G = np.zeros((T, B))
    for b in range(B):
        V = list(v[:, b]) + [boot[b]]
        G[T - 1, b] = r[T - 1, b] + g[T - 1, b] * V[T]
        for t in range(T - 2, -1, -1):
            q_next = r[t + 1, b] + g[t + 1, b] * V[t + 2]
            follow = G[t + 1, b] if q_next >= V[t + 1] or not chose[t + 1, b] else V[t + 1]
            G[t, b] = r[t, b] + g[t, b] * follow
    return G


def np_gae(r, g, v, boot, lam):
    T, B = r.shape
    A = np.zeros((T, B))
    for b in range(B):
        V = list(v[:, b]) + [boot[b]]
        for t in range(T):
            coef = 1.0
            for k in range(t, T):
                A[t, b] += coef * (r[k, b] + g[k, b] * V[k + 1] - V[k])
                coef *= g[k, b] * lam
    return A


def np_log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def np_entropy(logits):
    T, B = next(iter(logits.values())).shape[:2]
    H = np.zeros((T, B))
    for head in logits:
        lp = np_log_softmax(logits[head])
        for t in range(T):
            for b in range(B):
                H[t, b] -= sum(np.exp(lp[t, b, a]) * lp[t, b, a] for a in range(lp.shape[-1]))
    return H


def np_kl(student, teacher):
    total = 0.0
    T, B = next(iter(student.values())).shape[:2]
    for head in student:
        ls, lt = np_log_softmax(student[head]), np_log_softmax(teacher[head])
        for t in range(T):
            for b in range(B):
                total += sum(np.exp(lt[t, b, a]) * (lt[t, b, a] - ls[t, b, a])
                             for a in range(ls.shape[-1]))
    return total / (T * B)


def random_case(seed, T=6, B=4, heads=(("a", 3), ("b", 5))):
    rng = np.random.default_rng(seed)
    logits = {h: rng.normal(size=(T, B, n)).astype(np.float32) * 1.5 for h, n in heads}
    mu_logits = {h: rng.normal(size=(T, B, n)).astype(np.float32) * 1.5 for h, n in heads}
    actions = {h: rng.integers(0, n, size=(T, B)).astype(np.int32) for h, n in heads}

    def chosen(lg, h):
        return np.take_along_axis(np_log_softmax(lg[h]), actions[h][..., None], -1)[..., 0]

    log_pi = {h: chosen(logits, h).astype(np.float32) for h, _ in heads}
    log_mu = {h: chosen(mu_logits, h).astype(np.float32) for h, _ in heads}
    r = rng.normal(size=(T, B)).astype(np.float32)
    g = rng.choice([1.0, 1.0, 0.9, 0.0], size=(T, B)).astype(np.float32)
    v = rng.normal(size=(T, B)).astype(np.float32)
    boot = rng.normal(size=(B,)).astype(np.float32)
    return dict(logits=logits, mu_logits=mu_logits, actions=actions, log_pi=log_pi,
                log_mu=log_mu, r=r, g=g, v=v, boot=boot)


def f32(x):
    return np.asarray(x, np.float32)


# ----------------------------------------------------------------------------- V-trace


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("lam,rho_bar,pg_rho_bar", [(1.0, 1.0, 1.0), (0.9, 2.0, 0.5)])
def test_vtrace_random(seed, lam, rho_bar, pg_rho_bar):
    c = random_case(seed)
    log_rho = c["log_pi"]["a"] - c["log_mu"]["a"]
    vs, adv = losses.vtrace_advantages(log_rho, c["r"], c["g"], c["v"], c["boot"],
                                       lam, rho_bar, pg_rho_bar)
    ref_vs, ref_adv = np_vtrace(log_rho, c["r"], c["g"], c["v"], c["boot"], lam, rho_bar,
                                pg_rho_bar)
    np.testing.assert_allclose(vs, ref_vs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)


def test_vtrace_hand_worked_episode_end_and_clipping():
    # V = [0.5, 0.2, 0.4], V(s_3) = 1; the episode ends after step 1 (gamma_1 = 0);
    # rho = [2 (clipped to 1), 0.5 (below the clip), 1].
    # delta = [1*(0 + 0.2 - 0.5), 0.5*(1 + 0 - 0.2), 1*(0 + 1 - 0.4)] = [-0.3, 0.4, 0.6]
    # v_2 = 0.4 + 0.6 = 1.0; v_1 = 0.2 + 0.4 + 0 = 0.6; v_0 = 0.5 - 0.3 + 1*1*(0.6 - 0.2) = 0.6
    # A_0 = 1*(0 + 0.6 - 0.5) = 0.1; A_1 = 0.5*(1 + 0 - 0.2) = 0.4; A_2 = 1*(0 + 1 - 0.4) = 0.6
    v = f32([[0.5], [0.2], [0.4]])
    r = f32([[0.0], [1.0], [0.0]])
    g = f32([[1.0], [0.0], [1.0]])
    log_rho = f32(np.log([[2.0], [0.5], [1.0]]))
    vs, adv = losses.vtrace_advantages(log_rho, r, g, v, f32([1.0]))
    np.testing.assert_allclose(vs[:, 0], [0.6, 0.6, 1.0], atol=1e-6)
    np.testing.assert_allclose(adv[:, 0], [0.1, 0.4, 0.6], atol=1e-6)


def test_vtrace_policy_loss_per_head_ratios_and_gradient():
    c = random_case(2)
    T, B = c["r"].shape

    def loss_fn(log_pi):
        return losses.vtrace_policy_loss(log_pi, c["log_mu"], c["r"], c["g"], c["v"], c["boot"])[0]

    log_pi = {h: jnp.asarray(x) for h, x in c["log_pi"].items()}
    expected, grads = 0.0, {}
    for h in log_pi:
        _, adv = np_vtrace(c["log_pi"][h] - c["log_mu"][h], c["r"], c["g"], c["v"], c["boot"])
        expected -= (adv * c["log_pi"][h]).sum() / (T * B)
        grads[h] = -adv / (T * B)
    np.testing.assert_allclose(loss_fn(log_pi), expected, rtol=1e-4, atol=1e-5)
    got = jax.grad(loss_fn)(log_pi)
    for h in log_pi:  # the advantage (and its ratio) is a constant: d/dlog pi = -A/(TB)
        np.testing.assert_allclose(got[h], grads[h], rtol=1e-4, atol=1e-6)


def test_vtrace_without_correction_is_on_policy_actor_critic():
    c = random_case(3)
    zero = {h: np.zeros_like(x) for h, x in c["log_pi"].items()}
    uncorrected = losses.vtrace_policy_loss(c["log_pi"], c["log_mu"], c["r"], c["g"], c["v"],
                                            c["boot"], importance_correction=False)[0]
    _, adv = np_vtrace(zero["a"], c["r"], c["g"], c["v"], c["boot"])
    expected = -sum((adv * c["log_pi"][h]).mean() for h in c["log_pi"])
    np.testing.assert_allclose(uncorrected, expected, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- TD(lambda)


@pytest.mark.parametrize("seed,lam", [(0, 0.8), (1, 1.0), (2, 0.0)])
def test_lambda_returns_random(seed, lam):
    c = random_case(seed)
    got = losses.lambda_returns(c["r"], c["g"], c["v"], c["boot"], lam)
    np.testing.assert_allclose(got, np_lambda_returns(c["r"], c["g"], c["v"], c["boot"], lam),
                               rtol=1e-4, atol=1e-4)


def test_lambda_returns_hand_worked():
    # lambda = 0.5, r = [1, 2], V(s_1) = 3, bootstrap V(s_2) = 4:
    # G_1 = 2 + 4 = 6, G_0 = 1 + (0.5 * 3 + 0.5 * 6) = 5.5 (truncation with bootstrap);
    # if the episode ends after step 0, G_0 = 1.
    r, v, boot = f32([[1.0, 1.0], [2.0, 2.0]]), f32([[0.0, 0.0], [3.0, 3.0]]), f32([4.0, 4.0])
    g = f32([[1.0, 0.0], [1.0, 1.0]])
    got = losses.lambda_returns(r, g, v, boot, 0.5)
    np.testing.assert_allclose(got, [[5.5, 1.0], [6.0, 6.0]], atol=1e-6)


def test_td_lambda_value_loss_and_gradient():
    c = random_case(4)
    T, B = c["r"].shape
    G = np_lambda_returns(c["r"], c["g"], c["v"], c["boot"], 0.8)
    loss, grad = jax.value_and_grad(
        lambda v: losses.td_lambda_value_loss(v, c["r"], c["g"], c["boot"], 0.8))(c["v"])
    np.testing.assert_allclose(loss, 0.5 * ((G - c["v"]) ** 2).mean(), rtol=1e-4)
    np.testing.assert_allclose(grad, -(G - c["v"]) / (T * B), rtol=1e-3, atol=1e-6)


def test_vtrace_value_loss_uses_the_whole_actions_ratio_and_gradient():
    c = random_case(5)
    T, B = c["r"].shape
    # the whole action's ratio: the product of the heads' ratios
    log_rho = sum(c["log_pi"][h] - c["log_mu"][h] for h in c["log_pi"])
    vs, _ = np_vtrace(log_rho, c["r"], c["g"], c["v"], c["boot"], 0.9, 1.0, 1.0)
    loss, grad = jax.value_and_grad(lambda v: losses.vtrace_value_loss(
        c["log_pi"], c["log_mu"], v, c["r"], c["g"], c["boot"], 0.9, 1.0))(c["v"])
    np.testing.assert_allclose(loss, 0.5 * ((vs - c["v"]) ** 2).mean(), rtol=1e-4)
    np.testing.assert_allclose(grad, -(vs - c["v"]) / (T * B), rtol=1e-3, atol=1e-6)
    # differs from TD(lambda) whenever the policies differ
    td = losses.td_lambda_value_loss(c["v"], c["r"], c["g"], c["boot"], 0.9)
    assert abs(float(td) - float(loss)) > 1e-3
    # in total_loss, value_target selects it
    cfg = losses.LossConfig(value_target="vtrace", vtrace_lambda=0.9)
    _, metrics = losses.total_loss(cfg, c["logits"], c["v"], c["boot"], c["actions"], c["log_mu"],
                                   c["r"], c["g"])
    np.testing.assert_allclose(metrics["loss/value"], loss, rtol=1e-5)
    with pytest.raises(ValueError, match="value_target"):
        losses.LossConfig(value_target="mc")


# ----------------------------------------------------------------------------- UPGO


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_upgo_returns_random(seed):
    c = random_case(seed, T=8, B=5)
    got = losses.upgo_returns(c["r"], c["g"], c["v"], c["boot"])
    np.testing.assert_allclose(got, np_upgo(c["r"], c["g"], c["v"], c["boot"]), rtol=1e-5,
                               atol=1e-5)


def test_upgo_returns_hand_worked():
    # column 0: V = [0, 1, 2], V(s_3) = 0.5, r = [0, 0, 1], no episode end.
    #   G_2 = 1 + 0.5 = 1.5 (truncation: bootstrap)
    #   t=1: Q(s_2, a_2) = 1 + 0.5 = 1.5 < V(s_2) = 2 -> bootstrap: G_1 = 0 + V(s_2) = 2
    #   t=0: Q(s_1, a_1) = 0 + V(s_2) = 2 >= V(s_1) = 1 -> follow: G_0 = 0 + G_1 = 2
    # column 1: same values, r = [0, 3, 1], the episode ends after step 1.
    #   G_2 = 1.5; G_1 = 3 + 0 * (...) = 3; Q(s_1, a_1) = 3 + 0 >= 1 -> G_0 = 0 + G_1 = 3
    v = f32([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    r = f32([[0.0, 0.0], [0.0, 3.0], [1.0, 1.0]])
    g = f32([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    got = losses.upgo_returns(r, g, v, f32([0.5, 0.5]))
    np.testing.assert_allclose(got, [[2.0, 3.0], [2.0, 3.0], [1.5, 1.5]], atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_upgo_returns_follow_the_steps_without_a_choice(seed):
    c = random_case(seed, T=8, B=5)
    chose = np.random.default_rng(seed + 10).random((8, 5)) < 0.5
    got = losses.upgo_returns(c["r"], c["g"], c["v"], c["boot"], jnp.asarray(chose))
    want = np_upgo(c["r"], c["g"], c["v"], c["boot"], chose)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(want, np_upgo(c["r"], c["g"], c["v"], c["boot"]))  # the mask matters here


def test_upgo_returns_hand_worked_turn_based():
    # A poker-like column: the agent raises at t=0 (V(s_0) = 0), the opponent replies at t=1
    # (the agent's step without a choice, V(s_1) = 0), the agent calls at t=2 (V(s_2) = -1:
    # the opponent re-raised, a bad reply), and wins 1 at the end (r_2 = 1, episode ends).
    #   G_2 = 1
    #   t=1: Q(s_2, a_2) = 1 >= V(s_2) = -1 -> follow: G_1 = G_2 = 1
    #   t=0: Q(s_1, a_1) = 0 + V(s_2) = -1 < V(s_1) = 0. AlphaStar's rule bootstraps,
    #        G_0 = V(s_1) = 0, forgetting the bad reply; with no choice at t=1 it follows,
    #        G_0 = G_1 = 1.
    # A second column: the opponent folds at t=1 (V(s_2) = 2 after it, r_2 = 2): both rules
    # follow, G_0 = 2. AlphaStar's rule credits the raise with the good reply (2) but not the
    # bad one (0 instead of 1): the optimism this rule removes.
    v = f32([[0.0, 0.0], [0.0, 0.0], [-1.0, 2.0]])
    r = f32([[0.0, 0.0], [0.0, 0.0], [1.0, 2.0]])
    g = f32([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    chose = jnp.asarray([[True, True], [False, False], [True, True]])
    alphastar = losses.upgo_returns(r, g, v, f32([0.0, 0.0]))
    followed = losses.upgo_returns(r, g, v, f32([0.0, 0.0]), chose)
    np.testing.assert_allclose(alphastar[:, 0], [0.0, 1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(followed[:, 0], [1.0, 1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(alphastar[:, 1], [2.0, 2.0, 2.0], atol=1e-6)
    np.testing.assert_allclose(followed[:, 1], [2.0, 2.0, 2.0], atol=1e-6)


def test_upgo_policy_loss_reads_a_step_without_a_choice_from_the_behaviour_log_probs():
    """follow_forced: a step where every head's behaviour log-probability is 0 (mu = 1, as at
    poker's non-acting steps) is not a choice; others are. Checked against the numpy loop."""
    c = random_case(7, T=8, B=5)
    forced = np.random.default_rng(3).random((8, 5)) < 0.4
    for h in c["log_mu"]:
        c["log_mu"][h] = np.where(forced, 0.0, c["log_mu"][h]).astype(np.float32)
    T, B = c["r"].shape
    for follow, chose in ((False, None), (True, ~forced)):
        G = np_upgo(c["r"], c["g"], c["v"], c["boot"], chose)
        expected = 0.0
        for h in c["log_pi"]:
            rho = np.minimum(np.exp(c["log_pi"][h] - c["log_mu"][h]), 1.0)
            expected -= (rho * (G - c["v"]) * c["log_pi"][h]).sum() / (T * B)
        got = losses.upgo_policy_loss(c["log_pi"], c["log_mu"], c["r"], c["g"], c["v"], c["boot"],
                                      follow_forced=follow)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=str(follow))


def test_upgo_policy_loss_rho_above_and_below_clip():
    c = random_case(5)
    T, B = c["r"].shape
    # make head "a" have ratios far above 1 and head "b" far below 1 on some steps
    c["log_mu"]["a"] = c["log_pi"]["a"] - 1.0
    c["log_mu"]["b"] = c["log_pi"]["b"] + 1.0
    G = np_upgo(c["r"], c["g"], c["v"], c["boot"])
    expected, grads = 0.0, {}
    for h in c["log_pi"]:
        rho = np.minimum(np.exp(c["log_pi"][h] - c["log_mu"][h]), 1.0)
        expected -= (rho * (G - c["v"]) * c["log_pi"][h]).sum() / (T * B)
        grads[h] = -rho * (G - c["v"]) / (T * B)

    def loss_fn(log_pi):
        return losses.upgo_policy_loss(log_pi, c["log_mu"], c["r"], c["g"], c["v"], c["boot"])

    log_pi = {h: jnp.asarray(x) for h, x in c["log_pi"].items()}
    np.testing.assert_allclose(loss_fn(log_pi), expected, rtol=1e-4, atol=1e-5)
    got = jax.grad(loss_fn)(log_pi)
    for h in grads:
        np.testing.assert_allclose(got[h], grads[h], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["a"], -(G - c["v"]) / (T * B), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["b"], -np.exp(-1.0) * (G - c["v"]) / (T * B), rtol=1e-4,
                               atol=1e-6)


# ----------------------------------------------------------------------------- entropy, KL


def test_entropy_and_kl_random():
    c = random_case(6)
    np.testing.assert_allclose(losses.entropy_loss(c["logits"]), -np_entropy(c["logits"]).mean(),
                               rtol=1e-5)
    np.testing.assert_allclose(losses.kl_to_teacher_loss(c["logits"], c["mu_logits"]),
                               np_kl(c["logits"], c["mu_logits"]), rtol=1e-4)
    np.testing.assert_allclose(losses.kl_to_teacher_loss(c["logits"], c["logits"]), 0.0,
                               atol=1e-6)


def test_kl_to_teacher_on_chosen_heads_is_the_sum_over_those_heads_only():
    c = random_case(7, heads=(("a", 3), ("b", 5), ("pick", 3)))
    only = lambda d, hs: {h: d[h] for h in hs}  # noqa: E731
    expected = np_kl(only(c["logits"], "ab"), only(c["mu_logits"], "ab"))
    got = losses.kl_to_teacher_loss(c["logits"], c["mu_logits"], ("a", "b"))
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    # the head left out gets no gradient; the others get the full-KL gradient, pi - p_T
    grad = jax.grad(lambda lg: losses.kl_to_teacher_loss(lg, c["mu_logits"], ("a", "b")))(c["logits"])
    np.testing.assert_array_equal(grad["pick"], 0.0)
    T, B = c["r"].shape
    pi, p_t = (np.exp(np_log_softmax(x["a"])) for x in (c["logits"], c["mu_logits"]))
    np.testing.assert_allclose(grad["a"], (pi - p_t) / (T * B), rtol=1e-4, atol=1e-6)
    # in total_loss: the weight times the chosen heads' KL; an unknown head names the heads
    args = (c["logits"], c["v"], c["boot"], c["actions"], c["log_mu"], c["r"], c["g"])
    _, m = losses.total_loss(losses.LossConfig(kl_teacher_weight=0.1, kl_teacher_heads="a, b"),
                             *args, teacher_logits=c["mu_logits"])
    np.testing.assert_allclose(m["loss/kl_teacher"], expected, rtol=1e-4)
    with pytest.raises(ValueError, match="names target, not a head.*its heads: a, b, pick"):
        losses.kl_to_teacher_loss(c["logits"], c["mu_logits"], ("a", "target"))
    with pytest.raises(ValueError, match="kl_teacher_heads must be head names"):
        losses.LossConfig(kl_teacher_heads="a,,b")


def test_entropy_hand_worked_with_masked_action():
    # uniform over 4 legal actions: H = log 4; a masked (-1e9) fifth action adds nothing
    logits = {"a": f32([[[0.0, 0.0, 0.0, 0.0, -1e9]]])}
    np.testing.assert_allclose(losses.entropy_loss(logits), -np.log(4.0), rtol=1e-6)
    # KL(teacher=[1/2, 1/2] || student=[1, 0]-ish) is large; KL(one-hot || uniform) = log 2
    teacher = {"a": f32([[[10.0, -1e9]]])}
    student = {"a": f32([[[0.0, 0.0]]])}
    np.testing.assert_allclose(losses.kl_to_teacher_loss(student, teacher), np.log(2.0), rtol=1e-5)


def np_kl_behaviour(log_pi, log_mu):
    """mean_{t,b} sum_h [rho log rho - (rho - 1)], rho = pi_h(a_t) / mu_h(a_t), element by element."""
    T, B = next(iter(log_pi.values())).shape
    total = 0.0
    for h in log_pi:
        for t in range(T):
            for b in range(B):
                rho = np.exp(float(log_pi[h][t, b]) - float(log_mu[h][t, b]))
                total += rho * np.log(rho) - (rho - 1.0)
    return total / (T * B)


def test_kl_to_behaviour_hand_worked_value_and_gradient():
    # rho = 0.5 / 0.25 = 2: 2 ln 2 - 1 = 0.386294; rho = 0.5: 0.5 ln 0.5 + 0.5 = 0.153426;
    # rho = 1 (and a non-acting step, log pi = log mu = 0): 0. Mean over the 4 steps.
    log_pi = {"a": f32(np.log([[0.5], [0.25], [0.3], [1.0]]))}
    log_mu = {"a": f32(np.log([[0.25], [0.5], [0.3], [1.0]]))}
    got, metrics = losses.kl_to_behaviour_loss(log_pi, log_mu)
    np.testing.assert_allclose(got, (0.386294 + 0.153426) / 4, rtol=1e-5)
    np.testing.assert_allclose(metrics["kl_behaviour/a"], got, rtol=1e-6)
    # d/d log pi = rho log rho / (T B): [2 ln 2, 0.5 ln 0.5, 0, 0] / 4; mu gets no gradient
    grad_pi, grad_mu = jax.grad(lambda lp, lm: losses.kl_to_behaviour_loss(lp, lm)[0],
                                argnums=(0, 1))(log_pi, log_mu)
    np.testing.assert_allclose(grad_pi["a"][:, 0], [1.386294 / 4, -0.346574 / 4, 0.0, 0.0],
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad_mu["a"], 0.0)


def test_kl_to_behaviour_random_against_loop():
    c = random_case(10)
    got, _ = losses.kl_to_behaviour_loss(c["log_pi"], c["log_mu"])
    np.testing.assert_allclose(got, np_kl_behaviour(c["log_pi"], c["log_mu"]), rtol=1e-5)


def test_kl_to_behaviour_is_unbiased_for_kl_pi_mu_and_its_gradient():
    # Averaged over a ~ mu (exactly: weight each action's one-sample loss by mu(a)), the
    # estimate is KL(pi || mu) = sum_a pi log(pi / mu), and its gradient in pi's logits z is
    # the exact one, d KL / d z_j = pi_j (log(pi_j / mu_j) - KL).
    z = f32([0.3, -1.2, 0.8])
    mu = np.array([0.5, 0.2, 0.3])
    pi = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    kl = sum(pi[a] * np.log(pi[a] / mu[a]) for a in range(3))

    def expected_loss(z):
        log_p = jax.nn.log_softmax(z)
        return sum(mu[a] * losses.kl_to_behaviour_loss(
            {"a": log_p[a].reshape(1, 1)}, {"a": f32(np.log(mu[a])).reshape(1, 1)})[0]
            for a in range(3))

    np.testing.assert_allclose(expected_loss(z), kl, rtol=1e-5)
    np.testing.assert_allclose(jax.grad(expected_loss)(z), pi * (np.log(pi / mu) - kl),
                               rtol=1e-4, atol=1e-6)


def test_total_loss_adds_kl_to_behaviour_only_with_weight():
    c = random_case(11)
    args = (c["logits"], c["v"], c["boot"], c["actions"], c["log_mu"], c["r"], c["g"])
    base, m0 = losses.total_loss(losses.LossConfig(), *args)
    got, m1 = losses.total_loss(losses.LossConfig(kl_behaviour_weight=0.3), *args)
    np.testing.assert_allclose(got - base, 0.3 * np_kl_behaviour(c["log_pi"], c["log_mu"]),
                               rtol=1e-4, atol=1e-5)
    assert "loss/kl_behaviour" not in m0
    np.testing.assert_allclose(m1["loss/kl_behaviour"], np_kl_behaviour(c["log_pi"], c["log_mu"]),
                               rtol=1e-5)
    with pytest.raises(ValueError):
        losses.LossConfig(kl_behaviour_weight=-0.1)



def test_kl_to_magnet_hand_worked_value_and_gradient():
    # Step 1: pi = (0.5, 0.5), rho = (0.25, 0.75): 0.5 ln 2 + 0.5 ln(2/3) = 0.143841.
    # Step 2: pi = (0.9, 0.1), rho = (0.5, 0.5): 0.9 ln 1.8 + 0.1 ln 0.2 = 0.368064.
    # Step 3: one legal action (the other is masked): pi = rho = (1, 0): 0. Mean over 3 steps.
    masked = -1e9
    logits = {"a": f32(np.log([[[0.5, 0.5]], [[0.9, 0.1]], [[1.0, 1.0]]]))}
    logits["a"][2, 0, 1] = masked
    magnet = {"a": f32(np.log([[[0.25, 0.75]], [[0.5, 0.5]], [[1.0, 1.0]]]))}
    magnet["a"][2, 0, 1] = masked
    got = losses.kl_to_magnet_loss(logits, magnet)
    np.testing.assert_allclose(got, (0.143841 + 0.368064) / 3, rtol=1e-5)
    # d KL(pi || rho) / d z_j = pi_j (log(pi_j / rho_j) - KL) at each step, / 3 for the mean;
    # the magnet gets no gradient.
    g_pi, g_rho = jax.grad(losses.kl_to_magnet_loss, argnums=(0, 1))(logits, magnet)
    pi, rho = np.array([0.5, 0.5]), np.array([0.25, 0.75])
    kl = float(np.sum(pi * np.log(pi / rho)))
    np.testing.assert_allclose(g_pi["a"][0, 0], pi * (np.log(pi / rho) - kl) / 3, rtol=1e-4)
    np.testing.assert_allclose(g_pi["a"][2, 0], 0.0, atol=1e-7)
    np.testing.assert_allclose(g_rho["a"], 0.0)


def test_total_loss_adds_the_magnet_only_with_weight_and_logits():
    c = random_case(12)
    args = (c["logits"], c["v"], c["boot"], c["actions"], c["log_mu"], c["r"], c["g"])
    magnet = {h: x[::-1] for h, x in c["logits"].items()}
    base, m0 = losses.total_loss(losses.LossConfig(), *args, magnet_logits=magnet)
    got, m1 = losses.total_loss(losses.LossConfig(magnet_weight=0.2), *args, magnet_logits=magnet)
    want = 0.0  # sum over heads of the mean over [T, B] of sum_a pi (log pi - log rho), in numpy
    for h in c["logits"]:
        lp = np.asarray(jax.nn.log_softmax(c["logits"][h]), np.float64)
        lr = np.asarray(jax.nn.log_softmax(magnet[h]), np.float64)
        want += np.mean(np.sum(np.exp(lp) * (lp - lr), -1).reshape(lp.shape[0], lp.shape[1], -1).sum(-1))
    assert "loss/kl_magnet" not in m0
    np.testing.assert_allclose(m1["loss/kl_magnet"], want, rtol=1e-4)
    np.testing.assert_allclose(got - base, 0.2 * want, rtol=1e-3, atol=1e-5)
    same, _ = losses.total_loss(losses.LossConfig(magnet_weight=0.2), *args)  # no magnet given
    np.testing.assert_allclose(same, base, rtol=1e-6)
    with pytest.raises(ValueError):
        losses.LossConfig(magnet_every=0)


def test_entropy_schedule_hand_worked_and_total_loss_uses_it():
    """alpha_k = 0.1 (0.001 / 0.1) ** min(k / 100, 1): 0.1, 0.01 at k = 50, 0.001 from k = 100
    on (worked by hand); without an end the weight stays 0.1. total_loss's entropy term is
    the given weight times L_entropy."""
    config = losses.LossConfig(entropy_weight=0.1, entropy_weight_end=0.001, entropy_anneal_updates=100)
    for k, want in ((0, 0.1), (25, 0.1 * 0.01 ** 0.25), (50, 0.01), (100, 0.001), (400, 0.001)):
        np.testing.assert_allclose(losses.entropy_schedule(config, jnp.int32(k)), want, rtol=1e-5)
    np.testing.assert_allclose(losses.entropy_schedule(losses.LossConfig(entropy_weight=0.1),
                                                       jnp.int32(1000)), 0.1, rtol=1e-7)
    c = random_case(12)
    args = (c["logits"], c["v"], c["boot"], c["actions"], c["log_mu"], c["r"], c["g"])
    base, m0 = losses.total_loss(losses.LossConfig(entropy_weight=0.1), *args)
    got, m1 = losses.total_loss(losses.LossConfig(entropy_weight=0.1), *args, None, 0.01)
    np.testing.assert_allclose(got - base, (0.01 - 0.1) * m0["loss/entropy"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m1["entropy_weight"], 0.01)
    for bad in (dict(entropy_weight_end=0.2), dict(entropy_weight_end=0.0),
                dict(entropy_weight_end=0.01, entropy_anneal_updates=0)):
        with pytest.raises(ValueError, match="entropy annealing"):
            losses.LossConfig(entropy_weight=0.1, **bad)


# ----------------------------------------------------------------------------- PPO + GAE


@pytest.mark.parametrize("seed", [0, 1])
def test_gae_random(seed):
    c = random_case(seed)
    got = losses.gae_advantages(c["r"], c["g"], c["v"], c["boot"], 0.95)
    np.testing.assert_allclose(got, np_gae(c["r"], c["g"], c["v"], c["boot"], 0.95), rtol=1e-4,
                               atol=1e-4)


def test_gae_hand_worked():
    # lambda = 0.5, V = [1, 2], bootstrap 3, r = [0, 1]: delta = [0 + 2 - 1, 1 + 3 - 2] = [1, 2]
    # A_1 = 2, A_0 = 1 + 0.5 * 2 = 2; with the episode ending after step 0: A_0 = 0 + 0 - 1 = -1
    v, r, boot = f32([[1.0, 1.0], [2.0, 2.0]]), f32([[0.0, 0.0], [1.0, 1.0]]), f32([3.0, 3.0])
    g = f32([[1.0, 0.0], [1.0, 1.0]])
    np.testing.assert_allclose(losses.gae_advantages(r, g, v, boot, 0.5), [[2.0, -1.0], [2.0, 2.0]],
                               atol=1e-6)


def test_ppo_clip_random_and_clip_cases():
    c = random_case(7)
    A = np_gae(c["r"], c["g"], c["v"], c["boot"], 0.95).astype(np.float32)
    T, B = A.shape
    total = 0.0
    for t in range(T):
        for b in range(B):
            ratio = np.exp(sum(c["log_pi"][h][t, b] - c["log_mu"][h][t, b] for h in c["log_pi"]))
            total += min(ratio * A[t, b], np.clip(ratio, 0.8, 1.2) * A[t, b])
    got, _ = losses.ppo_clip_policy_loss(c["log_pi"], c["log_mu"], A, 0.2)
    np.testing.assert_allclose(got, -total / (T * B), rtol=1e-4, atol=1e-5)
    # hand: ratio 2 with A = +1 is clipped to 1.2; ratio 0.5 with A = +1 is not clipped (0.5);
    # ratio 2 with A = -1 is not clipped (-2): mean of objectives = (1.2 + 0.5 - 2) / 3
    log_pi = {"a": f32(np.log([[2.0], [0.5], [2.0]]))}
    zero = {"a": f32(np.zeros((3, 1)))}
    got, _ = losses.ppo_clip_policy_loss(log_pi, zero, f32([[1.0], [1.0], [-1.0]]), 0.2)
    np.testing.assert_allclose(got, -(1.2 + 0.5 - 2.0) / 3, rtol=1e-5)


# ----------------------------------------------------------------------------- total


@pytest.mark.parametrize("policy_loss", ["vtrace", "ppo"])
def test_total_loss_is_the_configured_weighted_sum(policy_loss):
    c = random_case(8)
    T, B = c["r"].shape
    cfg = losses.LossConfig(policy_loss=policy_loss, discount=0.9, policy_weight=0.7,
                            upgo_weight=0.3, value_weight=0.4, entropy_weight=0.05,
                            kl_teacher_weight=0.2, td_lambda=0.8, gae_lambda=0.9)
    g = c["g"] * 0.9
    log_mu = c["log_mu"]
    vt = 0.0
    if policy_loss == "vtrace":
        for h in c["log_pi"]:
            _, adv = np_vtrace(c["log_pi"][h] - log_mu[h], c["r"], g, c["v"], c["boot"])
            vt -= (adv * c["log_pi"][h]).mean()
    else:
        A = np_gae(c["r"], g, c["v"], c["boot"], 0.9)
        ratio = np.exp(sum(c["log_pi"][h] - log_mu[h] for h in c["log_pi"]))
        vt = -np.minimum(ratio * A, np.clip(ratio, 0.8, 1.2) * A).mean()
    G = np_upgo(c["r"], g, c["v"], c["boot"])
    upgo = -sum((np.minimum(np.exp(c["log_pi"][h] - log_mu[h]), 1) * (G - c["v"])
                 * c["log_pi"][h]).mean() for h in c["log_pi"])
    value = 0.5 * ((np_lambda_returns(c["r"], g, c["v"], c["boot"], 0.8) - c["v"]) ** 2).mean()
    ent = -np_entropy(c["logits"]).mean()
    kl = np_kl(c["logits"], c["mu_logits"])
    expected = 0.7 * vt + 0.3 * upgo + 0.4 * value + 0.05 * ent + 0.2 * kl
    got, metrics = losses.total_loss(cfg, c["logits"], c["v"], c["boot"], c["actions"], log_mu,
                                     c["r"], c["g"], teacher_logits=c["mu_logits"])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(metrics["loss/value"], value, rtol=1e-4)
    # the value only gets the TD(lambda) gradient (policy terms treat V as a constant)
    grad_v = jax.grad(lambda v: losses.total_loss(cfg, c["logits"], v, c["boot"], c["actions"],
                                                  log_mu, c["r"], c["g"])[0])(c["v"])
    G_l = np_lambda_returns(c["r"], g, c["v"], c["boot"], 0.8)
    np.testing.assert_allclose(grad_v, -0.4 * (G_l - c["v"]) / (T * B), rtol=1e-3, atol=1e-6)


def test_config_validation_and_ppo_defaults():
    with pytest.raises(ValueError):
        losses.LossConfig(policy_loss="a2c")
    with pytest.raises(ValueError):
        losses.LossConfig(entropy_weight=-1.0)
    ppo = losses.LossConfig.ppo()
    assert (ppo.policy_loss, ppo.ppo_clip_epsilon, ppo.gae_lambda, ppo.entropy_weight) == (
        "ppo", 0.2, 0.95, 0.01)


def test_shape_asserts():
    c = random_case(9)
    with pytest.raises(AssertionError):
        losses.upgo_returns(c["r"], c["g"], c["v"][:-1], c["boot"])
    with pytest.raises(AssertionError):
        losses.lambda_returns(c["r"], c["g"], c["v"], c["boot"][:-1], 0.8)


# ----------------------------------------------------------------------------- per-unit credit


def unit_case(seed, T=5, B=3, n=3, unit_heads=(("a", 3), ("b", 4)), team_heads=(("c", 2),)):
    """Unit heads [T, B, n, A], a team head [T, B, A]; per-unit rewards and values [T, B, n]."""
    rng = np.random.default_rng(seed)
    shapes = {h: (T, B, n, k) for h, k in unit_heads} | {h: (T, B, k) for h, k in team_heads}
    logits = {h: (rng.normal(size=s) * 1.5).astype(np.float32) for h, s in shapes.items()}
    teacher = {h: (rng.normal(size=s) * 1.5).astype(np.float32) for h, s in shapes.items()}
    mu_logits = {h: (rng.normal(size=s) * 1.5).astype(np.float32) for h, s in shapes.items()}
    actions = {h: rng.integers(0, s[-1], size=s[:-1]).astype(np.int32) for h, s in shapes.items()}

    def chosen(lg, h):
        return np.take_along_axis(np_log_softmax(lg[h]), actions[h][..., None], -1)[..., 0]

    return dict(
        logits=logits, teacher=teacher, actions=actions, unit_heads=[h for h, _ in unit_heads],
        team_heads=[h for h, _ in team_heads], n=n,
        log_pi={h: chosen(logits, h).astype(np.float32) for h in shapes},
        log_mu={h: chosen(mu_logits, h).astype(np.float32) for h in shapes},
        r=rng.normal(size=(T, B, n)).astype(np.float32),
        g=rng.choice([1.0, 1.0, 0.9, 0.0], size=(T, B)).astype(np.float32),
        v=rng.normal(size=(T, B, n)).astype(np.float32),
        boot=rng.normal(size=(B, n)).astype(np.float32))


def np_unit_loss(c, i, cfg):
    """Unit i's own loss, every term from the numpy references on unit i's reward and value:
    its unit heads' (its own action) with weight 1 and the team heads' with weight 1/n."""
    r, v, boot = c["r"][:, :, i], c["v"][:, :, i], c["boot"][:, i]
    g = c["g"] * cfg.discount
    n = c["n"]

    def own(h, x):  # unit i's slice of a unit head, the team head as it is
        return x[:, :, i] if h in c["unit_heads"] else x

    weight = {h: 1.0 for h in c["unit_heads"]} | {h: 1.0 / n for h in c["team_heads"]}
    heads = sorted(weight)
    log_pi = {h: own(h, c["log_pi"][h]) for h in heads}
    log_mu = {h: own(h, c["log_mu"][h]) for h in heads}
    if cfg.policy_loss == "vtrace":
        policy = 0.0
        for h in heads:
            _, adv = np_vtrace(log_pi[h] - log_mu[h], r, g, v, boot)
            policy -= weight[h] * (adv * log_pi[h]).mean()
    else:
        A = np_gae(r, g, v, boot, cfg.gae_lambda)
        ratio = np.exp(sum(log_pi[h] - log_mu[h] for h in heads))   # unit i's whole action
        policy = -np.minimum(ratio * A, np.clip(ratio, 1 - cfg.ppo_clip_epsilon,
                                                1 + cfg.ppo_clip_epsilon) * A).mean()
    G = np_upgo(r, g, v, boot)
    upgo = -sum(weight[h] * (np.minimum(np.exp(log_pi[h] - log_mu[h]), 1) * (G - v)
                             * log_pi[h]).mean() for h in heads)
    value = 0.5 * ((np_lambda_returns(r, g, v, boot, cfg.td_lambda) - v) ** 2).mean()
    logits = {h: own(h, c["logits"][h]) for h in heads}
    teacher = {h: own(h, c["teacher"][h]) for h in heads}
    ent = -sum(weight[h] * np_entropy({h: logits[h]}).mean() for h in heads)
    kl = sum(weight[h] * np_kl({h: logits[h]}, {h: teacher[h]}) for h in heads)
    return (cfg.policy_weight * policy + cfg.upgo_weight * upgo + cfg.value_weight * value
            + cfg.entropy_weight * ent + cfg.kl_teacher_weight * kl)


@pytest.mark.parametrize("policy_loss", ["vtrace", "ppo"])
def test_vectorised_per_unit_loss_is_the_sum_of_the_units_own_losses(policy_loss):
    """One computation over [T, B, n, heads] = sum over units of each unit's loss from the numpy
    references, with team heads counted 1/n in each unit's; the value gradient of unit i is
    unit i's own TD(lambda) error alone."""
    c = unit_case(12)
    T, B, n = c["r"].shape
    cfg = losses.LossConfig(policy_loss=policy_loss, discount=0.9, policy_weight=0.7,
                            upgo_weight=0.3, value_weight=0.4, entropy_weight=0.05,
                            kl_teacher_weight=0.2, td_lambda=0.8, gae_lambda=0.9)
    expected = sum(np_unit_loss(c, i, cfg) for i in range(n))
    got, metrics = losses.total_loss(cfg, c["logits"], c["v"], c["boot"], c["actions"],
                                     c["log_mu"], c["r"], c["g"], teacher_logits=c["teacher"])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    grad_v = jax.grad(lambda v: losses.total_loss(cfg, c["logits"], v, c["boot"], c["actions"],
                                                  c["log_mu"], c["r"], c["g"])[0])(c["v"])
    for i in range(n):
        G = np_lambda_returns(c["r"][:, :, i], c["g"] * 0.9, c["v"][:, :, i], c["boot"][:, i], 0.8)
        np.testing.assert_allclose(grad_v[:, :, i], -0.4 * (G - c["v"][:, :, i]) / (T * B),
                                   rtol=1e-3, atol=1e-6)


def test_vtrace_value_loss_per_unit_uses_each_units_whole_action():
    c = unit_case(13)
    T, B, n = c["r"].shape
    expected = 0.0
    for i in range(n):
        log_rho = sum((c["log_pi"][h][:, :, i] - c["log_mu"][h][:, :, i]) for h in c["unit_heads"])
        log_rho = log_rho + sum(c["log_pi"][h] - c["log_mu"][h] for h in c["team_heads"])
        vs, _ = np_vtrace(log_rho, c["r"][:, :, i], c["g"], c["v"][:, :, i], c["boot"][:, i], 0.9)
        expected += 0.5 * ((vs - c["v"][:, :, i]) ** 2).mean()
    got = losses.vtrace_value_loss(c["log_pi"], c["log_mu"], c["v"], c["r"], c["g"], c["boot"], 0.9)
    np.testing.assert_allclose(got, expected, rtol=1e-4)


def np_team_spirit(rho, tau):
    """OpenAI Five (seed 000): hero_rewards[i] = tau * mean(hero_rewards) + (1 - tau) * hero_rewards[i]."""
    out = np.zeros_like(rho, np.float64)
    for idx in np.ndindex(rho.shape[:-1]):
        mean = sum(rho[idx]) / rho.shape[-1]
        for i in range(rho.shape[-1]):
            out[idx + (i,)] = tau * mean + (1 - tau) * rho[idx + (i,)]
    return out


@pytest.mark.parametrize("tau", [0.0, 0.5, 1.0])
def test_team_spirit_changes_each_units_policy_gradient_as_the_formula_says(tau):
    """Raw per-unit rewards rho -> team spirit (actors.rewards) -> the per-unit V-trace policy
    loss: the gradient of unit i's head is -A_i / (T B), A_i the V-trace advantage of unit i's
    reward (1 - tau) rho_i + tau mean(rho) and its own value -- its own events at tau = 0, the
    team's mean at tau = 1 -- checked against numpy from the formula."""
    from actors.rewards import team_spirit

    c = unit_case(14, team_heads=())
    T, B, n = c["r"].shape
    rho = c["r"]
    r = team_spirit(rho.reshape(-1, n), tau).reshape(T, B, n).astype(np.float32)
    np.testing.assert_allclose(r, np_team_spirit(rho, tau), rtol=1e-6, atol=1e-6)

    def loss(log_pi):
        return losses.vtrace_policy_loss(log_pi, c["log_mu"], r, c["g"], c["v"], c["boot"])[0]

    grads = jax.grad(loss)({h: jnp.asarray(x) for h, x in c["log_pi"].items()})
    reward = np_team_spirit(rho, tau)
    for h in c["unit_heads"]:
        for i in range(n):
            _, adv = np_vtrace(c["log_pi"][h][:, :, i] - c["log_mu"][h][:, :, i], reward[:, :, i],
                               c["g"], c["v"][:, :, i], c["boot"][:, i])
            np.testing.assert_allclose(grads[h][:, :, i], -adv / (T * B), rtol=1e-4, atol=1e-6)
    # at tau = 1 every unit's advantage comes from the same team reward: what differs between
    # two units is only their value and ratio; at tau = 0 unit 0's reward is its own
    if tau == 1.0:
        np.testing.assert_allclose(reward[:, :, 0], reward[:, :, 1], atol=1e-12)
    if tau == 0.0:
        np.testing.assert_allclose(reward, rho, atol=1e-6)


def test_team_spirit_is_no_longer_a_no_op():
    """The gradient at tau = 0 and tau = 1 differ (before per-unit credit, the side's rewards were
    averaged over units first and tau changed nothing)."""
    from actors.rewards import team_spirit

    c = unit_case(15, team_heads=())
    T, B, n = c["r"].shape

    def grads(tau):
        r = team_spirit(c["r"].reshape(-1, n), tau).reshape(T, B, n).astype(np.float32)
        return jax.grad(lambda lp: losses.vtrace_policy_loss(lp, c["log_mu"], r, c["g"], c["v"],
                                                             c["boot"])[0])(c["log_pi"])

    g0, g1 = grads(0.0), grads(1.0)
    assert max(float(np.abs(g0[h] - g1[h]).max()) for h in g0) > 1e-3


def _neurd_case():
    """Two steps of one game (it ends after step 1), one head of 3 actions, on-policy (mu = pi):
    step 0 has actions {0, 1} legal and took 0; step 1 all three and took 1."""
    from agents.networks import MASKED_LOGIT

    logits = np.asarray([[[0.2, -0.1, MASKED_LOGIT]], [[3.0, 0.0, -1.0]]], np.float32)   # [T=2, B=1, A=3]
    actions = np.asarray([[0], [1]])
    rewards = np.asarray([[0.5], [-1.0]], np.float32)
    discounts = np.asarray([[1.0], [0.0]], np.float32)
    values = np.asarray([[0.1], [0.3]], np.float32)
    bootstrap = np.asarray([0.7], np.float32)
    return logits, actions, rewards, discounts, values, bootstrap


def _neurd_step_term(y, action, advantage, beta):
    """One step of one head by hand: loss -sum over moving legal a of A(a) ybar(a), with
    A(a) = advantage ([a = action] / pi(action) - 1), and its gradient on the logits y."""
    legal = y > -1e8
    z = np.where(legal, y, -np.inf)
    pi = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    a_of = np.where(legal, advantage * ((np.arange(len(y)) == action) / pi[action] - 1.0), 0.0)
    centred = np.where(legal, y - y[legal].mean(), 0.0)
    moves = legal & np.where(a_of > 0, centred < beta, centred > -beta)
    held = np.where(moves, a_of, 0.0)
    return -np.sum(held * centred), np.where(legal, -(held - held[legal].sum() / legal.sum()), 0.0)


def _neurd_reference(logits, actions, rewards, discounts, values, bootstrap, beta):
    """NeuRD's loss and logit gradient from the formula, by hand: on-policy V-trace with
    lambda 1 is the Monte-Carlo return, A_t = G_t - V(s_t); each step's term is
    `_neurd_step_term`, the loss their mean over the T steps."""
    T = len(rewards)
    returns, g = np.zeros(T), float(bootstrap[0])
    for t in reversed(range(T)):
        g = rewards[t, 0] + discounts[t, 0] * g
        returns[t] = g
    loss, grad = 0.0, np.zeros_like(logits[:, 0], dtype=np.float64)
    for t in range(T):
        term, step_grad = _neurd_step_term(logits[t, 0], actions[t, 0], returns[t] - values[t, 0], beta)
        loss += term / T
        grad[t] = step_grad / T
    return loss, grad


@pytest.mark.parametrize("beta", [2.0, 100.0])
def test_neurd_loss_and_its_gradient_worked_by_hand(beta):
    """With beta 2, step 1's action 0 (centred logit 2.33, pushed up) is held; with 100 nothing is."""
    logits, actions, rewards, discounts, values, bootstrap = _neurd_case()
    log_pi = {"a": losses.log_prob(jnp.asarray(logits), jnp.asarray(actions))}

    def loss_of(y):
        return losses.neurd_policy_loss({"a": y}, {"a": jnp.asarray(actions)}, log_pi, log_pi,
                                        jnp.asarray(rewards), jnp.asarray(discounts), jnp.asarray(values),
                                        jnp.asarray(bootstrap), beta=beta)[0]

    expected_loss, expected_grad = _neurd_reference(logits, actions, rewards, discounts, values, bootstrap, beta)
    np.testing.assert_allclose(float(loss_of(jnp.asarray(logits))), expected_loss, rtol=1e-5)
    grad = np.asarray(jax.grad(loss_of)(jnp.asarray(logits)))[:, 0]
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-4, atol=1e-6)
    held_loss, _ = _neurd_reference(logits, actions, rewards, discounts, values, bootstrap, 2.0)
    free_loss, _ = _neurd_reference(logits, actions, rewards, discounts, values, bootstrap, 100.0)
    assert abs(held_loss - free_loss) > 0.1   # the threshold matters in this case


def test_total_loss_takes_the_neurd_policy_term():
    from learners.config import LossConfig

    logits, actions, rewards, discounts, values, bootstrap = _neurd_case()
    log_pi = {"a": losses.log_prob(jnp.asarray(logits), jnp.asarray(actions))}
    args = ({"a": jnp.asarray(logits)}, jnp.asarray(values), jnp.asarray(bootstrap), {"a": jnp.asarray(actions)},
            log_pi, jnp.asarray(rewards), jnp.asarray(discounts))
    _, metrics = losses.total_loss(LossConfig(policy_loss="neurd", upgo_weight=0.0), *args)
    expected, _ = _neurd_reference(logits, actions, rewards, discounts, values, bootstrap, 2.0)
    np.testing.assert_allclose(float(metrics["loss/policy"]), expected, rtol=1e-5)


def test_neurd_on_units_sums_each_units_term_and_gives_a_team_head_their_mean():
    """A team game (2 units, SMAX's shapes): a unit head learns from its own unit's advantage
    (the loss sums the units' terms), a team head from the mean over units of their advantages.
    On-policy, lambda 1: A^i_t = G^i_t - V^i(s_t), the units' Monte-Carlo returns, by hand."""
    from agents.networks import MASKED_LOGIT

    rng = np.random.default_rng(7)
    T, B, U = 3, 1, 2
    move = rng.normal(scale=2.0, size=(T, B, U, 4)).astype(np.float32)
    move[1, 0, 0, 3] = MASKED_LOGIT                                      # one illegal action
    army = rng.normal(size=(T, B, 3)).astype(np.float32)
    actions = {"move": rng.integers(0, 3, (T, B, U)), "army": rng.integers(0, 3, (T, B))}
    rewards = rng.normal(size=(T, B, U)).astype(np.float32)
    values = rng.normal(size=(T, B, U)).astype(np.float32)
    discounts = np.asarray([[1.0], [0.0], [1.0]], np.float32)           # the game ends after step 1
    bootstrap = rng.normal(size=(B, U)).astype(np.float32)
    returns = np.zeros((T, U))
    g = bootstrap[0].astype(np.float64)
    for t in reversed(range(T)):
        g = rewards[t, 0] + discounts[t, 0] * g
        returns[t] = g
    advantage = returns - values[:, 0]                                  # [T, U]
    beta = 2.0
    expected_loss, expected_move, expected_army = 0.0, np.zeros((T, U, 4)), np.zeros((T, 3))
    for t in range(T):
        for i in range(U):
            term, grad = _neurd_step_term(move[t, 0, i], actions["move"][t, 0, i], advantage[t, i], beta)
            expected_loss += term / T
            expected_move[t, i] = grad / T
        term, grad = _neurd_step_term(army[t, 0], actions["army"][t, 0], advantage[t].mean(), beta)
        expected_loss += term / T
        expected_army[t] = grad / T

    acts = {h: jnp.asarray(a) for h, a in actions.items()}

    def loss_of(logits):
        log_pi = {h: losses.log_prob(logits[h], acts[h]) for h in logits}
        log_pi = jax.tree_util.tree_map(jax.lax.stop_gradient, log_pi)
        return losses.neurd_policy_loss(logits, acts, log_pi, log_pi, jnp.asarray(rewards),
                                        jnp.asarray(discounts), jnp.asarray(values),
                                        jnp.asarray(bootstrap), beta=beta)[0]

    logits = {"move": jnp.asarray(move), "army": jnp.asarray(army)}
    np.testing.assert_allclose(float(loss_of(logits)), expected_loss, rtol=1e-5)
    grads = jax.grad(loss_of)(logits)
    np.testing.assert_allclose(np.asarray(grads["move"])[:, 0], expected_move, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grads["army"])[:, 0], expected_army, rtol=1e-4, atol=1e-6)
    # the team head's mean is not any one unit's advantage, nor their sum
    assert np.abs(advantage[:, 0] - advantage.mean(1)).min() > 1e-2


def _pick_loss(log_pi, log_mu, rewards, discounts, values):
    return losses.vtrace_policy_loss(log_pi, log_mu, rewards, discounts, values, jnp.zeros_like(values[0]))[0]


@pytest.mark.parametrize("team_return", [1.0, -1.0])
def test_an_army_picks_gradient_does_not_depend_on_its_size(team_return):
    """The army pick (a team head) of a 5-unit and a 16-unit army (16 unit slots) whose present
    units earn the same rewards: the gradient on the pick's log-probability is the same, -A / (T B), A
    worked by hand as the team's return per present unit, on-policy, lambda 1, zero values:
    A = sum_t r_t. With absent slots rewarded zero the 5-unit army's A was 5/16 of it, so a
    side that was losing preferred its smallest army (issue 57, zerg on hydralisks)."""
    from actors.rewards import training_reward

    T, n, size = 4, 16, {"hydralisk": 5, "zergling": 16}
    step_reward = np.asarray([0.0, 0.1, -0.2, team_return], np.float32)   # the pick, then fighting
    grads = {}
    for army, k in size.items():
        present = np.zeros((T, n), bool)
        present[:, :k] = True
        # each present unit its own share (team spirit < 1), the present units' mean step_reward
        own = np.where(present, step_reward[:, None] + np.linspace(-0.05, 0.05, n)[None], 0.0)
        own[:, :k] -= own[:, :k].mean(-1, keepdims=True) - step_reward[:, None]
        r = training_reward(own, present, (n,))[:, None]                   # [T, B=1, n]
        values = np.zeros((T, 1, n), np.float32)
        discounts = np.asarray([[1.0], [1.0], [1.0], [0.0]], np.float32)
        log_mu = {"composition": np.full((T, 1), np.log(1 / 3), np.float32)}
        loss = functools.partial(_pick_loss, log_mu=log_mu, rewards=r, discounts=discounts, values=values)
        grads[army] = float(jax.grad(loss)({"composition": jnp.asarray(log_mu["composition"])})["composition"][0, 0])
    advantage = float(step_reward.sum())      # the pick's return per present unit, by hand
    for army in size:
        np.testing.assert_allclose(grads[army], -advantage / T, rtol=1e-5, err_msg=army)
