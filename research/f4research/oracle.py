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

The module lives in the package, not under tests/, because the test suite and the nox
session's script both run it, and both need the toolchain lookup the package owns.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from f4pipe.codeobj.toolchain import Toolchain, llc_path, run_tool
from f4pipe.core.fsio import write_text

#: Kernel arguments of every generated kernel: the buffer read, the buffer written, a table
#: of uniform values (read with scalar loads) and two uniform integers.
KERNEL_ARGS = "<4 x i32> %in, <4 x i32> %out, ptr addrspace(4) %tab, i32 %arg0, i32 %arg1"

DECLARATIONS = """\
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.readfirstlane.i32(i32)
declare { i32, i32 } @llvm.amdgcn.permlane16.swap(i32, i32, i1 immarg, i1 immarg)
declare void @llvm.amdgcn.s.barrier()
declare i32 @llvm.amdgcn.raw.buffer.load.i32(<4 x i32>, i32, i32, i32 immarg)
declare <2 x i32> @llvm.amdgcn.raw.buffer.load.v2i32(<4 x i32>, i32, i32, i32 immarg)
declare <4 x i32> @llvm.amdgcn.raw.buffer.load.v4i32(<4 x i32>, i32, i32, i32 immarg)
declare void @llvm.amdgcn.raw.buffer.store.i32(i32, <4 x i32>, i32, i32, i32 immarg)
declare void @llvm.amdgcn.raw.buffer.store.v2i32(<2 x i32>, <4 x i32>, i32, i32, i32 immarg)
declare void @llvm.amdgcn.raw.buffer.store.v4i32(<4 x i32>, <4 x i32>, i32, i32, i32 immarg)
declare void @llvm.amdgcn.raw.buffer.store.v4f32(<4 x float>, <4 x i32>, i32, i32, i32 immarg)
declare void @llvm.amdgcn.raw.buffer.load.lds(<4 x i32>, ptr addrspace(3) nocapture, \
i32 immarg, i32, i32, i32 immarg, i32 immarg)
declare <4 x float> @llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4.v4i32.v4i32(<4 x i32>, \
<4 x i32>, <4 x float>, i32 immarg, i32 immarg, i32 immarg, i32, i32 immarg, i32)
declare <4 x float> @llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4.v8i32.v8i32(<8 x i32>, \
<8 x i32>, <4 x float>, i32 immarg, i32 immarg, i32 immarg, i32, i32 immarg, i32)
@lds = internal addrspace(3) global [4096 x i32] poison, align 16
@dma = internal addrspace(3) global [4096 x i32] poison, align 16
"""

VECTOR_TYPES = {1: "i32", 2: "<2 x i32>", 4: "<4 x i32>"}
INTRINSIC_SUFFIX = {1: "i32", 2: "v2i32", 4: "v4i32"}


