"""The chat's modules import one way (no cycle inside pocketchat/ui/) and stay small."""

from __future__ import annotations

import ast
from pathlib import Path

import pocketchat.ui

UI = Path(pocketchat.ui.__file__).parent


def ui_imports(path: Path) -> set[str]:
    """The pocketchat.ui modules a file imports, TYPE_CHECKING and function-level ones too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "pocketchat.ui":
                found |= {f"pocketchat.ui.{a.name}" for a in node.names}
            elif node.module.startswith("pocketchat.ui."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pocketchat.ui.")}
    return found


def test_no_import_cycle_inside_ui():
    graph = {f"pocketchat.ui.{p.stem}": ui_imports(p) for p in UI.glob("*.py")}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", "import cycle: " + " -> ".join(path + [module])
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            visit(target, path + [module])
        state[module] = "done"

    for module in sorted(graph):
        visit(module, [])
    assert graph["pocketchat.ui.messages"] == set()  # the leaf every part may post


def test_ui_modules_stay_small():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in UI.glob("*.py")}
    assert max(sizes.values()) <= 400, sizes
