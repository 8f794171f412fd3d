"""Exporting an agent (issue 85): `experiments.export AGENT --out=F` writes one file,
`agents.load_policy(F)` plays it in a fresh process with no run directory, `experiments.nashconv
--params=F` measures it from the file alone, and a wrong name or a damaged, truncated or foreign
file is refused (exit 2, nothing written).

Each check is against what the export does not compute itself: the run's own network and
parameters (`player_params`, `build.make_network`) in this process, the run directory's NashConv
(`nashconv.RunReader`), the file's bytes on disk."""

import hashlib
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import agents
from actors.games.poker import openspiel as poker
from actors.games.poker import policy as poker_policy
from agents import exported
from coordinator.history import LeagueHistory
from coordinator.param_store import ParamStore, player_params
from experiments import agent_ref, build, export, nashconv
from experiments.config import RunConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = "any_main_agent_0"
SNAPSHOT = "any_main_agent_0#0"


def make_run(run_dir, game="kuhn_poker", scale=3.0, **settings):
    """A hand-made run directory: config.json, league.db's players, a learning main agent's
    checkpoint and a frozen snapshot in params/ (parameters far from uniform: scaled up)."""
    from learners import checkpoint

    config = RunConfig.make(game=game, races=1, runner="inprocess", run_dir=str(run_dir),
                            hidden_size=16, core_size=16, **settings)
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config.to_dict(), f)
    spec = config.game_info.functions().spec
    network = build.make_network(config, spec)
    p_main, p_snap = [jax.tree_util.tree_map(lambda x: x * scale, build.initial_params(network, spec, i, 3))
                      for i in (0, 1)]
    history = LeagueHistory(str(run_dir))
    history.add_player(MAIN, "main_agent", "any", None, 0, 1.0)
    history.add_player(SNAPSHOT, "main_agent", "any", MAIN, 10, 2.0)
    history.close()
    ParamStore(str(run_dir)).save(SNAPSHOT, p_snap, 5)
    checkpoint.save(checkpoint.path(str(run_dir), MAIN), checkpoint.Checkpoint(9, 0, 0, p_main, {}))
    return config, network


@pytest.fixture(scope="module")
def kuhn_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("export") / "run"
    make_run(run_dir)
    return str(run_dir)


def kuhn_batches(network):
    """Two steps of observations, as the actor feeds them: every Kuhn deal's first decision for
    side 0, then the decisions one step later for side 1 (with the history each came from)."""
    walk = poker_policy.PolicyWalk(poker.load_game("kuhn_poker"), network)
    first, second = walk.levels[0], walk.levels[1]
    return first["obs"][0], second["obs"][1], second["parents"]


def reference_probabilities(network, params, obs0, obs1, parents):
    """The run's network with the run's parameters, stepped in this process."""
    n = len(parents)
    out0, state = network.step(params, obs0, network.initial_state(len(obs0["acting"])), np.ones(len(obs0["acting"]), bool))
    state = jax.tree_util.tree_map(lambda x: x[parents], state)
    out1, _ = network.step(params, obs1, state, np.zeros(n, bool))
    return [np.asarray(jax.nn.softmax(o.logits["action"], axis=-1)) for o in (out0, out1)]


FRESH = """
import functools, sys
import jax, numpy as np
import agents
policy = agents.load_policy(sys.argv[1])
d = np.load(sys.argv[2], allow_pickle=False)
def obs(i):
    return {"info_state": d[f"info_state{i}"], "acting": d[f"acting{i}"], "action_mask": {"action": d[f"mask{i}"]}}
p0, state = policy.probabilities(obs(0))
state = jax.tree_util.tree_map(lambda x: x[d["parents"]], state)
p1, _ = policy.probabilities(obs(1), state, np.zeros(len(d["parents"]), bool))
greedy, _ = jax.jit(functools.partial(policy.act, greedy=True))(obs(1), jax.random.PRNGKey(0), state)
sampled, _ = jax.jit(policy.act)(obs(1), jax.random.PRNGKey(1), state)
np.savez(sys.argv[3], p0=p0["action"], p1=p1["action"], greedy=greedy["action"], sampled=sampled["action"])
print("game", policy.game, "player", policy.source["player_id"], "version", policy.source["version"])
"""


