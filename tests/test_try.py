"""`f4pipe try` end to end on the emulator: edits that keep semantics pass bit-identically,
edits that break the kernel fail with their first wrong element named, overstepping edits are
stopped before they run. Edited .s files are made here from co2asm output, never committed."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from f4pipe.aiter.manifest import read_manifest
from f4pipe.cli import main
from f4pipe.devices.opendevice import open_device
from f4pipe.edits.trykernel import quick_cases, try_edit
from f4pipe.host.gemm import GemmRequest, run_gemm
from f4pipe.host.matrices import Case

KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
FIRST_STORE = "\tbuffer_store_dwordx4 v[16:19], v158, s[4:7], 0 offen\n"
LOAD_A, LOAD_B = "\ts_load_dword s36, s[0:1], 0x80\n", "\ts_load_dword s37, s[0:1], 0xa0\n"


def edited_first(base: str, old: str, new: str) -> str:
    assert base.count(old) >= 1, f"{old!r} not found"
    return base.replace(old, new, 1)


def drop_first_store(base: str) -> str:
    i = base.index(FIRST_STORE)
    return base[:i] + base[i + len(FIRST_STORE) :]


KEEPS_SEMANTICS = {
    "nop": lambda s: edited_first(s, "label_0064:\n", "label_0064:\n\ts_nop 4\n"),
    "reorder": lambda s: edited_first(s, LOAD_A + LOAD_B, LOAD_B + LOAD_A),
}
BREAKS = {
    # the A tile's per-lane byte offset (x16 -> x8): address arithmetic
    "address-immediate": lambda s: edited_first(
        s, "\tv_lshlrev_b32_e32 v4, 4, v4\n", "\tv_lshlrev_b32_e32 v4, 3, v4\n"
    ),
    # src0/src1 of the first scaled MFMA swapped
    "mfma-operands": lambda s: edited_first(
        s,
        "a[0:3], v[72:75], v[8:11], a[0:3], v140, v136 op_sel_hi:[0,0,0]",
        "a[0:3], v[8:11], v[72:75], a[0:3], v140, v136 op_sel_hi:[0,0,0]",
    ),
    "dropped-store": drop_first_store,
}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.s"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(KEEPS_SEMANTICS))
def test_edit_that_keeps_semantics_passes_bit_identically(
    name, tmp_path, base_asm, toolchain, f4gemm_dir
):
    asm = write(tmp_path, name, KEEPS_SEMANTICS[name](base_asm))
    result = try_edit(asm, f4gemm_dir, toolchain, device="emulator")
    assert result.passed, result.verdict_line()
    assert [r.case for r in result.runs] == quick_cases(result.prepared.entry)
    assert all(r.status == "passed" and r.identical for r in result.runs)
    assert result.verdict_line().startswith(f"PASS {name}.s ({KERNEL})")
    assert "bit-identical" in result.verdict_line()


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_edit_that_breaks_the_kernel_fails_naming_the_first_wrong_element(
    name, tmp_path, base_asm, toolchain, f4gemm_dir
):
    asm = write(tmp_path, name, BREAKS[name](base_asm))
    result = try_edit(asm, f4gemm_dir, toolchain, device="emulator")
    assert not result.passed
    assert result.prepared.findings == []  # nothing static to see: only running shows it
    run = result.runs[0]
    assert run.status == "failed" and run.bad > 0 and run.original_fails is False
    wrong = run.first_wrong
    assert wrong is not None and wrong.expected != wrong.got
    line = result.verdict_line()
    assert line.startswith(f"FAIL {name}.s") and f"first D[{wrong.row},{wrong.col}]" in line


def test_first_wrong_element_is_the_edits_actual_output(tmp_path, base_asm, toolchain, f4gemm_dir):
    """The element `try` names really is what the edited kernel wrote, and the original gets it
    right (checked independently through run_gemm)."""
    asm = write(tmp_path, "nostore", drop_first_store(base_asm))
    keep = tmp_path / "nostore.co"
    result = try_edit(asm, f4gemm_dir, toolchain, device="emulator", out_co=keep)
    run = result.runs[0]
    wrong = run.first_wrong
    entry = read_manifest(f4gemm_dir).get(KERNEL)
    device = open_device("emulator")
    try:
        request = GemmRequest(run.case.m, run.case.n, run.case.k)
        edit = run_gemm(device, entry, keep, request)
        original = run_gemm(device, entry, f4gemm_dir / entry.co_name, request)
    finally:
        device.close()
    assert edit.d[wrong.row, wrong.col] == wrong.got == 0.0  # the dropped store left zeros
    assert original.passed and np.isclose(
        original.d[wrong.row, wrong.col], wrong.expected, rtol=2e-2
    )
    assert run.bad == edit.verification.bad


def test_edit_beyond_its_registers_is_stopped_before_running(
    tmp_path, base_asm, toolchain, f4gemm_dir
):
    asm = write(
        tmp_path, "sgpr", edited_first(base_asm, "\ts_mov_b32 s47, s2\n", "\ts_mov_b32 s100, s2\n")
    )
    result = try_edit(asm, f4gemm_dir, toolchain, device="emulator")
    assert not result.passed and result.runs == []
    assert "beyond its descriptor: s100" in result.verdict_line()
    assert "--fit-resources" in result.verdict_line()


def test_quick_cases_have_an_m_edge_and_a_split_for_splitk_kernels(f4gemm_dir):
    manifest = read_manifest(f4gemm_dir)
    small = quick_cases(manifest.get(KERNEL))
    assert small == [Case(33, 128, 1024, 0, KERNEL)]  # K=1024: every unrolled loop body runs
    big = quick_cases(manifest.get("f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"))
    assert [c.log2_k_split for c in big] == [0, 1] and all(c.m % 256 == 1 for c in big)


def test_try_cli_exit_codes_and_diff_file(tmp_path, base_asm, toolchain, f4gemm_dir, capsys):
    common = [
        "--co-dir",
        str(f4gemm_dir),
        "--device",
        "emulator",
        "--toolchain-bin",
        str(toolchain.bin_dir),
    ]
    good = write(tmp_path, "nop", KEEPS_SEMANTICS["nop"](base_asm))
    assert main(["try", str(good), *common]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("PASS nop.s")
    assert "s_nop 4" in (tmp_path / "nop.diff.txt").read_text()
    bad = write(tmp_path, "mfma", BREAKS["mfma-operands"](base_asm))
    assert (
        main(["try", str(bad), "--kernel", KERNEL, "--diff", str(tmp_path / "m.txt"), *common]) == 1
    )
    *_, verdict, step = capsys.readouterr().out.strip().splitlines()
    assert "first D[" in verdict and step.startswith("next:   f4pipe asmdiff ")
    assert main(["try", str(tmp_path / "missing.s"), *common]) == 2
    assert (
        main(["try", str(good), "--kernel", "f4gemm_bf16_per1x32Fp4_BpreShuffle_64x128", *common])
        == 2
    )


def test_try_reads_the_edited_and_the_original_code_object_once_each(
    tmp_path, base_asm, toolchain, f4gemm_dir, monkeypatch
):
    """One parsed image per file and command: the static checks, the predictor and the
    emulator's loader all take the CodeObject the first reader parsed (codeobj.images)."""
    import collections

    import f4pipe.codeobj.codeobject as codeobject

    reads: collections.Counter[str] = collections.Counter()
    read = codeobject.read_input_bytes

    def counted(path, *args, **kwargs):
        reads[Path(path).name] += 1
        return read(path, *args, **kwargs)

    monkeypatch.setattr(codeobject, "read_input_bytes", counted)
    edit = write(tmp_path, "nop", KEEPS_SEMANTICS["nop"](base_asm))
    argv = ["try", str(edit), "--co-dir", str(f4gemm_dir), "--device", "emulator"]
    assert main([*argv, "--toolchain-bin", str(toolchain.bin_dir)]) == 0
    assert reads == {"nop.co": 1, f"{KERNEL}.co": 1}


