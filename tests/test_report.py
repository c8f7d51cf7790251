"""The report of a result set built by the real stages (round-trip on aiter objects, verify and
splitK on the emulator, bench skipped without gfx950 hardware)."""

from __future__ import annotations

import shutil

import pandas as pd
from cards import check_cards, check_headline
from resultsets import EDITED, KERNELS, SPLITK_CASES, VERIFY_CASES

from f4pipe.aiter.manifest import read_manifest
from f4pipe.cli import main as cli_main
from f4pipe.core.fsio import sha256_file
from f4pipe.core.layout import SEED_SPLITK_ERR_PCT
from f4pipe.core.schemas import SPLITK, VERIFY, ArtifactKeys, write_rows
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.pipeline.stages import NO_DEVICE_REASON, StageSettings, splitk_stage, verify_stage
from f4pipe.report import build_report
from f4pipe.report.plots import HEATMAP_PNG, THROUGHPUT_PNG
from f4pipe.report.render import FOLD_ROWS, folded_table, in_kernel_order, short_kernel
from f4pipe.report.sections import NOT_MEASURED

PNG = b"\x89PNG\r\n\x1a\n"


def test_report_of_a_real_set(result_sets, tmp_path):
    set_a = result_sets["A"]
    config = tmp_path / "config.yaml"
    config.write_text("aiter: {kind: pypi}\n")
    report = build_report(set_a, config=config)
    assert report.index == set_a / "report" / "index.html"
    page = report.index.read_text()
    summary = report.summary.read_text()
    sections = {s.key: s for s in report.sections}

    rt = pd.read_parquet(set_a / "roundtrip.parquet")
    assert len(sections["roundtrip"].table) == len(rt) == len(KERNELS)
    assert sections["roundtrip"].state == "ok"
    assert f"{len(KERNELS)} of {len(KERNELS)} code objects equivalent" in page
    for kernel in KERNELS:
        assert short_kernel(kernel) in page and short_kernel(kernel) in summary

    # verification: original and rebuilt side by side, every emulator run passed identically
    verify = sections["verify"]
    assert verify.state == "ok", verify.verdict
    assert {"original status", "rebuilt status"} <= set(verify.table.columns)
    assert set(verify.table["original status"]) == {"passed"}
    n = len(verify.table)
    assert f"rebuilt matches original in {n} of {n} runs" in verify.verdict
    assert any("not independent evidence" in note for note in verify.notes)
    assert any("0 hazard(s)" in note for note in verify.notes)

    # splitK: curve plotted beside the page, seed reference numbers quoted
    splitk = sections["splitk"]
    assert splitk.plot == "splitk.png"
    assert (report.directory / "splitk.png").read_bytes().startswith(PNG)
    assert '<img src="splitk.png"' in page
    assert all(f"{v} %" in summary for v in SEED_SPLITK_ERR_PCT.values())

    # bench rows exist but the emulator cannot time: no measured number; the cycle model's
    # predictions, labelled so, in their own columns and a plot titled as a prediction
    bench = sections["bench"]
    assert bench.verdict.startswith(NOT_MEASURED) and "PREDICTED" in bench.verdict
    assert "held back from the fit" in bench.verdict  # the larger, later-session error too
    assert not any(c.endswith((" us", " tflops")) for c in bench.table.columns)
    assert (bench.table["original us_pred"] > 0).all()
    assert any("no evidence that the rebuilt object runs as fast" in n for n in bench.notes)
    assert bench.plot == "throughput.png"
    assert (report.directory / "throughput.png").read_bytes().startswith(PNG)

    # provenance
    rs = ResultSet.load(set_a)
    for text in (rs.aiter_id, rs.toolchain_id, "emulator", "config sha256", "f4pipe version"):
        assert text in page
    assert sha256_file(config) in page and sha256_file(config) in summary
    assert "<script" not in page and "http" not in page.split("<body>")[1]


