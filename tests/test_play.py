"""Playing an agent in a terminal (issue 85, item 4): `python -m experiments.play --game=G AGENT`
driven as a person would, through its stdin and stdout, against an exported Kuhn agent and a nim
run's player (`examples/nim.py`, `--game=nim:make`).

Each check is against what the command does not compute itself: Kuhn's payoff by OpenSpiel from
the cards and moves the transcript shows, nim's rules and a greedy agent's moves replayed here
with the run's own network and parameters on the observations the transcript implies."""

import os
import re
import select
import subprocess
import sys
import time

import jax
import numpy as np
import pyspiel
import pytest

from actors.games.poker import game as jax_poker
from coordinator.param_store import player_params
from experiments import agent_ref, export
from tests.test_export import MAIN, make_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
PROMPTS = (b"q quits]: ", b"[Y/n]: ")


class Person:
    """`experiments.play` in a subprocess, read up to each prompt and answered line by line."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen([sys.executable, "-m", "experiments.play", *args], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})})
        self.buffer = b""
        self.transcript = ""

    def prompt(self, timeout: float = 60) -> str:
        """The output up to and including the next prompt."""
        deadline = time.monotonic() + timeout
        while not self.buffer.endswith(PROMPTS):
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self.proc.stdout.fileno(), 65536) if ready else None
            if not chunk:
                self.proc.kill()
                raise AssertionError(f"no prompt ({'timeout' if chunk is None else 'the program ended'}): "
                                     f"{(self.transcript + self.buffer.decode())[-3000:]}\n"
                                     f"{self.proc.stderr.read().decode()[-3000:]}")
            self.buffer += chunk
        text, self.buffer = self.buffer.decode(), b""
        self.transcript += text
        return text

    def say(self, line: str) -> None:
        self.proc.stdin.write(f"{line}\n".encode())
        self.proc.stdin.flush()
        self.transcript += f"{line}\n"

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        self.transcript += out.decode()
        return self.proc.returncode, out.decode(), err.decode()


def moves_offered(text: str) -> list[str]:
    line = [x for x in text.splitlines() if x.startswith("your moves")][-1]
    return re.findall(r"\d+\) (.+?)(?=\s{3}\d+\)|$)", line.partition(": ")[2])


def run_command(*args, env=None):
    return subprocess.run([sys.executable, "-m", "experiments.play", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})})


@pytest.fixture(scope="module")
def kuhn_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("play")
    make_run(root / "run")
    file = root / "kuhn.agent.npz"
    assert export.cli([f"{root / 'run'}:{MAIN}"], str(file)) == 0
    return str(file)


def test_poker_action_names_are_openspiels():
    for game, names in jax_poker.ACTION_NAMES.items():
        state = pyspiel.load_game(game).new_initial_state()
        while state.is_chance_node():
            state.apply_action(state.legal_actions()[0])
        assert [state.action_to_string(state.current_player(), a) for a in range(len(names))] == list(names)


def kuhn_payoff(me: int, my_card: str, their_card: str, moves: list[tuple[str, str]]) -> float:
    """OpenSpiel's payoff to player `me` of the deal and moves shown."""
    state = pyspiel.load_game("kuhn_poker").new_initial_state()
    cards = {me: "JQK".index(my_card), 1 - me: "JQK".index(their_card)}
    state.apply_action(cards[0])
    state.apply_action(cards[1])
    for who, name in moves:
        player = me if who == "you" else 1 - me
        assert state.current_player() == player, (moves, who)
        state.apply_action({state.action_to_string(player, a): a for a in state.legal_actions()}[name])
    assert state.is_terminal(), moves
    return state.returns()[me]