@dataclass
class _Writer:
    """One kernel's IR under construction: SSA values by kind (per-lane i32, uniform i32,
    MFMA accumulators) and the lines written so far."""

    rng: random.Random
    lines: list[str] = field(default_factory=list)
    lane: list[str] = field(default_factory=list)
    uniform: list[str] = field(default_factory=list)
    acc: list[str] = field(default_factory=list)
    n: int = 0

    def new(self, prefix: str = "t") -> str:
        self.n += 1
        return f"%{prefix}{self.n}"

    def emit(self, line: str) -> None:
        self.lines.append(f"  {line}")

    def pick_lane(self) -> str:
        return self.rng.choice(self.lane[-6:])

    def pick_uniform(self) -> str:
        return self.rng.choice(self.uniform[-4:])

    def offset(self, align: int) -> str:
        """A per-lane byte offset below 16 KiB, aligned to `align` bytes."""
        out = self.new("o")
        self.emit(f"{out} = and i32 {self.pick_lane()}, {0x3FFF & -align}")
        return out

    def soffset(self) -> str:
        return self.pick_uniform() if self.rng.random() < 0.6 else "0"

    def vector(self, width: int) -> str:
        """A <width x i32> of distinct per-lane values (the one value for width 1): a value
        in two lanes of a vector makes LLVM copy it with moves f4pipe does not decode."""
        if width == 1:
            return self.pick_lane()
        while len(set(self.lane)) < width:
            _valu(self)
        elements = self.rng.sample(
            sorted(set(self.lane[-2 * width :]) | set(self.lane[-width:])), width
        )
        vec = "poison"
        for i, element in enumerate(elements):
            nxt = self.new("vec")
            self.emit(f"{nxt} = insertelement <{width} x i32> {vec}, i32 {element}, i32 {i}")
            vec = nxt
        return vec

    def take_acc(self) -> str | None:
        """An accumulator to read and replace (each is used once: a second use makes LLVM
        copy it between AGPRs with a move f4pipe does not decode)."""
        if not self.acc:
            return None
        return self.acc.pop(self.rng.randrange(len(self.acc)))

    def unpack(self, vec: str, width: int) -> None:
        if width == 1:
            self.lane.append(vec)
            return
        for i in range(width):
            out = self.new()
            self.emit(f"{out} = extractelement <{width} x i32> {vec}, i32 {i}")
            self.lane.append(out)


def _buffer_load(w: _Writer) -> None:
    width = w.rng.choice((1, 2, 4))
    out = w.new("ld")
    ty, sfx = VECTOR_TYPES[width], INTRINSIC_SUFFIX[width]
    w.emit(
        f"{out} = call {ty} @llvm.amdgcn.raw.buffer.load.{sfx}(<4 x i32> %in, "
        f"i32 {w.offset(4 * width)}, i32 {w.soffset()}, i32 0)"
    )
    w.unpack(out, width)


def _buffer_store(w: _Writer) -> None:
    width = w.rng.choice((1, 2, 4))
    ty, sfx = VECTOR_TYPES[width], INTRINSIC_SUFFIX[width]
    w.emit(
        f"call void @llvm.amdgcn.raw.buffer.store.{sfx}({ty} {w.vector(width)}, <4 x i32> %out, "
        f"i32 {w.offset(4 * width)}, i32 {w.soffset()}, i32 0)"
    )


def _lds_pointer(w: _Writer, width: int, region: str) -> str:
    ptr = w.new("p")
    w.emit(f"{ptr} = getelementptr i8, ptr addrspace(3) @{region}, i32 {w.offset(4 * width)}")
    return ptr


def _ds_write(w: _Writer) -> None:
    width = w.rng.choice((1, 2, 4))
    value = w.vector(width)
    ptr = _lds_pointer(w, width, "lds")
    w.emit(f"store {VECTOR_TYPES[width]} {value}, ptr addrspace(3) {ptr}, align {4 * width}")


def _ds_read(w: _Writer) -> None:
    width = w.rng.choice((1, 2, 4))
    ptr = _lds_pointer(w, width, w.rng.choice(("lds", "lds", "dma")))
    out = w.new("ds")
    w.emit(f"{out} = load {VECTOR_TYPES[width]}, ptr addrspace(3) {ptr}, align {4 * width}")
    w.unpack(out, width)


def _lds_dma(w: _Writer) -> None:
    base = w.new("m")
    w.emit(f"{base} = getelementptr i8, ptr addrspace(3) @dma, i32 {1024 * w.rng.randrange(8)}")
    w.emit(
        f"call void @llvm.amdgcn.raw.buffer.load.lds(<4 x i32> %in, ptr addrspace(3) {base}, "
        f"i32 4, i32 {w.offset(4)}, i32 {w.soffset()}, i32 0, i32 0)"
    )


def _barrier(w: _Writer) -> None:
    fenced = w.rng.random() < 0.5
    if fenced:
        w.emit('fence syncscope("workgroup") release')
    w.emit("call void @llvm.amdgcn.s.barrier()")
    if fenced:
        w.emit('fence syncscope("workgroup") acquire')


