"""Win-rate table between SMAX races army compositions, jaxmarl's scripted micro on both sides.

    python -m benchmarks.composition_table --games=128

Each ordered pair of compositions (all races, mirrors included) plays `--games` games with the
row composition as side 0, so every unordered pair is measured from both spawn sides; the table
entry is P[row beats column] with draws counted half, averaged over the two sides. Then it looks
for a cycle a > b > c > a (each "beats" meaning a win rate above 0.5 + `--margin`) and reports
whether one spans races, and what the menu allows against the built-in AI at the heuristic's
micro: per matchup, the best army's mean over the column race's armies (the built-in AI picks its
army uniformly), and how many of the matchups reach 0.80 (issue 57's bar).
"""

from __future__ import annotations

import itertools
import time

import numpy as np
from absl import app, flags

from actors.games import smax_races as sr

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command's flags (here, not at import: the tests import this module beside other benchmarks)."""
    flags.DEFINE_integer("games", 128, "Games per ordered pair of compositions (both sides: 2x this).")
    flags.DEFINE_integer("seed", 0, "Random seed.")
    flags.DEFINE_float("margin", 0.05, "A beats B when P[A beats B] > 0.5 + margin.")
    flags.DEFINE_boolean("plain", False, "Measure SMAX's plain combat (no armour or bonus damage).")
    flags.DEFINE_integer("sc2_budget", 0, "If > 0: the menu of pure and mixed armies bought with "
                         "this budget at SC2 costs instead of the default menu.")


def labels(config: sr.SmaxRacesConfig) -> list[tuple[int, int, str]]:
    return [(r, c, f"{race[0].upper()}:{comp.name}") for r, race in enumerate(sr.RACES)
            for c, comp in enumerate(config.menu[r])]


def measure_table(config: sr.SmaxRacesConfig, games: int, seed: int = 0) -> np.ndarray:
    """[K, K] P[row beats column] (draws half) over K = 9 compositions, both spawn sides."""
    comps = labels(config)
    k = len(comps)
    pairs = list(itertools.product(range(k), range(k)))
    races = np.array([[comps[i][0], comps[j][0]] for i, j in pairs for _ in range(games)])
    choice = np.array([[comps[i][1], comps[j][1]] for i, j in pairs for _ in range(games)])
    outcome = sr.play_heuristic_games(config, races, choice, seed=seed).astype(np.float64)
    score0 = (outcome.reshape(k, k, games) + 1.0) / 2.0  # side-0 score: 1 win, 0.5 draw
    side0 = score0.mean(-1)
    return (side0 + (1.0 - side0.T)) / 2.0


def beats(table: np.ndarray, margin: float) -> np.ndarray:
    return table > 0.5 + margin


def find_cycles(table: np.ndarray, margin: float, races: list[int]) -> list[tuple[int, int, int]]:
    """All 3-cycles a > b > c > a (a the smallest index), races of the members listed."""
    b = beats(table, margin)
    k = len(table)
    cycles = []
    for a, x, y in itertools.permutations(range(k), 3):
        if a < x and a < y and b[a, x] and b[x, y] and b[y, a]:
            cycles.append((a, x, y))
    return cycles


def best_against_uniform(table: np.ndarray, race_of: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per matchup (row race r, column race c): max over r's armies a of mean over c's armies b of
    table[a, b], the best win rate an army of r gets against c picking uniformly; and which army
    (an index into the table). Both [R, R]."""
    race_of = np.asarray(race_of)
    races = sorted(set(race_of.tolist()))
    best = np.zeros((len(races), len(races)))
    army = np.zeros((len(races), len(races)), dtype=int)
    for r in races:
        mine = np.flatnonzero(race_of == r)
        for c in races:
            means = table[np.ix_(mine, np.flatnonzero(race_of == c))].mean(axis=1)
            best[r, c], army[r, c] = means.max(), mine[means.argmax()]
    return best, army


def format_table(table: np.ndarray, names: list[str]) -> str:
    width = max(len(n) for n in names) + 1
    head = " " * width + " ".join(f"{n:>{width}}" for n in names)
    rows = [head] + [f"{names[i]:<{width}}" + " ".join(f"{v:>{width}.2f}" for v in table[i])
                     for i in range(len(names))]
    return "\n".join(rows)


def main(_):
    rules = sr.UnitRules.plain() if FLAGS.plain else sr.UnitRules()
    menu = sr.sc2_budget_menu(FLAGS.sc2_budget) if FLAGS.sc2_budget > 0 else sr.DEFAULT_MENU
    config = sr.SmaxRacesConfig(menu=menu, rules=rules)
    comps = labels(config)
    names = [n for _, _, n in comps]
    for race, race_menu in zip(sr.RACES, menu):
        print(race, "; ".join(f"{c.name}: {dict(c.units)} (SC2 cost {c.cost})" for c in race_menu))
    print("combat rules:", "plain SMAX (no armour, attributes or bonus damage)" if FLAGS.plain
          else "SC2 attributes, armour and bonus damage (smax_races.UnitRules)")
    start = time.time()
    table = measure_table(config, FLAGS.games, FLAGS.seed)
    print(f"P[row beats column], draws half, {2 * FLAGS.games} games per pair "
          f"({time.time() - start:.0f} s):")
    print(format_table(table, names))
    race_of = [r for r, _, _ in comps]
    cycles = find_cycles(table, FLAGS.margin, race_of)
    spanning = [c for c in cycles if len({race_of[i] for i in c}) > 1]
    all_three = [c for c in spanning if len({race_of[i] for i in c}) == 3]
    for c in all_three[:10] or spanning[:10]:
        print("cycle:", " > ".join(names[i] for i in c), ">", names[c[0]],
              "(" + ", ".join(f"{table[a, b]:.2f}" for a, b in zip(c, c[1:] + c[:1])) + ")")
    undominated = [names[i] for i in range(len(names)) if not beats(table, FLAGS.margin)[:, i].any()]
    print(f"compositions nobody beats: {undominated or 'none'}")
    best, army = best_against_uniform(table, race_of)
    print("the best army's mean against the heuristic's uniform pick (row race against column race):")
    for r, race in enumerate(sr.RACES):
        print(f"  {race:<8}" + "  ".join(f"{sr.RACES[c]}: {best[r, c]:.2f} ({names[army[r, c]]})"
                                         for c in range(len(sr.RACES))))
    at_bar = int((best >= 0.80).sum())
    print(f"RESULT composition_table cycles={len(cycles)} spanning_races={len(spanning)} "
          f"spanning_all_three={len(all_three)} matchups_at_080={at_bar} of={best.size} "
          f"lowest={best.min():.2f}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
