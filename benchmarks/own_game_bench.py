"""A league on a game nobody tuned: does its main agent get stronger than simple players?

    python -m benchmarks.own_game_bench --game=examples.nim:make --minutes=10 --seeds=0,1
    python -m benchmarks.own_game_bench --game=pgx/connect_four --minutes=10 --seeds=0,1

For each seed, the game's default league (`python -m experiments.league --game=G`, in one
process) runs for `--minutes`; then the main agent's frozen snapshots nearest 0, half and all of
that time each play `--games` games (seats drawn per game) against a uniformly random legal
player and a one-ply greedy player (it takes a move that wins at once where it has one, else a
random legal move), both sides through the game's own functions (`GameFunctions`, vmapped).
Issue 56's target: the main agent beats both by more than its starting rate. Also: the league's
recorded games/s beside the game's raw random-play steps/s in the same run, and players per
minute. Turn-based games only (the greedy player tries each legal move of the side to move).

Last line: `RESULT own_game game=G start_vs_random=... end_vs_random=... start_vs_greedy=...
end_vs_greedy=... ratio=<(end - start) vs greedy, mean over seeds, / 0.1> target=0.1`.
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("game", "examples.nim:make", "the game (any --game form with a JAX step)")
flags.DEFINE_float("minutes", 10.0, "minutes of each league")
flags.DEFINE_list("seeds", ["0", "1"], "league seeds")
flags.DEFINE_integer("games", 512, "games per evaluation (each snapshot against each player)")


def baseline_act(fns, kind: str):
    """A baseline side's action for ONE game: "random" (uniform legal) or "greedy" (a move that
    ends the game won for the mover at once, else random)."""

    def act(key, state, obs, side):
        mask = obs["action_mask"]
        head = next(iter(mask))
        legal = mask[head]
        noise = jax.random.uniform(key, legal.shape)
        pick = jnp.argmax(jnp.where(legal, noise, -1.0))
        if kind == "random":
            return {head: pick}
        values = jnp.arange(legal.shape[-1])

        def wins(v):
            actions = ({head: v}, {head: v})
            _, _, rewards, done, _, _ = fns.step(state, actions)
            return done & (rewards[side] > 0)

        winning = jax.vmap(wins)(values) & legal
        return {head: jnp.where(winning.any(), jnp.argmax(winning), pick)}

    return act


def evaluate(network, params, fns, kind: str, games: int, key) -> float:
    """The agent's score (wins + half the draws) over `games` first games against `kind`."""
    from agents import act

    base = baseline_act(fns, kind)
    seats = jax.random.bernoulli(jax.random.fold_in(key, 1), 0.5, (games,)).astype(jnp.int32)
    state, obs = jax.vmap(fns.reset)(jax.random.split(key, games))
    core = network.initial_state(games)
    first = jnp.ones(games, bool)
    finished = jnp.zeros(games, bool)
    score = jnp.zeros(games)

    @jax.jit
    def step(state, obs, core, first, finished, score, k):
        k_agent, k_base = jax.random.split(k)
        mine = jax.tree_util.tree_map(lambda a, b: jnp.where(_expand(seats, a), b, a), obs[0], obs[1])
        other = jax.tree_util.tree_map(lambda a, b: jnp.where(_expand(seats, a), a, b), obs[0], obs[1])
        action, core = act(network, params, k_agent, mine, core, first)
        theirs = jax.vmap(base)(jax.random.split(k_base, games), state, other, 1 - seats)
        a0 = jax.tree_util.tree_map(lambda m, t: jnp.where(seats == 0, m, t), action.game, theirs)
        a1 = jax.tree_util.tree_map(lambda m, t: jnp.where(seats == 0, t, m), action.game, theirs)
        state, obs, rewards, done, outcome, _ = jax.vmap(fns.step)(state, (a0, a1))
        mine_outcome = jnp.where(seats == 0, outcome, -outcome).astype(jnp.float32)
        new = done & ~finished
        score = score + jnp.where(new, (mine_outcome + 1.0) / 2.0, 0.0)
        return state, obs, core, done, finished | done, score

    keys = jax.random.split(jax.random.fold_in(key, 2), fns.spec.max_steps + 1)
    for k in keys:
        state, obs, core, first, finished, score = step(state, obs, core, first, finished, score, k)
        if bool(finished.all()):
            break
    return float(score.sum() / max(int(finished.sum()), 1))


def _expand(mask, like):
    return mask.reshape(mask.shape + (1,) * (jnp.ndim(like) - 1)).astype(bool)


