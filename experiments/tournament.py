"""Rank agents: every pair plays, the payoff table with standard errors, ratings with intervals.

    python -m experiments.tournament runs/kuhn:any_main_agent_0 runs/kuhn:result kuhn.agent.npz \\
        --games=2000 --seed=0 --out=tournament

AGENT is any name of `experiments.agent_ref` (RUN_DIR:PLAYER_ID, RUN_DIR:result, an exported
file), at least two, all of one game: agents of different runs, seeds and settings compare (each
plays with its own network). Every pair plays --games games, half with each agent as side 0 (the
game's own seat draw, e.g. poker's, comes on top). The games are played by the project's one
rollout (`actors.rollout.play_to_end`: one game per batch slot in one jitted `lax.while_loop`,
so short games are not over-sampled; as the evaluator's device path, `evaluate_pairs`), with
actions sampled (`--greedy`: the most likely, as `evaluator.greedy`). A Nash mixture draws one
member per game (`agents.exported.mixture_policy`).

Writes, in --out (a directory):
- `tournament.json`: the agents (label, name, source; a mixture's members and weights), the
  payoff table (`payoff.score[i][j]`: agent i's score against j, wins + draws/2 over their
  games, its standard error and games; `payoff.chips`: the game's mean payoff to i, e.g. chips
  in poker, and its standard error) and the ratings (`ratings.elo`, `low`, `high`: Elo of the
  Bradley-Terry model fitted to every pair's games, `ratings_from_scores`, with 95% intervals
  by bootstrap over games, `bootstrap_ratings`);
- `tournament.png`: the score table as a heatmap beside the ratings with their intervals.
The table is printed too. A wrong name, fewer than two agents, agents of different games or a
game the tournament cannot play yet (one with races, SMAX; one without a JAX step): a message
and exit 2, nothing written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS

LEVEL = 0.95


class TournamentError(ValueError):
    """Input the tournament cannot play: the message says why."""


# ---------------------------------------------------------------------------------------------
# Ratings.


def ratings_from_scores(scores, prior_games: float = 0.1, anchor: float = 1500.0) -> np.ndarray:
    """Elo ratings of the Bradley-Terry model fitted to pairwise results.

    `scores[i][j]` is agent i's score against j summed over their games (wins + draws/2), so
    that scores[i][j] + scores[j][i] is the number of games they played. The ratings r maximise

        sum_{i != j} scores[i][j] * log P(i beats j),   P(i beats j) = 1 / (1 + 10^((r_j - r_i) / 400))

    (`league.meta.elo_ratings`, the league's own fit), with `prior_games` half-won virtual games
    between every pair so that an agent that won every game stays finite, and mean `anchor`.
    Two agents with P = 3/4 are 400 log10(3) = 190.8 Elo apart."""
    from league import meta

    scores = np.asarray(scores, np.float64)
    return meta.elo_ratings(scores, None, anchor=anchor, prior_games=prior_games)


def score_matrix(pair_scores: dict, k: int) -> np.ndarray:
    """[k, k] summed scores of `pair_scores` {(i, j): per-game scores of i against j}."""
    scores = np.zeros((k, k))
    for (i, j), s in pair_scores.items():
        s = np.asarray(s, np.float64)
        scores[i, j] += s.sum()
        scores[j, i] += len(s) - s.sum()
    return scores


def bootstrap_ratings(pair_scores: dict, k: int, replicates: int = 200, seed: int = 0,
                      level: float = LEVEL, prior_games: float = 0.1, anchor: float = 1500.0):
    """(ratings, low, high): the fit to `pair_scores` ({(i, j): agent i's per-game scores
    against j}, `score_matrix`) and its `level` interval for each agent, by bootstrap over
    games: each replicate draws every pair's games again with replacement (numpy's generator
    seeded with `seed`) and fits again; the interval is the replicates' percentiles
    (1 - level) / 2 and (1 + level) / 2."""
    ratings = ratings_from_scores(score_matrix(pair_scores, k), prior_games, anchor)
    rng = np.random.default_rng(seed)
    pairs = [(pair, np.asarray(s, np.float64)) for pair, s in sorted(pair_scores.items())]
    draws = np.empty((replicates, k))
    for b in range(replicates):
        again = {pair: s[rng.integers(0, len(s), len(s))] for pair, s in pairs}
        draws[b] = ratings_from_scores(score_matrix(again, k), prior_games, anchor)
    low, high = np.percentile(draws, [50 * (1 - level), 50 * (1 + level)], axis=0)
    return ratings, low, high


# ---------------------------------------------------------------------------------------------
# Playing.


@dataclasses.dataclass
class Entrant:
    """An agent in the tournament: its name, label and how it acts."""

    label: str
    agent: object                # experiments.agent_ref.Agent

    @property
    def mixture(self) -> bool:
        return bool(getattr(self.agent, "weights", None))

    def params_arg(self):
        """What its acting function takes: the parameters, or a mixture's (stacked members, weights)."""
        import jax

        if self.mixture:
            from agents.exported import stack_members

            return stack_members(self.agent.params), jax.numpy.asarray(self.agent.weights, jax.numpy.float32)
        return jax.device_put(self.agent.params)