def test_the_cards_say_each_verdict_in_a_few_words(result_sets, tmp_path):
    """The first screen: one card per section, linked to it, its whole verdict the tooltip and
    a headline of a few words whose numbers are the verdict's (the same counts, the same
    rounding). Without the changes step's record the first card says how to compare by hand."""
    heads = {}
    for name in ("A", "B", "timed"):
        report = build_report(result_sets[name], tmp_path / name)
        check_cards(report.index.read_text(), list(report.sections))
        heads[name] = {s.key: s.headline for s in report.sections}
    n = len(KERNELS)
    verify_runs = 2 * len(VERIFY_CASES)  # original and rebuilt
    assert heads["A"]["roundtrip"] == f"{n} of {n} equivalent, 0 unexplained bytes"
    assert heads["A"]["verify"] == f"{verify_runs} of {verify_runs} runs passed"
    # splitK: the largest split of these small shapes leaves its buffers (an error row)
    splitk = pd.read_parquet(result_sets["A"] / "splitk.parquet")
    errored = int((splitk["status"] == "error").sum())
    assert errored and len(splitk) == 2 * len(SPLITK_CASES)
    assert heads["A"]["splitk"] == f"{errored} of {len(splitk)} runs errored"
    assert heads["A"]["bench"].startswith("PREDICTED, median error ")
    assert heads["A"]["safety"] == heads["A"]["audit"] == "not run"
    assert heads["A"]["changes"] == "not compared"
    # the edited kernel fails in both variants
    assert heads["B"]["verify"] == f"2 of {verify_runs} runs failed"
    assert heads["timed"]["bench"].startswith("MEASURED, 2 runs, rebuilt/original ")
    report = build_report(result_sets["A"], tmp_path / "again")
    changes = report.sections[0]
    assert changes.key == "changes" and changes.state == "none"
    assert "`f4pipe compare OLD NEW`" in changes.verdict


def test_missing_stages_are_not_run(result_sets, tmp_path):
    only_spine = tmp_path / "spine-only"
    shutil.copytree(result_sets["A"], only_spine)
    for name in ("verify", "splitk", "bench"):
        (only_spine / f"{name}.parquet").unlink()
    report = build_report(only_spine, tmp_path / "out")
    sections = {s.key: s for s in report.sections}
    assert sections["verify"].verdict == "not run" and sections["splitk"].verdict == "not run"
    assert sections["bench"].verdict == NOT_MEASURED
    page = report.index.read_text()
    assert "verify.parquet is missing" in page and "absent (verify)" in page
    # the splitK plot always exists (the pipeline declares it), showing only the seed's line
    assert [p.name for p in report.plots] == ["splitk.png"]
    # so do the throughput plot and the heatmap `snakemake --report` carries: a picture that
    # says why there is none, which the page itself does not show
    for name in (THROUGHPUT_PNG, HEATMAP_PNG):
        assert (report.directory / name).read_bytes().startswith(PNG), name
        assert name not in page, name


def test_failures_are_shown(result_sets):
    report = build_report(result_sets["B"])
    verify = {s.key: s for s in report.sections}["verify"]
    assert verify.state == "bad"
    failed = [n for n in verify.notes if n.startswith("failed:")]
    assert {n.split()[1] for n in failed} == {"original", "rebuilt"}
    assert all(short_kernel(EDITED) in n for n in failed)


def test_measured_throughput_bars_and_ratio(result_sets, capsys):
    timed = result_sets["timed"]
    assert cli_main(["report", str(timed)]) == 0
    assert "Throughput: 2 runs measured on hostmodel-timed" in capsys.readouterr().out
    bench = pd.read_parquet(timed / "bench.parquet")
    assert set(bench["status"]) == {"measured"}
    page = (timed / "report" / "index.html").read_text()
    assert '<img src="throughput.png"' in page and "ratio rebuilt/original" in page
    assert (timed / "report" / "throughput.png").read_bytes().startswith(PNG)
    assert "original tflops_lo" in page  # each run's interval, drawn as error bars
    assert NOT_MEASURED not in page


