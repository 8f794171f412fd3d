"""Watching a game (issue 85, item 5): a game between two players, played on demand from a seed
by the project's one rollout (`experiments.watch`) and drawn by the game's own `Capabilities.draw`
(SMAX's battle, poker's hands, pgx's boards, nim's heap), shown by the dashboard's watch page.

Each drawing is checked against the game's own state and step, not the drawing's code: the units
alive and their health in jaxmarl's state, the cards dealt and the chips won by the game's step,
pgx's own board. The watched game is replayed here through the game's step and the players'
networks; the page is driven in Chromium from a click on a payoff-matrix cell."""

import ast
import json
import pathlib
import re
import sys
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from urllib.parse import parse_qs, quote, urlparse

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from actors.games.registry import BUILTINS, resolve
from agents.specs import MASK_KEY
from coordinator.history import LeagueHistory
from dashboard.server import serve
from experiments import agent_ref, watch
from tests.test_export import MAIN, SNAPSHOT, make_run

ROOT = pathlib.Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    """An SVG frame as XML (a frame that is not well-formed XML fails here)."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg", root.tag
    return root


def by_class(root: ET.Element, css: str) -> list[ET.Element]:
    return [e for e in root.iter() if css in (e.get("class") or "").split()]


def centre(shape: ET.Element) -> tuple[float, float]:
    """The pixel centre of a unit's shape: a circle's, a square's, a regular polygon's."""
    if shape.tag == f"{SVG}circle":
        return float(shape.get("cx")), float(shape.get("cy"))
    if shape.tag == f"{SVG}rect":
        return (float(shape.get("x")) + float(shape.get("width")) / 2,
                float(shape.get("y")) + float(shape.get("height")) / 2)
    corners = np.array([[float(v) for v in p.split(",")] for p in shape.get("points").split()])
    return tuple(corners.mean(0))


def text_of(element: ET.Element) -> str:
    return "".join(element.itertext())


def play_random(fns, key, steps: int, races=None, actions_for=None, seed: int = 0, edit=None):
    """A real game of `fns`, jitted, with random legal actions (or `actions_for(t, state, obs)`;
    `edit(t, state) -> state` changes the state before step t): (states before each step, the
    actions, what each step returned), numpy, one game."""
    step = jax.jit(fns.step)
    state, obs = jax.jit(fns.reset)(key, *([] if races is None else [jnp.asarray(races)]))
    rng = np.random.default_rng(seed)
    states, actions, returned = [], [], []
    for t in range(steps):
        if actions_for is None:
            acts = tuple({h: np.argmax(np.where(np.asarray(o[MASK_KEY][h]), rng.random(np.shape(o[MASK_KEY][h])), -1),
                                       axis=-1).astype(np.int32) for h in o[MASK_KEY]} for o in obs)
        else:
            acts = actions_for(t, jax.tree.map(np.asarray, state), obs)
        if edit is not None:
            state = edit(t, state)
            obs = fns.observe(state)
        states.append(jax.tree.map(np.asarray, state))
        actions.append(acts)
        state, obs, rewards, done, outcome, signals = step(state, jax.tree.map(jnp.asarray, acts))
        returned.append(jax.tree.map(np.asarray, (state, rewards, done, outcome, signals)))
        if bool(done):
            break
    return states, actions, returned


# -- the drawings, on real games -----------------------------------------------------------------


def test_poker_frames_show_both_hands_the_board_once_dealt_the_pot_and_the_chips_won():
    game = resolve("leduc_poker")
    fns, draw = game.functions(), game.capabilities.draw()
    ranks = "JQK"
    showdowns = 0
    for seed in range(6):
        states, actions, returned = play_random(fns, jax.random.PRNGKey(seed), 10, seed=seed)
        frames = draw.frames(fns, states, actions, int(returned[-1][3]))
        assert len(frames) == len(states) + 1      # a frame a move and the hand's end
        for s, frame in zip(states, frames):
            root = parse(frame)
            seat, cards = int(s.seat), np.asarray(s.cards)
            for side in range(2):   # side k plays OpenSpiel player seat ^ k: its private card
                (card,) = by_class(root, f"side-{side}")
                assert card.get("data-card") == ranks[cards[seat ^ side] // 2]
            (board,) = by_class(root, "board")
            if int(s.round) == 0:
                assert "face-down" in board.get("class")
            else:
                assert board.get("data-card") == ranks[cards[2] // 2]
            assert text_of(by_class(root, "pot")[0]) == f"pot {int(np.asarray(s.contrib).sum())}"
        for t, (s, a) in enumerate(zip(states, actions)):   # each move named by its side
            mover = int(s.player) ^ int(s.seat)
            verb = {0: "folds", 1: "calls", 2: "raises"}[int(a[mover]["action"])]
            assert text_of(by_class(parse(frames[t]), "caption")[0]) == f"move {t + 1}: side {mover} {verb}"
        chips = float(returned[-1][1][0])               # side 0's payoff, from the game's step
        end = text_of(by_class(parse(frames[-1]), "caption")[0])
        assert end.endswith("a split pot" if chips == 0 else f"side {0 if chips > 0 else 1} wins {abs(chips):g} chips"), end
        showdowns += "showdown" in end
    assert showdowns, "no hand of these seeds reached a showdown"


def test_smax_frames_draw_every_living_unit_with_its_health_and_the_attacks_ordered():
    game = resolve("smax_races")
    fns, draw = game.functions(), game.capabilities.draw()
    n, menu = fns.n, fns.config.menu

    def orders(t, state, obs):
        # step 0 picks the armies (terran's second, zerg's first); then every unit attacks the
        # enemy slot of its own index, alternate units every other step
        if t == 0:
            return ({"composition": np.int32(1), "action_type": np.zeros(n, np.int32), "target": np.zeros(n, np.int32)},
                    {"composition": np.int32(0), "action_type": np.zeros(n, np.int32), "target": np.zeros(n, np.int32)})
        kinds = np.where((np.arange(n) + t) % 2 == 0, 5, 1).astype(np.int32)    # attack, or move east
        return tuple({"composition": np.int32(0), "action_type": kinds, "target": np.arange(n, dtype=np.int32)[::-1]
                      if side else np.arange(n, dtype=np.int32)} for side in range(2))

    def closer(t, state):   # after the armies spawn, zerg's stands 3 units east of terran's: they fight
        if t != 1:
            return state
        positions = state.smax.unit_positions
        positions = positions.at[n:].set(positions[:n][::-1] + jnp.array([3.0, 0.0]))
        return state.replace(smax=state.smax.replace(unit_positions=positions))

    states, actions, returned = play_random(fns, jax.random.PRNGKey(4), 4, races=np.array([0, 2]), actions_for=orders,
                                            edit=closer)
    assert not bool(returned[-1][2]), "the battle ended within 4 steps"
    frames = draw.frames(fns, states, actions, 0)
    assert len(frames) == len(states) + 1
    armies = (menu[0][1], menu[2][0])   # terran's marauders, zerg's zerglings
    for t, frame in enumerate(frames):
        root = parse(frame)
        army_lines = [text_of(e) for e in by_class(root, "army")]
        for side in range(2):
            assert f"{armies[side].name} army" in army_lines[side], army_lines
        # the state drawn: before step t, and the last frame the one the last step returned
        smax = states[t].smax if t < len(states) else returned[-1][0].smax
        alive, types, health = (np.asarray(x) for x in (smax.unit_alive, smax.unit_types, smax.unit_health))
        units = by_class(root, "unit")
        assert len(units) == int(alive.sum())
        for side in range(2):
            mine = alive & ((np.arange(2 * n) >= n) == side)
            drawn = sorted(u.get("data-type") for u in units if u.get("data-side") == str(side))
            assert drawn == sorted(["marine", "marauder", "stalker", "zealot", "zergling", "hydralisk"][k]
                                   for k in types[mine])
            assert sorted(float(u.get("data-health")) for u in units if u.get("data-side") == str(side)) == \
                pytest.approx(sorted(health[mine].tolist()), abs=0.06)
        positions = np.asarray(smax.unit_positions)[alive]
        drawn = np.array([[float(v) for v in u.get("data-position").split(",")] for u in units]).reshape(-1, 2)
        np.testing.assert_allclose(drawn, positions, atol=0.006)
        # on the map: pixels an affine image of the positions, x to the right, y up
        for axis, sign in ((0, 1), (1, -1)) if len(units) > 1 else ():
            pixels = np.array([centre(u[0])[axis] for u in units])
            slope, offset = np.polyfit(positions[:, axis], pixels, 1)
            assert sign * slope > 5 and np.abs(slope * positions[:, axis] + offset - pixels).max() < 0.6
        for u in units:   # the health bar: the unit's share of its type's health
            back, bar = [e for e in u.iter() if e.tag == f"{SVG}rect"][-2:]
            kind = ["marine", "marauder", "stalker", "zealot", "zergling", "hydralisk"].index(u.get("data-type"))
            share = float(u.get("data-health")) / float(fns.env.unit_type_health[kind])
            assert float(bar.get("width")) == pytest.approx(share * float(back.get("width")), abs=0.15)
        if 0 < t < len(states):   # an attack line for every unit ordered to attack a living enemy
            expected = 0
            for side in range(2):
                kinds, targets = actions[t][side]["action_type"], actions[t][side]["target"]
                for k in range(n):
                    enemy = n + targets[k] if side == 0 else n - 1 - targets[k]
                    expected += bool(kinds[k] == 5 and alive[side * n + k] and alive[enemy])
            assert expected and len(by_class(root, "attack")) == expected
    hurt = np.asarray(returned[-1][0].smax.unit_health) < fns.env.unit_type_health[returned[-1][0].smax.unit_types]
    assert (hurt & np.asarray(returned[-1][0].smax.unit_alive)).any(), "no unit was hurt: the bars are not tested"
    assert text_of(by_class(parse(frames[0]), "caption")[0]).startswith("step 0: each side picks its army")


def test_pgx_and_nim_frames_draw_their_boards_move_by_move():
    game = resolve("pgx/tic_tac_toe")
    fns, draw = game.functions(), game.capabilities.draw()
    states, actions, returned = play_random(fns, jax.random.PRNGKey(2), 9)
    frames = draw.frames(fns, states, actions, int(returned[-1][3]))
    assert len(frames) == len(states) + 1
    for t, (s, a) in enumerate(zip(states, actions)):
        root = parse(frames[t])
        side = int(s.game.current_player)
        cell = int(a[side]["action"])
        assert text_of(by_class(root, "caption")[0]) == f"move {t + 1}: side {side} plays row {cell // 3 + 1} column {cell % 3 + 1}"
        (board,) = by_class(root, "board")   # pgx's own SVG of the board
        assert board[0].tag == f"{SVG}svg" and len(list(board[0].iter())) > 10
    outcome = int(returned[-1][3])
    assert text_of(by_class(parse(frames[-1]), "caption")[0]).endswith(
        {1: "side 0 won", -1: "side 1 won", 0: "a draw"}[outcome])
    # the end: pgx's board after the last move, by pgx itself
    last = states[-1].game
    move = int(actions[-1][int(last.current_player)]["action"])
    after = fns.env.step(jax.tree.map(jnp.asarray, last), jnp.int32(move), jax.random.PRNGKey(0))
    (board,) = by_class(parse(frames[-1]), "board")
    assert ET.tostring(board[0]) == ET.tostring(ET.fromstring(jax.tree.map(np.asarray, after).to_svg()))

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        game = resolve("nim:make")
        fns, draw = game.functions(), game.capabilities.draw()
        states, actions, returned = play_random(fns, jax.random.PRNGKey(0), 20)
        frames = draw.frames(fns, states, actions, int(returned[-1][3]))
        for s, frame in zip(states, frames):
            assert len(by_class(parse(frame), "stone")) == int(s.stones)
        assert text_of(parse(frames[-1])).startswith(f"side {int(states[-1].player)} took the last stone")
    finally:
        sys.path.remove(str(ROOT / "examples"))


# -- the generic watch ----------------------------------------------------------------------------

WATCH_FILES = ("experiments/watch.py", "dashboard/watch.py", "dashboard/static/watch.js",
               "dashboard/static/watch.html")


def test_the_watch_names_no_game_and_imports_none():
    words = {*BUILTINS, "smax", "poker", "kuhn", "leduc", "pgx", "nim", "jaxmarl", "openspiel", "terran",
             "protoss", "zerg", "chess", "tic_tac_toe", "matrix_", "matrix game"}
    for path in WATCH_FILES:
        text = (ROOT / path).read_text().lower()
        named = sorted(w for w in words if re.search(rf"\b{re.escape(w)}", text))
        assert not named, f"{path} names games: {named}; reach them through Capabilities.draw"
    for path in ("experiments/watch.py", "dashboard/watch.py", "dashboard/server.py"):
        tree = ast.parse((ROOT / path).read_text())
        imported = {n.name for node in ast.walk(tree) if isinstance(node, ast.Import) for n in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        games = sorted(m for m in imported if m.startswith("actors.games") and m not in (
            "actors.games.base", "actors.games.registry"))
        assert not games, f"{path} imports game modules: {games}"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A hand-made Leduc run (tests/test_export.py's): a main agent and its snapshot, with a few
    games between them in league.db so that the payoff matrix has cells to click."""
    path = tmp_path_factory.mktemp("watch") / "run"
    make_run(path, game="leduc_poker")
    history = LeagueHistory(str(path))
    history.add_games([{"home": MAIN, "away": SNAPSHOT, "outcome": o} for o in ("win", "loss", "win")])
    history.close()
    return str(path)


