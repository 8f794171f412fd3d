"""Watch a game (issue 85, item 5): one game between two players, played from a seed by the
project's one rollout and drawn frame by frame by the game's own drawing.

    watched = watch("runs/x", "any_main_agent_0", "any_main_agent_0#3", seed=0)
    watched.frames      # SVG documents: the game's positions, step by step, and its end
    watched.outcome     # +1 / 0 / -1 from home's side (side 0)

The dashboard's watch page (`dashboard/server.py`, `/watch?home=..&away=..&seed=..`) calls
`watch` when a payoff-matrix cell is clicked; `watch_agents` takes any two agents of
`experiments.agent_ref` (RUN_DIR:PLAYER_ID, an exported file, RUN_DIR:result).

- Home plays side 0, away side 1, each with its own network and parameters, in their races
  where the game has races (the players' races as league.db lists them). A mixture (a run's
  Nash mixture) plays one member, drawn from its weights with the seed, as the league plays a
  mixture.
- The game is played by `actors.rollout.play_step` (the one rollout's step: both sides act,
  the game steps) on a batch of one game, jitted once per game and pair of networks and called
  step by step until the game ends, so that each step's state is kept: the game's state before
  the step (unbatched, numpy) and both sides' actions. Actions are sampled, as in the league's
  games (`greedy`: the most likely).
- The frames come from the game's `Capabilities.draw` (docs/games.md): `draw().frames(
  functions, states, actions, outcome)`. This module names no game: a game that is not drawn
  stops with `NotDrawn` ("... is not drawn: its Capabilities has no draw"), before anything is
  played.

Errors a person can fix are ValueErrors with the reason (`agent_ref.AgentNameError` for a
player the run does not have, `NotDrawn`, `WatchError`); the dashboard answers them with 404.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from experiments import agent_ref


class WatchError(ValueError):
    """A game that cannot be watched here (no JAX step, players of different games, a race
    that cannot be told); the message says why."""


class NotDrawn(WatchError):
    """A game whose `Capabilities` has no `draw`."""


@dataclasses.dataclass
class Watched:
    """One watched game: who played it, how it went, and its frames."""

    game: str
    home: str                 # side 0's and side 1's labels: player ids, or the agents' names
    away: str
    seed: int
    races: tuple[str, str] | None
    outcome: int              # +1 home won / 0 draw / -1 home lost (side 0's view); 0 if it did not end
    score: float              # the game's own payoff to home (+1 for a win, or chips)
    steps: int
    ended: bool               # False: stopped at the game's max_steps without ending
    frames: list[str]         # SVG documents, from the game's draw
    seconds: float            # wall time to load, play and draw

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def watch(run_dir: str, home: str, away: str, seed: int = 0, greedy: bool = False,
          progress: Callable[[str], None] | None = None) -> Watched:
    """One game of players `home` (side 0) and `away` (side 1) of the run in `run_dir`
    (player ids as league.db lists them), played from `seed`, drawn."""
    agents = [agent_ref.resolve(f"{run_dir}:{player}") for player in (home, away)]
    return watch_agents(agents[0], agents[1], seed, greedy, progress, labels=(home, away))


def drawing(game_info):
    """The game's draw module (`Capabilities.draw()`); NotDrawn if the game has none."""
    if game_info.capabilities.draw is None:
        raise NotDrawn(f"{game_info.name} is not drawn: its Capabilities has no draw "
                       "(docs/games.md, 'Capabilities: what a game unlocks')")
    return game_info.capabilities.draw()