def test_no_device_rows_are_shown_as_skipped(result_sets, f4gemm_dir, tmp_path):
    """A machine with neither GPU nor emulator: the stages record skipped rows, the report
    says so and draws no measured line (the splitK plot holds the seed's reference only; the
    throughput plot, from the result set's bench rows, shows predictions titled as such)."""
    no_device = shutil.copytree(result_sets["A"], tmp_path / "no-device")
    rs = ResultSet.load(no_device)
    keys = ArtifactKeys(rs.aiter_id, rs.toolchain_id, "none")
    manifest = read_manifest(f4gemm_dir)
    for name, stage, cases, schema in (
        ("verify", verify_stage, VERIFY_CASES, VERIFY),
        ("splitk", splitk_stage, SPLITK_CASES, SPLITK),
    ):
        rows = stage(None, manifest, cases, StageSettings(keys=keys))
        write_rows(no_device / f"{name}.parquet", rows, schema)
    report = build_report(no_device)
    sections = {s.key: s for s in report.sections}
    for key in ("verify", "splitk"):
        assert sections[key].state == "none"
        check_headline(sections[key])
        assert sections[key].verdict.startswith(f"no {key} run completed: ")
        assert f"reason: {NO_DEVICE_REASON}" in sections[key].notes
    assert [p.name for p in report.plots] == ["splitk.png", "throughput.png"]
    assert sections["bench"].verdict.startswith(NOT_MEASURED) and "PREDICTED" in (
        sections["bench"].verdict
    )
    assert f"reason: {NO_DEVICE_REASON}" in report.index.read_text()


def test_safety_section_draws_the_kernel_by_edge_class_heatmap(tmp_path):
    """Worst verdict per (kernel, edge class), as a table and as a heatmap beside it."""
    from f4pipe.aiter.shaperules import EDGE_CLASSES
    from f4pipe.report.safety import safety_section

    def row(kernel, edge, verdict, policy="unsafe"):
        return {
            "kernel": f"f4gemm_bf16_per1x32Fp4_{kernel}", "edge_class": edge, "verdict": verdict,
            "policy": policy, "store_class": "chunk32", "m": 33, "n": 272, "k": 512,
            "orders": "in-order,reversed", "agrees": True, "bad": 0, "first_bad_row": None,
            "first_bad_col": None, "expected": None, "got": None, "canary_damaged": 0,
            "races": 3 if verdict == "race" else 0, "static_d_bound": "", "static_n_guards": "",
            "reproducer": "f4pipe gemm ...",
        }  # fmt: skip

    rows = [row("BpreShuffle_32x128", e, "safe") for e in EDGE_CLASSES]
    rows += [
        row("BpreShuffle_256x256", e, "race" if i == 0 else "safe")
        for i, e in enumerate(EDGE_CLASSES)
    ]
    rows.append(row("BpreShuffle_256x256", EDGE_CLASSES[0], "safe", policy="pad"))

    class Rows:  # the one table the section reads
        def table(self, name):
            return pd.DataFrame(rows) if name == "safety" else None

    sec = safety_section(Rows(), tmp_path)
    assert sec.plot == "safety_heatmap.png"
    assert (tmp_path / "safety_heatmap.png").read_bytes().startswith(PNG)
    table = sec.table.set_index("kernel")
    assert table.loc["BpreShuffle_256x256", EDGE_CLASSES[0]].startswith("race")
    assert table.loc["BpreShuffle_32x128", EDGE_CLASSES[0]] == "safe"


