"""Hostile input: every command answers with one line and the exit code that means one thing.

The rule (f4pipe.cli): 0 success, 1 a verdict, 2 bad input or environment (one line naming the
thing), 3 an internal error. Each case below feeds a real command a real hostile input (a file
system oddity, a corrupt code object made from a real aiter one, a corrupt archive or table)
and checks the exit code, that stderr is one line naming the culprit, that no traceback is
printed and that no output file is left behind.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import msgpack
import pytest

from f4pipe.aiter.manifest import MANIFEST_NAME
from f4pipe.cli import EXIT_ERROR, EXIT_INTERNAL, EXIT_OK
from f4pipe.cli import main as cli_main
from f4pipe.codeobj.codeobject import NT_AMDGPU_METADATA, CodeObject
from f4pipe.codeobj.equivalence import EXPLAINED_RELRO_PADDING, compare
from f4pipe.codeobj.program import Program
from f4pipe.core.errors import EmulatorError, InputError
from f4pipe.core.fsio import json_text
from f4pipe.core.schemas import read_table
from f4pipe.pipeline.archive import SUMS_NAME, check_archive, tarball_bytes

KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x128"
SMALL = ["-m", "32", "-n", "256", "-k", "256", "--device", "emulator"]


def run(capsys, *argv: str) -> tuple[int, str]:
    """Run the CLI in-process; (exit code, stderr)."""
    capsys.readouterr()
    code = cli_main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def one_error_line(err: str, *needles: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "error:" in lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# --- the co object itself -----------------------------------------------------------------------


@pytest.fixture
def co_bytes(f4gemm_dir) -> bytes:
    return (f4gemm_dir / f"{KERNEL}.co").read_bytes()


def metadata_span(data: bytes) -> tuple[int, int]:
    """(file offset, size) of the msgpack metadata note's descriptor."""
    co = CodeObject.from_bytes(data)
    sec = co.sections[".note"]
    pos = sec.offset
    while pos < sec.offset + sec.size:
        namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
        desc = pos + 12 + ((namesz + 3) & ~3)
        if ntype == NT_AMDGPU_METADATA:
            return desc, descsz
        pos = (desc + descsz + 3) & ~3
    raise AssertionError("no metadata note")


def with_metadata(data: bytes, meta: dict | list) -> bytes:
    """`data` with its metadata note replaced by `meta`, padded to the same size (the filler
    is a string under a key or in an element of its own, so the note stays one msgpack value)."""
    off, size = metadata_span(data)
    for n in range(size, -1, -1):
        filler = "x" * n
        padded = {**meta, "z": filler} if isinstance(meta, dict) else [*meta, filler]
        packed = msgpack.packb(padded)
        if len(packed) == size:
            return data[:off] + packed + data[off + size :]
    raise AssertionError(f"cannot fit {meta!r} in {size} bytes")


def kernel_meta(data: bytes) -> dict:
    meta = CodeObject.from_bytes(data).metadata()
    assert meta is not None
    return meta


def descriptor_offset(data: bytes) -> int:
    co = CodeObject.from_bytes(data)
    kd = next(s for s in co.symbols if s.name.endswith(".kd"))
    sec = co.sections[kd.section]
    return sec.offset + kd.value - sec.addr


def co_dir_with(f4gemm_dir: Path, tmp_path: Path, data: bytes) -> Path:
    """An f4gemm directory like the real one, with KERNEL's object replaced by `data`."""
    d = tmp_path / "f4gemm"
    d.mkdir()
    for p in f4gemm_dir.iterdir():
        (d / p.name).symlink_to(p)
    (d / f"{KERNEL}.co").unlink()
    (d / f"{KERNEL}.co").write_bytes(data)
    return d


# --- 1. files that are not what they claim ------------------------------------------------------


@pytest.fixture
def odd_paths(tmp_path) -> dict[str, Path]:
    loop = tmp_path / "loop1"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    (tmp_path / "regular").write_text("x")
    (tmp_path / "dir.co").mkdir()
    return {
        "dev_zero": Path("/dev/zero"),
        "directory": tmp_path / "dir.co",
        "symlink loop": loop,
        "name too long": tmp_path / ("a" * 300 + ".co"),
        "under a regular file": tmp_path / "regular" / "x.co",
        "unreadable (EIO)": Path("/proc/self/mem"),
    }


