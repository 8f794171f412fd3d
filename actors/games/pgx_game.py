"""Any two-player pgx game (https://github.com/sotetsuk/pgx, pinned at 2.6.0) as a game of the
functional protocol (`GameFunctions`, actors/games/base.py): `--game=pgx/<env_id>`, or an
instance a factory returns (`--game=package.module:factory` with `factory()` returning
`pgx.make("tic_tac_toe")` or any two-player `pgx.Env`; `adapt(env, name)`, named by its path).

Sides are pgx's player ids: side i is player i. pgx draws who moves first in `env.init`, so
either side may open. Each side observes
    observation  float32, pgx's observation of the game from player i's view, in pgx's own
                 shape (tic_tac_toe (3, 3, 2), connect_four (6, 7, 2), chess (8, 8, 119), ...;
                 pgx's bool or int arrays cast to float32)
    acting       bool, whether it is player i's move
and the legal moves of its one action head "action" (pgx's `legal_action_mask` where acting,
else one-hot at 0). The move played is the acting side's; the other side's is ignored. An
illegal move is pgx's rule: the mover loses at once (rewards -1 / +1).

Rewards are pgx's (indexed by player id, so by side) on the step a game ends, zero before; the
outcome is the sign of side 0's. A game that pgx truncates, or that reaches `spec.max_steps`
moves (a bound per game: each known game's longest possible game; 1000 moves for the others,
backgammon among them, where random play ends within ~600), ends as a draw with zero rewards
unless pgx ends it on that very move (Go's score after 162 moves counts), so `max_steps` truly
bounds an episode (the league scans at most that many steps to finish one, e.g. when a
game's supervised start records games).
Finished games restart at once from the key held in the state, which also feeds pgx's chance
(backgammon's dice).
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pgx

from actors.games import fingerprint
from actors.games.base import Capabilities, Game, UnknownGame
from agents.specs import (
    MASK_KEY,
    ActionSpec,
    ArraySpec,
    DiscreteHead,
    GameSpec,
    ObservationSpec,
    SideSpec,
)

ACTION_HEAD = "action"

# The longest game of each known env, in moves (pgx steps); a game that gets there ends as a
# draw. Each is the game's own bound, so no real game is cut short:
MAX_STEPS = {
    "tic_tac_toe": 9,      # nine cells
    "connect_four": 42,    # 6 x 7 cells
    "hex": 122,            # 11 x 11 cells, plus the one swap move
    # 60 placements fill the board; a pass (action 64) never follows a pass without ending the
    # game, so at most one precedes each placement, and a game ending before the board fills
    # ends on two passes: 60 + 60 (or k + k + 2 with k <= 59)
    "othello": 120,
    "go_9x9": 162,         # pgx ends Go after size * size * 2 moves
    "go_19x19": 722,
    "chess": 512,          # pgx ends chess and shogi after 512 moves (AlphaZero's rule)
    "shogi": 512,
    "animal_shogi": 256,   # and these after 256
    "gardner_chess": 256,
    "kuhn_poker": 3,       # pass, bet, call/fold
    "leduc_holdem": 8,     # two rounds of check/bet, raise, re-raise, call
}
DEFAULT_MAX_STEPS = 1000  # backgammon (random play ends within ~600 moves) and games added later

# Player counts of pgx 2.6's environments: building an env to ask it takes up to 3 s (shogi's
# tables), 13 s for all of them, too long for an error message. An env not listed is built.
_PLAYERS = {
    "2048": 1, "animal_shogi": 2, "backgammon": 2, "chess": 2, "connect_four": 2,
    "gardner_chess": 2, "go_9x9": 2, "go_19x19": 2, "hex": 2, "kuhn_poker": 2, "leduc_holdem": 2,
    "minatar-asterix": 1, "minatar-breakout": 1, "minatar-freeway": 1, "minatar-seaquest": 1,
    "minatar-space_invaders": 1, "othello": 2, "shogi": 2, "sparrow_mahjong": 3, "tic_tac_toe": 2,
}


@functools.cache
def num_players(env_id: str) -> int | None:
    """How many players pgx's `env_id` has (None: pgx cannot build it here)."""
    if env_id in _PLAYERS:
        return _PLAYERS[env_id]
    try:
        return int(pgx.make(env_id).num_players)
    except Exception:  # e.g. an env that needs an optional package or a data file
        return None


@functools.lru_cache(maxsize=1)
def two_player_envs() -> tuple[str, ...]:
    """pgx's available env ids of two-player games."""
    return tuple(e for e in pgx.available_envs() if num_players(e) == 2)


class PgxState(NamedTuple):
    game: Any         # pgx.State of the game being played
    key: jax.Array    # raw PRNG key: pgx's chance and the next game's start
    steps: jax.Array  # int32: moves played in this game (truncates at spec.max_steps)


