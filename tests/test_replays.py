"""Replays (actors/replays.py), recording (actors/games/smax_races/record.py, the command experiments/record.py) and behaviour cloning
(actors/games/smax_races/supervised.py): issue 14 section 1. Small and fast: a short SMAX races config,
a few games, a tiny network."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from actors import replays
from actors.games.smax_races import z as zmod
from agents.specs import ActionSpec, ArraySpec, DiscreteHead, GameSpec, ObservationSpec, SideSpec

# -- the format on a small hand-made game -------------------------------------------------------


def _toy_spec(name="toy", units=3):
    side = SideSpec(ObservationSpec({"x": ArraySpec((units, 2), np.float32), "alive": ArraySpec((units,), bool)}),
                    ActionSpec({"composition": DiscreteHead(3), "action_type": DiscreteHead(6, (units,)),
                                "target": DiscreteHead(units, (units,))}), num_units=units)
    return GameSpec(name, (side, side), 10)


def _toy_chunk(games=2, steps=4, units=3, seed=0):
    rng = np.random.default_rng(seed)
    obs, acts = [], []
    for _ in range(2):
        obs.append({"x": rng.normal(size=(games, steps, units, 2)).astype(np.float32),
                    "alive": np.ones((games, steps, units), bool),
                    "action_mask": {"composition": np.ones((games, steps, 3), bool)}})
        acts.append({"composition": rng.integers(0, 3, (games, steps)).astype(np.int32),
                     "action_type": rng.integers(0, 6, (games, steps, units)).astype(np.int32),
                     "target": rng.integers(0, units, (games, steps, units)).astype(np.int32)})
    per_game = {"races": np.zeros((games, 2), np.int8), "compositions": np.zeros((games, 2), np.int8),
                "unit_types": np.zeros((games, 2, units), np.int8)}
    chunk = replays.make_chunk(tuple(obs), tuple(acts), np.full(games, steps), np.array([1, -1][:games]),
                               per_game, statistics=zmod.smax_z_of_chunk)
    return chunk, (obs, acts)


def test_round_trip_and_append(tmp_path):
    spec, d = _toy_spec(), str(tmp_path / "r")
    (first, raw1), (second, raw2) = _toy_chunk(seed=1), _toy_chunk(seed=2)
    replays.ReplayWriter(d, spec, {"menu": "m"}).append(first)
    replays.ReplayWriter(d, spec, {"menu": "m"}).append(second)  # reopened: appends
    got = replays.open_replays(d, game="toy", spec=spec)
    assert got.header["version"] == replays.FORMAT_VERSION and got.header["game"] == "toy"
    assert got.header["game_config"] == {"menu": "m"}
    assert [c["file"] for c in got.chunks] == ["chunk_000000.npz", "chunk_000001.npz"]
    assert got.num_games == 4
    for (obs, acts), chunk in zip((raw1, raw2), got.iter_chunks()):
        np.testing.assert_array_equal(chunk["outcome"], [1, -1])
        for s in range(2):  # the trees come back as they went in
            for want, got_tree in ((obs[s], replays.unflatten_prefix(chunk, f"side{s}/obs")),
                                   (acts[s], replays.unflatten_prefix(chunk, f"side{s}/action"))):
                assert set(got_tree) == set(want)
                for k, v in want.items():
                    if isinstance(v, dict):
                        np.testing.assert_array_equal(got_tree[k]["composition"], v["composition"])
                    else:
                        np.testing.assert_array_equal(got_tree[k], v)
        assert chunk["z/army"].shape == (2, 2)


def test_refusals_name_the_file_and_the_problem(tmp_path):
    spec, d = _toy_spec(), str(tmp_path / "r")
    replays.ReplayWriter(d, spec).append(_toy_chunk()[0])
    with pytest.raises(replays.ReplayError, match=r"header.json: replays of game 'toy', expected 'smax_races'"):
        replays.open_replays(d, game="smax_races")
    with pytest.raises(replays.ReplayError, match=r"header.json: replays of another observation/action spec"):
        replays.open_replays(d, game="toy", spec=_toy_spec(units=4))
    with pytest.raises(replays.ReplayError, match="another observation/action spec"):  # nor appended to
        replays.ReplayWriter(d, _toy_spec(units=4))
    # another format version
    header_path = os.path.join(d, replays.HEADER_FILE)
    header = json.load(open(header_path))
    json.dump(dict(header, version=replays.FORMAT_VERSION + 1), open(header_path, "w"))
    with pytest.raises(replays.ReplayError, match=rf"header.json: replay format version {replays.FORMAT_VERSION + 1}"):
        replays.open_replays(d)
    json.dump(header, open(header_path, "w"))
    replays.open_replays(d, game="toy", spec=spec)  # restored: reads
    # a corrupt chunk: one byte changed
    path = os.path.join(d, "chunk_000000.npz")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(replays.ReplayError, match=r"chunk_000000.npz: corrupt chunk \(sha256"):
        replays.open_replays(d)
    with pytest.raises(replays.ReplayError, match="not a replay directory"):
        replays.open_replays(str(tmp_path))


# -- z on a hand-built game ---------------------------------------------------------------------


def test_the_z_constants_are_smaxs():
    """SMAX's z (actors/games/smax_races/z.py) takes its constants from the game module, and
    the registry reaches it through the `z` capability."""
    from actors.games import registry, smax_races

    assert zmod.ATTACK == smax_races.ATTACK
    assert zmod.NUM_UNIT_TYPES == len(smax_races.UNIT_TYPES)
    assert zmod.Z_ARMIES == smax_races.COMPOSITIONS_PER_RACE
    assert registry.resolve("smax_races").capabilities.z() is zmod
    assert registry.resolve("kuhn_poker").capabilities.z is None


def test_z_by_hand():
    # 3 slots a side. Side 0: marines in slots 0, 1 (type 0); side 1: a zergling (4) in slot 0,
    # a hydralisk (5) in slot 1, slot 2 empty.
    unit_types = np.array([[0, 0, -1], [4, 5, -1]])
    attack, move = zmod.ATTACK, 0
    alive = np.ones((5, 3), bool)
    # side 0: t=1 moves; t=2 unit 0 attacks target 1 (hydralisk); t=3 unit 1 attacks target 0
    # (zergling), unit 0 the hydralisk again; t=4 is after the game's length (ignored).
    side0 = {"composition": np.array([2, 0, 0, 0, 0]),
             "action_type": np.array([[0, 0, 0], [move, move, move], [attack, move, 0], [attack, attack, 0],
                                      [attack, attack, attack]]),
             "target": np.array([[0, 0, 0], [0, 0, 0], [1, 0, 0], [1, 0, 0], [0, 0, 0]])}
    z = zmod.smax_z(side0, alive, length=4, unit_types=unit_types, side=0)
    assert int(z["army"]) == 2
    assert z["attack_order"].tolist() == [5, 4, -1, -1, -1, -1]  # hydralisk first, then zergling
    assert z["attack_counts"].tolist() == [0, 0, 0, 0, 1, 2]
    # side 1: target j hits side 0's slot n-1-j: target 2 -> slot 0, a marine; a dead unit's
    # attack (unit 1 at t=1) does not count.
    alive1 = alive.copy()
    alive1[1, 1] = False
    side1 = {"composition": np.array([1, 0, 0, 0, 0]),
             "action_type": np.array([[0, 0, 0], [attack, attack, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]),
             "target": np.array([[0, 0, 0], [2, 2, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]])}
    z1 = zmod.smax_z(side1, alive1, length=5, unit_types=unit_types, side=1)
    assert int(z1["army"]) == 1
    assert z1["attack_order"].tolist() == [0, -1, -1, -1, -1, -1]
    assert z1["attack_counts"].tolist() == [1, 0, 0, 0, 0, 0]


# -- recording real SMAX games of the heuristic, and behaviour cloning on them -------------------


@pytest.fixture(scope="module")
def small_config():
    from actors.games import smax_races

    # 3 units a side (the default menu's 16 make every jitted function several times slower
    # to compile), and short battles.
    return smax_races.SmaxRacesConfig(menu=smax_races.fixed_size_menu(3), max_steps=30)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, small_config):
    from actors.games.smax_races import record

    d = str(tmp_path_factory.mktemp("replays") / "heuristic")
    figures = record.record(d, "heuristic", games=12, chunk_games=6, seed=0, config=small_config)
    return d, figures


def test_record_heuristic_games(recorded, small_config):
    from actors.games import smax_races
    from actors.games.smax_races import record

    d, figures = recorded
    spec = smax_races.functions(small_config).spec
    got = replays.open_replays(d, game="smax_races", spec=spec)
    assert got.num_games == 12 and len(got.chunks) == 2 and figures["illegal_actions"] == 0
    chunks = list(got.iter_chunks())
    races = np.concatenate([c["races"] for c in chunks])
    comps = np.concatenate([c["compositions"] for c in chunks])
    np.testing.assert_array_equal(np.concatenate([races, comps], 1), record.CONFIGURATIONS[:12])
    for c in chunks:
        assert c["length"].max() <= spec.max_steps and set(np.unique(c["outcome"])) <= {-1, 0, 1}
        assert c["side0/obs/units"].shape[2:] == spec.sides[0].observation["units"].shape
        np.testing.assert_array_equal(c["z/army"], c["compositions"])  # z's army is the one played
        for s in range(2):
            assert c[f"side{s}/obs/choosing"][:, 0].all()
            np.testing.assert_array_equal(c[f"side{s}/action/composition"][:, 0], c["compositions"][:, s])
            valid = np.arange(c["length"].max())[None, :] < c["length"][:, None]
            attacks = c[f"side{s}/action/action_type"] == smax_races.ATTACK
            assert (c[f"side{s}/action/target"][~attacks] == 0).all()  # the network's convention
            for h in ("composition", "action_type", "target"):  # every stored action is legal
                mask, a = c[f"side{s}/obs/action_mask/{h}"], c[f"side{s}/action/{h}"]
                legal = np.take_along_axis(mask, a[..., None], -1)[..., 0]
                assert legal[valid[..., None] & attacks if h == "target" else valid].all()
                assert not mask[~valid].any()  # zeros after the game's end
        # the battle: units of side 0 attack, and z says whom (an enemy race's unit types)
        attacked = c["z/attack_order"][:, 0]
        enemy_types = c["unit_types"][:, 1]
        for g in range(c["length"].shape[0]):
            assert set(attacked[g][attacked[g] >= 0]) <= set(enemy_types[g][enemy_types[g] >= 0])
    assert (np.concatenate([c["z/attack_counts"] for c in chunks]).sum((1, 2)) > 0).any()


def test_cli_refuses_other_replays_and_writes_nothing(tmp_path, recorded, small_config, capsys):
    from experiments import record, supervised

    other = str(tmp_path / "toy")
    replays.ReplayWriter(other, _toy_spec()).append(_toy_chunk()[0])
    before = sorted(os.listdir(other))
    assert record.cli("smax_races", "heuristic", 2, other, config=small_config) == 2
    assert "replays of game 'toy', expected 'smax_races'" in capsys.readouterr().err
    assert sorted(os.listdir(other)) == before
    out = str(tmp_path / "sup.npz")
    assert supervised.cli(other, out, config=small_config) == 2
    assert "header.json: replays of game 'toy'" in capsys.readouterr().err
    assert not os.path.exists(out)
    assert record.cli("kuhn_poker", "heuristic", 2, str(tmp_path / "k")) == 2
    assert "no scripted AI to record" in capsys.readouterr().err and not os.path.exists(tmp_path / "k")
    # the commands ask the game (its registration) for its races and whether it has replays
    assert supervised.cli(recorded[0], out, races=("elves",), config=small_config) == 2
    assert "choose from ('terran', 'protoss', 'zerg')" in capsys.readouterr().err
    assert supervised.cli(recorded[0], out, game="kuhn_poker") == 2
    assert "no supervised start" in capsys.readouterr().err and not os.path.exists(out)
    assert record.cli("no_such_game", "heuristic", 2, str(tmp_path / "n")) == 2
    assert "no_such_game" in capsys.readouterr().err and not os.path.exists(tmp_path / "n")
    assert record.cli("smax_races", "no_such_run:player", 2, str(tmp_path / "p"), config=small_config) == 2
    assert "no run config" in capsys.readouterr().err and not os.path.exists(tmp_path / "p")


def test_behaviour_cloning_learns(recorded, small_config, tmp_path):
    import jax

    from actors.games import smax_races
    from actors.games.smax_races import supervised
    from agents.storage import params_from_npz_bytes
    from experiments import build
    from experiments.config import NetworkSettings, RunConfig

    d, _ = recorded
    spec = smax_races.functions(small_config).spec
    data, _ = supervised.load_sequences(d, spec, holdout=0.0)
    train = data[0][0]  # terran sequences
    horizon = max(s[1]["composition"].shape[0] for s in train)
    network = build.make_network(RunConfig(network=NetworkSettings(hidden_size=16, core_size=16)), spec)
    n = spec.sides[0].num_units
    before = supervised.evaluate(network, n, build.initial_params(network, spec, 0, 0), train, horizon, 8)
    params, _ = supervised.train_race(network, spec, 0, train, [], steps=30, batch_size=8,
                                      learning_rate=3e-3, seed=0, horizon=horizon, log=lambda *a, **k: None)
    after = supervised.evaluate(network, n, params, train, horizon, 8)
    assert after["action_type"]["loss"] < 0.8 * before["action_type"]["loss"]
    assert after["target"]["loss"] < before["target"]["loss"]
    assert after["action_type"]["accuracy"] > after["action_type"]["chance"] + 0.2
    # the command writes one params file with one tree per race, loadable by race
    out = str(tmp_path / "sup.npz")
    report = supervised.supervised(d, out, races=("terran",), steps=2, batch_size=4, holdout=0.2,
                                   hidden_size=16, core_size=16, config=small_config, log=lambda *a, **k: None)
    assert set(report["races"]["terran"]["held_out"]) == {"composition", "action_type", "target"}
    version, tree = params_from_npz_bytes(open(out, "rb").read())
    assert version == 2 and set(tree) == {"terran"}
    like = build.initial_params(network, spec, 0, 0)
    loaded = build.load_supervised(out, "terran")
    assert jax.tree.map(np.shape, loaded) == jax.tree.map(np.shape, like)
