"""Read an AMDGPU code object (ELF) without LLVM: header, sections, symbols, descriptors, notes.

Names follow LLVM's AMDGPUUsage ("ELF Header", "Kernel Descriptor", "Code Object Metadata").
Parsing never formats and never guesses: anything that is not a well-formed AMDGPU HSA code
object raises CodeObjectError naming the file and what is wrong, with bounds checked before
every read, so a truncated or corrupt file is an error, not a crash.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import msgpack
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from f4pipe.codeobj import images
from f4pipe.codeobj.descriptor import KERNEL_DESCRIPTOR_SIZE
from f4pipe.core.errors import CodeObjectError, InputError
from f4pipe.core.fsio import read_input_bytes

EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
EF_AMDGPU_MACH = 0x0FF
# ELF header ABI version -> code object version (AMDGPUUsage, "ELFABIVERSION_AMDGPU_HSA_V*").
ABI_TO_CODE_OBJECT_VERSION = {0: 2, 1: 3, 2: 4, 3: 5, 4: 6}

# EF_AMDGPU_MACH_* (AMDGPUUsage, "AMDGPU ELF Header e_flags"): every processor the provisioned LLVM
# (22) lists in `llc -mcpu=help`, each value as llvm-mc writes it into an object for that -mcpu and
# llvm-readelf names it back (tests/test_codeobject.py checks the table against that LLVM, so an
# LLVM that adds or renumbers a processor fails a test instead of being guessed). Values LLVM does
# not write (gfx940/gfx941, retired) are reported as unsupported.
MACH_NAMES = {
    0x020: "gfx600",
    0x021: "gfx601",
    0x03A: "gfx602",
    0x022: "gfx700",
    0x023: "gfx701",
    0x024: "gfx702",
    0x025: "gfx703",
    0x026: "gfx704",
    0x03B: "gfx705",
    0x028: "gfx801",
    0x029: "gfx802",
    0x02A: "gfx803",
    0x03C: "gfx805",
    0x02B: "gfx810",
    0x02C: "gfx900",
    0x02D: "gfx902",
    0x02E: "gfx904",
    0x02F: "gfx906",
    0x030: "gfx908",
    0x031: "gfx909",
    0x032: "gfx90c",
    0x03F: "gfx90a",
    0x04C: "gfx942",
    0x04F: "gfx950",
    0x033: "gfx1010",
    0x034: "gfx1011",
    0x035: "gfx1012",
    0x042: "gfx1013",
    0x036: "gfx1030",
    0x037: "gfx1031",
    0x038: "gfx1032",
    0x039: "gfx1033",
    0x03E: "gfx1034",
    0x03D: "gfx1035",
    0x045: "gfx1036",
    0x041: "gfx1100",
    0x046: "gfx1101",
    0x047: "gfx1102",
    0x044: "gfx1103",
    0x043: "gfx1150",
    0x04A: "gfx1151",
    0x055: "gfx1152",
    0x058: "gfx1153",
    0x048: "gfx1200",
    0x04E: "gfx1201",
    0x049: "gfx1250",
    0x05A: "gfx1251",
    0x051: "gfx9-generic",
    0x05F: "gfx9-4-generic",
    0x052: "gfx10-1-generic",
    0x053: "gfx10-3-generic",
    0x054: "gfx11-generic",
    0x059: "gfx12-generic",
}


def gfx_generation(arch: str) -> int:
    """The GFX major version of a processor name (gfx950 -> 9, gfx90a -> 9, gfx1250 -> 12,
    gfx9-4-generic -> 9): the descriptor's bit fields and the SGPR rule change by generation."""
    tail = arch.removeprefix("gfx")
    major = tail.split("-")[0] if "-" in tail else tail[:-2]
    if not major.isdigit():
        raise CodeObjectError(f"{arch}: not an AMDGPU processor name (gfxN...)")
    return int(major)


# Target feature bits. Code object v4+: two-bit fields; v3: single "on" bits.
EF_AMDGPU_FEATURE_XNACK_V4 = 0x300
EF_AMDGPU_FEATURE_SRAMECC_V4 = 0xC00
FEATURE_V4 = {0x000: "unsupported", 0x100: "any", 0x200: "off", 0x300: "on"}
SRAMECC_V4 = {0x000: "unsupported", 0x400: "any", 0x800: "off", 0xC00: "on"}
EF_AMDGPU_FEATURE_XNACK_V3 = 0x100
EF_AMDGPU_FEATURE_SRAMECC_V3 = 0x200

