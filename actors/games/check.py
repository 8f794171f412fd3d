"""What is wrong with a game: the `GameFunctions` protocol (actors/games/base.py), checked.

    from actors.games.check import check_game, format_report, run_checks
    problems = check_game(registry.resolve("mygames.rps:make"))    # [] when the game passes
    print(format_report("mygames.rps:make", run_checks(game)))     # every check, ok or not

    python -m experiments.check_game --game=mygames.rps:make       # the same, as a command

`check_game` never raises on a broken game: an exception from the game's functions (or from
tracing them) is a problem that names the call that failed. Each problem is a sentence that
says what is wrong and how to fix it, prefixed by the name of its check.

The checks, in order, on `game.functions()` (B = batch_size games, `steps` steps):

    functions          game.functions() gives an object with spec, config, reset and step
    spec               spec is an agents.specs.GameSpec of 2 SideSpecs, max_steps an int >= 1
    config             config is hashable (it names the game's compiled programs)
    reset              jax.jit(jax.vmap(reset)) traces and runs on B keys (and races int32
                       [B, 2] where the game declares `Capabilities.races`); it returns
                       (state, (obs0, obs1))
    step               jax.jit(jax.vmap(step)) traces and runs for `steps` steps of uniformly
                       random legal actions (`random_legal_actions` on the masks); it returns
                       (state, (obs0, obs1), rewards, done, outcome, signals)
    observations       at reset and after every step, each side's observation has exactly the
                       spec's fields and mask heads, with the spec's shapes (behind the batch
                       axis) and dtypes (masks bool)
    masks              every mask row, at reset and after every step, has a legal value
    step outputs       rewards float32 [B, 2], done bool [B], outcome int8 [B], signals with
                       exactly spec.signal_fields' keys, shapes and dtypes
    zero-sum           rewards are finite and rewards[:, 1] == -rewards[:, 0] on every step
                       (up to 1e-5 relative); every game of the protocol is zero-sum
    outcome            outcome is in {-1, 0, +1} and 0 wherever done is False
    episodes end       some game ends within `steps` steps, and no game (its first game or one
                       started by auto-reset) runs spec.max_steps steps without done
    auto-reset         see below
    determinism        see below
    jit matches vmap   jax.vmap(reset) and jax.vmap(step), not jitted, give the jitted
                       functions' outputs on the same keys and actions for the first 3 steps
                       (floats up to 1e-4 relative, 1e-5 absolute; the rest exactly)

auto-reset (step must start a fresh game where `done`), two tests, each able to fail alone:
  1. done does not stick: in a game whose first game (from reset) lasted more than one step,
     step must not return done on every one of the steps after that game ended, when those
     are at least 16 steps. (A game with spec.max_steps == 1, a matrix game, is done on every
     step by right and is exempt. A sound game that ends a fresh game at its first step with
     probability q passes falsely-flagged with probability below q**16 per game.) A game that
     does not reset and never ends again fails "episodes end" instead.
  2. the observations where done are a fresh game's: R resets on other keys (R * B >= 512
     samples, the same races per game) give, per side, the observation elements on which every
     reset observation agrees (a poker betting history of zeros, a step counter of 0); where
     done, an observation that differs from them in any such element is not a fresh game's.
     The check fails when more than half of a side's observations where done (at least 4)
     are not a fresh game's. (A sound game differs only where a fresh game can show an element
     value that none of 512 resets showed: an event of probability p does so for a fraction
     ~p of the observations, far below one half.)
determinism (same key, same actions => the same trajectory, in every process that builds the
  game): a second call of `game.functions()` (the same object where the factory caches it),
  its reset and step vmapped and jitted anew (traced again, so trace-time randomness and Python
  state in the game show), reset on the same keys (and races) and stepped with the same
  recorded actions for all `steps` steps, gives the same observations, rewards, done, outcome
  and signals: bool and integer arrays exactly, floats up to 1e-6 relative and absolute.

A game without functions (`Game.functions` None: an OpenSpiel pool, the replay path only)
gets the batch protocol's checks instead: `game.make_batch(B)`, its reset(seed) and step(actions)
(the TimeStep fields), observations, masks, step outputs, zero-sum, outcome, episodes end,
auto-reset and determinism (a second `game.make_batch(B)`, reset(seed), the same actions); the
device-path checks (config, jit) are reported skipped: the device path needs the functions.
A game with both functions and its own `make_batch` is checked on its functions only.

Each check is a plain function of a shared `Context` (the game, the batch, and what the checks
before it found: the functions, the spec, the driver, the recorded play), listed in order with
its name in `FUNCTIONS_CHECKS` or `BATCH_CHECKS`; it returns (problems, detail), or raises
`_Skip` (skipped, why), `_Problem` (its one problem) or `_Stop` (its problems, and the checks
after it skipped).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import traceback
from collections.abc import Callable, Mapping

import numpy as np

from actors.games.base import Game, random_legal_actions
from agents.specs import MASK_KEY, ArraySpec, DiscreteHead, GameSpec, SideSpec

# name -> what passing it means (the command prints these next to "ok").
CHECKS: dict[str, str] = {
    "functions": "game.functions() gives spec, config, reset and step",
    "make": "game.make_batch(batch_size) gives a batch game (spec, batch_size, reset, step)",
    "spec": "spec is a GameSpec of 2 sides",
    "config": "config is hashable",
    "reset": "reset runs over the batch",
    "step": "step runs over the batch",
    "observations": "observation fields and masks have the spec's shapes and dtypes",
    "masks": "every mask row has a legal value",
    "step outputs": "rewards float32 [B, 2], done bool [B], outcome int8 [B], signals as the spec",
    "zero-sum": "rewards[:, 1] == -rewards[:, 0] on every step",
    "outcome": "outcome in {-1, 0, +1}, 0 where not done",
    "episodes end": "games end, none longer than spec.max_steps",
    "auto-reset": "after done a fresh game starts",
    "determinism": "same key, same actions: the same trajectory",
    "jit matches vmap": "the jitted step gives the unjitted step's outputs",
}
STICKY_STEPS = 16          # auto-reset test 1: done on every one of at least this many steps
RESET_SAMPLES = 512        # auto-reset test 2: reset observations to learn the constant elements
JIT_STEPS = 3              # "jit matches vmap": steps compared
MAX_LISTED = 3             # games or steps named in one problem


@dataclasses.dataclass
class Check:
    """One check's result: ok (no problems), its problems, or skipped (why)."""

    name: str
    problems: list[str] = dataclasses.field(default_factory=list)
    skipped: str | None = None
    detail: str = ""

    @property
    def status(self) -> str:
        return "skipped" if self.skipped is not None else ("problem" if self.problems else "ok")


