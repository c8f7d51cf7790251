"""`f4pipe waits --apply`: the kernel's assembly with the waits and wait states it lacks
inserted, and (--loosen) its waits relaxed to the loosest the emulator confirms.

Minimal means: every inserted line sits immediately before an instruction the static check
flags, one s_waitcnt per such instruction (with the loosest counts that cover every op it reads
too early) and the fewest s_nop (an `s_nop N` supplies N+1 wait states, at most 8 per s_nop);
for an LDS access the emulator finds unordered with another wave's (a dropped s_barrier), one
s_waitcnt and one s_barrier right before it (f4pipe.analysis.waits.barrier_repairs);
a loosened wait keeps its line and changes only its counts; no other line changes. Every
changed line carries a `// f4pipe waits:` comment saying why.

Lines map to instructions by order: the text between the kernel's label and the first blank
line holds one instruction (or data word) per line, in pc order, and each line's mnemonic is
checked against the decoded instruction at that pc before anything is written.
"""

from __future__ import annotations

import numpy as np

from f4pipe.analysis.waits import Repair
from f4pipe.arch.waitcnt import LGKM_MAX, VM_MAX
from f4pipe.codeobj.program import Program
from f4pipe.core.errors import InputError

#: Most wait states one s_nop supplies (s_nop 7).
MAX_NOP_STATES = 8
MARK = "// f4pipe waits:"


def pc_lines(asm: list[str], program: Program) -> dict[int, int]:
    """pc -> index of its line in `asm` (co2asm's layout), checked mnemonic by mnemonic."""
    label = f"{program.symbol}:"
    try:
        start = next(i for i, line in enumerate(asm) if line.strip() == label) + 1
    except StopIteration:
        raise InputError(f"no label {label} in the assembly") from None
    by_pc = {inst.pc: inst for inst in program.instructions()}
    pc = min(by_pc)
    out: dict[int, int] = {}
    for i in range(start, len(asm)):
        text = asm[i].split("//", 1)[0].strip()
        if not asm[i].strip():
            break
        if not text or text.endswith(":"):
            continue
        inst = by_pc.get(pc)
        if inst is None:
            break
        word = text.split()[0]
        if not word.startswith(".") and word != inst.text_name:
            raise InputError(
                f"line {i + 1} `{text}` is not the instruction at pc {pc:#x} "
                f"({inst.text_name}): the assembly does not match its code object"
            )
        out[pc] = i
        pc += inst.size
    return out


def original_pcs(
    applied: list[str], program: Program, original: list[str], original_program: Program
) -> dict[int, int]:
    """pc in the applied text's program -> pc of the same instruction in the original (lines
    this module inserted, marked `inserted`, have none)."""
    orig_pc = {line: pc for pc, line in pc_lines(original, original_program).items()}
    inserted = [f"{MARK} inserted" in text for text in applied]
    before = np.cumsum([0, *inserted])  # inserted lines above each line
    out = {}
    for pc, line in pc_lines(applied, program).items():
        shift = int(before[line])
        if not inserted[line] and line - shift in orig_pc:
            out[pc] = orig_pc[line - shift]
    return out


def merge_repairs(fixes: list[Repair]) -> list[Repair]:
    """One Repair per pc: the strictest wait, the most wait states, a barrier if any asks."""
    by_pc: dict[int, Repair] = {}
    for r in fixes:
        old = by_pc.get(r.before_pc)
        if old is None:
            by_pc[r.before_pc] = r
            continue
        waits = [w for w in (old.wait, r.wait) if w is not None]
        wait = (min(w[0] for w in waits), min(w[1] for w in waits)) if waits else None
        by_pc[r.before_pc] = Repair(
            r.before_pc,
            wait,
            max(old.wait_states, r.wait_states),
            old.why + r.why,
            old.why_states + r.why_states,
            old.barrier or r.barrier,
        )
    return [by_pc[pc] for pc in sorted(by_pc)]


def waitcnt_text(vm: int, lgkm: int) -> str:
    parts = [f"vmcnt({vm})" if vm < VM_MAX else "", f"lgkmcnt({lgkm})" if lgkm < LGKM_MAX else ""]
    return "s_waitcnt " + " ".join(p for p in parts if p) if any(parts) else "s_nop 0"


def nops(states: int) -> list[str]:
    """The fewest s_nop lines that supply `states` wait states."""
    out = []
    while states > 0:
        n = min(states, MAX_NOP_STATES)
        out.append(f"s_nop {n - 1}")
        states -= n
    return out


def apply_repairs(
    asm: list[str],
    program: Program,
    fixes: list[Repair],
    loosened: dict[int, tuple[int, int]] | None = None,
) -> tuple[list[str], list[str]]:
    """(the new lines, one line per change saying what and why)."""
    where = pc_lines(asm, program)
    inserts: dict[int, list[str]] = {}
    changes: list[str] = []
    for r in merge_repairs(fixes):
        line = where[r.before_pc]
        new = []
        if r.wait is not None:
            new.append(f"\t{waitcnt_text(*r.wait)}\t{MARK} inserted: {r.why[0][:160]}")
        if r.barrier:
            new.append(f"\ts_barrier\t{MARK} inserted: another wave's LDS op is unordered here")
        rule = r.why_states[0].split("]", 1)[0].removeprefix("hazard [") if r.why_states else ""
        new += [
            f"\t{n}\t{MARK} inserted: {r.wait_states} wait state(s) for rule {rule}"
            for n in nops(r.wait_states)
        ]
        inserts[line] = new
        changes += [f"before line {line + 1} (pc {r.before_pc:#x}): {n.strip()}" for n in new]
    out = list(asm)
    for pc, (vm, lgkm) in (loosened or {}).items():
        line = where[pc]
        old = out[line].split("//", 1)[0].strip()
        text = _loosened_text(old, vm, lgkm)
        out[line] = f"\t{text}\t{MARK} was `{old}` (loosest the emulator confirms)"
        changes.append(f"line {line + 1} (pc {pc:#x}): `{old}` -> `{text}`")
    for line in sorted(inserts, reverse=True):
        out[line:line] = inserts[line]
    return out, changes


def _loosened_text(old: str, vm: int, lgkm: int) -> str:
    """The wait with new vmcnt/lgkmcnt and its other counters (expcnt) as they were."""
    kept = [w for w in old.split()[1:] if not w.startswith(("vmcnt", "lgkmcnt"))]
    fields = [f"vmcnt({vm})" if vm < VM_MAX else "", *kept]
    fields.append(f"lgkmcnt({lgkm})" if lgkm < LGKM_MAX else "")
    fields = [f for f in fields if f]
    return "s_waitcnt " + " ".join(fields) if fields else "s_nop 0"  # waits for nothing
