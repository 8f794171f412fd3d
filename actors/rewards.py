"""Reward plug-ins: the training reward of every step, from trajectory fields and game signals.

A reward plug-in is a Python file given by `--reward_plugin=path/to/file.py` that defines

    def get_reward(batch: dict[str, np.ndarray], contiguous: bool) -> np.ndarray

(modelled on kanachan's reward plug-in, seed 004). `batch` holds N steps of ONE side:

    "outcome"  [N] int8    +1 win / 0 draw / -1 loss from this side's view where "done", else 0
    "done"     [N] bool    the game ended at this step
    "reward"   [N] float32 the game's own zero-sum payoff for this side (poker: chips)
    "time"     [N] float32 the step index within the game
    plus the game's raw signals (GameSpec.signal_fields) seen from this side: for SMAX races
    "damage_dealt", "damage_taken", "kills", "deaths", "present" [N, n_units] for the side's own
    units and "enemy_<name>" for the enemy's, "win" [N] (+1 / -1 / 0 on the final step).

`contiguous` is True when the batch is whole games of this side in the order played. It returns
the rewards, [N] or, for team games, [N, n_units] (one per unit), finite. The default is the game
outcome, +1 / 0 / -1 on the final step (AlphaStar). A plug-in that cannot be loaded, lacks
`get_reward`, raises, or returns a wrong shape or a non-finite value raises `RewardPluginError`
naming the file, the function and the problem -- `load_reward_plugin` checks all of that on a
synthetic batch before a run writes anything.

Built in for team games (OpenAI Five, seeds 000 and 003 appendix G): `OpenAIFiveReward` turns
SMAX's per-unit signals into shaped per-unit rewards (each team's own events, then zero-sum
symmetrisation once), team spirit tau (annealed with the learner's progress: the actor calls
`set_progress(version)` with the version of the parameters that played, i.e. the learner's
update count), time decay, and `RunningRewardNormalizer` normalises rewards online. Each unit
keeps its own reward through to the learner (one value and advantage per unit), so tau
changes what each unit learns from: 0 its own events only, 1 the team's mean.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping

import numpy as np

from agents.specs import GameSpec

FUNCTION = "get_reward"
RewardFn = Callable[[Mapping[str, np.ndarray], bool], np.ndarray]
BUILTIN = ("outcome", "openai_five")


class RewardPluginError(ValueError):
    """A reward plug-in failed; the message names the file, the function and the problem."""

    def __init__(self, source: str, problem: str):
        super().__init__(f"reward plug-in {source}: {FUNCTION}(batch, contiguous) {problem}")
        self.source = source
        self.problem = problem


def outcome_reward(batch: Mapping[str, np.ndarray], contiguous: bool) -> np.ndarray:
    """The default: the game outcome +1 / 0 / -1 on the final step, 0 elsewhere (AlphaStar)."""
    del contiguous
    return np.where(np.asarray(batch["done"], bool), np.asarray(batch["outcome"], np.float32), 0.0)


def game_reward(batch: Mapping[str, np.ndarray], contiguous: bool) -> np.ndarray:
    """The game's own zero-sum payoff (poker: chips won or lost), where a win/loss outcome
    would make bet sizes irrelevant: the reward under which poker's Nash equilibrium is the
    one OpenSpiel's NashConv measures."""
    del contiguous
    return np.asarray(batch["reward"], np.float32)


# ---------------------------------------------------------------------------------------------
# OpenAI Five's reward processing for team games.