def _valu(w: _Writer) -> None:
    # Bitwise ops and right shifts next to the offsets' masks fuse into v_bitop3 / v_bfe,
    # which f4pipe does not decode.
    op = w.rng.choice(("add", "mul", "fmul", "shl", "sub"))
    a = w.pick_lane()
    b = w.pick_uniform() if w.rng.random() < 0.3 else w.pick_lane()
    out = w.new()
    if op == "fmul":
        fa, fb, fr = w.new("f"), w.new("f"), w.new("f")
        w.emit(f"{fa} = bitcast i32 {a} to float")
        w.emit(f"{fb} = bitcast i32 {b} to float")
        w.emit(f"{fr} = fmul float {fa}, {fb}")
        w.emit(f"{out} = bitcast float {fr} to i32")
    elif op in ("shl", "lshr"):
        w.emit(f"{out} = {op} i32 {a}, {w.rng.randrange(1, 8)}")
    else:
        w.emit(f"{out} = {op} i32 {a}, {b}")
    w.lane.append(out)


def _select(w: _Writer) -> None:
    c, out = w.new("c"), w.new()
    w.emit(f"{c} = icmp ult i32 {w.pick_lane()}, {w.pick_lane()}")
    w.emit(f"{out} = select i1 {c}, i32 {w.pick_lane()}, i32 {w.pick_lane()}")
    w.lane.append(out)


def _convert(w: _Writer) -> None:
    f, out = w.new("f"), w.new()
    w.emit(f"{f} = uitofp i32 {w.pick_lane()} to float")
    if w.rng.random() < 0.5:
        w.emit(f"{out} = fptoui float {f} to i32")
    else:
        w.emit(f"{out} = bitcast float {f} to i32")
    w.lane.append(out)


def _readfirstlane(w: _Writer) -> None:
    out = w.new("u")
    w.emit(f"{out} = call i32 @llvm.amdgcn.readfirstlane.i32(i32 {w.pick_lane()})")
    w.uniform.append(out)


def _scalar_load(w: _Writer) -> None:
    ptr, out = w.new("q"), w.new("u")
    w.emit(f"{ptr} = getelementptr i32, ptr addrspace(4) %tab, i32 {w.rng.randrange(64)}")
    w.emit(f"{out} = load i32, ptr addrspace(4) {ptr}, align 4, !invariant.load !0")
    w.uniform.append(out)


def _permlane(w: _Writer) -> None:
    pair = w.new("pl")
    w.emit(
        f"{pair} = call {{ i32, i32 }} @llvm.amdgcn.permlane16.swap(i32 {w.pick_lane()}, "
        f"i32 {w.pick_lane()}, i1 false, i1 false)"
    )
    for i in range(2):
        out = w.new()
        w.emit(f"{out} = extractvalue {{ i32, i32 }} {pair}, {i}")
        w.lane.append(out)


def _mfma_operand(w: _Writer, width: int) -> str:
    """An FP4 operand straight from a buffer load, or any operand built from lane values."""
    if width != 4 or w.rng.random() < 0.4:
        return w.vector(width)
    out = w.new("ld")
    w.emit(
        f"{out} = call <4 x i32> @llvm.amdgcn.raw.buffer.load.v4i32(<4 x i32> %in, "
        f"i32 {w.offset(16)}, i32 {w.soffset()}, i32 0)"
    )
    return out


def _mfma(w: _Writer) -> None:
    fp8 = w.rng.random() < 0.2
    width, code = (8, 0) if fp8 else (4, 4)
    a, b = _mfma_operand(w, width), _mfma_operand(w, width)
    c = (w.take_acc() if w.rng.random() < 0.7 else None) or "zeroinitializer"
    scale_a = w.pick_lane()  # two constant scales select the unscaled MFMA
    scale_b = w.pick_lane() if w.rng.random() < 0.5 else "0"
    _scaled_mfma(w, w.new("acc"), width, code, a, b, c, scale_a, scale_b)