def fresh_process_probabilities(tmp_path, file, obs0, obs1, parents):
    """The exported file played by `agents.load_policy` in a new Python process that imports
    neither the run's config nor its game (only numpy, jax, agents)."""
    batches = tmp_path / "obs.npz"
    np.savez(batches, parents=parents, **{f"{k}{i}": v for i, o in enumerate((obs0, obs1))
                                          for k, v in (("info_state", o["info_state"]), ("acting", o["acting"]),
                                                       ("mask", o["action_mask"]["action"]))})
    out = tmp_path / "fresh.npz"
    done = subprocess.run([sys.executable, "-c", FRESH, str(file), str(batches), str(out)],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                          env={**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, dict(np.load(out))


def check_round_trip(tmp_path, run_dir, player, file):
    """Exports `player` of `run_dir` to `file`; a fresh process's probabilities and actions
    equal the run's network's with the run's parameters; returns the run's parameters."""
    assert export.cli([f"{run_dir}:{player}"], str(file)) == 0
    config = agent_ref.run_config(run_dir)
    network = build.make_network(config, config.game_info.functions().spec)
    version, params = player_params(run_dir, player)
    obs0, obs1, parents = kuhn_batches(network)
    want0, want1 = reference_probabilities(network, params, obs0, obs1, parents)
    stdout, got = fresh_process_probabilities(tmp_path, file, obs0, obs1, parents)
    assert f"player {player} version {version}" in stdout
    np.testing.assert_allclose(got["p0"], want0, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["p1"], want1, rtol=0, atol=1e-6)
    assert np.abs(want1 - want0[parents]).max() > 1e-3   # the second step's probabilities differ
    np.testing.assert_array_equal(got["greedy"], want1.argmax(-1))
    legal = obs1["action_mask"]["action"]
    assert legal[np.arange(len(parents)), got["sampled"]].all()
    return params


def test_an_exported_agent_plays_in_a_fresh_process_as_in_its_run(kuhn_run, tmp_path):
    file = tmp_path / "main.agent.npz"
    params = check_round_trip(tmp_path, kuhn_run, MAIN, file)
    header, read = exported.read(str(file))
    assert header["format"] == "league-agent" and header["format_version"] == exported.VERSION
    assert header["game"]["name"] == "kuhn_poker"
    assert header["source"]["run_dir"] == os.path.abspath(kuhn_run) and header["source"]["version"] == 9
    assert header["source"]["role"] == "main_agent" and header["source"]["exported_at"]
    for a, b in zip(jax.tree_util.tree_leaves(read), jax.tree_util.tree_leaves(params), strict=True):
        np.testing.assert_array_equal(a, b)
    # Any numpy reads it: an npz with a JSON header, no pickle.
    with np.load(file, allow_pickle=False) as npz:
        assert json.loads(npz["header.json"])["format"] == "league-agent"
    # A frozen snapshot exports as well, and an exported file names an agent as a run's player does.
    snap = tmp_path / "snapshot.agent.npz"
    assert export.cli([f"{kuhn_run}:{SNAPSHOT}"], str(snap)) == 0
    assert exported.read(str(snap))[0]["source"]["version"] == 5
    again = tmp_path / "again.agent.npz"
    assert export.cli([str(file)], str(again)) == 0
    assert exported.read(str(again))[0]["source"] == header["source"]


def test_nashconv_of_an_exported_file_is_the_runs_reading(kuhn_run, tmp_path, capsys):
    file = tmp_path / "main.agent.npz"
    assert export.cli([f"{kuhn_run}:{MAIN}"], str(file)) == 0
    run = nashconv.RunReader(kuhn_run)
    want = run.measure_player(MAIN).nash_conv
    game, got, _ = nashconv.measure_agent(str(file))
    assert game == "kuhn_poker" and got == pytest.approx(want, abs=1e-6)
    assert abs(want - run.measure_player(SNAPSHOT).nash_conv) > 1e-3   # another player reads otherwise
    # The command, from the file alone: no --game, no --loader, no run directory.
    os.rename(os.path.join(kuhn_run, "config.json"), os.path.join(kuhn_run, "config.json.away"))
    try:
        done = subprocess.run([sys.executable, "-m", "experiments.nashconv", f"--params={file}"], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
    finally:
        os.rename(os.path.join(kuhn_run, "config.json.away"), os.path.join(kuhn_run, "config.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "game=kuhn_poker" in done.stdout
    assert float(done.stdout.strip().splitlines()[-1]) == pytest.approx(want, abs=1e-6)


def damaged_copies(file, tmp_path):
    data = file.read_bytes()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01
    flipped_file = tmp_path / "flipped.npz"
    flipped_file.write_bytes(bytes(flipped))
    png = tmp_path / "picture.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    plain = tmp_path / "plain.npz"
    np.savez(plain, weights=np.ones(3))
    return {truncated: "truncated", flipped_file: "checksum does not match", png: "not an npz",
            plain: "without the header"}


def test_a_damaged_truncated_or_foreign_file_is_refused(kuhn_run, tmp_path, capsys):
    file = tmp_path / "main.agent.npz"
    assert export.cli([f"{kuhn_run}:{MAIN}"], str(file)) == 0
    for bad, why in damaged_copies(file, tmp_path).items():
        before = hashlib.sha256(bad.read_bytes()).hexdigest()
        with pytest.raises(agents.ExportedFileError, match=why) as e:
            agents.load_policy(str(bad))
        assert str(bad) in str(e.value) and isinstance(e.value, ValueError)
        out = tmp_path / "out.npz"
        capsys.readouterr()
        assert export.cli([str(bad)], str(out)) == 2
        err = capsys.readouterr().err
        assert why in err and str(bad) in err, err
        assert not out.exists() and hashlib.sha256(bad.read_bytes()).hexdigest() == before
        assert not [p for p in os.listdir(tmp_path) if ".tmp." in p]
    # Any byte changed anywhere (the zip's own fields too, which its CRCs do not cover).
    data = file.read_bytes()
    for position in [*range(0, len(data), max(1, len(data) // 150)), len(data) - 1]:
        changed = bytearray(data)
        changed[position] ^= 0x20
        (tmp_path / "changed.npz").write_bytes(bytes(changed))
        with pytest.raises(agents.ExportedFileError):
            exported.read(str(tmp_path / "changed.npz"))
    # The programs: exit 2 and the reason, nothing written.
    flipped = tmp_path / "flipped.npz"
    for command in (["experiments.export", str(flipped), f"--out={tmp_path / 'out.npz'}"],
                    ["experiments.nashconv", f"--params={flipped}"]):
        done = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 2 and "checksum does not match" in done.stderr, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "out.npz").exists()


def test_format_versions_newer_refused_older_upgraded(kuhn_run, tmp_path, monkeypatch):
    _, params = player_params(kuhn_run, MAIN)
    agent = agent_ref.resolve(f"{kuhn_run}:{MAIN}")
    description = export.header(agent)
    newer = tmp_path / "newer.npz"
    monkeypatch.setattr(exported, "VERSION", exported.VERSION + 1)
    exported.write(str(newer), params, description)
    monkeypatch.undo()
    with pytest.raises(agents.ExportedFileError, match=f"format version {exported.VERSION + 1}, newer than"):
        agents.load_policy(str(newer))
    # A file of this version, read by a later version: through its upgrade, or refused saying why.
    current = tmp_path / "current.npz"
    exported.write(str(current), params, description)
    monkeypatch.setattr(exported, "VERSION", exported.VERSION + 1)
    with pytest.raises(agents.ExportedFileError, match=f"format version {exported.VERSION - 1} can no longer"):
        exported.read(str(current))
    upgraded = []
    monkeypatch.setattr(exported, "_UPGRADES", {exported.VERSION - 1: lambda h: upgraded.append(h) or h})
    header, _ = exported.read(str(current))
    assert upgraded and header["source"] == description["source"]


def test_a_wrong_name_exits_2_and_lists_the_players(kuhn_run, tmp_path, capsys):
    out = tmp_path / "out.npz"
    cases = {f"{kuhn_run}:nobody": ["has no player 'nobody'", MAIN, SNAPSHOT],
             f"{tmp_path / 'missing'}:{MAIN}": ["no such run directory"],
             f"{tmp_path}:{MAIN}": ["not a league run directory"],
             str(tmp_path / "missing.npz"): ["no such file"],
             kuhn_run: ["is a directory", f"{kuhn_run}:any_main_agent_0"],
             f"{kuhn_run}:result": ["not named yet", MAIN]}
    for name, words in cases.items():
        capsys.readouterr()
        assert export.cli([name], str(out)) == 2, name
        err = capsys.readouterr().err
        assert all(w in err for w in words), err
        with pytest.raises(agent_ref.AgentNameError):
            agent_ref.resolve(name)
    assert export.cli([f"{kuhn_run}:{MAIN}"], None) == 2
    assert not out.exists()
    done = subprocess.run([sys.executable, "-m", "experiments.export", f"{kuhn_run}:nobody", f"--out={out}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and MAIN in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not out.exists()


GAME_OBS = """
import sys, numpy as np, agents
policy = agents.load_policy(sys.argv[1])
d = np.load(sys.argv[2], allow_pickle=False)
obs = {k: d[k] for k in d.files if not k.startswith("mask.")}
obs["action_mask"] = {k[5:]: d[k] for k in d.files if k.startswith("mask.")}
probs, _ = policy.probabilities(obs)
np.savez(sys.argv[3], **probs)
print("modules:", " ".join(sorted(m for m in sys.modules if m in ("nim", "pgx", "actors", "experiments"))))
"""


@pytest.mark.parametrize("game", ["nim:make", "pgx/tic_tac_toe"])
def test_a_game_of_ones_own_or_pgx_exports_and_plays_without_its_code(game, tmp_path, monkeypatch):
    """examples/nim.py (`--game=nim:make`) and a pgx game: the file plays, in a process that
    imports neither the game nor the league's game code, as the run's network does on the
    game's own observations."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "examples"))
    run_dir = tmp_path / "run"
    config, network = make_run(run_dir, game=game)
    file = tmp_path / "agent.npz"
    assert export.cli([f"{run_dir}:{MAIN}"], str(file)) == 0
    header, _ = exported.read(str(file))
    assert header["game"]["name"] == game
    if game == "nim:make":
        assert header["game"]["module_path"] == os.path.join(ROOT, "examples", "nim.py")
    functions = config.game_info.functions()
    _, (obs, _) = jax.vmap(functions.reset)(jax.random.split(jax.random.PRNGKey(0), 16))
    obs = jax.tree_util.tree_map(np.asarray, obs)
    _, params = player_params(str(run_dir), MAIN)
    out, _ = network.step(params, obs, network.initial_state(16), np.ones(16, bool))
    want = {h: np.asarray(jax.nn.softmax(x, axis=-1)) for h, x in out.logits.items()}
    np.savez(tmp_path / "obs.npz", **{k: v for k, v in obs.items() if k != "action_mask"},
             **{f"mask.{h}": m for h, m in obs["action_mask"].items()})
    done = subprocess.run([sys.executable, "-c", GAME_OBS, str(file), str(tmp_path / "obs.npz"),
                           str(tmp_path / "p.npz")], capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "modules:", done.stdout   # no game code was imported
    got = dict(np.load(tmp_path / "p.npz"))
    assert set(got) == set(want)
    for h in want:
        np.testing.assert_allclose(got[h], want[h], rtol=0, atol=1e-6)
        legal = obs["action_mask"][h]
        assert (got[h][~legal] == 0).all() and np.abs(got[h][legal] - 1 / legal.sum(-1).max()).max() > 1e-3
    # Another game's agent has no NashConv.
    with pytest.raises(agent_ref.AgentNameError, match="needs a poker agent"):
        nashconv.measure_agent(str(file))


@pytest.mark.system
def test_a_short_kuhn_league_s_main_agent_round_trips(tmp_path):
    """A real league's main agent (its learner checkpoint after a short run), exported and
    played in a fresh process; its NashConv from the file is the run directory's."""
    run_dir = tmp_path / "run"
    league = subprocess.run(
        [sys.executable, "-m", "experiments.league", "--game=kuhn_poker", "--runner=inprocess",
         f"--run_dir={run_dir}", "--minutes=0.3", "--dashboard_port=-1", "--hidden_size=16", "--core_size=16",
         "--device.population=true", "--progress_every_seconds=5"],
        cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert league.returncode == 0, league.stdout[-2000:] + league.stderr[-2000:]
    file = tmp_path / "main.agent.npz"
    check_round_trip(tmp_path, str(run_dir), MAIN, file)
    done = subprocess.run([sys.executable, "-m", "experiments.nashconv", f"--params={file}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    want = nashconv.RunReader(str(run_dir)).measure_player(MAIN).nash_conv
    assert float(done.stdout.strip().splitlines()[-1]) == pytest.approx(want, abs=1e-6)


THIRD = "any_main_agent_0#1"


def make_nash_run(run_dir, weights):
    """`make_run` with a third player (another frozen snapshot) and the league's Nash weights
    over the players in league.db (an older publication first: the latest one counts)."""
    config, network = make_run(run_dir)
    spec = config.game_info.functions().spec
    params = jax.tree_util.tree_map(lambda x: x * 5.0, build.initial_params(network, spec, 2, 9))
    history = LeagueHistory(str(run_dir))
    history.add_player(THIRD, "main_agent", "any", MAIN, 20, 3.0)
    history.add_nash({MAIN: 1.0}, when=100.0)
    history.add_nash(weights, when=200.0)
    history.close()
    ParamStore(str(run_dir)).save(THIRD, params, 7)
    return config, network


def test_the_runs_agent_is_its_nash_mixture_exported_with_its_members(tmp_path, capsys):
    """RUN_DIR:result of a Kuhn run: the league's latest Nash mixture; its file lists the members
    and weights, its NashConv from the file is the run's `--mixture=nash` reading (which a
    dropped member or other weights miss), and its policy plays one member per game."""
    run_dir = tmp_path / "run"
    weights = {MAIN: 0.2, SNAPSHOT: 0.5, THIRD: 0.3}
    make_nash_run(run_dir, weights)
    file = tmp_path / "result.agent.npz"
    assert export.cli([f"{run_dir}:result"], str(file)) == 0
    header, params = exported.read(str(file))
    assert header["format_version"] == exported.VERSION and header["source"]["player_id"] == "result"
    members = [(m["source"]["player_id"], m["weight"], m["source"]["version"]) for m in header["mixture"]]
    assert members == [(MAIN, 0.2, 9), (SNAPSHOT, 0.5, 5), (THIRD, 0.3, 7)]
    for (player, _, _), got in zip(members, params, strict=True):
        want = player_params(str(run_dir), player)[1]
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
            np.testing.assert_array_equal(a, b)
    run = nashconv.RunReader(str(run_dir))
    reading = run.measure("nash")
    assert reading.weights == weights
    game, got, agent = nashconv.measure_agent(str(file))
    assert game == "kuhn_poker" and agent.weights == pytest.approx([0.2, 0.5, 0.3])
    assert got == pytest.approx(reading.nash_conv, abs=1e-6)
    # What a dropped member or swapped weights would read: another value.
    kuhn = poker.load_game("kuhn_poker")
    tables = {p: run.policy(p) for p in weights}
    for other in ({MAIN: 0.2, SNAPSHOT: 0.5}, {MAIN: 0.5, SNAPSHOT: 0.2, THIRD: 0.3}, {THIRD: 1.0}):
        ids = sorted(other)
        value = poker.nash_conv(kuhn, poker_policy.mix_policies(kuhn, [tables[p] for p in ids], [other[p] for p in ids]))
        assert abs(value - reading.nash_conv) > 1e-3, other
    # The command, from the file alone.
    capsys.readouterr()
    done = subprocess.run([sys.executable, "-m", "experiments.nashconv", f"--params={file}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.strip().splitlines()[-1]) == pytest.approx(reading.nash_conv, abs=1e-6)
    assert THIRD in done.stdout
    # The policy: one member per game, drawn by the weights, kept for the game's later steps.
    policy = agents.load_policy(str(file))
    assert policy.mixture and policy.weights == pytest.approx([0.2, 0.5, 0.3])
    network = policy.network
    obs0, obs1, parents = kuhn_batches(network)
    b = len(obs0["acting"])
    reps = 400
    big0 = jax.tree_util.tree_map(lambda x: np.concatenate([x] * reps), obs0)
    _, state = policy.act(big0, jax.random.PRNGKey(3), first=np.ones(b * reps, bool))
    counts = np.bincount(np.asarray(state.member), minlength=3) / (b * reps)
    np.testing.assert_allclose(counts, [0.2, 0.5, 0.3], atol=0.03)
    state0 = jax.tree_util.tree_map(lambda x: x[:b], state)
    state1 = jax.tree_util.tree_map(lambda x: np.asarray(x)[parents], state0)
    probs1, after = policy.probabilities(obs1, state1, np.zeros(len(parents), bool))
    _, kept = policy.act(obs1, jax.random.PRNGKey(4), state1, np.zeros(len(parents), bool))
    np.testing.assert_array_equal(kept.member, state1.member)
    for k, (player, _, _) in enumerate(members):
        rows = np.flatnonzero(np.asarray(state1.member) == k)
        want = reference_probabilities(network, player_params(str(run_dir), player)[1], obs0, obs1, parents)[1]
        np.testing.assert_allclose(np.asarray(probs1["action"])[rows], want[rows], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="members'"):
        policy.probabilities(obs0)
    # A version 1 file (one agent) still loads.
    old = tmp_path / "v1.npz"
    single = agent_ref.resolve(f"{run_dir}:{MAIN}")
    description = export.header(single)
    original = exported.VERSION
    exported.VERSION = 1
    try:
        exported.write(str(old), single.params, description)
    finally:
        exported.VERSION = original
    assert exported.read(str(old))[0]["format_version"] == 1
    assert agents.load_policy(str(old)).source["player_id"] == MAIN


def test_the_runs_agent_is_the_nash_mixture_its_newest_exact_reading_found_less_exploitable(tmp_path):
    """RUN_DIR:result of a poker run: the average of the published mixtures over the frozen
    players when the evaluator's newest readings put it below the latest mixture, the latest
    otherwise (and before any reading). The average worked by hand: the first publication
    ({MAIN: 1}) has no weight on a frozen player; the second's frozen part (0.5, 0.3)
    renormalised is (0.625, 0.375)."""
    run_dir = tmp_path / "run"
    weights = {MAIN: 0.2, SNAPSHOT: 0.5, THIRD: 0.3}
    make_nash_run(run_dir, weights)
    agent = agent_ref.resolve(f"{run_dir}:result")
    assert agent.source["mixture"] == "nash" and "not measured yet" in agent.source["chosen"]
    assert agent.weights == pytest.approx([0.2, 0.5, 0.3])
    history = LeagueHistory(str(run_dir))
    history.add_exploitability({"nash": 0.30, "nash_average": 0.25, MAIN: 1.0}, when=300.0)
    history.close()
    agent = agent_ref.resolve(f"{run_dir}:result")
    assert agent.source["mixture"] == "nash_average"
    assert [m["player_id"] for m in agent.members] == [SNAPSHOT, THIRD]
    assert agent.weights == pytest.approx([0.625, 0.375])
    assert agent.source["chosen"] == ("the average Nash mixture, NashConv at t=300: nash 0.3000, "
                                      "nash_average 0.2500")
    # Its file's NashConv is the run's --mixture=nash_average reading.
    file = tmp_path / "result.agent.npz"
    assert export.cli([f"{run_dir}:result"], str(file)) == 0
    assert nashconv.measure_agent(str(file))[1] == pytest.approx(
        nashconv.RunReader(str(run_dir)).measure("nash_average").nash_conv, abs=1e-6)
    # A newer reading that favours the latest mixture names it again.
    history = LeagueHistory(str(run_dir))
    history.add_exploitability({"nash": 0.20, "nash_average": 0.25}, when=400.0)
    history.close()
    agent = agent_ref.resolve(f"{run_dir}:result")
    assert agent.source["mixture"] == "nash" and agent.weights == pytest.approx([0.2, 0.5, 0.3])


def test_measured_best_takes_the_average_only_when_read_lower():
    assert agent_ref.measured_best({"nash": 0.3, "nash_average": 0.2}) == "nash_average"
    assert agent_ref.measured_best({"nash": 0.2, "nash_average": 0.3}) == "nash"
    assert agent_ref.measured_best({"nash": 0.2, "nash_average": 0.2}) == "nash"
    assert agent_ref.measured_best({"nash": 0.2}) == "nash"
    assert agent_ref.measured_best({}) == "nash"


def test_the_result_of_a_poker_run_without_nash_weights_is_not_named_yet(kuhn_run):
    with pytest.raises(agent_ref.AgentNameError, match="no Nash weights yet"):
        agent_ref.resolve(f"{kuhn_run}:result")
    with pytest.raises(agent_ref.AgentNameError, match="kuhn_poker has no races"):
        agent_ref.resolve(f"{kuhn_run}:result:terran")


def test_the_result_of_a_game_without_an_exact_meta_game_is_its_main_agent_averaged(tmp_path, capsys):
    """A matrix game (no races, no exact meta-game): RUN_DIR:result is the main agent's final
    parameters while it has no frozen snapshot (the source says so), then their average with
    its snapshots' (league.db's historical players; the newest AVERAGE_NEWEST of them)."""
    run_dir = tmp_path / "rps"
    config, network = make_run(run_dir, game="matrix_rps")   # its one snapshot row is not historical
    _, final = player_params(str(run_dir), MAIN)
    agent = agent_ref.resolve(f"{run_dir}:result")
    assert agent.source["reading"].startswith("final parameters (the run has no snapshots")
    assert agent.source["main_agent"] == MAIN and agent.source["averaged"] == []
    for a, b in zip(jax.tree_util.tree_leaves(agent.params), jax.tree_util.tree_leaves(final), strict=True):
        np.testing.assert_array_equal(a, b)
    spec = config.game_info.functions().spec
    history = LeagueHistory(str(run_dir))
    snapshots = {}
    for k in range(3):   # snapshots #1..#3, oldest first by step; with a window of 2 the oldest is left out
        snapshot = f"{MAIN}#{k + 1}"
        snapshots[snapshot] = jax.tree_util.tree_map(lambda x, k=k: x * (2.0 + k), build.initial_params(network, spec, 5 + k, 1))
        history.add_player(snapshot, "historical", "any", MAIN, 100 * (k + 1), 10.0 + k)
        ParamStore(str(run_dir)).save(snapshot, snapshots[snapshot], 20 + k)
    history.close()
    agent = agent_ref.result_params(str(run_dir), newest=2)
    assert agent.source["reading"] == "average of final + 2 newest snapshots"
    assert agent.source["averaged"] == [f"{MAIN}#2", f"{MAIN}#3"]
    want = jax.tree_util.tree_map(lambda a, b, c: (np.float64(a) + b + c) / 3, final, snapshots[f"{MAIN}#2"],
                                  snapshots[f"{MAIN}#3"])
    for a, b in zip(jax.tree_util.tree_leaves(agent.params), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # The name, through the command: the file says where the agent came from.
    file = tmp_path / "rps.agent.npz"
    assert export.cli([f"{run_dir}:result"], str(file)) == 0
    assert "average of final + 3 newest snapshots" in capsys.readouterr().out
    source = exported.read(str(file))[0]["source"]
    assert source["reading"] == "average of final + 3 newest snapshots" and len(source["averaged"]) == 3
    with pytest.raises(agent_ref.AgentNameError, match="matrix_rps has no races"):
        agent_ref.resolve(f"{run_dir}:result:terran")


def test_a_smax_runs_result_is_named_by_race(tmp_path):
    """RUN_DIR:result:RACE names a race's main agent; RUN_DIR:result names it where the run has
    one race and lists the RUN_DIR:result:RACE names where it has several; a race the run does
    not have is refused, listing those it has."""
    one, two = tmp_path / "one", tmp_path / "two"
    make_smax_run(one, snapshots=1)
    make_smax_run(two, snapshots=0, races=2)
    agent = agent_ref.resolve(f"{one}:result")
    assert agent.source["main_agent"] == SMAX_MAIN and agent.source["reading"] == "average of final + 1 newest snapshots"
    assert agent.source["league_races"] == ["terran"]
    for race in ("terran", "protoss"):
        agent = agent_ref.resolve(f"{two}:result:{race}")
        assert agent.source["main_agent"] == f"{race}_main_agent_0" and agent.source["race"] == race
        assert agent.source["reading"].startswith("final parameters")
    cases = {f"{two}:result": ["one per race", f"{two}:result:terran", f"{two}:result:protoss"],
             f"{two}:result:zerg": ["no race 'zerg'", f"{two}:result:terran", f"{two}:result:protoss"],
             f"{one}:result:": ["no race ''", f"{one}:result:terran"]}
    for name, words in cases.items():
        with pytest.raises(agent_ref.AgentNameError) as e:
            agent_ref.resolve(name)
        assert all(w in str(e.value) for w in words), str(e.value)


def test_a_games_side_spec_survives_the_header_with_its_pointer_types():
    """The header's spec of a side reads back equal, the unit game's pointer types included
    (SMAX's action type: attack takes a target)."""
    from actors.games import smax_races

    spec = smax_races.functions(smax_races.SmaxRacesConfig()).spec
    for side in spec.sides:
        assert exported.side_from_dict(exported.side_to_dict(side)) == side
    assert spec.side(0).action.heads["action_type"].pointer_types


# -- SMAX (a game with races): the run's agent is its race's main agent, averaged ----------------

SMAX_MAIN = "terran_main_agent_0"


def make_smax_run(run_dir, snapshots=3, races=1, seed=0):
    """A hand-made SMAX run directory, nothing trained or compiled: config.json (`races` races,
    the default network's LSTM core and z input, small sizes), league.db's main agent of each
    race with `snapshots` frozen snapshots (role historical; the first, `#0`, its start), the
    main agents' learner checkpoints and the snapshots' params/ files, every parameter drawn at
    random (numpy) in the shapes of the run's network. Returns (config, network, {player: params})."""
    from learners import checkpoint

    config = RunConfig.make(game="smax_races", races=races, runner="inprocess", run_dir=str(run_dir),
                            hidden_size=8, core_size=8, main_exploiters_per_race=0, league_exploiters_per_race=0)
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config.to_dict(), f)
    spec = config.game_info.functions().spec
    network = build.make_network(config, spec)
    shapes = build.parameter_shapes(network, spec)
    rng = np.random.default_rng(seed)
    store, history = ParamStore(str(run_dir)), LeagueHistory(str(run_dir))
    params = {}
    for race in config.race_names:
        main = f"{race}_main_agent_0"
        history.add_player(main, "main_agent", race, None, 0, 1.0)
        for k in range(snapshots):
            snapshot = f"{main}#{k}"
            params[snapshot] = jax.tree_util.tree_map(
                lambda s: rng.normal(0.0, 0.5, s.shape).astype(s.dtype), shapes)
            history.add_player(snapshot, "historical", race, main, 10 * (k + 1), 2.0 + k)
            store.save(snapshot, params[snapshot], 3 + k)
        params[main] = jax.tree_util.tree_map(lambda s: rng.normal(0.0, 0.5, s.shape).astype(s.dtype), shapes)
        checkpoint.save(checkpoint.path(str(run_dir), main), checkpoint.Checkpoint(9, 0, 0, params[main], {}))
    history.close()
    return config, network, params


def smax_observations(spec, batch, rng, choosing):
    """A batch of SMAX observations of `spec`'s side 0, drawn at random in the game's structure
    (nothing compiled): the strategy step (`choosing`: every army legal, no units) or a battle
    step (units with random features, some alive, random legal action types and targets, each
    unit at least one of each)."""
    side = spec.side(0)
    obs = side.zero_observation((batch,))
    obs["races"][:, 0, 0] = obs["races"][:, 1, rng.integers(0, 3)] = 1.0
    obs["choosing"][:] = choosing
    obs["acting"][:] = True
    masks = obs["action_mask"]
    if choosing:
        masks["composition"][:] = True
        masks["action_type"][..., 0] = masks["target"][..., 0] = True
        return obs
    obs["compositions"][:, :, 0] = 1.0
    obs["time"][:] = rng.uniform(0, 1, batch)
    obs["units"][:] = rng.normal(0, 1, obs["units"].shape)
    obs["alive"][:] = rng.uniform(size=obs["alive"].shape) < 0.6
    masks["composition"][..., 0] = True
    for head in ("action_type", "target"):
        masks[head][:] = rng.uniform(size=masks[head].shape) < 0.5
        masks[head][..., 0] = True
    return obs


FRESH_SMAX = """
import sys
import jax, numpy as np
if sys.argv[4]:   # the test's compilation cache (speed only)
    jax.config.update("jax_compilation_cache_dir", sys.argv[4])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
import agents
policy = agents.load_policy(sys.argv[1])
d = np.load(sys.argv[2], allow_pickle=False)
def obs(i):
    o = {k[len(f"{i}."):]: d[k] for k in d.files if k.startswith(f"{i}.") and "mask." not in k}
    o["action_mask"] = {k.split("mask.")[1]: d[k] for k in d.files if k.startswith(f"{i}.mask.")}
    return o
logits0, state = policy.logits(obs(0), None, np.ones(len(d["0.acting"]), bool))
logits1, _ = policy.logits(obs(1), state)
greedy, _ = policy.act(obs(1), jax.random.PRNGKey(0), state, greedy=True)
np.savez(sys.argv[3], **{f"logits0.{h}": x for h, x in logits0.items()}, **{f"logits1.{h}": x for h, x in logits1.items()},
         **{f"greedy.{h}": x for h, x in greedy.items()})
print("modules:", " ".join(sorted(m for m in sys.modules if m in ("jaxmarl", "actors", "experiments"))))
"""


def smax_reference(network, params, obs0, obs1):
    """The run's network with `params`, in this process: the two steps' logits, the greedy
    actions `FRESH_SMAX` takes on the second, and the second step's logits from a fresh core
    state and with z = 0 (what a file that lost the core or the z input would read)."""
    batch = len(obs0["acting"])
    step = jax.jit(network.step)
    out0, state = step(params, obs0, network.initial_state(batch), np.ones(batch, bool))
    out1, _ = step(params, obs1, state, np.zeros(batch, bool))
    greedy, _ = jax.jit(network.act, static_argnames="greedy")(params, jax.random.PRNGKey(0), obs1, state,
                                                               np.zeros(batch, bool), greedy=True)
    no_core, _ = step(params, obs1, network.initial_state(batch), np.zeros(batch, bool))
    no_z, _ = step(params, {**obs1, "z": np.zeros_like(obs1["z"])}, state, np.zeros(batch, bool))
    return out0.logits, out1.logits, greedy.game, (no_core.logits, no_z.logits)


def test_a_smax_agent_exports_and_plays_in_a_fresh_process_as_in_its_run(tmp_path):
    """RUN_DIR:result:terran (the terran main agent's final parameters averaged with its newest
    snapshots') and RUN_DIR:terran_main_agent_0 export; the unit network's description comes
    back equal (the LSTM core, the z input, the pointer types), and the file plays in a process
    that imports no game code as the run's network does with the average the test takes itself:
    the same logits on a strategy step and a battle step (its core state carried, z given), the
    same greedy actions and the same samples from the same key."""
    run_dir = tmp_path / "run"
    config, network, stored = make_smax_run(run_dir)
    file = tmp_path / "terran.agent.npz"
    assert export.cli([f"{run_dir}:result:terran"], str(file)) == 0
    player_file = tmp_path / "main.agent.npz"
    assert export.cli([f"{run_dir}:{SMAX_MAIN}"], str(player_file)) == 0
    header, params = exported.read(str(file))
    spec = config.game_info.functions().spec
    assert header["game"]["name"] == "smax_races" and header["network"]["class"] == "UnitNetwork"
    assert exported.network_from_dict(header["network"]).config == network.config
    assert network.config.core_size == 8 and network.config.z_size > 0 and network.config.pointer_action_types
    assert exported.spec_from_dict(header["spec"]) == spec
    source = header["source"]
    assert source["player_id"] == "result" and source["main_agent"] == SMAX_MAIN and source["race"] == "terran"
    assert source["reading"] == "average of final + 3 newest snapshots"
    assert source["averaged"] == [f"{SMAX_MAIN}#{k}" for k in range(3)] and source["version"] == 9
    # The average, taken here: the four parameter sets' mean, leaf by leaf.
    members = [stored[SMAX_MAIN], *(stored[f"{SMAX_MAIN}#{k}"] for k in range(3))]
    mean = jax.tree_util.tree_map(lambda *x: sum(np.asarray(a, np.float64) for a in x) / len(x), *members)
    for got, want in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(mean), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    player_header, player_params_read = exported.read(str(player_file))
    assert player_header["source"]["player_id"] == SMAX_MAIN and "reading" not in player_header["source"]
    for a, b in zip(jax.tree_util.tree_leaves(player_params_read), jax.tree_util.tree_leaves(stored[SMAX_MAIN]),
                    strict=True):
        np.testing.assert_array_equal(a, b)

    rng = np.random.default_rng(1)
    obs0, obs1 = smax_observations(spec, 6, rng, True), smax_observations(spec, 6, rng, False)
    obs1["z"] = rng.uniform(0, 1, (6, network.config.z_size)).astype(np.float32)
    want0, want1, greedy, others = smax_reference(network, jax.tree_util.tree_map(np.float32, mean), obs0, obs1)
    np.savez(tmp_path / "obs.npz", **{f"{i}.{k}": v for i, o in enumerate((obs0, obs1)) for k, v in o.items()
                                      if k != "action_mask"},
             **{f"{i}.mask.{h}": m for i, o in enumerate((obs0, obs1)) for h, m in o["action_mask"].items()})
    cache = jax.config.jax_compilation_cache_dir or ""
    done = subprocess.run([sys.executable, "-c", FRESH_SMAX, str(file), str(tmp_path / "obs.npz"), str(tmp_path / "out.npz"),
                           cache], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                          env={**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "modules:", done.stdout   # no game code was imported
    got = dict(np.load(tmp_path / "out.npz"))
    for step, want in (("logits0", want0), ("logits1", want1)):
        assert {k.split(".")[1] for k in got if k.startswith(step)} == set(want)
        for h, x in want.items():
            np.testing.assert_allclose(got[f"{step}.{h}"], x, rtol=1e-5, atol=1e-5, err_msg=f"{step} {h}")
    assert set(greedy) == {"composition", "action_type", "target"}
    for h, x in greedy.items():
        np.testing.assert_array_equal(got[f"greedy.{h}"], x, err_msg=h)
    # What the comparison would miss otherwise: the second step's logits move with the core
    # state and with z.
    for other in others:
        assert max(np.abs(np.asarray(other[h]) - np.asarray(want1[h])).max() for h in ("action_type", "target")) > 1e-3
