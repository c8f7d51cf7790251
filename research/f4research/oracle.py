"""LLVM as an independent check of f4pipe's timing rules (docs/reference/timing.md, section D).

f4pipe's wait-state table and counter model were written by reading the ISA guide, LLVM and
rocRoller. LLVM's hazard recognizer and waitcnt insertion are implementations no one here
wrote, so kernels LLVM compiled are a cross-check of both directions:

- **(a) nothing to add**: on LLVM's output, `f4pipe hazards` finds nothing and `f4pipe waits`
  inserts nothing (otherwise f4pipe is stricter than LLVM: a false positive).
- **(b) every removal caught**: each `s_nop` LLVM inserted, shortened by one (an `s_nop 0`
  removed), and each `s_waitcnt`, loosened by one on one counter, must make f4pipe report a
  hazard exactly when the change exposes a register: for wait states LLVM's own padding says
  so; for counters a small model written here from LLVM's assembly text decides, not
  f4pipe's (otherwise a false negative, or a false positive when f4pipe reports what the
  model finds harmless).

A disagreement is either a bug to fix in f4pipe or a documented difference, listed in
EXPLAINED with the section of docs/reference/timing.md that decides it. The generator writes
small LLVM IR kernels for gfx950 from a seed over the instruction classes f4pipe models
(scaled MFMA and accumulator moves, VALU on MFMA results, permlane swaps, readfirstlane, an
SGPR written by a VALU feeding a buffer op, buffer and LDS loads and stores, LDS DMA, barriers,
M0 writes, scalar loads); LLVM may select instructions f4pipe does not decode, and such kernels
are dropped. `tests/test_llvm_oracle.py` runs a fixed set, `nox -s fuzz` a larger one
(research/f4research/crosscheck.py).

The parts: `oraclegen` writes the kernels, `oraclemodel` is the counter model written from
LLVM's text; this module compiles them, runs f4pipe's checks on them and tallies the outcomes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from f4pipe.codeobj.toolchain import Toolchain, llc_path, run_tool
from f4pipe.core.fsio import write_text
from f4research.oraclegen import kernel_ir, module_ir
from f4research.oraclemodel import (
    LDS_STORE,
    NO_WAIT,
    AsmInstruction,
    exposures,
    memory_op,
    registers,
    waitcnt,
)

# --- compiling: one llc and one llvm-mc run per batch of kernels ---------------------------


@dataclass(frozen=True)
class Compiled:
    """One kernel LLVM compiled: its code (address 0 = its first instruction), each
    instruction's text, and why f4pipe cannot check it ("" when f4pipe decodes all of it)."""

    seed: int
    code: bytes
    asm: tuple[AsmInstruction, ...]
    refused: str = ""


def compile_seeds(seeds: list[int], toolchain: Toolchain, work: Path) -> list[Compiled]:
    """Compile the kernels of `seeds` for gfx950 (llc to assembly, llvm-mc to an object)."""
    source, asm, obj = work / "kernels.ll", work / "kernels.s", work / "kernels.o"
    write_text(source, module_ir(seeds))
    run_tool(llc_path(toolchain), [*LLC_FLAGS, str(source), "-o", str(asm)])
    toolchain.run("llvm-mc", [*MC_FLAGS, "-filetype=obj", str(asm), "-o", str(obj)])
    lines = _function_lines(asm.read_text())
    text, symbols = _text_and_symbols(obj)
    out = []
    for seed in seeds:
        start, size = symbols[f"k{seed}"]
        out.append(_decoded(seed, text[start : start + size], lines[f"k{seed}"]))
    return out


LLC_FLAGS = ("-mtriple=amdgcn-amd-amdhsa", "-mcpu=gfx950", "-O2")
MC_FLAGS = ("-triple=amdgcn-amd-amdhsa", "-mcpu=gfx950")