def test_kuhn_against_an_exported_agent(kuhn_file):
    person = Person("--game=kuhn_poker", kuhn_file, "--seed=3")
    rng = np.random.default_rng(0)
    total, games, text = 0.0, 0, person.prompt()
    assert "playing kuhn_poker" in text
    while games < 6:
        game_text, asked_wrong = "", False
        while "[Y/n]" not in text:
            game_text += text
            assert "opponent's card: ?" in text          # the agent's card hidden while playing
            if not asked_wrong:   # an invalid answer, and a move not offered: asked again
                for wrong in ("x", "3"):
                    person.say(wrong)
                    text = person.prompt()
                    assert f"{wrong!r} is not one of your moves" in text and text.endswith("q quits]: "), text
                asked_wrong = True
            offered = moves_offered(game_text)
            assert offered == ["Pass", "Bet"]
            pick = int(rng.integers(len(offered)))
            person.say(str(pick + 1) if rng.random() < 0.7 else offered[pick])   # by number or by name
            text = person.prompt()
        game_text += text
        games += 1
        end = game_text.split("--- the end ---")[1]
        me = int(re.search(r"you are player (\d)", end).group(1))
        mine, theirs = re.search(r"your card: ([JQK]) +opponent's card: ([JQK])", end).groups()
        betting = [tuple(m.split(" ")) for m in re.search(r"betting: (.*)", end).group(1).split(", ")]
        # The moves announced during the game are the betting shown at its end; the agent's are legal.
        played = re.findall(r"(you play|the agent plays): (\w+)$", game_text, re.M)
        assert [("you" if w == "you play" else "opponent", m) for w, m in played] == betting, game_text
        assert all(m in ("Pass", "Bet") for w, m in played if w == "the agent plays")
        word, payoff = re.search(r"result: you (won|lost|drew), payoff ([+-]?\d+)", end).groups()
        want = kuhn_payoff(me, mine, theirs, betting)
        assert float(payoff) == want and word == {1: "won", -1: "lost"}[int(np.sign(want))], end
        total += want
        assert re.search(rf"score after {games} games?: .*your total payoff {re.escape(f'{total:+g}')}$", end, re.M), end
        person.say("y" if games < 6 else "n")
        if games < 6:
            text = person.prompt()
    rc, out, err = person.finish()
    assert rc == 0 and "bye: score after 6 games" in out and "Traceback" not in err, err[-2000:]
    assert re.search(r"lost [1-9]", out) and re.search(r"won [1-9]", out)   # both happened


def optimal_take(stones: int) -> int:
    return stones % 4 or 1


