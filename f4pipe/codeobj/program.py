"""A kernel as the emulator runs it: its code object's .text, entry point and launch settings.

Everything comes from the code object itself (what was assembled is what runs): the entry pc
from the kernel descriptor's kernel_code_entry_byte_offset, the initial register layout and
float mode from compute_pgm_rsrc1/2 and kernel_code_properties (AMDGPUUsage, "Kernel
Descriptor" and "Initial Kernel Execution State"). Settings this emulator does not model
(scratch, dispatch/queue pointers, non-RNE rounding, partial denormal modes) raise
EmulatorError at load time rather than running with a wrong assumption.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from f4pipe.arch import gfx950
from f4pipe.arch.decode import Instruction, decode_one
from f4pipe.arch.effects import Effects, effects_of
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.codeobj.descriptor import (
    RESERVED_BYTES,
    allocated_sgprs,
    allocated_vgprs,
    descriptor_bits,
    descriptor_fields,
)
from f4pipe.core.errors import CodeObjectError, EmulatorError

# Bits AMDGPUUsage marks "must be 0" or reserved on GFX9 (gfx950 is GFX9): compute_pgm_rsrc1
# PRIORITY (11:10), DEBUG_MODE (22), BULKY (24), CDBG_USER (25), 31:27 (GFX10+ fields);
# compute_pgm_rsrc2 ENABLE_TRAP_HANDLER (6), ADDRESS_WATCH (13), MEMORY (14),
# GRANULATED_LDS_SIZE (23:15, set by the CP), 31; compute_pgm_rsrc3 (GFX90A+) all but
# ACCUM_OFFSET (5:0) and TG_SPLIT (16); kernel_code_properties 15:7 on GFX9.
RSRC1_MUST_BE_ZERO = 0x3 << 10 | 1 << 22 | 1 << 24 | 1 << 25 | 0x1F << 27
RSRC2_MUST_BE_ZERO = 1 << 6 | 1 << 13 | 1 << 14 | 0x1FF << 15 | 1 << 31
RSRC3_MUST_BE_ZERO = 0xFFFFFFFF & ~(0x3F | 1 << 16)
KCP_MUST_BE_ZERO = 0xFF80
#: Far above any real kernarg block (f4gemm's is 368 bytes), so a corrupt size (2^40) never
#: reaches an allocation.
MAX_KERNARG_BYTES = 1 << 20

#: User SGPRs other than the kernarg pointer: not modelled (scratch, dispatch/queue pointers).
UNSUPPORTED_USER_SGPRS = (
    "enable_sgpr_private_segment_buffer",
    "enable_sgpr_dispatch_ptr",
    "enable_sgpr_queue_ptr",
    "enable_sgpr_dispatch_id",
    "enable_sgpr_flat_scratch_init",
    "enable_sgpr_private_segment_size",
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
    #: Work-items a workgroup may have (the metadata's .max_flat_workgroup_size; 1024, the
    #: hardware's limit, when absent) and the work-item id dimensions v0 packs (the
    #: descriptor's enable_vgpr_workitem_id: 0 = x alone): they bound the work-item id, and with
    #: it the LDS addresses f4pipe.analysis.ldsranges derives from it. The emulator reads
    #: neither (executed_digest leaves them out).
    max_workgroup_size: int = 1024
    workitem_id_dims: int = 0
    labels: dict[int, str] = field(default_factory=dict)
    _cache: dict[int, Instruction] = field(default_factory=dict, repr=False)
    _effects: dict[int, Effects] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _swept: list[Instruction] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, co_path: str | Path, symbol: str) -> Program:
        """The kernel `symbol` of the code object at `co_path`, decoded once per CodeObject
        (inside f4pipe.codeobj.codeobject.shared_images, once per file and command)."""
        co_path = Path(co_path)
        try:
            co = CodeObject.read(co_path)
        except CodeObjectError as exc:
            raise EmulatorError(f"cannot load {co_path}: {exc}") from exc
        program = co.programs.get(symbol)
        if program is None:
            program = co.programs[symbol] = cls._of(co, co_path, symbol)
        return program

    @classmethod
    def _of(cls, co: CodeObject, co_path: Path, symbol: str) -> Program:
        if co.arch != gfx950.ARCH:
            raise EmulatorError(
                f"{co_path}: built for {co.arch}; the emulator runs gfx950 code only"
            )
        names = [s.name for s in co.kernel_symbols()]
        if symbol not in names:
            raise EmulatorError(f"{co_path}: no kernel {symbol!r}; kernels: {', '.join(names)}")
        kd_sym = next(s for s in co.symbols if s.name == f"{symbol}.kd")
        try:
            kd_bytes = co.kernel_descriptor(symbol)
            meta = kernel_metadata(co.metadata(), symbol, co_path)
        except CodeObjectError as exc:
            raise EmulatorError(f"cannot load {co_path}: {exc}") from exc
        kd = descriptor_fields(kd_bytes)
        bits = descriptor_bits(kd_bytes)
        text_sec = co.sections[".text"]
        entry = kd_sym.value + kd["kernel_code_entry_byte_offset"]
        if not text_sec.addr <= entry < text_sec.addr + text_sec.size or entry & 3:
            raise EmulatorError(
                f"{co_path}: {symbol} entry {entry:#x} is outside .text or not 4-byte aligned"
            )
        where = f"{co_path.name}:{symbol}"
        check_descriptor(kd_bytes, meta, where)
        if any(bits[name] for name in UNSUPPORTED_USER_SGPRS):
            raise EmulatorError(
                f"{where}: kernel_code_properties {kd['kernel_code_properties']:#x} asks for user "
                "SGPRs other than the kernarg pointer (scratch, dispatch/queue pointers): not "
                "modelled"
            )
        if kd["private_segment_fixed_size"] or bits["enable_private_segment"]:
            raise EmulatorError(f"{where}: uses scratch (private segment), which is not modelled")
        if bits["float_round_mode_32"]:
            raise EmulatorError(
                f"{where}: FLOAT_ROUND_MODE_32 {bits['float_round_mode_32']} is not RNE"
            )
        denorm32 = bits["float_denorm_mode_32"]
        if denorm32 not in (0, 3):
            raise EmulatorError(
                f"{where}: FLOAT_DENORM_MODE_32 {denorm32} (partial flush) unsupported"
            )
        user_sgprs = bits["user_sgpr_count"]
        kernarg_sgpr = 0 if bits["enable_sgpr_kernarg_segment_ptr"] else -1
        nxt = user_sgprs
        wg_ids = {}
        for dim, axis in enumerate("xyz"):
            if bits[f"enable_sgpr_workgroup_id_{axis}"]:
                wg_ids[dim] = nxt
                nxt += 1
        labels = {s.value: s.name for s in co.symbols if s.section == ".text"}
        kernarg_bytes = max(kd["kernarg_size"], meta.get(".kernarg_segment_size", 0))
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
            max_workgroup_size=meta.get(".max_flat_workgroup_size") or 1024,
            workitem_id_dims=bits["enable_vgpr_workitem_id"],
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

    def instructions(self) -> list[Instruction]:
        """Every instruction of .text in order (a linear sweep: .text holds only code), each
        decoded once: `at` finds them, and they it."""
        if self._swept is None:
            self._swept = self.instructions_from(self.text_addr)
        return list(self._swept)

    def instructions_from(self, pc: int) -> list[Instruction]:
        """The instructions from `pc` to the end of .text (a linear sweep from there), through
        `at`, so the emulator and every pass share one decode of each."""
        out, end = [], self.text_addr + len(self.text)
        while pc < end:
            inst = self.at(pc)
            out.append(inst)
            pc += inst.size
        return out

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

    def effects(self, pc: int) -> Effects:
        """The timing effects of the instruction at `pc` (outside GPR indexing), found once:
        every static pass (wait states, counters, LDS ranges) asks for them at every step."""
        e = self._effects.get(pc)
        if e is None:
            e = self._effects[pc] = effects_of(self.at(pc))
        return e


#: Metadata keys the emulator reads, with the type each must have (AMDGPUUsage, "Code Object
#: V3+ Metadata", amdhsa.kernels entries).
_KERNEL_META_INTS = (
    ".kernarg_segment_size",
    ".vgpr_count",
    ".agpr_count",
    ".sgpr_count",
    ".max_flat_workgroup_size",
)


def kernel_metadata(meta: object, symbol: str, co_path: Path) -> dict[str, int]:
    """The integer fields of `symbol`'s amdhsa.kernels entry, each checked for type and range;
    {} if the object has no metadata or no entry for the kernel (the descriptor then rules)."""
    if meta is None:
        return {}
    kernels = meta.get("amdhsa.kernels", []) if isinstance(meta, dict) else None
    if not isinstance(kernels, list) or not all(isinstance(k, dict) for k in kernels):
        raise EmulatorError(f"{co_path}: metadata amdhsa.kernels is not a list of maps")
    for k in kernels:
        if k.get(".name") == symbol or k.get(".symbol") == f"{symbol}.kd":
            out = {}
            for key in _KERNEL_META_INTS:
                value = k.get(key, 0)
                if type(value) is not int or not 0 <= value <= MAX_KERNARG_BYTES:
                    raise EmulatorError(
                        f"{co_path}: metadata {key} of {symbol} is {value!r}, not an integer "
                        f"in 0..{MAX_KERNARG_BYTES}"
                    )
                out[key] = value
            return out
    return {}


def check_descriptor(kd: bytes, meta: dict[str, int], where: str) -> None:
    """Refuse a descriptor the hardware would reject or that contradicts the metadata: reserved
    bits or bytes set, a VGPR/SGPR allocation smaller than the registers the metadata says the
    kernel uses, LDS beyond gfx950's, or a kernarg size beyond any real one. A granule of 0 is
    legal (the minimum allocation: 8 VGPRs), so a small kernel that fits in it loads."""
    f = descriptor_fields(kd)
    for lo, hi in RESERVED_BYTES:
        if any(kd[lo:hi]):
            raise EmulatorError(f"{where}: reserved descriptor bytes {lo}..{hi - 1} are not zero")
    for name, mask in (
        ("compute_pgm_rsrc1", RSRC1_MUST_BE_ZERO),
        ("compute_pgm_rsrc2", RSRC2_MUST_BE_ZERO),
        ("compute_pgm_rsrc3", RSRC3_MUST_BE_ZERO),
        ("kernel_code_properties", KCP_MUST_BE_ZERO),
    ):
        if f[name] & mask:
            raise EmulatorError(
                f"{where}: {name} {f[name]:#x} sets reserved/must-be-zero bits "
                f"{f[name] & mask:#x} (AMDGPUUsage, GFX9)"
            )
    vgprs, sgprs = allocated_vgprs(kd), allocated_sgprs(kd)
    used_v = max(meta.get(".vgpr_count", 0), meta.get(".agpr_count", 0))  # gfx90a+: total
    if used_v > vgprs or meta.get(".sgpr_count", 0) > sgprs:
        raise EmulatorError(
            f"{where}: the descriptor allocates {vgprs} VGPRs and {sgprs} SGPRs but the "
            f"metadata says the kernel uses {used_v} and {meta.get('.sgpr_count', 0)}"
        )
    if f["group_segment_fixed_size"] > gfx950.LDS_BYTES_PER_CU:
        raise EmulatorError(
            f"{where}: group_segment_fixed_size {f['group_segment_fixed_size']} exceeds "
            f"gfx950's {gfx950.LDS_BYTES_PER_CU} bytes of LDS"
        )
    if f["kernarg_size"] > MAX_KERNARG_BYTES:
        raise EmulatorError(
            f"{where}: kernarg_size {f['kernarg_size']} exceeds {MAX_KERNARG_BYTES} bytes"
        )


def executed_digest(co_path: str | Path, symbol: str) -> str | None:
    """A digest of everything the emulator reads of a kernel: the loaded Program's fields
    (entry, LDS, kernarg size, register layout, float mode, labels) and every instruction of
    .text as decoded. Two code objects with one digest run identically on the emulator, bit for
    bit, whatever their other bytes: the rebuilt variant differs from aiter's objects only in
    ELF layout and in encoding bits the decoder does not read, so its emulated rows are the
    original's (f4pipe.pipeline.resultstore keys emulated runs by this). None when the digest would
    not prove that: a branch target inside an instruction (decoding there reads bytes the linear
    sweep did not) or a kernel the emulator cannot load (its run reports why)."""
    import hashlib

    try:
        prog = Program.load(co_path, symbol)
        insts = prog.instructions()
    except EmulatorError:
        return None
    starts = {inst.pc for inst in insts}
    if any(inst.target is not None and inst.target not in starts for inst in insts):
        return None
    # text: as decoded below; labels: sorted; the workgroup bounds: static analysis only
    skip = ("co_path", "text", "labels", "_cache", "max_workgroup_size", "workitem_id_dims")
    loaded = {f.name: getattr(prog, f.name) for f in fields(prog) if f.name not in skip}
    h = hashlib.sha256(repr(sorted(loaded.items())).encode())
    h.update(repr(sorted(prog.labels.items())).encode())
    for inst in insts:
        h.update(repr(inst).encode())
    return h.hexdigest()
