"""The replay path's tests (marker `replay`) need Reverb and TensorFlow, the `[replay]` extra,
which lives in an environment of its own (README, "The replay path"). In the base environment
they are skipped with that reason; with LEAGUE_REQUIRE_REPLAY=1 (CI's replay environment) a
missing Reverb fails the run instead."""

import importlib.util
import os

import pytest

HAS_REVERB = importlib.util.find_spec("reverb") is not None


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "replay: the replay path's test: needs Reverb and TensorFlow (the [replay] extra)")


def pytest_collection_modifyitems(config, items):
    if HAS_REVERB:
        return
    if os.environ.get("LEAGUE_REQUIRE_REPLAY") == "1":
        raise pytest.UsageError("LEAGUE_REQUIRE_REPLAY=1 but reverb is not importable: install the "
                                "[replay] extra (README, 'The replay path')")
    skip = pytest.mark.skip(reason="the replay path: needs the [replay] extra (Reverb, TensorFlow 2.15) "
                                   "in its own environment; README, 'The replay path'")
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