@dataclasses.dataclass(frozen=True)
class OpenAIFiveConfig:
    """Weights of the per-unit score and the processing (OpenAI Five, seed 000 and 003 appendix G).

    Each unit's raw reward rho_i per step counts only its own team's events (seed 000: "Each
    hero's reward is a linear combination of separate signals"; the win goes to the winning
    team only):
      w_damage_dealt * (enemy health fraction it removed) + w_kill * kills + w_death * deaths
      + w_win * (1 if its team won at this step, else 0).
    Then (seed 000):
      time decay:   rho_i *= time_decay ** (t / time_decay_horizon), win excluded (003, eq. 11);
      team spirit:  r_i = (1 - tau) rho_i + tau mean_team(rho) (003, eq. 12);
      zero sum:     r_i -= mean_enemy(r) (000: "hero_rewards[i] -= mean(enemy_rewards)").
    Symmetrising once is what makes the other side's events count: damage a unit takes is the
    enemy's damage dealt and comes back negative through the enemy mean, and so does a loss
    (-w_win per unit). A team's total over a game is its raw total minus the enemy's.
    Teams of unequal size (OpenAI Five's are 5 v 5; a SMAX army of 16 zerglings meets 6
    marauders): each unit's damage dealt and kills are counted in units of the enemy army's size
    relative to its own (x n_own / n_enemy, `present`), so a team's mean over a game is the
    share of the enemy army it destroyed, whatever the sizes. Counted per unit instead, every
    zergling lost was worth 16/6 kills in the marauders' mean, and the zerg's win returned +3.6
    where a hydralisk win returned +6.5 (`benchmarks/reward_balance.py`). Equal sizes: unchanged.
    OpenAI Five anneals tau from 0.2 to 0.97 (000; its rerun 0.3 -> 0.8, 001 appendix C);
    `team_spirit(progress)` is that schedule, linear over `anneal_updates` learner updates
    (progress = the version of the parameters that played).
    """

    w_damage_dealt: float = 1.0
    w_kill: float = 0.5
    w_death: float = -1.0  # 003 Table 6: hero death -1
    w_win: float = 5.0  # 003 Table 6: win 5 (team)
    tau_start: float = 0.3
    tau_end: float = 0.8
    anneal_updates: int = 2_000
    time_decay: float = 0.6
    time_decay_horizon: float = 1200.0  # steps; OpenAI Five: 10 minutes
    size_fair: bool = True  # False: damage and kills per unit, as OpenAI Five's 5 v 5 (see above)

    def team_spirit(self, progress, xp=None):
        """Linear annealing of tau from tau_start to tau_end over `anneal_updates` learner
        updates: tau = start + min(progress / anneal_updates, 1) (end - start). `xp`: an
        array module for a traced `progress` (the device path), else a float."""
        if xp is None:
            frac = min(max(progress / max(self.anneal_updates, 1), 0.0), 1.0)
        else:
            frac = xp.clip(progress / max(self.anneal_updates, 1), 0.0, 1.0)
        return self.tau_start + frac * (self.tau_end - self.tau_start)


def team_spirit(rho: np.ndarray, tau: float, present: np.ndarray | None = None, xp=np) -> np.ndarray:
    """r_i = (1 - tau) rho_i + tau mean(rho) over the team's units (last axis)."""
    mean = masked_mean(rho, present, xp)
    return (1.0 - tau) * rho + tau * mean[..., None]


def zero_sum(own: np.ndarray, enemy: np.ndarray, enemy_present: np.ndarray | None = None, xp=np) -> np.ndarray:
    """own_i - mean(enemy): the two teams' rewards then sum to zero (equal team sizes)."""
    return own - masked_mean(enemy, enemy_present, xp)[..., None]


def masked_mean(x: np.ndarray, present: np.ndarray | None, xp=np) -> np.ndarray:
    if present is None:
        return x.mean(-1)
    w = xp.asarray(present).astype(x.dtype)
    return (x * w).sum(-1) / xp.maximum(w.sum(-1), 1.0)


def size_ratio(batch: Mapping[str, np.ndarray], prefix: str, xp=np):
    """n_team / n_enemy [N, 1] for the team `prefix` names, from the "present" masks (1 where
    the batch has none: teams of equal size)."""
    other = "enemy_" if prefix == "" else ""
    if prefix + "present" not in batch or other + "present" not in batch:
        return 1.0
    own = xp.asarray(batch[prefix + "present"]).astype(xp.float32).sum(-1)
    enemy = xp.asarray(batch[other + "present"]).astype(xp.float32).sum(-1)
    return (xp.maximum(own, 1.0) / xp.maximum(enemy, 1.0))[:, None]


