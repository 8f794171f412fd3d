"""Playing an agent in a browser (issue 85, item 4): `python -m experiments.play --web`, the page
of experiments/play_web.py driven in Debian's Chromium (tests/browser.py) as a person would, by
clicking the move buttons it offers; and its HTTP API without a browser (the fast tier).

Every check is against what the page does not compute itself: at each position shown, OpenSpiel's
legal actions (names and ids) of the state rebuilt from the cards and betting the page draws are
the buttons offered; at each game's end OpenSpiel's payoff of the cards and moves shown is the
result the page names. Leduc (a tiny run's player) offers different moves at different positions
(Fold only facing a bet, Raise only under two raises); Kuhn (an exported file, through the
command itself) checks the payoffs over several games."""

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pyspiel
import pytest

from experiments import export, play, play_web
from tests.browser import BrowserMissing, Tab, chromium, find_chromium
from tests.test_export import MAIN, make_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RANKS = "JQK"


# -- OpenSpiel's view of a position the page draws -----------------------------------------------
def openspiel_state(game_name: str, board: str):
    """(OpenSpiel's state, the person's player) of the cards and betting drawn in `board` (the
    game's text: "you are player P", "your card: Q", "opponent's card: ?|K", Leduc's "board card",
    one "betting:" line per round). A card not shown is any card the deal leaves."""
    leduc = game_name == "leduc_poker"
    me = int(re.search(r"you are player (\d)", board).group(1))
    mine = re.search(r"your card: ([JQK])", board).group(1)
    theirs = re.search(r"opponent's card: ([JQK?])", board).group(1)
    public = re.search(r"board card: ([JQK])", board)
    rounds = re.findall(r"betting: (.*)", board)
    deck = list(range(6 if leduc else 3))

    def card(rank: str) -> int:   # OpenSpiel's Leduc: card c has rank c // 2
        c = next(c for c in deck if rank == "?" or RANKS[c // 2 if leduc else c] == rank)
        deck.remove(c)
        return c

    cards = {me: card(mine)}
    board_card = card(public.group(1)) if public else None
    cards[1 - me] = card(theirs)
    state = pyspiel.load_game(game_name).new_initial_state()
    state.apply_action(cards[0])
    state.apply_action(cards[1])
    for r, line in enumerate(rounds):
        if r == 1:
            assert state.is_chance_node() and board_card is not None, board
            state.apply_action(board_card)
        for move in ([] if line == "none yet" else line.split(", ")):
            who, name = move.split(" ")
            player = me if who == "you" else 1 - me
            assert state.current_player() == player, (board, move)
            state.apply_action({state.action_to_string(player, a): a for a in state.legal_actions()}[name])
    return state, me


def betting(board: str) -> list[tuple[str, str]]:
    """The moves drawn on `board`, in order: ("you"|"the agent", name)."""
    moves = [m for line in re.findall(r"betting: (.*)", board) if line != "none yet" for m in line.split(", ")]
    return [("you" if m.split(" ")[0] == "you" else "the agent", m.split(" ")[1]) for m in moves]


def check_position(game_name: str, view: dict) -> None:
    """A position the person moves at: the moves offered are OpenSpiel's legal actions there."""
    state, me = openspiel_state(game_name, view["board"])
    assert "opponent's card: ?" in view["board"], view["board"]     # the agent's card hidden
    assert state.current_player() == me, view["board"]
    [head] = view["moves"]
    assert [(o["id"], o["name"]) for o in head["options"]] == \
        [(a, state.action_to_string(me, a)) for a in state.legal_actions()], view
    assert [(p["who"], p["move"]) for p in view["played"]] == betting(view["board"])


def check_end(game_name: str, view: dict) -> float:
    """A game over: its payoff (OpenSpiel's, of the cards and moves shown) is the result named."""
    state, me = openspiel_state(game_name, view["board"])
    assert state.is_terminal(), view["board"]
    want = state.returns()[me]
    word = {1: "won", -1: "lost", 0: "drew"}[int(np.sign(want))]
    assert view["result"] == f"you {word}, payoff {want:+g}", (view, want)
    assert view["moves"] == [] and not view.get("your_turn") and view.get("payoff", want) == want, view
    assert [(p["who"], p["move"]) for p in view["played"]] == betting(view["board"])
    return want


# -- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kuhn_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("play_web")
    make_run(root / "run")
    file = root / "kuhn.agent.npz"
    assert export.cli([f"{root / 'run'}:{MAIN}"], str(file)) == 0
    return str(file)


def serve_run(run_dir, game, **session):
    agent, game_info, fns = play.load(f"{run_dir}:{MAIN}", game)
    server, url = play_web.serve(play.Session(agent, game_info, fns, **session), f"{game} test", 0)
    return server, url


def request(url: str, path: str, body=None, raw: bytes | None = None):
    """(status, answer) of a GET (`body` None) or a POST of JSON `body` (or `raw` bytes)."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path.lstrip("/"), data=data, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            text = response.read()
            status, kind = response.status, response.headers["Content-Type"]
    except urllib.error.HTTPError as e:
        text, status, kind = e.read(), e.code, e.headers["Content-Type"]
    return status, json.loads(text) if kind == "application/json" else text.decode()


# -- the HTTP API (fast tier) --------------------------------------------------------------------
def test_the_api_answers_bad_input_with_400_and_serializes_moves(tmp_path):
    make_run(tmp_path / "run")
    server, url = serve_run(tmp_path / "run", "kuhn_poker", seat="0", seed=2)
    try:
        status, page = request(url, "/")
        assert status == 200 and '<pre id="board">' in page and "/state.json" in page
        status, view = request(url, "/state.json")
        assert status == 200 and view["game"] == 1 and view["you"] == 0 and view["your_turn"], view
        check_position("kuhn_poker", view)
        # Bad input: 400 with the reason, the game untouched.
        bad = [({"move": 7}, "7 is not one of your moves: 0 (Pass), 1 (Bet)"),
               ({"move": "1"}, "'1' is not one of your moves"), ({"move": True}, "True is not one of your moves"),
               ({"move": {"bogus": 0}}, "a value for each action head ['action']"),
               ({"game": 1}, '"move"'), ({"game": 5, "move": 0}, "game 5 is not the game in play (game 1)")]
        for body, why in bad:
            status, answer = request(url, "/move", body)
            assert status == 400 and why in answer["error"], (body, answer)
        for raw, why in ((b"not json", "not JSON"), (b"[0]", "a JSON object")):
            status, answer = request(url, "/move", raw=raw)
            assert status == 400 and why in answer["error"], answer
        status, answer = request(url, "/new", {})
        assert status == 400 and "game 1 is not over" in answer["error"], answer
        assert request(url, "/nowhere")[0] == 404 and request(url, "/nowhere", {})[0] == 404
        assert request(url, "/state.json")[1] == view
        # Eight clicks of Pass at once: one at a time under the lock, each answered 200 while it
        # is a move of game 1 (Pass, then Pass again facing a bet), 400 once the game is over.
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(request(url, "/move", {"game": 1, "move": 0})))
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(status for status, _ in answers)
        assert set(codes) <= {200, 400} and len(codes) == 8, answers
        status, view = request(url, "/state.json")
        assert view["finished"] and view["games_scored"] == 1, view
        assert codes.count(200) == sum(who == "you" for who, _ in betting(view["board"])) >= 1, (answers, view)
        assert all("game 1 is over" in a["error"] for s, a in answers if s == 400), answers
        total = check_end("kuhn_poker", view)
        assert view["score"].endswith(f"your total payoff {total:+g}")
        status, answer = request(url, "/move", {"move": 0})
        assert status == 400 and "game 1 is over: start a new game" in answer["error"], answer
        # The next game; played to its end by the first move offered.
        status, view = request(url, "/new", {"game": 1})
        assert status == 200 and view["game"] == 2 and view["games_scored"] == 1 and not view["finished"], view
        while not view["finished"]:
            check_position("kuhn_poker", view)
            status, view = request(url, "/move", {"game": 2, "move": {"action": view["moves"][0]["options"][0]["id"]}})
            assert status == 200, view
        total += check_end("kuhn_poker", view)
        assert view["games_scored"] == 2 and view["score"].startswith("score after 2 games")
        assert view["score"].endswith(f"your total payoff {total:+g}"), view
    finally:
        server.shutdown()
        server.server_close()


# -- in Chromium (system tier) ------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    try:
        find_chromium()
    except BrowserMissing as e:
        pytest.fail(str(e))  # the browser tests are part of CI: a missing browser is a failure
    with chromium() as b:
        yield b


def page_view(tab: Tab) -> dict:
    """What the page shows, in /state.json's terms (read from the page's elements)."""
    return tab.page.evaluate("""() => {
        const text = id => document.getElementById(id).textContent;
        const result = document.getElementById("result");
        const played = [...document.querySelectorAll("#played li")].map(li => li.textContent);
        const options = [...document.querySelectorAll("#moves button")].map(
            b => ({id: Number(b.dataset.id), name: b.textContent, head: b.dataset.head}));
        return {board: text("board"), status: text("status"), reply: text("reply"), score: text("score"),
                error: text("error"), finished: !result.hidden, new_game: !document.getElementById("new").hidden,
                result: result.hidden ? null : text("result").replace(/^result: /, ""),
                played: played.map(p => ({who: p.split(": ")[0], move: p.split(": ")[1]})),
                moves: options.length ? [{head: options[0].head, options: options.map(({id, name}) => ({id, name}))}] : [],
                renders: window.playRenders};
    }""")


def play_in_browser(tab: Tab, url: str, game_name: str, games: int, rng) -> dict:
    """`games` games clicked through on the page, each position and end checked; what was seen."""
    tab.page.goto(url)
    tab.wait_for("window.playRenders > 0", 60)
    seen = {"seats": set(), "offered": set(), "total": 0.0, "agent_opened": 0}
    for number in range(1, games + 1):
        view = page_view(tab)
        assert re.match(rf"game {number}: you play side (\d), the agent side \d", view["status"]), view
        seen["seats"].add(int(re.search(r"you are player (\d)", view["board"]).group(1)))
        if view["played"]:   # the agent opened: its reply shown before the person's first move
            assert view["played"][0]["who"] == "the agent" and view["reply"] == f"the agent plays: {view['played'][0]['move']}"
            seen["agent_opened"] += 1
        while not view["finished"]:
            check_position(game_name, view)
            seen["offered"].add(tuple(o["name"] for o in view["moves"][0]["options"]))
            buttons = tab.page.query_selector_all("#moves button")
            pick = int(rng.integers(len(buttons)))
            before = view["renders"]
            buttons[pick].click()
            tab.wait_for(f"window.playRenders > {before}", 60)
            view = page_view(tab)
            assert view["error"] == "", view
            # The agent's reply: its moves since the person's, as played.
            whos = [p["who"] for p in view["played"]]
            reply = [p["move"] for p in view["played"][len(whos) - whos[::-1].index("you"):]]
            assert view["reply"] == ("the agent plays: " + "; ".join(reply) if reply else ""), view
        seen["total"] += check_end(game_name, view)
        assert view["status"] == f"game {number} is over" and view["new_game"]
        assert view["score"].startswith(f"score after {number} game")
        assert view["score"].endswith(f"your total payoff {seen['total']:+g}"), view
        if number < games:
            before = view["renders"]
            tab.page.click("#new")
            tab.wait_for(f"window.playRenders > {before}", 60)
    assert tab.console_errors == [], tab.console_errors
    return seen


@pytest.mark.system
def test_leduc_in_chromium_offers_only_openspiels_legal_moves(browser, tmp_path):
    make_run(tmp_path / "run", game="leduc_poker")
    server, url = serve_run(tmp_path / "run", "leduc_poker", seed=4)
    try:
        with Tab(browser, width=1000, height=900) as tab:
            seen = play_in_browser(tab, url, "leduc_poker", 4, np.random.default_rng(1))
    finally:
        server.shutdown()
        server.server_close()
    # Different positions offered different moves (a test of the masks, not of one fixed list).
    assert len(seen["offered"]) >= 2 and ("Fold", "Call", "Raise") in seen["offered"], seen


@pytest.mark.system
def test_the_command_serves_kuhn_against_an_exported_agent(browser, kuhn_file):
    """`python -m experiments.play --game=kuhn_poker FILE --web --port=0`: the address it prints
    plays in Chromium; Ctrl-C ends it (exit 0, the score)."""
    proc = subprocess.Popen([sys.executable, "-m", "experiments.play", "--game=kuhn_poker", kuhn_file, "--web",
                             "--port=0", "--seed=3"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        line, deadline = b"", time.monotonic() + 120
        while b"\n" not in line and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            chunk = os.read(proc.stdout.fileno(), 4096) if ready else b""
            if ready and not chunk:
                break
            line += chunk
        found = re.search(rb"play kuhn_poker against .* at (http://127\.0\.0\.1:\d+/)", line)
        assert found, (line, proc.poll(), proc.stderr.read().decode()[-3000:] if proc.poll() is not None else "")
        with Tab(browser, width=1000, height=900) as tab:
            seen = play_in_browser(tab, found.group(1).decode(), "kuhn_poker", 5, np.random.default_rng(0))
        assert seen["seats"] == {0, 1} and seen["agent_opened"] >= 1, seen   # both sides opened a game
        assert seen["offered"] == {("Pass", "Bet")}
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "bye: score after 5 games" in out.decode(), (out, err.decode()[-3000:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
