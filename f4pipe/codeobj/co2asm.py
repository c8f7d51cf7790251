"""co2asm: any AMDGPU HSA code object (v3+) -> assembly that LLVM reassembles into the same object.

A code object holds three things the assembler needs, each recovered with a different tool:
instructions and labels (`llvm-objdump -d` of .text), the 64-byte kernel descriptor
(`llvm-objdump -d -j .rodata`, rendered as `.amdhsa_kernel` directives) and the msgpack metadata
note (`llvm-readelf --notes`, re-emitted as YAML between `.amdgpu_metadata` directives).
What objdump prints is not reassemblable as is; this module is that delta:

- every instruction's `// addr: encoding` comment is dropped; bytes objdump cannot decode
  become `.long` words so the layout never shifts;
- labels, kernels and their binding/visibility come from the ELF symbol table, not from names
  (not every non-`label_` symbol is a kernel); branch targets without a symbol get a synthesized
  local label computed from the branch encoding;
- `.amdhsa_next_free_sgpr` is inverted from the descriptor's granulated SGPR count with the
  assembler's extra-SGPR rule (see `invert_next_free_sgpr`; GFX10+ stores no granule);
- an encoding llvm-mc refuses to write from objdump's text (gfx1250's packed-F32 op_sel_hi on
  an SGPR source, `sgpr_source_with_op_sel_hi`) is carried as its `.long` words;
- the target id and code object version come from the ELF header and are written into the
  file (`.amdgcn_target`, `.amdhsa_code_object_version`), so the .s assembles with no flags
  beyond the processor, which `assemble` reads back from the file;
- non-allocated sections other than the linker's own (DWARF in one aiter object) are carried
  as raw bytes (`raw_sections`).
"""

from __future__ import annotations

import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from f4pipe.codeobj.assemble import read_target
from f4pipe.codeobj.codeobject import CodeObject, Symbol, gfx_generation
from f4pipe.codeobj.descriptor import field
from f4pipe.codeobj.toolchain import Toolchain
from f4pipe.core.errors import CodeObjectError

GENERATOR_TAG = "f4pipe co2asm"

_SYMBOL_LINE = re.compile(r"^([0-9a-fA-F]{8,16}) <(.+)>:$")
_INSN_LINE = re.compile(
    r"^[ \t]+(?P<text>[^\n]*?)[ \t]*// (?P<addr>[0-9A-Fa-f]{8,16}): "
    r"(?P<enc>[0-9A-Fa-f ]+?)(?: <[^>\n]*>)?$",
    re.M,
)
_BRANCHES = re.compile(r"^(s_branch|s_cbranch_\w+)\s+(?P<target>\S+)")
_SGPR_LINE = re.compile(r"^(\s*)\.amdhsa_next_free_sgpr\s+(\d+)\s*$")


@dataclass(frozen=True)
class Instruction:
    """One disassembled instruction: its address, text (no comment) and encoding dwords."""

    addr: int
    text: str
    words: tuple[int, ...]

    @property
    def size(self) -> int:
        return 4 * len(self.words)


def parse_objdump_text(listing: str) -> list[Instruction]:
    """Instructions of an `llvm-objdump -d` listing, in address order."""
    return [
        Instruction(
            addr=int(m.group("addr"), 16),
            text=m.group("text"),
            words=tuple(int(w, 16) for w in m.group("enc").split()),
        )
        for m in _INSN_LINE.finditer(listing)
    ]


def disassemble_text(co: CodeObject, toolchain: Toolchain) -> list[Instruction]:
    proc = toolchain.run("llvm-objdump", ["-d", f"--mcpu={co.arch}", "-j", ".text", co.path])
    insns = parse_objdump_text(proc.stdout.decode(errors="replace"))
    _check_coverage(co, insns)
    return insns


def _objdump_text_and_rodata(co: CodeObject, toolchain: Toolchain) -> tuple[str, str]:
    """One objdump run for both sections: (.text listing, .rodata listing)."""
    args = ["-d", f"--mcpu={co.arch}", "-j", ".text", "-j", ".rodata", co.path]
    listing = toolchain.run("llvm-objdump", args).stdout.decode(errors="replace")
    parts = re.split(r"^Disassembly of section (\S+):$", listing, flags=re.M)
    sections = dict(zip(parts[1::2], parts[2::2], strict=True))
    return sections.get(".text", ""), sections.get(".rodata", "")


