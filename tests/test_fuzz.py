"""Fuzzing the readers of untrusted input, seeded from real aiter code objects.

Each target takes real bytes (the 35 f4gemm objects, gfx942 objects of the same wheel, the
manifest, a real archive), mutates them with Hypothesis (byte overwrites, biased toward the
ELF header, the section and program header tables, the notes and the kernel descriptor;
truncation; random msgpack metadata) and feeds them to the reader. The property is the
project's rule for bad input: the reader either succeeds or raises an F4PipeError (one line,
exit 2); any other exception is a crash.

`nox -s verify` runs the "ci" Hypothesis profile (a few dozen examples per target, seconds).
`nox -s fuzz` runs the "fuzz" profile over and over for a time budget (scripts/fuzz.py). Every
crash found becomes an explicit regression case (`REGRESSIONS` below, run as @example).
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import struct
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from f4pipe.aiter.manifest import MANIFEST_NAME, parse_manifest_text
from f4pipe.aiter.tuned import read_tuned
from f4pipe.codeobj.co2asm import check_reassembles, co2asm
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.codeobj.program import Program
from f4pipe.core.errors import F4PipeError
from f4pipe.pipeline.archive import SUMS_NAME, check_archive, tarball_bytes

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("F4PIPE_FUZZ_EXAMPLES", "2000")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
settings.load_profile(os.environ.get("F4PIPE_HYPOTHESIS_PROFILE", "ci"))

#: LLVM runs per co2asm example cost ~1 s: a tenth of the examples of the other targets.
LLVM_SHARE = 10


class Seeds(list):
    """(name, bytes) pairs; a short repr, so a failing example does not print megabytes."""

    def __repr__(self) -> str:
        return f"<{len(self)} seed code objects>"


@pytest.fixture(scope="module")
def seeds(f4gemm_dir, aiter_hsa_dir) -> Seeds:
    """(name, bytes) of every f4gemm object plus a dozen gfx942 objects of the same wheel."""
    f4 = sorted(f4gemm_dir.glob("*.co"))
    gfx942 = sorted((aiter_hsa_dir / "gfx942").rglob("*.co"))[::100][:12]
    return Seeds((p.name, p.read_bytes()) for p in f4 + gfx942)


def hot_offsets(data: bytes) -> list[int]:
    """File offsets where a mutation reaches the most parsing: the ELF header, the program and
    section header tables, each note, the descriptor and the string tables."""
    spots = list(range(0, 64))
    try:
        co = CodeObject.from_bytes(data)
    except F4PipeError:
        return spots
    h = co._elf.header
    spots += range(h["e_phoff"], h["e_phoff"] + h["e_phnum"] * h["e_phentsize"])
    spots += range(h["e_shoff"], h["e_shoff"] + h["e_shnum"] * h["e_shentsize"])
    for s in co.section_list:
        if s.name in (".note", ".rodata", ".shstrtab", ".dynamic") and s.type != "SHT_NOBITS":
            spots += range(s.offset, s.offset + min(s.size, 4096))
    return spots


class Mutant(tuple):
    """(seed name, mutated bytes) whose repr names the changed offsets, not every byte."""

    def __repr__(self) -> str:
        name, data = self
        return f"Mutant({name!r}, {len(data)} bytes, {getattr(self, 'changes', '?')})"


@st.composite
def mutated(draw, seeds: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    """A seed with 1-12 overwrites. Half the examples draw each overwrite from Hypothesis
    (which favours boundary values and shrinks well); the other half ("havoc") from a
    Random seeded by one drawn integer, i.e. uniformly random values, which found crashes
    Hypothesis' boundary-biased draws missed (a 2^63 section offset, see REGRESSIONS)."""
    name, data = draw(st.sampled_from(seeds))
    buf = bytearray(data)
    spots = hot_offsets(data)
    havoc = random.Random(draw(st.integers(0, 1 << 32))) if draw(st.booleans()) else None
    for _ in range(draw(st.integers(1, 12))):
        if havoc is not None:
            where = havoc.choice(spots) if havoc.random() < 0.5 else havoc.randrange(len(buf))
            width = havoc.choice([1, 1, 1, 2, 4, 8])
            value = havoc.getrandbits(8 * width)
        else:
            where = draw(st.one_of(st.sampled_from(spots), st.integers(0, len(buf) - 1)))
            width = draw(st.sampled_from([1, 1, 1, 2, 4, 8]))
            value = draw(st.integers(0, (1 << (8 * width)) - 1))
        if where + width <= len(buf):
            buf[where : where + width] = value.to_bytes(width, "little")
    if draw(st.integers(0, 9)) == 0:
        buf = buf[: draw(st.integers(0, len(buf)))]
    out = Mutant((name, bytes(buf)))
    diff = [i for i in range(min(len(buf), len(data))) if buf[i] != data[i]]
    out.changes = f"truncated to {len(buf)}; " * (len(buf) < len(data)) + ", ".join(
        f"[{i:#x}]={buf[i]:#04x}" for i in diff[:24]
    )
    return out


