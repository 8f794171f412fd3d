"""SMAX races' statistic z (AlphaStar, seed 002; issue 14 section 1, "z"), its encoding as a
network input and the pseudo-rewards for following it: `Capabilities.z` of "smax_races"
(`actors.games.registry`), the module generic code reaches through that factory.

- the statistic of a recorded game (`smax_z`, numpy, a pure function of the record), which the
  recorder writes into each replay chunk as `z/<name>` (`smax_z_of_chunk`, passed to
  `actors.replays.make_chunk`);
- its fixed-size encoding (`encode_z`, `decode_z`, `Z_SIZE`) and the bank main agents sample it
  from (`ZBank`, read from a replay directory);
- the pseudo-rewards (`PSEUDO_REWARDS`): one jax.numpy implementation (`attacked_types_jax`,
  `z_pseudo_rewards_jax`), followed during a game by a `Tracker` (`tracker(fns)`, its carry
  `ZState`) that both experience paths call without knowing the game's fields: traced into the
  device rollout's step (actors/rollout.py: `start`, `after`) and jitted over the steps of an
  unroll on host arrays by the replay path's actor (actors/actor.py: `follow_host`, the same
  two in a `lax.scan`). Their numpy references (loops, the Wagner-Fischer table) live in
  tests/test_z.py.

The constants are the game's (`actors.games.smax_races.game`): `ATTACK`, the unit types, the
armies per race.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from actors import replays
from actors.games.smax_races.game import ATTACK, COMPOSITION_HEAD, COMPOSITIONS_PER_RACE, UNIT_TYPES
from agents.specs import MASK_KEY

NUM_UNIT_TYPES = len(UNIT_TYPES)
"""SMAX's unit types (6)."""
Z_ARMIES = COMPOSITIONS_PER_RACE
"""SMAX's armies per race (3)."""
Z_SIZE = Z_ARMIES + NUM_UNIT_TYPES * NUM_UNIT_TYPES + NUM_UNIT_TYPES
"""The length of z's fixed-size numeric encoding (`encode_z`): 3 + 36 + 6 = 45."""
PSEUDO_REWARDS = ("build_order", "attacked_types")
"""The pseudo-rewards for following z, in this order (value heads, `Step.pseudo_reward`)."""


# ---------------------------------------------------------------------------------------------
# z of a recorded game.


def enemy_slot(side: int, target, num_units: int):
    """The enemy army slot that target value `target` of side `side` attacks (jaxmarl: team 0's
    attack j hits enemy j, team 1's hits ally n-1-j; `RacesSMAX._world_step`)."""
    target = np.asarray(target)
    return target if side == 0 else num_units - 1 - target


def smax_z(actions: Mapping[str, np.ndarray], alive: np.ndarray, length: int,
           unit_types: np.ndarray, side: int) -> dict[str, np.ndarray]:
    """The statistic z of one side of one recorded SMAX races game.

    AlphaStar's z is the build order (first 20 units and buildings) plus cumulative statistics.
    In SMAX races the only build decision is the army chosen at the first step, and the
    opening is which enemy units one goes for. For side `side`:

    - `army` (int): the composition (menu index) chosen at step 0, `actions["composition"][0]`;
    - `attack_order` [6] int: the SMAX unit types (indices into SMAX's unit types) of the
      enemy units this side ordered attacks on, in the order of the first such order per type,
      -1 padded. An attack order is `action_type == ATTACK` by a unit alive at that step
      (`alive[t, i]`, the observation's field); its unit type is that of the enemy slot
      `enemy_slot(side, target)` in `unit_types[1 - side]`. Types first attacked at the same
      step are in type-index order. Steps 1 .. length-1 (the battle) count;
    - `attack_counts` [6] int: the cumulative statistic, attack orders per enemy unit type over
      the game (unit-steps).

    actions: this side's actions, head -> [T, ...] (composition [T], action_type/target [T, n]);
    alive: [T, n] bool; unit_types: [2, n] (-1 empty slot). A pure function of the record.
    """
    n = np.shape(alive)[1]
    a_type = np.asarray(actions["action_type"])[1:length]
    target = np.asarray(actions["target"])[1:length]
    live = np.asarray(alive, bool)[1:length]
    attacking = (a_type == ATTACK) & live
    types = np.asarray(unit_types)[1 - side][np.clip(enemy_slot(side, target, n), 0, n - 1)]
    attacking &= types >= 0
    order, counts = [], np.zeros(NUM_UNIT_TYPES, np.int32)
    for t in range(attacking.shape[0]):
        step_types = types[t][attacking[t]]
        np.add.at(counts, step_types, 1)
        order.extend(int(k) for k in np.unique(step_types) if k not in order)
    attack_order = np.full(NUM_UNIT_TYPES, -1, np.int32)
    attack_order[:len(order)] = order
    return {"army": np.int32(np.asarray(actions["composition"])[0]),
            "attack_order": attack_order, "attack_counts": counts}