#: What pyelftools raises on hostile bytes (OverflowError: a seek past 2^63; KeyError and
#: IndexError: an enum or table lookup with a corrupt value). All become CodeObjectError.
PARSE_ERRORS = (
    ELFError,
    struct.error,
    ValueError,
    UnicodeDecodeError,
    OverflowError,
    KeyError,
    IndexError,
)
#: aiter's largest code object is under 1 MB; anything past this is not a kernel image.
MAX_CODE_OBJECT_BYTES = 256 << 20


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    type: str  # STT_FUNC, STT_OBJECT, STT_NOTYPE, ...
    bind: str  # STB_GLOBAL, STB_LOCAL, STB_WEAK
    visibility: str  # STV_DEFAULT, STV_PROTECTED, STV_HIDDEN
    section: str  # name of the section it is defined in ("" if undefined/absolute)


@dataclass(frozen=True)
class Section:
    name: str
    type: str
    addr: int
    offset: int
    size: int
    flags: int
    align: int
    link: str = ""  # name of the section sh_link points to ("" for 0 or out of range)
    info: int = 0
    entsize: int = 0


@dataclass(frozen=True)
class Segment:
    """One program header (AMDGPUUsage relies on the ELF gABI's PT_* meanings)."""

    type: str
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    flags: int
    align: int


@dataclass(frozen=True)
class Note:
    owner: str
    type: int
    desc: bytes


@dataclass(frozen=True)
class TargetId:
    """The processor and its xnack / sramecc settings, as the ELF header encodes them."""

    arch: str
    xnack: str  # any | on | off | unsupported
    sramecc: str

    def __str__(self) -> str:
        """The target id string LLVM uses (`gfx950`, `gfx942:sramecc+:xnack-`)."""
        feats = []
        for name, value in (("sramecc", self.sramecc), ("xnack", self.xnack)):
            if value in ("on", "off"):
                feats.append(f"{name}{'+' if value == 'on' else '-'}")
        return ":".join([self.arch, *feats])