def _scaled_mfma(
    w: _Writer, out: str, width: int, code: int, a: str, b: str, c: str, scale_a: str, scale_b: str
) -> None:
    """The scaled 16x16x128 MFMA intrinsic (width 4: FP4 operands, code 4; 8: FP8, code 0),
    its result a new accumulator."""
    sfx = f"v{width}i32"
    w.emit(
        f"{out} = call <4 x float> @llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4.{sfx}.{sfx}("
        f"<{width} x i32> {a}, <{width} x i32> {b}, <4 x float> {c}, i32 {code}, i32 {code}, "
        f"i32 0, i32 {scale_a}, i32 0, i32 {scale_b})"
    )
    w.acc.append(out)


def _accumulator_read(w: _Writer) -> None:
    if not w.acc:
        return
    f, out = w.new("f"), w.new()
    w.emit(f"{f} = extractelement <4 x float> {w.acc[-1]}, i32 {w.rng.randrange(4)}")
    w.emit(f"{out} = bitcast float {f} to i32")
    w.lane.append(out)


def _mfma_on_result(w: _Writer) -> None:
    """An MFMA whose A operand (and first scale) is the last MFMA's result."""
    if not w.acc:
        return
    acc, vec = w.acc[-1], "poison"
    for k in range(4):
        f, i, nxt = w.new("f"), w.new(), w.new("vec")
        w.emit(f"{f} = extractelement <4 x float> {acc}, i32 {k}")
        w.emit(f"{i} = bitcast float {f} to i32")
        w.emit(f"{nxt} = insertelement <4 x i32> {vec}, i32 {i}, i32 {k}")
        vec = nxt
        if k == 0:
            scale = i
    out = w.new("acc")
    b = _mfma_operand(w, 4)
    _scaled_mfma(w, out, 4, 4, vec, b, "zeroinitializer", scale, w.pick_lane())


def _accumulator_valu(w: _Writer) -> None:
    """A VALU writes one element of an accumulator a later MFMA reads as SrcC."""
    acc, k = w.take_acc(), w.rng.randrange(4)
    if acc is None:
        return
    f, g, h, out = w.new("f"), w.new("f"), w.new("f"), w.new("acc")
    w.emit(f"{f} = extractelement <4 x float> {acc}, i32 {k}")
    w.emit(f"{g} = bitcast i32 {w.pick_lane()} to float")
    w.emit(f"{h} = fmul float {f}, {g}")
    w.emit(f"{out} = insertelement <4 x float> {acc}, float {h}, i32 {k}")
    w.acc.append(out)


#: Operations and their weights.
OPERATIONS = (
    (_buffer_load, 4),
    (_buffer_store, 2),
    (_ds_write, 3),
    (_ds_read, 3),
    (_lds_dma, 2),
    (_barrier, 2),
    (_valu, 5),
    (_select, 1),
    (_convert, 1),
    (_readfirstlane, 2),
    (_scalar_load, 2),
    (_permlane, 2),
    (_mfma, 4),
    (_mfma_on_result, 2),
    (_accumulator_read, 3),
    (_accumulator_valu, 2),
)


def kernel_ir(seed: int) -> str:
    """The IR of one kernel, `@k<seed>`, from its seed: 6 to 16 random operations."""
    rng = random.Random(seed)
    w = _Writer(rng)
    w.emit("%tid = call i32 @llvm.amdgcn.workitem.id.x()")
    w.lane.append("%tid")
    w.uniform += ["%arg0", "%arg1"]
    _buffer_load(w)  # tid has 10 bits: products with it become v_mul_u32_u24 (not decoded)
    w.lane.remove("%tid")
    ops, weights = zip(*OPERATIONS, strict=True)
    for op in rng.choices(ops, weights, k=rng.randrange(6, 17)):
        op(w)
    for acc in w.acc:
        w.emit(
            f"call void @llvm.amdgcn.raw.buffer.store.v4f32(<4 x float> {acc}, <4 x i32> %out, "
            f"i32 {w.offset(16)}, i32 0, i32 0)"
        )
    for value in w.lane[-4:]:
        w.emit(
            f"call void @llvm.amdgcn.raw.buffer.store.i32(i32 {value}, <4 x i32> %out, "
            f"i32 {w.offset(4)}, i32 0, i32 0)"
        )
    body = "\n".join(w.lines)
    return f"define amdgpu_kernel void @k{seed}({KERNEL_ARGS}) {{\n{body}\n  ret void\n}}\n"