def raw_steps_per_second(fns, batch: int = 1024, seconds: float = 10.0) -> float:
    """The game's own random legal play, jitted and vmapped (the peer of the league's rate)."""
    base = baseline_act(fns, "random")

    @jax.jit
    def step(state, obs, k):
        ks = jax.random.split(k, 2 * batch).reshape(2, batch, -1)
        a0 = jax.vmap(base)(ks[0], state, obs[0], jnp.zeros(batch, jnp.int32))
        a1 = jax.vmap(base)(ks[1], state, obs[1], jnp.ones(batch, jnp.int32))
        state, obs, *_ = jax.vmap(fns.step)(state, (a0, a1))
        return state, obs

    state, obs = jax.jit(jax.vmap(fns.reset))(jax.random.split(jax.random.PRNGKey(0), batch))
    key = jax.random.PRNGKey(1)
    state, obs = step(state, obs, key)
    jax.block_until_ready(state)
    start, n = time.time(), 0
    while time.time() - start < seconds:
        key, k = jax.random.split(key)
        state, obs = step(state, obs, k)
        n += 1
    jax.block_until_ready(state)
    return n * batch / (time.time() - start)


def run_league(game: str, seed: int, minutes: float) -> str:
    from experiments import launchers
    from experiments.config import RunConfig, prepare_run_dir

    run_dir = tempfile.mkdtemp(prefix=f"own_game_{seed}_")
    config = RunConfig.make(game=game, runner="inprocess", run_dir=run_dir, minutes=minutes, seed=seed,
                            dashboard_port=-1, progress_every_seconds=30.0)
    prepare_run_dir(config)
    out = io.StringIO()
    launchers.run_inprocess(config, stop_event=threading.Event(), out=out)
    return run_dir


def main(argv):
    del argv
    from agents.storage import params_from_npz_bytes
    from coordinator.history import LeagueHistory
    from experiments import build
    from experiments.config import RunConfig, game_of

    game = game_of(FLAGS.game)
    fns = game.functions()
    raw = raw_steps_per_second(fns)
    print(f"{FLAGS.game}: raw random play {raw:,.0f} steps/s (batch 1024)", flush=True)
    rows = []
    for seed in map(int, FLAGS.seeds):
        start = time.time()
        run_dir = run_league(FLAGS.game, seed, FLAGS.minutes)
        history = LeagueHistory(run_dir, readonly=True)
        players = history.players()
        games = history.game_count()
        history.close()
        config = RunConfig.make(game=FLAGS.game)
        network = build.make_network(config, fns.spec)
        main_ids = {p["player_id"] for p in players if p["role"] == "main_agent"}
        mains = [p for p in players if p["parent"] in main_ids]   # the main agents' snapshots
        t0 = min(p["wall_time"] for p in players)
        marks = [0.0, 0.5, 1.0]
        picked = [min(mains, key=lambda p, m=m: abs(p["wall_time"] - t0 - m * FLAGS.minutes * 60)) for m in marks]
        row = {"seed": seed, "games_per_s": games / (time.time() - start), "players_per_min": len(players) / FLAGS.minutes}
        for m, p in zip(marks, picked):
            with open(os.path.join(run_dir, "params", p["player_id"] + ".npz"), "rb") as f:
                _, params = params_from_npz_bytes(f.read())
            key = jax.random.PRNGKey(seed)
            for kind in ("random", "greedy"):
                row[f"{kind}@{m}"] = evaluate(network, params, fns, kind, FLAGS.games, key)
            row[f"player@{m}"] = p["player_id"]
        rows.append(row)
        print(f"seed {seed}: {row['games_per_s']:,.0f} league games/s (with its start), "
              f"{row['players_per_min']:.0f} players/min; vs random "
              + " ".join(f"{row[f'random@{m}']:.3f}" for m in marks) + "; vs greedy "
              + " ".join(f"{row[f'greedy@{m}']:.3f}" for m in marks)
              + f" at 0/{FLAGS.minutes / 2:g}/{FLAGS.minutes:g} min ({', '.join(row[f'player@{m}'] for m in marks)})",
              flush=True)

    def mean(name):
        return float(np.mean([r[name] for r in rows]))

    gain = mean("greedy@1.0") - mean("greedy@0.0")
    print(f"RESULT own_game game={FLAGS.game} start_vs_random={mean('random@0.0'):.3f} "
          f"end_vs_random={mean('random@1.0'):.3f} start_vs_greedy={mean('greedy@0.0'):.3f} "
          f"end_vs_greedy={mean('greedy@1.0'):.3f} league_games_per_s={mean('games_per_s'):.0f} "
          f"raw_steps_per_s={raw:.0f} players_per_min={mean('players_per_min'):.0f} "
          f"ratio={gain / 0.1:.2f} target=0.1")


if __name__ == "__main__":
    app.run(main)
