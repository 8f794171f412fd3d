"""A handicap curriculum: how much of its army the opponent plays without, per task.

Automatic domain randomization (OpenAI et al. 2019, "Solving Rubik's Cube with a Robot Hand",
Section 5, Algorithm 1) moves each task's difficulty one step at a time with the learner's
measured performance on it: a step harder when the performance over its last games reaches a
high threshold t_H, a step easier when it falls to a low threshold t_L, and no change between.
Here a task is one SMAX cell that a main agent loses (enemy race, its army, the heuristic's
army; `curriculum.ForcedCells`, beside this module) and its difficulty a handicap level
L in 0..L_max: the opponent's army starts without floor(L / L_max * size) of its units (at
least one unit stays). Every cell starts at L = 0, the real game, so a cell the agent can win
never gets a handicap; a cell it loses gets easier chunk by chunk until its games are won often
enough to learn from, then harder again as the agent improves:

    L' = max(L - 1, 0)        if w >= t_H
    L' = min(L + 1, L_max)    if w <= t_L
    L' = L                    otherwise

where w is the agent's score in the cell's games of its last chunk (wins plus half the draws,
over the games). Pure: no JAX, no I/O.
"""

from __future__ import annotations

LEVELS = 10  # L_max: a level removes a tenth of the opponent's army
LOW, HIGH = 0.3, 0.6  # t_L, t_H: a step easier at or below LOW, a step harder at or above HIGH


def next_level(level: int, score: float, games: int, low: float = LOW, high: float = HIGH,
               levels: int = LEVELS) -> int:
    """The cell's handicap level after a chunk in which it scored `score` (wins plus half the
    draws) in `games` games (the module's rule); unchanged when no game was played."""
    if not 0 <= low < high <= 1 or not 0 <= level <= levels:
        raise ValueError(f"need 0 <= low < high <= 1 and 0 <= level <= {levels}; "
                         f"got low={low}, high={high}, level={level}")
    if games <= 0:
        return level
    rate = score / games
    if rate >= high:
        return max(level - 1, 0)
    if rate <= low:
        return min(level + 1, levels)
    return level


def handicap_units(level: int, size: int, levels: int = LEVELS) -> int:
    """Units an army of `size` starts without at `level`: floor(level / levels * size), at most
    size - 1 (one unit always stays)."""
    return max(0, min(level * size // levels, size - 1))