class _Problem(Exception):
    """A protocol violation found while calling the game (the message is the problem)."""


class _Skip(Exception):
    """A check that cannot be decided on this run (the message says why)."""


def _error(e: BaseException, call: str) -> str:
    """`call` failed: the exception's type, its first lines and the game's line that raised."""
    lines = [ln for ln in str(e).splitlines() if ln.strip() and not ln.startswith("----")]
    text = " ".join(lines[:3])
    if len(text) > 600:
        text = text[:600] + " ..."
    where = ""
    here = os.path.abspath(__file__)
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        name = os.path.abspath(frame.filename)
        if name != here and "site-packages" not in name and f"{os.sep}jax{os.sep}" not in name:
            where = f" (at {frame.filename}:{frame.lineno}, in {frame.name})"
            break
    return f"{call} raised {type(e).__name__}: {text}{where}"


def _shape(x) -> tuple:
    return tuple(np.shape(x))


def _describe(value) -> str:
    """'a dict', 'an object': the value's type with its article."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


# -- drivers: one batch of games, played (numpy in, numpy out) -----------------------------------


class _Step:
    __slots__ = ("obs", "rewards", "done", "outcome", "signals")

    def __init__(self, obs, rewards, done, outcome, signals):
        self.obs, self.rewards, self.done, self.outcome, self.signals = obs, rewards, done, outcome, signals


def _pair(obs, what: str):
    if not isinstance(obs, tuple | list) or len(obs) != 2:
        raise _Problem(f"{what} must be a pair (obs0, obs1) of dicts, got {_describe(obs)}"
                       + (f" of length {len(obs)}" if isinstance(obs, tuple | list) else ""))
    for i, o in enumerate(obs):
        if not isinstance(o, Mapping):
            raise _Problem(f"{what}: side {i}'s observation must be a dict of arrays, got {_describe(o)}")
    return tuple(obs)


def _numpy(tree):
    import jax

    return jax.tree.map(np.asarray, jax.device_get(tree))


class _FunctionsDriver:
    """B games of `fns`: reset and step vmapped, jitted unless `jit=False`."""

    def __init__(self, fns, batch_size: int, seed: int, races, jit: bool = True):
        import jax

        self.fns, self.races, self.jit = fns, races, jit
        self.keys = jax.random.split(jax.random.PRNGKey(seed), batch_size)
        self.seed, self.batch_size = seed, batch_size
        wrap = jax.jit if jit else (lambda f: f)
        self._reset = wrap(jax.vmap(fns.reset))
        self._step = wrap(jax.vmap(fns.step))
        self.reset_call = ("jax.jit(jax.vmap(reset))" if jit else "jax.vmap(reset)") + (
            "(keys, races)" if races is not None else "(keys)")
        self.step_call = "jax.jit(jax.vmap(step))" if jit else "jax.vmap(step)"
        self.state = None

    def _call_reset(self, keys):
        out = self._reset(keys) if self.races is None else self._reset(keys, self.races)
        if not isinstance(out, tuple | list) or len(out) != 2:
            raise _Problem(f"reset must return (state, (obs0, obs1)), got {_describe(out)}"
                           + (f" of {len(out)} values" if isinstance(out, tuple | list) else ""))
        return out

    def reset(self):
        try:
            state, obs = self._call_reset(self.keys)
        except _Problem:
            raise
        except Exception as e:
            raise _Problem(_error(e, self.reset_call)) from e
        self.state = state
        return _pair(_numpy(obs), "reset's observations")

    def reset_samples(self, rounds: int):
        import jax

        out = []
        for r in range(rounds):
            keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(self.seed), 1 + r), self.batch_size)
            _, obs = self._call_reset(keys)
            out.append(_pair(_numpy(obs), "reset's observations"))
        return out

    def step(self, actions) -> _Step:
        import jax.numpy as jnp

        actions = tuple({k: jnp.asarray(v) for k, v in a.items()} for a in actions)
        try:
            out = self._step(self.state, actions)
        except Exception as e:
            raise _Problem(_error(e, f"{self.step_call}(state, actions)")) from e
        if not isinstance(out, tuple | list) or len(out) != 6:
            raise _Problem("step must return (state, (obs0, obs1), rewards, done, outcome, signals), got "
                           f"{_describe(out)}" + (f" of {len(out)} values" if isinstance(out, tuple | list) else ""))
        self.state = out[0]
        obs, rewards, done, outcome, signals = _numpy(tuple(out[1:]))
        return _Step(_pair(obs, "step's observations"), rewards, done, outcome, signals)


class _BatchDriver:
    """A `BatchGame` from `game.make_batch(B)`: reset(seed), step(actions)."""

    def __init__(self, game: Game, batch_size: int, seed: int):
        self.game, self.batch_size, self.seed = game, batch_size, seed
        self.batch = self._make()
        self.reset_call, self.step_call = "reset(seed)", "step(actions)"
        self._samples = None

    def _make(self):
        try:
            batch = self.game.make_batch(self.batch_size)
        except Exception as e:
            raise _Problem(_error(e, f"game.make_batch({self.batch_size})")) from e
        missing = [a for a in ("spec", "batch_size", "reset", "step") if not hasattr(batch, a)]
        if missing:
            raise _Problem(f"game.make_batch({self.batch_size}) gave {_describe(batch)} without {missing}: a batch "
                           "game has spec, batch_size, reset(seed) and step(actions) (actors/games/base.py)")
        return batch

    @staticmethod
    def _timestep(ts, call):
        fields = ("observations", "rewards", "done", "outcome", "signals")
        if not all(hasattr(ts, f) for f in fields):
            raise _Problem(f"{call} must return a TimeStep (observations, rewards, done, outcome, signals), "
                           f"got {_describe(ts)}")
        return _numpy(tuple(getattr(ts, f) for f in fields))

    def reset(self):
        try:
            ts = self.batch.reset(self.seed)
        except Exception as e:
            raise _Problem(_error(e, "reset(seed)")) from e
        return _pair(self._timestep(ts, "reset(seed)")[0], "reset's observations")

    def reset_samples(self, rounds: int):
        if self._samples is None:
            self._samples = self._make()
        return [_pair(self._timestep(self._samples.reset(self.seed + 1 + r), "reset(seed)")[0],
                      "reset's observations") for r in range(rounds)]

    def step(self, actions) -> _Step:
        try:
            ts = self.batch.step(actions)
        except Exception as e:
            raise _Problem(_error(e, "step(actions)")) from e
        obs, rewards, done, outcome, signals = self._timestep(ts, "step(actions)")
        return _Step(_pair(obs, "step's observations"), rewards, done, outcome, signals)


# -- what the checks share -------------------------------------------------------------------------


class _Stop(Exception):
    """A check whose failure leaves the checks after it nothing to check: its problems, and why
    the rest are skipped (all of them but `still_run`, which run on what there is)."""

    def __init__(self, problems, why: str, detail: str = "", still_run: tuple[str, ...] = ()):
        super().__init__(why)
        self.problems, self.why, self.detail, self.still_run = list(problems), why, detail, still_run


@dataclasses.dataclass
class Context:
    """One run of the checks: the game, its batch, and what the checks before found (its
    functions, spec, driver, the recorded play); `add` records a result and reports it."""

    game: Game
    b: int                      # games in the batch
    steps: int
    seed: int
    report: Callable[[Check], None] | None = None
    results: list[Check] = dataclasses.field(default_factory=list)
    fns: object = None          # game.functions(), once "functions" passed
    spec: GameSpec | None = None    # once "spec" passed
    races: np.ndarray | None = None
    driver: _FunctionsDriver | _BatchDriver | None = None
    reset_obs: tuple | None = None
    trajectory: list[_Step] = dataclasses.field(default_factory=list)
    actions: list[tuple] = dataclasses.field(default_factory=list)
    play_error: str | None = None
    obs_ok: bool = True         # every observation matched the spec (else no element checks)
    outputs_ok: dict[str, bool] = dataclasses.field(
        default_factory=lambda: {"rewards": True, "done": True, "outcome": True})

    def add(self, name: str, problems=(), skipped: str | None = None, detail: str = "") -> Check:
        check = Check(name, [f"{name}: {p}" for p in problems], skipped, detail)
        self.results.append(check)
        if self.report is not None:
            self.report(check)
        return check

    def observations(self):
        """(where, obs pair) at reset and after every step."""
        yield "at reset", self.reset_obs
        for t, s in enumerate(self.trajectory):
            yield f"after step {t + 1}", s.obs

    def stacked(self, name: str):
        """[T, ...] of a step output, or None where its shape is wrong or there are no steps."""
        if not self.trajectory or not self.outputs_ok[name]:
            return None
        return np.stack([np.asarray(getattr(s, name)) for s in self.trajectory])

    def done_array(self):
        """done [T, B] bool over the recorded steps."""
        done = self.stacked("done")
        if done is None:
            raise _Problem("not checked: done does not have shape [B] (see step outputs)")
        return done.astype(bool)


def _of_the_outputs(check):
    """A check of the recorded play: an exception of its own (outputs odd enough to trip it) is
    its problem, not the end of the checks."""

    @functools.wraps(check)
    def guarded(ctx: Context):
        try:
            return check(ctx)
        except (_Skip, _Problem, _Stop):
            raise
        except Exception as e:
            raise _Problem(f"the check could not run on the game's outputs: {_error(e, 'checking')}") from e

    return guarded


# -- the checks: each takes the context and returns (problems, detail); it raises _Skip (skipped,
# why), _Problem (its one problem) or _Stop (its problems, and the checks after it skipped) ---------


def check_functions(ctx: Context):
    try:
        fns = ctx.game.functions()
    except Exception as e:
        raise _Stop([_error(e, "game.functions()")], "game.functions() failed") from None
    missing = [a for a in ("spec", "config", "reset", "step") if not hasattr(fns, a)]
    not_callable = [a for a in ("reset", "step") if hasattr(fns, a) and not callable(getattr(fns, a))]
    if missing or not_callable:
        raise _Stop([f"game.functions() gave {_describe(fns)} "
                     + (f"without {missing}" if missing else f"whose {not_callable} are not callable")
                     + ": the GameFunctions protocol needs spec, config, reset(key) and "
                     "step(state, actions) (actors/games/base.py)"], "game.functions() is not a GameFunctions")
    ctx.fns = fns
    return [], CHECKS["functions"]


def check_make(ctx: Context):
    try:
        ctx.driver = _BatchDriver(ctx.game, ctx.b, ctx.seed)
    except _Problem as e:
        raise _Stop([str(e)], "game.make_batch failed") from None
    return [], CHECKS["make"]


def check_spec(ctx: Context):
    spec = ctx.fns.spec if ctx.fns is not None else ctx.driver.batch.spec
    why = "the spec is not a GameSpec of 2 sides"
    if not isinstance(spec, GameSpec):
        raise _Stop([f"spec is {_describe(spec)}; it must be an agents.specs.GameSpec(name, "
                     "(side0, side1), max_steps, signal_fields) of two SideSpecs"], why)
    sides = spec.sides
    if not isinstance(sides, tuple | list) or len(sides) != 2:
        n = f"{len(sides)} sides" if isinstance(sides, tuple | list) else _describe(sides)
        raise _Stop([f"spec.sides is {n}; the protocol is two-sided: give (side0, side1) "
                     "(the same SideSpec twice for a symmetric game)"], why)
    problems = []       # each one fatal: the checks after need the spec
    for i, side in enumerate(sides):
        if not isinstance(side, SideSpec):
            problems.append(f"spec.sides[{i}] is {_describe(side)}; it must be an agents.specs.SideSpec")
            continue
        for name, field in side.observation.fields.items():
            if not isinstance(field, ArraySpec):
                problems.append(f"spec.sides[{i}] observation field {name!r} is {_describe(field)}; "
                                "declare it as an ArraySpec(shape, dtype)")
        if not side.action.heads:
            problems.append(f"spec.sides[{i}] has no action heads; give at least one DiscreteHead")
        for name, head in side.action.heads.items():
            if not isinstance(head, DiscreteHead):
                problems.append(f"spec.sides[{i}] action head {name!r} is {_describe(head)}; "
                                "declare it as a DiscreteHead(num_values, shape)")
    max_steps = spec.max_steps
    if isinstance(max_steps, bool) or not isinstance(max_steps, int | np.integer) or max_steps < 1:
        problems.append(f"spec.max_steps is {max_steps!r}; it must be an int >= 1, the longest game in steps")
    if not isinstance(spec.signal_fields, Mapping):
        problems.append(f"spec.signal_fields is {_describe(spec.signal_fields)}; give a dict name -> ArraySpec")
    else:
        for name, field in spec.signal_fields.items():
            if not isinstance(field, ArraySpec):
                problems.append(f"spec.signal_fields[{name!r}] is {_describe(field)}; declare it as an "
                                "ArraySpec(shape, dtype)")
    detail = f"{CHECKS['spec']}, max_steps {max_steps}"
    if problems:
        raise _Stop(problems, why, detail)
    ctx.spec = spec
    return [], detail


def check_config(ctx: Context):
    config = ctx.fns.config
    try:
        hash(config)
    except Exception as e:
        return [f"config ({_describe(config)}) is not hashable ({type(e).__name__}: {e}); "
                "make it a frozen dataclass, a tuple or a string: equal configs name the same "
                "game and share its compiled programs"], ""
    return [], CHECKS["config"]


def _races_hint(ctx: Context) -> str:
    if ctx.races is None:
        return ""
    return (f" (the game declares races {ctx.game.capabilities.races}, so reset is called as "
            "reset(key, races) with races int32 [2] per game)")


def check_reset(ctx: Context):
    if ctx.fns is not None:       # the device path: the functions vmapped and jitted
        if ctx.game.capabilities.races:
            rng = np.random.default_rng(ctx.seed)
            ctx.races = rng.integers(0, len(ctx.game.capabilities.races), (ctx.b, 2)).astype(np.int32)
        try:
            ctx.driver = _FunctionsDriver(ctx.fns, ctx.b, ctx.seed, ctx.races)
        except Exception as e:
            raise _Stop([_error(e, "jax.vmap(reset) / jax.vmap(step)")],
                        "the functions could not be vmapped") from None
    try:
        ctx.reset_obs = ctx.driver.reset()
    except _Problem as e:
        raise _Stop([str(e) + _races_hint(ctx)], "reset failed") from None
    what = "" if ctx.races is None else f", races {ctx.game.capabilities.races} as int32 [B, 2]"
    return [], f"{ctx.driver.reset_call} on {ctx.b} games{what}"


def _random_actions(ctx: Context, rng, obs) -> tuple:
    """Random legal actions from the masks; zeros for a head whose mask is unusable."""
    try:
        actions = random_legal_actions(rng, ctx.spec, obs)
    except Exception:
        actions = ({}, {})
    out = []
    for side_spec, side_actions in zip(ctx.spec.sides, actions):
        fixed = {}
        for name, head in side_spec.action.heads.items():
            value = side_actions.get(name)
            if value is None or _shape(value) != (ctx.b, *head.shape):
                value = head.value_spec.zeros((ctx.b,))
            fixed[name] = np.asarray(value).astype(head.dtype)
        out.append(fixed)
    return tuple(out)


def check_step(ctx: Context):
    """Plays `steps` steps of random legal actions, recording them for the checks after."""
    rng = np.random.default_rng(ctx.seed)
    obs = ctx.reset_obs
    for t in range(ctx.steps):
        actions = _random_actions(ctx, rng, obs)
        try:
            out = ctx.driver.step(actions)
        except _Problem as e:
            ctx.play_error = str(e)
            if t == 0:   # the reset observations can still be checked
                raise _Stop([str(e)], "step failed", still_run=("observations", "masks")) from None
            return [f"at step {t + 1}: {e}"], ""
        ctx.actions.append(actions)
        ctx.trajectory.append(out)
        obs = out.obs
    return [], f"{ctx.driver.step_call} for {ctx.steps} steps of random legal actions"


@_of_the_outputs
def check_observations(ctx: Context):
    found: dict = {}
    for where, pair in ctx.observations():
        for i, (side, obs) in enumerate(zip(ctx.spec.sides, pair)):
            for key, msg in _side_observation_problems(ctx.b, i, side, obs):
                found.setdefault(key, f"{msg} ({where}; first of its kind)")
    ctx.obs_ok = not found
    n = 1 + len(ctx.trajectory)
    return list(found.values()), f"{CHECKS['observations']} ({n} observations a side)"


def _side_observation_problems(b: int, i: int, side: SideSpec, obs):
    expected = set(side.observation.fields) | {MASK_KEY}
    missing, extra = expected - set(obs), set(obs) - expected
    if missing:
        yield (i, "missing", tuple(sorted(missing))), (
            f"side {i}'s observation lacks {sorted(missing)}: return every field of "
            f"spec.sides[{i}].observation and the masks under obs[{MASK_KEY!r}]")
    if extra:
        yield (i, "extra", tuple(sorted(extra))), (
            f"side {i}'s observation has fields {sorted(extra)} that spec.sides[{i}].observation does not "
            "declare: declare them (ArraySpec) or drop them")
    specs = [(name, name, spec, obs.get(name)) for name, spec in side.observation.fields.items() if name in obs]
    masks = obs.get(MASK_KEY)
    if MASK_KEY in obs:
        if not isinstance(masks, Mapping):
            yield (i, "masktype"), (f"side {i}'s obs[{MASK_KEY!r}] is {_describe(masks)}; it must be a dict "
                                    "head -> bool mask [*head.shape, num_values]")
        else:
            if set(masks) != set(side.action.heads):
                yield (i, "maskheads"), (
                    f"side {i}'s masks are for heads {sorted(masks)}, the spec's action heads are "
                    f"{sorted(side.action.heads)}: give one mask per head under obs[{MASK_KEY!r}]")
            specs += [(f"{MASK_KEY}[{h!r}]", ("mask", h), spec, masks.get(h))
                      for h, spec in side.mask_specs.items() if h in masks]
    for label, key, spec, value in specs:
        shape = _shape(value)
        if shape != (b, *spec.shape):
            got = shape[1:] if shape[:1] == (b,) else f"{shape} for the batch of {b}"
            yield (i, "shape", key), (
                f"side {i}'s observation field {label!r} has shape {got} per game, spec.sides[{i}] says "
                f"{spec.shape}: return that shape, or declare the field's shape in the spec")
            continue
        dtype = np.asarray(value).dtype
        if dtype != spec.dtype:
            hint = (" (JAX without x64 gives 32-bit arrays: declare a 32-bit dtype)"
                    if spec.dtype.itemsize == 8 and dtype.itemsize == 4 else "")
            yield (i, "dtype", key), (
                f"side {i}'s observation field {label!r} has dtype {dtype}, spec.sides[{i}] says "
                f"{spec.dtype}: cast it (x.astype(jnp.{spec.dtype.name})) or declare {dtype}{hint}")


@_of_the_outputs
def check_masks(ctx: Context):
    found: dict = {}
    for where, pair in ctx.observations():
        for i, (side, obs) in enumerate(zip(ctx.spec.sides, pair)):
            masks = obs.get(MASK_KEY)
            if not isinstance(masks, Mapping):
                continue
            for h, spec in side.mask_specs.items():
                mask = masks.get(h)
                if mask is None or _shape(mask) != (ctx.b, *spec.shape):
                    continue   # reported by "observations"
                empty = ~np.any(np.asarray(mask).astype(bool), axis=-1)
                if np.any(empty) and (i, h) not in found:
                    rows = np.argwhere(empty)
                    games = sorted({int(r[0]) for r in rows})
                    row = "" if empty.ndim == 1 else f" (row {tuple(int(x) for x in rows[0][1:])} of game {games[0]})"
                    found[(i, h)] = (
                        f"side {i}'s mask of head {h!r} has no legal value in {len(rows)} rows {where}, games "
                        f"{games[:MAX_LISTED]}{row}: every row needs a legal value (a side or unit that "
                        "does not act: one-hot at value 0, its action ignored)")
    return list(found.values()), f"{CHECKS['masks']}, at reset and after {len(ctx.trajectory)} steps"


@_of_the_outputs
def check_step_outputs(ctx: Context):
    b = ctx.b
    found: dict = {}
    wanted = {"rewards": ((b, 2), np.dtype(np.float32), "rewards [2] float32 per game"),
              "done": ((b,), np.dtype(np.bool_), "done a bool per game"),
              "outcome": ((b,), np.dtype(np.int8), "outcome an int8 per game (+1 / 0 / -1)")}
    for t, s in enumerate(ctx.trajectory):
        where = f"at step {t + 1}"
        for name, (shape, dtype, what) in wanted.items():
            value = getattr(s, name)
            got = _shape(value)
            if got != shape:
                ctx.outputs_ok[name] = False
                found.setdefault((name, "shape"), f"{name} has shape {got[1:] if got[:1] == (b,) else got} "
                                 f"per game, the protocol says {shape[1:]} ({what}) {where}")
            elif np.asarray(value).dtype != dtype:
                found.setdefault((name, "dtype"), f"{name} has dtype {np.asarray(value).dtype}, the protocol "
                                 f"says {dtype} ({what}): cast it (.astype(jnp.{dtype.name})) {where}")
        signals = s.signals
        if not isinstance(signals, Mapping):
            found.setdefault(("signals", "type"), f"signals is {_describe(signals)}; return a dict name -> "
                             f"array with spec.signal_fields' keys ({where})")
            continue
        declared = ctx.spec.signal_fields
        if set(signals) != set(declared):
            found.setdefault(("signals", "keys"), f"signals has keys {sorted(signals)}, spec.signal_fields "
                             f"declares {sorted(declared)}: return exactly the declared signals ({where})")
        for name, spec in declared.items():
            if name not in signals:
                continue
            value = signals[name]
            got = _shape(value)
            if got != (b, *spec.shape):
                found.setdefault(("signal", name, "shape"), (
                    f"signal {name!r} has shape {got[1:] if got[:1] == (b,) else got} per game, "
                    f"spec.signal_fields says {spec.shape} ({where})"))
            elif np.asarray(value).dtype != spec.dtype:
                found.setdefault(("signal", name, "dtype"), (
                    f"signal {name!r} has dtype {np.asarray(value).dtype}, spec.signal_fields says "
                    f"{spec.dtype}: cast it or declare {np.asarray(value).dtype} ({where})"))
    return list(found.values()), f"{CHECKS['step outputs']}, {len(ctx.trajectory)} steps"


@_of_the_outputs
def check_zero_sum(ctx: Context):
    rewards = ctx.stacked("rewards")
    if rewards is None:
        raise _Problem("not checked: rewards do not have shape [B, 2] (see step outputs)")
    rewards = rewards.astype(np.float64)
    problems = []
    bad = ~np.isfinite(rewards).all(axis=-1)
    if bad.any():
        t, i = (int(x) for x in np.argwhere(bad)[0])
        problems.append(f"rewards are not finite in {int(bad.sum())} game-steps (first: step {t + 1}, game "
                        f"{i}: {rewards[t, i].tolist()}): return finite payoffs")
    r0, r1 = np.nan_to_num(rewards[..., 0]), np.nan_to_num(rewards[..., 1])
    off = np.abs(r1 + r0) > 1e-5 * np.maximum(1.0, np.abs(r0))
    if off.any():
        t, i = (int(x) for x in np.argwhere(off)[0])
        problems.append(f"rewards are not zero-sum in {int(off.sum())} game-steps (first: step {t + 1}, game "
                        f"{i}: {rewards[t, i].tolist()}): the protocol's games are zero-sum, return "
                        "rewards = [r, -r] (side 0's payoff and its negation)")
    return problems, f"{CHECKS['zero-sum']}, {rewards.shape[0]} steps x {rewards.shape[1]} games"


@_of_the_outputs
def check_outcome(ctx: Context):
    outcome, done = ctx.stacked("outcome"), ctx.stacked("done")
    if outcome is None:
        raise _Problem("not checked: outcome does not have shape [B] (see step outputs)")
    outcome = outcome.astype(np.int64)
    problems = []
    bad = ~np.isin(outcome, (-1, 0, 1))
    if bad.any():
        t, i = (int(x) for x in np.argwhere(bad)[0])
        problems.append(f"outcome takes values {sorted(set(outcome[bad].tolist()))[:5]} (first: step {t + 1}, "
                        f"game {i}): it must be +1 win / 0 draw / -1 loss from side 0's view")
    if done is not None:
        early = (outcome != 0) & ~done.astype(bool)
        if early.any():
            t, i = (int(x) for x in np.argwhere(early)[0])
            problems.append(f"outcome is nonzero where done is False in {int(early.sum())} game-steps (first: "
                            f"step {t + 1}, game {i}: {int(outcome[t, i])}): set it only on the final step "
                            "(jnp.where(done, outcome, 0))")
    return problems, CHECKS["outcome"]


@_of_the_outputs
def check_episodes_end(ctx: Context):
    if ctx.play_error is not None:
        raise _Skip("step failed during play")
    done = ctx.done_array()
    max_steps, steps = int(ctx.spec.max_steps), done.shape[0]
    if not done.any():
        if steps < max_steps:
            raise _Skip(f"no game ended in {steps} steps, fewer than spec.max_steps ({max_steps}): "
                        "run with more steps")
        return [f"no game ended in {steps} steps of random legal actions: does step set done where a game "
                f"ends? is spec.max_steps ({max_steps}) right? (it must bound every game's length)"], ""
    length = np.zeros(ctx.b, np.int64)
    ended_before = np.zeros(ctx.b, bool)
    over: dict[int, tuple[int, bool]] = {}
    lengths = []
    for t in range(steps):
        length += 1
        for i in np.flatnonzero(~done[t] & (length >= max_steps)):
            over.setdefault(int(i), (t, bool(ended_before[i])))
        lengths.extend(length[done[t]].tolist())
        ended_before |= done[t]
        length[done[t]] = 0
    problems = []
    if over:
        games = sorted(over)[:MAX_LISTED]
        after = [i for i in over if over[i][1]]
        first = over[games[0]][0]
        problems.append(
            f"{len(over)} of {ctx.b} games ran spec.max_steps ({max_steps}) steps without done (games {games}, "
            f"the first at step {first + 1})" + (
                f"; {len(after)} of them in a game started after an earlier one ended: does step auto-reset "
                "(where done, a fresh game's state)?" if after else
                ": set done at the game's last step, and make spec.max_steps the longest game in steps"))
    detail = (f"{len(lengths)} games ended, {min(lengths)}-{max(lengths)} steps long, "
              f"spec.max_steps {max_steps}")
    return problems, detail


@_of_the_outputs
def check_auto_reset(ctx: Context):
    if ctx.play_error is not None:
        raise _Skip("step failed during play")
    done = ctx.done_array()
    if not done.any():
        raise _Skip("no game ended")
    problems, notes = [], []
    # 1. done does not stick
    if int(ctx.spec.max_steps) > 1:
        stuck, decided = [], 0
        for i in range(ctx.b):
            ends = np.flatnonzero(done[:, i])
            if not len(ends) or ends[0] == 0:
                continue   # never ended, or its first game lasted one step
            rest = done[ends[0] + 1:, i]
            if len(rest) < STICKY_STEPS:
                continue
            decided += 1
            if rest.all():
                stuck.append((i, int(ends[0]) + 1, len(rest)))
        if stuck:
            i, first, k = stuck[0]
            problems.append(
                f"step does not auto-reset: after its first game ended (after {first} steps), game {i} returned "
                f"done at every one of the next {k} steps ({len(stuck)} of {ctx.b} games did so): where done, "
                "step must return a fresh game's state and observations, e.g. "
                "state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, next_state)")
        notes.append(f"done does not stick in {decided} games" if decided
                     else f"done-sticking undecided (fewer than {STICKY_STEPS} steps after a first game ended)")
    else:
        notes.append("spec.max_steps 1: done on every step")
    # 2. observations where done are a fresh game's
    if not ctx.obs_ok:
        notes.append("fresh-observation test skipped: observations do not match the spec")
    else:
        try:
            problem, note = _fresh_observations(ctx, done)
        except Exception as e:
            problem, note = f"the fresh-observation test could not run: {_error(e, 'comparing')}", ""
        if problem:
            problems.append(problem)
        notes.append(note)
    return problems, "; ".join(notes)


def _fields(spec: GameSpec, i: int):
    side = spec.sides[i]
    out = [(name, lambda o, n=name: o[n]) for name in side.observation.fields]
    out += [(f"{MASK_KEY}[{h!r}]", lambda o, h=h: o[MASK_KEY][h]) for h in side.action.heads]
    return out


def _fresh_observations(ctx: Context, done):
    rounds = max(1, min(64, math.ceil(RESET_SAMPLES / ctx.b)))
    try:
        samples = [ctx.reset_obs, *ctx.driver.reset_samples(rounds)]
    except _Problem as e:
        return f"resets on other keys failed: {e}", ""
    except Exception as e:
        return _error(e, f"{ctx.driver.reset_call} on other keys"), ""
    n_samples = len(samples) * ctx.b
    worst = None
    counted = 0
    for i in range(2):
        fields = _fields(ctx.spec, i)
        constant = {}
        for name, get in fields:
            stack = np.concatenate([np.asarray(get(pair[i])) for pair in samples])
            same = np.all(stack == stack[:1], axis=0)
            if same.any():
                constant[name] = (same, stack[0])
        stale = np.zeros(done.shape, bool)      # [T, B]
        by_field = {}
        for name, get in fields:
            if name not in constant:
                continue
            same, value = constant[name]
            obs = np.stack([np.asarray(get(s.obs[i])) for s in ctx.trajectory])   # [T, B, ...]
            differs = (obs != value) & same
            differs = differs.reshape(differs.shape[:2] + (-1,)).any(axis=-1) & done
            by_field[name] = int(differs.sum())
            stale |= differs
        n_done, n_stale = int(done.sum()), int(stale.sum())
        counted = n_done
        if n_done >= 4 and n_stale * 2 > n_done:
            field = max(by_field, key=by_field.get)
            t, g = (int(x) for x in np.argwhere(stale)[0])
            worst = worst or (
                f"step does not auto-reset its observations: where done they must be the first observation "
                f"of the next game, but {n_stale} of side {i}'s {n_done} observations where done differ from "
                f"what all {n_samples} reset observations agree on (most often in field {field!r}; first: "
                f"step {t + 1}, game {g}): return observe(state) of the fresh state where done, not the "
                "ended game's")
    return worst, (f"observations where done match the {n_samples} reset observations' constant elements "
                   f"({counted} done)")


def _replay(ctx: Context, driver, limit: int | None):
    """(where, name, ours, theirs) over the reset and the recorded steps (the first `limit`)."""
    yield "reset", "observations", ctx.reset_obs, driver.reset()
    for t, (actions, s) in enumerate(zip(ctx.actions, ctx.trajectory)):
        if limit is not None and t >= limit:
            return
        o = driver.step(actions)
        where = f"step {t + 1}"
        for name in ("obs", "rewards", "done", "outcome", "signals"):
            yield where, "observations" if name == "obs" else name, getattr(s, name), getattr(o, name)


def _compare(ctx: Context, driver, rtol: float, atol: float, what: str, limit: int | None = None):
    """The first difference between the recorded run and `driver`'s replay, as a sentence."""
    import jax

    for where, name, ours, theirs in _replay(ctx, driver, limit):
        ours_leaves, ours_tree = jax.tree.flatten_with_path(ours)
        theirs_leaves, theirs_tree = jax.tree.flatten_with_path(theirs)
        if ours_tree != theirs_tree:
            return f"{what} at {where}: {name} have a different structure ({theirs_tree} vs {ours_tree})"
        for (path, a), (_, b) in zip(ours_leaves, theirs_leaves):
            a, b = np.asarray(a), np.asarray(b)
            label = name + jax.tree_util.keystr(path)
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"{what} at {where}: {label} is {b.dtype}{b.shape}, was {a.dtype}{a.shape}"
            if np.issubdtype(a.dtype, np.inexact):
                same = np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
            else:
                same = np.array_equal(a, b)
            if not same:
                bad = np.argwhere(~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
                                  if np.issubdtype(a.dtype, np.inexact) else a != b)
                game = f" (game {int(bad[0][0])})" if len(bad) and a.ndim else ""
                return f"{what} at {where}: {label} differs{game}"
    return None