def test_the_watched_game_is_the_players_game_as_the_game_replays_it(run_dir):
    home, away = (agent_ref.resolve(f"{run_dir}:{p}") for p in (MAIN, SNAPSHOT))
    fns = resolve("leduc_poker").functions()
    game_step, observe, network_step = jax.jit(fns.step), jax.jit(fns.observe), jax.jit(home.network.step)
    for seed in range(2):
        states, actions, result = watch.play_one_game(fns, (home.network, away.network), (home.params, away.params),
                                                      seed, greedy=True)
        # the game's own step from the first state, with these actions, gives the states kept and the result
        state = jax.tree.map(jnp.asarray, states[0])
        for t, acts in enumerate(actions):
            state, obs, rewards, done, outcome, _ = game_step(state, jax.tree.map(jnp.asarray, acts))
            if t + 1 < len(states):
                assert not bool(done)
                jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, state), states[t + 1])
        assert bool(done) and result == {"outcome": int(outcome), "score": float(rewards[0]), "ended": True}
        # each side's moves are its own player's most likely ones, its network stepped on every step
        for side, agent in enumerate((home, away)):
            core = agent.network.initial_state(1)
            for t, s in enumerate(states):
                seen = jax.tree.map(lambda x: x[None], observe(jax.tree.map(jnp.asarray, s))[side])
                out, core = network_step(agent.params, seen, core, np.array([t == 0]))
                if bool(seen["acting"][0]):
                    logits = np.where(np.asarray(seen[MASK_KEY]["action"][0]), np.asarray(out.logits["action"][0]), -np.inf)
                    assert int(actions[t][side]["action"]) == int(np.argmax(logits)), (seed, side, t)
    watched = watch.watch(run_dir, MAIN, SNAPSHOT, seed=5)
    assert (watched.home, watched.away, watched.game, watched.seed) == (MAIN, SNAPSHOT, "leduc_poker", 5)
    assert len(watched.frames) == watched.steps + 1 and watched.ended
    assert watch.watch(run_dir, MAIN, SNAPSHOT, seed=5).frames == watched.frames   # a seed is a game
    deals = {tuple(by_class(parse(watch.watch(run_dir, MAIN, SNAPSHOT, seed=s).frames[0]), "private")[k].get("data-card")
                   for k in range(2)) for s in range(4)}
    assert len(deals) > 1


