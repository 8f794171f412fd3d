"""SMAX races: race vs race StarCraft micro battles with a strategic first step (jaxmarl 0.2.0).

The game behind `--races`. Races own unit types: Terran marine + marauder, Protoss stalker +
zealot, Zerg zergling + hydralisk. A game is one battle between two races (mirrors included, all
nine matchups; the races are per game in the batch, so one compiled step serves every matchup):

- step 0 (strategy): each side picks its army composition from its race's menu (head
  `composition`, `COMPOSITIONS_PER_RACE` choices); unit heads are ignored;
- steps 1..: the armies spawn at their edges of the map and fight unit by unit with jaxmarl's
  SMAX dynamics (heads `action_type` = move N/E/S/W, stop, attack; `target` = which enemy);
- the game ends when one army is dead (win / loss), both are (draw) or at the time limit (draw);
  rewards are zero-sum (SMAX `use_self_play_reward`).

SMAX itself has no armour, no bonus damage and no splash, so its army compositions are transitive
(measured: 5 hydralisks beat everything; at SC2 costs 20 zerglings beat everything). The strategic
layer restores StarCraft's counters:
- SC2 attributes and armour (`UnitRules`): marine, zealot, zergling, hydralisk are Light;
  marauder and stalker Armored; marauder, stalker and zealot have 1 armour; a hit deals
  max(0.5, attack + bonus vs the target's attribute - target armour), SC2's damage formula;
- SC2 bonus damage: marauder +10 vs Armored, stalker +5 vs Armored;
- a menu of three armies per race (`DEFAULT_MENU`), sized by measurement so that the core
  armies form a counter cycle across the races: marauders shred stalkers (Armored bonus),
  stalkers hold off zergling floods (armour blunts 5-damage bites, range 6 shoots first),
  zergling floods overrun marauders (Light targets waste the bonus, slow attack);
see `benchmarks/composition_table.py` for the measured win-rate table (`--plain` measures the same
menu without the layer's rules).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxmarl.environments.smax.heuristic_enemy import (
    HeuristicPolicyState,
    create_heuristic_policy,
    get_heuristic_policy_initial_state,
)
from jaxmarl.environments.smax.smax_env import SMAX
from jaxmarl.environments.smax.smax_env import State as SmaxState

from actors.games.base import TimeStep, check_actions
from agents.specs import (
    MASK_KEY,
    ActionSpec,
    ArraySpec,
    DiscreteHead,
    GameSpec,
    ObservationSpec,
    SideSpec,
)

RACES = ("terran", "protoss", "zerg")
# jaxmarl's unit-type order; indices into every per-type table below.
UNIT_TYPES = ("marine", "marauder", "stalker", "zealot", "zergling", "hydralisk")
RACE_UNITS = {"terran": ("marine", "marauder"), "protoss": ("stalker", "zealot"),
              "zerg": ("zergling", "hydralisk")}
# SC2 (LotV) minerals + gas.
UNIT_COST = {"marine": 50, "marauder": 125, "stalker": 175, "zealot": 100, "zergling": 25,
             "hydralisk": 150}

NUM_MOVES = 4  # jaxmarl discrete actions 0..3 move, 4 stop, 5 + j attack enemy j
ACTION_TYPES = ("move_north", "move_east", "move_south", "move_west", "stop", "attack")
STOP, ATTACK = 4, 5
COMPOSITION_HEAD = "composition"


@dataclasses.dataclass(frozen=True)
class UnitRules:
    """Per-type combat rules layered on SMAX; `plain()` is SMAX unchanged.

    damage(i -> j) = max(min_damage, attack_i + bonus_vs_armored_i * armored_j - armour_j)
    """

    armored: tuple[bool, ...] = (False, True, True, False, False, False)
    armour: tuple[float, ...] = (0.0, 1.0, 1.0, 1.0, 0.0, 0.0)
    bonus_vs_armored: tuple[float, ...] = (0.0, 10.0, 5.0, 0.0, 0.0, 0.0)
    min_damage: float = 0.5
    # Per-type overrides of SMAX's stats (None keeps SMAX's value).
    health: tuple[float | None, ...] = (None,) * 6
    cooldown: tuple[float | None, ...] = (None,) * 6
    speed: tuple[float | None, ...] = (None,) * 6

    @classmethod
    def plain(cls) -> UnitRules:
        n = len(UNIT_TYPES)
        return cls((False,) * n, (0.0,) * n, (0.0,) * n, 0.0)

    def override(self, smax_values, overrides):
        return jnp.asarray([v if o is None else o for v, o in zip(np.asarray(smax_values), overrides)],
                           jnp.float32)

    def damage_table(self, attacks) -> np.ndarray:
        """[attacker type, target type] damage per hit."""
        attacks = np.asarray(attacks, np.float32)
        raw = (attacks[:, None] + np.outer(self.bonus_vs_armored, self.armored)
               - np.asarray(self.armour)[None, :])
        return np.maximum(raw, self.min_damage).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Composition:
    name: str
    units: tuple[tuple[str, int], ...]  # (unit type, count)

    @property
    def size(self) -> int:
        return sum(n for _, n in self.units)

    @property
    def cost(self) -> int:
        return sum(UNIT_COST[t] * n for t, n in self.units)


Menu = tuple[tuple[Composition, ...], ...]  # per race (RACES order), COMPOSITIONS_PER_RACE each


def sc2_budget_menu(budget: int = 500) -> Menu:
    """Per race: all of the first type, all of the second, an even split, bought at SC2 costs.

    Kept to reproduce the finding that motivated `DEFAULT_MENU`: at SC2 costs SMAX's stats make
    mass zerglings beat everything (transitive).
    """
    menu = []
    for race in RACES:
        a, b = RACE_UNITS[race]
        half = budget // 2
        menu.append((
            Composition(a, ((a, budget // UNIT_COST[a]),)),
            Composition(b, ((b, budget // UNIT_COST[b]),)),
            Composition(f"{a}+{b}", ((a, half // UNIT_COST[a]), (b, half // UNIT_COST[b]))),
        ))
    return tuple(menu)


def fixed_size_menu(units: int) -> Menu:
    """Per race: `units` of the first type, of the second, and a half-half mix (fixed slots)."""
    menu = []
    for race in RACES:
        a, b = RACE_UNITS[race]
        mix = ((a, units - units // 2), (b, units // 2)) if units > 1 else ((a, 1),)
        menu.append((Composition(a, ((a, units),)), Composition(b, ((b, units),)),
                     Composition(f"{a}+{b}", mix)))
    return tuple(menu)


COMPOSITIONS_PER_RACE = 3
# Armies balanced by measurement, not by SC2 cost (at SC2 costs SMAX's stats make mass zerglings
# win everything): the pure armies of the three core units form the counter cycle
# marauders > stalkers > zerglings > marauders; marines, zealots, hydralisks and the mixes are
# the weaker options of each race (benchmarks/composition_table.py).
DEFAULT_MENU: Menu = (
    (Composition("marine", (("marine", 8),)),
     Composition("marauder", (("marauder", 6),)),
     Composition("bio", (("marine", 4), ("marauder", 3)))),
    (Composition("stalker", (("stalker", 7),)),
     Composition("zealot", (("zealot", 5),)),
     Composition("gateway", (("stalker", 4), ("zealot", 2)))),
    (Composition("zergling", (("zergling", 16),)),
     Composition("hydralisk", (("hydralisk", 5),)),
     Composition("ling_hydra", (("zergling", 8), ("hydralisk", 2)))),
)


@dataclasses.dataclass(frozen=True)
class SmaxRacesConfig:
    """`units_per_side` is the number of unit slots per side (the largest army must fit)."""

    menu: Menu = DEFAULT_MENU
    units_per_side: int = 0  # 0: the largest composition of the menu
    map_width: int = 32
    map_height: int = 32
    max_steps: int = 100  # battle steps (each 8 world steps of 1/16 s), after the strategy step
    rules: UnitRules = UnitRules()
    spawn_spread: float = 2.0

    def __post_init__(self):
        if len(self.menu) != len(RACES) or any(len(m) != COMPOSITIONS_PER_RACE for m in self.menu):
            raise ValueError(f"menu needs {COMPOSITIONS_PER_RACE} compositions for each of {RACES}")
        for race, comps in zip(RACES, self.menu):
            for comp in comps:
                bad = [t for t, _ in comp.units if t not in RACE_UNITS[race]]
                if bad:
                    raise ValueError(f"{race} composition {comp.name!r} uses {bad}, not {race} units")

    def slots(self) -> int:
        largest = max(c.size for comps in self.menu for c in comps)
        if self.units_per_side and self.units_per_side < largest:
            raise ValueError(f"units_per_side={self.units_per_side} < largest army {largest}")
        return self.units_per_side or largest


class RacesSMAX(SMAX):
    """jaxmarl SMAX with SC2 damage rules (armour, attributes, bonus damage) and armies from a menu."""

    def __init__(self, config: SmaxRacesConfig):
        n = config.slots()
        super().__init__(
            num_allies=n, num_enemies=n, map_width=config.map_width,
            map_height=config.map_height, use_self_play_reward=True, won_battle_bonus=1.0,
            max_steps=config.max_steps, walls_cause_death=False,
        )
        self.config = config
        self.unit_type_health = config.rules.override(self.unit_type_health, config.rules.health)
        self.unit_type_weapon_cooldowns = config.rules.override(
            self.unit_type_weapon_cooldowns, config.rules.cooldown)
        self.unit_type_velocities = config.rules.override(self.unit_type_velocities, config.rules.speed)
        self.damage = jnp.asarray(config.rules.damage_table(self.unit_type_attacks))
        table = np.full((len(RACES), COMPOSITIONS_PER_RACE, n), -1, np.int32)
        for r in range(len(RACES)):
            for c, comp in enumerate(config.menu[r]):
                slot = 0
                for unit, count in comp.units:
                    table[r, c, slot:slot + count] = UNIT_TYPES.index(unit)
                    slot += count
        self.menu_table = jnp.asarray(table)

    def army_types(self, races, compositions, handicap=None):
        """[2n] unit types of both sides' armies (-1: an empty slot). `handicap` [2]: units each
        side's army starts without, its last ones (at least one unit stays)."""
        n = self.num_allies
        types = jnp.stack([self.menu_table[races[0], compositions[0]],
                           self.menu_table[races[1], compositions[1]]])       # [2, n]
        if handicap is not None:
            size = jnp.sum(types >= 0, axis=1, keepdims=True)
            keep = jnp.maximum(size - jnp.asarray(handicap, jnp.int32)[:, None], 1)
            types = jnp.where(jnp.arange(n) < keep, types, -1)
        return types.reshape(2 * n)

    def spawn(self, key, races, compositions, handicap=None, push_apart=True) -> SmaxState:
        """Battle start: both armies at their edge; empty slots (and the units a `handicap`
        removes: `army_types`) are dead units (health 0). `push_apart=False` skips jaxmarl's
        three passes that spread overlapping units apart: for a state whose positions are never
        seen (`SmaxRacesFunctions.initial_state`'s placeholder, where every unit is dead)."""
        n = self.num_allies
        k0, k1 = jax.random.split(key)
        spread = self.config.spawn_spread
        centre = jnp.array([self.map_width, self.map_height], jnp.float32) / 4
        start0 = centre * jnp.array([1.0, 2.0]) + jax.random.uniform(k0, (n, 2), minval=-spread, maxval=spread)
        start1 = centre * jnp.array([3.0, 2.0]) + jax.random.uniform(k1, (n, 2), minval=-spread, maxval=spread)
        types = self.army_types(races, compositions, handicap)
        alive = types >= 0
        types = jnp.maximum(types, 0).astype(jnp.uint8)
        state = SmaxState(
            unit_positions=jnp.concatenate([start0, start1]),
            unit_alive=alive,
            unit_teams=jnp.concatenate([jnp.zeros(n), jnp.ones(n)]),
            unit_health=jnp.where(alive, self.unit_type_health[types], 0.0),
            unit_types=types,
            unit_weapon_cooldowns=jnp.zeros(2 * n),
            prev_movement_actions=jnp.zeros((2 * n, 2)),
            prev_attack_actions=jnp.zeros((2 * n,), jnp.int32),
            step=jnp.array(0),
            done=jnp.array(False),
        )
        for _ in range(3 if push_apart else 0):  # spread overlapping spawns apart
            state = self._push_units_away(state)
        return state

    def _world_step(self, key, state: SmaxState, actions) -> SmaxState:
        """jaxmarl's `SMAX._world_step` with the damage of a hit looked up in `self.damage`.

        Copied from jaxmarl 0.2.0 (smax_env.py) except `health_diff`; keep in step with it.
        """

        def update_position(idx, vec):
            pos = state.unit_positions[idx]
            new_pos = pos + vec * self.unit_type_velocities[state.unit_types[idx]] * self.time_per_step
            new_pos = jnp.maximum(jnp.minimum(new_pos, jnp.array([self.map_width, self.map_height])),
                                  jnp.zeros((2,)))
            return jnp.where(state.unit_alive[idx], new_pos, pos)

        def update_agent_health(idx, action, key):
            attacked_idx = jax.lax.cond(
                idx < self.num_allies,
                lambda: action + self.num_allies - self.num_movement_actions,
                lambda: self.num_allies - 1 - (action - self.num_movement_actions),
            )
            attacked_idx = jax.lax.select(action < self.num_movement_actions, idx, attacked_idx)
            attack_valid = (
                (jnp.linalg.norm(state.unit_positions[idx] - state.unit_positions[attacked_idx])
                 < self.unit_type_attack_ranges[state.unit_types[idx]])
                & state.unit_alive[idx] & state.unit_alive[attacked_idx]
            )
            attack_valid = attack_valid & (idx != attacked_idx)
            attack_valid = attack_valid & (state.unit_weapon_cooldowns[idx] <= 0.0)
            damage = self.damage[state.unit_types[idx], state.unit_types[attacked_idx]]
            health_diff = jax.lax.select(attack_valid, -damage, 0.0)
            cooldown_deviation = jax.random.uniform(
                key, minval=-self.time_per_step, maxval=2 * self.time_per_step)
            cooldown = self.unit_type_weapon_cooldowns[state.unit_types[idx]] + cooldown_deviation
            cooldown_diff = jax.lax.select(
                attack_valid, cooldown - state.unit_weapon_cooldowns[idx], -self.time_per_step)
            return health_diff, attacked_idx, cooldown_diff

        def perform_agent_action(idx, action, key):
            movement_action, attack_action = action
            new_pos = update_position(idx, movement_action)
            health_diff, attacked_idx, cooldown_diff = update_agent_health(idx, attack_action, key)
            return new_pos, (health_diff, attacked_idx), cooldown_diff

        keys = jax.random.split(key, num=self.num_agents)
        pos, (health_diff, attacked_idxes), cooldown_diff = jax.vmap(perform_agent_action)(
            jnp.arange(self.num_agents), actions, keys)
        unit_health = jnp.maximum(state.unit_health.at[attacked_idxes].add(health_diff), 0.0)
        return state.replace(
            unit_health=unit_health,
            unit_positions=pos,
            unit_weapon_cooldowns=state.unit_weapon_cooldowns + cooldown_diff,
        )