@_of_the_outputs
def check_determinism(ctx: Context):
    if ctx.fns is not None:
        try:
            fns2 = ctx.game.functions()
        except Exception as e:
            return [_error(e, "a second game.functions()")], ""
        driver = _FunctionsDriver(fns2, ctx.b, ctx.seed, ctx.races)
        how = "a second game.functions(), jitted anew"
    else:
        driver = _BatchDriver(ctx.game, ctx.b, ctx.seed)
        how = "a second game.make_batch(B)"
    diff = _compare(ctx, driver, 1e-6, 1e-6, "the same keys and actions gave a different trajectory")
    if diff:
        return [diff + ": the game must depend only on its key and the actions (no Python state or "
                "randomness outside jax.random on the state's key, no values fixed when it is traced)"], ""
    return [], f"{how}: the same {len(ctx.trajectory)} steps from the same keys and actions"


@_of_the_outputs
def check_jit_matches_vmap(ctx: Context):
    if not ctx.trajectory:
        raise _Skip("no steps played")
    driver = _FunctionsDriver(ctx.fns, ctx.b, ctx.seed, ctx.races, jit=False)
    diff = _compare(ctx, driver, 1e-4, 1e-5, "jax.vmap (not jitted) and jax.jit(jax.vmap) disagree", JIT_STEPS)
    if diff:
        return [diff + ": the functions must be pure (no Python control flow on values, no Python state) so "
                "that tracing under jit computes what eager execution does"], ""
    return [], f"{CHECKS['jit matches vmap']}: reset and {min(JIT_STEPS, len(ctx.trajectory))} steps"


