"""The LLVM oracle's kernel generator (research/f4research/oracle.py): small LLVM IR kernels for
gfx950, one per seed, over the instruction classes f4pipe's timing rules model. The same seed
always gives the same kernel, so the fixed seeds tests/test_llvm_oracle.py runs are chosen for
the disagreement classes they exercise; a new operation here changes every seed's kernel."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

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
