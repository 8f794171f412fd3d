"""Play against an agent in a terminal: a person (stdin/stdout) against a trained agent, in a
turn-based game (Kuhn, Leduc, `examples/nim.py` by its module path, pgx board games).

    python -m experiments.play --game=kuhn_poker kuhn.agent.npz
    python -m experiments.play --game=kuhn_poker runs/kuhn:any_main_agent_0 --seat=0 --greedy
    cd examples && python -m experiments.play --game=nim:make ../nim.agent.npz
    python -m experiments.play --game=pgx/tic_tac_toe ttt.agent.npz --seed=3
    python -m experiments.play --game=leduc_poker runs/leduc:any_main_agent_0 --web --port=8060

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

`--web`: the same games in a browser instead (experiments/play_web.py): a page served on
`--host` (127.0.0.1) and `--port` (8060; 0 any free one), its address printed; it shows the same
drawing, the legal moves as buttons named by the game, the moves played with the agent's replies,
the end (hidden cards shown), the result, the score so far and a "new game" button; Ctrl-C stops
it (exit 0). Both play `GameInPlay`, the one turn-stepping core: the person's `legal_moves()`,
the agent's move drawn on its own observation (`agent_move()`), `play(move)`, `finished`.
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
    flags.DEFINE_bool("web", False, "play in a browser: serve the page on --host:--port (experiments/play_web.py)")
    flags.DEFINE_integer("port", 8060, "--web: the port to serve on (0: any free port)")
    flags.DEFINE_string("host", "127.0.0.1", "--web: the address to bind (default: loopback only)")


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


class IllegalMove(ValueError):
    """A move the person cannot play now (not one of the legal moves, or the game is over); the
    message says why and what the moves are."""


class GameInPlay:
    """One game of the person (side `person`) against the session's agent, stepped one step at a
    time: the turn-stepping core that the terminal (`Session.play_game`) and the browser page
    (experiments/play_web.py) share.

    At each step the agent's network has already stepped on its side's observation (as in the
    league, on every step of the game, its side acting or not) and its move is drawn:
    `agent_move()` names it (None when its side does not act). `person_moves`: the person acts
    now, one of `legal_moves()` per action head; `play(move)` steps the game with both sides'
    moves (`move` None when the person does not act) and draws the agent's next. At the end:
    `finished`, `payoff` (the person's) and `ending` (the game's last position, hidden cards
    shown). `moves`: what was played so far, (who, names) with who "you" or "the agent".
    """

    def __init__(self, session: Session, number: int, person: int):
        import jax

        self.session, self.number = session, number
        self.person, self.other = person, 1 - person
        self.heads = session.heads
        session.key, key = jax.random.split(session.key)
        self.state, self.obs = session._reset(key)
        self.core, self.first = session.agent.network.initial_state(1), True
        self.params = session.game_params()
        self.finished, self.payoff, self.ending = False, None, None
        self.moves: list[tuple[str, str]] = []
        self._draw_agent()

    def _draw_agent(self) -> None:
        """The agent's network stepped on its side's observation; its move for this step."""
        import jax
        import jax.numpy as jnp
        import numpy as np

        from agents.specs import MASK_KEY

        s = self.session
        s.key, key = jax.random.split(s.key)
        seen = jax.tree.map(lambda x: jnp.asarray(x)[None], self.obs[self.other])
        action, self.core = s._act(self.params, key, seen, self.core, np.array([self.first]))
        self.first = False
        self.theirs = {h: np.asarray(action.game[h])[0].astype(np.int32) for h in self.heads}
        if acting(self.obs[self.other]):
            for h in self.heads:
                if not np.asarray(self.obs[self.other][MASK_KEY][h])[self.theirs[h]]:
                    raise RuntimeError(f"the agent chose {h}={self.theirs[h]}, not a legal move")

    # -- what the person sees --------------------------------------------------------------
    @property
    def person_moves(self) -> bool:
        """Whether the person acts at this step."""
        return not self.finished and acting(self.obs[self.person])

    @property
    def agent_acts(self) -> bool:
        return not self.finished and acting(self.obs[self.other])

    def view(self) -> str:
        """The game as the person's side sees it now (the last position, cards shown, at the end)."""
        if self.finished:
            return self.ending
        return self.session.describe(self.state, self.obs[self.person], self.person)

    def legal_moves(self) -> dict[str, list[tuple[int, str]]]:
        """Per action head, the person's legal values and their names; {} when the person does
        not act now."""
        import numpy as np

        from agents.specs import MASK_KEY

        if not self.person_moves:
            return {}
        return {h: [(int(v), self.session.action_name(self.state, self.person, h, v))
                    for v in np.flatnonzero(np.asarray(self.obs[self.person][MASK_KEY][h]))]
                for h in self.heads}

    def result(self) -> str:
        """At the end: "you won, payoff +1" (lost, drew)."""
        word = "won" if self.payoff > 0 else "lost" if self.payoff < 0 else "drew"
        return f"you {word}, payoff {self.payoff:+g}"

    def move_names(self, move: dict, side: int) -> str:
        return ", ".join(self.session.action_name(self.state, side, h, move[h]) for h in self.heads)

    def agent_move(self) -> str | None:
        """The agent's move at this step, by name; None when its side does not act."""
        return self.move_names(self.theirs, self.other) if self.agent_acts else None

    def check(self, move) -> dict:
        """The person's move as {head: value}, each one of the legal values; IllegalMove (what
        is wrong, and the moves) otherwise. One head: a bare value is the move too."""
        if self.finished:
            raise IllegalMove(f"game {self.number} is over: start a new game")
        legal = self.legal_moves()
        if not legal:
            raise IllegalMove("it is not your move")
        if not isinstance(move, dict):
            move = {self.heads[0]: move} if len(self.heads) == 1 else {}
        if set(move) != set(self.heads):
            raise IllegalMove(f"a move names a value for each action head {self.heads}, not {sorted(move)}")
        checked = {}
        for h in self.heads:
            value = move[h]
            if isinstance(value, bool) or not isinstance(value, int) or value not in dict(legal[h]):
                offered = ", ".join(f"{v} ({n})" for v, n in legal[h])
                raise IllegalMove(f"{value!r} is not one of your moves{f' ({h})' if len(self.heads) > 1 else ''}: "
                                  f"{offered}")
            checked[h] = value
        return checked

    # -- one step ----------------------------------------------------------------------------
    def play(self, move: dict | None = None) -> None:
        """Steps the game: the person's `move` (checked; None when the person does not act) and
        the agent's drawn one. At the end `finished`, `payoff` and `ending` are set."""
        import jax.numpy as jnp
        import numpy as np

        from agents.specs import MASK_KEY

        if self.person_moves:
            mine = self.check(move)
            self.moves.append(("you", self.move_names(mine, self.person)))
        elif self.finished:
            raise IllegalMove(f"game {self.number} is over: start a new game")
        else:   # a side that does not act sends any legal value (the game ignores it)
            mine = {h: np.int32(np.argmax(np.asarray(self.obs[self.person][MASK_KEY][h]))) for h in self.heads}
        if self.agent_acts:
            self.moves.append(("the agent", self.agent_move()))
        actions = (mine, self.theirs) if self.person == 0 else (self.theirs, mine)
        actions = tuple({h: jnp.asarray(v, jnp.int32) for h, v in a.items()} for a in actions)
        after, obs_after, rewards, done, _, _ = self.session._step(self.state, actions)
        if bool(done):
            self.finished = True
            self.payoff = float(np.asarray(rewards)[self.person])
            self.ending = self.session.end(self.state, self.obs[self.person], actions, self.person)
            return
        self.state, self.obs = after, obs_after
        self._draw_agent()


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

    def new_game(self, number: int) -> GameInPlay:
        """Game `number`, the person's side drawn (`seat` random) or given."""
        person = int(self.rng.integers(2)) if self.seat == "random" else int(self.seat)
        return GameInPlay(self, number, person)

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

    def choose(self, game: GameInPlay) -> dict:
        """The person's move: per action head, one of the legal values, by number or name."""
        move = {}
        for head, legal in game.legal_moves().items():
            names = [n for _, n in legal]
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
            move[head] = legal[pick][0]
        return move

    # -- one game --------------------------------------------------------------------------
    def play_game(self, number: int) -> float:
        """One game to its end; the person's payoff. Quit if the person quits."""
        game = self.new_game(number)
        self.write(f"\n=== game {number}: you play side {game.person}, the agent side {game.other} ===")
        while not game.finished:
            mine = None
            if game.person_moves:
                self.write(game.view())
                mine = self.choose(game)
                self.write("you play: " + game.move_names(mine, game.person))
            theirs = game.agent_move()
            if theirs is not None:
                self.write(f"the agent plays: {theirs}")
            game.play(mine)
        self.write("--- the end ---\n" + game.ending)
        self.write(f"result: {game.result()}")
        return game.payoff

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


def cli(args: list[str], game: str | None, seat: str = "random", greedy: bool = False, seed: int = 0,
        web: bool = False, port: int = 8060, host: str = "127.0.0.1") -> int:
    """The command: 0 when the person quits (`web`: on Ctrl-C); 2 (the reason on stderr) for an
    agent or game that cannot be played, or an address the page cannot be served on."""
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
    if web:
        from experiments import play_web

        session = Session(agent, game_info, fns, seat, greedy, seed)
        return play_web.run(session, f"{agent.game} against {args[0]} ({who})", port, host)
    print(f"playing {agent.game} against {args[0]} ({who}); the agent is \"opponent\" below", flush=True)
    return Session(agent, game_info, fns, seat, greedy, seed).run()


def main(argv):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")   # one game at a time: no accelerator needed
    from experiments.nashconv import quiet_backend_probe

    quiet_backend_probe()
    return cli(argv[1:], FLAGS.game, FLAGS.seat, FLAGS.greedy, FLAGS.seed, FLAGS.web, FLAGS.port, FLAGS.host)


if __name__ == "__main__":
    define_flags()
    app.run(lambda argv: sys.exit(main(argv)))
