"""Play against an agent in a terminal: a person (stdin/stdout) against a trained agent, in a
turn-based game (Kuhn, Leduc, `examples/nim.py` by its module path, pgx board games).

    python -m experiments.play --game=kuhn_poker kuhn.agent.npz
    python -m experiments.play --game=kuhn_poker runs/kuhn:any_main_agent_0 --seat=0 --greedy
    cd examples && python -m experiments.play --game=nim:make ../nim.agent.npz
    python -m experiments.play --game=pgx/tic_tac_toe ttt.agent.npz --seed=3

AGENT is any name of `experiments.agent_ref` (RUN_DIR:PLAYER_ID or an exported file); `--game`
must be the agent's game (leave it out to play the agent's). Each turn shows the game as the
person's side sees it (the game's `Capabilities.text`: poker's cards, pot and betting, a board,
nim's heap; a game without one shows its observation's numbers), numbers the legal moves by
their names and reads one (a number or a name; anything else is asked again; q quits). The
agent acts on its side's observation with the legal masks, its network stepped on every step of
the game as in the league (sampled, or its most likely move with `--greedy`). At the end the
game's last position (hidden cards shown), the result with the game's payoff, the score so far,
and another game is offered. `--seat`: the side the person plays (the game itself draws who
moves first: poker's positions, nim's and pgx's first mover). Exit 0 on q or the end of input;
2 with the reason for an agent that cannot be read, a `--game` that is not the agent's, or a
game that cannot be played here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("game", None, "the game to play: the agent's (any --game of the league: kuhn_poker, "
                        "leduc_poker, nim:make, pgx/tic_tac_toe, ...); left out: the agent's own")
    flags.DEFINE_enum("seat", "random", ["0", "1", "random"], "the side you play; random: drawn per game")
    flags.DEFINE_bool("greedy", False, "the agent plays its most likely move (else it samples its policy)")
    flags.DEFINE_integer("seed", 0, "seed of the games' deals, the agent's samples and the seats drawn")


class PlayError(ValueError):
    """A game or agent that cannot be played here; the message says why."""


class Quit(Exception):
    """The person quit (q, or the end of the input)."""


def _game_module_on_path(agent) -> None:
    """An exported agent of a game of one's own (`package.module:factory`) names the module's
    file: its directory joins the end of sys.path where the module is not importable already."""
    policy = getattr(agent, "policy", None)
    path = (policy.header.get("game", {}) if policy is not None else {}).get("module_path")
    if not path or ":" not in agent.game:
        return
    top = agent.game.partition(":")[0].split(".")[0]
    if importlib.util.find_spec(top) is None and os.path.exists(path):
        sys.path.append(os.path.dirname(os.path.abspath(path)))


def _side_signature(side_spec) -> tuple:
    return (tuple((k, tuple(v.shape)) for k, v in sorted(side_spec.observation.fields.items())),
            tuple((k, int(h.num_values), tuple(h.shape)) for k, h in sorted(side_spec.action.heads.items())))


def load(name: str, game_name: str | None):
    """(agent, game, functions) for playing `name` in `game_name`; AgentNameError (from
    experiments.agent_ref) or PlayError (with the reason) otherwise."""
    from actors.games.base import UnknownGame
    from actors.games.registry import resolve
    from experiments import agent_ref

    try:
        agent = agent_ref.resolve(name)
    except UnknownGame as e:   # a run of a game this process cannot import
        raise PlayError(f"{name}: {e}") from None
    if game_name and game_name != agent.game:
        raise PlayError(f"--game={game_name}, but the agent {name} plays {agent.game}: "
                        f"play it with --game={agent.game}")
    _game_module_on_path(agent)
    try:
        game = resolve(agent.game)
    except UnknownGame as e:
        raise PlayError(str(e)) from None
    if game.functions is None:
        raise PlayError(f"{agent.game} has no JAX step (an OpenSpiel pool); play needs one game's "
                        "reset and step (actors/games/base.py, GameFunctions)")
    fns = game.functions()
    for side, side_spec in enumerate(fns.spec.sides):
        wide = [h for h, head in side_spec.action.heads.items() if tuple(head.shape)]
        if wide:
            raise PlayError(f"{agent.game}: side {side}'s action heads {wide} take several values a "
                            "move (units); a terminal offers one choice a head")
        if _side_signature(side_spec) != _side_signature(agent.spec.side(agent.side)):
            raise PlayError(f"{name}: the agent's observations and actions do not fit {agent.game}'s "
                            f"side {side}")
    return agent, game, fns


def observation_text(obs) -> str:
    """The generic drawing of a game without `Capabilities.text`: its observation's numbers."""
    import numpy as np

    from agents.specs import MASK_KEY

    lines = []
    for key, value in obs.items():
        if key == MASK_KEY:
            continue
        text = np.array2string(np.asarray(value), precision=3, suppress_small=True, max_line_width=100)
        lines.append(f"  {key}: {text}")
    return "your observation:\n" + "\n".join(lines)