def _function_lines(asm: str) -> dict[str, list[str]]:
    """Instruction lines of each function of llc's output (comments, labels and directives
    dropped)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in asm.splitlines():
        line = raw.split(";")[0].strip()
        if not line:
            continue
        if line.endswith(":") and not line.startswith("."):
            current = out.setdefault(line[:-1], [])
        elif line.startswith(".Lfunc_end"):
            current = None
        elif current is not None and not line.startswith(".") and not line.endswith(":"):
            current.append(" ".join(line.split()))
    return out


def _text_and_symbols(obj: Path) -> tuple[bytes, dict[str, tuple[int, int]]]:
    from elftools.elf.elffile import ELFFile

    with obj.open("rb") as fh:
        elf = ELFFile(fh)
        text_index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".text")
        text = elf.get_section(text_index).data()
        symbols = {
            sym.name: (sym["st_value"], sym["st_size"])
            for sym in elf.get_section_by_name(".symtab").iter_symbols()
            if sym["st_shndx"] == text_index and sym["st_info"]["type"] == "STT_FUNC"
        }
    return text, symbols


def _decoded(seed: int, code: bytes, lines: list[str]) -> Compiled:
    """Pair LLVM's lines with f4pipe's decoding; refuse at the first instruction f4pipe does
    not decode or has no timing effects for."""
    from f4pipe.arch.decode import decode_one
    from f4pipe.arch.effects import effects_of
    from f4pipe.core.errors import EmulatorError

    asm, pos = [], 0
    for line in lines:
        try:
            inst = decode_one(code, pos, pos)
            effects_of(inst)
        except EmulatorError:
            return Compiled(seed, code, tuple(asm), refused=line)
        if not inst.known:
            return Compiled(seed, code, tuple(asm), refused=line)
        if (
            inst.text_name.split("_e32")[0].split("_e64")[0]
            != line.split()[0].split("_e32")[0].split("_e64")[0]
        ):
            raise AssertionError(f"k{seed}: f4pipe decodes {inst.text_name} where LLVM has {line}")
        asm.append(AsmInstruction(line, pos, inst.size))
        pos += inst.size
    if pos != len(code):
        raise AssertionError(f"k{seed}: {len(code) - pos} bytes of code after LLVM's last line")
    return Compiled(seed, code, tuple(asm))


# --- the checks ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One check on one kernel: "clean" (f4pipe on LLVM's code as is), "s_nop" (an s_nop
    shortened by one) or "s_waitcnt" (a wait loosened by one on one counter). verdict:
    "agree", "false positive" (f4pipe reports what LLVM and the model find harmless) or
    "false negative" (f4pipe misses what they need); `explained` names the EXPLAINED class of
    a disagreement ("" when nothing explains it)."""

    seed: int
    check: str
    where: str
    verdict: str
    explained: str = ""
    detail: str = ""


#: Disagreements that are decided differences, not bugs: class -> the section of
#: docs/reference/timing.md that decides it.
EXPLAINED = {
    "lds-words": "D1: LDS words a DS store writes and another wave reads after a barrier are "
    "data; f4pipe checks them on emulated launches (lds-visibility), not statically (LDS DMA "
    "it checks statically)",
    "m0-buffer-lds": "D2 (rule B1.15's note): an SALU write of M0 right before buffer_load "
    "... lds; LLVM pads one wait state, the ISA's table does not ask for it",
    "unfenced-barrier": "D5: an s_barrier with an LDS DMA outstanding whose bytes a DS access "
    "after it may touch: f4pipe requires the DMA retired before the barrier (it publishes LDS "
    "to the other waves); LLVM waits there only for a workgroup release fence, which the IR "
    "leaves out",
    "xnack-soft-clause": "D3: LLVM breaks a clause of memory loads whose destinations overlap "
    "the clause's sources, which matters only when XNACK replays loads; f4pipe checks "
    "kernels for XNACK off",
}


def check_kernel(kernel: Compiled) -> list[Outcome]:
    """Every check on one kernel f4pipe decodes."""
    base = _f4pipe(kernel.code, kernel.seed)
    out = [_clean(kernel, base)]
    for i, ins in enumerate(kernel.asm):
        if ins.mnemonic == "s_nop":
            out.append(_nop_check(kernel, i, base))
        limits = waitcnt(ins.text)
        if limits is not None:
            for counter, cap in enumerate(NO_WAIT):
                if limits[counter] < cap:
                    out.append(_wait_check(kernel, i, counter, limits, base))
    return out


@dataclass(frozen=True)
class _Findings:
    wait_states: frozenset[tuple[int, int]]  # (producer pc, consumer pc)
    counters: frozenset[tuple[int, int]]
    rules: dict[tuple[int, int], str]  # wait-state (producer, consumer) -> rule id
    messages: tuple[str, ...]
    repairs: int


def _f4pipe(code: bytes, seed: int) -> _Findings:
    from f4pipe.analysis.hazards import analyse
    from f4pipe.analysis.waits import repairs
    from f4pipe.codeobj.program import Program

    program = Program.from_code(code, symbol=f"k{seed}")
    report = analyse(program)
    return _Findings(
        frozenset((f.hazard.producer_pc, f.hazard.consumer_pc) for f in report.wait_states),
        frozenset((f.hazard.producer_pc, f.hazard.consumer_pc) for f in report.counters),
        {(f.hazard.producer_pc, f.hazard.consumer_pc): f.hazard.rule for f in report.wait_states},
        tuple(f.hazard.message for f in (*report.wait_states, *report.counters)),
        len(repairs(Program.from_code(code, symbol=f"k{seed}"))),
    )