def _check_coverage(co: CodeObject, insns: list[Instruction]) -> None:
    """The listing must cover .text exactly: a gap would silently shift every later byte."""
    text = co.sections[".text"]
    pos = text.addr
    for insn in insns:
        if insn.addr != pos:
            raise CodeObjectError(
                f"{co.path}: disassembly of .text has a gap at 0x{pos:x} (next instruction at "
                f"0x{insn.addr:x}); cannot reproduce the layout"
            )
        pos += insn.size
    if pos != text.addr + text.size:
        raise CodeObjectError(
            f"{co.path}: disassembly covers .text up to 0x{pos:x}, section ends at "
            f"0x{text.addr + text.size:x}"
        )


#: VOP3P op_sel_hi bit of each source: src0, src1 in the second dword (bits 59, 60 of the
#: instruction), src2 in the first (bit 14); AMDGPU ISA, VOP3P encoding.
_OP_SEL_HI_BITS = ((1, 27), (1, 28), (0, 14))


def sgpr_source_with_op_sel_hi(insn: Instruction, arch: str) -> bool:
    """True for a GFX12 packed-F32 VOP3P instruction (v_pk_*_f32) whose SGPR-pair source has
    its op_sel_hi bit set: aiter's gfx1250 nvfp4 kernels hold 256 such `v_pk_mul_f32`, which
    objdump prints without modifiers and LLVM 22's llvm-mc rejects for gfx1250 ("invalid
    op_sel operand") in any spelling, while it accepts the same text for gfx950. Carrying the
    words keeps every byte; the disassembly of both objects stays the same."""
    mnemonic, _, operands = insn.text.partition(" ")
    if gfx_generation(arch) < 12 or not re.fullmatch(r"v_pk_\w+_f32", mnemonic):
        return False
    if len(insn.words) < 2:
        return False
    sources = _register_operands(operands)[1:4]
    return any(
        src.startswith("s[") and insn.words[word] >> bit & 1
        for src, (word, bit) in zip(sources, _OP_SEL_HI_BITS, strict=False)
    )


def _register_operands(operands: str) -> list[str]:
    """The comma-separated operands before any modifier (`op_sel:[..]`, `neg_lo:[..]`)."""
    head = re.split(r"\s+(?=[a-z_]+:\[)", operands.strip())[0]
    return [op.strip() for op in head.split(",")]


def branch_target(insn: Instruction) -> int | None:
    """Target address of a SOPP branch: pc + 4 + 4 * simm16 (AMDGPU ISA, SOPP branches)."""
    if not _BRANCHES.match(insn.text):
        return None
    simm16 = insn.words[0] & 0xFFFF
    if simm16 & 0x8000:
        simm16 -= 0x10000
    return insn.addr + 4 + 4 * simm16


def sgprs_are_granulated(arch: str) -> bool:
    """True where the descriptor stores an SGPR granule (GFX6-GFX9). From GFX10 on the field is
    reserved and the hardware allocates every SGPR (AMDGPUUsage, GRANULATED_WAVEFRONT_SGPR_COUNT),
    so `.amdhsa_next_free_sgpr` changes no byte and objdump's value is kept as printed."""
    return gfx_generation(arch) < 10


def extra_sgprs(arch: str) -> int:
    """SGPRs the assembler adds to `.amdhsa_next_free_sgpr` before granulating (GFX8-GFX9).

    AMDGPUUsage, "compute_pgm_rsrc1" (GRANULATED_WAVEFRONT_SGPR_COUNT): VCC, FLAT_SCRATCH and
    XNACK_MASK are counted on top of the user's SGPRs. On gfx940+ flat scratch is architected,
    which always counts 6 (it covers VCC and XNACK_MASK too). GFX10+ stores no granule
    (sgprs_are_granulated); GFX6-GFX8 rules are not implemented.
    """
    if arch.startswith("gfx9"):
        return 6
    raise CodeObjectError(f"extra-SGPR rule for {arch} is not implemented (GFX9 only)")


MAX_ADDRESSABLE_SGPRS_GFX9 = 102


