"""The meta-game over players: Nash mixtures, exploitability, population metrics, ratings.

The meta-game between players a, b is symmetric and zero-sum with payoff
A[a, b] = P[a beats b] - 1/2 (so A = -A^T when draws count half).
- Nash: max_x min_b sum_a x_a A[a, b], a linear program: a primal-dual interior point
  method on the symmetric game's self-dual LP (one LU per step, SuperLU), its answer
  certified exactly, with HiGHS (scipy.optimize.linprog) wherever no certificate holds.
- Exploitability of a mixture x: max_a (A x)_a, the best pure response's expected
  payoff against x; 0 at a Nash mixture of a symmetric zero-sum game.
- Relative population performance (Balduzzi et al. 2019, "Open-ended learning in
  symmetric zero-sum games", Definition 3): the value p^T A_PQ q of the zero-sum game
  between populations P and Q, at a Nash equilibrium (p, q).
- Elo: ratings r maximising the Bradley-Terry likelihood of the decayed payoff counts
  with P[a beats b] = 1 / (1 + 10^((r_b - r_a) / 400)).
- TrueSkill (Herbrich et al. 2006) over a sequence of games, via the `trueskill` package.
- The average Nash mixture: the mean of every Nash mixture the league published, over its
  frozen players (fictitious play's average strategy; `average_nash`).
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Mapping, Sequence

import numpy as np
import scipy.optimize
import scipy.sparse
import scipy.sparse.linalg
import scipy.stats

from league.pfsp import check_win_rates


def _check_matrix(win_rate_matrix, square: bool = True) -> np.ndarray:
    w = check_win_rates(win_rate_matrix, "win-rate matrix entries")
    if w.ndim != 2 or w.size == 0 or (square and w.shape[0] != w.shape[1]):
        kind = "a non-empty square" if square else "a non-empty 2-D"
        raise ValueError(f"the win-rate matrix must be {kind} array; got shape {w.shape}")
    return w


def zero_sum_nash(payoff: np.ndarray) -> tuple[np.ndarray, float]:
    """Row player's maximin mixture of the zero-sum game `payoff` [m, n], and the game value.

    LP: maximise v subject to sum_i x_i payoff[i, j] >= v for every column j,
    sum_i x_i = 1, x >= 0. Solved with HiGHS.
    """
    m, n = payoff.shape
    # Variables (x_1..x_m, v); minimise -v.
    c = np.zeros(m + 1)
    c[-1] = -1.0
    a_ub = np.hstack([-payoff.T, np.ones((n, 1))])  # v - x^T payoff[:, j] <= 0
    b_ub = np.zeros(n)
    a_eq = np.hstack([np.ones((1, m)), np.zeros((1, 1))])
    bounds = [(0.0, None)] * m + [(None, None)]
    result = scipy.optimize.linprog(
        c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs"
    )
    if not result.success:
        raise RuntimeError(f"the meta-game linear program failed: {result.message}")
    x = np.clip(result.x[:m], 0.0, None)
    return x / x.sum(), float(result.x[-1])


def _matvec(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """matrix @ vector in numpy's own loop: a multithreaded BLAS matrix-vector product slows
    ~30x when the cores are busy (measured: 5 ms against 0.16 ms at 1,000 players under a
    load of 3 on 2 cores); this one stays at ~0.4 ms."""
    return np.einsum("ij,j->i", matrix, vector)


def _factorize(matrix: np.ndarray):
    """SuperLU (partial pivoting, natural order) of a dense square matrix, or None if it is
    exactly singular. Single-threaded on purpose: OpenBLAS's threaded dense LU
    (scipy.linalg.lu_factor) waits on its threads, and with every core busy (a league's
    actors and learners, pytest's workers) one 1,000-square factorization took 0.3-0.6 s
    instead of 0.03 s; SuperLU takes 0.1-0.2 s either way."""
    m = len(matrix)
    data = np.asfortranarray(matrix).ravel(order="F")
    rows = np.tile(np.arange(m, dtype=np.int32), m)
    starts = np.arange(0, m * m + 1, m, dtype=np.int64)
    try:
        return scipy.sparse.linalg.splu(
            scipy.sparse.csc_matrix((data, rows, starts), shape=(m, m)), permc_spec="NATURAL"
        )
    except RuntimeError:  # "Factor is exactly singular"
        return None


def _equalizer_nash(payoff: np.ndarray, support: np.ndarray, margin: float) -> np.ndarray | None:
    """The unique Nash mixture of the symmetric zero-sum game `payoff` (antisymmetric) if it
    is supported on `support`, else None: the certificate behind `_interior_point_nash`.

    Solves the equalizer system M [x_S; v] = [0; 1], M = [A_SS -1; 1^T 0] (every support
    player earns the same against x), and accepts x when x_S > margin, every player outside S
    loses more than `margin` against it ((A x)_a < -margin), no player gains more than
    `margin`, and M is well conditioned. Then x is a Nash mixture, and the only one: any
    other Nash mixture y is a best response to x, so y lives on S, and x is a best response
    to y, so A_SS y_S = 0 and y solves the same nonsingular system. So every exact solver
    returns this x too. (M is antisymmetric, so an even support never certifies.)"""
    n, k = len(payoff), support.size
    if k % 2 == 0:
        return None
    system = np.zeros((k + 1, k + 1), order="F")
    system[:k, :k] = payoff[np.ix_(support, support)]
    system[:k, k] = -1.0
    system[k, :k] = 1.0
    lu = _factorize(system)
    if lu is None:
        return None
    rhs = np.zeros(k + 1)
    rhs[k] = 1.0
    with np.errstate(all="ignore"):
        weights = lu.solve(rhs)[:k]
        inverse = scipy.sparse.linalg.LinearOperator(
            system.shape, matvec=lu.solve, rmatvec=lambda b: lu.solve(b, trans="T"), dtype=np.float64
        )
        inverse_norm = scipy.sparse.linalg.onenormest(inverse)  # Higham's estimate, a few solves
    norm = np.abs(system).sum(axis=0).max()
    if not (np.isfinite(weights).all() and np.isfinite(inverse_norm)) or norm * inverse_norm > _EQUALIZER_MAX_CONDITION:
        return None
    if weights.min() <= margin:
        return None
    mixture = np.zeros(n)
    mixture[support] = weights / weights.sum()
    gains = _matvec(payoff, mixture)
    outside = np.ones(n, dtype=bool)
    outside[support] = False
    if gains.max() > margin or gains[outside].max(initial=-np.inf) >= -margin:
        return None
    return mixture


_EQUALIZER_MAX_CONDITION = 1e12
# The interior point method restricts the game to the players still in play once the best
# gain v is below 1e-3 (and above 1e-5): it drops a player whose weight x_a is below 1e-3 of
# its slack s_a = v - (A x)_a, i.e. far from the support. No wrong drop on 30 random games of
# 1,000 players unscreened, nor on 90 screened (3 kinds each; at 1e-2 of the slack, 4 in 30
# went wrong); a wrong one costs a second, unrestricted run.
_RESTRICT_BELOW, _RESTRICT_ABOVE, _DROP_RATIO = 1e-3, 1e-5, 1e-3
_CERTIFY_BELOW = 1e-4  # try the certificate once v is below this, on the guessed support
# A warm start: 95% the screening's average, 5% uniform (interior). On 9 random games of
# 1,000 players, 30-40% less factorization work than a uniform start (at 90-99%).
_WARM_WEIGHT = 0.95
# Screening: regret matching+ for 100 iterations, then keep the players whose gain against
# its average is within 40 times its exploitability of the best. On 90 random games of 1,000
# players (3 kinds): 601-837 kept (mean 682), the whole support every time (at 20 times, 1
# game in 18 lost a support player).
_SCREEN_ABOVE, _SCREEN_ITERATIONS, _SCREEN_WIDTH = 400, 100, 40.0


def _screen(payoff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The players likely in the support of the symmetric zero-sum game `payoff`, and an
    approximate Nash mixture: a first, cheap pass of regret matching+ (Tammelin 2014;
    alternating updates, linearly weighted average, as in CFR+) whose average is within ~1e-4
    of a Nash mixture after 100 matrix-vector products of each player's."""
    n = len(payoff)
    uniform = np.full(n, 1.0 / n)
    x, y = uniform, uniform
    regret_x, regret_y, total = np.zeros(n), np.zeros(n), np.zeros(n)
    for t in range(1, _SCREEN_ITERATIONS + 1):
        gains = _matvec(payoff, y)
        regret_x = np.maximum(regret_x + gains - x @ gains, 0.0)
        x = regret_x / regret_x.sum() if regret_x.sum() > 0 else uniform
        gains = _matvec(payoff, x)
        regret_y = np.maximum(regret_y + gains - y @ gains, 0.0)
        y = regret_y / regret_y.sum() if regret_y.sum() > 0 else uniform
        total += t * (x + y)
    average = total / total.sum()
    gains = _matvec(payoff, average)
    best = gains.max()  # >= 0: the average earns 0 against itself
    return np.flatnonzero(gains >= best - _SCREEN_WIDTH * max(best, 0.0)), average


def _interior_point_nash(
    payoff: np.ndarray,
    margin: float,
    candidates: np.ndarray | None = None,
    start: np.ndarray | None = None,
    max_iterations: int = 40,
    restrict: bool = True,
) -> np.ndarray | None:
    """The unique Nash mixture of the symmetric zero-sum game `payoff` (antisymmetric), or
    None where it could not be certified (a degenerate game, e.g. one with ties; then the
    caller uses an LP solver).

    Mehrotra's predictor-corrector with Gondzio's centrality correctors (Nocedal & Wright,
    "Numerical Optimization", 14.2; Gondzio 1996) on the LP  min v  s.t.  A x <= v 1,
    1^T x = 1, x >= 0. For antisymmetric A this LP is its own dual, so the primal iterate
    serves as the dual one and each step solves one (n+1)-square system
        [D - A  1; 1^T 0] [dx; dv] = [r / x - residual; 1 - 1^T x],   D = diag(s / x),
    with the slacks s = v 1 - A x (`residual` is nonzero only after a restriction). The
    iterates approach the equilibrium from the interior; once v < 1e-4 the support
    {a : x_a > s_a} is tried in `_equalizer_nash`, an exact certificate on the whole game, so
    the answer is the equilibrium itself, not an interior iterate. It starts on `candidates`
    (all players by default), near the mixture `start` if given, and drops the players that
    leave; if a dropped player turns out to be needed, it runs once more on the whole game,
    dropping no one (`restrict=False`: a degenerate game, e.g. a league's with its ties, can
    need a dropped player at every try; it recursed until Python's limit, session 36).
    ~10-15 steps on random tournaments of 1,000 players, whose supports are about half the
    players (where HiGHS's simplex method needs thousands of pivots, and its interior point
    method, built for sparse problems, 10 s)."""
    n = len(payoff)
    active = np.arange(n) if candidates is None else candidates
    restricted = active.size < n
    game = payoff[np.ix_(active, active)] if restricted else payoff
    x = np.full(active.size, 1.0 / active.size)
    if start is not None and start[active].sum() > 0:
        x = _WARM_WEIGHT * start[active] / start[active].sum() + (1.0 - _WARM_WEIGHT) * x
    gains = _matvec(game, x)
    v = float(gains.max()) + (1.0 if start is None else 0.1)
    s = v - gains
    tried = None
    for _ in range(max_iterations):
        if restrict and _RESTRICT_ABOVE < v < _RESTRICT_BELOW:
            keep = x > _DROP_RATIO * s
            if keep.any() and keep.sum() < 0.9 * active.size:
                active, x, s = active[keep], x[keep], s[keep]
                x = x / x.sum()
                game = payoff[np.ix_(active, active)]
                restricted = True
        if v < _CERTIFY_BELOW:
            support = active[x > s]
            if tried is None or not np.array_equal(support, tried):
                tried = support
                nash = _equalizer_nash(payoff, support, margin)
                if nash is not None:
                    return nash
            if v < 1e-13:  # converged without a certificate
                break
        with np.errstate(all="ignore"):  # a breakdown (inf, nan) is caught in the step's end
            step = _interior_point_step(game, x, s, v)
        if step is None:
            break
        x, s, v = step
    if restricted:  # a player left out gains against the last iterate: it may be in the support
        mixture = np.zeros(n)
        mixture[active] = x / x.sum()
        left_out = np.ones(n, dtype=bool)
        left_out[active] = False
        if _matvec(payoff, mixture)[left_out].max() >= -margin:
            return _interior_point_nash(payoff, margin, max_iterations=max_iterations, restrict=False)
    return None


def _interior_point_step(game: np.ndarray, x: np.ndarray, s: np.ndarray, v: float):
    """One predictor-corrector step of `_interior_point_nash`: the next (x, s, v), or None
    when the arithmetic broke down."""
    m = x.size
    residual = v - _matvec(game, x) - s  # primal infeasibility, eliminated by a full step
    system = np.empty((m + 1, m + 1), order="F")
    np.negative(game, out=system[:m, :m])
    system[np.arange(m), np.arange(m)] += s / x
    system[:m, m] = system[m, :m] = 1.0
    system[m, m] = 0.0
    lu = _factorize(system)
    if lu is None:
        return None
    sum_gap = 1.0 - x.sum()

    def direction(target, infeasibility, gap):
        """(dx, ds, dv): S dx + X ds = target, ds = dv 1 - A dx + infeasibility, 1^T dx = gap."""
        z = lu.solve(np.append(target / x - infeasibility, gap))
        dx, dv = z[:m], z[m]
        return dx, dv - _matvec(game, dx) + infeasibility, dv

    def longest(dx, ds):  # the longest step in [0, 1] keeping x, s >= 0
        return min(1.0, np.where(dx < 0, -x / dx, np.inf).min(), np.where(ds < 0, -s / ds, np.inf).min())

    mu = x @ s / m
    dx_a, ds_a, _ = direction(-x * s, residual, sum_gap)  # predictor (affine scaling)
    a = longest(dx_a, ds_a)
    sigma = (((x + a * dx_a) @ (s + a * ds_a) / m) / mu) ** 3
    dx, ds, dv = direction(sigma * mu - x * s - dx_a * ds_a, residual, sum_gap)
    a = longest(dx, ds)
    for _ in range(2):  # Gondzio: push outlying products x_a s_a back towards sigma mu
        trial = min(1.0, 1.5 * a + 0.1)
        products = (x + trial * dx) * (s + trial * ds)
        low, high = 0.1 * sigma * mu, 10.0 * sigma * mu
        push = np.where(products < low, low - products, np.where(products > high, np.maximum(high - products, -high), 0.0))
        cx, cs, cv = direction(push, 0.0, 0.0)
        longer = longest(dx + cx, ds + cs)
        if longer < 1.01 * a:
            break
        dx, ds, dv, a = dx + cx, ds + cs, dv + cv, longer
    a = min(1.0, 0.99 * a)
    x, s, v = x + a * dx, s + a * ds, v + a * dv
    if not (np.isfinite(x).all() and np.isfinite(s).all() and np.isfinite(v)) or x.min() <= 0 or s.min() <= 0:
        return None
    return x, s, float(v)


_SKEW_TOLERANCE = 1e-9  # |A + A^T| up to which the game counts as symmetric zero-sum


def _symmetric_nash(payoff: np.ndarray, tolerance: float) -> np.ndarray:
    """A Nash mixture of the symmetric zero-sum game `payoff` (A = -A^T up to rounding):
    the certified interior point answer where the game has a unique, nondegenerate Nash
    mixture (beyond 400 players, started on the players `_screen` keeps), else HiGHS's
    (`zero_sum_nash`)."""
    n = len(payoff)
    if n == 1:
        return np.ones(1)
    skew = 0.5 * (payoff - payoff.T)
    if np.abs(payoff - skew).max() <= _SKEW_TOLERANCE:
        candidates, start = _screen(skew) if n > _SCREEN_ABOVE else (None, None)
        nash = _interior_point_nash(skew, min(tolerance, 1e-9), candidates, start)
        if nash is not None and _matvec(payoff, nash).max() <= tolerance:
            return nash
    return zero_sum_nash(payoff)[0]


def _most_even_nash(payoff: np.ndarray, tolerance: float) -> np.ndarray | None:
    """Among all Nash mixtures {x >= 0, sum x = 1, A x <= tol}, the most evenly spread one:
    the one whose largest weight is smallest. A league's meta-game has many ties (pairs
    never played count 1/2), and a bare LP returns an arbitrary vertex of the Nash set
    (e.g. all weight on one player)."""
    n = len(payoff)
    # Variables (x_1..x_n, m); minimise m subject to x_i <= m.
    c = np.concatenate([np.zeros(n), [1.0]])
    a_ub = np.vstack([np.hstack([payoff, np.zeros((n, 1))]), np.hstack([np.eye(n), -np.ones((n, 1))])])
    b_ub = np.concatenate([np.full(n, tolerance), np.zeros(n)])
    a_eq = np.concatenate([np.ones(n), [0.0]])[None]
    bounds = [(0.0, None)] * n + [(0.0, 1.0)]
    result = scipy.optimize.linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs")
    if not result.success:
        return None
    x = np.clip(result.x[:n], 0.0, None)
    return x / x.sum()


EVEN_NASH_MAX_PLAYERS = 300


def scores_as_win_rates(scores) -> np.ndarray:
    """A mean-score meta-game S (antisymmetric; `Payoff.score_matrix`) as win-rate entries

        W = 1/2 + S / (2 max(1, max |S|))

    For +1/0/-1 outcome scores S = 2 P[win] - 1 (draws half), so W is exactly the win rate;
    for chips it is a positive rescaling of the chip game, so W - 1/2 has the same Nash
    equilibria as the expected-chips meta-game (what PSRO's meta-solver uses)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or not np.isfinite(s).all():
        raise ValueError(f"scores must be a finite 2-D array; got shape {s.shape}")
    return 0.5 + s / (2.0 * max(1.0, float(np.abs(s).max(initial=0.0))))


def fully_known_players(known) -> np.ndarray:
    """The players (indices, ascending) of a meta-game whose payoffs against each other are
    all known, `known[i, j]` saying which pairs are: PSRO's meta-solver sees only policies whose
    payoff entries have been computed (Lanctot et al. 2017, Algorithm 1, "compute missing
    entries" before "compute a meta-strategy"). An unknown entry read as 0 is a draw nobody
    played: a block of fresh players who never met would look unbeatable to the solver.

    Greedy: while an unknown pair remains, drop the player with the most unknown entries (the
    newest, i.e. highest index, among ties), so that players still waiting for their
    evaluation leave and the evaluated population stays."""
    k = np.asarray(known, dtype=bool)
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ValueError(f"known must be a square matrix; got shape {k.shape}")
    k = k | k.T  # a pair known in one order is known in both (antisymmetric payoffs)
    np.fill_diagonal(k, True)
    keep = np.ones(len(k), dtype=bool)
    missing = (~k).sum(axis=1)
    while True:
        worst = np.flatnonzero(keep & (missing == missing[keep].max(initial=0)))
        if not len(worst) or missing[worst[-1]] == 0:
            return np.flatnonzero(keep)
        drop = worst[-1]
        keep[drop] = False
        missing -= ~k[:, drop]


def nash_distribution(win_rate_matrix, tolerance: float = 1e-9, grow: int = 64) -> np.ndarray:
    """A Nash mixture of the symmetric zero-sum meta-game with payoff A = W - 1/2.

    Up to 300 players: the most evenly spread Nash mixture (`_most_even_nash`). Beyond, or
    if that LP fails, double oracle (McMahan et al. 2003): solve the game restricted to a
    subset S of players, then add the players that best respond to its mixture; stop when
    no player gains more than `tolerance` against it. A symmetric zero-sum game has value 0,
    so max_a (A x)_a <= tolerance makes x a Nash mixture of the whole game. League
    meta-games have small supports, so S stays small; once S reaches half the players, the
    whole game is solved at once. Each game is solved by `_symmetric_nash`: an interior
    point method whose answer is certified exactly as the unique equilibrium (a random
    tournament of 1,000 players, support ~500: ~0.5 s, against 12-15 s for HiGHS alone),
    HiGHS where there is no certificate (ties, several equilibria: the answer as before).
    """
    w = _check_matrix(win_rate_matrix)
    payoff = w - 0.5
    n = len(payoff)
    if n <= EVEN_NASH_MAX_PLAYERS:
        even = _most_even_nash(payoff, 0.0)
        if even is not None:
            return even
    # Start from the strongest players on average: the likely support.
    subset = np.sort(np.argsort(-payoff.mean(axis=1), kind="stable")[: min(n, grow)])
    while True:
        if 2 * subset.size >= n:  # a large support: the whole game is cheaper than more rounds
            return _symmetric_nash(payoff, tolerance)
        restricted = _symmetric_nash(payoff[np.ix_(subset, subset)], tolerance)
        mixture = np.zeros(n)
        mixture[subset] = restricted
        gains = payoff @ mixture
        outside = np.setdiff1d(np.flatnonzero(gains > tolerance), subset)
        if outside.size == 0:
            return mixture
        # Grow geometrically so that games with large supports take few rounds.
        best = outside[np.argsort(-gains[outside], kind="stable")[: max(grow, subset.size)]]
        subset = np.union1d(subset, best)


def average_nash(publications: Iterable[Mapping[str, float]], frozen: Container[str]) -> dict[str, float]:
    """The average of the league's published Nash mixtures over its frozen players.

        sigma_bar_T(p) = (1/T) sum_{t=1..T} sigma_t(p) / sum_{q in F} sigma_t(q),   p in F,

    with sigma_t the t-th published mixture, F the frozen players (`frozen`), and T the number
    of publications with weight on F (the others are skipped). A frozen player never changes,
    so the average is one fixed policy; a learning agent's weight in an old publication named
    parameters that no longer exist, and is left out.

    Fictitious play's average strategy (Brown 1951; Heinrich, Lanctot & Silver 2015,
    "Fictitious self-play in extensive-form games"): in two-player zero-sum games the average
    of best responses converges where the iterates cycle. Mixing whole players is convex in
    exploitability, NashConv(sigma_bar) <= mean_t NashConv(sigma_t|F), so the average is never
    worse than the publications on average, and the errors of successive mixtures may cancel.
    Returns {} when no publication has weight on a frozen player."""
    total: dict[str, float] = {}
    count = 0
    for weights in publications:
        kept = {p: float(w) for p, w in weights.items() if w > 0 and p in frozen}
        mass = sum(kept.values())
        if mass <= 0:
            continue
        count += 1
        for p, w in kept.items():
            total[p] = total.get(p, 0.0) + w / mass
    return {p: w / count for p, w in total.items()}


def exploitability(win_rate_matrix, mixture) -> float:
    """max_a sum_b x_b (W[a, b] - 1/2): what the best pure response gains against `mixture`."""
    w = _check_matrix(win_rate_matrix)
    x = np.asarray(mixture, dtype=np.float64)
    if x.shape != (w.shape[1],) or not np.isfinite(x).all() or (x < -1e-12).any() or abs(x.sum() - 1) > 1e-6:
        raise ValueError(
            f"mixture must be a probability vector of length {w.shape[1]}; got {x.tolist()[:8]}"
        )
    return float(((w - 0.5) @ x).max())


def relative_population_performance(win_rates_p_vs_q) -> float:
    """Balduzzi et al. 2019, Def. 3: value of the zero-sum game between populations P and Q.

    `win_rates_p_vs_q[i, j]` = P[P_i beats Q_j]; payoff = win rate - 1/2. Positive means
    P is the stronger population.
    """
    w = _check_matrix(win_rates_p_vs_q, square=False)
    _, value = zero_sum_nash(w - 0.5)
    return value


ELO_SCALE = 400.0 / np.log(10.0)


def elo_ratings(wins, draws=None, anchor: float = 1500.0, prior_games: float = 0.1) -> np.ndarray:
    """Elo ratings fitted to (decayed) counts, `wins[a, b]` = games a won against b.

    Maximises sum_{a,b} (wins[a,b] + draws[a,b]/2) log sigma((r_a - r_b) / s),
    s = 400 / ln 10, plus `prior_games` half-won virtual games between every pair so
    that players with no games (or only wins) stay finite; the mean rating is `anchor`.
    """
    wins = np.asarray(wins, dtype=np.float64)
    n = wins.shape[0]
    if wins.shape != (n, n) or not np.isfinite(wins).all() or (wins < 0).any():
        raise ValueError(f"wins must be a square array of non-negative counts; got shape {wins.shape}")
    draws = np.zeros_like(wins) if draws is None else np.asarray(draws, dtype=np.float64)
    score = wins + 0.5 * draws + 0.5 * prior_games * (1.0 - np.eye(n))

    def negative_log_likelihood(r):
        diff = (r[:, None] - r[None, :]) / ELO_SCALE
        log_p = -np.logaddexp(0.0, -diff)
        p = np.exp(log_p)
        nll = -(score * log_p).sum()
        grad_diff = -score * (1.0 - p)  # d nll / d diff[a, b]
        grad = (grad_diff.sum(axis=1) - grad_diff.sum(axis=0)) / ELO_SCALE
        return nll, grad

    result = scipy.optimize.minimize(negative_log_likelihood, np.zeros(n), jac=True, method="L-BFGS-B")
    r = result.x
    return r - r.mean() + anchor


def elo_win_probability(rating_a, rating_b):
    return 1.0 / (1.0 + 10.0 ** ((np.asarray(rating_b) - np.asarray(rating_a)) / 400.0))


# TrueSkill's defaults (the `trueskill` package's and Herbrich et al.'s), with a 5% draw rate.
TRUESKILL_MU, TRUESKILL_SIGMA = 25.0, 25.0 / 3
TRUESKILL_BETA, TRUESKILL_TAU, TRUESKILL_DRAW_PROBABILITY = 25.0 / 6, 25.0 / 300, 0.05


def _pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


# draw margin: Phi^-1((p + 1) / 2) * sqrt(2 players) * beta
_DRAW_MARGIN = float(scipy.stats.norm.ppf((TRUESKILL_DRAW_PROBABILITY + 1) / 2)) * math.sqrt(2) * TRUESKILL_BETA


def trueskill_update(ratings: dict, home: str, away: str, outcome: str) -> None:
    """Updates `ratings` (player -> (mu, sigma); a new player starts at the default rating)
    with one game, `outcome` from home's side.

    TrueSkill's two-player update in closed form (Herbrich, Minka & Graepel 2006, eq. 4-5 and
    table 1; what the `trueskill` package's factor graph computes for one 1-vs-1 game, ~50x
    faster): with the dynamics s^2 = sigma^2 + tau^2 for both players,
        c^2 = s_w^2 + s_l^2 + 2 beta^2,  t = (mu_w - mu_l) / c,  e = draw_margin / c,
        win:  v = N(t - e) / Phi(t - e),  w = v (v + t - e)
        draw: v = (N(-e - t) - N(e - t)) / (Phi(e - t) - Phi(-e - t)),
              w = v^2 + ((e - t) N(e - t) + (e + t) N(e + t)) / (Phi(e - t) - Phi(-e - t))
        mu_w += s_w^2 / c v,  mu_l -= s_l^2 / c v,  sigma^2 = s^2 (1 - s^2 / c^2 w)."""
    if outcome not in ("win", "draw", "loss"):
        raise ValueError(f"unknown outcome {outcome!r}; allowed: win, draw, loss")
    default = (TRUESKILL_MU, TRUESKILL_SIGMA)
    if home == away:
        ratings[home] = ratings.get(home, default)
        return
    winner, loser = (away, home) if outcome == "loss" else (home, away)
    (mu_w, sigma_w), (mu_l, sigma_l) = ratings.get(winner, default), ratings.get(loser, default)
    s2_w, s2_l = sigma_w ** 2 + TRUESKILL_TAU ** 2, sigma_l ** 2 + TRUESKILL_TAU ** 2
    c2 = s2_w + s2_l + 2 * TRUESKILL_BETA ** 2
    c = math.sqrt(c2)
    t, e = (mu_w - mu_l) / c, _DRAW_MARGIN / c
    if outcome == "draw":
        denominator = _cdf(e - t) - _cdf(-e - t)
        v = (_pdf(-e - t) - _pdf(e - t)) / denominator
        w = v * v + ((e - t) * _pdf(e - t) + (e + t) * _pdf(e + t)) / denominator
    else:
        v = _pdf(t - e) / _cdf(t - e)
        w = v * (v + t - e)
    ratings[winner] = (mu_w + s2_w / c * v, math.sqrt(s2_w * (1 - s2_w / c2 * w)))
    ratings[loser] = (mu_l - s2_l / c * v, math.sqrt(s2_l * (1 - s2_l / c2 * w)))


def trueskill_ratings(
    games: Iterable[tuple[str, str, str]], players: Sequence[str] | None = None
) -> dict[str, tuple[float, float]]:
    """(mu, sigma) per player after replaying `games` (home, away, outcome) in order."""
    ratings: dict[str, tuple[float, float]] = {}
    for p in players or ():
        ratings.setdefault(p, (TRUESKILL_MU, TRUESKILL_SIGMA))
    for home, away, outcome in games:
        trueskill_update(ratings, home, away, outcome)
    return ratings