# ---------------------------------------------------------------------------------------------
# The batch game (protocol of actors/games/base.py) over RacesSMAX.


@struct.dataclass
class RacesState:
    smax: SmaxState
    races: jax.Array  # [2] int32 race index per side
    compositions: jax.Array  # [2] int32, -1 before the strategy step
    choosing: jax.Array  # bool: the next step is the strategy step
    key: jax.Array
    armies: jax.Array  # [2] int32 the army forced on each side (-1: the side picks its own)
    handicap: jax.Array  # [2] int32 units each side's army starts without (0: none)


def make_spec(env: RacesSMAX) -> GameSpec:
    n = env.num_allies
    heads = {
        COMPOSITION_HEAD: DiscreteHead(COMPOSITIONS_PER_RACE),
        # the target (a pointer over enemy units) counts for attacks only
        "action_type": DiscreteHead(len(ACTION_TYPES), (n,), pointer_types=(ATTACK,)),
        "target": DiscreteHead(n, (n,)),
    }
    fields = {
        "units": ArraySpec((n, env.obs_size), np.float32),  # jaxmarl unit_list obs per unit
        "alive": ArraySpec((n,), np.bool_),
        "races": ArraySpec((2, len(RACES)), np.float32),  # own race, enemy race (one-hot)
        "compositions": ArraySpec((2, COMPOSITIONS_PER_RACE), np.float32),  # own, enemy (once chosen)
        "choosing": ArraySpec((), np.bool_),
        "acting": ArraySpec((), np.bool_),
        "time": ArraySpec((), np.float32),
    }
    side = SideSpec(ObservationSpec(fields), ActionSpec(heads), num_units=n)
    signals = {
        "damage_dealt": ArraySpec((2, n), np.float32),  # per unit, fraction of enemy max health
        "damage_taken": ArraySpec((2, n), np.float32),
        "kills": ArraySpec((2, n), np.float32),  # enemy units this unit finished
        "deaths": ArraySpec((2, n), np.float32),
        "present": ArraySpec((2, n), np.bool_),  # the slot holds a unit of the chosen army
        "win": ArraySpec((2,), np.float32),  # +1 / -1 / 0 per side on the final step
        "time": ArraySpec((), np.float32),
    }
    return GameSpec("smax_races", (side, side), env.config.max_steps + 1, signals)