def labels(agents) -> list[str]:
    """A short label for each agent (its player id, `result` or the file's name), unique."""
    out = []
    for agent in agents:
        source = agent.source or {}
        if "file" in source:
            label = os.path.basename(source["file"])
        else:
            run = os.path.basename(os.path.normpath(source.get("run_dir", "")))
            label = f"{run}:{source.get('player_id', 'result' if getattr(agent, 'weights', None) else '?')}"
        out.append(label)
    for i, label in enumerate(out):
        if out.count(label) > 1:
            out[i] = f"{label}#{i}"
    return out


def _acting(network, mixture: bool, greedy: bool):
    """(act(params_arg) -> act(key, obs, state, first), initial_state(B))."""
    from actors.rollout import network_policy

    if mixture:
        from agents.exported import mixture_initial_state, mixture_policy

        return (lambda arg: mixture_policy(network, arg[0], arg[1], greedy),
                lambda b: mixture_initial_state(network, b))
    return (lambda params: network_policy(network, params, greedy), network.initial_state)


_PROGRAMS: dict = {}


def play_program(fns, a: Entrant, b: Entrant, batch: int, greedy: bool):
    """The jitted program of one batch of games of `a` (side 0) against `b` (side 1): `batch`
    fresh games played to their ends by `actors.rollout.play_to_end`; (params_a, params_b, key)
    -> (outcome [B] int8 side 0's view, score [B] the game's payoff to side 0, length, ended).
    Cached by what it computes (the networks, mixture or not, the batch)."""
    import jax

    from actors.rollout import Games, play_to_end
    from agents import network_key

    key = (fns.config, network_key(a.agent.network), a.mixture, network_key(b.agent.network), b.mixture,
           batch, greedy)
    if key not in _PROGRAMS:
        act_a, initial_a = _acting(a.agent.network, a.mixture, greedy)
        act_b, initial_b = _acting(b.agent.network, b.mixture, greedy)
        max_steps = int(fns.spec.max_steps) + 1

        def play(params_a, params_b, rng):
            reset_key, play_key = jax.random.split(rng)
            game_state, obs = jax.vmap(fns.reset)(jax.random.split(reset_key, batch))
            games = Games.start(game_state, obs, initial_a(batch), initial_b(batch), batch)
            return play_to_end(fns.step, act_a(params_a), act_b(params_b), games, play_key, max_steps)

        _PROGRAMS[key] = jax.jit(play)
    return _PROGRAMS[key]


def play_pair(fns, a: Entrant, b: Entrant, games: int, key, batch: int, greedy: bool = False):
    """`games` games of `a` (side 0) against `b` (side 1): (a's per-game scores, wins + draws/2,
    and the game's payoffs to a), in batches of `batch` games (the last one's surplus games
    dropped: every slot's game is an independent draw)."""
    import jax

    program = play_program(fns, a, b, batch, greedy)
    pa, pb = a.params_arg(), b.params_arg()
    scores, payoffs = [], []
    done, chunk = 0, 0
    while done < games:
        outcome, score, _, ended = (np.asarray(x) for x in program(pa, pb, jax.random.fold_in(key, chunk)))
        if not ended.all():
            raise RuntimeError(f"{(~ended).sum()} of {batch} games of {a.label} against {b.label} did not end "
                               f"within the game's {fns.spec.max_steps} steps")
        take = min(batch, games - done)
        scores.append((outcome[:take].astype(np.float64) + 1) / 2)
        payoffs.append(score[:take].astype(np.float64))
        done, chunk = done + take, chunk + 1
    return np.concatenate(scores), np.concatenate(payoffs)


def game_functions(agents):
    """The game all `agents` play (its pure functions); TournamentError if they are of
    different games or of one the tournament cannot play yet."""
    from actors.games import registry
    from agents import exported

    games = sorted({a.game for a in agents})
    if len(games) > 1:
        raise TournamentError("the agents are of different games: " + "; ".join(
            f"{a.name}: {a.game}" for a in agents) + " (a tournament plays agents of one game)")
    try:
        game = registry.resolve(games[0])
    except registry.UnknownGame as e:
        raise TournamentError(f"the agents' game {games[0]!r}: {e}") from None
    if game.capabilities.races:
        raise TournamentError(f"{game.name} is a game with races (SMAX): its tournament is not built yet "
                              "(issue 85); its agents play through benchmarks/builtin_opponent.py")
    if not game.device:
        raise TournamentError(f"{game.name} has no JAX step (an OpenSpiel pool): the tournament plays "
                              "games by the device rollout only (not yet)")
    fns = game.functions()
    for a in agents:
        if exported.side_to_dict(a.spec.side(a.side)) != exported.side_to_dict(fns.spec.side(0)):
            raise TournamentError(f"{a.name}: its network observes another {game.name} than this version's "
                                  "(the observation or the actions differ)")
    return fns


