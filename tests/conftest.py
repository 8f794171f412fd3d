"""The replay path's tests (marker `replay`) need Reverb and TensorFlow, the `[replay]` extra,
which lives in an environment of its own (docs/experience.md, "The replay environment"). In the
base environment they are skipped with that reason; with LEAGUE_REQUIRE_REPLAY=1 (CI's replay
environment) a missing Reverb fails the run instead.

The long tests (marker `long`: the Leduc league's quality, a Kuhn league's exploiter gaps, the
heuristic's table, the three-host cluster, three Launchpad runs) are each a
minutes-long league, the short form of a benchmark. `pytest` leaves them out (the gate CI runs
in under 30 minutes); `pytest --long` runs them too, and `LEAGUE_CI_LONG=1 bash .ci/run` runs
them in every environment.

The tests come in two tiers (docs/testing.md): the fast tier, `pytest -m "not system"` (the
league logic, losses, games' protocol checks, networks, small learners: minutes on 2 cores), and
the system tier, `pytest -m system` (marker `system`, set at the top of each such file: whole
leagues, launchers, faults, Ray, the browser). `pytest` runs both. The markers are independent:
`-m replay` selects the replay path's tests whatever their tier."""

import importlib.util
import os

import pytest

HAS_REVERB = importlib.util.find_spec("reverb") is not None


def pytest_sessionstart(session):
    # The tests compile what the league's processes compile, into the same persistent cache
    # (experiments/build.py): a second run of the suite loads instead of compiling (measured on
    # tests/test_unit_network.py: 117 s cold, 40 s warm; BENCHMARKS.md "CI time").
    from experiments import build

    build.enable_compilation_cache()


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true",
                     help="also run the long tests (marker `long`): minutes-long leagues that measure "
                          "learning or outlast faults, each the short form of a benchmark; `pytest --long "
                          "-m long` runs only them")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "replay: the replay path's test: needs Reverb and TensorFlow (the [replay] extra)")
    config.addinivalue_line(
        "markers", "long: a minutes-long league (learning quality, a run under faults): run with --long")
    config.addinivalue_line(
        "markers", "system: the system tier: whole leagues, launchers, faults, Ray, the browser, the command-line "
                   "tools as programs (`pytest -m system`; the fast tier is `pytest -m \"not system\"`)")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--long"):
        # The README's test command (and CI's gate) leaves the long tests out: deselected, as
        # `-m` deselects, so that a skip still means something is missing.
        long = [item for item in items if item.get_closest_marker("long")]
        if long:
            config.hook.pytest_deselected(items=long)
            items[:] = [item for item in items if not item.get_closest_marker("long")]
    if HAS_REVERB:
        return
    if os.environ.get("LEAGUE_REQUIRE_REPLAY") == "1":
        raise pytest.UsageError("LEAGUE_REQUIRE_REPLAY=1 but reverb is not importable: install the "
                                "[replay] extra (docs/experience.md, 'The replay environment')")
    skip = pytest.mark.skip(reason="the replay path: needs the [replay] extra (Reverb, TensorFlow 2.15) "
                                   "in its own environment; docs/experience.md, 'The replay environment'")
    for item in items:
        if item.get_closest_marker("replay"):
            item.add_marker(skip)


def skip_unless_root(what: str) -> None:
    """Skips a test that needs root (a filesystem of its own: mount -t tmpfs) when this is not
    root; with LEAGUE_REQUIRE_ROOT=1 (CI, which runs as root) that fails the test instead."""
    if os.geteuid() == 0:
        return
    if os.environ.get("LEAGUE_REQUIRE_ROOT") == "1":
        pytest.fail(f"LEAGUE_REQUIRE_ROOT=1 but {what} needs root")
    pytest.skip(f"{what} needs root (mount -t tmpfs)")
