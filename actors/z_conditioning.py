"""The replay path actor's z (a network with a z input, `agents.z_size`; AlphaStar, seed 002):
what the learner's side is conditioned on and what it earns for following it.

    z = ZConditioning(game, network, bank, probability, seed)
    stream_fields = z.reset()             # a new match: z = 0, the tracker's state
    plan = z.plan(num_steps)              # candidates for games starting at each step
    followed, pseudo = z.follow(followed, chunk)

A main agent's candidate z (`bank`, the game's `Capabilities.z().ZBank`) is drawn uniformly from
the recorded z of its race against the game's enemy race, and each of its pseudo-rewards for
following z is active with probability `probability`; without a bank (exploiters, or no
replays) z = 0 and no pseudo-reward is active. The game's tracker of z
(`Capabilities.z().tracker(fns)`, jitted over an unroll's steps: `follow_host`) follows what
side 0 played and gives the pseudo-rewards at each game's last step; a game without one gives
zeros.
"""

from __future__ import annotations

import numpy as np

from agents import pseudo_reward_count, z_size


def z_statistic(game_name: str):
    """The module of the game's statistic z (its `Capabilities.z` factory: `Z_SIZE`, `ZBank`,
    `tracker`, ...), None for a game without one."""
    from actors.games.registry import resolve

    factory = resolve(game_name).capabilities.z
    return None if factory is None else factory()


class ZConditioning:
    """See the module docstring: the z of one actor's batch of `game.batch_size` games, for a
    network that takes z. The draws come from a generator seeded with `seed + 7`."""

    def __init__(self, game, network, bank, probability: float, seed: int):
        self.game = game
        self.size, self.pseudo_count = z_size(network), pseudo_reward_count(network)
        self.bank = bank
        self.probability = probability
        self._batch = int(game.batch_size)
        statistic = z_statistic(game.spec.name)
        fns = getattr(game, "fns", None)
        self._tracker = (statistic.tracker(fns) if statistic is not None and fns is not None
                         and self.pseudo_count else None)
        self._rng = np.random.default_rng(seed + 7)

    def reset(self) -> dict:
        """The z fields of a new match's `actors.actor.Stream`: z = 0 and no pseudo-reward
        active, the tracker's initial state (None without a tracker)."""
        b, k = self._batch, self.pseudo_count
        return dict(z=(np.zeros((b, self.size), np.float32), np.zeros((b, k), np.float32)),
                    z_followed=None if self._tracker is None
                    else self._tracker.init_state(b, self.size, k))

    def plan(self, num_steps: int):
        """Candidate (z [T, B, Z], active [T, B, K]) for games starting at each step of the
        next unroll: drawn from the bank by each game's matchup (zeros without a bank)."""
        b, k = self._batch, self.pseudo_count
        z = np.zeros((num_steps, b, self.size), np.float32)
        active = np.zeros((num_steps, b, k), np.float32)
        if self.bank is not None:
            bank = self.bank
            races = self._races()
            matchup = races[:, 0] * bank.races + races[:, 1]
            counts = bank.counts[matchup]                                  # [B]
            pick = np.floor(self._rng.random((num_steps, b)) * np.maximum(counts, 1)).astype(int)
            z = bank.table[matchup[None, :], pick] * (counts > 0)[None, :, None]
            active = ((self._rng.random((num_steps, b, k)) < self.probability)
                      & (counts > 0)[None, :, None]).astype(np.float32)
        return z.astype(np.float32), active

    def _races(self) -> np.ndarray:
        """[B, 2] race indices of the batch's games (zeros for games without races)."""
        races = getattr(self.game, "races", None)
        if races is None:
            return np.zeros((self._batch, 2), np.int64)
        return np.asarray(races, np.int64).reshape(self._batch, 2)

    def follow(self, followed, chunk: dict):
        """(the tracker's new state, z's pseudo-rewards of an unroll's new steps {"reward",
        "active"} [T', B, K]): the tracker over them from its state `followed` at the unroll's
        start; zeros (and `followed` as it was) for a game without a tracker."""
        active = np.asarray(chunk["z_active"], np.float32)
        if self._tracker is None:
            return followed, {"reward": np.zeros_like(active), "active": active}
        followed, active, reward = self._tracker.follow_host(
            followed, np.asarray(chunk["first"], bool), np.asarray(chunk["done"], bool),
            chunk["observation"], chunk["action"], active)
        return followed, {"reward": reward, "active": active}
