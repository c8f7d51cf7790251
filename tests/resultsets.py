"""Real result sets for the report, archive and compare tests, built by the pipeline's functions.

Nothing here writes a result row by hand: kernels.parquet comes from `f4pipe kernels`, round-trip
rows from f4pipe.pipeline.roundtrip on real aiter code objects, verify/splitk rows from the stage
functions on the gfx950 emulator (small shapes), bench rows from the bench stage (the emulator
cannot time, so they are "skipped" rows, as on any machine without a gfx950 GPU).

Set "A" is two kernels of the pinned aiter wheel. Set "B" is a local aiter copy in which one
kernel was disassembled, edited (one instruction: the operands of a bf16 pack swapped, so the
output is really wrong) and reassembled, the way an aiter update could change one kernel.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from hostmodel import TimingModelDevice

from f4pipe.aiter.manifest import MANIFEST_NAME, manifest_text, read_manifest
from f4pipe.cli import main as cli_main
from f4pipe.codeobj.assemble import assemble
from f4pipe.codeobj.co2asm import co2asm
from f4pipe.codeobj.toolchain import Toolchain, write_toolchain_json
from f4pipe.core.fsio import write_text
from f4pipe.core.schemas import BENCH, ROUNDTRIP, SPLITK, VERIFY, ArtifactKeys, write_rows
from f4pipe.devices.opendevice import open_device
from f4pipe.host.matrices import Case
from f4pipe.pipeline.roundtrip import roundtrip
from f4pipe.pipeline.stages import StageSettings, bench_stage, splitk_stage, verify_stage

EDITED = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x128"  # runs the small shapes below
SPLITK_KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"
KERNELS = (EDITED, SPLITK_KERNEL)
EDIT_FROM = "v_cvt_pk_bf16_f32 v16, v8, v9\n"
EDIT_TO = "v_cvt_pk_bf16_f32 v16, v9, v8\n"
VERIFY_CASES = tuple(Case(32, 256, 512, kernel=k) for k in KERNELS)
SPLITK_CASES = tuple(Case(32, 256, 1024, log2, SPLITK_KERNEL) for log2 in range(3))
BENCH_CASES = (Case(32, 256, 512, kernel=EDITED),)


def subset_aiter(f4gemm_dir: Path, out: Path) -> Path:
    """A local aiter f4gemm directory holding KERNELS only (with its own manifest)."""
    manifest = read_manifest(f4gemm_dir)
    entries = [manifest.get(k) for k in KERNELS]
    out.mkdir(parents=True)
    for e in entries:
        shutil.copy2(manifest.co_path(e), out / e.co_name)
    write_text(out / MANIFEST_NAME, manifest_text(entries))
    return out


def edit_kernel(aiter_dir: Path, toolchain: Toolchain, work: Path) -> None:
    """Replace EDITED by a reassembled copy with one instruction changed."""
    co = aiter_dir / f"{EDITED}.co"
    asm = co2asm(co, toolchain)
    assert EDIT_FROM in asm
    asm_path = work / f"{EDITED}.edited.s"
    write_text(asm_path, asm.replace(EDIT_FROM, EDIT_TO, 1))
    assemble(asm_path, co, toolchain)


def gemm_rows(stage, device, variants: dict[str, Path], cases, keys: ArtifactKeys) -> list[dict]:
    """One stage's rows for each variant (original, rebuilt) of the kernels."""
    rows = []
    for variant, directory in variants.items():
        settings = StageSettings(keys=keys, variant=variant, iters=2)
        rows += stage(device, read_manifest(directory), cases, settings)
    return rows


def build_result_set(
    aiter_dir: Path, results: Path, aiter_id: str, toolchain: Toolchain, bench_device=None
) -> Path:
    """results/<aiter_id>/ as the workflow lays it out, from the real stages."""
    out = results / aiter_id
    write_toolchain_json(toolchain, out / "toolchain.json")
    argv = ["kernels", "--co-dir", str(aiter_dir), "--aiter-id", aiter_id]
    argv += ["--toolchain-json", str(out / "toolchain.json"), "-o", str(out / "kernels.parquet")]
    assert cli_main(argv) == 0
    keys = ArtifactKeys(aiter_id, toolchain.toolchain_id, "none")
    manifest = read_manifest(aiter_dir)
    rt = [roundtrip(manifest.co_path(e), out / "roundtrip", toolchain) for e in manifest]
    write_rows(out / "roundtrip.parquet", [r.row(keys) for r in rt], ROUNDTRIP)
    rebuilt = out / "rebuilt"
    rebuilt.mkdir()
    for e in manifest:
        shutil.copy2(out / "roundtrip" / e.co_name, rebuilt / e.co_name)
    write_text(rebuilt / MANIFEST_NAME, manifest_text(manifest.entries))
    variants = {"original": aiter_dir, "rebuilt": rebuilt}
    emulator = open_device("emulator")
    stages = (
        ("verify", verify_stage, emulator, VERIFY_CASES, VERIFY),
        ("splitk", splitk_stage, emulator, SPLITK_CASES, SPLITK),
        ("bench", bench_stage, bench_device or emulator, BENCH_CASES, BENCH),
    )
    for name, stage, device, cases, schema in stages:
        write_rows(out / f"{name}.parquet", gemm_rows(stage, device, variants, cases, keys), schema)
    return out


_BUILT: dict[str, Path] = {}


def get_result_sets(f4gemm_dir: Path, toolchain: Toolchain, tmp_path_factory) -> dict[str, Path]:
    """{"A": wheel subset, "B": edited local copy, "timed": A with timed bench rows}, built once
    per test session (each test module's `result_sets` fixture calls this)."""
    if _BUILT:
        return _BUILT
    root = tmp_path_factory.mktemp("resultsets")
    aiter_a = subset_aiter(f4gemm_dir, root / "aiter-a" / "f4gemm")
    aiter_b = subset_aiter(f4gemm_dir, root / "aiter-b" / "f4gemm")
    edit_kernel(aiter_b, toolchain, root)
    results = root / "results"
    _BUILT["A"] = build_result_set(aiter_a, results, "wheel-subset", toolchain)
    _BUILT["B"] = build_result_set(aiter_b, results, "local-edited", toolchain)
    # bench on a device that times (the host model, wall clock): the measured-rows path.
    _BUILT["timed"] = build_result_set(
        aiter_a, results, "wheel-subset-timed", toolchain, TimingModelDevice()
    )
    return dict(_BUILT)