@dataclass
class CodeObject:
    """An AMDGPU HSA code object read into memory."""

    path: Path
    data: bytes
    _elf: ELFFile = field(repr=False)
    #: Its kernels as f4pipe.codeobj.program loaded them, by symbol (decoded once per object).
    programs: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def read(cls, path: str | Path) -> CodeObject:
        path = Path(path)
        if not path.exists() and not path.is_symlink():
            raise CodeObjectError(f"{path}: no such code object")
        shared = images.lookup(path)
        if shared is not None:
            return shared
        try:
            data = read_input_bytes(path, "code object", MAX_CODE_OBJECT_BYTES)
        except InputError as exc:
            raise CodeObjectError(str(exc)) from None
        co = cls.from_bytes(data, path)
        images.keep(path, co)
        return co

    @classmethod
    def from_bytes(cls, data: bytes, path: Path | str = "<bytes>") -> CodeObject:
        path = Path(path)
        if data[:4] != b"\x7fELF":
            raise CodeObjectError(f"{path}: not an ELF file (magic {data[:4]!r})")
        if len(data) < 64:
            raise CodeObjectError(f"{path}: truncated ELF header ({len(data)} bytes)")
        try:
            elf = ELFFile(io.BytesIO(data))
            header = elf.header
        except PARSE_ERRORS as exc:
            raise CodeObjectError(f"{path}: corrupt ELF: {exc}") from exc
        if header["e_machine"] != "EM_AMDGPU" and header["e_machine"] != EM_AMDGPU:
            raise CodeObjectError(
                f"{path}: ELF machine is {header['e_machine']}, not AMDGPU: not a GPU code object"
            )
        co = cls(path=path, data=data, _elf=elf)
        co._check_layout()
        return co

    def _check_layout(self) -> None:
        """Bounds-check the section table before anything reads through it."""
        h = self._elf.header
        if h["e_ident"]["EI_CLASS"] != "ELFCLASS64" or h["e_shentsize"] != 64:
            raise CodeObjectError(
                f"{self.path}: not a 64-bit ELF with 64-byte section headers "
                f"({h['e_ident']['EI_CLASS']}, e_shentsize {h['e_shentsize']}): AMDGPU code "
                "objects are ELF64"
            )
        end = h["e_shoff"] + h["e_shnum"] * h["e_shentsize"]
        if h["e_shnum"] == 0 or end > len(self.data):
            raise CodeObjectError(
                f"{self.path}: truncated: section headers end at {end} but the file has "
                f"{len(self.data)} bytes"
            )
        try:
            sections = self.section_list
        except PARSE_ERRORS as exc:
            raise CodeObjectError(f"{self.path}: corrupt section table: {exc}") from exc
        for s in sections:
            if s.type != "SHT_NOBITS" and s.offset + s.size > len(self.data):
                raise CodeObjectError(
                    f"{self.path}: truncated: section {s.name} spans bytes {s.offset}.."
                    f"{s.offset + s.size} of a {len(self.data)}-byte file"
                )
        if ".text" not in self.sections:
            raise CodeObjectError(f"{self.path}: no .text section")

    # -- header -----------------------------------------------------------------------------

    @property
    def e_flags(self) -> int:
        return int(self._elf.header["e_flags"])

    @property
    def abi_version(self) -> int:
        return int(self._elf.header["e_ident"]["EI_ABIVERSION"])

    @property
    def code_object_version(self) -> int:
        abi = self.abi_version
        if abi not in ABI_TO_CODE_OBJECT_VERSION:
            raise CodeObjectError(f"{self.path}: unknown AMDGPU HSA ABI version {abi}")
        return ABI_TO_CODE_OBJECT_VERSION[abi]

    @property
    def target(self) -> TargetId:
        mach = self.e_flags & EF_AMDGPU_MACH
        if mach not in MACH_NAMES:
            raise CodeObjectError(
                f"{self.path}: unsupported GPU (EF_AMDGPU_MACH 0x{mach:03x}); f4pipe knows "
                f"{', '.join(sorted(MACH_NAMES.values()))}"
            )
        arch = MACH_NAMES[mach]
        if self.code_object_version >= 4:
            xnack = FEATURE_V4[self.e_flags & EF_AMDGPU_FEATURE_XNACK_V4]
            sramecc = SRAMECC_V4[self.e_flags & EF_AMDGPU_FEATURE_SRAMECC_V4]
        else:
            xnack = "on" if self.e_flags & EF_AMDGPU_FEATURE_XNACK_V3 else "any"
            sramecc = "on" if self.e_flags & EF_AMDGPU_FEATURE_SRAMECC_V3 else "any"
        return TargetId(arch=arch, xnack=xnack, sramecc=sramecc)

    @property
    def arch(self) -> str:
        return self.target.arch

    # -- sections and symbols -------------------------------------------------------------

    @cached_property
    def section_list(self) -> list[Section]:
        """Every section header in file order (names may repeat in a hostile file)."""
        raw = list(self._elf.iter_sections())
        names = [s.name for s in raw]
        out = []
        for s in raw:
            link = int(s["sh_link"])
            out.append(
                Section(
                    name=s.name,
                    type=str(s["sh_type"]),
                    addr=int(s["sh_addr"]),
                    offset=int(s["sh_offset"]),
                    size=int(s["sh_size"]),
                    flags=int(s["sh_flags"]),
                    align=int(s["sh_addralign"]),
                    link=names[link] if 0 < link < len(names) else "",
                    info=int(s["sh_info"]),
                    entsize=int(s["sh_entsize"]),
                )
            )
        return out

    @cached_property
    def sections(self) -> dict[str, Section]:
        """Sections by name; the first one wins when a (hostile) file repeats a name."""
        out: dict[str, Section] = {}
        for s in self.section_list:
            out.setdefault(s.name, s)
        return out

    @cached_property
    def segments(self) -> list[Segment]:
        """The program headers, bounds-checked like the section table."""
        h = self._elf.header
        end = h["e_phoff"] + h["e_phnum"] * h["e_phentsize"]
        if h["e_phnum"] and (h["e_phentsize"] < 56 or end > len(self.data)):
            raise CodeObjectError(
                f"{self.path}: corrupt program headers: {h['e_phnum']} entries of "
                f"{h['e_phentsize']} bytes at {h['e_phoff']} in a {len(self.data)}-byte file"
            )
        try:
            return [
                Segment(
                    type=str(p["p_type"]),
                    offset=int(p["p_offset"]),
                    vaddr=int(p["p_vaddr"]),
                    paddr=int(p["p_paddr"]),
                    filesz=int(p["p_filesz"]),
                    memsz=int(p["p_memsz"]),
                    flags=int(p["p_flags"]),
                    align=int(p["p_align"]),
                )
                for p in self._elf.iter_segments()
            ]
        except PARSE_ERRORS as exc:
            raise CodeObjectError(f"{self.path}: corrupt program headers: {exc}") from exc

    def header_fields(self) -> dict[str, object]:
        """Every ELF header field, e_ident's included, by its gABI name."""
        h = self._elf.header
        ident = h["e_ident"]
        fields: dict[str, object] = {f"{k}": ident[k] for k in ident if k != "EI_MAG"}
        fields.update({k: h[k] for k in h if k != "e_ident"})
        return fields

    def section_bytes(self, name: str) -> bytes:
        """The bytes of section `name`; raises CodeObjectError if there is none."""
        s = self.sections.get(name)
        if s is None:
            raise CodeObjectError(f"{self.path}: no {name} section")
        return self.bytes_of(s)

    def bytes_of(self, s: Section) -> bytes:
        """The file bytes of one section header (none for SHT_NOBITS)."""
        if s.type == "SHT_NOBITS":
            return b""
        return self.data[s.offset : s.offset + s.size]

    @cached_property
    def symbols(self) -> list[Symbol]:
        """The static symbol table (.symtab), falling back to .dynsym when stripped."""
        try:
            table = self._elf.get_section_by_name(".symtab") or self._elf.get_section_by_name(
                ".dynsym"
            )
        except PARSE_ERRORS as exc:
            raise CodeObjectError(f"{self.path}: corrupt section table: {exc}") from exc
        if table is None:
            return []
        if not isinstance(table, SymbolTableSection):
            raise CodeObjectError(
                f"{self.path}: section {table.name} is {table['sh_type']}, not a symbol table"
            )
        names = {i: s.name for i, s in enumerate(self.section_list)}
        out = []
        try:
            for sym in table.iter_symbols():
                if not sym.name:
                    continue
                shndx = sym["st_shndx"]
                out.append(
                    Symbol(
                        name=sym.name,
                        value=int(sym["st_value"]),
                        size=int(sym["st_size"]),
                        type=str(sym["st_info"]["type"]),
                        bind=str(sym["st_info"]["bind"]),
                        visibility=str(sym["st_other"]["visibility"]),
                        section=names.get(shndx, "") if isinstance(shndx, int) else "",
                    )
                )
        except PARSE_ERRORS as exc:
            raise CodeObjectError(f"{self.path}: corrupt symbol table: {exc}") from exc
        return out

    def kernel_symbols(self) -> list[Symbol]:
        """Kernels: the symbols that have a kernel descriptor (`<name>.kd` in .rodata)."""
        kd = {
            s.name[:-3] for s in self.symbols if s.name.endswith(".kd") and s.type == "STT_OBJECT"
        }
        return sorted(
            (s for s in self.symbols if s.name in kd and s.section == ".text"),
            key=lambda s: s.value,
        )

    def kernel_descriptor(self, kernel: str) -> bytes:
        """The 64 descriptor bytes of `kernel` (AMDGPUUsage "Kernel Descriptor")."""
        kd = next((s for s in self.symbols if s.name == f"{kernel}.kd"), None)
        if kd is None:
            raise CodeObjectError(f"{self.path}: no kernel descriptor symbol {kernel}.kd")
        sec = self.sections.get(kd.section)
        if sec is None:
            raise CodeObjectError(f"{self.path}: {kernel}.kd is not in a section")
        start = sec.offset + (kd.value - sec.addr)
        if kd.value < sec.addr or start + KERNEL_DESCRIPTOR_SIZE > sec.offset + sec.size:
            raise CodeObjectError(f"{self.path}: {kernel}.kd lies outside {sec.name}")
        return self.data[start : start + KERNEL_DESCRIPTOR_SIZE]

    # -- notes ------------------------------------------------------------------------------

    @cached_property
    def notes(self) -> list[Note]:
        out = []
        for sec in self.sections.values():
            if sec.type != "SHT_NOTE":
                continue
            out.extend(_parse_notes(self.section_bytes(sec.name), self.path, sec.name))
        return out

    def metadata(self) -> dict[str, Any] | None:
        """The decoded msgpack metadata note (code object v3+), or None if there is none."""
        for note in self.notes:
            if note.owner == "AMDGPU" and note.type == NT_AMDGPU_METADATA:
                try:
                    meta = msgpack.unpackb(note.desc, raw=False, strict_map_key=False)
                except (ValueError, TypeError, msgpack.UnpackException) as exc:
                    # msgpack raises TypeError for e.g. an unhashable map key
                    raise CodeObjectError(f"{self.path}: corrupt metadata note: {exc}") from exc
                if not isinstance(meta, dict):
                    raise CodeObjectError(
                        f"{self.path}: metadata note is a msgpack {type(meta).__name__}, not a "
                        "map (AMDGPUUsage, Code Object V3+ Metadata)"
                    )
                return meta
        return None


def _parse_notes(data: bytes, path: Path, section: str) -> list[Note]:
    notes = []
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
        name_end = pos + 12 + namesz
        desc_start = pos + 12 + ((namesz + 3) & ~3)
        desc_end = desc_start + descsz
        if desc_end > len(data):
            raise CodeObjectError(f"{path}: truncated note in {section} at offset {pos}")
        owner = data[pos + 12 : name_end].rstrip(b"\0").decode(errors="replace")
        notes.append(Note(owner=owner, type=ntype, desc=data[desc_start:desc_end]))
        pos = (desc_end + 3) & ~3
    return notes