def _observe(env: pgx.Env, state, player):
    """pgx's observation of `state` from `player`'s view. pgx 2.6 deprecates naming the player
    (it plans to observe for the player to move only), but the side not to move needs its own
    view (its own card in poker); the warning is raised while tracing, so silenced here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return env.observe(state, player)


class PgxFunctions:
    """Pure, jittable reset/step of ONE game of pgx's `env_id`, or of the pgx.Env instance
    `env_id` (spec named `name`, else `pgx/<its id>`; module docstring)."""

    def __init__(self, env_id: str | pgx.Env, max_steps: int | None = None, name: str | None = None):
        given = not isinstance(env_id, str)
        self.env = env_id if given else pgx.make(env_id)
        self.env_id = env_id = str(self.env.id) if given else env_id
        if self.env.num_players != 2:
            raise ValueError(f"pgx env {env_id!r} has {self.env.num_players} players, not 2")
        default = MAX_STEPS.get(env_id, DEFAULT_MAX_STEPS)
        self.max_steps = int(max_steps or default)
        # Equal configs share compiled programs (functional.compiled); a bound of its own is
        # another program, and an instance given is named by its class and settings.
        self.config = ("pgx", env_id) if self.max_steps == default else ("pgx", env_id, self.max_steps)
        if given:
            self.config = (*self.config, type(self.env).__module__, type(self.env).__qualname__,
                           fingerprint(self.env))
        self.num_actions = int(self.env.num_actions)
        fields = {"observation": ArraySpec(self.env.observation_shape, np.float32),
                  "acting": ArraySpec((), np.bool_)}
        side = SideSpec(ObservationSpec(fields), ActionSpec({ACTION_HEAD: DiscreteHead(self.num_actions)}))
        self.spec = GameSpec(name or f"pgx/{env_id}", (side, side), self.max_steps,
                             {"payoff": ArraySpec((2,), np.float32)})

    def observe(self, s):
        """Both sides' observations of the pgx state `s` (not terminal)."""
        player = s.current_player
        # pgx keeps the mover's view in s.observation; only the other player's is computed.
        mover_view = s.observation.astype(jnp.float32)
        other_view = _observe(self.env, s, 1 - player).astype(jnp.float32)
        not_acting = jnp.arange(self.num_actions) == 0
        out = []
        for side in range(2):
            acting = player == side
            out.append({"observation": jnp.where(acting, mover_view, other_view), "acting": acting,
                        MASK_KEY: {ACTION_HEAD: jnp.where(acting, s.legal_action_mask, not_acting)}})
        return tuple(out)

    def reset(self, key):
        key, init_key = jax.random.split(key)
        s = self.env.init(init_key)
        return PgxState(s, key, jnp.zeros((), jnp.int32)), self.observe(s)

    def move(self, state: PgxState, actions):
        """(the pgx state after the acting side's move, before any reset; the keys left: the
        next state's, the next game's)."""
        s = state.game
        move = jnp.where(s.current_player == 0, actions[0][ACTION_HEAD], actions[1][ACTION_HEAD])
        move = jnp.clip(move, 0, self.num_actions - 1).astype(jnp.int32)
        key, step_key, init_key = jax.random.split(state.key, 3)
        return self.env.step(s, move, step_key), key, init_key

    def step(self, state: PgxState, actions):
        """One move of one game, auto-resetting; returns (state, obs pair, rewards[2], done,
        outcome, signals)."""
        s, key, init_key = self.move(state, actions)
        steps = state.steps + 1
        done = s.terminated | s.truncated | (steps >= self.max_steps)
        # A truncated game is a draw: only a terminated one pays.
        rewards = jnp.where(s.terminated, s.rewards, 0.0).astype(jnp.float32)
        outcome = jnp.sign(rewards[0]).astype(jnp.int8)
        fresh = self.env.init(init_key)
        s = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, s)
        new = PgxState(s, key, jnp.where(done, 0, steps).astype(jnp.int32))
        return new, self.observe(s), rewards, done, outcome, {"payoff": rewards}