def invert_next_free_sgpr(granulated: int, arch: str) -> int:
    """A `.amdhsa_next_free_sgpr` value that the assembler encodes back to `granulated`.

    The assembler stores ceil(max(1, next_free_sgpr + extra) / 8) - 1 and rejects values above
    the addressable 102. objdump prints the top of the granule assuming no extras (8*(G+1)),
    which the assembler either rejects or shifts one granule up. Any value in the granule
    works; we take the highest addressable one.
    """
    extra = extra_sgprs(arch)
    nfs = min(8 * (granulated + 1) - extra, MAX_ADDRESSABLE_SGPRS_GFX9)
    if nfs < 0 or encode_granulated_sgpr(nfs, arch) != granulated:
        raise CodeObjectError(
            f"no .amdhsa_next_free_sgpr encodes to granulated SGPR count {granulated} on {arch}"
        )
    return nfs


def encode_granulated_sgpr(next_free_sgpr: int, arch: str) -> int:
    """What the assembler stores for `next_free_sgpr` (the forward rule we invert)."""
    total = next_free_sgpr + extra_sgprs(arch)
    return math.ceil(max(1, total) / 8) - 1


def descriptor_directives(co: CodeObject, rodata_listing: str) -> dict[str, str]:
    """kernel name -> its `.amdhsa_kernel ... .end_amdhsa_kernel` block, fixed to reassemble."""
    blocks: dict[str, str] = {}
    current: list[str] | None = None
    name = ""
    for line in rodata_listing.splitlines():
        stripped = line.strip()
        if stripped.startswith(".amdhsa_kernel "):
            name = stripped.split(None, 1)[1]
            current = [stripped]
        elif current is not None:
            current.append(
                "\t" + stripped if not stripped.startswith(".end_amdhsa_kernel") else stripped
            )
            if stripped.startswith(".end_amdhsa_kernel"):
                blocks[name] = _fix_descriptor(co, name, current)
                current = None
    return blocks


def _fix_descriptor(co: CodeObject, name: str, lines: list[str]) -> str:
    granulated = field(co.kernel_descriptor(name), "granulated_wavefront_sgpr_count")
    sgpr_granules = sgprs_are_granulated(co.arch)
    if not sgpr_granules and granulated:
        raise CodeObjectError(
            f"{co.path}: {name}: granulated SGPR count {granulated} is set, but the field is "
            f"reserved (0) on {co.arch}"
        )
    out = []
    for line in lines:
        m = _SGPR_LINE.match(line)
        if m and sgpr_granules:
            nfs = invert_next_free_sgpr(granulated, co.arch)
            out.append(f"{m.group(1)}.amdhsa_next_free_sgpr {nfs}")
            continue
        if line.strip().startswith(".amdhsa_reserve_xnack_mask") and co.target.xnack not in (
            "on",
            "off",
        ):
            # Only legal when the target id names xnack; with xnack "any" the extra-SGPR count
            # is driven by architected flat scratch, so dropping it changes no byte.
            continue
        out.append(line)
    return "\n".join(out)


def metadata_yaml(co: CodeObject, notes_listing: str) -> str:
    """The metadata note as the YAML document llvm-readelf prints (LLVM's own rendering)."""
    lines = notes_listing.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "---")
        end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "...")
    except StopIteration:
        raise CodeObjectError(
            f"{co.path}: no AMDGPU metadata note (code object v3+ expected)"
        ) from None
    return "\n".join(["---", *lines[start + 1 : end], "..."])


def _symbol_directives(sym: Symbol, visibility: str) -> list[str]:
    """Binding, visibility and type directives for one symbol."""
    out = []
    if sym.bind == "STB_GLOBAL":
        out.append(f"\t.globl\t{sym.name}")
    elif sym.bind == "STB_WEAK":
        out.append(f"\t.weak\t{sym.name}")
    if visibility == "STV_PROTECTED":
        out.append(f"\t.protected\t{sym.name}")
    elif visibility == "STV_HIDDEN":
        out.append(f"\t.hidden\t{sym.name}")
    if sym.type == "STT_FUNC":
        out.append(f"\t.type\t{sym.name},@function")
    elif sym.type == "STT_OBJECT":
        out.append(f"\t.type\t{sym.name},@object")
    return out


def co2asm(path: str | Path, toolchain: Toolchain, *, pc_comments: bool = False) -> str:
    """Reassemblable assembly for the code object at `path`; with `pc_comments`, each
    instruction ends in `// pc 0x...`, its address in the object, so a finding a command
    reports against the `.co` (which names pcs) can be found in the `.s`."""
    return co2asm_with_listing(path, toolchain, pc_comments=pc_comments)[0]


