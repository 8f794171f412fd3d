"""Play against an agent in a browser: `python -m experiments.play --game=G AGENT --web`.

A small page served on 127.0.0.1 (the standard library's http.server and a little JavaScript,
as the dashboard's): the game as the person's side sees it (the game's `Capabilities.text`, the
same drawing as the terminal's), the legal moves as buttons named by the game, the moves played
with the agent's replies, at the end the game's last position with the hidden cards shown, the
result and the score so far, and a "new game" button. The games are `experiments.play`'s own
(`GameInPlay`: the turn-stepping core the terminal plays too), one game at a time for the one
person at the page (a local tool): every request holds one lock.

    GET  /            the page
    GET  /state.json  the game now (below)
    POST /move        {"game": N, "move": {HEAD: VALUE}} (one head: "move": VALUE): the person's
                      move, then the agent's until the person moves again or the game ends
    POST /new         {}: the next game, once this one is over

/state.json and both POSTs answer the same object: `game` (its number), `you` and `agent` (their
sides), `board` (the drawing), `played` ([{who, move}]), `reply` (the agent's moves since the
person's last), `your_turn`, `moves` ([{head, options: [{id, name}]}], the legal moves; [] when
it is not the person's move), `finished`, `payoff`, `result`, `score`, `version` (counts the
changes). A move that is not legal now, a game that is over, a new game before this one ends or a
body that is not JSON: 400 with {"error": the reason}; the page shows it.

`serve(session, title, port)` starts it on a daemon thread (`tests/test_play_web.py`).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

MAX_BODY = 10_000


class BadRequest(ValueError):
    """A request the page cannot answer (HTTP 400); the message says why."""


class Table:
    """The page's game, one at a time, and the session's score; every call holds `lock`.
    `session`: an `experiments.play.Session` (its games are `experiments.play.GameInPlay`s;
    this module imports nothing of experiments.play, which imports it)."""

    def __init__(self, session, title: str):
        self.session, self.title = session, title
        self.lock = threading.Lock()
        self.version = 0
        with self.lock:
            self.game = self._start()
            self._warm_up()

    def _start(self):
        self.game = self.session.new_game(len(self.session.results) + 1)
        self._advance()
        return self.game

    def _advance(self) -> None:
        """The game played on while the person does not move (the agent's moves); a game that
        ends is scored."""
        game = self.game
        while not game.finished and not game.person_moves:
            game.play(None)
        if game.finished:
            self.session.results.append(game.payoff)
        self.version += 1

    def _warm_up(self) -> None:
        """The game's step compiled before the page opens (the first click answers at once)."""
        import jax.numpy as jnp
        import numpy as np

        from agents.specs import MASK_KEY

        game = self.game
        if game.finished:
            return
        fill = tuple({h: jnp.asarray(np.argmax(np.asarray(o[MASK_KEY][h])), jnp.int32) for h in game.heads}
                     for o in game.obs)
        self.session._step(game.state, fill)

    def view(self) -> dict:
        """The game now, as the page draws it (the module docstring's object)."""
        game = self.game
        reply = []
        for who, move in reversed(game.moves):
            if who == "you":
                break
            reply.insert(0, move)
        return {
            "title": self.title, "version": self.version, "game": game.number,
            "you": game.person, "agent": game.other, "board": game.view(),
            "played": [{"who": who, "move": move} for who, move in game.moves],
            "reply": reply, "your_turn": game.person_moves,
            "moves": [{"head": h, "options": [{"id": v, "name": n} for v, n in options]}
                      for h, options in game.legal_moves().items()],
            "finished": game.finished, "payoff": game.payoff,
            "result": game.result() if game.finished else None,
            "score": self.session.score(), "games_scored": len(self.session.results),
        }

    def _current(self, body: dict):
        number = body.get("game")
        if number is not None and number != self.game.number:
            raise BadRequest(f"game {number!r} is not the game in play (game {self.game.number}): reload the page")
        return self.game

    def state(self) -> dict:
        with self.lock:
            return self.view()

    def move(self, body: dict) -> dict:
        with self.lock:
            game = self._current(body)
            if "move" not in body:
                raise BadRequest('a move is {"game": N, "move": {HEAD: VALUE}}')
            try:
                move = game.check(body["move"])   # IllegalMove (a ValueError): not a move now
            except ValueError as e:
                raise BadRequest(str(e)) from None
            game.play(move)
            self._advance()
            return self.view()

    def new_game(self, body: dict) -> dict:
        with self.lock:
            game = self._current(body)
            if not game.finished:
                raise BadRequest(f"game {game.number} is not over: play it to its end first")
            self._start()
            return self.view()


class _Handler(BaseHTTPRequestHandler):
    server_version = "LeaguePlay"
    table: Table  # set on the subclass made by `serve`

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = urlparse(self.path).path
        if path in ("/", "/index.html"):
            self._send(200, PAGE.encode(), "text/html; charset=utf-8")
        elif path == "/state.json":
            self._json(200, self.table.state())
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        path = urlparse(self.path).path
        actions = {"/move": self.table.move, "/new": self.table.new_game}
        if path not in actions:
            self._send(404, b"not found", "text/plain")
            return
        try:
            self._json(200, actions[path](self._body()))
        except BadRequest as e:
            self._json(400, {"error": str(e)})
        except Exception as e:   # a bug (the agent's move not legal...): said, the server goes on
            self._json(500, {"error": f"{type(e).__name__}: {e}"})

    def _body(self) -> dict:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise BadRequest("a Content-Length that is not a number") from None
        if length > MAX_BODY:
            raise BadRequest(f"a body of {length} bytes (at most {MAX_BODY})")
        raw = self.rfile.read(length) if length > 0 else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BadRequest(f"the body is not JSON ({e})") from None
        if not isinstance(body, dict):
            raise BadRequest('the body is a JSON object: {"game": N, "move": {HEAD: VALUE}}')
        return body

    def _json(self, code: int, answer: dict) -> None:
        self._send(code, json.dumps(answer).encode(), "application/json")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        try:
            self.send_response(code)
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away mid-response

    def log_message(self, format, *args) -> None:  # quiet: the terminal shows the address only
        pass


def serve(session, title: str, port: int = 0, host: str = "127.0.0.1") -> tuple[ThreadingHTTPServer, str]:
    """The page of `session`'s games on a daemon thread; (server, url) at once, the first game
    dealt and its step compiled. `port=0`: any free port. Stop with `server.shutdown();
    server.server_close()`."""
    handler = type("PlayHandler", (_Handler,), {"table": Table(session, title)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="play", daemon=True).start()
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return server, f"http://{shown}:{server.server_address[1]}/"


def run(session, title: str, port: int, host: str = "127.0.0.1") -> int:
    """The command's --web: serves until Ctrl-C (0); 2 where the address cannot be bound."""
    import sys

    try:
        server, url = serve(session, title, port, host)
    except OSError as e:
        print(f"error: cannot serve on {host}:{port}: {e}", file=sys.stderr)
        return 2
    print(f"play {title} at {url}  (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()
        server.server_close()
        print(f"bye: {session.score()}", flush=True)
    return 0


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>play</title>
<link rel="icon" href="data:,">
<style>
  body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 46em; color: #222; }
  h1 { font-size: 1.3em; }
  pre#board { background: #f5f5f0; border: 1px solid #ddd; padding: .8em; font-size: 1.05em; }
  #moves button, #new { font-size: 1.05em; margin: .2em .4em .2em 0; padding: .35em .9em; }
  #moves button[aria-pressed="true"] { outline: 3px solid #4a7; }
  #status { font-weight: 600; }
  #reply { color: #345; }
  #result { font-size: 1.2em; font-weight: 700; }
  #error { color: #b00; }
  #played { color: #555; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
<h1 id="title">play</h1>
<p id="status">loading...</p>
<pre id="board"></pre>
<p id="reply"></p>
<div id="moves"></div>
<p id="result" hidden></p>
<p><button id="new" hidden>new game</button></p>
<p id="error" role="alert"></p>
<p id="score"></p>
<details open><summary>moves played</summary><ol id="played"></ol></details>
<script>
"use strict";
let view = null, busy = false, chosen = {};
window.playRenders = 0;

function element(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

async function call(path, body) {
  const init = body === undefined ? {cache: "no-store"}
    : {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const response = await fetch(path, init);
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || ("HTTP " + response.status));
  return answer;
}

async function send(path, body) {
  if (busy) return;
  busy = true;
  for (const b of document.querySelectorAll("button")) b.disabled = true;
  document.getElementById("error").textContent = "";
  try {
    render(await call(path, body));
  } catch (e) {
    document.getElementById("error").textContent = e.message;
    render(view);
  } finally {
    busy = false;
  }
}

function pick(head, id) {
  chosen[head] = id;
  if (view.moves.every(m => m.head in chosen)) {
    const move = chosen;
    chosen = {};
    send("/move", {game: view.game, move: move});
  } else {
    render(view);
  }
}

function render(v) {
  view = v;
  document.title = "play " + v.title;
  document.getElementById("title").textContent = "play " + v.title;
  document.getElementById("status").textContent = v.finished ? `game ${v.game} is over`
    : `game ${v.game}: you play side ${v.you}, the agent side ${v.agent}` + (v.your_turn ? ": your move" : "");
  document.getElementById("board").textContent = v.board;
  document.getElementById("reply").textContent = v.reply.length ? "the agent plays: " + v.reply.join("; ") : "";
  const moves = document.getElementById("moves");
  moves.replaceChildren();
  for (const m of v.moves) {
    const row = element("div", undefined, {class: "head", "data-head": m.head});
    if (v.moves.length > 1) row.append(element("span", m.head + ": "));
    for (const o of m.options) {
      const b = element("button", o.name, {class: "move", "data-head": m.head, "data-id": String(o.id),
                                           "aria-pressed": String(chosen[m.head] === o.id)});
      b.addEventListener("click", () => pick(m.head, o.id));
      row.append(b);
    }
    moves.append(row);
  }
  const result = document.getElementById("result");
  result.hidden = !v.finished;
  result.textContent = v.finished ? "result: " + v.result : "";
  document.getElementById("new").hidden = !v.finished;
  document.getElementById("new").disabled = false;
  document.getElementById("score").textContent = v.score;
  const played = document.getElementById("played");
  played.replaceChildren(...v.played.map(p => element("li", `${p.who}: ${p.move}`)));
  document.body.dataset.version = String(v.version);
  window.playRenders += 1;
}

document.getElementById("new").addEventListener("click", () => send("/new", {game: view.game}));
call("/state.json").then(render).catch(e => { document.getElementById("error").textContent = e.message; });
</script>
</body>
</html>
"""