def resolve_all(names: list[str]):
    from experiments import agent_ref

    if len(names) < 2:
        raise TournamentError(f"name at least two agents to play each other (got {len(names)}); an agent is "
                              f"named as {agent_ref.describe_forms()}")
    return [agent_ref.resolve(n) for n in names]


def play_tournament(names: list[str], games: int, seed: int = 0, batch: int = 512, greedy: bool = False,
                    bootstrap: int = 200, log=print) -> dict:
    """Plays every pair of the agents `names` names `games` games (half with each as side 0);
    returns the tournament's record (module docstring; what `tournament.json` holds).
    AgentNameError / TournamentError on wrong input, before any game."""
    import jax

    if games < 2:
        raise TournamentError(f"--games must be at least 2 (half with each agent as side 0); got {games}")
    agents = resolve_all(names)
    fns = game_functions(agents)
    entrants = [Entrant(label, agent) for label, agent in zip(labels(agents), agents)]
    k = len(entrants)
    batch = max(1, min(batch, (games + 1) // 2))
    root = jax.random.PRNGKey(seed)
    pair_scores, pair_payoffs = {}, {}
    for i in range(k):
        for j in range(i + 1, k):
            first, second = games // 2 + games % 2, games // 2
            pair_key = jax.random.fold_in(root, i * k + j)
            s0, p0 = play_pair(fns, entrants[i], entrants[j], first, jax.random.fold_in(pair_key, 0), batch, greedy)
            s1, p1 = play_pair(fns, entrants[j], entrants[i], second, jax.random.fold_in(pair_key, 1), batch, greedy)
            pair_scores[(i, j)] = np.concatenate([s0, 1.0 - s1])
            pair_payoffs[(i, j)] = np.concatenate([p0, -p1])
            if log:
                log(f"  {entrants[i].label} v {entrants[j].label}: {pair_scores[(i, j)].mean():.3f} "
                    f"over {games} games")
    ratings, low, high = bootstrap_ratings(pair_scores, k, bootstrap, seed)
    return record(entrants, pair_scores, pair_payoffs, games, seed, greedy, (ratings, low, high), bootstrap)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    n = len(x)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")


def record(entrants, pair_scores, pair_payoffs, games, seed, greedy, ratings, bootstrap) -> dict:
    k = len(entrants)
    table = {name: [[None] * k for _ in range(k)] for name in
             ("score", "standard_error", "games", "chips", "chips_standard_error")}
    for (i, j), s in pair_scores.items():
        mean, se = _mean_se(s)
        chips, chips_se = _mean_se(pair_payoffs[(i, j)])
        for a, b, m, c in ((i, j, mean, chips), (j, i, 1.0 - mean, -chips)):
            table["score"][a][b], table["standard_error"][a][b], table["games"][a][b] = m, se, len(s)
            table["chips"][a][b], table["chips_standard_error"][a][b] = c, chips_se
    agents = []
    for e in entrants:
        entry = {"label": e.label, "name": e.agent.name, "game": e.agent.game,
                 "source": json.loads(json.dumps(e.agent.source, default=str))}
        if e.mixture:
            entry["members"] = [{"weight": float(w), **json.loads(json.dumps(m, default=str))}
                                for w, m in zip(e.agent.weights, e.agent.members)]
        agents.append(entry)
    elo, low, high = ratings
    return {"game": entrants[0].agent.game, "games_per_pair": games, "seed": seed, "greedy": greedy,
            "agents": agents,
            "payoff": {**table, "what": "score[i][j]: agent i's wins + draws/2 over its games against j "
                       "(half of them as side 0); standard_error: of that mean over games; chips[i][j]: "
                       "the game's mean payoff to i"},
            "ratings": {"elo": [float(x) for x in elo], "low": [float(x) for x in low],
                        "high": [float(x) for x in high], "level": LEVEL, "bootstrap_replicates": bootstrap,
                        "model": "Bradley-Terry: P(i beats j) = 1 / (1 + 10^((r_j - r_i) / 400)), fitted to "
                                 "every pair's games (draws half), mean 1500; intervals: percentiles of "
                                 "refits to the games resampled with replacement within each pair"}}


# ---------------------------------------------------------------------------------------------
# Output.


def table_text(result: dict) -> str:
    """The payoff table and the ratings as the terminal shows them."""
    labels_ = [a["label"] for a in result["agents"]]
    k = len(labels_)
    width = max(12, *(len(s) for s in labels_)) + 1
    cell = 15
    lines = [f"{result['game']}: {result['games_per_pair']} games per pair; score of the row agent "
             "(wins + draws/2) +- its standard error"]
    lines.append(" " * (width + 3) + "".join(f"{'#' + str(j):>{cell}}" for j in range(k))
                 + f"{'Elo':>8}  {int(result['ratings']['level'] * 100)}% interval")
    score, se = result["payoff"]["score"], result["payoff"]["standard_error"]
    ratings = result["ratings"]
    for i, label in enumerate(labels_):
        cells = "".join(f"{'-':>{cell}}" if score[i][j] is None else f"{score[i][j]:>{cell - 7}.3f} +-{se[i][j]:.3f}"
                        for j in range(k))
        lines.append(f"#{i:<2}{label:<{width}}{cells}{ratings['elo'][i]:8.0f}  "
                     f"[{ratings['low'][i]:.0f}, {ratings['high'][i]:.0f}]")
    return "\n".join(lines)


def draw(result: dict, path: str) -> str:
    """tournament.png: the score table as a heatmap, and the ratings with their intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels_ = [a["label"] for a in result["agents"]]
    k = len(labels_)
    score = np.array([[np.nan if x is None else x for x in row] for row in result["payoff"]["score"]])
    se = result["payoff"]["standard_error"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(5 + 1.4 * k, 1.5 + 0.6 * k),
                                      gridspec_kw={"width_ratios": [max(k, 2), 2]})
    image = left.imshow(score, cmap="RdBu", vmin=0, vmax=1)
    for i in range(k):
        for j in range(k):
            if i != j:
                left.text(j, i, f"{score[i, j]:.2f}\n±{se[i][j]:.2f}", ha="center", va="center", fontsize=8)
    left.set_xticks(range(k), [f"#{j}" for j in range(k)])
    left.set_yticks(range(k), [f"#{i} {s}" for i, s in enumerate(labels_)], fontsize=8)
    left.set_title(f"score of the row agent ({result['games_per_pair']} games a pair)", fontsize=9)
    fig.colorbar(image, ax=left, fraction=0.046)
    elo = np.asarray(result["ratings"]["elo"])
    low, high = np.asarray(result["ratings"]["low"]), np.asarray(result["ratings"]["high"])
    right.errorbar(elo, range(k), xerr=[elo - low, high - elo], fmt="o", capsize=3)
    right.set_yticks(range(k), [f"#{i}" for i in range(k)])
    right.invert_yaxis()
    right.set_xlabel(f"Elo, {int(result['ratings']['level'] * 100)}% interval")
    right.set_title(result["game"], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cli(names: list[str], games: int, seed: int = 0, out: str = "tournament", batch: int = 512,
        greedy: bool = False, bootstrap: int = 200) -> int:
    """The command: 0 (the files written, the table printed), 2 on wrong input (a message on
    stderr, nothing written)."""
    from agents.exported import ExportedFileError
    from experiments.agent_ref import AgentNameError

    if bootstrap < 1:
        print(f"error: --bootstrap must be at least 1; got {bootstrap}", file=sys.stderr)
        return 2
    if out and os.path.exists(out) and not os.path.isdir(out):
        print(f"error: --out={out} is a file; name a directory", file=sys.stderr)
        return 2
    try:
        result = play_tournament(names, games, seed, batch, greedy, bootstrap)
    except (AgentNameError, ExportedFileError, TournamentError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tournament.json"), "w") as f:
        json.dump(result, f, indent=1)
    draw(result, os.path.join(out, "tournament.png"))
    print(table_text(result))
    for i, a in enumerate(result["agents"]):
        print(f"#{i} {a['label']}: {a['name']}")
    print(f"wrote {os.path.join(out, 'tournament.json')} and {os.path.join(out, 'tournament.png')}")
    return 0


def define_flags() -> None:
    flags.DEFINE_integer("games", 1000, "games per pair, half with each agent as side 0")
    flags.DEFINE_integer("seed", 0, "seed of the games and of the bootstrap")
    flags.DEFINE_string("out", "tournament", "directory for tournament.json and tournament.png")
    flags.DEFINE_integer("batch", 512, "games played at once (one batch slot each)")
    flags.DEFINE_bool("greedy", False, "the agents play their most likely actions instead of sampling")
    flags.DEFINE_integer("bootstrap", 200, "bootstrap replicates for the ratings' intervals")


def main(argv):
    from experiments.nashconv import quiet_backend_probe

    quiet_backend_probe()
    return cli(argv[1:], FLAGS.games, FLAGS.seed, FLAGS.out, FLAGS.batch, FLAGS.greedy, FLAGS.bootstrap)


if __name__ == "__main__":
    define_flags()
    app.run(lambda argv: sys.exit(main(argv)))
