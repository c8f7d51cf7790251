"""Reuse by content (f4pipe.pipeline.resultstore) through the stage commands, on real code objects
and the emulator: a run is reused exactly when the kernel's bytes and manifest row, the run's
parameters, the device, the toolchain and f4pipe are the same, and a reused row says so.

The whole pipeline's reuse across two aiter ids (every round trip, verify, splitk and safety
row, the report) is tests/test_pipeline.py::test_byte_identical_aiter_update_reuses_every_verdict.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from f4pipe.aiter.manifest import MANIFEST_NAME, manifest_text, read_manifest
from f4pipe.aiter.shaperules import is_safe
from f4pipe.cli import main
from f4pipe.codeobj.assemble import assemble
from f4pipe.codeobj.co2asm import co2asm
from f4pipe.codeobj.program import executed_digest
from f4pipe.core.fsio import write_text
from f4pipe.core.schemas import ADDED_COLUMNS, VERIFY, read_table
from f4pipe.fetch import extract_wheel_file

KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
SHAPE = "32,256,512"


def copy_kernel(f4gemm_dir: Path, dest: Path) -> Path:
    """A local f4gemm directory holding KERNEL (a byte-identical copy) and its manifest."""
    entry = read_manifest(f4gemm_dir).get(KERNEL)
    dest.mkdir(parents=True)
    shutil.copy(f4gemm_dir / entry.co_name, dest / entry.co_name)
    write_text(dest / MANIFEST_NAME, manifest_text([entry]))
    return dest


def verify(co_dir: Path, store: Path, out: Path, aiter_id: str, *extra: str) -> pd.DataFrame:
    argv = ["verify", "--co-dir", str(co_dir), "--kernel", KERNEL, "--shape", SHAPE]
    argv += ["--device", "emulator", "--aiter-id", aiter_id, "--toolchain-id", "llvm-test"]
    assert main([*argv, "--store", str(store), "-o", str(out), *extra]) == 0
    return pd.read_parquet(out)


@pytest.fixture(scope="module")
def first_run(f4gemm_dir: Path, tmp_path_factory) -> tuple[Path, Path, pd.DataFrame]:
    """KERNEL verified once in result set "aiter-a": (its directory, the store, its rows)."""
    work = tmp_path_factory.mktemp("reuse")
    co_dir = copy_kernel(f4gemm_dir, work / "a")
    store = work / "store"
    return co_dir, store, verify(co_dir, store, work / "a.parquet", "aiter-a")


def test_a_fresh_run_is_stored_and_marked_as_run_here(first_run) -> None:
    _, store, rows = first_run
    (row,) = rows.itertuples()
    assert row.status == "passed" and row.aiter_id == "aiter-a"
    assert pd.isna(row.reused_from) and len(row.reuse_key) == 64
    (entry,) = store.glob(f"verify/*/{row.reuse_key}.json")
    stored = json.loads(entry.read_text())
    assert stored["inputs"]["kernel"]["co_name"] == f"{KERNEL}.co"
    assert stored["inputs"]["request"]["m"] == 32 and stored["rows"][0]["aiter_id"] == "aiter-a"
    # the decoded program's digest is kept too, so a job that only reuses decodes nothing
    (program,) = store.glob("program/*/*.json")
    digest = json.loads(program.read_text())["rows"][0]["emulated_program"]
    co_dir = first_run[0]
    assert digest == executed_digest(
        co_dir / f"{KERNEL}.co", read_manifest(co_dir).get(KERNEL).symbol
    )
    assert stored["inputs"]["kernel"]["emulated_program"] == digest


def test_byte_identical_kernel_of_another_result_set_is_reused(
    first_run, f4gemm_dir: Path, tmp_path: Path, capsys
) -> None:
    _, store, first = first_run
    co_dir = copy_kernel(f4gemm_dir, tmp_path / "b")
    capsys.readouterr()
    second = verify(co_dir, store, tmp_path / "b.parquet", "aiter-b", "--variant", "rebuilt")
    assert "1 of 1 row(s) reused from the result store" in capsys.readouterr().out
    # the run was the original variant's: reused_from names it
    assert list(second.reused_from) == ["aiter-a/original"]
    assert list(second.aiter_id) == ["aiter-b"]
    assert list(second.variant) == ["rebuilt"]  # the context is this run's, the facts stored
    facts = [c for c in first.columns if c not in ("aiter_id", "variant", "reused_from")]
    pd.testing.assert_frame_equal(first[facts], second[facts])


def test_no_reuse_when_the_kernel_bytes_change(
    first_run, f4gemm_dir: Path, toolchain, tmp_path: Path
) -> None:
    """A hand edit (one s_nop after the entry label) reassembled in place, in the same process
    that just reused the original: same name and path, other bytes."""
    _, store, first = first_run
    co_dir = copy_kernel(f4gemm_dir, tmp_path / "edited")
    assert list(verify(co_dir, store, tmp_path / "same.parquet", "aiter-e").reused_from) == [
        "aiter-a"
    ]
    entry = read_manifest(co_dir).get(KERNEL)
    asm = co2asm(co_dir / entry.co_name, toolchain)
    edited = asm.replace(f"{entry.symbol}:\n", f"{entry.symbol}:\n\ts_nop 0\n", 1)
    assert edited != asm
    write_text(tmp_path / "edited.s", edited)
    assemble(tmp_path / "edited.s", co_dir / entry.co_name, toolchain)
    rows = verify(co_dir, store, tmp_path / "edited.parquet", "aiter-a")
    assert rows.reused_from.isna().all() and list(rows.status) == ["passed"]
    assert rows.reuse_key[0] != first.reuse_key[0]


def test_a_rebuilt_kernel_takes_the_originals_emulated_row(
    first_run, f4gemm_dir: Path, toolchain, tmp_path: Path
) -> None:
    """co2asm + reassembly gives other bytes (ELF layout, encoding bits no decoder reads) but the
    same loaded and decoded program: on the emulator that is the same run, bit for bit, so the
    rebuilt variant's row is the original's, marked as such. A GPU runs the bytes: there the
    two are different kernels to the store."""
    from f4pipe.pipeline.resultstore import kernel_identity

    _, store, first = first_run
    co_dir = copy_kernel(f4gemm_dir, tmp_path / "rebuilt")
    entry = read_manifest(co_dir).get(KERNEL)
    rebuilt = co_dir / entry.co_name
    write_text(tmp_path / "k.s", co2asm(rebuilt, toolchain))
    assemble(tmp_path / "k.s", rebuilt, toolchain)
    assert rebuilt.read_bytes() != (f4gemm_dir / entry.co_name).read_bytes()
    rows = verify(co_dir, store, tmp_path / "r.parquet", "aiter-a", "--variant", "rebuilt")
    assert list(rows.reused_from) == ["aiter-a/original"] and list(rows.variant) == ["rebuilt"]
    assert rows.reuse_key[0] == first.reuse_key[0]
    original = f4gemm_dir / entry.co_name
    assert kernel_identity(entry, rebuilt, "emulator") == kernel_identity(
        entry, original, "emulator"
    )
    assert kernel_identity(entry, rebuilt, "gfx950:0") != kernel_identity(
        entry, original, "gfx950:0"
    )


@pytest.mark.parametrize(
    "extra",
    [("--seed", "99"), ("--toolchain-id", "llvm-other")],
    ids=["seed", "toolchain"],
)
def test_no_reuse_when_a_parameter_changes(first_run, tmp_path: Path, extra) -> None:
    co_dir, store, first = first_run
    rows = verify(co_dir, store, tmp_path / "x.parquet", "aiter-a", *extra)
    assert rows.reused_from.isna().all() and rows.reuse_key[0] != first.reuse_key[0]


def test_no_reuse_under_another_atomic_rounding(first_run, tmp_path: Path, monkeypatch) -> None:
    """A run under F4PIPE_BF16_ATOMIC_ROUNDING=rtz is another result (its splitK rows differ)."""
    monkeypatch.setenv("F4PIPE_BF16_ATOMIC_ROUNDING", "rtz")
    co_dir, store, first = first_run
    rows = verify(co_dir, store, tmp_path / "x.parquet", "aiter-a")
    assert rows.reused_from.isna().all() and rows.reuse_key[0] != first.reuse_key[0]


def test_reuse_is_per_run(first_run, tmp_path: Path) -> None:
    """A shape added to the cases runs; the unchanged run beside it is reused."""
    co_dir, store, first = first_run
    rows = verify(co_dir, store, tmp_path / "x.parquet", "aiter-a", "--shape", "64,256,512")
    assert list(rows.m) == [32, 64] and list(rows.reused_from.fillna("")) == ["aiter-a", ""]
    assert rows.reuse_key[0] == first.reuse_key[0] != rows.reuse_key[1]


def test_an_unreadable_store_entry_is_a_miss_that_is_rewritten(
    first_run, f4gemm_dir: Path, tmp_path: Path, capsys
) -> None:
    co_dir = copy_kernel(f4gemm_dir, tmp_path / "c")
    store = tmp_path / "store"
    key = verify(co_dir, store, tmp_path / "1.parquet", "aiter-c").reuse_key[0]
    (entry,) = store.glob(f"verify/*/{key}.json")
    entry.write_text('{"inputs": ')
    capsys.readouterr()
    rows = verify(co_dir, store, tmp_path / "2.parquet", "aiter-c")
    assert f"result store entry {entry} ignored" in capsys.readouterr().err
    assert rows.reused_from.isna().all()
    assert json.loads(entry.read_text())["rows"][0]["status"] == "passed"


def test_bench_has_no_store(capsys) -> None:
    """A throughput number is a measurement: bench never reuses."""
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--store", "x"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --store" in capsys.readouterr().err


def test_tables_written_before_reuse_read_with_null_reuse_columns(first_run, tmp_path) -> None:
    _, _, rows = first_run
    old = tmp_path / "old.parquet"
    pq.write_table(pq.read_table(first_run[0].parent / "a.parquet").drop_columns(
        ["reused_from", "reuse_key"]), old)  # fmt: skip
    table = read_table(old, VERIFY, ADDED_COLUMNS["verify"])
    assert table.schema.equals(VERIFY) and table.column("reuse_key").null_count == len(rows)


def test_audit_emulations_are_reused_and_the_rows_stay_the_tables(
    f4gemm_dir: Path, tmp_path: Path
) -> None:
    """The tuned-table audit stores only its emulation: the second result set reuses it, and
    its row still names its own directory in the reproducer."""
    from conftest import DEFAULT_SOURCE

    table = pd.read_csv(extract_wheel_file(DEFAULT_SOURCE, tmp_path / "tuned.csv"))
    manifest = read_manifest(f4gemm_dir)
    bad = next(
        i
        for i, r in table.iterrows()
        if str(r["kernelName"]).startswith("_ZN")
        and not is_safe(manifest.get(r["kernelName"]), r["M"], r["N"], r["K"])
    )
    small = tmp_path / "one-unsafe-row.csv"
    table.loc[[bad]].to_csv(small, index=False)
    entry = manifest.get(table.loc[bad, "kernelName"])
    store, rows = tmp_path / "store", {}
    for name in ("a", "b"):
        co_dir = tmp_path / name
        co_dir.mkdir()
        shutil.copy(f4gemm_dir / entry.co_name, co_dir / entry.co_name)
        write_text(co_dir / MANIFEST_NAME, manifest_text([entry]))
        out = tmp_path / f"{name}.parquet"
        argv = ["audit-tuned", str(small), "--co-dir", str(co_dir), "--aiter-id", name]
        assert (
            main([*argv, "--toolchain-id", "t", "--store", str(store), "--record", "-o", str(out)])
            == 0
        )
        (rows[name],) = pd.read_parquet(out).itertuples()
    a, b = rows["a"], rows["b"]
    assert a.status == b.status == "unsafe" and a.emulated in ("wrong", "race", "fault")
    assert pd.isna(a.reused_from) and b.reused_from == "a" and a.reuse_key == b.reuse_key
    assert (a.emulated, a.emu_detail, a.emu_orders, a.finding) == (
        b.emulated, b.emu_detail, b.emu_orders, b.finding,
    )  # fmt: skip
    assert str(tmp_path / "b") in b.reproducer and str(tmp_path / "a") not in b.reproducer


def roundtrip(co_dir: Path, store: Path, out: Path, aiter_id: str) -> pd.DataFrame:
    """`f4pipe roundtrip --co-dir` (the pipeline's job) into `out`/ and `out`.parquet."""
    argv = ["roundtrip", "--co-dir", str(co_dir), "--out", str(out), "--aiter-id", aiter_id]
    assert main([*argv, "--store", str(store), "--row", f"{out}.parquet"]) == 0
    return pd.read_parquet(f"{out}.parquet")


def test_a_round_trip_of_the_same_bytes_is_reused_with_its_files(
    f4gemm_dir: Path, tmp_path: Path, toolchain, capsys
) -> None:
    """The round trip is a function of the code object's bytes, the toolchain and f4pipe: a
    byte-identical copy in another result set takes the row and gets the same .s, rebuilt .co
    and verdict (its header naming this run's files); changed bytes run again; an entry whose
    files are gone is a miss, run and stored again."""
    store = tmp_path / "store"
    first = roundtrip(copy_kernel(f4gemm_dir, tmp_path / "a"), store, tmp_path / "rt-a", "aiter-a")
    assert first.reused_from.isna().all() and first.reuse_key.notna().all()
    copy = copy_kernel(f4gemm_dir, tmp_path / "b")
    again = roundtrip(copy, store, tmp_path / "rt-b", "aiter-b")
    assert list(again.reused_from) == ["aiter-a"] and list(again.aiter_id) == ["aiter-b"]
    facts = [c for c in first.columns if c not in ("aiter_id", "reused_from")]
    pd.testing.assert_frame_equal(first[facts], again[facts])
    for suffix in (".s", ".co"):
        assert (tmp_path / "rt-b" / f"{KERNEL}{suffix}").read_bytes() == (
            tmp_path / "rt-a" / f"{KERNEL}{suffix}"
        ).read_bytes()
    diff = (tmp_path / "rt-b" / f"{KERNEL}.diff.txt").read_text()
    assert f"original: {copy / f'{KERNEL}.co'}\n" in diff and "verdict: EQUIVALENT" in diff
    assert (
        diff.replace("rt-b", "rt-a").replace(str(copy), str(tmp_path / "a"))
        == (tmp_path / "rt-a" / f"{KERNEL}.diff.txt").read_text()
    )

    (stored,) = store.glob(f"roundtrip/*/{first.reuse_key[0]}.files")
    (stored / "rebuilt.co").unlink()
    capsys.readouterr()
    rerun = roundtrip(copy, store, tmp_path / "rt-c", "aiter-b")
    assert "its files rebuilt.co are missing" in capsys.readouterr().err
    assert rerun.reused_from.isna().all() and (stored / "rebuilt.co").is_file()

    co = copy / f"{KERNEL}.co"
    write_text(tmp_path / "k.s", co2asm(co, toolchain))
    assemble(tmp_path / "k.s", co, toolchain)  # other bytes, the same program
    changed = roundtrip(copy, store, tmp_path / "rt-d", "aiter-b")
    assert changed.reused_from.isna().all() and changed.reuse_key[0] != first.reuse_key[0]
