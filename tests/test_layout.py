"""The package layout holds: imports point down, no cycles, each package owns one thing."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import pocketchat

ROOT = Path(pocketchat.__file__).parent
BOTTOM = {"types", "errors", "paths", "textsafe", "filehold", "metal"}
# package -> the top-level parts of pocketchat it may import (function-level imports included)
MAY_IMPORT = {
    "types": set(), "errors": set(), "paths": set(), "textsafe": set(), "filehold": set(), "metal": set(),
    "modelfile": BOTTOM,
    "tools": BOTTOM | {"tools", "engines"},  # MCP tool servers, their config, the chat's permissions
    "documents": BOTTOM | {"documents"},  # files into text, passages, retrieval: pure
    "rpc": BOTTOM | {"rpc"},  # llama.cpp's RPC backend and the ggml binding: below engines
    "select": BOTTOM | {"modelfile", "select", "rpc"},  # rpc: where llama.cpp's libraries are
    "engines": BOTTOM | {"engines", "modelfile", "rpc", "documents"},
    "store": BOTTOM | {"store", "select", "modelfile"},  # select: the catalog of build ids
    "conversations": BOTTOM | {"documents", "engines"},  # Message/Stats only
    # choose: which model a command or the Python API runs (Selection -> file and load plan)
    "choose": BOTTOM | {"choose", "select", "store", "modelfile", "rpc", "engines"},
    "server": BOTTOM | {"documents", "server", "engines", "conversations", "tools"},  # the web chat's store
    "ui": BOTTOM | {"documents", "ui", "engines", "select", "conversations", "tools"},
    "api": BOTTOM | {"documents", "engines", "server", "select", "store", "modelfile", "rpc", "choose", "tools"},
    "commands": BOTTOM | {"documents", "commands", "select", "modelfile", "rpc", "store", "engines", "ui", "server",
                          "api", "choose", "conversations", "tools"},
    "__init__": {"api"},  # `pocketchat.load`, imported on first use
    "cli": BOTTOM | {"commands", "choose", "__init__"},  # __init__: __version__
    "__main__": {"cli"},
}
# The same layout as floors, bottom first: a package imports only from floors below its own
# (never one beside it), so no arrow between packages runs upward or sideways and none closes
# a circle.
FLOORS = [
    {"types", "errors", "paths", "textsafe", "filehold", "metal"},
    {"modelfile", "rpc", "documents"},
    {"select", "engines"},
    {"store", "conversations", "tools"},
    {"choose", "server", "ui"},
    {"api"},
    {"__init__", "commands"},
    {"cli"},
    {"__main__"},
]
MAX_LINES = 450


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(("pocketchat",) + parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    seen = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pocketchat"):
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        seen.update(n for n in names if n in modules)
    return seen


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_imports_point_down():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        allowed = MAY_IMPORT.get(_part(name))
        assert allowed is not None, f"{name}: a new top-level part; add it to MAY_IMPORT"
        for target in _imports(path, modules):
            if _part(target) not in allowed | {_part(name)} and target != "pocketchat":
                wrong.append(f"{name} -> {target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(sorted(wrong))


def _package_arrows() -> set[tuple[str, str]]:
    """(importer, imported) between different top-level parts of pocketchat. `from pocketchat
    import conversations` is an arrow to `conversations` only; to the package itself (`__init__`)
    only for a name defined there (`__version__`)."""
    modules = _modules()
    arrows = set()
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pocketchat"):
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets = [s for s in subs if s in modules]
                if len(targets) < len(subs):
                    targets.append(node.module)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("pocketchat")]
            for t in targets:
                if t in modules and _part(t) != _part(name):
                    arrows.add((_part(name), _part(t)))
    return arrows


def _floor(part: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if part in floor)


def test_every_package_has_one_floor_and_the_stated_layout_points_down():
    parts = {_part(m) for m in _modules()}
    assert sorted(parts) == sorted(set().union(*FLOORS)), "FLOORS and the packages differ"
    assert sum(len(f) for f in FLOORS) == len(set().union(*FLOORS)), "a package on two floors"
    assert set(MAY_IMPORT) == parts
    up = [f"{a} may import {b}" for a, allowed in MAY_IMPORT.items() for b in allowed
          if b != a and _floor(b) >= _floor(a)]
    assert not up, "MAY_IMPORT against FLOORS:\n" + "\n".join(sorted(up))


def test_no_arrow_between_packages_runs_up_or_closes_a_circle():
    arrows = _package_arrows()
    assert ("api", "choose") in arrows and ("commands", "choose") in arrows  # the finder sees them
    up = sorted(f"{a} -> {b}" for a, b in arrows if _floor(b) >= _floor(a))
    assert up == [], "arrows that run upward or sideways:\n" + "\n".join(up)
    graph: dict[str, set[str]] = collections.defaultdict(set)
    for a, b in arrows:
        graph[a].add(b)
    circles = [f"{a} -> {b} -> ... -> {a}" for a, b in arrows if a in _reachable(graph, b)]
    assert circles == [], "circles between packages:\n" + "\n".join(sorted(circles))


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_the_circle_finder_finds_a_circle():
    graph = collections.defaultdict(set, {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert "a" in _reachable(graph, "b") and "d" not in _reachable(graph, "a")


def test_no_module_is_over_the_line_limit():
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    over = sorted(f"{name}: {n} lines" for name, n in lengths.items()
                  if n > MAX_LINES)
    assert over == [], f"modules over {MAX_LINES} lines (split them by responsibility):\n" + "\n".join(over)


def test_no_import_cycle_among_pocketchat_modules():
    modules = _modules()
    edges = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    state: dict[str, int] = collections.defaultdict(int)  # 0 new, 1 on the path, 2 done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(edges[v]):
            if state[w] == 1:
                return path[path.index(w):] + [w]
            if state[w] == 0 and (cycle := visit(w)):
                return cycle
        path.pop()
        state[v] = 2
        return None

    for v in sorted(modules):
        if state[v] == 0:
            cycle = visit(v)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


TREE = ROOT.parent
LLAMA_OWNER = ROOT / "engines" / "llamacpp" / "load.py"  # new_llama: the engine's guards (AMX)


def llama_calls(path: Path) -> list[int]:
    """The lines of `path` that call a `Llama(...)` constructor (`Llama(`, `llama_cpp.Llama(`,
    any alias's `.Llama(`), or bind a name to it (`from llama_cpp import Llama as L`)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Name) and func.id == "Llama") or (
                    isinstance(func, ast.Attribute) and func.attr == "Llama"):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("llama_cpp"):
            lines += [node.lineno for a in node.names if a.name == "Llama" and a.asname]
    return lines


