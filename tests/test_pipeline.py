"""The Snakemake workflow end to end on a small local aiter directory, on the emulator.

Runs the real Snakefile (fetch checkpoint, toolchain, kernels, per-kernel round trips, rebuilt
variant, per-kernel GEMM stages, gathered tables) in a scratch working directory.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from cards import cards_of
from workflow_run import (
    KERNELS,
    make_local_aiter,
    snakemake,
    use_config,
    write_nop_edit,
)

from f4pipe.aiter.manifest import MANIFEST_NAME, read_manifest
from f4pipe.core.fsio import json_text
from f4pipe.core.layout import ARCHIVES_DIR, CHANGES_JSON, EVERY_KERNEL, FACTS_DIR, STORE_DIR


@pytest.fixture(scope="module")
def pipeline_run(f4gemm_dir: Path, tmp_path_factory, toolchain) -> Path:
    workdir = tmp_path_factory.mktemp("pipeline")
    config = use_config(workdir)
    (nop,) = config["edits"]
    assert nop["kernel"] == KERNELS[0]
    write_nop_edit(f4gemm_dir, workdir / nop["asm"], toolchain)
    assert (
        make_local_aiter(f4gemm_dir, workdir / "aiter", KERNELS)
        == workdir / config["aiter"]["path"]
    )
    proc = snakemake(workdir, "all")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return workdir


#: What results/ holds beside the result sets.
BESIDE_SETS = (ARCHIVES_DIR, STORE_DIR, FACTS_DIR)


def results_dir(workdir: Path) -> Path:
    """The one result set of the first run (results/ also holds archives/, the store and the
    facts)."""
    (only,) = (p for p in (workdir / "results").iterdir() if p.name not in BESIDE_SETS)
    return only


def test_pipeline_writes_every_table(pipeline_run: Path) -> None:
    res = results_dir(pipeline_run)
    assert res.name.startswith("local-")
    kernels = pd.read_parquet(res / "kernels.parquet")
    assert sorted(kernels.kernel) == sorted(KERNELS)
    assert set(kernels.arch) == {"gfx950"}
    rt = pd.read_parquet(res / "roundtrip.parquet")
    assert rt.equivalent.all() and (rt.text_bytes_unexplained == 0).all()
    assert (rt.text_bytes_explained > 0).all()
    rebuilt = read_manifest(res / "variants" / "rebuilt")
    assert sorted(e.name for e in rebuilt) == sorted(KERNELS)


def test_pipeline_verifies_original_and_rebuilt_on_the_emulator(pipeline_run: Path) -> None:
    verify = pd.read_parquet(results_dir(pipeline_run) / "verify.parquet")
    assert set(verify.variant) == {"original", "rebuilt", "edit-nop"}
    assert set(verify.device_id) == {"emulator"}
    assert (verify.status == "passed").all(), verify[["variant", "kernel", "status", "reason"]]
    assert (verify.max_rel_err < 2**-8 * 1.01).all()


def test_pipeline_runs_a_hand_edit_as_its_own_variant(pipeline_run: Path) -> None:
    res = results_dir(pipeline_run)
    verify = pd.read_parquet(res / "verify.parquet")
    edit_rows = verify[verify.variant == "edit-nop"]
    assert list(edit_rows.kernel.unique()) == [KERNELS[0]]
    assert (edit_rows.status == "passed").all()
    diff = (res / "edits" / "nop.diff.txt").read_text()
    assert "s_nop 0" in diff
    assert [e.name for e in read_manifest(res / "variants" / "edit-nop")] == [KERNELS[0]]


def test_stage_logs_show_progress(pipeline_run: Path) -> None:
    (log,) = (pipeline_run / "logs").glob(f"*/verify/original/{EVERY_KERNEL}.log")
    text = log.read_text()
    assert re.search(r"verify original: (\d+)/\1 \(.*total\)", text), text


def test_stages_run_one_job_per_variant_by_default(pipeline_run: Path) -> None:
    """config `jobs_per: variant`: a stage is one process per variant, not one per kernel."""
    res = results_dir(pipeline_run)
    for stage in ("verify", "splitk", "bench"):
        jobs = sorted(str(p.relative_to(res / stage)) for p in (res / stage).rglob("*.parquet"))
        assert jobs == [f"{v}/{EVERY_KERNEL}.parquet" for v in ("edit-nop", "original", "rebuilt")]
    jobs = sorted(str(p.relative_to(res / "safety")) for p in (res / "safety").rglob("*.parquet"))
    assert jobs == [f"{v}/{EVERY_KERNEL}.parquet" for v in ("edit-nop", "original")]
    assert set(pd.read_parquet(res / "verify.parquet").kernel) == set(KERNELS)


def test_pipeline_bench_says_why_it_has_no_numbers(pipeline_run: Path) -> None:
    """No measured number without hardware: the rows are the cycle model's predictions,
    in their own columns and labelled so."""
    res = results_dir(pipeline_run)
    bench = pd.read_parquet(res / "bench.parquet")
    assert len(bench) > 0
    assert set(bench.kernel) == set(KERNELS)  # every kernel has its rows
    assert (bench.status == "predicted").all()
    assert bench.us.isna().all() and bench.tflops.isna().all()
    assert bench.reason.str.contains("only on gfx950 hardware").all()
    assert bench.reason.str.contains("prediction").all()
    assert (bench.us_pred > 0).all() and bench.calibration_id.notna().all()


def test_pipeline_sweeps_shape_edges_and_reports_them(pipeline_run: Path) -> None:
    res = results_dir(pipeline_run)
    safety = pd.read_parquet(res / "safety.parquet")
    assert sorted(safety.kernel.unique()) == sorted(KERNELS)
    assert safety.agrees.all()
    wrong = safety[(safety.verdict == "wrong") & (safety.policy == "unsafe")]
    assert wrong.reproducer.str.contains("--unsafe").all()
    k_tail = wrong.edge_class.str.startswith("k%256")
    # with K a multiple of 256 only the N % 32 == 16 edge goes wrong; at a K tail only padding
    # that is not zero does (the scales' E8M0 1.0 or arbitrary bytes), never zeros
    assert set(wrong[~k_tail].edge_class) == {"n%32=16"}
    assert set(wrong[k_tail].edge_class) == {"k%256", "k%256,m=1"}
    assert "zeros" not in set(wrong[k_tail].scale_pad)
    assert (safety[safety.policy == "pad"].verdict == "safe").all()
    html = (res / "report" / "index.html").read_text()
    assert '<h2 id="safety">' in html and "Reproducers" in html
    cards = {card["key"]: card for card in cards_of(html)}
    n = len(KERNELS)
    assert cards["safety"]["headline"] == f"unsafe edges in {n} of {n} kernels"
    assert f"{n} kernels, {n} unsafe at some edge" in cards["safety"]["verdict"]
    assert cards["audit"]["headline"] == "no tuned table with asm rows"
    # this local aiter has no aiter/configs: the audit ran and found no table to audit
    assert len(pd.read_parquet(res / "audit.parquet")) == 0
    assert "has no a4w4 tuned GEMM table" in html


def test_pipeline_sweeps_an_edit_as_it_sweeps_the_originals(pipeline_run: Path, tmp_path) -> None:
    """The edit's kernel gets its own safety rows; the originals' rows are those a sweep of the
    originals alone gives (as before edits were swept), and compare with a set written before
    (no variant column) finds only the edit's rows new."""
    import shutil

    import pyarrow.parquet as pq

    from f4pipe.cli import main
    from f4pipe.compare.changes import safety_changes
    from f4pipe.pipeline.resultset import ResultSet

    res = results_dir(pipeline_run)
    safety = pd.read_parquet(res / "safety.parquet")
    assert set(safety.variant) == {"original", "edit-nop"}
    edit = safety[safety.variant == "edit-nop"]
    assert set(edit.kernel) == {KERNELS[0]}
    original = safety[safety.variant == "original"]
    # the nop keeps every edge as its original: same verdicts, cell for cell
    cell = ["edge_class", "m", "n", "k", "policy", "scale_pad", "k_pad"]
    nop_original = original[original.kernel == KERNELS[0]]
    assert (
        edit.set_index(cell)
        .verdict.sort_index()
        .equals(nop_original.set_index(cell).verdict.sort_index())
    )
    alone = tmp_path / "alone.parquet"
    toolchain = json.loads((res / "toolchain.json").read_text())
    argv = ["safety", "--co-dir", str(pipeline_run / "aiter" / "hsa"), "--record", "-o", str(alone)]
    argv += ["--aiter-id", res.name, "--toolchain-id", toolchain["toolchain_id"]]
    assert main(argv) == 0
    ran = ["variant", "reused_from", "reuse_key"]
    assert (
        original.drop(columns=ran)
        .reset_index(drop=True)
        .equals(pd.read_parquet(alone).drop(columns=ran))
    )
    before = tmp_path / "before" / res.name
    shutil.copytree(res, before)
    pq.write_table(pq.read_table(alone).drop_columns(["variant"]), before / "safety.parquet")
    changed = safety_changes(ResultSet.load(before), ResultSet.load(res))
    assert set(changed.variant) == {"edit-nop"} and len(changed) == len(edit)


