"""The flags of `python -m experiments.league` (experiments/league.py: define_flags): every one
has a help that says what it does, --runner's names every runner, and a short alias repeats
its target's help."""

import json
import re
import subprocess
import sys

from experiments.config import ALIASES, RUNNERS, fields, help_text

# The help of every flag experiments.league defines, as `--help` shows it; in a subprocess, so
# that the flags are defined once and in no test process.
CODE = ("import json; from absl import flags; from experiments import league; "
        "league.define_flags(); "
        "print(json.dumps({f.name: f.help for f in flags.FLAGS.get_flags_for_module("
        "'experiments.league')}))")


def flag_help() -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return json.loads(out.splitlines()[-1])


def test_every_flag_has_a_help_that_stands_alone():
    helps = flag_help()
    assert set(helps) >= {path for path, _ in fields()} | set(ALIASES)
    for name, text in helps.items():
        text = (text or "").strip()
        assert len(text.split()) >= 2, (name, text)
        assert not re.fullmatch(r"[\w' ]+: [\w.+-]+", text), (name, text)  # "AlphaStar: 1" is no help
        assert not text.startswith("..."), (name, text)    # nor the end of a neighbour's sentence
        # help_text's fallback when a field has no comment: the class and field names.
        assert not text.endswith(f".{name.rsplit('.', 1)[-1]}"), (name, text)

    # --runner names every runner there is.
    for runner in RUNNERS:
        assert runner in helps["runner"], (runner, helps["runner"])

    # An alias gives its target's help, not only its name.
    for alias, path in ALIASES.items():
        assert helps[alias] == f"alias of --{path}: {help_text(path)}", (alias, helps[alias])
    assert "entropy bonus" in helps["entropy_cost"], helps["entropy_cost"]
