"""Issue 86 item 7, a test that keeps it so: outside a game's own package, no product module names
that game's internals, but the few allow-listed files still to be cleaned.

The product files are the `.py` files of the product packages (league, agents, learners, actors,
coordinator, experiments, dashboard; their subpackages too); tests/, benchmarks/, examples/ and
docs/ are not searched. Each game has its own package and a pattern for its internals:

- SMAX (`actors/games/smax_races/`): the names of issue 86's pattern, `menu_table|compositions|...`.
  A name counts wherever it stands in a file's text: inside a longer identifier
  (`num_compositions`, `forced_cells`, `z_pseudo_reward_probability`), in code, comments and
  docstrings alike; the issue counts the files that name them, and a name in a docstring is
  knowledge of the game in a generic file too.
- Poker (`actors/games/poker/`: the JAX game, OpenSpiel's tools, tabular policies, the exact
  evaluator): imports of its modules (`from actors.games import poker`, `from
  actors.games.poker import exact`, the dotted path anywhere, relative imports inside
  actors/games/) and the names of its modules before they became one package, `jax_poker` and
  `poker_policy`, anywhere in the text (comments and docstrings count too).

The files that name a game's internals today are allow-listed, each with the issue that removes
the name; the game registry (`actors/games/registry.py`) names every built-in game and stays.
Like a ratchet the list only shrinks: a file not on it that names a game's internals fails (ask
through the game's capabilities instead: `Capabilities`, docs/games.md), and so does a listed file
that no longer names them (take it off the list). Issue 86 is done when each list holds at most
2 files."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("league", "agents", "learners", "actors", "coordinator", "experiments", "dashboard")
FIX = ("ask through the game's capabilities instead (actors.games.base.Capabilities: a factory or "
       "a field the game fills; docs/games.md, 'Capabilities: what a game unlocks')")

SMAX_PATTERN = re.compile(
    r"menu_table|compositions|forced_cell|handicap|heuristic_side|heuristic_slots|edit_distance"
    r"|z_pseudo|attacked_types|pointer_action_types|army_units|Z_ARMIES|NUM_UNIT_TYPES")

_POKER_MODULE = r"(?:poker_policy|jax_poker|poker)\b"
POKER_PATTERN = re.compile(
    rf"actors\.games\.{_POKER_MODULE}"                      # import actors.games.poker, from ...
    rf"|from\s+(?:actors\.games|\.+)\s+import\s+(?:\([^)]*?|[\w \t,]*?)\b{_POKER_MODULE}"
    rf"|from\s+\.+{_POKER_MODULE}"                          # from .poker import ... (actors/games/)
    r"|jax_poker|poker_policy")                             # the modules' names anywhere

REGISTRY = ("actors/games/registry.py: the game registry names every built-in game, its "
            "factory and its presets; it stays")

# path from the root -> why it still names the game's internals (the issue that removes them).
SMAX_ALLOWED = {
    "agents/unit_network.py": "the unit network is the network of SMAX's unit observation: its "
                              "army head is named compositions and its config field "
                              "pointer_action_types (the types now come from the spec), names "
                              "that exported files and checkpoints hold",
    "experiments/config.py": "RENAMED and EARLIER_NAMES keep SMAX's earlier flag names "
                             "(--device.heuristic_slots, --actor.z_pseudo_reward_probability) so "
                             "that earlier commands and run directories still work",
}

POKER_ALLOWED = {
    "actors/games/registry.py": REGISTRY,
}

GAMES = {
    "smax": (("actors/games/smax_races/",), SMAX_PATTERN, SMAX_ALLOWED),
    "poker": (("actors/games/poker/",), POKER_PATTERN, POKER_ALLOWED),
}


def product_files(root: pathlib.Path = ROOT) -> dict[str, str]:
    """`package/.../file.py` -> its text, for every `.py` file of the product packages."""
    return {path.relative_to(root).as_posix(): path.read_text()
            for package in PACKAGES for path in sorted((root / package).rglob("*.py"))}


def naming_files(own: tuple[str, ...], pattern: re.Pattern, files: dict[str, str]) -> dict[str, list[str]]:
    """Files outside the game's own package (`own`: path prefixes) whose text matches `pattern`
    -> the distinct names found there (whitespace collapsed)."""
    found = {}
    for name, text in files.items():
        if name.startswith(own):
            continue
        names = sorted({" ".join(m.group(0).split()) for m in pattern.finditer(text)})
        if names:
            found[name] = names
    return found


@pytest.fixture(scope="module")
def files():
    return product_files()


def test_every_product_package_is_searched(files):
    for package in PACKAGES:
        assert any(name.startswith(f"{package}/") for name in files), f"no file read in {package}/"
    assert "actors/games/smax_races/game.py" in files        # subpackages too
    assert not any(name.startswith(("tests/", "benchmarks/", "examples/", "docs/")) for name in files)


def test_the_patterns_find_what_they_name(files):
    # Each game's own package names its internals, so an empty search means a broken pattern.
    assert SMAX_PATTERN.search(files["actors/games/smax_races/game.py"])
    assert POKER_PATTERN.search(files["actors/games/poker/exact.py"])
    assert POKER_PATTERN.search(files["actors/games/registry.py"])
    for text in ("from actors.games import poker", "import actors.games.jax_poker as jp",
                 "from actors.games.poker_policy import mix_policies",
                 "from actors.games import registry, poker", "from actors.games import (\n  base,\n  poker,\n)",
                 "from .poker import PokerGame", "from . import jax_poker", "from .. import poker",
                 "from actors.games.poker import exact", "from actors.games.poker.policy import mix_policies",
                 'importlib.import_module("actors.games.poker")', "x = poker_policy.network_policy"):
        assert POKER_PATTERN.search(text), text
    for text in ("from actors.games import registry", "kuhn_poker", "leduc_poker", "pokerface",
                 "from actors.games import pokery"):
        assert not POKER_PATTERN.search(text), text


@pytest.mark.parametrize("game", sorted(GAMES))
def test_no_file_outside_a_game_names_its_internals_but_the_allowed(game, files):
    own, pattern, allowed = GAMES[game]
    new = {name: names for name, names in naming_files(own, pattern, files).items() if name not in allowed}
    assert not new, (f"product files outside {game}'s package name its internals: {new}; {FIX}. "
                     f"(Allow-list a file in tests/test_game_internals.py only with its reason.)")


@pytest.mark.parametrize("game", sorted(GAMES))
def test_allowed_files_still_name_the_games_internals(game, files):
    own, pattern, allowed = GAMES[game]
    found = naming_files(own, pattern, files)
    gone = sorted(name for name in allowed if name not in found)
    assert not gone, (f"allow-listed files no longer name {game}'s internals (or are gone): {gone}; "
                      f"take them off {game.upper()}_ALLOWED in tests/test_game_internals.py")