def test_pipeline_reports_and_archives(pipeline_run: Path) -> None:
    from f4pipe.cli import main

    res = results_dir(pipeline_run)
    html = (res / "report" / "index.html").read_text()
    for section in ("roundtrip", "verify", "splitk", "bench", "provenance"):
        assert f'<h2 id="{section}">' in html, section
    assert "not measured: no gfx950 device" in html
    (tarball,) = (pipeline_run / "results" / "archives" / res.name).glob("*.tar.gz")
    toolchain_id = pd.read_parquet(res / "kernels.parquet").toolchain_id[0]
    assert tarball.name == f"{res.name}__{toolchain_id}__emulator.tar.gz"
    assert main(["archive", "--check", str(tarball)]) == 0
    # the changes step ran before the report: the first set has no other archive to compare
    record = json.loads((res / CHANGES_JSON).read_text())
    assert record["baseline"] is None
    first = cards_of(html)[0]
    assert (first["key"], first["headline"], first["state"]) == (
        "changes",
        "first archived set",
        "none",
    )
    assert (pipeline_run / "logs" / res.name / "changes.log").is_file()


def test_snakemake_report_carries_the_plots_without_warnings(pipeline_run: Path) -> None:
    """`snakemake --report report.html`: every reported file's type known (Parquet has no
    entry in Python's table of types: the workflow adds one), and the page's throughput plot,
    safety heatmap and splitK plot embedded byte for byte, not only the page that links them."""
    report = pipeline_run / "report.html"
    proc = snakemake(pipeline_run, "--report", str(report))
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = proc.stdout + proc.stderr
    assert "Could not detect mimetype" not in console, console[-3000:]
    assert "warning" not in console.lower(), console[-3000:]
    html = report.read_text()
    plots = results_dir(pipeline_run) / "report"
    for name in ("throughput.png", "safety_heatmap.png", "splitk.png"):
        assert embedded(html, name) == (plots / name).read_bytes(), name