def unit_scores(batch: Mapping[str, np.ndarray], prefix: str, c: OpenAIFiveConfig, xp=np) -> np.ndarray:
    """Raw one-sided per-unit reward rho [N, n] of the team `prefix` names ("" this side,
    "enemy_" the other): its own damage dealt and kills (x n_team / n_enemy, `size_ratio`) and
    deaths, time-decayed, and the win bonus if that team won. `batch["win"]` is this side's
    +1 / -1 / 0."""
    scale = size_ratio(batch, prefix, xp) if c.size_fair else 1.0
    shaped = (scale * (c.w_damage_dealt * batch[prefix + "damage_dealt"] + c.w_kill * batch[prefix + "kills"])
              + c.w_death * batch[prefix + "deaths"])
    real = np.float64 if xp is np else xp.float32
    decay = c.time_decay ** (xp.asarray(batch["time"]).astype(real) / c.time_decay_horizon)
    won = xp.asarray(batch["win"]).astype(real) * (1.0 if prefix == "" else -1.0) > 0
    return shaped * decay[:, None] + c.w_win * won[:, None]


class OpenAIFiveReward:
    """Built-in plug-in for SMAX races: per-unit shaped, zero-sum, team-spirit rewards [N, n]."""

    def __init__(self, config: OpenAIFiveConfig = OpenAIFiveConfig()):
        self.config = config
        self.progress = 0

    def set_progress(self, learner_updates: int) -> None:
        """The learner's progress: the version (update count) of the parameters that played."""
        self.progress = int(learner_updates)

    @property
    def tau(self) -> float:
        return self.config.team_spirit(self.progress)

    def __call__(self, batch: Mapping[str, np.ndarray], contiguous: bool) -> np.ndarray:
        del contiguous
        return self.rewards(batch, self.tau)

    def rewards(self, batch: Mapping[str, np.ndarray], tau, xp=np) -> np.ndarray:
        """The per-unit rewards [N, n] of `batch` at team spirit `tau` (see the class)."""
        own = unit_scores(batch, "", self.config, xp)
        enemy = unit_scores(batch, "enemy_", self.config, xp)
        present = batch.get("present")
        enemy_present = batch.get("enemy_present")
        own = team_spirit(own, tau, present, xp)
        enemy = team_spirit(enemy, tau, enemy_present, xp)
        reward = zero_sum(own, enemy, enemy_present, xp)
        if present is not None:
            reward = xp.where(xp.asarray(present).astype(bool), reward, 0.0)
        return reward.astype(xp.float32)

    def device(self, batch, contiguous: bool, progress):
        """The same rewards in jax.numpy, with tau annealed by the traced learner `progress`
        (the version that plays): the device path's version of this plug-in."""
        import jax.numpy as jnp

        del contiguous
        return self.rewards(batch, self.config.team_spirit(progress, jnp), jnp)


class RunningRewardNormalizer:
    """Divides rewards by a running standard deviation (and optionally subtracts the mean).

    Welford's online moments over every reward seen; seed 004 asks rewards near mean 0, std 1.
    """

    def __init__(self, center: bool = False, eps: float = 1e-8, clip: float | None = 10.0):
        self.center, self.eps, self.clip = center, eps, clip
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    def update(self, rewards: np.ndarray) -> None:
        x = np.asarray(rewards, np.float64).ravel()
        if x.size == 0:
            return
        n, mean, var = x.size, x.mean(), x.var()
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += var * n + delta**2 * self.count * n / total
        self.count = total

    @property
    def std(self) -> float:
        return float(np.sqrt(self.m2 / self.count)) if self.count else 1.0

    def __call__(self, rewards: np.ndarray, update: bool = True) -> np.ndarray:
        if update:
            self.update(rewards)
        out = (np.asarray(rewards, np.float64) - (self.mean if self.center else 0.0))
        out = out / (self.std + self.eps)
        if self.clip is not None:
            out = np.clip(out, -self.clip, self.clip)
        return out.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Loading and checking plug-ins.


