"""A kernel as the emulator runs it: its code object's .text, entry point and launch settings.

Everything comes from the code object itself (what was assembled is what runs): the entry pc
from the kernel descriptor's kernel_code_entry_byte_offset, the initial register layout and
float mode from compute_pgm_rsrc1/2 and kernel_code_properties (AMDGPUUsage, "Kernel
Descriptor" and "Initial Kernel Execution State"). Settings this emulator does not model
(scratch, dispatch/queue pointers, non-RNE rounding, partial denormal modes) raise
EmulatorError at load time rather than running with a wrong assumption.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from f4pipe.codeobject import CodeObject, descriptor_fields
from f4pipe.emu.decode import Instruction, decode_one
from f4pipe.errors import CodeObjectError, EmulatorError

# kernel_code_properties bits (AMDGPUUsage, "Kernel Descriptor for GFX6-GFX12").
KCP_PRIVATE_SEGMENT_BUFFER = 1 << 0
KCP_DISPATCH_PTR = 1 << 1
KCP_QUEUE_PTR = 1 << 2
KCP_KERNARG_SEGMENT_PTR = 1 << 3
KCP_DISPATCH_ID = 1 << 4
KCP_FLAT_SCRATCH_INIT = 1 << 5
KCP_PRIVATE_SEGMENT_SIZE = 1 << 6
KCP_UNSUPPORTED = (
    KCP_PRIVATE_SEGMENT_BUFFER
    | KCP_DISPATCH_PTR
    | KCP_QUEUE_PTR
    | KCP_DISPATCH_ID
    | KCP_FLAT_SCRATCH_INIT
    | KCP_PRIVATE_SEGMENT_SIZE
)


@dataclass
class Program:
    """One kernel of a code object, decoded lazily and cached by pc."""

    co_path: Path
    symbol: str
    text: bytes
    text_addr: int
    entry: int
    lds_bytes: int
    kernarg_bytes: int
    user_sgprs: int
    kernarg_sgpr: int
    workgroup_id_sgprs: dict[int, int]  # dimension (0=x) -> SGPR number
    flush_f32_denorms: bool
    labels: dict[int, str] = field(default_factory=dict)
    _cache: dict[int, Instruction] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, co_path: str | Path, symbol: str) -> Program:
        co_path = Path(co_path)
        try:
            co = CodeObject.read(co_path)
        except CodeObjectError as exc:
            raise EmulatorError(f"cannot load {co_path}: {exc}") from exc
        if co.arch != "gfx950":
            raise EmulatorError(
                f"{co_path}: built for {co.arch}; the emulator runs gfx950 code only"
            )
        names = [s.name for s in co.kernel_symbols()]
        if symbol not in names:
            raise EmulatorError(f"{co_path}: no kernel {symbol!r}; kernels: {', '.join(names)}")
        kd_sym = next(s for s in co.symbols if s.name == f"{symbol}.kd")
        kd = descriptor_fields(co.kernel_descriptor(symbol))
        text_sec = co.sections[".text"]
        entry = kd_sym.value + kd["kernel_code_entry_byte_offset"]
        if not text_sec.addr <= entry < text_sec.addr + text_sec.size:
            raise EmulatorError(f"{co_path}: {symbol} entry {entry:#x} is outside .text")
        where = f"{co_path.name}:{symbol}"
        rsrc1, rsrc2, kcp = (
            kd["compute_pgm_rsrc1"],
            kd["compute_pgm_rsrc2"],
            kd["kernel_code_properties"],
        )
        if kcp & KCP_UNSUPPORTED:
            raise EmulatorError(
                f"{where}: kernel_code_properties {kcp:#x} asks for user SGPRs other than the "
                "kernarg pointer (scratch, dispatch/queue pointers): not modelled"
            )
        if kd["private_segment_fixed_size"] or rsrc2 & 1:
            raise EmulatorError(f"{where}: uses scratch (private segment), which is not modelled")
        if (rsrc1 >> 12) & 3:
            raise EmulatorError(f"{where}: FLOAT_ROUND_MODE_32 {(rsrc1 >> 12) & 3} is not RNE")
        denorm32 = (rsrc1 >> 16) & 3
        if denorm32 not in (0, 3):
            raise EmulatorError(
                f"{where}: FLOAT_DENORM_MODE_32 {denorm32} (partial flush) unsupported"
            )
        user_sgprs = (rsrc2 >> 1) & 0x1F
        kernarg_sgpr = 0 if kcp & KCP_KERNARG_SEGMENT_PTR else -1
        nxt = user_sgprs
        wg_ids = {}
        for dim in range(3):
            if rsrc2 >> (7 + dim) & 1:
                wg_ids[dim] = nxt
                nxt += 1
        labels = {s.value: s.name for s in co.symbols if s.section == ".text"}
        meta = co.metadata() or {}
        kernarg_bytes = kd["kernarg_size"]
        for k in meta.get("amdhsa.kernels", []):
            if k.get(".name") == symbol or k.get(".symbol") == f"{symbol}.kd":
                kernarg_bytes = max(kernarg_bytes, int(k.get(".kernarg_segment_size", 0)))
        return cls(
            co_path=co_path,
            symbol=symbol,
            text=co.section_bytes(".text"),
            text_addr=text_sec.addr,
            entry=entry,
            lds_bytes=kd["group_segment_fixed_size"],
            kernarg_bytes=kernarg_bytes,
            user_sgprs=user_sgprs,
            kernarg_sgpr=kernarg_sgpr,
            workgroup_id_sgprs=wg_ids,
            flush_f32_denorms=denorm32 == 0,
            labels=labels,
        )

    @classmethod
    def from_code(
        cls,
        text: bytes,
        *,
        symbol: str = "snippet",
        lds_bytes: int = 65536,
        flush_f32_denorms: bool = True,
    ) -> Program:
        """A bare instruction sequence at address 0 (for instruction-level tests): kernarg
        pointer in s[0:1], workgroup ids x/y/z in s2..s4, like the f4gemm descriptors."""
        return cls(
            co_path=Path("<code>"),
            symbol=symbol,
            text=bytes(text),
            text_addr=0,
            entry=0,
            lds_bytes=lds_bytes,
            kernarg_bytes=0,
            user_sgprs=2,
            kernarg_sgpr=0,
            workgroup_id_sgprs={0: 2, 1: 3, 2: 4},
            flush_f32_denorms=flush_f32_denorms,
        )

    def at(self, pc: int) -> Instruction:
        """The instruction at `pc` (decoded on first use)."""
        inst = self._cache.get(pc)
        if inst is None:
            pos = pc - self.text_addr
            if not 0 <= pos < len(self.text) or pos & 3:
                raise EmulatorError(f"{self.symbol}: pc {pc:#x} is outside .text or misaligned")
            inst = decode_one(self.text, pos, pc)
            self._cache[pc] = inst
        return inst