@pytest.mark.parametrize(
    "kind",
    [
        "dev_zero",
        "directory",
        "symlink loop",
        "name too long",
        "under a regular file",
        "unreadable (EIO)",
    ],
)
@pytest.mark.parametrize("command", ["co2asm", "roundtrip", "assemble"])
def test_odd_input_files_are_one_line_errors(capsys, odd_paths, tmp_path, command, kind):
    path = odd_paths[kind]
    out = tmp_path / "out"
    argv = {
        "co2asm": ["co2asm", path, "-o", out / "x.s"],
        "roundtrip": ["roundtrip", path, "--out", out],
        "assemble": ["assemble", path, "-o", out / "x.co"],
    }[command]
    code, err = run(capsys, *argv)
    assert code == EXIT_ERROR
    one_error_line(err, str(path)[:40])
    assert not out.exists() or not any(out.iterdir())


def test_output_under_a_regular_file_is_refused_before_work(capsys, f4gemm_dir, tmp_path):
    (tmp_path / "regular").write_text("x")
    code, err = run(
        capsys, "co2asm", f4gemm_dir / f"{KERNEL}.co", "-o", tmp_path / "regular" / "x.s"
    )
    assert code == EXIT_ERROR
    one_error_line(err, "regular is not a directory")


# --- 2. corrupt code objects made from a real one ------------------------------------------------


def test_malformed_msgpack_metadata(capsys, co_bytes, tmp_path):
    # a map key that is an array: msgpack raises TypeError (unhashable) when decoding it
    off, size = metadata_span(co_bytes)
    body = b"\x81\x91\x01\x01"  # {[1]: 1}
    bad = co_bytes[:off] + body + b"\xc0" * (size - len(body)) + co_bytes[off + size :]
    path = tmp_path / "bad.co"
    path.write_bytes(bad)
    code, err = run(capsys, "co2asm", path, "-o", tmp_path / "bad.s")
    assert code == EXIT_ERROR
    one_error_line(err, "corrupt metadata note")
    assert not (tmp_path / "bad.s").exists()


def test_metadata_that_is_not_a_map(co_bytes, tmp_path):
    path = tmp_path / "list.co"
    path.write_bytes(with_metadata(co_bytes, [1, 2, 3]))
    with pytest.raises(InputError, match="not a map"):
        CodeObject.read(path).metadata()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (".kernarg_segment_size", 1 << 40, "not an integer in 0.."),
        (".kernarg_segment_size", "368", "not an integer in 0.."),
        (".vgpr_count", -1, "not an integer in 0.."),
    ],
)
def test_metadata_of_the_wrong_shape_never_reaches_the_emulator(
    co_bytes, tmp_path, field, value, message
):
    meta = kernel_meta(co_bytes)
    k = meta["amdhsa.kernels"][0]
    k.pop(".args", None)  # room for the bigger value
    k[field] = value
    path = tmp_path / "meta.co"
    path.write_bytes(with_metadata(co_bytes, meta))
    symbol = k[".name"]
    with pytest.raises(EmulatorError, match=message):
        Program.load(path, symbol)


def test_kernels_list_of_the_wrong_shape(co_bytes, tmp_path):
    meta = kernel_meta(co_bytes)
    symbol = meta["amdhsa.kernels"][0][".name"]
    meta["amdhsa.kernels"] = {"not": "a list"}
    path = tmp_path / "meta.co"
    path.write_bytes(with_metadata(co_bytes, meta))
    with pytest.raises(EmulatorError, match="not a list of maps"):
        Program.load(path, symbol)


@pytest.mark.parametrize(
    ("offset", "mask", "message"),
    [
        # a granule of 0 is legal, but the f4gemm kernel does not fit in it
        (48, 0x3F, "allocates 8 VGPRs"),  # compute_pgm_rsrc1 VGPR granule -> 0
        (48, 0x3C0, "SGPRs but the metadata says"),  # SGPR granule -> 0
        (48, 1 << 22, "must-be-zero bits"),  # rsrc1 DEBUG_MODE
        (52, 1 << 6, "must-be-zero bits"),  # rsrc2 ENABLE_TRAP_HANDLER
        (44, 1 << 20, "must-be-zero bits"),  # rsrc3 reserved
        (60, 0xFF, "reserved descriptor bytes"),
    ],
)
def test_emulator_refuses_a_corrupt_descriptor(
    capsys, f4gemm_dir, co_bytes, tmp_path, offset, mask, message
):
    kd = descriptor_offset(co_bytes)
    word = struct.unpack_from("<I", co_bytes, kd + offset)[0]
    # granule masks clear the field; the others set bits
    new = word & ~mask if mask in (0x3F, 0x3C0) else word | mask
    data = bytearray(co_bytes)
    struct.pack_into("<I", data, kd + offset, new)
    co_dir = co_dir_with(f4gemm_dir, tmp_path, bytes(data))
    code, err = run(capsys, "gemm", "--co-dir", co_dir, "--kernel", KERNEL, *SMALL)
    assert code == EXIT_ERROR
    one_error_line(err, message)