def openai_five_config(team_spirit: tuple[float, float, int] | None = None) -> OpenAIFiveConfig:
    """OpenAI Five's reward settings with the team spirit schedule (tau_start, tau_end,
    anneal_updates) if given."""
    config = OpenAIFiveConfig()
    if team_spirit is not None:
        start, end, updates = team_spirit
        config = dataclasses.replace(config, tau_start=float(start), tau_end=float(end),
                                     anneal_updates=int(updates))
    return config


def load_reward_plugin(path_or_name: str | None, spec: GameSpec | None = None,
                       side: int = 0, team_spirit: tuple[float, float, int] | None = None
                       ) -> RewardFn:
    """The reward function of `--reward_plugin`: a built-in name, a .py path, or None (outcome).

    With `spec`, the function is also called on a synthetic batch of that game and its result
    checked, so a broken plug-in stops the run before anything is written. `team_spirit`:
    (tau_start, tau_end, anneal_updates) of the built-in "openai_five" (default: its config's).
    """
    if path_or_name in (None, "", "outcome"):
        fn, source = outcome_reward, "outcome (built-in)"
    elif path_or_name == "game":
        fn, source = game_reward, "game payoff (built-in)"
    elif path_or_name == "openai_five":
        fn, source = OpenAIFiveReward(openai_five_config(team_spirit)), "openai_five (built-in)"
    else:
        fn, source = _load_file(str(path_or_name)), str(path_or_name)
    checked = CheckedReward(fn, source)
    if spec is not None:
        checked(example_batch(spec, side), contiguous=True)
    return checked


