"""benchmarks/composition_table.py's reading of what the menu allows against the built-in AI."""

import numpy as np

from benchmarks.composition_table import best_against_uniform


def test_the_best_army_against_a_uniform_pick_is_worked_by_hand():
    # Two races, race 0 with armies 0 and 1, race 1 with armies 2 and 3 (P[row beats column]).
    table = np.array([[0.5, 0.9, 0.2, 1.0],
                      [0.1, 0.5, 0.7, 0.7],
                      [0.8, 0.3, 0.5, 0.6],
                      [0.0, 0.3, 0.4, 0.5]])
    best, army = best_against_uniform(table, [0, 0, 1, 1])
    # race 0 against race 0: army 0 (0.5 + 0.9) / 2 = 0.7 beats army 1's 0.3; against race 1:
    # army 0 (0.2 + 1.0) / 2 = 0.6 and army 1 (0.7 + 0.7) / 2 = 0.7, army 1 the best.
    # race 1 against race 0: army 2 0.55, army 3 0.15; against race 1: army 2 0.55, army 3 0.45.
    np.testing.assert_allclose(best, [[0.7, 0.7], [0.55, 0.55]])
    np.testing.assert_array_equal(army, [[0, 1], [2, 2]])