def test_a_granule_of_0_is_the_legal_minimum(co_bytes):
    """Granule 0 allocates 8 VGPRs (and the SGPR minimum): a small kernel that fits is valid;
    one whose metadata uses a register more is refused."""
    from f4pipe.codeobj.program import check_descriptor

    kd_at = descriptor_offset(co_bytes)
    kd = bytearray(co_bytes[kd_at : kd_at + 64])
    rsrc1 = struct.unpack_from("<I", kd, 48)[0] & ~0x3FF  # both granules 0
    struct.pack_into("<I", kd, 48, rsrc1)
    check_descriptor(bytes(kd), {".vgpr_count": 8, ".sgpr_count": 8}, "small")
    with pytest.raises(EmulatorError, match="allocates 8 VGPRs"):
        check_descriptor(bytes(kd), {".vgpr_count": 9, ".sgpr_count": 8}, "small")


def test_descriptor_smaller_than_the_metadata_says(f4gemm_dir, co_bytes, tmp_path):
    kd = descriptor_offset(co_bytes)
    data = bytearray(co_bytes)
    rsrc1 = struct.unpack_from("<I", data, kd + 48)[0]
    struct.pack_into("<I", data, kd + 48, (rsrc1 & ~0x3F) | 1)  # 16 VGPRs
    path = tmp_path / "small.co"
    path.write_bytes(bytes(data))
    symbol = kernel_meta(co_bytes)["amdhsa.kernels"][0][".name"]
    with pytest.raises(EmulatorError, match="allocates 16 VGPRs"):
        Program.load(path, symbol)


# --- 3. gemm's numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--seed", "-1"], "--seed '-1'"),
        (["--seed", "1,2,3"], "expected S or A,B"),
        (["--alpha", "inf"], "alpha=inf is not a finite f32"),
        (["--alpha", "nan"], "alpha=nan is not a finite f32"),
        (["--alpha", "1e39"], "not a finite f32"),
        (["--kernel", ""], "--kernel ''"),
        (["--kernel", "   "], "--kernel ''"),
        (["--trace", "-3"], "--trace -3"),
        (["--trace", "99999"], "this launch has 8 waves"),
        (["--workgroup-order", "shuffle:-1"], "shuffle:-1"),
    ],
)
def test_gemm_bad_values(capsys, f4gemm_dir, extra, needle):
    code, err = run(capsys, "gemm", "--co-dir", f4gemm_dir, *SMALL, *extra)
    assert code == EXIT_ERROR
    one_error_line(err, needle)


@pytest.mark.parametrize(
    ("m", "needle"),
    [
        (str(10**9), "bytes"),
        (str(2**63), "at most 2147483647"),
    ],
)
def test_gemm_huge_shapes_refused_before_allocating(capsys, f4gemm_dir, m, needle):
    argv = ["gemm", "--co-dir", f4gemm_dir, "-m", m, "-n", "256", "-k", "256"]
    code, err = run(capsys, *argv, "--device", "emulator")
    assert code == EXIT_ERROR
    one_error_line(err, needle)
    if needle == "bytes":
        assert "available" in err and "--no-memory-check" in err


def test_stage_with_a_case_that_cannot_run_exits_2(capsys, f4gemm_dir, tmp_path):
    """One case over the memory bound: its row says why, the table is written, and the
    command exits 2 (no verdict), not 1."""
    out = tmp_path / "verify.parquet"
    argv = ["verify", "--co-dir", f4gemm_dir, "--aiter-id", "x", "--toolchain-id", "y"]
    argv += ["--shape", f"{10**9},256,256", "--shape", "32,256,256", "--device", "emulator"]
    code, err = run(capsys, *argv, "-o", out)
    assert code == EXIT_ERROR
    errors = [ln for ln in err.splitlines() if "error:" in ln]  # the rest is progress
    one_error_line("\n".join(errors), "1 case(s) could not run", str(out))
    rows = read_table(out).to_pylist()
    assert [r["status"] for r in rows] == ["error", "passed"]
    assert "bytes" in rows[0]["reason"] and "available" in rows[0]["reason"]


