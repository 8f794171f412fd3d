"""A setting: a field of a configuration dataclass that carries its own help.

    class SnapshotConfig:
        exploiter_win_rate: float = setting(0.7, "an exploiter adds a copy once it beats all its targets above this")

Every leaf field of a run's configuration is a command-line flag named by its path
(experiments/config.py: `fields`); its `--help` is the field's metadata "help" (`help_of`), so the
text lives beside the default it describes and stands alone. The lowest layer holds it so that
every configuration (league, learners, actors, experiments) can use it.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def setting(default: Any, help: str) -> Any:  # noqa: A002 (the word the flag shows)
    """A dataclass field with `default` and the flag help `help` (one sentence that stands alone:
    what the setting does, its unit, the paper's value). Leaves are immutable (numbers, strings,
    None, tuples); a mutable default is refused (it would be shared by every instance)."""
    if isinstance(default, list | dict | set):
        raise TypeError(f"setting defaults are immutable; got {default!r} (use a tuple)")
    if not help or not help.strip():
        raise ValueError("a setting needs a help text")
    return dataclasses.field(default=default, metadata={"help": help.strip()})


def help_of(field: dataclasses.Field) -> str:
    """A field's help ("" where it has none: a sub-configuration, or a field that is no setting)."""
    return field.metadata.get("help", "")
