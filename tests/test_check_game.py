"""actors/games/check.py and `python -m experiments.check_game`: the built-in games pass, and
each kind of broken game is flagged by the check that names its fault (and by no other).

The broken games are variants of `Count`, a correct three-step toy game whose state holds its
key (a fresh game draws its starting score from it)."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from actors.games.base import Capabilities, Game
from actors.games.check import CHECKS, check_game, format_report, run_checks
from actors.games.functional import FunctionalBatchGame
from actors.games.registry import resolve
from agents.specs import (
    MASK_KEY,
    ActionSpec,
    ArraySpec,
    DiscreteHead,
    GameSpec,
    ObservationSpec,
    SideSpec,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = {"batch_size": 8, "steps": 40}   # the toy games: 13 games a slot, 2 compiles each


class Count:
    """Three steps; each adds side 0's move minus side 1's to a score that starts at -1, 0 or
    +1 (drawn from the state's key); side 0 wins where the final score is positive."""

    length = 3

    def __init__(self):
        self.config = (type(self).__name__, self.length)
        side = SideSpec(ObservationSpec({"t": ArraySpec((), np.int32), "score": ArraySpec((), np.float32),
                                         "acting": ArraySpec((), np.bool_)}),
                        ActionSpec({"move": DiscreteHead(2)}))
        self.spec = GameSpec("count", (side, side), self.length, {"score": ArraySpec((), np.float32)})

    def masks(self, s):
        return jnp.ones(2, bool), jnp.ones(2, bool)

    def observe(self, s):
        return tuple({"t": s["t"], "score": s["score"], "acting": jnp.array(True), MASK_KEY: {"move": m}}
                     for m in self.masks(s))

    def fresh(self, key):
        key, draw = jax.random.split(key)
        return {"t": jnp.zeros((), jnp.int32), "key": key,
                "score": jax.random.randint(draw, (), -1, 2).astype(jnp.float32)}

    def reset(self, key):
        s = self.fresh(key)
        return s, self.observe(s)

    def advance(self, s, actions):
        """The next state of the same game: (state, rewards, done, outcome)."""
        t = s["t"] + 1
        score = s["score"] + (actions[0]["move"] - actions[1]["move"]).astype(jnp.float32)
        done = t >= self.length
        outcome = jnp.where(done, jnp.sign(score), 0).astype(jnp.int8)
        rewards = jnp.where(done, jnp.array([1.0, -1.0]) * outcome, 0.0).astype(jnp.float32)
        return {"t": t, "score": score, "key": s["key"]}, rewards, done, outcome

    def step(self, s, actions):
        nxt, rewards, done, outcome = self.advance(s, actions)
        key, sub = jax.random.split(s["key"])
        nxt["key"] = key
        new = jax.tree.map(lambda a, b: jnp.where(done, a, b), self.fresh(sub), nxt)
        return new, self.observe(new), rewards, done, outcome, {"score": nxt["score"]}


class WrongShape(Count):
    def observe(self, s):
        obs = super().observe(s)
        return tuple({**o, "score": jnp.stack([o["score"], o["score"]])} for o in obs)


class StickyDone(Count):
    """No auto-reset: the step counter runs on, so done stays True after the first game."""

    def step(self, s, actions):
        nxt, rewards, done, outcome = self.advance(s, actions)
        return nxt, self.observe(nxt), rewards, done, outcome, {"score": nxt["score"]}


class DoneOnce(StickyDone):
    """No auto-reset, and done only at t == 3: the game never ends again."""

    def advance(self, s, actions):
        nxt, rewards, done, outcome = super().advance(s, actions)
        once = nxt["t"] == self.length
        return nxt, jnp.where(once, rewards, 0.0), once, jnp.where(once, outcome, 0).astype(jnp.int8)


class StaleObservations(Count):
    """Resets its state, but where done returns the ended game's observations."""

    def step(self, s, actions):
        new, _, rewards, done, outcome, signals = super().step(s, actions)
        nxt, *_ = self.advance(s, actions)
        return new, self.observe(nxt), rewards, done, outcome, signals


class NotZeroSum(Count):
    def step(self, s, actions):
        new, obs, rewards, done, outcome, signals = super().step(s, actions)
        return new, obs, jnp.where(done, jnp.ones(2, jnp.float32), 0.0), done, outcome, signals


class EmptyMask(Count):
    def masks(self, s):
        return jnp.ones(2, bool), jnp.full(2, s["t"] != 1)


class UnhashableConfig(Count):
    def __init__(self):
        super().__init__()
        self.config = {"length": self.length}


class StepRaises(Count):
    def step(self, s, actions):
        raise ValueError("boom: the step is broken")


class WrongDtypes(Count):
    def step(self, s, actions):
        new, obs, rewards, done, outcome, signals = super().step(s, actions)
        return new, obs, rewards, done.astype(jnp.int32), outcome.astype(jnp.int32), signals


class BadOutcome(Count):
    def step(self, s, actions):
        new, obs, rewards, done, outcome, signals = super().step(s, actions)
        return new, obs, rewards, done, jnp.full((), 2, jnp.int8), signals


class TooLong(Count):
    """Declares games of at most 2 steps; they last 3."""

    def __init__(self):
        super().__init__()
        side = self.spec.sides[0]
        self.spec = GameSpec("count", (side, side), 2, self.spec.signal_fields)


class TraceTimeRandom(Count):
    """A constant drawn when the step is traced: each compilation is a different game."""

    def step(self, s, actions):
        new, obs, rewards, done, outcome, signals = super().step(s, actions)
        bonus = float(np.random.default_rng().random())
        return new, obs, rewards, done, outcome, {"score": signals["score"] + bonus}


class TraceCounter(Count):
    """Python state read when traced: jit traces once, the unjitted vmap every call."""

    traces = 0

    def step(self, s, actions):
        self.traces += 1
        new, obs, rewards, done, outcome, signals = super().step(s, actions)
        return new, obs, rewards, done, outcome, {"score": signals["score"] + self.traces}


class Raced(Count):
    """Two kinds of side; reset(key, races) starts the score at races[0] - races[1]."""

    def reset(self, key, races):
        s = self.fresh(key)
        s["score"] = (races[0] - races[1]).astype(jnp.float32)
        return s, self.observe(s)


def game(cls, **capabilities) -> Game:
    return Game(cls.__name__, functions=cls, capabilities=Capabilities(**capabilities))


def failing(checks) -> dict[str, list[str]]:
    return {c.name: c.problems for c in checks if c.problems}


def only(cls, check: str, *words: str, **capabilities) -> str:
    """Runs the checks on `cls`; asserts that `check` alone fails and its problems hold `words`."""
    checks = run_checks(game(cls, **capabilities), **FAST)
    fails = failing(checks)
    assert set(fails) == {check}, format_report(cls.__name__, checks)
    text = " ".join(fails[check])
    for word in words:
        assert word in text, text
    return text


# -- games that pass -----------------------------------------------------------------------------


def test_toy_game_passes_every_check():
    checks = run_checks(game(Count), **FAST)
    assert [c.name for c in checks] == [n for n in CHECKS if n != "make"]
    assert all(c.status == "ok" for c in checks), format_report("Count", checks)
    assert format_report("count", checks).splitlines()[-1] == "check_game: count passes the protocol (14 checks)"


def test_raced_game_passes_and_races_are_required():
    assert check_game(game(Raced, races=("a", "b")), **FAST) == []
    text = only(Count, "reset", "reset", "races", races=("a", "b"))   # reset(key) given (key, races)
    assert "TypeError" in text


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker", "matrix_rps"])
def test_builtin_games_pass(name):
    checks = run_checks(resolve(name), batch_size=16, steps=120)
    assert failing(checks) == {}, format_report(name, checks)
    assert all(c.status == "ok" for c in checks), format_report(name, checks)


def test_batch_only_game_checks_the_batch_protocol():
    ok = Game("batch_count", make_batch=lambda b: FunctionalBatchGame(Count(), b))
    checks = run_checks(ok, **FAST)
    assert failing(checks) == {}, format_report("batch_count", checks)
    skipped = {c.name: c.skipped for c in checks if c.status == "skipped"}
    assert set(skipped) == {"config", "jit matches vmap"} and "device path" in skipped["config"]
    broken = Game("batch_not_zero_sum", make_batch=lambda b: FunctionalBatchGame(NotZeroSum(), b))
    assert set(failing(run_checks(broken, **FAST))) == {"zero-sum"}


@pytest.mark.long
def test_smax_races_passes():
    checks = run_checks(resolve("smax_races"), batch_size=8, steps=300)
    assert failing(checks) == {}, format_report("smax_races", checks)


# -- broken games, each flagged by its check -------------------------------------------------------


def test_wrong_observation_shape_names_the_field():
    text = only(WrongShape, "observations", "'score'", "(2,)", "side 0", "side 1")
    assert "at reset" in text


def test_done_that_sticks_is_not_an_auto_reset():
    text = only(StickyDone, "auto-reset", "does not auto-reset", "done at every one of the next")
    assert "fresh game" in text


def test_observations_of_the_ended_game_are_not_an_auto_reset():
    text = only(StaleObservations, "auto-reset", "observations", "'t'")
    assert "done at every one" not in text


def test_a_game_that_never_ends_again_is_flagged():
    checks = run_checks(game(DoneOnce), **FAST)
    fails = failing(checks)
    assert set(fails) == {"episodes end", "auto-reset"}, format_report("DoneOnce", checks)
    assert "auto-reset" in fails["episodes end"][0] and "spec.max_steps (3)" in fails["episodes end"][0]


def test_rewards_that_are_not_zero_sum():
    only(NotZeroSum, "zero-sum", "not zero-sum", "[1.0, 1.0]")


def test_a_mask_row_without_legal_values():
    only(EmptyMask, "masks", "side 1", "'move'", "no legal value")


def test_unhashable_config():
    only(UnhashableConfig, "config", "not hashable", "dict")


def test_a_step_that_raises_is_reported_not_raised():
    checks = run_checks(game(StepRaises), **FAST)
    fails = failing(checks)
    assert set(fails) == {"step"}, format_report("StepRaises", checks)
    assert "jax.jit(jax.vmap(step))" in fails["step"][0] and "ValueError: boom" in fails["step"][0]
    assert "test_check_game.py" in fails["step"][0]   # the game's line that raised
    assert {c.name for c in checks if c.status == "ok"} >= {"reset", "observations", "masks"}
    # a factory that raises, and an object that is not a GameFunctions, are reported too
    assert "boom" in check_game(Game("x", functions=lambda: StepRaises().step(None, None)))[0]
    assert "an object without ['spec', 'config', 'reset', 'step']" in check_game(Game("x", functions=object))[0]


def test_wrong_output_dtypes():
    only(WrongDtypes, "step outputs", "done has dtype int32", "outcome has dtype int32")


def test_outcome_outside_win_draw_loss_and_before_done():
    only(BadOutcome, "outcome", "[2]", "nonzero where done is False")


def test_games_longer_than_max_steps():
    only(TooLong, "episodes end", "spec.max_steps (2)", "without done")


def test_trace_time_randomness_is_not_deterministic():
    checks = run_checks(game(TraceTimeRandom), **FAST)
    fails = failing(checks)
    assert set(fails) == {"determinism", "jit matches vmap"}, format_report("TraceTimeRandom", checks)
    assert "signals['score']" in fails["determinism"][0]


def test_python_state_breaks_jit_against_vmap():
    only(TraceCounter, "jit matches vmap", "disagree", "signals['score']")


def test_a_spec_that_is_not_a_game_spec():
    class NoSpec(Count):
        def __init__(self):
            super().__init__()
            self.spec = {"sides": 2}

    checks = run_checks(game(NoSpec), **FAST)
    assert set(failing(checks)) == {"spec"}
    assert all(c.status == "skipped" for c in checks[2:])


# -- the command -----------------------------------------------------------------------------------


def command(*args):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "experiments.check_game", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_command_unknown_game_exits_2():
    out = command("--game=no_such_game")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: ") and "unknown game" in out.stderr


def test_command_passes_a_builtin_game():
    out = command("--game=matrix_rps")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == "check_game: matrix_rps passes the protocol (14 checks)"
    assert sum(line.startswith("  ok ") for line in lines) == 14


def not_zero_sum():
    """A factory for the command's test: `--game=tests.test_check_game:not_zero_sum`."""
    return NotZeroSum()


def test_command_reports_problems_and_exits_1():
    out = command("--game=tests.test_check_game:not_zero_sum", "--batch_size=4", "--steps=30")
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == "check_game: tests.test_check_game:not_zero_sum: 1 problem"
    assert any(line.startswith("  PROBLEM   zero-sum: rewards are not zero-sum") for line in lines)