def test_trace_out_under_a_regular_file(capsys, f4gemm_dir, tmp_path):
    (tmp_path / "regular").write_text("x")
    out = tmp_path / "regular" / "t.txt"
    code, err = run(
        capsys, "gemm", "--co-dir", f4gemm_dir, *SMALL, "--trace", "0", "--trace-out", out
    )
    assert code == EXIT_ERROR
    one_error_line(err, "--trace-out", "is not a directory")


def test_gemm_json_is_strict_json(capsys, f4gemm_dir):
    capsys.readouterr()
    assert cli_main(["gemm", "--co-dir", str(f4gemm_dir), *SMALL, "--json"]) == EXIT_OK

    def refuse(name: str) -> None:
        raise AssertionError(f"bare {name} in --json output")

    out = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert out["passed"] is True


def test_json_text_never_writes_nan_or_infinity():
    text = json_text({"a": float("inf"), "b": [float("nan"), 1.5], "c": -float("inf")})
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": None}


# --- 4. manifest and tuned CSV -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("tile_M,tile_N,splitK,bpreshuffle,knl_name,co_name\n" + "x" * 200_000 + "\n", "CSV"),
        ('tile_M,tile_N,splitK,bpreshuffle,knl_name,co_name\n"unclosed\n', "CSV"),
        (b"\xff\xfe not utf-8", "not a UTF-8"),
    ],
)
def test_manifest_csv_hostile(capsys, tmp_path, content, needle):
    d = tmp_path / "f4gemm"
    d.mkdir()
    path = d / MANIFEST_NAME
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    code, err = run(capsys, "gemm", "--co-dir", d, "--list")
    assert code == EXIT_ERROR
    one_error_line(err, str(path))


def test_manifest_that_is_dev_zero(capsys, tmp_path):
    d = tmp_path / "f4gemm"
    d.mkdir()
    (d / MANIFEST_NAME).symlink_to("/dev/zero")
    code, err = run(capsys, "gemm", "--co-dir", d, "--list")
    assert code == EXIT_ERROR
    one_error_line(err, MANIFEST_NAME)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("cu_num,M,N,K,splitK,kernelName\n256,abc,1024,1024,0,_ZNx\n", "column M"),
        ("cu_num,M,N\n256,1,2\n", "missing"),
        ('cu_num,M,N,K,splitK,kernelName\n256,1,"\n', "tuned CSV"),
    ],
)
def test_tuned_csv_hostile(capsys, f4gemm_dir, tmp_path, content, needle):
    path = tmp_path / "tuned.csv"
    path.write_text(content)
    out = tmp_path / "audit.parquet"
    code, err = run(
        capsys,
        "audit-tuned",
        path,
        "--co-dir",
        f4gemm_dir,
        "--aiter-id",
        "x",
        "--toolchain-id",
        "y",
        "-o",
        out,
    )
    assert code == EXIT_ERROR
    one_error_line(err, needle)
    assert not out.exists()


# --- 5. archives and result sets -----------------------------------------------------------------


def small_archive(tmp_path: Path) -> Path:
    body = b"hello\n" * 1000
    sums = f"{hashlib.sha256(body).hexdigest()}  a.txt\n".encode()
    path = tmp_path / "set.tar.gz"
    path.write_bytes(tarball_bytes("set", {"a.txt": body, SUMS_NAME: sums}))
    return path


