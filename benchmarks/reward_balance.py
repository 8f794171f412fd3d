"""What the OpenAI Five reward pays for each army: a won and a lost game, per race and army.

    python -m benchmarks.reward_balance --games=128

Each race plays each army of its menu against every race's scripted AI (jaxmarl's heuristic
micro on both sides, the AI picking its army uniformly), `--games` games a cell. For every
game it sums the side's team mean of the `openai_five` reward (`actors/rewards.py`) over the
game: the return an army pick learns from (the pick's advantage is the mean over units). Two
formulas on the same games: `size_fair` (the default: damage and kills counted in units of the
enemy army's size relative to one's own) and `per_unit` (OpenAI Five's 5 v 5 counting).

A reward fit to learn picks from pays a win about the same whatever the army, and a loss
likewise, so that picks follow the win rate. Per cell, from the mean return of a won game R_w
and of a lost one R_l: the break-even win rate p* = -R_l / (R_w - R_l), at which the pick's
expected return is 0 (fair: 0.5 in every cell). Per formula the last line gives the largest
|p* - 0.5| over the cells with both wins and losses (`breakeven_dev`) and the spread of R_w
(`win_spread`); ratio = size_fair's breakeven_dev / 0.05, target <= 1 (every army breaks even
within 0.05 of a 0.5 win rate).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from actors.games import smax_races as sr
from actors.rewards import OpenAIFiveConfig, OpenAIFiveReward, side_batch
from actors.rollout import play

flags.DEFINE_integer("games", 128, "Games per (race, army, enemy race) cell.")
flags.DEFINE_integer("seed", 0, "Random seed.")
flags.DEFINE_float("team_spirit", 0.3, "tau (the team mean, which a pick learns from, does not "
                   "depend on it).")
FLAGS = flags.FLAGS


def play_cells(config: sr.SmaxRacesConfig, games: int, seed: int):
    """Every (race, army, enemy race) cell, `games` rows each, in one jitted batch: (cells,
    Played [T, B])."""
    fns = sr.functions(config)
    cells = list(itertools.product(range(len(sr.RACES)), range(sr.COMPOSITIONS_PER_RACE),
                                   range(len(sr.RACES))))
    races = jnp.asarray([[r, e] for r, _, e in cells for _ in range(games)], jnp.int32)
    armies = jnp.asarray([a for _, a, _ in cells for _ in range(games)], jnp.int32)
    batch = races.shape[0]
    steps = config.max_steps + 1

    @jax.jit
    def run(key):
        act0, state0 = sr.heuristic_side(fns, 0, batch, armies)
        act1, state1 = sr.heuristic_side(fns, 1, batch, None)
        reset_key, play_key = jax.random.split(key)
        games_ = sr.start_games(fns, races, reset_key, state0, state1)
        return play(fns.step, act0, act1, games_, play_key, steps)[1]

    return cells, run(jax.random.PRNGKey(seed))


def game_returns(played, reward: OpenAIFiveReward, tau: float):
    """Side 0's team-mean return over each row's first game [B] and its outcome [B]."""
    fields = dict(played.signals, done=played.done, outcome=played.outcome,
                  rewards=played.rewards, time=played.signals["time"])
    batch = side_batch(fields, 0)
    steps, rows = np.shape(played.done)
    r = np.asarray(reward.rewards(batch, tau)).reshape(steps, rows, -1)
    present = np.asarray(batch["present"]).reshape(steps, rows, -1)
    team = (r * present).sum(-1) / np.maximum(present.sum(-1), 1)
    done = np.asarray(played.done)
    first_game = (np.cumsum(done, 0) - done) == 0
    outcome = np.asarray(played.outcome)[np.argmax(done, 0), np.arange(rows)]
    return (team * first_game).sum(0), outcome


def main(_):
    config = sr.SmaxRacesConfig()
    cells, played = play_cells(config, FLAGS.games, FLAGS.seed)
    formulas = {"size_fair": OpenAIFiveConfig(size_fair=True),
                "per_unit": OpenAIFiveConfig(size_fair=False)}
    summary = {}
    for name, cfg in formulas.items():
        ret, outcome = game_returns(played, OpenAIFiveReward(cfg), FLAGS.team_spirit)
        ret = ret.reshape(len(cells), FLAGS.games)
        outcome = outcome.reshape(len(cells), FLAGS.games)
        print(f"\n{name}: per cell, win rate (draws half) | mean return: all / won / lost games")
        table = {}
        for i, (r, a, e) in enumerate(cells):
            won, lost = ret[i][outcome[i] == 1], ret[i][outcome[i] == -1]
            table[r, a, e] = ((outcome[i] == 1).mean() + 0.5 * (outcome[i] == 0).mean(), ret[i].mean(),
                              won.mean() if won.size else np.nan, lost.mean() if lost.size else np.nan)
            army = config.menu[r][a].name
            print(f"  {sr.RACES[r]:8s} {army:11s} vs {sr.RACES[e]:8s}: {table[r, a, e][0]:.2f} | "
                  f"{table[r, a, e][1]:+6.2f} / {table[r, a, e][2]:+6.2f} / {table[r, a, e][3]:+6.2f}")
        won = np.array([v[2] for v in table.values()])
        lost = np.array([v[3] for v in table.values()])
        breakeven = -lost / (won - lost)  # nan where a cell has no win or no loss
        summary[name] = (np.nanmax(np.abs(breakeven - 0.5)), np.nanmax(won) - np.nanmin(won))
        print(f"{name}: break-even win rate {np.nanmin(breakeven):.2f} .. {np.nanmax(breakeven):.2f}; "
              f"mean return of a won game {np.nanmin(won):+.2f} .. {np.nanmax(won):+.2f}, "
              f"of a lost game {np.nanmin(lost):+.2f} .. {np.nanmax(lost):+.2f}")
    fair, unit = summary["size_fair"], summary["per_unit"]
    print(f"RESULT reward_balance games={FLAGS.games} breakeven_dev={fair[0]:.3f} "
          f"per_unit_breakeven_dev={unit[0]:.3f} win_spread={fair[1]:.2f} "
          f"per_unit_win_spread={unit[1]:.2f} ratio={fair[0] / 0.05:.2f} target=<=1")

if __name__ == "__main__":
    app.run(main)