def read_everything(co: CodeObject) -> None:
    """Every accessor a stage uses, so a lazy parse cannot hide a crash."""
    _ = co.target, co.code_object_version, co.header_fields()
    _ = co.section_list, co.segments, co.symbols, co.notes
    co.metadata()
    for k in co.kernel_symbols():
        co.kernel_descriptor(k.name)


def tolerate(fn, *args) -> None:
    """Run fn; an F4PipeError is the allowed outcome for bad input, anything else a crash."""
    with contextlib.suppress(F4PipeError):
        fn(*args)


# --- targets --------------------------------------------------------------------------------------


@given(data=st.data())
def test_fuzz_codeobject_reader(seeds, data):
    _, blob = data.draw(mutated(seeds))
    tolerate(lambda: read_everything(CodeObject.from_bytes(blob)))


@given(data=st.data())
def test_fuzz_program_loader(seeds, data, tmp_path_factory):
    name, blob = data.draw(mutated([s for s in seeds if s[0].startswith("f4gemm")]))
    path = tmp_path_factory.mktemp("prog") / name
    path.write_bytes(blob)
    symbol = CodeObject.from_bytes(dict(seeds)[name]).kernel_symbols()[0].name
    tolerate(Program.load, path, symbol)


json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 64) - 1)  # what msgpack can encode
    | st.floats()
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(data=st.data())
def test_fuzz_metadata_note(seeds, data, tmp_path_factory):
    """Real metadata with its kernel entry's values replaced by arbitrary msgpack values."""
    name, blob = next(s for s in seeds if s[0].startswith("f4gemm"))
    co = CodeObject.from_bytes(blob)
    meta = co.metadata()
    assert meta is not None
    kernel = dict(meta["amdhsa.kernels"][0])
    kernel.pop(".args", None)
    for key in data.draw(st.lists(st.sampled_from(sorted(kernel)), max_size=4)):
        kernel[key] = data.draw(json_like)
    meta = {**meta, "amdhsa.kernels": data.draw(st.sampled_from([[kernel], kernel, [1]]))}
    sec = co.sections[".note"]
    namesz, descsz, _ = struct.unpack_from("<III", blob, sec.offset)
    desc = sec.offset + 12 + ((namesz + 3) & ~3)
    packed = msgpack.packb(meta)
    if len(packed) > descsz:
        return
    packed += b"\xc0" * (descsz - len(packed))  # trailing nils: msgpack's ExtraData
    fuzzed = blob[:desc] + packed + blob[desc + descsz :]
    path = tmp_path_factory.mktemp("meta") / name
    path.write_bytes(fuzzed)
    tolerate(Program.load, path, co.kernel_symbols()[0].name)