def module_ir(seeds) -> str:
    """One IR module holding the kernels of `seeds` (one llc run compiles them all)."""
    parts = [
        'target triple = "amdgcn-amd-amdhsa"\n',
        DECLARATIONS,
        *(kernel_ir(s) for s in seeds),
        "!0 = !{}\n",
    ]
    return "\n".join(parts)


# --- compiling: one llc and one llvm-mc run per batch of kernels ---------------------------


@dataclass(frozen=True)
class AsmInstruction:
    """One instruction as LLVM printed it, and where it sits in its kernel's code."""

    text: str
    pc: int
    size: int

    @property
    def mnemonic(self) -> str:
        return self.text.split()[0]


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


# --- the counter model: which registers a wait protects, from LLVM's text alone --------------

#: Pseudo-registers: LDS words an LDS DMA writes (read by this wave's DS loads and, through
#: other waves, after a barrier) and LDS words a DS store writes (read by other waves after a
#: barrier). Which words is data; the model takes every DS load and barrier as a reader.
LDS_DMA, LDS_STORE = "lds-dma", "lds-store"
_REGISTER = re.compile(r"\b([vas])(\d+)\b|\b([vas])\[(\d+):(\d+)\]|\b(m0|vcc|exec)\b")


def registers(operands: str) -> frozenset[str]:
    """Register names in an operand list: v[2:5] -> v2..v5; vcc and exec as one name."""
    out = set()
    for m in _REGISTER.finditer(operands):
        if m.group(1):
            out.add(f"{m.group(1)}{m.group(2)}")
        elif m.group(3):
            out.update(f"{m.group(3)}{i}" for i in range(int(m.group(4)), int(m.group(5)) + 1))
        else:
            out.add(m.group(6))
    return frozenset(out)


@dataclass(frozen=True)
class MemoryOp:
    """What one instruction does to the counters: the counter ("vm", "ds", "smem" or ""),
    the registers its data lands in, and the registers it reads and writes at issue."""

    counter: str
    dest: frozenset[str]
    reads: frozenset[str]
    writes: frozenset[str]


def memory_op(text: str) -> MemoryOp:
    mnemonic, _, rest = text.partition(" ")
    operands = [o.strip() for o in rest.split(",")]
    first = registers(operands[0]) if operands else frozenset()
    others = registers(",".join(operands[1:]))
    words = set(rest.replace(",", " ").split())
    if mnemonic.startswith("buffer_load") and "lds" in words:
        return MemoryOp("vm", frozenset({LDS_DMA}), first | others, frozenset({LDS_DMA}))
    if mnemonic.startswith("buffer_load"):
        return MemoryOp("vm", first, others, first)
    if mnemonic.startswith(("buffer_store", "buffer_atomic")):
        return MemoryOp("vm", frozenset(), first | others, frozenset())
    if mnemonic.startswith("ds_read"):
        return MemoryOp("ds", first, others | {LDS_DMA}, first)
    if mnemonic.startswith("ds_write"):
        reads = first | others | {LDS_DMA}
        return MemoryOp("ds", frozenset({LDS_STORE}), reads, frozenset({LDS_STORE}))
    if mnemonic.startswith("s_load"):
        return MemoryOp("smem", first, others, first)
    if mnemonic == "s_barrier":
        return MemoryOp("", frozenset(), frozenset({LDS_DMA, LDS_STORE}), frozenset())
    return MemoryOp("", frozenset(), first | others, first | others)