def get(url):
    """(status, JSON body) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def answer(url, timeout_s: float = 120.0):
    """The watch server's final answer to `url` (asked again while it says 202)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, body = get(url)
        if status != 202 or time.monotonic() > deadline:
            return status, body
        time.sleep(0.2)


def test_the_server_says_why_a_game_cannot_be_watched(run_dir, tmp_path):
    matrix = tmp_path / "matrix"
    make_run(matrix, game="matrix_rps")
    with pytest.raises(watch.NotDrawn, match="matrix_rps is not drawn: its Capabilities has no draw"):
        watch.watch(str(matrix), MAIN, SNAPSHOT)
    servers = [serve(str(matrix), 0, watch=watch.watch), serve(run_dir, 0, watch=watch.watch), serve(run_dir, 0)]
    try:
        (_, not_drawn), (_, served), (_, without) = servers
        status, body = answer(f"{not_drawn}watch.json?home={MAIN}&away={quote(SNAPSHOT)}&seed=0")
        assert status == 404 and "is not drawn: its Capabilities has no draw" in body["message"]
        status, body = answer(f"{served}watch.json?home=nobody&away={quote(SNAPSHOT)}&seed=0")
        assert status == 404 and "has no player 'nobody'" in body["message"]
        assert get(f"{served}watch.json?home={MAIN}&seed=0")[0] == 400
        assert get(f"{served}watch.json?home={MAIN}&away={MAIN}&seed=-1")[0] == 400
        status, body = get(f"{without}watch.json?home={MAIN}&away={quote(SNAPSHOT)}&seed=0")
        assert status == 501 and "plays no games" in body["message"]
        status, body = answer(f"{served}watch.json?home={MAIN}&away={quote(SNAPSHOT)}&seed=2")
        assert status == 200 and body["frames"] == watch.watch(run_dir, MAIN, SNAPSHOT, seed=2).frames
    finally:
        for server, _ in servers:
            server.shutdown()
            server.server_close()