# -- the registries: the checks in order, for a game with functions and for a batch-only game ------

_OF_THE_PLAY = [
    ("observations", check_observations),
    ("masks", check_masks),
    ("step outputs", check_step_outputs),
    ("zero-sum", check_zero_sum),
    ("outcome", check_outcome),
    ("episodes end", check_episodes_end),
    ("auto-reset", check_auto_reset),
    ("determinism", check_determinism),
]
FUNCTIONS_CHECKS: list[tuple[str, Callable[[Context], tuple[list[str], str]]]] = [
    ("functions", check_functions),
    ("spec", check_spec),
    ("config", check_config),
    ("reset", check_reset),
    ("step", check_step),
    *_OF_THE_PLAY,
    ("jit matches vmap", check_jit_matches_vmap),
]
BATCH_CHECKS: list[tuple[str, Callable[[Context], tuple[list[str], str]]]] = [
    ("make", check_make),
    ("spec", check_spec),
    ("reset", check_reset),
    ("step", check_step),
    *_OF_THE_PLAY,
]
# reported skipped for a batch-only game, after its checks
DEVICE_ONLY = ("config", "jit matches vmap")
NO_FUNCTIONS = ("game.functions is None: the device path (jax.jit of the vmapped reset and step) needs the "
                "game's GameFunctions (actors/games/base.py, docs/games.md)")