def test_one_way_to_build_a_llama_cpp_model():
    """Only `engines/llamacpp/load.new_llama` calls `Llama(`: tests and benchmarks build their
    reference and bare-anchor models through it, so they carry the engine's guards (a bare
    `Llama` dies of SIGILL on an AMX machine: ggml-org/llama.cpp#20824)."""
    files = [p for d in ("pocketchat", "tests", "benchmarks") for p in (TREE / d).rglob("*.py")]
    assert LLAMA_OWNER in files and len(files) > 100
    wrong = [f"{p.relative_to(TREE)}:{n}" for p in files if p != LLAMA_OWNER for n in llama_calls(p)]
    assert not wrong, ("build llama.cpp models with pocketchat.engines.llamacpp.load.new_llama, "
                       "not Llama(...):\n" + "\n".join(wrong))
    assert len(llama_calls(LLAMA_OWNER)) == 1  # new_llama itself


def test_the_llama_call_finder_sees_every_spelling(tmp_path):
    src = tmp_path / "x.py"
    src.write_text("import llama_cpp\nfrom llama_cpp import Llama as L\n"
                   "a = llama_cpp.Llama('m')\nb = Llama('m')\nc = llama_cpp.llama.Llama(model_path='m')\n"
                   "s = 'Llama(' # Llama(\n")
    assert sorted(llama_calls(src)) == [2, 3, 4, 5]


# The members of the engine contract (`engines/types.py`: Engine, Answer): callers use them as
# declared, never probe for them (the host, the child, the pooled engine and the API
# asked getattr for `complete`, `status`, `parallel` and an answer's `cancel`).
# (`chat`, `close` and `info` are left out: other objects have them too.)
CONTRACT = {"complete", "cancel", "end_thinking", "status", "parallel", "sequences"}


def probes(path: Path, root: Path = TREE) -> list[str]:
    """`getattr(x, "name", ...)` / `hasattr(x, "name")` of a contract member in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in CONTRACT):
            found.append(f"{path.relative_to(root)}:{node.lineno} {node.args[1].value}")
    return found


def test_the_engine_contract_is_declared_not_probed():
    wrong = [hit for path in ROOT.rglob("*.py") for hit in probes(path)]
    assert not wrong, ("use the engine contract as engines/types.py declares it:\n"
                       + "\n".join(wrong))


def test_the_probe_finder_sees_both_spellings(tmp_path):
    src = tmp_path / "x.py"
    src.write_text("a = getattr(e, 'complete', None)\nb = hasattr(e, 'status')\n"
                   "c = getattr(e, 'pid', None)\nd = getattr(e, name)\n")
    assert [h.split()[-1] for h in probes(src, tmp_path)] == ["complete", "status"]


# engines/ in rooms: at its top only the contract and what every room shares; one answer
# (answer/) and the state's copies (state/) know nothing of processes or of several sequences.
ENGINES = ROOT / "engines"
ENGINES_TOP_MAX = 8
ROOMS_APART = {"answer": {"worker", "batch"}, "state": {"worker", "batch"}}


def test_engines_keeps_few_modules_at_its_top():
    top = sorted(p.name for p in ENGINES.glob("*.py"))
    assert len(top) <= ENGINES_TOP_MAX, f"put these in a room of engines/: {top}"
    rooms = [p for p in ENGINES.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert all((room / "__init__.py").exists() for room in rooms), "each room says what it owns"


def test_one_answer_and_the_state_never_reach_into_the_worker_or_the_batcher():
    modules = _modules()
    wrong = []
    for room, apart in ROOMS_APART.items():
        for name, path in modules.items():
            if not name.startswith(f"pocketchat.engines.{room}"):
                continue
            for target in _imports(path, modules):
                parts = target.split(".")
                if len(parts) > 2 and parts[1] == "engines" and parts[2] in apart:
                    wrong.append(f"{name} imports {target}")
    assert not wrong, "\n".join(wrong)