def smax_z_of_chunk(chunk: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """z/<name> arrays [G, 2, ...] for every game and side of a chunk's arrays (the statistics
    `actors.replays.make_chunk` adds to a chunk of SMAX races games)."""
    games = chunk["length"].shape[0]
    out: dict[str, list] = {}
    for g in range(games):
        per_side = []
        for s in range(2):
            actions = {h: chunk[f"side{s}/action/{h}"][g] for h in ("composition", "action_type", "target")}
            per_side.append(smax_z(actions, chunk[f"side{s}/obs/alive"][g], int(chunk["length"][g]),
                                   chunk["unit_types"][g], s))
        for k in per_side[0]:
            out.setdefault(k, []).append(np.stack([per_side[0][k], per_side[1][k]]))
    return {f"z/{k}": np.stack(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# z as a network input.


def encode_z(army, attack_order, attack_counts) -> np.ndarray:
    """z's fixed-size encoding, float32 [..., Z_SIZE] (any leading axes), in three parts:

    - [0:3]   the army: one-hot of the menu index (all zero for -1, no army);
    - [3:39]  the attack order: 6 ranks x 6 unit types, row k the one-hot of the k-th enemy unit
              type first attacked (all zero past the end of the order, -1);
    - [39:45] the cumulative statistic binarised: 1 for each enemy unit type attacked at all
              (attack_counts > 0).

    The all-zero vector is "no z" (AlphaStar's z = 0: the unconditioned policy). `decode_z`
    inverts it."""
    army = np.asarray(army)
    order = np.asarray(attack_order)
    counts = np.asarray(attack_counts)
    lead = army.shape
    out = np.zeros(lead + (Z_SIZE,), np.float32)
    arange = np.arange(Z_ARMIES)
    out[..., :Z_ARMIES] = army[..., None] == arange
    ranks = (order[..., :, None] == np.arange(NUM_UNIT_TYPES)).reshape(*lead, -1)
    out[..., Z_ARMIES:Z_ARMIES + NUM_UNIT_TYPES ** 2] = ranks
    out[..., Z_ARMIES + NUM_UNIT_TYPES ** 2:] = counts > 0
    return out


def decode_z(z) -> tuple[int, list[int], np.ndarray]:
    """(army or -1, attack order as a list of unit types, attacked types bool [6]) of one
    encoded z [Z_SIZE] (`encode_z`)."""
    z = np.asarray(z)
    army_part = z[:Z_ARMIES]
    army = int(np.argmax(army_part)) if army_part.any() else -1
    ranks = z[Z_ARMIES:Z_ARMIES + NUM_UNIT_TYPES ** 2].reshape(NUM_UNIT_TYPES, NUM_UNIT_TYPES)
    order = [int(np.argmax(row)) for row in ranks if row.any()]
    return army, order, z[Z_ARMIES + NUM_UNIT_TYPES ** 2:] > 0.5


# ---------------------------------------------------------------------------------------------
# The pseudo-rewards for following z, in jax.numpy (both experience paths).


def _compact(tokens, valid):
    """(tokens with the valid ones first, in order; their number) -- one game."""
    order = jnp.argsort(~valid, stable=True)
    return tokens[order], valid.sum()


def _edit_distance_jax(a, la, b, lb):
    """Levenshtein distance of a[:la] and b[:lb] (padded int arrays of static lengths;
    insertions, deletions, substitutions, each cost 1): the Wagner-Fischer table over the
    padded arrays, read at (la, lb)."""
    n, m = a.shape[0], b.shape[0]
    rows = [jnp.arange(m + 1)]
    for i in range(1, n + 1):
        row = [jnp.asarray(i)]
        for j in range(1, m + 1):
            row.append(jnp.minimum(jnp.minimum(rows[i - 1][j] + 1, row[j - 1] + 1),
                                   rows[i - 1][j - 1] + (a[i - 1] != b[j - 1])))
        rows.append(jnp.stack(row))
    return jnp.stack(rows)[la, lb]


def z_pseudo_rewards_jax(target_z, army, first_attack_step):
    """The two pseudo-rewards of one finished game, float32 [2] (`PSEUDO_REWARDS` order), given
    at the game's last step (vmap it over games). AlphaStar (Methods "Supervised learning"/
    "Reinforcement learning") rewards the agent for following the sampled z, by the edit
    distance between build orders and the Hamming distance between cumulative statistics; here
    reduced to our z and given once, at the end, as the negated distance between the sampled z
    and the z the game produced, each normalised to [-1, 0]:

        r_build_order    = - edit(build order of z, build order produced) / max(len of both, 1)
        r_attacked_types = - hamming(attacked types of z, produced attacked types) / 6

    where a build order is the army (token NUM_UNIT_TYPES + army; left out for -1) then the
    enemy unit types in the order first attacked (ties in type-index order).

    target_z: the encoded z the agent was given [Z_SIZE]; army: the army played (-1 none);
    first_attack_step [6]: each enemy type's first attack step (inf: never), from which the
    attack order and the attacked types follow. The numpy reference is tests/test_z.py's."""
    k = NUM_UNIT_TYPES
    army_part = target_z[:Z_ARMIES]
    z_army = jnp.where(army_part.any(), jnp.argmax(army_part), -1)
    ranks = target_z[Z_ARMIES:Z_ARMIES + k * k].reshape(k, k) > 0.5
    z_order = jnp.where(ranks.any(-1), jnp.argmax(ranks, -1), -1)
    want, want_len = _compact(jnp.concatenate([jnp.reshape(k + z_army, (1,)), z_order]),
                              jnp.concatenate([jnp.reshape(z_army >= 0, (1,)), z_order >= 0]))
    steps = jnp.asarray(first_attack_step, jnp.float32)
    attacked = jnp.isfinite(steps)
    by_step = jnp.argsort(jnp.where(attacked, steps, jnp.inf), stable=True)  # ties: type order
    got, got_len = _compact(jnp.concatenate([jnp.reshape(k + army, (1,)), by_step]),
                            jnp.concatenate([jnp.reshape(army >= 0, (1,)), attacked[by_step]]))
    distance = _edit_distance_jax(want, want_len, got, got_len)
    r_build = -distance / jnp.maximum(jnp.maximum(want_len, got_len), 1)
    r_types = -jnp.sum((target_z[Z_ARMIES + k * k:] > 0.5) != attacked) / k
    return jnp.stack([r_build, r_types]).astype(jnp.float32)


def attacked_types_jax(action_type, target, alive, enemy_types):
    """bool [..., 6]: the SMAX unit types side 0 orders attacks on this step (as `smax_z` counts
    them: `action_type == ATTACK` by a live unit, on enemy slot `target` of type
    `enemy_types[..., slot]`, -1 empty). action_type, target, alive, enemy_types: [..., n]."""
    n = alive.shape[-1]
    slot = jnp.clip(target, 0, n - 1)
    types = jnp.take_along_axis(enemy_types, slot, axis=-1)
    attacking = (action_type == ATTACK) & alive & (types >= 0)
    return jnp.any((types[..., None] == jnp.arange(NUM_UNIT_TYPES)) & attacking[..., None], axis=-2)



# ---------------------------------------------------------------------------------------------
# Following z during a game: what both experience paths call (`tracker`).


class ZState(NamedTuple):
    """Each running game's z [B, Z], active pseudo-rewards [B, K] (0/1), the army its side 0
    chose [B] (-1 before), the step of each enemy unit type's first attack [B, 6] (inf: none
    yet) and its steps played [B]. Callers hold it opaquely (`Tracker`)."""

    z: jax.Array
    active: jax.Array
    army: jax.Array
    first_attack: jax.Array
    step: jax.Array


class Tracker:
    """Follows z during SMAX races games, for the generic code that plays them: the device
    rollout traces `start` and `after` into its step (actors/rollout.py), the replay path's
    actor runs `follow_host` (the same two, in one jitted `lax.scan`) over the steps of its
    unroll (actors/actor.py). Built by `tracker(fns)` from the game's functions, whose menu's
    unit types (`fns.env.menu_table`) give the enemy army's types.

    - `init_state(batch, z_size, pseudo_rewards)`: the `ZState` of B games, nothing followed;
    - `followable(obs0)` [B] bool: the games whose side 0 can follow z from this, their first,
      step: a game whose army is forced on side 0 (one legal composition: the forced armies of
      the built-in AI's slots) gets no pseudo-rewards, its army is not the agent's to match;
    - `start(state, starts, candidate, active)`: games starting this step (`starts` [B]) take
      the z `candidate` [B, Z] and the active flags `active` [B, K] bool, and forget the last
      game's army and attacks;
    - `after(state, obs0, heads, done) -> (state, pseudo-rewards [B, K])`: side 0's step on
      `obs0` with actions `heads` tracked (the army chosen at the strategy step, each enemy
      type's first attack step: `attacked_types_jax`); at a game's last step (`done`) its
      pseudo-rewards (`z_pseudo_rewards_jax`) times its active flags, 0 elsewhere.
    """

    OBSERVED = ("z", "choosing", "races", "compositions", "alive")
    HEADS = ("composition", "action_type", "target")

    def __init__(self, fns):
        self._menu = jnp.asarray(fns.env.menu_table)
        self._follow = jax.jit(self.follow)

    def init_state(self, batch: int, z_size: int, pseudo_rewards: int) -> ZState:
        b, k = batch, pseudo_rewards
        return ZState(z=jnp.zeros((b, z_size), jnp.float32), active=jnp.zeros((b, k), jnp.float32),
                      army=jnp.full(b, -1, jnp.int32),
                      first_attack=jnp.full((b, NUM_UNIT_TYPES), jnp.inf, jnp.float32),
                      step=jnp.zeros(b, jnp.int32))

    def followable(self, obs0):
        return obs0[MASK_KEY][COMPOSITION_HEAD].sum(-1) > 1

    def start(self, state: ZState, starts, candidate, active) -> ZState:
        return ZState(z=jnp.where(starts[:, None], candidate, state.z),
                      active=jnp.where(starts[:, None], active.astype(jnp.float32), state.active),
                      army=jnp.where(starts, -1, state.army),
                      first_attack=jnp.where(starts[:, None], jnp.inf, state.first_attack),
                      step=jnp.where(starts, 0, state.step))

    def after(self, state: ZState, obs0, heads, done):
        choosing = obs0["choosing"]
        army = jnp.where(choosing, heads["composition"], state.army)
        enemy = jnp.argmax(obs0["races"][:, 1], -1)
        enemy_army = jnp.argmax(obs0["compositions"][:, 1], -1)
        hit = attacked_types_jax(heads["action_type"], heads["target"], obs0["alive"],
                                 self._menu[enemy, enemy_army]) & ~choosing[:, None]
        first_attack = jnp.where(hit & ~jnp.isfinite(state.first_attack),
                                 state.step[:, None].astype(jnp.float32), state.first_attack)
        rewards = jax.vmap(z_pseudo_rewards_jax)(state.z, army, first_attack)
        ends = done & (state.active > 0).any(-1)
        pseudo = jnp.where(ends[:, None], state.active * rewards, 0.0)
        return state._replace(army=army, first_attack=first_attack, step=state.step + 1), pseudo

    def follow(self, state: ZState, first, done, observation, heads, active):
        """`start` then `after` for each step of a recorded unroll ([T, B] time-major: `first`,
        `done`, side 0's `observation` with the z it played with, its action `heads`, the
        games' `active` flags [T, B, K]), a game starting at a step taking that step's z and
        flags (where `followable`). Returns (state, active [T, B, K] as the games follow them,
        pseudo-rewards [T, B, K])."""
        def step(s, x):
            first_t, done_t, obs_t, heads_t, active_t = x
            s = self.start(s, first_t, obs_t["z"],
                           (active_t > 0) & self.followable(obs_t)[:, None])
            s, pseudo = self.after(s, obs_t, heads_t, done_t)
            return s, (s.active, pseudo)

        state, (active, pseudo) = jax.lax.scan(step, state, (first, done, observation, heads, active))
        return state, active, pseudo

    def follow_host(self, state: ZState, first, done, observation, heads, active):
        """`follow`, jitted, on host arrays (only the fields it reads are sent to the device):
        (state, active, pseudo-rewards) as numpy arrays but the state."""
        observation = {**{k: observation[k] for k in self.OBSERVED},
                       MASK_KEY: {COMPOSITION_HEAD: observation[MASK_KEY][COMPOSITION_HEAD]}}
        heads = {h: heads[h] for h in self.HEADS}
        state, active, pseudo = self._follow(state, first, done, observation, heads, active)
        return state, np.asarray(active), np.asarray(pseudo)


_TRACKERS: dict = {}


def tracker(fns) -> Tracker:
    """The `Tracker` of a SMAX races game's functions (`GameFunctions`), one per configuration
    a process (its jitted `follow_host` compiles once for the actors that share it)."""
    key = getattr(fns, "config", None)
    if key is None:
        return Tracker(fns)
    if key not in _TRACKERS:
        _TRACKERS[key] = Tracker(fns)
    return _TRACKERS[key]


# ---------------------------------------------------------------------------------------------
# The bank of recorded z.


class ZBank:
    """The z of every recorded side of a replay directory, by (own race, enemy race): what a
    main agent samples its z from at each game's start (AlphaStar: z sampled from the human
    games of the agent's race). `table` [R * R, N, Z_SIZE] float32 and `counts` [R * R]
    int32 (matchup index own * R + enemy); a matchup without games of its own falls back to
    every game of the own race; a race without any game has count 0 (z = 0)."""

    def __init__(self, table: np.ndarray, counts: np.ndarray, source: str = ""):
        self.table = np.asarray(table, np.float32)
        self.counts = np.asarray(counts, np.int32)
        self.source = source

    @property
    def races(self) -> int:
        return int(round(np.sqrt(self.counts.shape[0])))

    @classmethod
    def from_replays(cls, directory: str, spec=None, races: int = 3) -> ZBank:
        """Reads `directory` (ReplayError naming the file for another game, spec or version)."""
        data = replays.open_replays(directory, game=None if spec is None else spec.name, spec=spec)
        by: dict[tuple[int, int], list] = {}
        for chunk in data.iter_chunks():
            if "z/army" not in chunk:
                raise replays.ReplayError(f"{directory}: its chunks hold no z (not SMAX races replays)")
            z = encode_z(chunk["z/army"], chunk["z/attack_order"], chunk["z/attack_counts"])
            for g in range(z.shape[0]):
                for s in range(2):
                    key = (int(chunk["races"][g, s]), int(chunk["races"][g, 1 - s]))
                    by.setdefault(key, []).append(z[g, s])
        lists = []
        for own in range(races):
            for enemy in range(races):
                rows = by.get((own, enemy)) or [v for (o, _), vs in sorted(by.items()) if o == own for v in vs]
                lists.append(rows)
        size = max(1, max(len(r) for r in lists))
        table = np.zeros((races * races, size, Z_SIZE), np.float32)
        for m, rows in enumerate(lists):
            if rows:
                table[m, :len(rows)] = np.stack(rows)
        return cls(table, [len(r) for r in lists], directory)

    def sample(self, rng: np.random.Generator, own: int, enemy: int) -> np.ndarray:
        """One z of the matchup (zeros if it has none)."""
        m = own * self.races + enemy
        if self.counts[m] == 0:
            return np.zeros(Z_SIZE, np.float32)
        return self.table[m, rng.integers(self.counts[m])]