def co2asm_with_listing(
    path: str | Path, toolchain: Toolchain, *, pc_comments: bool = False
) -> tuple[str, list[Instruction]]:
    """The assembly and the .text disassembly it was made from (reused by the equivalence
    check, so the original is disassembled once)."""
    co = CodeObject.read(path)
    target = co.target
    cov = co.code_object_version
    if cov < 3:
        raise CodeObjectError(f"{co.path}: code object v{cov} is not supported (v3+ only)")
    if co.metadata() is None:
        raise CodeObjectError(f"{co.path}: no AMDGPU metadata note")
    # The two tool runs are independent: run them side by side.
    with ThreadPoolExecutor(2) as pool:
        notes_job = pool.submit(toolchain.run, "llvm-readelf", ["--notes", co.path])
        text_listing, rodata_listing = _objdump_text_and_rodata(co, toolchain)
        notes_listing = notes_job.result().stdout.decode(errors="replace")
    insns = parse_objdump_text(text_listing)
    _check_coverage(co, insns)
    descriptors = descriptor_directives(co, rodata_listing)
    kernels = co.kernel_symbols()
    missing = [k.name for k in kernels if k.name not in descriptors]
    if missing:
        raise CodeObjectError(f"{co.path}: objdump printed no descriptor for {', '.join(missing)}")

    text = co.sections[".text"]
    by_addr: dict[int, list[Symbol]] = {}
    for sym in co.symbols:
        if sym.section == ".text" and sym.name not in ("", "_DYNAMIC"):
            by_addr.setdefault(sym.value, []).append(sym)
    labels = {addr: syms[0].name for addr, syms in by_addr.items()}
    synthesized: dict[int, str] = {}
    for insn in insns:
        target_addr = branch_target(insn)
        if target_addr is not None and target_addr not in labels:
            synthesized.setdefault(target_addr, f".Lf4_{target_addr:x}")
    end = text.addr + text.size
    for addr in synthesized:
        if not text.addr <= addr <= end:
            raise CodeObjectError(f"{co.path}: a branch targets 0x{addr:x}, outside .text")

    out = [
        f"// Generated by {GENERATOR_TAG} from {co.path.name}",
        f"// Reassemble: f4pipe assemble {co.path.stem}.s -o {co.path.stem}.co",
        f"//   (llvm-mc -triple=amdgcn-amd-amdhsa -mcpu={target.arch} -filetype=obj, "
        "then ld.lld -shared)",
        f'\t.amdgcn_target "amdgcn-amd-amdhsa--{target}"',
        f"\t.amdhsa_code_object_version {cov}",
        "\t.text",
        f"\t.p2align {int(math.log2(max(text.align, 1)))}",
    ]
    # `.amdhsa_kernel` copies the kernel symbol's visibility to `<kernel>.kd` and then raises a
    # default-visibility kernel symbol to protected; so a kernel's source visibility is its
    # descriptor symbol's.
    kd_visibility = {s.name[:-3]: s.visibility for s in co.symbols if s.name.endswith(".kd")}
    kernel_names = {k.name for k in kernels}
    for syms in by_addr.values():
        for sym in syms:
            vis = kd_visibility[sym.name] if sym.name in kernel_names else sym.visibility
            out.extend(_symbol_directives(sym, vis))
    branch_names = {**synthesized, **labels}
    for insn in insns:
        for sym in by_addr.get(insn.addr, []):
            out.append(f"{sym.name}:")
        if insn.addr in synthesized:
            out.append(f"{synthesized[insn.addr]}:")
        pc = f"\t// pc {insn.addr:#x}" if pc_comments else ""
        out.append("\t" + _render(insn, branch_names, co.arch) + pc)
    for sym in by_addr.get(end, []):
        out.append(f"{sym.name}:")
    if end in synthesized:
        out.append(f"{synthesized[end]}:")
    for sym in (s for syms in by_addr.values() for s in syms):
        if sym.size:
            out.append(f"\t.size\t{sym.name}, {sym.size}")
    out.append("")
    out.append("\t.rodata")
    for k in kernels:
        out.append("\t.p2align 6")
        out.append(descriptors[k.name])
    out.append("")
    out.append("\t.amdgpu_metadata")
    out.append(metadata_yaml(co, notes_listing))
    out.append("\t.end_amdgpu_metadata")
    out.append("")
    out.extend(raw_sections(co))
    return "\n".join(out), insns