def _load_file(path: str) -> RewardFn:
    if not os.path.isfile(path):
        raise RewardPluginError(path, "cannot be loaded: no such file")
    name = "reward_plugin_" + os.path.splitext(os.path.basename(path))[0]
    try:
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError("not a Python source file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # so that a plug-in may define dataclasses
        module_spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 -- any import failure is the plug-in's problem
        raise RewardPluginError(path, f"cannot be loaded: {type(e).__name__}: {e}") from e
    fn = getattr(module, FUNCTION, None)
    if fn is None or not callable(fn):
        raise RewardPluginError(path, "is not defined in the file")
    try:
        inspect.signature(fn).bind({}, True)
    except TypeError as e:
        raise RewardPluginError(path, f"has the wrong signature {inspect.signature(fn)}: {e}") from e
    return fn


class CheckedReward:
    """Calls a reward function and validates its result (shape [N] or [N, n_units], finite)."""

    def __init__(self, fn: RewardFn, source: str):
        self.fn, self.source = fn, source

    def __getattr__(self, name):  # set_progress, tau, ... of built-ins
        return getattr(self.fn, name)

    def __call__(self, batch: Mapping[str, np.ndarray], contiguous: bool) -> np.ndarray:
        n = len(batch["done"])
        try:
            out = self.fn(batch, contiguous)
        except Exception as e:  # noqa: BLE001
            raise RewardPluginError(self.source, f"raised {type(e).__name__}: {e}") from e
        if out is None:
            raise RewardPluginError(self.source, "returned None; it must return the rewards")
        try:
            out = np.asarray(out, np.float32)
        except (TypeError, ValueError) as e:
            raise RewardPluginError(self.source, f"returned a non-numeric value: {e}") from e
        units = _num_units(batch)
        allowed = [(n,)] + ([(n, units)] if units else [])
        if out.shape not in allowed:
            raise RewardPluginError(self.source, f"returned shape {out.shape}; expected one of {allowed}")
        if not np.all(np.isfinite(out)):
            bad = np.flatnonzero(~np.isfinite(out).reshape(n, -1).all(-1))
            raise RewardPluginError(self.source, f"returned non-finite values at steps {bad[:5].tolist()}")
        return out


def _num_units(batch: Mapping[str, np.ndarray]) -> int:
    for key in ("present", "damage_dealt"):
        if key in batch:
            return int(np.shape(batch[key])[-1])
    return 0


def side_batch(timesteps_fields: Mapping[str, np.ndarray], side: int, xp=np) -> dict[str, np.ndarray]:
    """A plug-in batch for `side` from stacked TimeStep fields, flattened to [N].

    `timesteps_fields` holds "done" [*], "outcome" [*] (side 0's view), "rewards" [*, 2], "time"
    [*] (optional, zeros if absent) and the game's signals [*, 2, ...] (per-side signals) or [*, ...] (shared), where * is any
    leading shape (e.g. [T, B]; flattening is row-major, so pass [B, T] for contiguous games).
    `xp`: the array module (`jax.numpy` inside a jitted program: the device path).
    """
    done = xp.asarray(timesteps_fields["done"]).astype(bool)
    lead = done.shape
    flat = lambda x: xp.asarray(x).reshape((-1,) + xp.shape(x)[len(lead):])  # noqa: E731
    sign = 1 if side == 0 else -1
    out = {
        "done": flat(done),
        "outcome": flat(xp.asarray(timesteps_fields["outcome"]).astype(xp.int8) * sign).astype(xp.int8),
        "reward": flat(xp.asarray(timesteps_fields["rewards"])[..., side]).astype(xp.float32),
        "time": flat(timesteps_fields.get("time", xp.zeros(lead))).astype(xp.float32),
    }
    for name, value in timesteps_fields.items():
        if name in ("done", "outcome", "rewards", "time"):
            continue
        value = xp.asarray(value)
        if value.ndim > len(lead) and value.shape[len(lead)] == 2:
            out[name] = flat(value[(slice(None),) * len(lead) + (side,)])
            out["enemy_" + name] = flat(value[(slice(None),) * len(lead) + (1 - side,)])
        else:
            out[name] = flat(value)
    if "win" in out:  # "win" is per side [2]: keep this side's value only
        out.pop("enemy_win", None)
    return out


# ---------------------------------------------------------------------------------------------
# The device path (actors/rollout.py): the reward runs inside the jitted program.


def outcome_reward_jax(batch, contiguous):
    """`outcome_reward` in jax.numpy: +1 / 0 / -1 on the final step, 0 elsewhere."""
    import jax.numpy as jnp

    del contiguous
    return jnp.where(batch["done"], batch["outcome"].astype(jnp.float32), 0.0)


def game_reward_jax(batch, contiguous):
    """`game_reward` in jax.numpy: the game's own zero-sum payoff (poker: chips)."""
    del contiguous
    return batch["reward"]


class DeviceReward:
    """A traceable reward function with a hashable `key` (jitted programs that use the same
    reward share their compilation) and its `source` for messages. Called with the learner's
    progress (the version that plays, traced) for plug-ins that anneal with it (`uses_progress`:
    OpenAI Five's team spirit)."""

    def __init__(self, fn, source: str, key, uses_progress: bool = False):
        self.fn, self.source, self.key, self.uses_progress = fn, source, key, uses_progress

    def __call__(self, batch, contiguous: bool, progress=0):
        if self.uses_progress:
            return self.fn(batch, contiguous, progress)
        return self.fn(batch, contiguous)


DEVICE_FIX = ("the device path (--experience=device) runs the reward inside the jitted program: "
              "write get_reward with jax.numpy (import jax.numpy as jnp; no np.asarray, no "
              "Python `if` on array values, no state kept between calls), or run with "
              "--experience=replay")


def device_reward(path_or_name: str | None, spec: GameSpec,
                  team_spirit: tuple[float, float, int] | None = None) -> DeviceReward:
    """The reward of `--reward_plugin` as a traceable function for the device path: the
    built-ins "outcome" and "game" in jax.numpy, or a plug-in file's `get_reward`, traced once
    on a synthetic batch of `spec` (`jax.eval_shape`) and its result's shape checked.
    RewardPluginError naming the function and the fix if it cannot be traced. "openai_five":
    `OpenAIFiveReward.device`, its team spirit annealed by the learner's version (`team_spirit`:
    (tau_start, tau_end, anneal_updates), as for `load_reward_plugin`)."""
    import jax

    if path_or_name in (None, "", "outcome"):
        return DeviceReward(outcome_reward_jax, "outcome (built-in)", "outcome")
    if path_or_name == "game":
        return DeviceReward(game_reward_jax, "game payoff (built-in)", "game")
    if path_or_name == "openai_five":
        config = openai_five_config(team_spirit)
        return DeviceReward(OpenAIFiveReward(config).device, "openai_five (built-in)",
                            ("openai_five", config), uses_progress=True)
    path = str(path_or_name)
    fn = _load_file(path)
    example = {k: jax.numpy.asarray(v) for k, v in example_batch(spec).items()}
    try:
        out = jax.eval_shape(lambda b: fn(b, False), example)
    except Exception as e:  # noqa: BLE001 -- any failure to trace is the plug-in's problem
        raise RewardPluginError(path, f"cannot be traced by JAX ({type(e).__name__}: "
                                f"{str(e).splitlines()[0][:200]}); {DEVICE_FIX}") from None
    n, units = len(example["done"]), _num_units(example)
    allowed = [(n,)] + ([(n, units)] if units else [])
    if getattr(out, "shape", None) not in allowed:
        raise RewardPluginError(path, f"returned shape {getattr(out, 'shape', out)} when traced; "
                                f"expected one of {allowed}")
    return DeviceReward(fn, path, ("file", os.path.abspath(path), os.path.getmtime(path)))


def example_batch(spec: GameSpec, side: int = 0, steps: int = 4) -> dict[str, np.ndarray]:
    """A synthetic contiguous batch of one game of `steps` steps ending in a win, for checks."""
    fields = {
        "done": np.array([False] * (steps - 1) + [True]),
        "outcome": np.array([0] * (steps - 1) + [1], np.int8),
        "rewards": np.zeros((steps, 2), np.float32),
        "time": np.arange(steps, dtype=np.float32),
    }
    fields["rewards"][-1] = (1.0, -1.0)
    for name, array_spec in spec.signal_fields.items():
        if name == "time":
            continue
        value = np.full((steps,) + array_spec.shape, 0.1, array_spec.dtype)
        if name == "win":
            value[:] = 0
            value[-1] = (1, -1)
        fields[name] = value
    return side_batch(fields, side)


def training_reward(rewards: np.ndarray, present: np.ndarray | None,
                    shape: tuple[int, ...] = (), xp=np) -> np.ndarray:
    """A plug-in's [N] or per-unit [N, n] rewards in the trajectory's shape [N, *shape]:

    shape () (one value per side): [N] as it is, [N, n] averaged over the present units;
    shape (n,) (one value per unit): [N, n] as it is for the present units, [N] given to every
    unit. An absent slot (`present` False: a smaller army's padding) carries its team's mean
    over the present units. A team head (the army pick) learns from the mean over all n slots
    (`learners.losses`), which is then the team's mean over its own units whatever its size:
    with absent slots at zero a 5-unit army's wins and losses counted 5/16 of a 16-unit army's
    at the pick, so the smaller army looked better whenever the side was losing. A game gives
    its absent units one legal action, so their own heads learn nothing from it.
    `xp`: the array module (`jax.numpy` inside the device path's jitted rollout)."""
    rewards = xp.asarray(rewards).astype(xp.float32)
    w = None if present is None else xp.asarray(present).astype(xp.float32)
    team_mean = rewards if rewards.ndim == 1 else (
        rewards.mean(-1) if w is None else (rewards * w).sum(-1) / xp.maximum(w.sum(-1), 1.0))
    if not shape:
        return team_mean.astype(xp.float32)
    if rewards.ndim == 1:
        return xp.broadcast_to(rewards[:, None], (len(rewards), *shape)).astype(xp.float32)
    if rewards.shape[1:] != tuple(shape):
        raise ValueError(f"per-unit rewards {rewards.shape} do not match the network's {shape}")
    if w is None:
        return rewards
    return xp.where(w > 0, rewards, team_mean[:, None]).astype(xp.float32)