# -- the page, in Chromium ----------------------------------------------------------------------


@pytest.mark.system
def test_a_click_on_a_payoff_cell_shows_its_players_game_frame_by_frame(run_dir):
    from tests.browser import BrowserMissing, Tab, chromium, find_chromium, open_watch

    try:
        find_chromium()
    except BrowserMissing as e:
        pytest.fail(str(e))  # the browser tests are part of CI: a missing browser is a failure
    expected = watch.watch(run_dir, MAIN, SNAPSHOT, seed=0).frames
    server, url = serve(run_dir, 0, watch=watch.watch)
    try:
        with chromium() as browser, Tab(browser) as tab:
            tab.load(url)
            # the cell of row MAIN, column SNAPSHOT (display order: the main agent, then its snapshot)
            x, y = tab.page.evaluate("""([home, away]) => {
                const gd = document.getElementById("chart-payoff"), L = gd._fullLayout, box = gd.getBoundingClientRect();
                const cells = gd.data[0].customdata;   // [games, wins, draws, losses, row id, column id]
                const row = cells.findIndex((r) => r[0][4] === home), col = cells[row].findIndex((c) => c[5] === away);
                return [box.left + L._size.l + L.xaxis.l2p(col), box.top + L._size.t + L.yaxis.l2p(row)];
            }""", [MAIN, SNAPSHOT])
            with tab.context.expect_page() as opened:
                tab.page.mouse.click(x, y)
            watched = Tab.opened(tab, opened.value)
            page = watched.page
            page.wait_for_load_state()
            assert urlparse(page.url).path == "/watch"
            assert parse_qs(urlparse(page.url).query) == {"home": [MAIN], "away": [SNAPSHOT], "seed": ["0"]}
            watched.wait_for("window.watchReady || window.watchError", 120, polling_ms=200)
            assert page.evaluate("window.watchError") is None
            assert page.evaluate("window.watchFrames") == len(expected)
            page.evaluate("pause(); showFrame(0)")
            captions = []
            for k in range(len(expected)):   # stepped through with the page's own button
                assert page.text_content("#frame-number") == f"frame {k + 1} / {len(expected)}"
                shown = page.evaluate("""(() => { const svg = document.querySelector("#frame svg");
                    return {cards: [...svg.querySelectorAll(".card.private")].map((c) => c.dataset.card),
                            caption: svg.querySelector(".caption").textContent}; })()""")
                root = parse(expected[k])
                assert shown["cards"] == [c.get("data-card") for c in by_class(root, "private")]
                captions.append(shown["caption"])
                assert shown["caption"] == text_of(by_class(root, "caption")[0])
                page.click("#next")
            assert captions[-1].startswith("the end")
            assert MAIN in page.text_content("#watch-result") and SNAPSHOT in page.text_content("#watch-result")
            assert watched.console_errors == [] and tab.console_errors == []
            # a player the run does not have: the page says so
            open_watch(tab, f"{url}watch?home=nobody&away={quote(SNAPSHOT)}&seed=0", 60)
            assert "has no player 'nobody'" in tab.page.evaluate("window.watchError")
            assert "has no player 'nobody'" in tab.text("watch-message")
    finally:
        server.shutdown()
        server.server_close()