def test_the_static_line_reports_what_hazards_finds(
    tmp_path, base_asm, toolchain, f4gemm_dir, capsys
):
    """A main-loop s_waitcnt replaced by s_nop 0: `hazards` finds counter hazards on every path,
    and `try`'s static line says so instead of "static checks: ok"."""
    edit = write(
        tmp_path, "nowait", base_asm.replace("\ts_waitcnt vmcnt(12) lgkmcnt(5)\n", "\ts_nop 0\n", 1)
    )
    argv = ["try", str(edit), "--co-dir", str(f4gemm_dir), "--device", "emulator"]
    assert main([*argv, "--toolchain-bin", str(toolchain.bin_dir)]) == 1
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if line.startswith("static checks"))
    assert re.match(
        r"static checks: descriptor ok; timing over every path: \d+ finding\(s\)", out[at]
    )
    assert re.search(r"needs s_waitcnt (vmcnt|lgkmcnt)\(\d+\) or lower", out[at + 1])


def test_a_repeated_try_takes_the_originals_side_from_the_cache(
    tmp_path, base_asm, toolchain, f4gemm_dir, monkeypatch
):
    """The original's emulated output and static findings are kept between commands, keyed by
    its bytes, the request and f4pipe's source (f4pipe.edits.baseline): the second `try` reads
    them. Changing one kept value by one bit proves it: the edit then differs from it."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("F4PIPE_CACHE", str(cache))
    stale = cache / "try-baseline" / "0.0.0+src.another-checkout"
    stale.mkdir(parents=True)
    edit = write(tmp_path, "nop", KEEPS_SEMANTICS["nop"](base_asm))
    first = try_edit(edit, f4gemm_dir, toolchain, device="emulator")
    assert first.passed and all(r.identical for r in first.runs)
    outputs = sorted(cache.glob("try-baseline/*/output/*.npy"))
    assert len(outputs) == len(first.runs)
    assert len(list(cache.glob("try-baseline/*/findings/*.json"))) == 1
    assert not stale.exists(), "another f4pipe source's entries are never read: removed"

    kept = np.load(outputs[0])
    kept.flat[0] = np.nextafter(kept.flat[0], np.inf)
    np.save(outputs[0], kept)
    second = try_edit(edit, f4gemm_dir, toolchain, device="emulator")
    assert sorted(r.identical for r in second.runs) == [False, *[True] * (len(outputs) - 1)]
    assert second.static_hazards == first.static_hazards == []


def test_a_first_try_runs_the_original_in_a_forked_process_meanwhile(
    tmp_path, base_asm, toolchain, f4gemm_dir, monkeypatch
):
    """The first `try` on a kernel computes the original's outputs in a forked process while
    it checks the edit statically (f4pipe.edits.trykernel._baseline_ahead): this process then
    runs only the edit, and the bit-identity line compares with what the other one kept."""
    import f4pipe.edits.trykernel as trykernel

    monkeypatch.setenv("F4PIPE_CACHE", str(tmp_path / "cache"))
    ran: list[Path] = []
    real_run_gemm = trykernel.run_gemm

    def run_gemm(device, entry, co_path, request):
        ran.append(Path(co_path))
        return real_run_gemm(device, entry, co_path, request)

    monkeypatch.setattr(trykernel, "run_gemm", run_gemm)
    edit = write(tmp_path, "nop", KEEPS_SEMANTICS["nop"](base_asm))
    result = try_edit(edit, f4gemm_dir, toolchain, device="emulator")
    assert result.passed and all(r.identical for r in result.runs)
    original = result.prepared.original_co
    assert ran and original not in ran, "the original ran here, not in the forked process"
    assert len(ran) == len(result.runs)
