"""One home per fact: the arch name and the CU count (f4pipe.arch.gfx950), the s_waitcnt bit
layout (f4pipe.arch.waitcnt) and the safety verdicts (f4pipe.core.verdicts) are each defined
once; every other module imports them. A second definition is how they drifted before (the
report ranked four verdicts while the sweep wrote five)."""

from __future__ import annotations

import ast
from pathlib import Path

from f4pipe.arch.gfx950 import ARCH, NUM_CU
from f4pipe.core.verdicts import SAFETY_VERDICTS
from f4pipe.perf.costs import COST

PACKAGE = Path(__file__).resolve().parents[1] / "f4pipe"


def _module_constants() -> dict[str, list[tuple[str, ast.expr]]]:
    """Per module of f4pipe (path below the package), its top-level (name, value) bindings."""
    found: dict[str, list[tuple[str, ast.expr]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and node.value is not None:
                targets = [t for t in node.targets if isinstance(t, ast.Name | ast.Tuple)]
                value = node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            for target in targets:
                pairs = (
                    zip(target.elts, value.elts, strict=False)
                    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                    else [(target, value)]
                )
                found.setdefault(str(path.relative_to(PACKAGE)), []).extend(
                    (ast.unparse(t), v) for t, v in pairs
                )
    return found


CONSTANTS = _module_constants()


def _homes(defines) -> set[str]:
    return {mod for mod, pairs in CONSTANTS.items() if any(defines(n, v) for n, v in pairs)}


def _strings(node: ast.expr) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and type(n.value) is str}


def test_the_arch_name_is_defined_once():
    assert _homes(lambda n, v: isinstance(v, ast.Constant) and v.value == ARCH) == {
        "arch/gfx950.py"
    }


def test_the_cu_count_is_defined_once_and_the_cost_table_reads_it():
    def defines(name: str, value: ast.expr) -> bool:
        return "CU" in name.upper() and isinstance(value, ast.Constant) and value.value == NUM_CU

    assert _homes(defines) == {"arch/gfx950.py"}
    assert COST["num_cu"] == NUM_CU
    costs = (PACKAGE / "perf/costs.py").read_text()
    assert f'"num_cu",\n        {NUM_CU},' not in costs  # the table names NUM_CU, not a copy


def test_the_safety_verdicts_are_listed_once():
    """No module but core/verdicts.py binds a collection holding every unsafe verdict word."""
    words = set(SAFETY_VERDICTS) - {"safe"}
    assert _homes(lambda n, v: words <= _strings(v)) == {"core/verdicts.py"}


def test_the_waitcnt_fields_are_encoded_once():
    limits = _homes(lambda n, v: n.split(", ")[0].strip("()") in {"VM_MAX", "LGKM_MAX"})
    assert limits == {"arch/waitcnt.py"}
    coders = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and "waitcnt" in node.name
        and any(  # takes an immediate apart or puts one together
            isinstance(b, ast.BinOp) and isinstance(b.op, ast.RShift | ast.LShift | ast.BitAnd)
            for b in ast.walk(node)
        )
    }  # fmt: skip
    assert coders == {"arch/waitcnt.py"}