def test_kernels_are_listed_in_natural_order(f4gemm_dir):
    """Tables and the heatmap list tiles by their numbers (32x512, 32x1024, ..., 256x256), not
    as text, which puts 32x1024 after 256x256."""
    names = [entry.name for entry in read_manifest(f4gemm_dir).entries]
    table = pd.DataFrame({"kernel": sorted(names, reverse=True), "m": 0})
    listed = list(table.sort_values(["m", "kernel"], key=in_kernel_order)["kernel"])

    def variant_and_tile(name: str) -> tuple[str, int, int]:
        variant, tile = name.rsplit("_", 2)[-2:]
        m, n = tile.split("x")
        return variant, int(m), int(n)

    assert listed == sorted(names, key=variant_and_tile)
    tiles = [short_kernel(name) for name in listed]
    assert tiles.index("BpreShuffle_32x512") < tiles.index("BpreShuffle_32x1024")
    assert tiles.index("BpreShuffle_32x1024") < tiles.index("BpreShuffle_256x256")


def test_long_tables_are_folded_and_short_ones_shown():
    """A table of more rows than the 35 kernels sits under a <details> line; the kernel tables
    are shown open."""
    short = pd.DataFrame({"kernel": [f"k{i}" for i in range(FOLD_ROWS)]})
    long = pd.DataFrame({"kernel": [f"k{i}" for i in range(FOLD_ROWS + 1)]})
    assert "<details>" not in folded_table(short) and "k39" in folded_table(short)
    folded = folded_table(long)
    assert folded.startswith(f"<details><summary>{FOLD_ROWS + 1} rows</summary>")
    assert "k40" in folded and folded.endswith("</details>")


def test_the_audit_cards_key_findings_are_the_clis_asm_count(f4gemm_dir, tmp_path, capsys):
    """The audit holds a tuned table's asm rows only, while `audit-tuned --shape` counts aiter's
    lookup over the whole table (CK rows too: 23 exact-only in the pinned wheel's, 13 of them
    asm). The card's number is the CLI's asm count, and both say which count it is."""
    import re

    from f4pipe.core.schemas import AUDIT, read_table
    from f4pipe.report.safety import _lookup_counts

    out = tmp_path / "audit.parquet"
    cli_main(["audit-tuned", "--co-dir", str(f4gemm_dir), "--no-emulate", "-o", str(out)])
    cli_main(["audit-tuned", "--co-dir", str(f4gemm_dir), "--shape", "1,7168,2304"])
    (line,) = [s for s in capsys.readouterr().out.splitlines() if "key findings:" in s]
    found = re.search(r"key findings: (\d+) exact-only \(on asm rows.*: (\d+) exact-only\)", line)
    assert found, line
    whole, asm = int(found[1]), int(found[2])
    assert whole > asm > 0  # the wheel's table has CK rows only their own M reaches
    card = _lookup_counts(read_table(out, AUDIT).to_pandas())
    assert card == f", key findings of aiter's lookup on its asm rows: {asm} exact-only"


def test_the_audit_card_counts_the_clis_rows(result_sets, f4gemm_dir, tmp_path, capsys):
    """The audit's headline, of aiter's whole tuned table (the wheel's 35 kernels), is the
    count `audit-tuned` prints: asm rows checked and unsafe by the rules."""
    import re

    with_audit = shutil.copytree(result_sets["A"], tmp_path / "with-audit")
    argv = ["audit-tuned", "--co-dir", str(f4gemm_dir), "--no-emulate", "--aiter-id"]
    argv.append(ResultSet.load(with_audit).aiter_id)  # the audit joins this set
    cli_main([*argv, "-o", str(with_audit / "audit.parquet")])
    found = re.search(r"(\d+) asm row\(s\) checked, (\d+) unsafe", capsys.readouterr().out)
    assert found
    report = build_report(with_audit, tmp_path / "report")
    audit = {s.key: s for s in report.sections}["audit"]
    check_headline(audit)
    assert audit.headline == f"{found[2]} of {found[1]} asm rows unsafe"
    assert audit.state == ("bad" if int(found[2]) else "ok")