#: Non-allocated sections the linker makes itself (or that the symbol table rebuilds).
LINKER_SECTIONS = frozenset({".comment", ".symtab", ".strtab", ".shstrtab"})
_SHF_ALLOC, _SHF_MERGE, _SHF_STRINGS = 0x2, 0x10, 0x20


def raw_sections(co: CodeObject) -> list[str]:
    """Non-allocated PROGBITS sections (DWARF `.debug_*` in aiter's objects) as their bytes.

    objdump prints no debug info to reassemble, and a linked object's DWARF holds resolved
    addresses, so its bytes are carried as they are: same name, flags (merge/strings and the
    entry size), alignment and order. The linker places them after the allocated sections,
    where they were."""
    out: list[str] = []
    for s in co.section_list:
        if s.type != "SHT_PROGBITS" or s.flags & _SHF_ALLOC or s.name in LINKER_SECTIONS:
            continue
        flags = "M" * bool(s.flags & _SHF_MERGE) + "S" * bool(s.flags & _SHF_STRINGS)
        entsize = f",{s.entsize}" if s.flags & _SHF_MERGE else ""
        out.append(f'\t.section {s.name},"{flags}",@progbits{entsize}')
        out.append(f"\t.p2align {int(math.log2(max(s.align, 1)))}")
        data = co.bytes_of(s)
        for i in range(0, len(data), 16):
            out.append("\t.byte " + ",".join(f"0x{b:02x}" for b in data[i : i + 16]))
    return out


_MC_ERROR = re.compile(r"^[^\n]*?:(?P<line>\d+):(?P<col>\d+): error: (?P<msg>[^\n]*)$", re.M)


def check_reassembles(asm: str, source: Path, toolchain: Toolchain) -> None:
    """Assemble co2asm's output with llvm-mc (no file written): a line LLVM rejects is a
    CodeObjectError naming the first such line, so co2asm never hands over a .s that does
    not build."""
    target = read_target(asm, str(source))
    args = ["-triple=amdgcn-amd-amdhsa", f"-mcpu={target.mcpu}", "-filetype=obj"]
    if target.mattr:
        args.append(f"-mattr={','.join(target.mattr)}")
    proc = toolchain.run("llvm-mc", [*args, "-o", os.devnull, "-"], input=asm.encode(), check=False)
    if proc.returncode == 0:
        return
    err = proc.stderr.decode(errors="replace")
    m = _MC_ERROR.search(err)
    if m is None:
        first = err.strip().splitlines()[:1] or [f"exit {proc.returncode}"]
        raise CodeObjectError(f"{source}: co2asm output does not reassemble: {first[0]}")
    lines = asm.splitlines()
    n = int(m.group("line"))
    text = lines[n - 1].strip() if 0 < n <= len(lines) else "?"
    raise CodeObjectError(
        f"{source}: co2asm output line {n} cannot be assembled ({m.group('msg')}): `{text}`; "
        "pass --no-verify to write it anyway"
    )


def _render(insn: Instruction, branch_names: dict[int, str], arch: str) -> str:
    """Instruction text with an exact, reassemblable form for branches and unknown words.

    What objdump cannot decode, or decodes with an `/*Invalid ...*/` operand (which llvm-mc
    would either reject or assemble to other bytes), is written as its `.long` words; so is
    an encoding the assembler refuses to write (`sgpr_source_with_op_sel_hi`), with its text
    kept as a comment."""
    if insn.text.startswith(("<unknown>", ".long")) or "/*Invalid" in insn.text:
        return "\n\t".join(f".long 0x{w:08x}" for w in insn.words)
    if sgpr_source_with_op_sel_hi(insn, arch):
        words = "\n\t".join(f".long 0x{w:08x}" for w in insn.words)
        return f"{words} // {insn.text} (op_sel_hi on an SGPR source: llvm-mc rejects the text)"
    target = branch_target(insn)
    if target is not None:
        m = _BRANCHES.match(insn.text)
        assert m is not None
        return f"{m.group(1)} {branch_names[target]}"
    return insn.text