def test_small_archive_checks_ok(tmp_path):
    assert check_archive(small_archive(tmp_path)).ok


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (lambda d: d[:-9], "truncated"),  # cut inside the trailer
        (lambda d: d[: len(d) // 2], "truncated"),
        (lambda d: d[:-8] + bytes([d[-8] ^ 1]) + d[-7:], "damaged gzip"),  # CRC-32
        (lambda d: d[:-4] + bytes([d[-4] ^ 1]) + d[-3:], "damaged gzip"),  # ISIZE
        (lambda d: d + b"junk", "trailing data"),
    ],
)
def test_archive_check_detects_gzip_damage(capsys, tmp_path, damage, needle):
    path = small_archive(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    code, err = run(capsys, "archive", "--check", path)
    assert code == EXIT_ERROR
    one_error_line(err, needle)


def test_corrupt_tables_in_a_result_set(capsys, tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    (a / "kernels.parquet").write_bytes(b"PAR1 not really parquet PAR1")
    code, err = run(capsys, "compare", a, a, "-o", tmp_path / "cmp")
    assert code == EXIT_ERROR
    one_error_line(err, "kernels.parquet", "not a readable Parquet table")
    assert not (tmp_path / "cmp").exists()


def test_corrupt_json_in_a_result_set(capsys, result_set_dir, tmp_path):
    (result_set_dir / "toolchain.json").write_text("{not json")
    code, err = run(capsys, "compare", result_set_dir, result_set_dir, "-o", tmp_path / "cmp")
    assert code == EXIT_ERROR
    one_error_line(err, "toolchain.json", "not a valid")


@pytest.fixture
def result_set_dir(f4gemm_dir, toolchain, tmp_path) -> Path:
    """A real result-set directory: kernels.parquet from `f4pipe kernels`."""
    d = tmp_path / "results" / "x"
    tc_json = d / "toolchain.json"
    assert cli_main(["toolchain", "-o", str(tc_json)]) == 0
    argv = ["kernels", "--co-dir", str(f4gemm_dir), "--aiter-id", "x"]
    argv += ["--toolchain-json", str(tc_json), "-o", str(d / "kernels.parquet")]
    assert cli_main(argv) == 0
    return d


# --- 6. co2asm checks its own output -------------------------------------------------------------


def test_co2asm_names_the_line_llvm_rejects(capsys, co_bytes, tmp_path):
    co = CodeObject.from_bytes(co_bytes)
    strtab = co.sections[".strtab"]
    at = co_bytes.index(b"label_", strtab.offset)
    path = tmp_path / "badsym.co"
    path.write_bytes(co_bytes[:at] + b"lab el" + co_bytes[at + 6 :])
    out = tmp_path / "badsym.s"
    code, err = run(capsys, "co2asm", path, "-o", out)
    assert code == EXIT_ERROR
    one_error_line(err, "cannot be assembled", "`lab el", "--no-verify")
    assert not out.exists()
    code, _ = run(capsys, "co2asm", path, "-o", out, "--no-verify")
    assert code == EXIT_OK and out.is_file()
    rt_dir = tmp_path / "rt"
    code, err = run(capsys, "roundtrip", path, "--out", rt_dir)
    assert code == EXIT_ERROR
    one_error_line(err, "cannot be assembled", "`lab el")
    assert not rt_dir.exists() or not any(rt_dir.iterdir())  # no half of the outputs


# --- 7. equivalence without blind spots ----------------------------------------------------------


@pytest.fixture
def rebuilt(f4gemm_dir, toolchain, tmp_path) -> Path:
    from f4pipe.pipeline.roundtrip import roundtrip

    return roundtrip(f4gemm_dir / f"{KERNEL}.co", tmp_path / "rt", toolchain).rebuilt


def _patched(src: Path, tmp_path: Path, edit) -> Path:
    data = bytearray(src.read_bytes())
    edit(data)
    out = tmp_path / f"patched-{len(list(tmp_path.iterdir()))}.co"
    out.write_bytes(bytes(data))
    return out


def test_broken_program_headers_are_not_equivalent(rebuilt, toolchain, tmp_path, co_bytes):
    phoff = struct.unpack_from("<Q", co_bytes, 0x20)[0]

    def grow_filesz(d: bytearray) -> None:  # PT_LOAD #1 p_filesz (phdr 1, offset 32)
        struct.pack_into("<Q", d, phoff + 56 + 32, 0x7FFFFFFF)

    original = tmp_path / "orig.co"
    original.write_bytes(co_bytes)
    bad = _patched(original, tmp_path, grow_filesz)
    eq = compare(bad, rebuilt, toolchain)
    assert not eq.equivalent and not eq.header_ok
    assert any("program header 1" in p for p in eq.problems)


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "problem"),
    [
        (0x18, "<Q", 0x1234, "e_entry"),
        (0x3C, "<H", 99, "e_shnum"),
    ],
)
def test_header_fields_are_compared(
    rebuilt, toolchain, tmp_path, co_bytes, offset, fmt, value, problem
):
    original = tmp_path / "orig.co"
    data = bytearray(co_bytes)
    struct.pack_into(fmt, data, offset, value)
    original.write_bytes(bytes(data))
    try:
        eq = compare(original, rebuilt, toolchain)
    except InputError:
        return  # a header the reader refuses outright is as good as a reported difference
    assert not eq.equivalent
    assert any(problem in p for p in eq.problems)