class SmaxRacesFunctions:
    """Pure, jittable reset/step over ONE game; `SmaxRacesGame` vmaps and jits them."""

    def __init__(self, config: SmaxRacesConfig = SmaxRacesConfig()):
        self.config = config
        self.env = RacesSMAX(config)
        self.spec = make_spec(self.env)
        self.n = self.env.num_allies

    # -- observations --------------------------------------------------------------------
    def observe(self, s: RacesState):
        env, n = self.env, self.n
        unit_obs = env.get_obs_unit_list(s.smax)
        avail = env.get_avail_actions(s.smax)
        alive = s.smax.unit_alive
        races = jax.nn.one_hot(s.races, len(RACES))
        comps = jax.nn.one_hot(s.compositions, COMPOSITIONS_PER_RACE)  # -1 -> zeros
        time = s.smax.step.astype(jnp.float32) / env.max_steps
        out = []
        for side in range(2):
            agents = env.agents[:n] if side == 0 else env.agents[n:]
            units = jnp.stack([unit_obs[a] for a in agents])
            av = jnp.stack([avail[a] for a in agents]).astype(bool)  # [n, 5 + n]
            side_alive = alive[:n] if side == 0 else alive[n:]
            fighting = ~s.choosing
            can_target = av[:, NUM_MOVES + 1:]
            type_mask = jnp.concatenate(
                [av[:, :NUM_MOVES + 1], jnp.any(can_target, axis=1, keepdims=True)], axis=1)
            one_hot0 = lambda k: jnp.zeros((n, k), bool).at[:, 0].set(True)  # noqa: E731
            unit_live = (fighting & side_alive)[:, None]
            type_mask = jnp.where(unit_live, type_mask, one_hot0(len(ACTION_TYPES)))
            target_mask = jnp.where(unit_live & jnp.any(can_target, 1, keepdims=True),
                                    can_target, one_hot0(n))
            order = jnp.array([side, 1 - side])
            menu = jnp.arange(COMPOSITIONS_PER_RACE)
            out.append({
                "units": units.astype(jnp.float32),
                "alive": side_alive & fighting,
                "races": races[order],
                "compositions": comps[order],
                "choosing": s.choosing,
                "acting": jnp.array(True),
                "time": time,
                MASK_KEY: {
                    COMPOSITION_HEAD: jnp.where(
                        s.choosing, jnp.where(s.armies[side] >= 0, menu == s.armies[side], True),
                        menu == 0),
                    "action_type": type_mask,
                    "target": target_mask,
                },
            })
        return tuple(out)

    # -- reset / step ----------------------------------------------------------------------
    def initial_state(self, key, races, armies=None, handicap=None) -> RacesState:
        key, spawn_key = jax.random.split(key)
        placeholder = jnp.zeros(2, jnp.int32)
        # Every unit of the placeholder is dead until the strategy step spawns the armies, so
        # its positions reach no observation, mask or signal (jaxmarl zeroes a dead unit's
        # features): no push-apart passes, 13-17% more steps/s at batch 32-256 (BENCHMARKS, Games).
        smax = self.env.spawn(spawn_key, races, placeholder, push_apart=False)
        smax = smax.replace(unit_alive=jnp.zeros_like(smax.unit_alive),
                            unit_health=jnp.zeros_like(smax.unit_health))
        armies = jnp.full(2, -1, jnp.int32) if armies is None else jnp.asarray(armies, jnp.int32)
        handicap = jnp.zeros(2, jnp.int32) if handicap is None else jnp.asarray(handicap, jnp.int32)
        return RacesState(smax=smax, races=jnp.asarray(races, jnp.int32),
                          compositions=jnp.full(2, -1, jnp.int32), choosing=jnp.array(True), key=key,
                          armies=armies, handicap=handicap)

    def reset(self, key, races):
        """A fresh game in `races`: [2] race indices (side 0, side 1), or [2, 2] races and the
        armies forced on the sides (row 1, menu indices; -1: the side picks its own). A forced
        side's strategy step has one legal composition, the forced one (its mask), so a network
        samples it with probability 1 and learns nothing from the pick; the game plays it
        whatever the side chose (a scripted side too). Or [3, 2]: a third row, the units each
        side's army starts without (a handicap: `RacesSMAX.army_types`). Auto-reset keeps them
        all for the game's next games."""
        races = jnp.asarray(races, jnp.int32)
        s = self.initial_state(key, *races) if races.ndim == 2 else self.initial_state(key, races)
        return s, self.observe(s)

    def _jaxmarl_actions(self, actions):
        """Our (action_type, target) heads -> jaxmarl's flat discrete actions, both teams."""
        flat = []
        for side in range(2):
            a_type = actions[side]["action_type"]
            flat.append(jnp.where(a_type == ATTACK, NUM_MOVES + 1 + actions[side]["target"], a_type))
        return jnp.concatenate(flat).astype(jnp.int32)

    def step(self, s: RacesState, actions):
        """One step of one game, auto-resetting; returns (state, obs pair, rewards[2], done, outcome, signals)."""
        env, n = self.env, self.n
        key, spawn_key, step_key, reset_key = jax.random.split(s.key, 4)
        comps = jnp.stack([actions[0][COMPOSITION_HEAD], actions[1][COMPOSITION_HEAD]]).astype(jnp.int32)
        comps = jnp.clip(jnp.where(s.armies >= 0, s.armies, comps), 0, COMPOSITIONS_PER_RACE - 1)
        spawned = env.spawn(spawn_key, s.races, comps, s.handicap)

        flat = self._jaxmarl_actions(actions)
        decoded = env._decode_discrete_actions(flat)
        health_before = s.smax.unit_health
        alive_before = s.smax.unit_alive
        _, fought, _, _, _ = env.step_env_no_decode(step_key, s.smax, decoded)

        choosing = s.choosing
        smax = jax.tree.map(lambda a, b: jnp.where(choosing, a, b), spawned, fought)
        compositions = jnp.where(choosing, comps, s.compositions)

        # Outcome and raw signals (zero while choosing: nothing fought).
        alive = smax.unit_alive
        dead0, dead1 = ~jnp.any(alive[:n]), ~jnp.any(alive[n:])
        done = ~choosing & (dead0 | dead1 | (smax.step >= env.max_steps))
        outcome = jnp.where(done, jnp.where(dead1 & ~dead0, 1, jnp.where(dead0 & ~dead1, -1, 0)), 0)
        outcome = outcome.astype(jnp.int8)
        rewards = jnp.stack([outcome, -outcome]).astype(jnp.float32)

        max_health = env.unit_type_health[smax.unit_types]
        lost = jnp.where(choosing, 0.0, (health_before - smax.unit_health) / max_health)
        died = jnp.where(choosing, False, alive_before & ~alive)
        dealt, kills = self._credit(s.smax, decoded[1], lost, died)
        signals = {
            "damage_dealt": dealt.reshape(2, n),
            "damage_taken": lost.reshape(2, n),
            "kills": kills.reshape(2, n),
            "deaths": died.astype(jnp.float32).reshape(2, n),
            "present": self.env.army_types(s.races, jnp.maximum(compositions, 0), s.handicap).reshape(2, n) >= 0,
            "win": rewards,
            "time": smax.step.astype(jnp.float32),
        }

        new = RacesState(smax=smax, races=s.races, compositions=compositions,
                         choosing=jnp.array(False), key=key, armies=s.armies, handicap=s.handicap)
        fresh = self.initial_state(reset_key, s.races, s.armies, s.handicap)
        new = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, new)
        return new, self.observe(new), rewards, done, outcome, signals

    def _credit(self, smax: SmaxState, attack_actions, lost, died):
        """Split each unit's health loss and death among the units that attacked it this step.

        A step is 8 world steps; a unit's damage dealt is the health fraction its target lost,
        shared equally among all units that attacked that target (the exact per-hit split is
        inside jaxmarl's scan); a kill goes to the target's attackers likewise.
        """
        n = self.n
        idx = jnp.arange(2 * n)
        target = jnp.where(idx < n, attack_actions + n - NUM_MOVES - 1,
                           n - 1 - (attack_actions - NUM_MOVES - 1))
        attacking = (attack_actions > NUM_MOVES) & smax.unit_alive
        target = jnp.where(attacking, target, idx)
        hits = jnp.zeros((2 * n, 2 * n)).at[idx, target].set(attacking.astype(jnp.float32))
        attackers = jnp.maximum(hits.sum(0), 1.0)
        share = hits / attackers[None, :]
        return share @ lost, share @ died.astype(jnp.float32)