def _clean(kernel: Compiled, base: _Findings) -> Outcome:
    if not base.messages and not base.repairs:
        return Outcome(kernel.seed, "clean", "", "agree")
    detail = "; ".join(base.messages) or f"waits inserts {base.repairs} repair(s)"
    explained = _explain_clean(kernel, base.messages)
    return Outcome(kernel.seed, "clean", "", "false positive", explained, detail)


def _nop_check(kernel: Compiled, i: int, base: _Findings) -> Outcome:
    """LLVM padded here for a reason: one wait state fewer must break a rule f4pipe knows."""
    ins = kernel.asm[i]
    n = int(ins.text.split()[1], 0)
    if n:
        code = _patch_simm16(kernel.code, ins.pc, n - 1)
        pc_of = [a.pc for a in kernel.asm]
    else:
        code = kernel.code[: ins.pc] + kernel.code[ins.pc + ins.size :]
        pc_of = [a.pc - (ins.size if a.pc > ins.pc else 0) for a in kernel.asm]
    index = {pc: k for k, pc in enumerate(pc_of) if k != i or n}
    found = _f4pipe(code, kernel.seed)
    new = {
        found.rules[p, c]
        for p, c in found.wait_states
        if index[p] < i < index[c]
        and (kernel.asm[index[p]].pc, kernel.asm[index[c]].pc) not in base.wait_states
    }
    where = f"{i}: {ins.text}"
    if new:
        return Outcome(kernel.seed, "s_nop", where, "agree", detail=" ".join(sorted(new)))
    return Outcome(
        kernel.seed,
        "s_nop",
        where,
        "false negative",
        _explain_nop(kernel, i),
        f"{'s_nop ' + str(n - 1) if n else 'no s_nop'} before `{_next(kernel, i)}`: f4pipe "
        "reports nothing",
    )


def _wait_check(
    kernel: Compiled, i: int, counter: int, limits: tuple[int, int], base: _Findings
) -> Outcome:
    """A wait one count looser must expose exactly the registers the model says it does."""
    from f4pipe.arch.waitcnt import encode_waitcnt

    ins = kernel.asm[i]
    loose = (limits[0] + 1, limits[1]) if counter == 0 else (limits[0], limits[1] + 1)
    simm = int.from_bytes(kernel.code[ins.pc : ins.pc + 2], "little")
    code = _patch_simm16(kernel.code, ins.pc, encode_waitcnt(simm, *loose))
    index = {a.pc: k for k, a in enumerate(kernel.asm)}
    found = _f4pipe(code, kernel.seed)
    f4 = {(index[p], index[c]) for p, c in found.counters - base.counters}
    model = exposures(kernel.asm, {i: loose}) - exposures(kernel.asm, {})
    name = ("vmcnt", "lgkmcnt")[counter]
    where = f"{i}: {ins.text} -> {name}({loose[counter]})"
    if f4 == model:
        return Outcome(kernel.seed, "s_waitcnt", where, "agree")
    missed, extra = model - f4, f4 - model
    verdict = "false negative" if missed else "false positive"
    pairs = missed or extra
    classes = {_explain_pair(kernel, j, c, verdict) for j, c in pairs}
    detail = "; ".join(
        f"`{kernel.asm[j].text}` -> `{kernel.asm[c].text}`" for j, c in sorted(pairs)
    )
    explained = classes.pop() if len(classes) == 1 else ""
    return Outcome(kernel.seed, "s_waitcnt", where, verdict, explained, detail)


def _patch_simm16(code: bytes, pc: int, simm16: int) -> bytes:
    word = int.from_bytes(code[pc : pc + 4], "little")
    word = (word & 0xFFFF0000) | simm16
    return code[:pc] + word.to_bytes(4, "little") + code[pc + 4 :]


def _next(kernel: Compiled, i: int) -> str:
    return next((a.text for a in kernel.asm[i + 1 :] if a.mnemonic != "s_nop"), "")


_PUBLISHES = re.compile(r"pc (0x[0-9a-f]+) `s_barrier` publishes LDS bytes")


