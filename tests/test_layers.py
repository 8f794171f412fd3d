"""The import layers of pyproject.toml's `[tool.importlinter]` contracts (issue 30): league (pure)
at the bottom, then agents, then learners and actors (independent of each other), then
coordinator, then experiments, then benchmarks; no import circles inside a package."""

import os
import subprocess
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_import_contracts_are_kept():
    # lint-imports, the command of import-linter, as its module (the venv's bin may not be on PATH)
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())", "--no-cache"],
                          cwd=REPOSITORY, capture_output=True, text=True, timeout=300)
    report = done.stdout + done.stderr
    assert "BROKEN" not in report and done.returncode == 0, report
    assert report.count("KEPT") == 4, report