_SHARED_FUNCTIONS: dict = {}


class SmaxRacesGame:
    """A batch of SMAX races games as one jitted, vmapped step (protocol: actors/games/base.py)."""

    def __init__(self, batch_size: int, config: SmaxRacesConfig = SmaxRacesConfig(),
                 races: tuple[str, str] | np.ndarray = ("terran", "zerg")):
        self.batch_size = int(batch_size)
        # Games of one configuration share their functions and compiled steps (co-located
        # actors would otherwise each compile and hold their own).
        if config not in _SHARED_FUNCTIONS:
            fns = SmaxRacesFunctions(config)
            _SHARED_FUNCTIONS[config] = (fns, jax.jit(jax.vmap(fns.reset)), jax.jit(jax.vmap(fns.step)))
        self.fns, self._reset, self._step = _SHARED_FUNCTIONS[config]
        self.spec = self.fns.spec
        self.races = matchup_array(races, self.batch_size)
        self.state = None

    def reset(self, seed: int, races=None) -> TimeStep:
        if races is not None:
            self.races = matchup_array(races, self.batch_size)
        keys = jax.random.split(jax.random.PRNGKey(seed), self.batch_size)
        self.state, obs = self._reset(keys, jnp.asarray(self.races))
        b = self.batch_size
        zeros = jnp.zeros((b, 2), jnp.float32)
        signals = jax.tree.map(lambda s: jnp.zeros((b,) + s.shape, s.dtype), dict(self.spec.signal_fields))
        return TimeStep(obs, zeros, jnp.zeros(b, bool), jnp.zeros(b, jnp.int8), signals)

    def step(self, actions) -> TimeStep:
        check_actions(self.spec, actions, self.batch_size)
        actions = tuple({k: jnp.asarray(v) for k, v in a.items()} for a in actions)
        self.state, obs, rewards, done, outcome, signals = self._step(self.state, actions)
        return TimeStep(obs, rewards, done, outcome, signals)

    def matchups(self) -> list[tuple[str, str]]:
        """(side 0 race, side 1 race) of every game of the batch, as the game state holds them."""
        races = self.races if self.state is None else self.state.races
        return [(RACES[a], RACES[b]) for a, b in np.asarray(races)]


