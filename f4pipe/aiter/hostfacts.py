"""The host-side facts of an aiter release that f4pipe's verdicts rest on, read from the
release's own source: which scale padding its shuffles write, how its dispatch picks an asm
kernel from a tuned row, and which shape checks its launcher makes.

The K-tail rule (f4pipe.aiter.shaperules) is safe or wrong by the scale padding the host
writes; aiter changed that padding between releases (PR 2900 zero-fills the padding its
quantisation kernel writes and pads the shuffled row stride). So a verdict is first stated
under the padding the fetched release writes, with the other paddings beside it.

A scale writer is recognised by a digest of its normalised source (the function's syntax tree
without docstring, comments or layout), held against a small table of the versions aiter has
shipped (docs/reference/aiter.md, "Host code"): a version not in the table is "unknown", and the
verdicts fall back to every padding's answer, naming the file. The dispatch and launcher facts
are read as the source states them (which tuned-table column the dispatch passes, the launcher's
TORCH_CHECK conditions), each with its file and line.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

#: aiter's files that hold the facts, as paths in its git tree (a wheel keeps csrc/ below
#: aiter_meta/).
FP4_UTILS = "aiter/utility/fp4_utils.py"
SHUFFLE = "aiter/ops/shuffle.py"
GEMM_OP = "aiter/ops/gemm_op_a4w4.py"
LAUNCHER = "csrc/py_itfs_cu/asm_gemm_a4w4.cu"
HOST_FILES = (FP4_UTILS, SHUFFLE, GEMM_OP, LAUNCHER)
#: Where a wheel keeps aiter's C++ sources.
WHEEL_META = "aiter_meta/"

#: The key of a fetch record's source that holds the facts (f4pipe.fetch.hostcode writes it).
HOST_FACTS_KEY = "host_facts"
#: The facts, by name (the keys of a fetch record's `host_facts`).
SCALE_SHUFFLE = "scale padding (e8m0_shuffle)"
QUANT_SHUFFLE = "scale padding (dynamic_mxfp4_quant, shuffled)"
DISPATCH = "asm dispatch of a tuned row"
LAUNCHER_CHECKS = "launcher shape checks"
#: The scale writers, in the order a verdict names them.
SCALE_WRITERS = (SCALE_SHUFFLE, QUANT_SHUFFLE)
UNKNOWN = "unknown"
#: Suffix of a padding value whose writer strides the scale rows by the unpadded width.
MISSTRIDED = ", unpadded stride"


@dataclass(frozen=True)
class KnownVersion:
    """A version of a scale writer aiter shipped, its padding taken out (writer_shape): the
    padding is read from the source, the rest must be a version f4pipe knows."""

    since: str  # the aiter commit (and release) that first shipped it
    misstrided: bool = False  # rows strided by the unpadded scale width (before PR 2900)


#: e8m0_shuffle, alone (to 2026-05) or handing over to aiter.ops.shuffle.shuffle_scale; every
#: version aiter shipped allocates the padded buffer with torch.empty (uninitialised).
SCALE_SHUFFLES = {
    "ce9659e9189f24d1": KnownVersion("beebb2b26c, 2025-06-22; amd-aiter 0.1.7.post2.dev18"),
    "ed1725fcc6033ae3+f1ae20a55b0bf5c0": KnownVersion("446260d19a, 2026-05-09"),
    "ed1725fcc6033ae3+cb37535c2aaa2fc7": KnownVersion("c2b69b9b87, 2026-07-09"),
    "ed1725fcc6033ae3+f7b9b6769ba7e20f": KnownVersion("044f906a8d, 2026-07-28"),
}
#: _dynamic_mxfp4_quant_kernel_asm_layout, the quantisation kernel that writes shuffled scales:
#: E8M0 127 (1.0) in the padding and the unpadded scale width as the row-group stride until
#: aiter PR 2900 (d6cefa9783, 2026-04-30), 0 and the padded stride from it.
QUANT_SHUFFLES = {
    "96c6b5f3a46226af": KnownVersion("3cde945a73, 2025-05-17", misstrided=True),
    "6e47dccd68041706": KnownVersion("0d08e95417, 2025-05-25", misstrided=True),
    "d3d539655b422d27": KnownVersion(
        "c8b954f0a3, 2025-05-27; amd-aiter 0.1.7.post2.dev18", misstrided=True
    ),
    "bad220929d98a267": KnownVersion("e6af9a487d, 2026-03-17", misstrided=True),
    "fc2ee589148b5753": KnownVersion("d6cefa9783, 2026-04-30: aiter PR 2900"),
}


@dataclass(frozen=True)
class HostFact:
    """One fact of the release's host code, and where its source says it."""

    name: str
    value: str  # a SCALE_PADDINGS name or UNKNOWN for a padding; the rule in words otherwise
    words: str  # how a verdict or compare names it
    file: str  # aiter-relative path ("" when the source holds no such file)
    line: int  # 1-based; 0 when the file or function is missing
    digest: str = ""  # the digest of the writer's shape (writer_shape; scale writers)
    version: str = ""  # the aiter commit that first shipped this shape (known writers)

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file or "(no file)"

    def record(self) -> dict[str, str | int]:
        return asdict(self)