def embedded(html: str, name: str) -> bytes | None:
    """The bytes of the file `name` a Snakemake report embeds as a data URI, or None."""
    found = re.search(
        rf"data:image/png;charset=[\w-]+;filename={re.escape(name)};base64,([\w+/=]+)", html
    )
    return base64.b64decode(found.group(1)) if found else None


def test_pipeline_records_the_effective_config(pipeline_run: Path) -> None:
    """config.json (a shell job writes it) is the run's configuration: every key the user set,
    with the schema's defaults, in f4pipe's JSON spelling, and nothing half-written beside it."""
    res = results_dir(pipeline_run)
    text = (res / "config.json").read_text()
    recorded = json.loads(text)
    assert text == json_text(recorded, indent=2) + "\n"
    given = yaml.safe_load((pipeline_run / "config.yaml").read_text())
    assert holds(recorded, given)
    assert "predict" not in given["audit_tuned"]  # a default the schema filled in
    assert recorded["audit_tuned"]["predict"] is False
    assert not list(res.glob("*.part"))


def holds(recorded: object, given: object) -> bool:
    """Every value of `given` is in `recorded` (which may hold more: the defaults)."""
    if isinstance(given, dict):
        return isinstance(recorded, dict) and all(
            key in recorded and holds(recorded[key], value) for key, value in given.items()
        )
    return recorded == given


