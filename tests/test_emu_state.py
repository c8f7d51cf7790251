"""The handlers' state protocol (f4pipe.emu.state.WaveState): exactly what the ops_* handlers
use, met by the engine's Executor, and the handlers never import the engine (mypy is not in
the environment, so the structural check is made here on a live Executor)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np

from f4pipe.codeobj.program import Program
from f4pipe.emu import ops_memory, ops_mfma, ops_scalar, ops_vector
from f4pipe.emu.engine import Executor, WaveIds
from f4pipe.emu.memory import GlobalMemory
from f4pipe.emu.state import WaveState

HANDLER_MODULES = (ops_memory, ops_mfma, ops_scalar, ops_vector)
EMU = Path(ops_scalar.__file__).parent


def declared() -> dict[str, object]:
    """The protocol's members: its annotated attributes and its methods."""
    methods = {n: v for n, v in vars(WaveState).items() if inspect.isfunction(v) and n[0] != "_"}
    return {**dict.fromkeys(WaveState.__annotations__), **methods}


def used_by_handlers() -> set[str]:
    """Every `ex.<name>` the handler modules read, write or call."""
    names: set[str] = set()
    for module in HANDLER_MODULES:
        tree = ast.parse(Path(module.__file__).read_text())
        for node in ast.walk(tree):
            is_ex = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if is_ex and node.value.id == "ex":
                names.add(node.attr)
    return names


def live_executor(manifest) -> Executor:
    entry = manifest.get("f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128")
    program = Program.load(manifest.co_path(entry), entry.symbol)
    ids = WaveIds(first_global_wave=0, waves_per_group=4, wg_ids=np.zeros((1, 3), np.int64))
    return Executor(program, GlobalMemory(), ids, max_instructions=1)


def test_the_protocol_declares_exactly_what_the_handlers_use():
    assert set(declared()) == used_by_handlers()


def test_an_executor_has_every_member_the_protocol_declares(manifest):
    ex = live_executor(manifest)
    for name, method in declared().items():
        assert hasattr(ex, name), f"Executor has no {name}, which WaveState declares"
        if method is None:
            continue
        have = inspect.signature(getattr(Executor, name)).parameters
        want = inspect.signature(method).parameters
        assert list(have) == list(want), f"Executor.{name}{tuple(have)} != WaveState's"
        defaults = [p.default for p in have.values()]
        assert defaults == [p.default for p in want.values()], name


def handler_imports(path: Path) -> set[str]:
    """Every module `path` imports, `if TYPE_CHECKING:` blocks included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_no_handler_imports_the_engine_even_for_type_checking():
    """lint-imports (pyproject's forbidden contract) leaves TYPE_CHECKING imports out."""
    for name in ("handlers", "state", "ops_memory", "ops_mfma", "ops_scalar", "ops_vector"):
        assert "f4pipe.emu.engine" not in handler_imports(EMU / f"{name}.py"), name