class PgxText:
    """A pgx game drawn as text for a person playing side `side` (`Capabilities.text`): a board
    of cells from the first two planes of the side's own observation (its stones X, the
    opponent's O: tic_tac_toe, connect_four, othello, hex), its moves by cell or column; pgx
    draws the others as SVG only (their moves are named by index)."""

    def __init__(self, fns: PgxFunctions):
        self.fns = fns
        shape = tuple(fns.env.observation_shape)
        self.board = shape[:2] if len(shape) == 3 and shape[2] in (2, 4) else None

    def draw(self, pgx_state, side: int) -> str:
        if self.board is None:
            return f"{self.fns.env_id}: pgx draws this game as SVG only (its observation {self.fns.env.observation_shape})"
        planes = np.asarray(_observe(self.fns.env, pgx_state, side))
        rows, cols = self.board
        lines = [f"{self.fns.env_id}: X you, O opponent", "     " + " ".join(f"{c + 1:>2}" for c in range(cols))]
        for r in range(rows):
            cells = ["X" if planes[r, c, 0] else "O" if planes[r, c, 1] else "." for c in range(cols)]
            lines.append(f"  {r + 1:>2} " + " ".join(f"{x:>2}" for x in cells))
        return "\n".join(lines)

    def describe(self, state: PgxState, side: int) -> str:
        return self.draw(state.game, side)

    def action_name(self, state: PgxState, side: int, head: str, value: int) -> str:
        value = int(value)
        if self.board is not None:
            rows, cols = self.board
            if self.fns.num_actions == cols:
                return f"column {value + 1}"
            if value < rows * cols and self.fns.num_actions in (rows * cols, rows * cols + 1):
                return f"row {value // cols + 1} column {value % cols + 1}"
            if value == rows * cols:
                return "swap" if self.fns.env_id == "hex" else "pass"
        return f"action {value}"

    def end(self, state: PgxState, actions, side: int) -> str:
        after, _, _ = self.fns.move(state, jax.tree.map(jnp.asarray, actions))
        return self.draw(after, side)


def text(fns: PgxFunctions) -> PgxText:
    """`Capabilities.text` of pgx's games."""
    return PgxText(fns)


CAPTION = 28   # pixels above pgx's board for the move's caption


class PgxDraw:
    """A pgx game drawn for a person watching it (`Capabilities.draw`; the dashboard's watch
    page): pgx's own SVG of the board (`pgx.State.to_svg`) at each move, under a caption naming
    the side to move and its move (`PgxText.action_name`), and the board after the last move.
    `frames(functions, states, actions, outcome)` is the protocol of docs/games.md (`draw`)."""

    def frames(self, fns: PgxFunctions, states, actions, outcome: int) -> list[str]:
        names = PgxText(fns)
        out = []
        for t, (state, acts) in enumerate(zip(states, actions)):
            side = int(np.asarray(state.game.current_player))
            move = names.action_name(state, side, ACTION_HEAD, int(np.asarray(acts[side][ACTION_HEAD])))
            out.append(self.frame(state.game, f"move {t + 1}: side {side} plays {move}"))
        if states:
            after, _, _ = fns.move(jax.tree.map(jnp.asarray, states[-1]),
                                   jax.tree.map(jnp.asarray, actions[-1]))
            result = {1: "side 0 won", -1: "side 1 won", 0: "a draw"}[int(np.sign(outcome))]
            out.append(self.frame(jax.tree.map(np.asarray, after), f"the end after {len(states)} moves: {result}"))
        return out

    @staticmethod
    def frame(pgx_state, caption: str) -> str:
        """pgx's SVG of `pgx_state` under `caption`, as one SVG document."""
        from xml.sax.saxutils import escape

        board = pgx_state.to_svg()
        sizes = [float(re.search(rf'{k}="([0-9.]+)', board).group(1)) for k in ("width", "height")]
        width, height = max(sizes[0], 320.0), sizes[1] + CAPTION
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
                f'viewBox="0 0 {width:g} {height:g}" font-family="system-ui, sans-serif">'
                f'<rect width="{width:g}" height="{height:g}" fill="#fff"/>'
                f'<text class="caption" x="6" y="19" font-size="15">{escape(caption)}</text>'
                f'<g class="board" transform="translate(0,{CAPTION})">{board}</g></svg>')


@functools.cache
def functions(env_id: str) -> PgxFunctions:
    """The one PgxFunctions of `env_id` (building a pgx env can take seconds)."""
    return PgxFunctions(env_id)


def game(env_id: str) -> Game:
    """`pgx/<env_id>` as the league's `Game`; UnknownGame unless pgx has it with two players."""
    players = num_players(env_id) if env_id in pgx.available_envs() else None
    if players != 2:
        why = ("is not one of pgx's environments" if env_id not in pgx.available_envs()
               else f"is a {players}-player game" if players else "cannot be built here")
        raise UnknownGame(f"--game=pgx/{env_id}: {env_id!r} {why}; pgx {pgx.__version__}'s two-player "
                          f"games: {', '.join(two_player_envs())}")
    return Game(f"pgx/{env_id}", functions=lambda: functions(env_id),
                capabilities=Capabilities(turn_based=True, text=text, draw=PgxDraw))


def adapt(env: pgx.Env, name: str, max_steps: int | None = None) -> Game:
    """The `Game` of a two-player pgx.Env instance, named `name` (what `--game=package.module:factory`
    makes of a factory returning one); ValueError if it has not two players."""
    fns = PgxFunctions(env, max_steps, name)
    return Game(name, functions=lambda: fns,
                capabilities=Capabilities(turn_based=True, text=text, draw=PgxDraw))
