"""Which kernel arguments a kernel's code actually uses, read from its instructions.

The seed driver's ABI table says which kernarg fields a kernel loads (`s_load_dword sN,
s[0:1], OFFSET`). Loading is not using: 32 of aiter's 35 f4gemm kernels load `alpha` (0x40)
into an SGPR that no instruction ever reads, so their D is A·B^T whatever alpha the caller
passes (aiter always passes 1.0). A verification with another alpha then fails, and this
module says why instead of leaving the engineer to find it in the disassembly.

The answer is one-sided on purpose: a field is "ignored" only when no instruction anywhere in
.text reads any register it was loaded into (any path, any later overwrite). A field read
somewhere may still not reach D; that is for the emulator's verdict to show.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from f4pipe.arch.effects import SGPR_BASE, effects_of, reg_name
from f4pipe.codeobj.program import Program
from f4pipe.core.errors import EmulatorError


@dataclass(frozen=True)
class KernargLoad:
    """One kernarg dword the kernel loads: its byte offset and the SGPR it lands in."""

    offset: int
    sgpr: int  # in effects.py's register space
    read: bool  # some instruction reads that SGPR

    @property
    def register(self) -> str:
        return reg_name(self.sgpr)


def kernarg_loads(co_path: str | Path, symbol: str) -> list[KernargLoad]:
    """Every kernarg dword the kernel loads through its kernarg pointer, by offset, and whether
    any instruction reads the register it lands in. Raises EmulatorError for a kernel the
    emulator cannot load."""
    prog = Program.load(co_path, symbol)
    insts = prog.instructions()
    effects = [effects_of(inst) for inst in insts]
    base = SGPR_BASE + prog.kernarg_sgpr
    kernarg_ptr = frozenset({base, base + 1}) if prog.kernarg_sgpr >= 0 else None
    loaded: dict[int, tuple[int, int]] = {}  # sgpr -> (offset, index of the loading instruction)
    for i, (inst, eff) in enumerate(zip(insts, effects, strict=True)):
        if eff.unit == "smem" and eff.reads.get("sbase") == kernarg_ptr:
            for dword, sgpr in enumerate(sorted(eff.load_dest)):
                loaded[sgpr] = (inst.offset + 4 * dword, i)
    readers: dict[int, set[int]] = {}
    for i, eff in enumerate(effects):
        for regs in eff.reads.values():
            for r in regs:
                readers.setdefault(r, set()).add(i)
    return sorted(
        (
            KernargLoad(offset, sgpr, bool(readers.get(sgpr, set()) - {load}))
            for sgpr, (offset, load) in loaded.items()
        ),
        key=lambda k: k.offset,
    )


def ignored_field(co_path: str | Path, symbol: str, offset: int) -> KernargLoad | None:
    """The load of the kernarg dword at `offset` when the kernel loads it and never reads it;
    None when it is read, not loaded, or the kernel cannot be analysed."""
    try:
        loads = kernarg_loads(co_path, symbol)
    except EmulatorError:
        return None
    return next((k for k in loads if k.offset == offset and not k.read), None)