def test_nim_against_a_run_s_greedy_player(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(EXAMPLES)
    run_dir = tmp_path / "run"
    _, network = make_run(run_dir, game="nim:make")
    _, params = player_params(str(run_dir), MAIN)
    env = {"PYTHONPATH": os.pathsep.join([ROOT, EXAMPLES])}
    person = Person("--game=nim:make", f"{run_dir}:{MAIN}", "--greedy", "--seed=5", env=env)
    games, opened, text = [], 0, person.prompt()
    while len(games) < 5:
        events, asked_wrong, game_text = [], False, ""
        while "[Y/n]" not in text:
            game_text += text
            stones = int(re.findall(r"(\d+) stones left", text)[-1])
            assert moves_offered(text) == [f"take {k}" for k in range(1, min(3, stones) + 1)]
            if stones < 3 and not asked_wrong:   # a move not offered is asked again
                person.say("take 3")
                text = person.prompt()
                assert "'take 3' is not one of your moves" in text, text
                asked_wrong = True
            opened += stones == 15 and "the agent plays" not in game_text
            person.say(str(optimal_take(stones)))
            text = person.prompt()
        game_text += text
        events = [("you" if w == "you play" else "agent", int(k))
                  for w, k in re.findall(r"(you play|the agent plays): take (\d)$", game_text, re.M)]
        games.append((game_text, events))
        person.say("y" if len(games) < 5 else "q")
        if len(games) < 5:
            text = person.prompt()
    rc, out, err = person.finish()
    assert rc == 0 and "bye: score after 5 games" in out and "Traceback" not in err, err[-2000:]
    assert opened >= 1 and any(e[0][0] == "agent" for _, e in games)   # both sides opened a game
    for game_text, events in games:
        stones, core = 15, network.initial_state(1)
        for step, (who, take) in enumerate(events):
            assert 1 <= take <= min(3, stones), (events, game_text)   # every move shown is legal
            # The agent's move is its network's most likely one on its own observation, the
            # network stepped on every step of the game (the other side's moves too).
            acting = who == "agent"
            mask = np.arange(1, 4) <= stones if acting else np.arange(3) == 0
            obs = {"stones": jax.nn.one_hot(np.array([stones]), 16), "acting": np.array([acting]),
                   "action_mask": {"take": mask[None]}}
            out_, core = network.step(params, obs, core, np.array([step == 0]))
            if acting:
                assert int(np.argmax(out_.logits["take"][0])) + 1 == take, (step, events)
            stones -= take
        assert stones == 0, events
        last = events[-1][0]
        result = re.search(r"result: you (won|lost)", game_text).group(1)
        assert result == ("won" if last == "you" else "lost"), game_text
        assert f"{'you' if last == 'you' else 'opponent'} took {events[-1][1]}" in game_text
        if events[0][0] == "you":   # the person opened and left multiples of 4: a forced win
            assert result == "won", game_text


def test_q_quits_mid_game_and_wrong_agents_exit_2(kuhn_file, tmp_path):
    person = Person("--game=kuhn_poker", kuhn_file)
    person.prompt()
    person.say("q")
    rc, out, err = person.finish()
    assert rc == 0 and "bye: score after 0 games" in out, out + err[-2000:]
    # The agent's game is not the one named: exit 2 naming both.
    done = run_command("--game=leduc_poker", kuhn_file)
    assert done.returncode == 2 and "leduc_poker" in done.stderr and "kuhn_poker" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    # An agent that cannot be read: exit 2 with agent_ref's message.
    damaged = tmp_path / "damaged.npz"
    data = bytearray(open(kuhn_file, "rb").read())
    data[len(data) // 2] ^= 1
    damaged.write_bytes(bytes(data))
    for name, why in ((str(tmp_path / "missing.npz"), "no such file"), (str(damaged), "checksum does not match")):
        with pytest.raises(agent_ref.AgentNameError, match=why):
            agent_ref.resolve(name)
        done = run_command("--game=kuhn_poker", name)
        assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_pgx_board_is_drawn_and_its_game_ends_as_drawn(tmp_path):
    """tic_tac_toe in process (`Session` with its input and output given): the board shown
    after the last move holds the line of three that the result names."""
    from experiments import play

    run_dir = tmp_path / "run"
    make_run(run_dir, game="pgx/tic_tac_toe")
    agent, game, fns = play.load(f"{run_dir}:{MAIN}", "pgx/tic_tac_toe")
    lines, games = [], []

    def read():   # the first move offered; one more game, then no
        if "another game" in lines[-1]:
            games.append(1)
            return "y\n" if len(games) < 2 else "n\n"
        return "1\n"

    session = play.Session(agent, game, fns, seat="0", greedy=True, seed=1, read=read,
                           write=lines.append, prompt=lines.append)
    assert session.run() == 0
    text = "\n".join(lines)
    for end in text.split("--- the end ---")[1:3]:
        board = [row.split()[1:] for row in end.splitlines()[3:6]]
        marks = {"X": "won", "O": "lost"}
        lines3 = [*board, *zip(*board), [board[i][i] for i in range(3)], [board[i][2 - i] for i in range(3)]]
        full = [m for m in marks if any(all(c == m for c in line) for line in lines3)]
        result = re.search(r"result: you (won|lost|drew)", end).group(1)
        assert [marks[m] for m in full] == ([] if result == "drew" else [result]), end


def test_a_mixture_plays_one_member_a_game_drawn_by_its_weight(tmp_path):
    """RUN_DIR:result on poker (the league's Nash mixture): each game is played by one member,
    drawn by its weight (2,000 draws within 4 standard errors of the weights)."""
    from actors.games import registry
    from experiments.play import Session
    from tests.test_export import SNAPSHOT, THIRD, make_nash_run

    weights = {MAIN: 0.2, SNAPSHOT: 0.5, THIRD: 0.3}
    make_nash_run(tmp_path / "run", weights)
    agent = agent_ref.resolve(f"{tmp_path / 'run'}:result")
    game = registry.resolve(agent.game)
    session = Session(agent, game, game.functions(), seed=3, read=lambda: "q", write=lambda s: None)
    members = [id(p) for p in agent.params]
    drawn = np.array([members.index(id(session.game_params())) for _ in range(2000)])
    for i, w in enumerate(agent.weights):
        share = np.mean(drawn == i)
        assert abs(share - w) < 4 * np.sqrt(w * (1 - w) / 2000), (i, share, w)
    assert sorted(agent.weights) == sorted(weights.values())