#: Reads one aiter file by its git-tree path; None when the source does not hold it.
Reader = Callable[[str], str | None]


def _function(text: str, name: str) -> ast.FunctionDef | None:
    return next(
        (n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name),
        None,
    )


def function_digest(node: ast.FunctionDef) -> str:
    """A digest of the function without docstring, decorators, comments or layout: two
    sources that differ only in those are one version."""
    body = node.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        body = body[1:]  # the docstring
    parts = [ast.dump(node.args), *(ast.dump(stmt) for stmt in body)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _calls(node: ast.FunctionDef, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


#: An E8M0 fill value -> the padding it is (0x7F = 1.0, the C++ driver's).
FILLS = {0: "zeros", 0x7F: "driver"}


def _fill(node: ast.expr) -> str | None:
    value = node.value if isinstance(node, ast.Constant) else None
    return FILLS.get(value) if isinstance(value, int) else None


def _allocation(value: ast.expr) -> tuple[str | None, ast.expr]:
    """(the padding a scale buffer's allocation leaves, the allocation with its kind and fill
    taken out): torch.empty -> uninitialised, torch.zeros / .zero_() -> zeros,
    .fill_(v) / torch.full(shape, v) -> by v; anything else None."""
    fill: str | None = None
    filled = False
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr not in ("fill_", "zero_"):
            break
        fill = _fill(value.args[0]) if value.func.attr == "fill_" and value.args else "zeros"
        filled, value = True, value.func.value
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return None, value
    kind = value.func.attr
    args = list(value.args)
    if kind == "full" and len(args) == 2:
        fill, filled, args = _fill(args[1]), True, args[:1]
    padding = fill if filled else {"empty": "arbitrary", "zeros": "zeros"}.get(kind)
    if kind not in ("empty", "zeros", "full"):
        padding = None
    return padding, ast.Call(ast.Name("ALLOC"), args, value.keywords)


class _PaddingSlot(ast.NodeTransformer):
    """Takes the padding a scale writer writes out of its tree: the allocation of
    `scale_padded` (e8m0_shuffle, shuffle_scale) or the value `tl.where(bs_mask1, ...)` puts
    in the padding (the quantisation kernel); what is left is the writer's shape."""

    def __init__(self) -> None:
        self.paddings: list[str | None] = []

    def visit_Assign(self, node: ast.Assign) -> ast.Assign:
        self.generic_visit(node)
        if any(isinstance(t, ast.Name) and t.id == "scale_padded" for t in node.targets):
            padding, node.value = _allocation(node.value)
            self.paddings.append(padding)
        return node

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        func, args = node.func, node.args
        where = isinstance(func, ast.Attribute) and func.attr == "where" and len(args) == 3
        if where and isinstance(args[0], ast.Name) and args[0].id == "bs_mask1":
            self.paddings.append(_fill(args[2]))
            node.args = [*args[:2], ast.Name("PAD")]
        return node


def writer_shape(node: ast.FunctionDef) -> tuple[str, list[str | None]]:
    """(the digest of the writer with its padding taken out, the paddings it writes)."""
    slot = _PaddingSlot()
    shape = slot.visit(copy.deepcopy(node))
    return function_digest(shape), slot.paddings


#: How a verdict names each padding a writer can leave.
PADDING_WORDS = {
    "arbitrary": "uninitialised scale padding",
    "zeros": "zero padding",
    "driver": "E8M0 1.0 scale padding",
}


def _padding_words(padding: str, version: KnownVersion, function: str) -> str:
    text = PADDING_WORDS[padding]
    if version.misstrided:
        text += ", scale rows strided by the unpadded width"
    return f"{text} (this release's {function})"


def _scale_writer(
    name: str, read: Reader, path: str, function: str, table: dict[str, KnownVersion]
) -> HostFact:
    text = read(path)
    if text is None:
        return HostFact(name, UNKNOWN, f"unknown: {path} not in this source", path, 0)
    try:
        node = _function(text, function)
        inner_text = read(SHUFFLE) if node is not None and _calls(node, "shuffle_scale") else None
        inner = _function(inner_text, "shuffle_scale") if inner_text is not None else None
    except SyntaxError as exc:
        words = f"unknown: {path} or {SHUFFLE} does not parse ({exc.msg})"
        return HostFact(name, UNKNOWN, words, path, 0)
    if node is None:
        return HostFact(name, UNKNOWN, f"unknown: {path} defines no {function}", path, 0)
    line = node.lineno
    digest, paddings = writer_shape(node)
    if _calls(node, "shuffle_scale"):  # e8m0_shuffle hands over to aiter.ops.shuffle
        inner_digest, paddings = writer_shape(inner) if inner is not None else ("missing", [])
        digest += "+" + inner_digest
    known = table.get(digest)
    # the first allocation is the GEMM path's (shuffle_scale's second is its MoE layout)
    if known is None or not paddings or paddings[0] is None:
        words = f"unknown: {function} of {path}:{line} is no version f4pipe knows"
        return HostFact(name, UNKNOWN, words, path, line, digest)
    value = paddings[0] + (MISSTRIDED if known.misstrided else "")
    words = _padding_words(paddings[0], known, function)
    return HostFact(name, value, words, path, line, digest, known.since)


def _line_of(text: str, pattern: str) -> tuple[int, re.Match[str]] | None:
    for number, line in enumerate(text.splitlines(), 1):
        found = re.search(pattern, line)
        if found:
            return number, found
    return None


def _dispatch(read: Reader) -> HostFact:
    """Which tuned-table column gemm_a4w4 hands the asm launcher (kernelName or kernelId), and
    what the launcher does with a name its manifest lacks."""
    text = read(GEMM_OP)
    if text is None:
        return HostFact(DISPATCH, UNKNOWN, f"unknown: {GEMM_OP} not in this source", GEMM_OP, 0)
    found = _line_of(text, r"""=\s*\w*config\[["'](kernelName|kernelId)["']\]""")
    if found is None:
        words = f"unknown: {GEMM_OP} reads neither kernelName nor kernelId"
        return HostFact(DISPATCH, UNKNOWN, words, GEMM_OP, 0)
    number, column = found
    rule = f"by {column[1]}"
    launcher = read(LAUNCHER) or ""
    if _line_of(launcher, r"arch_id\s*\+\s*kernelName"):
        rule += ", the name prefixed with the device's arch"
    if _line_of(launcher, r"CHECK\(\s*false.*not find kernel"):
        rule += "; a name the manifest lacks is an error of the launcher"
    return HostFact(DISPATCH, rule, f"a tuned row picks its asm kernel {rule}", GEMM_OP, number)


def _launcher_checks(read: Reader) -> HostFact:
    """The launcher's TORCH_CHECK / AITER_CHECK conditions in order (a changed check changes
    the value); bare failures (`false`) are errors, not checks."""
    text = read(LAUNCHER)
    if text is None:
        words = f"unknown: {LAUNCHER} not in this source"
        return HostFact(LAUNCHER_CHECKS, UNKNOWN, words, LAUNCHER, 0)
    flat = re.sub(r"\s+", " ", text)
    found = re.finditer(r"(?:TORCH|AITER)_CHECK\(\s*([^,]+),", flat)
    checks = [m[1].strip() for m in found if m[1].strip() != "false"]
    first = _line_of(text, r"(?:TORCH|AITER)_CHECK\(")
    value = "; ".join(checks) or "none"
    return HostFact(
        LAUNCHER_CHECKS, value, f"launcher checks: {value}", LAUNCHER, first[0] if first else 0
    )


def read_host_facts(read: Reader) -> dict[str, HostFact]:
    """Every host fact of a source, by name."""
    facts = [
        _scale_writer(SCALE_SHUFFLE, read, FP4_UTILS, "e8m0_shuffle", SCALE_SHUFFLES),
        _scale_writer(
            QUANT_SHUFFLE,
            read,
            FP4_UTILS,
            "_dynamic_mxfp4_quant_kernel_asm_layout",
            QUANT_SHUFFLES,
        ),
        _dispatch(read),
        _launcher_checks(read),
    ]
    return {f.name: f for f in facts}


def facts_from_record(record: dict[str, dict[str, str | int]] | None) -> dict[str, HostFact]:
    """The host facts a fetch record keeps (empty for a fetch made before they were read)."""
    return {name: HostFact(**fact) for name, fact in (record or {}).items()}  # type: ignore[arg-type]
