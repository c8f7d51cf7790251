"""docs/architecture.md draws the package layers that pyproject's import-linter contract
enforces (`lint-imports`, in tests/test_lint.py): the drawing and the contract stay one list,
and every package of f4pipe sits in a layer. Inside a package the contract says nothing, so the
module graph is checked for cycles too, counting imports inside functions (only `if
TYPE_CHECKING:` blocks, which never run, are left out)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "f4pipe"


def contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    return layers


def drawn_layers() -> list[str]:
    """The first column of the code block under '## The layers' in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The layers", 1)[1]
    block = section.split("```", 2)[1]
    return [m[1] for line in block.splitlines() if (m := re.match(r"(\S.*?)\s{2,}\S", line))]


def test_the_drawing_is_the_contract():
    assert drawn_layers() == contract_layers()


def test_every_package_sits_in_a_layer():
    layered = {p.strip() for layer in contract_layers() for p in layer.split("|")}
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert packages == layered, "packages outside the contract, or layers with no package"
    assert modules == set(), "top-level modules belong to a layer's package"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """Modules of f4pipe that `tree` imports anywhere except under `if TYPE_CHECKING:`."""
    found: set[str] = set()
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            found |= subs & modules
            if node.module in modules and subs - modules:  # names defined in the module
                found.add(node.module)
        todo.extend(ast.iter_child_nodes(node))
    return found


def test_the_import_graph_has_no_cycle():
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    graph = {m: imports(ast.parse(p.read_text()), modules) - {m} for m, p in paths.items()}
    # a package imports its submodules through its __init__; that is not a cycle
    graph = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in graph.items()}
    state: dict[str, int] = {}  # 1 on the path, 2 done
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append([*path[path.index(t) :], t])
            elif t not in state:
                visit(t, [*path, t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles[:10])


#: A module longer than this is two modules (the codebases we admire keep theirs shorter).
MAX_MODULE_LINES = 600


def test_no_module_is_longer_than_600_lines():
    """The product and its research tools alike (research/ is maintained code too)."""
    modules = [*PACKAGE.rglob("*.py"), *(ROOT / "research" / "f4research").rglob("*.py")]
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_test_module_imports_another():
    """Shared test code lives in conftest.py or a helper module (resultsets, workflow_run,
    hostmodel, emu_snippets), never in a test_*.py another test imports."""
    tests = Path(__file__).resolve().parent
    offenders = []
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert offenders == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_another_s_private_names():
    found = [
        f"{path.relative_to(ROOT)}: {node.module}.{alias.name}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("f4pipe")
        for alias in node.names
        if _private(alias.name)
    ]
    assert found == []


def test_the_emulator_reaches_into_no_other_object_s_private_state():
    """The device and the co-launcher once shared the batch machinery through the device's
    private helpers; now f4pipe.emu.batch holds it and every emu module keeps to public
    names of the objects it is handed (its own, through self, cls or super(), aside)."""
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
        for path in (PACKAGE / "emu").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and _private(node.attr)
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        and not (isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "super")
    ]
    assert found == []