def matchup_array(races, batch_size: int) -> np.ndarray:
    """[B, 2] race indices from a pair of race names/indices or an array of them."""
    if isinstance(races, tuple | list) and len(races) == 2 and not np.ndim(races[0]):
        pair = [RACES.index(r) if isinstance(r, str) else int(r) for r in races]
        return np.tile(np.asarray(pair, np.int32), (batch_size, 1))
    arr = np.asarray(races, np.int32)
    if arr.shape != (batch_size, 2) or arr.min() < 0 or arr.max() >= len(RACES):
        raise ValueError(f"races must be a pair or a [{batch_size}, 2] array of 0..2, got {arr.shape}")
    return arr


# ---------------------------------------------------------------------------------------------
# jaxmarl's scripted heuristic micro, as a fixed opponent for one side.


def heuristic_policy(fns: SmaxRacesFunctions, side: int, composition: int | None = None,
                     attack_mode: str = "closest"):
    """jaxmarl's scripted micro for `side`, returned as (init, act) pure per-game functions.

    init() -> policy state; act(key, policy_state, obs) -> (actions dict, policy_state), where
    `obs` is the side's observation dict of ONE game (vmap both over the batch). The strategy step
    picks `composition`, or uniformly at random if None. The heuristic: shoot the closest enemy in
    range (keep shooting it while in range), else walk towards a random visible enemy or across
    the map (jaxmarl.environments.smax.heuristic_enemy).
    """
    env, n = fns.env, fns.n
    micro = create_heuristic_policy(env, side, shoot=True, attack_mode=attack_mode)

    def init():
        single = get_heuristic_policy_initial_state()
        return jax.tree.map(lambda x: jnp.stack([jnp.asarray(x)] * n), single)

    def act(key, policy_state: HeuristicPolicyState, obs):
        key, comp_key = jax.random.split(key)
        fresh = init()
        flat, new_state = jax.vmap(micro)(jax.random.split(key, n), policy_state, obs["units"])
        # On the strategy step every unit is a dead placeholder at (0, 0), and jaxmarl's micro
        # would fix each unit's default target from that position for the whole game (the map's
        # far corner, (32, 32), for both sides: the left army walks into the right one, which
        # walks away; side 0 then won 0.77 of heuristic mirror games). So the state stays fresh
        # through the strategy step, and the first real step sets the target from the spawn.
        new_state = jax.tree.map(lambda a, b: jnp.where(obs["choosing"], a, b), fresh, new_state)
        flat = flat.astype(jnp.int32)
        a_type = jnp.where(flat > NUM_MOVES, ATTACK, flat)
        target = jnp.where(flat > NUM_MOVES, flat - NUM_MOVES - 1, 0)
        if composition is None:
            comp = jax.random.randint(comp_key, (), 0, COMPOSITIONS_PER_RACE)
        else:
            comp = jnp.asarray(composition, jnp.int32)
        actions = {COMPOSITION_HEAD: comp, "action_type": a_type, "target": target}
        return actions, new_state

    return init, act