def _run(ctx: Context, checks) -> None:
    """Each check in turn, its result added; after a _Stop, the rest skipped (but its still_run)."""
    stop = None
    for name, check in checks:
        if stop is not None and name not in stop.still_run:
            ctx.add(name, skipped=stop.why)
            continue
        try:
            problems, detail = check(ctx)
        except _Skip as e:
            ctx.add(name, skipped=str(e))
            continue
        except _Problem as e:
            problems, detail = [str(e)], ""
        except _Stop as e:
            stop = e
            problems, detail = e.problems, e.detail
        ctx.add(name, problems, detail=detail)


# -- the interface ---------------------------------------------------------------------------------


def _as_game(game) -> Game:
    if isinstance(game, Game):
        return game
    spec = getattr(game, "spec", None)
    return Game(getattr(spec, "name", None) or type(game).__name__, functions=lambda: game)


def run_checks(game, batch_size: int = 16, steps: int = 300, seed: int = 0,
               report: Callable[[Check], None] | None = None) -> list[Check]:
    """Every check (module docstring) on `game` (a `Game`, or a `GameFunctions` object), in order;
    `report(check)` is called as each one finishes. Never raises on a broken game."""
    if batch_size < 1 or steps < 1:
        raise ValueError(f"batch_size and steps must be >= 1, got {batch_size} and {steps}")
    ctx = Context(_as_game(game), int(batch_size), int(steps), int(seed), report)
    try:
        if ctx.game.functions is not None:
            _run(ctx, FUNCTIONS_CHECKS)
        else:
            _run(ctx, BATCH_CHECKS)
            for name in DEVICE_ONLY:
                ctx.add(name, skipped=NO_FUNCTIONS)
    except Exception as e:   # a game odd enough to trip the checks themselves: still a report
        ctx.add("checker", [f"the checks stopped: {_error(e, 'the checker')}; the game is too far from "
                            "the protocol to check further (actors/games/base.py, GameFunctions)"])
    return ctx.results


def check_game(game, batch_size: int = 16, steps: int = 300, seed: int = 0) -> list[str]:
    """The problems of `game` against the protocol (module docstring); [] when it passes."""
    return [p for c in run_checks(game, batch_size, steps, seed) for p in c.problems]


def format_check(check: Check) -> str:
    """One check as lines: `ok`, `skipped` or `PROBLEM`, its name and what it found."""
    if check.status == "ok":
        return f"  ok        {check.name}: {check.detail or CHECKS.get(check.name, '')}"
    if check.status == "skipped":
        return f"  skipped   {check.name}: {check.skipped}"
    return "\n".join(f"  PROBLEM   {p}" for p in check.problems)


def format_report(name: str, checks: list[Check]) -> str:
    """Every check, then the verdict line (`... passes the protocol (N checks)` or `K problems`)."""
    lines = [format_check(c) for c in checks]
    lines.append(summary(name, checks))
    return "\n".join(lines)


def summary(name: str, checks: list[Check]) -> str:
    ran = sum(c.status != "skipped" for c in checks)
    problems = sum(len(c.problems) for c in checks)
    if problems:
        return f"check_game: {name}: {problems} problem{'s' if problems != 1 else ''}"
    return f"check_game: {name} passes the protocol ({ran} checks)"
