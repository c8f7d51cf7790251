"""Shape-edge safety: the rules (f4pipe.aiter.shaperules) against the emulator, the static evidence,
the heuristic and `f4pipe gemm` refusing unsafe pairs, the padded remedy, and the audit of
aiter's tuned table. The full 35-kernel sweep runs in the pipeline (`safety` rule); here a
kernel of each store class runs the same sweep."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pytest

from f4pipe.aiter.heuristic import select_kernel
from f4pipe.aiter.shaperules import (
    EDGE_CLASSES,
    STORE_CHUNK32,
    STORE_FULL_TILE,
    STORE_UNBOUNDED,
    edge_rule,
    is_safe,
)
from f4pipe.aiter.tuned import read_tuned
from f4pipe.cli import EXIT_ERROR, EXIT_FAILED, EXIT_OK, main
from f4pipe.core.errors import ShapeError
from f4pipe.core.schemas import AUDIT, SAFETY, ArtifactKeys, table_from_rows
from f4pipe.emu import EmulatorDevice, SharedRuns
from f4pipe.fetch import extract_wheel_file
from f4pipe.host.gemm import GemmRequest, run_gemm
from f4pipe.pipeline.audit import audit_tuned
from f4pipe.pipeline.edgesweep import edge_shapes, static_store_class, store_evidence, sweep
from f4pipe.report.render import FOLD_ROWS, kernel_order

PREFIX = "f4gemm_bf16_per1x32Fp4_"
KEYS = ArtifactKeys("test-aiter", "test-toolchain", "emulator")
#: One kernel of each store class (the pipeline sweeps all 35).
SUBSET = ("BpreShuffle_32x128", "BpreShuffle_256x256", "noBpreShuffle_256x256")


@pytest.fixture(scope="module")
def subset_rows(manifest):
    return sweep(manifest, KEYS, kernels=[PREFIX + k for k in SUBSET])


def test_static_evidence_implies_the_rule_of_every_kernel(manifest) -> None:
    classes = {}
    for entry in manifest:
        evidence = store_evidence(manifest.co_path(entry), entry.symbol)
        assert evidence.stores > 0
        assert static_store_class(evidence) == edge_rule(entry).store, entry.name
        classes[edge_rule(entry).store] = classes.get(edge_rule(entry).store, 0) + 1
    assert classes == {STORE_CHUNK32: 30, STORE_FULL_TILE: 4, STORE_UNBOUNDED: 1}


def test_sweep_agrees_with_the_rules_for_each_store_class(subset_rows) -> None:
    table_from_rows(subset_rows, SAFETY)  # the rows fit the schema
    assert all(r["agrees"] for r in subset_rows), [r for r in subset_rows if not r["agrees"]]
    assert {r["edge_class"] for r in subset_rows} == set(EDGE_CLASSES)
    assert all(len(r["orders"].split(",")) >= 2 for r in subset_rows)
    # the padded remedy is proven by the same sweep for every unsafe shape
    pads = [r for r in subset_rows if r["policy"] == "pad"]
    assert pads and all(r["verdict"] == "safe" for r in pads)


def _cells(rows, kernel: str, edge: str) -> set[str]:
    return {
        r["verdict"]
        for r in rows
        if r["kernel"] == PREFIX + kernel and r["edge_class"] == edge and r["policy"] == "unsafe"
    }


def test_sweep_finds_what_the_disassembly_predicts(subset_rows) -> None:
    rows = subset_rows
    assert _cells(rows, "BpreShuffle_32x128", "n%32=16") == {"wrong"}
    assert _cells(rows, "BpreShuffle_32x128", "n%tile_n") == {"safe"}
    assert _cells(rows, "BpreShuffle_256x256", "n%tile_n") == {"wrong"}
    assert _cells(rows, "BpreShuffle_256x256", "m%tile_m") == {"safe"}
    assert _cells(rows, "noBpreShuffle_256x256", "m%tile_m") == {"fault"}
    assert _cells(rows, "noBpreShuffle_256x256", "k=256") == {"fault"}
    # the store edges are wrong through races; a K tail is wrong without one (its padding)
    wrong = [r for r in rows if r["verdict"] == "wrong" and not r["edge_class"].startswith("k%")]
    assert all(r["races"] > 0 and r["first_bad_row"] is not None for r in wrong)
    tails = [r for r in rows if r["edge_class"].startswith("k%") and r["policy"] == "unsafe"]
    assert all(r["races"] == 0 for r in tails if r["kernel"] != PREFIX + "noBpreShuffle_256x256")
    assert {r["scale_pad"] for r in tails if r["verdict"] == "wrong"} == {"driver", "arbitrary"}
    # the order matters somewhere: hardware may give either answer
    assert any(r["order_dependent"] for r in wrong)


def test_each_unsafe_cell_has_a_reproducer_that_fails(subset_rows, f4gemm_dir, monkeypatch):
    monkeypatch.setenv("AITER_ASM_DIR", str(f4gemm_dir))
    done = set()
    for r in subset_rows:
        cell = (r["kernel"], r["edge_class"])
        if r["verdict"] == "safe" or r["policy"] != "unsafe" or cell in done:
            continue
        done.add(cell)
        argv = shlex.split(r["reproducer"].replace("$AITER_ASM_DIR", str(f4gemm_dir)))[1:]
        want = EXIT_ERROR if r["verdict"] == "fault" else EXIT_FAILED
        assert main(argv) == want, r["reproducer"]
    assert len(done) >= 4


def test_edge_shapes_cover_every_class_and_stay_small(manifest) -> None:
    for entry in manifest:
        shapes = edge_shapes(entry)
        assert {s.edge_class for s in shapes} == set(EDGE_CLASSES)
        assert all(s.m <= 2 * entry.tile_m + 33 and s.n <= 2 * entry.tile_n for s in shapes)
        n_edges = [s.n % entry.tile_n for s in shapes if s.edge_class.startswith("n")]
        assert 16 in n_edges and entry.tile_n - 16 in n_edges


# --- the heuristic and the CLI ------------------------------------------------------------


@pytest.mark.parametrize("bpreshuffle", [True, False])
def test_heuristic_never_picks_an_unsafe_kernel(manifest, bpreshuffle) -> None:
    rng = np.random.default_rng(7)
    picked = 0
    for i in range(300):
        # every other shape aligned to 256, so that the noBpreShuffle tile qualifies too
        unit = (1, 16, 256) if i % 2 else (256, 256, 256)
        m = unit[0] * int(rng.integers(1, 5000 // unit[0] + 1))
        n = unit[1] * int(rng.integers(1, 9600 // unit[1] + 1))
        k = unit[2] * int(rng.integers(1, 9))
        try:
            choice = select_kernel(manifest, m, n, k=k, bpreshuffle=bpreshuffle)
        except ShapeError as exc:
            assert "unsafe at this shape" in str(exc)
            continue
        assert is_safe(choice.entry, m, n, k), (choice.entry.name, m, n, k)
        picked += 1
    assert picked > 30


def test_heuristic_refusal_names_the_rules_and_the_override(manifest) -> None:
    with pytest.raises(ShapeError, match=r"noBpreShuffle_256x256 \(M=300 is not a multiple"):
        select_kernel(manifest, 300, 512, k=512, bpreshuffle=False)
    choice = select_kernel(manifest, 300, 512, k=512, bpreshuffle=False, allow_unsafe=True)
    assert not choice.entry.bpreshuffle
    # N % 32 == 16 leaves no BpreShuffle kernel either
    with pytest.raises(ShapeError, match="--pad-output"):
        select_kernel(manifest, 64, 144, k=512)


def test_gemm_cli_refuses_pads_or_runs_unsafe(f4gemm_dir, monkeypatch, capsys) -> None:
    monkeypatch.setenv("AITER_ASM_DIR", str(f4gemm_dir))
    base = ["gemm", "--device", "emulator", "--kernel", PREFIX + "BpreShuffle_256x256"]
    shape = ["-m", "64", "-n", "288", "-k", "256", "--iters", "0"]
    assert main(base + shape) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "N=288 is not a multiple of 256" in err and "no N guard" in err
    assert "f4pipe gemm --device emulator" in err and "--pad-output" in err
    assert main(base + shape + ["--pad-output"]) == EXIT_OK
    assert "padded output: N padded 288 -> 512" in capsys.readouterr().out
    assert main(base + shape + ["--unsafe", "--workgroup-order", "reversed"]) == EXIT_FAILED
    assert "dword(s) written by several workgroups" in capsys.readouterr().out


def test_gemm_cli_traces_one_wave(f4gemm_dir, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AITER_ASM_DIR", str(f4gemm_dir))
    out = tmp_path / "wave1.trace"
    argv = ["gemm", "--device", "emulator", "-m", "32", "-n", "256", "-k", "256"]
    argv += ["--iters", "0", "--trace", "1", "--trace-out", str(out)]
    assert main(argv) == EXIT_OK
    lines = out.read_text().splitlines()
    assert lines[-1].endswith("s_endpgm") and len(lines) > 100


def test_workgroup_order_changes_a_racy_result_but_not_a_safe_one(manifest) -> None:
    entry = manifest.get(PREFIX + "BpreShuffle_256x256")
    results = {}
    for order in ("in-order", "reversed", "shuffle:1"):
        device = EmulatorDevice(workgroup_order=order, max_waves_per_batch=4)
        for n in (288, 512):
            request = GemmRequest(64, n, 256, edge_policy="unsafe", keep_padded_d=True)
            results[order, n] = run_gemm(device, entry, manifest.co_path(entry), request)
    assert not np.array_equal(
        results["in-order", 288].d_padded_bits, results["reversed", 288].d_padded_bits
    )
    assert all(results[o, 288].races > 0 for o in ("in-order", "reversed", "shuffle:1"))
    safe = [results[o, 512] for o in ("in-order", "reversed", "shuffle:1")]
    assert all(r.races == 0 and r.verification.passed for r in safe)
    assert np.array_equal(safe[0].d_padded_bits, safe[1].d_padded_bits)


def _launch_outcome(device: EmulatorDevice, entry, co_path, request: GemmRequest) -> tuple:
    """Everything a launch leaves behind that a result row can read, and its LaunchStats."""
    r = run_gemm(device, entry, co_path, request)
    stats = r.launch
    report = stats.hazards
    assert report is not None
    return (
        r.d_padded_bits.tobytes() if r.d_padded_bits is not None else r.d.tobytes(),
        r.races,
        r.race_summary,
        [(h.message, where) for h, where in zip(report.hazards, report.where, strict=True)],
        [(h.message, w) for h, w in zip(report.advisory, report.advisory_where, strict=True)],
        (report.count, report.advisories),
        stats.wave_instructions,
    ), stats


def test_isolated_workgroups_in_lockstep_equal_one_at_a_time(manifest) -> None:
    """isolate_workgroups batches a launch's workgroups and replays their stores in order, and
    SharedRuns lets the second order replay the first's run: the same D bits, races, race
    report and hazard report (every entry and where it first hit) as one workgroup per batch,
    for a racy shape, a safe one and a splitK launch (atomics: run one at a time), and for a
    kernel whose every workgroup reports LDS advisories."""
    entry = manifest.get(PREFIX + "BpreShuffle_256x256")
    co = manifest.co_path(entry)
    racy = GemmRequest(64, 288, 256, edge_policy="unsafe", keep_padded_d=True)
    safe = GemmRequest(64, 512, 256, edge_policy="unsafe", keep_padded_d=True)
    splitk = GemmRequest(256, 512, 1024, log2_k_split=1)
    advisory = manifest.get(PREFIX + "BpreShuffle_224x256")
    advised = GemmRequest(241, 512, 512, edge_policy="unsafe", keep_padded_d=True)
    shared = SharedRuns()
    racy_d = {}
    for order in ("in-order", "reversed"):
        alone = EmulatorDevice(workgroup_order=order, max_waves_per_batch=4)
        batched = EmulatorDevice(workgroup_order=order, isolate_workgroups=True, shared_runs=shared)
        want, alone_stats = _launch_outcome(alone, advisory, manifest.co_path(advisory), advised)
        assert want[4] and alone_stats.workgroups == 4  # advisories from every workgroup
        got, stats = _launch_outcome(batched, advisory, manifest.co_path(advisory), advised)
        assert got == want and stats.isolated_in_lockstep == 4
        for request in (racy, safe, splitk):
            want, _ = _launch_outcome(alone, entry, co, request)
            got, stats = _launch_outcome(batched, entry, co, request)
            assert got == want, (order, request)
            lockstep = stats.isolated_in_lockstep
            assert lockstep == (0 if request is splitk else stats.workgroups), (order, request)
            if order == "reversed" and request is not splitk:
                assert stats.steps == 0  # replayed from the in-order run
            if request is racy:
                assert want[1] > 0
                racy_d[order] = want[0]
    assert racy_d["in-order"] != racy_d["reversed"]  # the order matters, and was kept


# --- the tuned-config audit -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tuned_csv(tmp_path_factory) -> Path:
    from conftest import DEFAULT_SOURCE

    return extract_wheel_file(DEFAULT_SOURCE, tmp_path_factory.mktemp("tuned") / "tuned.csv")


def test_audit_of_aiters_tuned_table_flags_exactly_the_rule_breakers(manifest, tuned_csv):
    rows = audit_tuned(tuned_csv, manifest, KEYS, emulate=False)
    table_from_rows(rows, AUDIT)
    df = read_tuned(tuned_csv)
    assert len(rows) == int(df["kernelName"].str.startswith("_ZN").sum()) > 0
    by_symbol = {e.symbol: e for e in manifest}
    for r in rows:
        entry = by_symbol[r["symbol"]]
        assert (r["status"] == "unsafe") == (not is_safe(entry, r["m"], r["n"], r["k"]))
    assert any(r["status"] == "unsafe" for r in rows)


def test_audit_emulates_unsafe_rows_with_a_failing_reproducer(manifest, tuned_csv, tmp_path):
    df = read_tuned(tuned_csv)
    asm = df[df["kernelName"].str.startswith("_ZN")]
    by_symbol = {e.symbol: e for e in manifest}
    bad = asm[[not is_safe(by_symbol[s], m, n, k) for s, m, n, k in
               zip(asm["kernelName"], asm["M"], asm["N"], asm["K"], strict=True)]]  # fmt: skip
    small = tmp_path / "few.csv"
    pd_rows = df.loc[[asm.index[0], bad.index[0]]].drop(columns=["line"])
    pd_rows.to_csv(small, index=False)
    rows = audit_tuned(small, manifest, KEYS, co_dir_hint=str(manifest.directory))
    unsafe = [r for r in rows if r["status"] == "unsafe"]
    assert len(unsafe) == 1 and unsafe[0]["emulated"] in ("wrong", "race", "fault")
    assert unsafe[0]["emu_n"] == unsafe[0]["n"]
    assert main(shlex.split(unsafe[0]["reproducer"])[1:]) in (EXIT_FAILED, EXIT_ERROR)
    out = tmp_path / "audit.parquet"
    argv = ["audit-tuned", str(small), "--co-dir", str(manifest.directory), "--aiter-id", "a"]
    assert main([*argv, "--toolchain-id", "t", "--no-emulate", "-o", str(out)]) == EXIT_FAILED
    assert out.is_file()


def test_audit_reads_every_header_variant_and_skips_other_archs(manifest, tuned_csv, tmp_path):
    """aiter's newer tables have a `gfx` first column; column names are matched whatever their
    case. Rows for another arch are kept as `other-arch` (counted), not checked."""
    df = read_tuned(tuned_csv).drop(columns=["line"])
    newer = df.copy()
    newer.insert(0, "gfx", "gfx950")
    newer.loc[newer.index[:3], "gfx"] = "gfx942"
    newer = newer.rename(columns={"kernelName": "KernelName", "splitK": "splitk"})
    path = tmp_path / "newer.csv"
    newer.to_csv(path, index=False)
    old_rows = audit_tuned(tuned_csv, manifest, KEYS, emulate=False)
    rows = audit_tuned(path, manifest, KEYS, emulate=False, name="model_configs/x.csv")
    table_from_rows(rows, AUDIT)
    assert len(rows) == len(old_rows) and {r["csv"] for r in rows} == {"model_configs/x.csv"}
    other = [r for r in rows if r["status"] == "other-arch"]
    asm_in_first_three = int(df.loc[df.index[:3], "kernelName"].str.startswith("_ZN").sum())
    assert len(other) == asm_in_first_three and all(r["gfx"] == "gfx942" for r in other)
    by_line = {r["line"]: r for r in old_rows}
    for r in rows:
        if r["status"] != "other-arch":
            assert r["status"] == by_line[r["line"]]["status"] and r["gfx"] == "gfx950"
    assert all(r["gfx"] == "" for r in old_rows)  # the wheel's table has no gfx column
    # aiter's own record travels with every row
    first = df.iloc[int(rows[-1]["line"]) - 2]
    assert rows[-1]["aiter_us"] == first["us"] and rows[-1]["aiter_err_ratio"] == first["errRatio"]


def test_an_audit_table_from_before_the_new_columns_still_reads(manifest, tuned_csv, tmp_path):
    """An archived audit.parquet without the columns added later reads with nulls there."""
    import pyarrow.parquet as pq

    from f4pipe.core.errors import InputError
    from f4pipe.core.schemas import ADDED_COLUMNS, read_table, write_rows

    rows = audit_tuned(tuned_csv, manifest, KEYS, emulate=False)[:5]
    path = tmp_path / "audit.parquet"
    write_rows(path, rows, AUDIT)
    older = pq.read_table(path).drop_columns(list(ADDED_COLUMNS["audit"]))
    pq.write_table(older, path)
    with pytest.raises(InputError, match="schema differs"):
        read_table(path, AUDIT)
    table = read_table(path, AUDIT, ADDED_COLUMNS["audit"])
    assert table.schema.equals(AUDIT, check_metadata=False) and table.num_rows == 5
    assert table.column("finding").null_count == 5


def test_report_shows_the_safety_table_and_the_audit(
    manifest, subset_rows, tuned_csv, f4gemm_dir, toolchain, tmp_path
) -> None:
    from f4pipe.codeobj.toolchain import write_toolchain_json
    from f4pipe.core.schemas import write_rows
    from f4pipe.report import build_report

    res = tmp_path / "test-aiter"
    res.mkdir()
    write_toolchain_json(toolchain, res / "toolchain.json")
    argv = ["kernels", "--co-dir", str(f4gemm_dir), "--aiter-id", "test-aiter", "-o"]
    argv += [str(res / "kernels.parquet"), "--toolchain-json", str(res / "toolchain.json")]
    assert main(argv) == 0
    write_rows(res / "safety.parquet", subset_rows, SAFETY)
    audit = audit_tuned(tuned_csv, manifest, KEYS, emulate=False)
    write_rows(res / "audit.parquet", audit, AUDIT)
    report = build_report(res)
    sections = {s.key: s for s in report.sections}
    safety = sections["safety"]
    assert safety.state == "info" and "n%32=16: " in safety.verdict
    # natural order: 32x128 before 256x256 (tile numbers compare as numbers)
    assert list(safety.table["kernel"]) == sorted(SUBSET, key=lambda k: kernel_order(PREFIX + k))
    (repro,) = safety.code.values()
    assert any("--unsafe" in line for line in repro)
    unsafe = sum(r["status"] == "unsafe" for r in audit)
    assert sections["audit"].state == "bad"
    assert f"tuned.csv: {len(audit)} asm rows checked, {unsafe} unsafe" in sections["audit"].verdict
    (findings,) = sections["audit"].code.values()  # one table, one block of findings
    assert sum(line.startswith("tuned.csv:") for line in findings) == unsafe
    assert sum("aiter recorded: us " in line and "errRatio" in line for line in findings) == unsafe
    html = report.index.read_text()
    assert '<h2 id="safety">' in html and '<h2 id="audit">' in html
    # the reproducer and the audit's findings are folded: read on demand, not a wall of text
    (repro_name,) = safety.code
    assert f"<details><summary>{repro_name} ({len(repro)} lines)</summary><pre>" in html
    assert html.count("<details>") == len(safety.code) + len(sections["audit"].code) + sum(
        s.table is not None and len(s.table) > FOLD_ROWS for s in report.sections
    )