def watch_agents(home, away, seed: int = 0, greedy: bool = False,
                 progress: Callable[[str], None] | None = None, labels: tuple[str, str] | None = None) -> Watched:
    """One game of `home` (side 0) against `away` (side 1), `experiments.agent_ref.Agent`s of
    one game, played from `seed` and drawn by the game's draw module; `labels`: what the result
    calls them (default: their names)."""
    from actors.games.base import UnknownGame
    from actors.games.registry import resolve

    say = progress or (lambda text: None)
    start = time.perf_counter()
    if home.game != away.game:
        raise WatchError(f"{home.name} plays {home.game} and {away.name} plays {away.game}: a game needs "
                         "two players of one game")
    try:
        game_info = resolve(home.game)
    except UnknownGame as e:
        raise WatchError(str(e)) from None
    draw = drawing(game_info)
    if game_info.functions is None:
        raise WatchError(f"{game_info.name} has no JAX step (a pool of Python games): watching plays one "
                         "game with its reset and step (actors/games/base.py, GameFunctions)")
    fns = game_info.functions()
    races = _races(game_info, home, away)
    rng = np.random.default_rng(seed)
    params = [_member_params(agent, rng) for agent in (home, away)]
    say("compiling the game's step for these players (once per game and networks; tens of seconds "
        "on a CPU for a large game)")
    states, actions, result = play_one_game(fns, (home.network, away.network), params, seed, races,
                                            greedy, say)
    say(f"drawing {len(states)} steps")
    frames = list(draw.frames(fns, states, actions, result["outcome"]))
    if not frames or not all(isinstance(f, str) for f in frames):
        raise RuntimeError(f"{game_info.name}'s draw.frames returned {type(frames).__name__} of "
                           f"{len(frames)} frames; it must return SVG documents (str), one or more")
    labels = labels or (home.name, away.name)
    return Watched(game=game_info.name, home=labels[0], away=labels[1], seed=int(seed),
                   races=None if races is None else tuple(races[1]), outcome=result["outcome"],
                   score=result["score"], steps=len(states), ended=result["ended"], frames=frames,
                   seconds=round(time.perf_counter() - start, 3))


def _races(game_info, home, away):
    """None for a game without races; else (race indices [2], race names (home's, away's))."""
    names = game_info.capabilities.races
    if not names:
        return None
    picked = []
    for agent in (home, away):
        race = (agent.source or {}).get("race")
        if race not in names:
            raise WatchError(f"{agent.name}: cannot tell its race ({race!r}; the game's races: "
                             f"{', '.join(names)})")
        picked.append(race)
    return np.asarray([names.index(r) for r in picked], np.int32), picked


def _member_params(agent, rng: np.random.Generator):
    """The parameters that play: the agent's, or one member of a mixture drawn by its weight."""
    if agent.weights is None:
        return agent.params
    return agent.params[int(rng.choice(len(agent.params), p=np.asarray(agent.weights)))]


_STEPS: dict = {}   # (game config, both networks' keys, greedy) -> the jitted step of one game


def _step_program(fns, networks, greedy: bool):
    """The jitted step of a batch of one game: (params0, params1, games, key) -> (games,
    `Played`), `actors.rollout.play_step` with both networks acting; cached by what it computes."""
    import jax

    from actors.rollout import network_policy, play_step
    from agents import network_key

    key = (fns.config, network_key(networks[0]), network_key(networks[1]), greedy)
    if key not in _STEPS:
        def step(params0, params1, games, rng):
            return play_step(fns.step, network_policy(networks[0], params0, greedy),
                             network_policy(networks[1], params1, greedy), games, rng)

        _STEPS[key] = jax.jit(step)
    return _STEPS[key]


def play_one_game(fns, networks, params, seed: int, races=None, greedy: bool = False,
                  say: Callable[[str], None] = lambda text: None):
    """One game of `networks[0]` (side 0, `params[0]`) against `networks[1]`, from `seed`:
    (states, actions, result). `states[t]` is the game's state before step t (one game, numpy),
    `actions[t]` both sides' actions at it ({head: value} each), `result` the game's outcome
    (side 0's view), its payoff to side 0 and whether it ended within `spec.max_steps` + 1."""
    import jax

    from actors.rollout import Games

    reset_key, play_key = jax.random.split(jax.random.PRNGKey(seed))
    if races is None:
        game_state, obs = jax.vmap(fns.reset)(reset_key[None])
    else:
        game_state, obs = jax.vmap(fns.reset)(reset_key[None], jax.numpy.asarray(races[0])[None])
    games = Games.start(game_state, obs, networks[0].initial_state(1), networks[1].initial_state(1), 1)
    step = _step_program(fns, networks, greedy)
    params = [jax.device_put(p) for p in params]

    def one(tree):
        return jax.tree_util.tree_map(lambda x: np.asarray(x)[0], tree)

    states, actions = [], []
    result = {"outcome": 0, "score": 0.0, "ended": False}
    for t, key in enumerate(jax.random.split(play_key, int(fns.spec.max_steps) + 1)):
        before = games.game_state
        games, played = step(params[0], params[1], games, key)
        states.append(one(before))
        actions.append((one(played.action.game), one(played.opponent_action.game)))
        if t == 0:
            say("playing")
        if bool(np.asarray(played.done)[0]):
            result = {"outcome": int(np.asarray(played.outcome)[0]),
                      "score": float(np.asarray(played.score)[0]), "ended": True}
            break
    return states, actions, result