_COUNT = re.compile(r"(vmcnt|lgkmcnt|expcnt)\((\d+)\)")
NO_WAIT = (63, 15)


def waitcnt(text: str) -> tuple[int, int] | None:
    """(vmcnt, lgkmcnt) of an s_waitcnt line (63 / 15: no wait on that counter)."""
    mnemonic, _, rest = text.partition(" ")
    if mnemonic != "s_waitcnt":
        return None
    counts = {"vmcnt": NO_WAIT[0], "lgkmcnt": NO_WAIT[1]}
    if rest.strip().isdigit() or rest.strip().startswith("0x"):
        simm = int(rest.strip(), 0)
        return (simm & 0xF) | ((simm >> 14) & 3) << 4, (simm >> 8) & 0xF
    for name, value in _COUNT.findall(rest):
        counts[name] = int(value)
    return counts["vmcnt"], counts["lgkmcnt"]


def exposures(
    asm: tuple[AsmInstruction, ...], waits: dict[int, tuple[int, int]]
) -> set[tuple[int, int]]:
    """(load index, consumer index) for every instruction that reads, or overwrites, what an
    op may not yet have delivered, with the s_waitcnt at each index in `waits` (the others as
    written). Buffer ops retire in order on vmcnt; DS ops in order among themselves; scalar
    loads in any order, so lgkmcnt(N) retires a DS op only when N younger DS ops are
    outstanding, and a scalar load only at lgkmcnt(0)."""
    vm: list[tuple[int, MemoryOp]] = []
    lgkm: list[tuple[int, MemoryOp]] = []
    found = set()
    spans = lds_spans(asm)
    for i, ins in enumerate(asm):
        limits = waits.get(i) or waitcnt(ins.text)
        if limits is not None:
            vm = vm[max(0, len(vm) - limits[0]) :]
            lgkm = _retire_lgkm(lgkm, limits[1])
            continue
        op = _with_dma_bytes(memory_op(ins.text), asm, i, spans)
        for j, pending in (*vm, *lgkm):
            # a younger load on the same in-order counter lands after the older one
            ordered = op.counter == pending.counter and op.counter in ("vm", "ds")
            touched = op.reads | (op.writes - op.dest if ordered else op.writes)
            if pending.dest & touched:
                found.add((j, i))
        if ins.mnemonic == "s_endpgm":
            break
        if op.counter == "vm":
            vm.append((i, op))
        elif op.counter:
            lgkm.append((i, op))
    return found


def _dma(j: int) -> str:
    """The pseudo-register of the LDS bytes the LDS DMA at index j writes."""
    return f"{LDS_DMA}@{j}"


def _with_dma_bytes(
    op: MemoryOp, asm: tuple[AsmInstruction, ...], i: int, spans: dict[int, Span]
) -> MemoryOp:
    """The op with LDS DMA named per instruction: a DMA writes its own pseudo-register; a DS
    access reads those of the DMAs whose bytes it may touch; a barrier those whose bytes a DS
    access after it (before the next barrier) may touch in another wave."""
    if op.dest == {LDS_DMA}:
        return MemoryOp(op.counter, frozenset({_dma(i)}), op.reads - {LDS_DMA}, frozenset())
    if LDS_DMA not in op.reads:
        return op
    dmas = [j for j in range(i) if j in spans and _is_dma(asm[j].text)]
    if asm[i].mnemonic == "s_barrier":
        after = []
        for k in range(i + 1, len(asm)):
            if asm[k].mnemonic in ("s_barrier", "s_endpgm"):
                break
            if asm[k].mnemonic.startswith("ds_"):
                after.append(k)
        named = {_dma(j) for j in dmas if any(_overlap(spans[j], spans[k]) for k in after)}
    else:
        named = {_dma(j) for j in dmas if _overlap(spans[j], spans[i])}
    return MemoryOp(op.counter, op.dest, (op.reads - {LDS_DMA}) | named, op.writes)