@settings(max_examples=max(3, settings().max_examples // LLVM_SHARE))
@given(data=st.data())
def test_fuzz_co2asm(seeds, data, toolchain, tmp_path_factory):
    name, blob = data.draw(mutated(seeds))
    path = tmp_path_factory.mktemp("co2asm") / name
    path.write_bytes(blob)

    def run() -> None:
        check_reassembles(co2asm(path, toolchain), path, toolchain)

    tolerate(run)


@given(data=st.data())
def test_fuzz_manifest_parser(f4gemm_dir, data):
    text = (f4gemm_dir / MANIFEST_NAME).read_text()
    chars = list(text)
    for _ in range(data.draw(st.integers(0, 8))):
        at = data.draw(st.integers(0, max(len(chars) - 1, 0)))
        chars[at : at + data.draw(st.integers(0, 3))] = data.draw(st.text(max_size=4))
    tolerate(parse_manifest_text, "".join(chars), Path("fuzzed.csv"))


@given(
    text=st.text(alphabet=st.sampled_from(list('0123456789,"\n\r_ZNabcMNK- .x\0')), max_size=300)
)
def test_fuzz_tuned_csv(text, tmp_path_factory):
    path = tmp_path_factory.mktemp("tuned") / "tuned.csv"
    path.write_text("cu_num,M,N,K,splitK,kernelName\n" + text)
    tolerate(read_tuned, path)


@pytest.fixture(scope="module")
def archive_bytes(f4gemm_dir) -> bytes:
    """A small archive in f4pipe's format holding a real manifest and code object."""
    members = {
        MANIFEST_NAME: (f4gemm_dir / MANIFEST_NAME).read_bytes(),
        "x.co": next(f4gemm_dir.glob("*.co")).read_bytes()[:4096],
    }
    import hashlib

    sums = "".join(f"{hashlib.sha256(b).hexdigest()}  {n}\n" for n, b in sorted(members.items()))
    return tarball_bytes("set", {**members, SUMS_NAME: sums.encode()})


@given(data=st.data())
def test_fuzz_archive_reader(archive_bytes, data, tmp_path_factory):
    buf = bytearray(archive_bytes)
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(buf) - 1))
        buf[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        buf = buf[: data.draw(st.integers(0, len(buf)))]
    path = tmp_path_factory.mktemp("arch") / "set.tar.gz"
    path.write_bytes(bytes(buf))
    tolerate(check_archive, path)


# --- regressions: each crash the fuzzers found, as the patch that reproduces it ---------------

#: (what, section, field offset in its Elf64_Shdr, struct format, value)
REGRESSIONS = [
    # pyelftools seeked to 2^64-256 for a section name: OverflowError, not ELFError
    ("shstrtab offset past 2^63", ".shstrtab", 24, "<Q", 0xFFFF_FFFF_FFFF_FF00),
    # .symtab renamed onto a section of another type: AttributeError (no iter_symbols)
    ("symtab of type PROGBITS", ".symtab", 4, "<I", 1),
]


@pytest.mark.parametrize(("what", "section", "field", "fmt", "value"), REGRESSIONS)
def test_fuzz_regressions(seeds, what, section, field, fmt, value):
    _, blob = seeds[0]
    co = CodeObject.from_bytes(blob)
    shoff = co._elf.header["e_shoff"]
    k = [s.name for s in co.section_list].index(section)
    data = bytearray(blob)
    struct.pack_into(fmt, data, shoff + 64 * k + field, value)
    with pytest.raises(F4PipeError):
        read_everything(CodeObject.from_bytes(bytes(data)))


def test_seeds_are_valid(seeds):
    """The unmutated seeds parse fully: the fuzz starts from real, readable inputs."""
    for _, blob in seeds:
        read_everything(CodeObject.from_bytes(blob))
    assert len(seeds) >= 35
    assert io.BytesIO(seeds[0][1]).read(4) == b"\x7fELF"