def _explain_clean(kernel: Compiled, messages: tuple[str, ...]) -> str:
    """unfenced-barrier: every finding is a barrier publishing an LDS DMA's bytes that LLVM
    did not retire before it, and each such barrier is one the IR does not fence (a
    workgroup-scope release fence is what makes LLVM wait there)."""
    pcs = [_PUBLISHES.match(m.split(": ", 1)[1]) for m in messages]
    if not messages or not all(pcs):
        return ""
    barriers = [a.pc for a in kernel.asm if a.mnemonic == "s_barrier"]
    fenced = _fenced_barriers(kernel_ir(kernel.seed))
    if len(fenced) != len(barriers):
        return ""
    if any(fenced[barriers.index(int(m.group(1), 16))] for m in pcs if m):
        return ""
    return "unfenced-barrier"


def _fenced_barriers(ir: str) -> list[bool]:
    """For each s_barrier call of the IR in order: a workgroup release fence right before it."""
    lines = [line.strip() for line in ir.splitlines()]
    return [
        i > 0 and lines[i - 1] == 'fence syncscope("workgroup") release'
        for i, line in enumerate(lines)
        if line == "call void @llvm.amdgcn.s.barrier()"
    ]


def _explain_nop(kernel: Compiled, i: int) -> str:
    """m0-buffer-lds: the next instruction is a buffer load to LDS and the instruction before
    the s_nop an SALU write of M0."""
    nxt = _next(kernel, i)
    before = kernel.asm[i - 1].text if i else ""
    m0_written = before.startswith("s_") and registers(before.split(",")[0]) == {"m0"}
    if nxt.startswith("buffer_load") and " lds" in nxt and m0_written:
        return "m0-buffer-lds"
    if _soft_clause(before) and _soft_clause(nxt) and before[:2] == nxt[:2]:
        return "xnack-soft-clause"
    return ""


def _soft_clause(text: str) -> bool:
    """A memory instruction that can share a soft clause: a buffer or a scalar load (LLVM's
    checkSoftClauseHazards)."""
    return text.startswith(("buffer_", "s_load"))


def _explain_pair(kernel: Compiled, j: int, c: int, verdict: str) -> str:
    """lds-words: the model's exposure is of LDS words a DS store writes, published to the
    other waves at a barrier, which f4pipe leaves to emulated launches. (LDS DMA has no such
    excuse: f4pipe checks it statically, f4pipe.analysis.ldsdma.)"""
    store = memory_op(kernel.asm[j].text).dest == {LDS_STORE}
    if verdict == "false negative" and store and kernel.asm[c].mnemonic == "s_barrier":
        return "lds-words"
    return ""


# --- a run ---------------------------------------------------------------------------------


@dataclass
class Tally:
    """What a run found: kernels generated and kept, and outcomes by check and verdict."""

    generated: int = 0
    kept: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # first undecoded mnemonic -> kernels
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, verdict: str, explained: bool | None = None, check: str = "") -> int:
        return sum(
            1
            for o in self.outcomes
            if o.verdict == verdict
            and (not check or o.check == check)
            and (explained is None or bool(o.explained) == explained)
        )

    @property
    def unexplained(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.verdict != "agree" and not o.explained]

    def summary(self) -> str:
        lines = [
            f"kernels: {self.generated} generated, {self.kept} kept (f4pipe decodes every "
            f"instruction), {self.generated - self.kept} dropped",
        ]
        for check in ("clean", "s_nop", "s_waitcnt"):
            agree = self.count("agree", check=check)
            fp = self.count("false positive", check=check)
            fn = self.count("false negative", check=check)
            fpx = self.count("false positive", True, check)
            fnx = self.count("false negative", True, check)
            lines.append(
                f"{check}: {agree + fp + fn} checks, {agree} agree, false positives {fp} "
                f"({fpx} explained), false negatives {fn} ({fnx} explained)"
            )
        by_class: dict[str, int] = {}
        for o in self.outcomes:
            if o.explained:
                by_class[o.explained] = by_class.get(o.explained, 0) + 1
        for name, n in sorted(by_class.items()):
            lines.append(f"explained {name}: {n} ({EXPLAINED[name]})")
        lines.append(f"unexplained disagreements: {len(self.unexplained)}")
        for o in self.unexplained[:20]:
            lines.append(f"  k{o.seed} {o.check} {o.where}: {o.verdict}: {o.detail}")
        return "\n".join(lines)


def run(seeds, toolchain: Toolchain, work: Path, batch: int = 50) -> Tally:
    """Generate, compile and check the kernels of `seeds` (`batch` kernels per llc run)."""
    tally = Tally()
    seeds = list(seeds)
    for start in range(0, len(seeds), batch):
        for kernel in compile_seeds(seeds[start : start + batch], toolchain, work):
            tally.generated += 1
            if kernel.refused:
                first = kernel.refused.split()[0]
                tally.refused[first] = tally.refused.get(first, 0) + 1
                continue
            tally.kept += 1
            tally.outcomes += check_kernel(kernel)
    return tally