@pytest.mark.parametrize(
    ("section", "field_offset", "fmt", "value"),
    [
        (".rodata", 40, "<I", 5),  # sh_link: none -> .dynstr
        (".rodata", 44, "<I", 7),  # sh_info
        (".note", 56, "<Q", 4),  # sh_entsize
        (".rodata", 8, "<Q", 0x3),  # sh_flags: SHF_ALLOC -> SHF_ALLOC | SHF_WRITE
    ],
)
def test_section_header_fields_are_compared(
    rebuilt, toolchain, tmp_path, co_bytes, section, field_offset, fmt, value
):
    co = CodeObject.from_bytes(co_bytes)
    shoff = struct.unpack_from("<Q", co_bytes, 0x28)[0]
    k = [s.name for s in co.section_list].index(section)
    data = bytearray(co_bytes)
    before = struct.unpack_from(fmt, data, shoff + 64 * k + field_offset)[0]
    if before == value:
        value ^= 1
    struct.pack_into(fmt, data, shoff + 64 * k + field_offset, value)
    original = tmp_path / "orig.co"
    original.write_bytes(bytes(data))
    eq = compare(original, rebuilt, toolchain)
    assert not eq.sections_ok
    assert any(section in p for p in eq.problems), eq.problems


def test_duplicate_symbols_are_not_equivalent(rebuilt, toolchain, tmp_path, co_bytes):
    co = CodeObject.from_bytes(co_bytes)
    symtab = co.sections[".symtab"]
    names = co._elf.get_section_by_name(".symtab")
    labels = [i for i, s in enumerate(names.iter_symbols()) if s.name.startswith("label_")]
    first, second = labels[0], labels[1]
    data = bytearray(co_bytes)
    entry = data[symtab.offset + 24 * first : symtab.offset + 24 * first + 24]
    data[symtab.offset + 24 * second : symtab.offset + 24 * second + 24] = entry
    original = tmp_path / "orig.co"
    original.write_bytes(bytes(data))
    eq = compare(original, rebuilt, toolchain)
    assert not eq.symbols_ok
    assert any("symbols only in original" in p for p in eq.problems)


def test_relro_padding_of_newer_lld_is_explained(aiter_hsa_dir, toolchain, tmp_path):
    """A gfx942 fmoe object linked by "AMD LLD 17" has no .relro_padding; the rebuilt one does."""
    from f4pipe.pipeline.roundtrip import roundtrip

    src = next(aiter_hsa_dir.rglob("fmoe_fp8_g1u1_subGU_448_silu_tkw1.co"))
    assert ".relro_padding" not in CodeObject.read(src).sections
    rt = roundtrip(src, tmp_path, toolchain)
    assert ".relro_padding" in CodeObject.read(rt.rebuilt).sections
    assert rt.equivalence.equivalent, rt.equivalence.problems
    assert rt.equivalence.explained_layout == [EXPLAINED_RELRO_PADDING]


def test_relro_padding_is_not_a_blanket_excuse(aiter_hsa_dir, toolchain, tmp_path):
    """The same pair with the original's PT_GNU_RELRO shortened: the padding no longer ends
    where RELRO does, so it is not explained and the pair is not equivalent."""
    from f4pipe.pipeline.roundtrip import roundtrip

    src = next(aiter_hsa_dir.rglob("fmoe_fp8_g1u1_subGU_448_silu_tkw1.co"))
    rebuilt = roundtrip(src, tmp_path / "rt", toolchain).rebuilt
    data = bytearray(src.read_bytes())
    co = CodeObject.from_bytes(bytes(data))
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    k = [s.type for s in co.segments].index("PT_GNU_RELRO")
    memsz = struct.unpack_from("<Q", data, phoff + 56 * k + 40)[0]
    struct.pack_into("<Q", data, phoff + 56 * k + 40, memsz - 0x100)
    original = tmp_path / "orig.co"
    original.write_bytes(bytes(data))
    eq = compare(original, rebuilt, toolchain)
    assert not eq.equivalent and eq.explained_layout == []


# --- 8. the exit-code rule itself ----------------------------------------------------------------


def test_internal_error_is_exit_3_with_traceback_only_under_debug(capsys, monkeypatch):
    import f4pipe.cli.codeobj as codeobj_cli

    def bug(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(codeobj_cli, "cmd_toolchain", bug)
    code = cli_main(["toolchain"])
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL
    assert "internal error, please report: RuntimeError: a bug" in err
    assert "Traceback" not in err and "--debug" in err
    for argv in (["--debug", "toolchain"], ["toolchain", "--debug"]):
        assert cli_main(argv) == EXIT_INTERNAL
        assert "Traceback" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["gemm", "-m", "abc"])
    assert exc.value.code == EXIT_ERROR
