"""Issue 58, the coordinator in parts: no class in coordinator/ is over 300 lines (its body, by
`ast`: from the `class` line to its last statement), so that each part reads on its own."""

import ast
import pathlib

COORDINATOR = pathlib.Path(__file__).resolve().parent.parent / "coordinator"
LIMIT = 300


def class_sizes(directory: pathlib.Path) -> dict[str, int]:
    sizes = {}
    for path in sorted(directory.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                sizes[f"{path.name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return sizes


def test_no_class_in_the_coordinator_package_is_over_300_lines():
    sizes = class_sizes(COORDINATOR)
    assert "coordinator.py:Coordinator" in sizes
    over = {name: n for name, n in sizes.items() if n > LIMIT}
    assert not over, f"classes over {LIMIT} lines (split them into parts): {over}"