def test_second_run_does_nothing(pipeline_run: Path) -> None:
    proc = snakemake(pipeline_run, "all", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_changed_aiter_source_reruns_under_a_new_id(pipeline_run: Path, f4gemm_dir: Path) -> None:
    before = results_dir(pipeline_run).name
    make_local_aiter(f4gemm_dir, pipeline_run / "aiter2", KERNELS[:1])
    use_config(pipeline_run, aiter={"kind": "local", "path": "aiter2/hsa"})
    proc = snakemake(pipeline_run, "all", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the new source's id is a fact its job finds (nothing is hashed while parsing): that job
    # is planned, and once it ran the dry run plans the new id's set
    assert "checkpoint aiter_id:" in proc.stdout + proc.stderr
    assert "rule toolchain:" not in proc.stdout + proc.stderr
    proc = snakemake(pipeline_run, "all", "--until", "aiter_id")
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = snakemake(pipeline_run, "all", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "checkpoint aiter_id:" not in out
    planned = set(re.findall(r"results/(local-[0-9a-f]{12})/", out))
    assert planned and before not in planned
    assert re.search(r"(checkpoint|rule) fetch:", out) and "rule toolchain_json:" in out


def without_provenance(summary: str) -> str:
    """summary.md without what names the result set: the title, the changes and reuse sections
    (their lines in the glance table too) and the provenance table."""
    lines = summary.splitlines()[1:]
    lines = lines[: lines.index("## Provenance")]
    for heading in ("## Changed since", "## Reused results: rows taken from the result store"):
        start = next(i for i, line in enumerate(lines) if line.startswith(heading))
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        lines = lines[:start] + lines[end:]
    glance = ("| Reused results |", "| Changed since ")
    return "\n".join(line for line in lines if not line.startswith(glance))


def test_byte_identical_aiter_update_reuses_every_verdict(
    pipeline_run: Path, f4gemm_dir: Path
) -> None:
    """A second aiter id whose code objects are byte-identical (its manifest only gained a
    blank line, so its content-digest id differs) takes every round trip (with its files) and
    every verify, splitk and safety row from the result store; the rows and the report say so;
    the report is otherwise the same.
    Runs last: it adds a second result set to the module's working directory."""
    first = results_dir(pipeline_run)
    aiter = pipeline_run / "aiter-update"
    hsa = make_local_aiter(f4gemm_dir, aiter, KERNELS)
    manifest = hsa / "gfx950" / "f4gemm" / MANIFEST_NAME
    manifest.write_text(manifest.read_text() + "\n")
    use_config(pipeline_run, aiter={"kind": "local", "path": str(hsa.relative_to(pipeline_run))})
    proc = snakemake(pipeline_run, "all")
    assert proc.returncode == 0, proc.stderr[-4000:]
    (second,) = (
        p for p in (pipeline_run / "results").iterdir() if p.name not in (*BESIDE_SETS, first.name)
    )
    for table in ("roundtrip", "verify", "splitk", "safety"):
        old = pd.read_parquet(first / f"{table}.parquet")
        new = pd.read_parquet(second / f"{table}.parquet")
        assert len(new) == len(old), table  # splitk: none of KERNELS is a splitK kernel
        assert old.reuse_key.notna().all(), table
        # in the first set original and rebuilt execute the same decoded program: a run ran
        # for one variant and the other took its row ("<set>/<variant>"), unless the two jobs
        # ran at once (--cores 2) and both missed
        if "variant" not in old.columns:  # roundtrip, safety: the original objects only
            assert old.reused_from.isna().all(), table
        for _, runs in old.groupby("reuse_key") if "variant" in old.columns else ():
            ran = runs[runs.reused_from.isna()]
            others = runs[runs.reused_from.notna()]
            assert len(ran) >= 1, runs[["variant", "reused_from"]]
            assert others.reused_from.isin([f"{first.name}/{v}" for v in ran.variant]).all()
        assert (new.reused_from.str.split("/").str[0] == first.name).all(), new.reused_from
        assert (new.aiter_id == second.name).all(), table
        assert list(new.reuse_key) == list(old.reuse_key), table
        facts = [c for c in old.columns if c not in ("aiter_id", "reused_from")]
        pd.testing.assert_frame_equal(old[facts], new[facts])
    log = pipeline_run / "logs" / second.name / "safety" / "original" / f"{EVERY_KERNEL}.log"
    assert f"reused from the result store results/store (run in {first.name})" in log.read_text()
    for old_file in sorted((first / "roundtrip").iterdir()):  # the files came back too
        new_file = second / "roundtrip" / old_file.name
        if old_file.suffix == ".txt":  # the verdict's header names each set's files
            assert new_file.read_text().replace(second.name, first.name) == old_file.read_text()
        else:
            assert new_file.read_bytes() == old_file.read_bytes(), old_file.name
    old_md = (first / "report" / "summary.md").read_text()
    new_md = (second / "report" / "summary.md").read_text()
    rows = sum(
        len(pd.read_parquet(first / f"{t}.parquet")) for t in ("roundtrip", "verify", "safety")
    )
    # the first run reused nothing from an earlier run; its rebuilt verify rows took the
    # original's runs of the same set, and the card says that apart
    assert f"none: all {rows} rows the result store keys ran in this set" in old_md
    within = int(pd.read_parquet(first / "verify.parquet").reused_from.notna().sum())
    if within:
        assert f"; {within} of them share a run made here" in old_md
    assert f"{rows} of {rows} rows the result store keys reused, not run again" in new_md
    assert without_provenance(new_md) == without_provenance(old_md)
    # and what changed since the first set's archive: nothing a verdict depends on
    record = json.loads((second / CHANGES_JSON).read_text())
    assert record["baseline"]["aiter_id"] == first.name and record["differs"] is False
    card = cards_of((second / "report" / "index.html").read_text())[0]
    assert card["title"] == f"Changed since {first.name}" and card["state"] == "ok", card
    assert card["headline"] == "no verdict input changed"