def acting(obs) -> bool:
    """Whether the side observing `obs` moves now (a game without `acting`: both always do)."""
    return bool(obs["acting"]) if "acting" in obs else True


class Session:
    """Games of a person (`read` and `write`) against `agent`, on the game's pure functions."""

    def __init__(self, agent, game, fns, seat: str = "random", greedy: bool = False, seed: int = 0,
                 read: Callable[[], str] = sys.stdin.readline, write: Callable[[str], None] | None = None,
                 prompt: Callable[[str], None] | None = None):
        import jax
        import numpy as np

        import agents

        self.agent, self.fns, self.seat = agent, fns, seat
        self.text = game.capabilities.text(fns) if game.capabilities.text else None
        self.read = read
        self.write = write or (lambda s: print(s, flush=True))
        self.prompt = prompt or (lambda s: print(s, end="", flush=True))
        self.heads = list(fns.spec.side(0).action.heads)
        self.key = jax.random.PRNGKey(seed)
        self.rng = np.random.default_rng(seed)
        network = agent.network
        self._reset, self._step = jax.jit(fns.reset), jax.jit(fns.step)
        self._act = jax.jit(lambda params, key, obs, state, first: agents.act(
            network, params, key, obs, state, first, greedy=greedy))
        self.results: list[float] = []

    def game_params(self):
        """The parameters that play the next game: the agent's; a mixture's (RUN_DIR:result on
        poker, a mixture file), one member drawn by its weight, as the league plays a mixture."""
        import numpy as np

        if self.agent.weights is None:
            return self.agent.params
        return self.agent.params[int(self.rng.choice(len(self.agent.params), p=np.asarray(self.agent.weights)))]

    # -- what the person sees --------------------------------------------------------------
    def describe(self, state, obs, side: int) -> str:
        return self.text.describe(state, side) if self.text else observation_text(obs)

    def action_name(self, state, side: int, head: str, value: int) -> str:
        if self.text:
            return self.text.action_name(state, side, head, int(value))
        return f"{head} {int(value)}" if len(self.heads) > 1 else f"action {int(value)}"

    def end(self, state, obs, actions, side: int) -> str:
        return self.text.end(state, actions, side) if self.text else "the game ended"

    def ask(self, prompt: str) -> str:
        """One line of input; Quit on q or the end of the input."""
        self.prompt(prompt)
        line = self.read()
        if not line:
            raise Quit
        reply = line.strip()
        if reply.lower() in ("q", "quit", "exit"):
            raise Quit
        return reply

    def choose(self, state, obs, side: int) -> dict:
        """The person's move: per action head, one of the legal values, by number or name."""
        import numpy as np

        from agents.specs import MASK_KEY

        move = {}
        for head in self.heads:
            legal = np.flatnonzero(np.asarray(obs[MASK_KEY][head]))
            names = [self.action_name(state, side, head, v) for v in legal]
            label = f" ({head})" if len(self.heads) > 1 else ""
            self.write(f"your moves{label}: " + "   ".join(f"{i + 1}) {n}" for i, n in enumerate(names)))
            while True:
                reply = self.ask(f"your move [1-{len(names)}, q quits]: ")
                pick = int(reply) - 1 if reply.isdigit() else next(
                    (i for i, n in enumerate(names) if n.lower() == reply.lower()), -1)
                if 0 <= pick < len(names):
                    break
                self.write(f"{reply!r} is not one of your moves: enter a number from 1 to {len(names)} "
                           "or a move's name (q quits)")
            move[head] = legal[pick]
        return move

    # -- one game --------------------------------------------------------------------------
    def play_game(self, number: int) -> float:
        """One game to its end; the person's payoff. Quit if the person quits."""
        import jax
        import jax.numpy as jnp
        import numpy as np

        from agents.specs import MASK_KEY

        person = int(self.rng.integers(2)) if self.seat == "random" else int(self.seat)
        other = 1 - person
        self.key, key = jax.random.split(self.key)
        state, obs = self._reset(key)
        core, first = self.agent.network.initial_state(1), True
        params = self.game_params()
        self.write(f"\n=== game {number}: you play side {person}, the agent side {other} ===")
        while True:
            # The agent's network steps on every observation of its side, as in the league.
            self.key, key = jax.random.split(self.key)
            seen = jax.tree.map(lambda x: jnp.asarray(x)[None], obs[other])
            action, core = self._act(params, key, seen, core, np.array([first]))
            first = False
            theirs = {h: np.asarray(action.game[h])[0].astype(np.int32) for h in self.heads}
            if acting(obs[person]):
                self.write(self.describe(state, obs[person], person))
                mine = self.choose(state, obs[person], person)
                self.write("you play: " + ", ".join(self.action_name(state, person, h, mine[h]) for h in self.heads))
            else:
                mine = {h: np.int32(np.argmax(np.asarray(obs[person][MASK_KEY][h]))) for h in self.heads}
            if acting(obs[other]):
                for h in self.heads:
                    if not np.asarray(obs[other][MASK_KEY][h])[theirs[h]]:
                        raise RuntimeError(f"the agent chose {h}={theirs[h]}, not a legal move")
                names = ", ".join(self.action_name(state, other, h, theirs[h]) for h in self.heads)
                self.write(f"the agent plays: {names}")
            actions = (mine, theirs) if person == 0 else (theirs, mine)
            actions = tuple({h: jnp.asarray(v, jnp.int32) for h, v in a.items()} for a in actions)
            after, obs_after, rewards, done, _, _ = self._step(state, actions)
            if bool(done):
                payoff = float(np.asarray(rewards)[person])
                self.write("--- the end ---\n" + self.end(state, obs[person], actions, person))
                word = "won" if payoff > 0 else "lost" if payoff < 0 else "drew"
                self.write(f"result: you {word}, payoff {payoff:+g}")
                return payoff
            state, obs = after, obs_after

    def score(self) -> str:
        r = self.results
        return (f"score after {len(r)} game{'s' if len(r) != 1 else ''}: you won {sum(x > 0 for x in r)}, "
                f"lost {sum(x < 0 for x in r)}, drew {sum(x == 0 for x in r)}; "
                f"your total payoff {sum(r):+g}")

    def run(self) -> int:
        """Games until the person quits; 0."""
        try:
            while True:
                self.results.append(self.play_game(len(self.results) + 1))
                self.write(self.score())
                while True:
                    reply = self.ask("another game? [Y/n]: ").lower()
                    if reply in ("", "y", "yes"):
                        break
                    if reply in ("n", "no"):
                        raise Quit
                    self.write("answer y or n (q quits)")
        except Quit:
            self.write(f"\nbye: {self.score()}")
        return 0


def cli(args: list[str], game: str | None, seat: str = "random", greedy: bool = False, seed: int = 0) -> int:
    """The command: 0 when the person quits; 2 (the reason on stderr) for an agent or game that
    cannot be played."""
    from experiments.agent_ref import AgentNameError, describe_forms

    if len(args) != 1:
        print(f"error: name one agent to play against: {describe_forms()} (got {len(args)})", file=sys.stderr)
        return 2
    try:
        agent, game_info, fns = load(args[0], game)
    except (AgentNameError, PlayError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    who = agent.source.get("player_id", "?")
    print(f"playing {agent.game} against {args[0]} ({who}); the agent is \"opponent\" below", flush=True)
    return Session(agent, game_info, fns, seat, greedy, seed).run()


def main(argv):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")   # one game at a time: no accelerator needed
    from experiments.nashconv import quiet_backend_probe

    quiet_backend_probe()
    return cli(argv[1:], FLAGS.game, FLAGS.seat, FLAGS.greedy, FLAGS.seed)


if __name__ == "__main__":
    define_flags()
    app.run(lambda argv: sys.exit(main(argv)))