@functools.lru_cache(maxsize=8)
def functions(config: SmaxRacesConfig) -> SmaxRacesFunctions:
    return SmaxRacesFunctions(config)


def play_heuristic_games(config: SmaxRacesConfig, races, compositions, seed: int = 0,
                         max_steps: int | None = None):
    """Play one game per row with heuristic micro on both sides; returns outcomes [B] int8.

    races, compositions: [B, 2] int arrays (side 0, side 1). One jitted scan over the batch.
    """
    fns = functions(config)
    races = jnp.asarray(races, jnp.int32)
    comps = jnp.asarray(compositions, jnp.int32)
    steps = (max_steps or config.max_steps) + 1
    return np.asarray(_play(fns, steps, races, comps, jax.random.PRNGKey(seed)))


def heuristic_side(fns: SmaxRacesFunctions, side: int, batch: int, composition=None,
                   attack_mode: str = "closest"):
    """The scripted heuristic (`heuristic_policy`) as a side of `actors.rollout`: (act, initial
    state) for a batch of B games, `act(key, obs, state, first) -> (Action, state)`.
    `composition`: None (an army at random), a menu index, or [B] indices (one per game)."""
    from agents import Action

    fixed = None if composition is None or jnp.ndim(composition) == 0 else composition
    init, act_one = heuristic_policy(fns, side, None if fixed is not None else composition,
                                     attack_mode)

    def act(key, obs, state, first):
        actions, state = jax.vmap(act_one)(jax.random.split(key, batch), state, obs)
        if fixed is not None:
            actions = dict(actions, **{COMPOSITION_HEAD: jnp.asarray(fixed, jnp.int32)})
        return Action(game=actions, heads=actions, log_probs={}), state

    return act, jax.vmap(lambda _: init())(jnp.arange(batch))


def start_games(fns: SmaxRacesFunctions, races, key, state0, state1):
    """B fresh games in `races` [B, 2] (or [B, 2, 2]: races and forced armies; [B, 3, 2]: and
    handicaps, as `reset` takes them) (`actors.rollout.Games`), the sides' core (or heuristic) states `state0` /
    `state1`."""
    from actors.rollout import Games

    batch = races.shape[0]
    state, obs = jax.vmap(fns.reset)(jax.random.split(key, batch), races)
    return Games.start(state, obs, state0, state1, batch)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _play(fns: SmaxRacesFunctions, steps: int, races, comps, key):
    from actors.rollout import play_to_end

    batch = races.shape[0]
    key, reset_key = jax.random.split(key)
    act0, state0 = heuristic_side(fns, 0, batch, comps[:, 0])
    act1, state1 = heuristic_side(fns, 1, batch, comps[:, 1])
    games = start_games(fns, races, reset_key, state0, state1)
    outcome, _, _, _ = play_to_end(fns.step, act0, act1, games, key, steps)
    return outcome
