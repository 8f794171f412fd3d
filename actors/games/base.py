"""The two-sided zero-sum batch protocol that actors and evaluators drive.

A game holds a batch of B independent games. Both sides act every step (a side that is not to
move -- the other poker player -- has its action ignored; see `agents.specs`).

    game.spec                      -> GameSpec (per-side observation and action specs)
    game.batch_size                -> B
    game.reset(seed)               -> TimeStep   start B fresh games
    game.step((actions0, actions1))-> TimeStep   actions_i: dict head -> array [B, *head.shape]

`TimeStep` fields, all with leading axis [B]:
    observations: (obs0, obs1), dicts name -> array, the legal-action masks under
                  obs["action_mask"][head] (agents/specs.py)
    rewards:      [B, 2] float32, per side, the game's own zero-sum payoff on the final step
                  (rewards[:, 1] == -rewards[:, 0]): +1 / 0 / -1 for SMAX and matrix games'
                  outcomes, chips for poker; actors/rewards.py turns steps into training rewards
    done:         [B] bool, the game ended at this step
    outcome:      [B] int8, +1 win / 0 draw / -1 loss from side 0's view where done, else 0
    signals:      dict name -> array, raw signals for reward shaping (see actors/rewards.py)

Finished games restart at once (auto-reset): where `done`, `observations` are the first
observation of the next game, while `rewards`, `outcome` and `signals` belong to the game that
ended. JAX games step the whole batch with one jitted, vmapped function (their pure functions are
exposed for fused loops); Python games (OpenSpiel) run as a pool of instances.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # agents/__init__ imports JAX: the registry and the config stay light without it
    from agents.specs import GameSpec

WIN, DRAW, LOSS = 1, 0, -1


class UnknownGame(ValueError):
    """A --game that names no game, or whose module or factory fails; the message says why
    (raised by `actors.games.registry.resolve` and the adapters it calls)."""


class TimeStep(NamedTuple):
    observations: tuple[Mapping[str, Any], Mapping[str, Any]]
    rewards: Any
    done: Any
    outcome: Any
    signals: Mapping[str, Any]


@runtime_checkable
class BatchGame(Protocol):
    spec: GameSpec
    batch_size: int

    def reset(self, seed: int) -> TimeStep: ...

    def step(self, actions: tuple[Mapping[str, Any], Mapping[str, Any]]) -> TimeStep: ...


def random_legal_actions(rng: np.random.Generator, spec: GameSpec, observations) -> tuple[dict, dict]:
    """Uniformly random legal actions for both sides, from the legal masks (numpy)."""
    from agents.specs import legal_mask

    out = []
    for side_spec, obs in zip(spec.sides, observations):
        actions = {}
        for head_name in side_spec.action.heads:
            mask = np.asarray(legal_mask(obs, head_name), bool)
            noise = rng.random(mask.shape)
            actions[head_name] = np.argmax(np.where(mask, noise, -1.0), axis=-1).astype(np.int32)
        out.append(actions)
    return tuple(out)


def check_actions(spec: GameSpec, actions, batch_size: int) -> None:
    """Raise ValueError naming the side and head if `actions` do not match the spec."""
    if len(actions) != 2:
        raise ValueError(f"expected actions for 2 sides, got {len(actions)}")
    for i, (side_spec, side_actions) in enumerate(zip(spec.sides, actions)):
        missing = set(side_spec.action.heads) - set(side_actions)
        if missing:
            raise ValueError(f"side {i}: missing action heads {sorted(missing)}")
        for name, head in side_spec.action.heads.items():
            head.value_spec.check(f"side {i} head {name!r}", side_actions[name], (batch_size,))


# ---------------------------------------------------------------------------------------------
# The functional game protocol: what a game declares to be played anywhere in the league.


@runtime_checkable
class GameFunctions(Protocol):
    """Pure, jittable functions of ONE game; the league vmaps them over a batch and jits them
    (the device path fuses them with the policy and the update; actors and evaluators step a
    batch of them). Implemented by every JAX game here (poker's, the matrix games',
    the race game's; `actors.games.registry` lists them) and by a user's own game
    (docs/games.md, examples/).

        spec                           GameSpec: each side's observation fields and action
                                       heads (agents/specs.py), the longest game, the signals
        config                         hashable: two objects with equal configs are the same
                                       game (they share compiled programs)
        reset(key)                  -> (state, (obs0, obs1))
        step(state, (act0, act1))   -> (state, (obs0, obs1), rewards [2] float32, done bool,
                                        outcome int8, signals {name: array})

    Each side's observation is a dict of the spec's fields plus `obs["action_mask"][head]`, the
    legal values of each action head (at least one legal value in every row). Both sides act
    every step: a turn-based game says whose move it is in the boolean field `acting` and
    ignores the other side's action (its mask is one-hot at value 0). `rewards` are the game's
    payoff on the final step, zero-sum (rewards[1] == -rewards[0]); `outcome` +1 / 0 / -1 from
    side 0's view where `done`. `step` auto-resets: where `done`, the state and observations are
    those of a fresh game (its randomness from the state's own key), while rewards, outcome and
    signals belong to the game that ended. A game whose sides differ (races) takes
    `reset(key, races)` with `races` int [2] and declares them in `Capabilities.races`.
    """

    spec: GameSpec
    config: Any

    def reset(self, key, *races) -> tuple[Any, tuple[Mapping[str, Any], Mapping[str, Any]]]: ...

    def step(self, state, actions: tuple[Mapping[str, Any], Mapping[str, Any]]) -> tuple: ...


class ScriptedOpponent(Protocol):
    """A game's built-in AI (`Capabilities.scripted_opponent`; the registry names each
    built-in game's, e.g. SMAX's jaxmarl scripted micro). Main agents train against it
    (`--device.scripted_slots`) and evaluator_0 measures them against it over time.

        side(fns, side, batch)         -> (act, state): the AI as one side of B games in a
                                          fused rollout (`actors.rollout`), act(key, obs,
                                          state, first) -> (Action, state)
        play(network, params, races, num_games, seed=0, config=None, greedy=False)
                                       -> outcomes [num_games] int8, +1 where the player
                                          (side 0, `races[0]`, playing `network` with `params`)
                                          won; `config` is the game's `GameFunctions.config`

    A curriculum of tasks against it (`--device.scripted_task_slots`; SMAX's: forced armies,
    for games whose sides pick an army from a menu first) also needs:

        curriculum(config, races, slots, settings, rng, lock) -> one main agent's task slots'
                                          tasks, passed along by the learner group as opaque
                                          options: draw(network, params, home) -> tasks,
                                          task_rows(tasks, per_game, games) -> the rows the
                                          races array gains, record(tasks, outcomes),
                                          metrics() -> dict
        progress(metrics) -> str        the progress line's words for those metrics (optional)
    """

    def side(self, fns, side: int, batch: int) -> tuple[Callable, Any]: ...

    def play(self, network, params, races: tuple[str, str], num_games: int, seed: int = 0,
             config: Any = None, greedy: bool = False) -> np.ndarray: ...


class SupervisedStart(Protocol):
    """A game's supervised start (`Capabilities.supervised_start`; the registry names each
    built-in game's): games of its scripted AI recorded as replays, then one
    agent per race cloned from them (AlphaStar's supervised agents). `experiments.supervised_start`
    caches both under keys built from what determines them and runs the league from the result.

        recording(config)        -> dict: what determines the recorded games (the replays' key)
        training(config)         -> dict: what determines the cloning besides the network and
                                    the races (the start's key)
        record(directory, config, log)          writes the replays into `directory`
        train(replay_dir, out, config, log)     writes the start's parameters to `out` (.npz)
                                                and its report to `out + ".json"`

    and for the commands `experiments.record` and `experiments.supervised`:

        record_games(directory, policy, games, chunk_games, seed, game_config, log) -> dict
            records games into `directory`: policy "heuristic" (the scripted AI on both sides)
            or a player's (network, params); returns figures (games, steps, outcomes)
        clone(replay_dir, out, races, game_config, log, **settings) -> dict
            clones one agent per race; settings: steps, batch_size, learning_rate, holdout,
            hidden_size, core_size, eval_games, seed, z; returns the report
        errors() -> tuple of exception types raised for bad input (the commands print them)
    """

    def recording(self, config) -> dict: ...

    def training(self, config) -> dict: ...

    def record(self, directory: str, config, log: Callable) -> None: ...

    def train(self, replay_dir: str, out: str, config, log: Callable) -> None: ...

    def record_games(self, directory: str, policy, games: int, chunk_games: int, seed: int,
                     game_config=None, log: Callable = print) -> dict: ...

    def clone(self, replay_dir: str, out: str, races, game_config=None, log: Callable = print,
              **settings) -> dict: ...

    def errors(self) -> tuple: ...


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a game offers beyond the protocol; each unlocks a feature of the league.

    races: the kinds of side a player can be (SMAX's terran/protoss/zerg): the league holds
        agents per race and `reset` takes the races of both sides; () for one kind ("any").
    turn_based: one side moves at a time (observation field `acting`); informative only.
    exact_evaluator: () -> the module of the game's exact tools, where OpenSpiel's exact NashConv
        applies (`--evaluator.exact`, `experiments.nashconv`): `ExactEvaluator(game_name,
        network, params_source)` (exact payoffs, NashConv, exploiter gaps), `load_game`,
        `agent_policy(game, network, params, weights=None)` (an agent as a tabular policy),
        `nash_conv`, `expected_payoffs`, `make_spec`; None: none.
    scripted_opponent: () -> ScriptedOpponent, the game's built-in AI to train against
        (`--device.scripted_slots`) and to evaluate against (the evaluator's win rate
        against it); None: none.
    z: () -> the module of the game's statistic z (AlphaStar's; `--z_replays`, `--network.z`):
        Z_SIZE, PSEUDO_REWARDS, ZBank (the bank read from replays) and tracker(fns), which
        follows z during the games of the game's functions `fns` (init_state, followable,
        start and after, traced by the device rollout; follow_host, the same over an unroll on
        host arrays, the replay path's actor); None: none (SMAX's: actors/games/smax_races/z.py).
    supervised_start: () -> SupervisedStart, agents cloned from the scripted AI's games
        (`--init`, the default where a game has one); None: none.
    unit_network: per-unit action heads; the agents use the unit network, which needs an LSTM
        core (`--network.core_size` >= 1).
    reward: the reward plug-in the game trains with unless `--actor.reward_plugin` is given
        (actors/rewards.py: "outcome", "game" or "openai_five").
    requires: the Python modules the game imports (checked before a launch that cannot
        offer them, e.g. the Launchpad environment without jaxmarl).
    defaults: the game's measured settings, {flag path: value}, applied under the flags given.
    text: (functions) -> the game drawn as text for a person playing it (`experiments.play`):
        describe(state, side), action_name(state, side, head, value), end(state, actions, side)
        -> str; None: the observation's numbers and the actions by index.
    draw: () -> the module that draws a game for a person watching it (the dashboard's watch
        page: a game between two players of the payoff matrix, played from a seed and shown
        frame by frame); docs/games.md, `draw`. None: the game is not drawn.

    The factories are called where the feature runs, so declaring a game imports nothing.
    """

    races: tuple[str, ...] = ()
    turn_based: bool = False
    exact_evaluator: Callable[[], Any] | None = None
    scripted_opponent: Callable[[], ScriptedOpponent] | None = None
    z: Callable[[], Any] | None = None
    supervised_start: Callable[[], SupervisedStart] | None = None
    unit_network: bool = False
    reward: str = "outcome"
    requires: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    text: Callable[[Any], Any] | None = None
    draw: Callable[[], Any] | None = None

    def __post_init__(self):
        factories = ("exact_evaluator", "scripted_opponent", "z", "supervised_start", "text", "draw")
        for name in factories:
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"Capabilities.{name} must be a factory (a callable) or None, not "
                                f"{value!r}: e.g. {name}=lambda: my_module")


@dataclasses.dataclass(frozen=True)
class Game:
    """A game as the league knows it: its name, how to build a batch of it, and what it offers.

    functions: () -> GameFunctions, the pure game (None: no JAX step, e.g. an OpenSpiel pool;
        such a game plays on the replay path only).
    make_batch: (batch_size, **kwargs) -> BatchGame; None: the functions, vmapped and jitted
        (`actors.games.functional.make_batch`, which `actors.games.make_batch_game` calls).
    """

    name: str
    functions: Callable[[], GameFunctions] | None = None
    make_batch: Callable[..., BatchGame] | None = None
    capabilities: Capabilities = Capabilities()

    def __post_init__(self):
        if self.functions is None and self.make_batch is None:
            raise ValueError(f"game {self.name!r}: give its functions, its make_batch, or both")

    @property
    def device(self) -> bool:
        """Whether the game has a JAX step (the device path can play it)."""
        return self.functions is not None

    @property
    def race_names(self) -> tuple[str, ...]:
        """The league's races for this game: its declared races, else the one kind "any"."""
        return self.capabilities.races or ("any",)