# --- LDS byte spans, from LLVM's text ------------------------------------------------------

#: [lo, hi) bytes an instruction may touch, None when the text does not bound them.
Span = tuple[int, int] | None
_NUMBER = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")


def _is_dma(text: str) -> bool:
    return text.startswith("buffer_load") and " lds" in text


def _number(text: str) -> int | None:
    return int(text, 0) if _NUMBER.match(text) else None


def _overlap(a: Span, b: Span) -> bool:
    return a is None or b is None or (a[0] < b[1] and b[0] < a[1])


def lds_spans(asm: tuple[AsmInstruction, ...]) -> dict[int, Span]:
    """The LDS bytes of every LDS DMA and DS access, from a straight-line reading of the text:
    M0 from `s_mov_b32 m0, K` / `s_movk_i32 m0, K` (a wave64 DMA writes 64 lanes x its
    dwords from M0 on), a DS address from `v_and_b32 vD, K, vS` (0..K), `v_mov_b32 vD, K`,
    `v_add_u32 vD, K, vS` and `v_lshlrev_b32 vD, K, vS`; anything else unbounded."""
    m0: int | None = None
    values: dict[str, tuple[int, int]] = {}
    out: dict[int, Span] = {}
    for i, ins in enumerate(asm):
        mnemonic, _, rest = ins.text.partition(" ")
        operands = [o.strip() for o in rest.split(",")]
        offset = re.search(r"offset:(\d+)", rest)
        extra = int(offset.group(1)) if offset else 0
        if _is_dma(ins.text):
            words = {"buffer_load_dword": 1, "buffer_load_dwordx2": 2}.get(mnemonic, 4)
            start = None if m0 is None else (m0 & 0x3FFFC) + extra
            out[i] = None if start is None else (start, start + 64 * 4 * words)
        elif mnemonic.startswith("ds_"):
            size = {"b32": 4, "b64": 8, "b128": 16}[mnemonic.rsplit("_", 1)[1]]
            addr = operands[0] if mnemonic.startswith("ds_write") else operands[1]
            bounds = values.get(addr.split()[0])
            out[i] = None if bounds is None else (bounds[0] + extra, bounds[1] + extra + size)
        written = registers(rest if mnemonic.startswith("v_permlane") else operands[0])
        if "m0" in written:
            m0 = _number(operands[1]) if mnemonic in ("s_mov_b32", "s_movk_i32") else None
        value = _vgpr_value(mnemonic, operands, values)
        for reg in written:
            values.pop(reg, None)
        if value is not None and len(written) == 1:
            values[operands[0]] = value
    return out


def _vgpr_value(
    mnemonic: str, operands: list[str], values: dict[str, tuple[int, int]]
) -> tuple[int, int] | None:
    base = mnemonic.split("_e32")[0].split("_e64")[0]
    k = _number(operands[1]) if len(operands) > 1 else None
    src = values.get(operands[2]) if len(operands) > 2 else None
    if base == "v_mov_b32" and k is not None:
        return (k, k)
    if k is None or k < 0:
        return None
    if base == "v_and_b32":
        return (0, k)
    if base == "v_add_u32" and src is not None:
        return (src[0] + k, src[1] + k)
    if base == "v_lshlrev_b32" and src is not None and k < 16:
        return (src[0] << k, src[1] << k)
    return None


def _retire_lgkm(lgkm: list[tuple[int, MemoryOp]], limit: int) -> list[tuple[int, MemoryOp]]:
    if limit == 0:
        return []
    ds_younger = 0
    kept = []
    for j, op in reversed(lgkm):
        if op.counter == "smem":
            kept.append((j, op))
            continue
        if ds_younger < limit:
            kept.append((j, op))
        ds_younger += 1
    return kept[::-1]


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
    from f4pipe.analysis.waits import encode_waitcnt

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
