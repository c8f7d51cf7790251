"""`f4pipe tune` on the pinned wheel's kernels and tables: aiter's format, safe picks only,
aiter's validator (or f4pipe's equivalent of it), and aiter's lookup hitting every row.

The shape lists are real (config/shapes/) with M cut short: today every candidate row costs
a per-row prediction."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from cards import check_headline

from f4pipe.aiter.lookup import build_index, distinct_ms, lookup, padded_m
from f4pipe.aiter.shaperules import is_safe
from f4pipe.aiter.tuned import A4W4_COLUMNS, read_tuned, validation_problems
from f4pipe.cli import main

REPO = Path(__file__).resolve().parents[1]
VALIDATOR = "csrc/ck_gemm_a4w4_blockscale/validate_tuned_csv.py"


def _short_deepseek(tmp_path: Path, rows: int = 3, m_hi: int = 40) -> Path:
    """The first `rows` GEMMs of config/shapes/deepseek-v3.csv, M cut to 1..m_hi."""
    frame = pd.read_csv(REPO / "config" / "shapes" / "deepseek-v3.csv").head(rows)
    frame["M"] = f"1-{m_hi}"
    path = tmp_path / "deepseek-short.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def tuned(f4gemm_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tune")
    shapes = _short_deepseek(tmp)
    out = tmp / "t.csv"
    code = main(
        [
            "tune",
            "--shapes",
            str(shapes),
            "-o",
            str(out),
            "--co-dir",
            str(f4gemm_dir),
            "--table",
            str(tmp / "tune.parquet"),
            "--store",
            str(tmp / "store"),
        ]
    )
    assert code == 0
    return out, pd.read_parquet(tmp / "tune.parquet")


def test_one_emulated_shape_per_edge_class(manifest):
    from f4pipe.pipeline.tuneerr import reduced_shape

    e = next(x for x in manifest if x.name.endswith("BpreShuffle_64x128"))
    assert reduced_shape(e, 1, 2112, 7232, 0) == (1, 160, 576)  # K's tail with a single row
    assert {reduced_shape(e, m, 2112, 7168, 0)[0] for m in (1, 16, 32, 48)} == {16}
    assert {reduced_shape(e, m, 2112, 7168, 0)[0] for m in (80, 96, 1000)} == {80}
    assert reduced_shape(e, 4096, 4096, 7232, 0) == (64, 128, 512 + 64)  # K's tail kept
    s = next(x for x in manifest if x.name.endswith("BpreShuffle_256x256"))
    assert reduced_shape(s, 256, 256, 2048, 3)[2] == 2048  # one K block per part
    assert reduced_shape(s, 256, 256, 8192, 3)[2] == 4096  # two


def test_distinct_ms_are_the_padded_steps():
    keys, lows = distinct_ms(1, 300, 7168)
    assert keys.tolist()[:3] == [16, 32, 48] and keys.tolist()[-2:] == [288, 320]
    assert lows.tolist()[:3] == [1, 17, 33] and lows.tolist()[-1] == 289
    for m in range(1, 301):  # every M pads (gl=0) to the row whose range holds it
        i = keys.tolist().index(padded_m(m, 7168, 0))
        assert lows[i] <= m <= keys[i]


def test_table_in_aiters_format_with_safe_picks(tuned, manifest):
    out, frame = tuned
    table = pd.read_csv(out)
    header = Path(manifest.co_path(next(iter(manifest)))).parent.parent / "configs"
    wheel = next(header.rglob("a4w4_blockscale_tuned_gemm.csv"))
    assert list(table.columns) == list(pd.read_csv(wheel, nrows=0).columns)
    assert tuple(table.columns) == A4W4_COLUMNS
    by_symbol = {e.symbol: e for e in manifest}
    picks = frame[frame["picked"]]
    assert len(table) == len(picks) == 3 * 3  # M 1..40: rows at 16, 32, 48
    for r in table.itertuples():
        entry = by_symbol[r.kernelName]
        assert entry.bpreshuffle
        assert is_safe(entry, r.M, r.N, r.K) and is_safe(entry, max(1, r.M - 15), r.N, r.K)
        assert r.kernelId == -1 and r.us > 0 and r.errRatio <= 0.05
    # the pick is the fastest safe candidate of its shape
    for _, shape in frame.groupby(["m", "n", "k"]):
        safe = shape[shape["safe"]]
        assert shape[shape["picked"]]["us_pred"].iloc[0] == safe["us_pred"].min()


def test_own_validator_passes_and_catches(tuned, tmp_path):
    out, _ = tuned
    assert validation_problems(out) == []
    bad = pd.read_csv(out)
    bad.loc[0, "tflops"] *= 2
    bad = pd.concat([bad, bad.head(1)])
    bad.to_csv(tmp_path / "bad.csv", index=False)
    problems = validation_problems(tmp_path / "bad.csv")
    assert any("share a" in p for p in problems) and any("tflops" in p for p in problems)


def test_wheel_ships_no_validator():
    """The pinned wheel lacks aiter's validator: f4pipe's own check stands in for it."""
    from f4pipe.fetch import PypiSource
    from f4pipe.fetch.wheel import ensure_wheel

    wheel, _ = ensure_wheel(PypiSource())
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith("gemm_a4w4_blockscale_tune.py") for n in names)
    assert not any(n.endswith("validate_tuned_csv.py") for n in names)


@pytest.mark.skipif(
    not os.environ.get("F4PIPE_AITER_TREE"),
    reason="no aiter tree with csrc/ (set F4PIPE_AITER_TREE to a checkout that has the validator)",
)
def test_aiters_validator_accepts(tuned):
    out, _ = tuned
    validator = Path(os.environ["F4PIPE_AITER_TREE"]) / VALIDATOR
    run = subprocess.run(
        [sys.executable, str(validator), "--csv", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout
    assert "PASS: All checks passed" in run.stdout


def test_lookup_hits_every_written_row(tuned, manifest):
    out, frame = tuned
    index = build_index({out.name: read_tuned(out)})
    for r in frame[frame["picked"]].itertuples():
        for m in range(r.m_low, r.m + 1):
            got = lookup(index, manifest, m, r.n, r.k)
            assert (got.outcome, got.kernel, got.log2_k_split) == ("hit", r.kernel, r.log2_k_split)


def test_provenance_says_predicted(tuned):
    out, _ = tuned
    record = json.loads(out.with_name("t.provenance.json").read_text())
    assert record["predicted_columns"] == ["us", "tflops", "bw"]
    assert record["model_id"] and record["calibration_id"]
    assert set(record["error_band_pct"]) == {"M<=64", "65-512", ">512"}
    assert len(record["err_shapes"]) == 9


def test_unsafe_only_shape_is_listed(f4gemm_dir, tmp_path, capsys):
    """N % 32 == 16 breaks every kernel's store rule: no safe asm kernel, no row."""
    shapes = tmp_path / "crafted.csv"
    shapes.write_text("name,M,N,K\nok,32,2112,7168\nhopeless,32,816,512\n")
    out = tmp_path / "t.csv"
    assert main(["tune", "--shapes", str(shapes), "-o", str(out), "--co-dir", str(f4gemm_dir)]) == 0
    text = capsys.readouterr().out
    assert "hopeless M=32 N=816 K=512: NO SAFE ASM KERNEL" in text
    assert pd.read_csv(out)["N"].tolist() == [2112]
    side = pd.read_csv(tmp_path / "t.shapes.csv")
    assert side.set_index("name").loc["hopeless", "status"] == "no safe asm kernel"
    record = json.loads((tmp_path / "t.provenance.json").read_text())
    assert [s["name"] for s in record["shapes_without_a_row"]] == ["hopeless"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name,M,N\nx,1,2112\n", "bad.csv:1: columns ['K'] missing"),
        ("name,M,N,K\nx,64-1,2112,7168\n", "bad.csv:2: M range '64-1' runs backwards"),
        ("name,M,N,K\nx,1,2112,7168\ny,1,2112,0\n", "bad.csv:3: K is 0, must be >= 1"),
        (
            "name,M,N,K,kernel\nx,1,2112,7168,BpreShuffle_9x9\n",
            "bad.csv:2: kernel 'BpreShuffle_9x9'",
        ),
    ],
)
def test_bad_shape_list_names_file_line_value(f4gemm_dir, tmp_path, capsys, text, expected):
    shapes = tmp_path / "bad.csv"
    shapes.write_text(text)
    code = main(
        [
            "tune",
            "--shapes",
            str(shapes),
            "-o",
            str(tmp_path / "t.csv"),
            "--co-dir",
            str(f4gemm_dir),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]


def _result_set(directory: Path, frame: pd.DataFrame):
    """A result set holding only a TUNE table (and the empty kernels table a set needs)."""
    from f4pipe.core.schemas import KERNELS, write_rows
    from f4pipe.pipeline.resultset import ResultSet
    from f4pipe.pipeline.tunedcsv import write_tune_table

    directory.mkdir(parents=True)
    (directory / "toolchain.json").write_text(json.dumps({"toolchain_id": "llvm-22"}))
    write_rows(directory / "kernels.parquet", [], KERNELS)
    write_tune_table(directory / "tune.parquet", frame)
    return ResultSet.load(directory)


def test_report_section_counts_the_lists(tuned, tmp_path, f4gemm_dir, manifest):
    from f4pipe.aiter.aiterdir import tuned_tables_of
    from f4pipe.report.tune import tune_section

    _, frame = tuned
    sec = tune_section(_result_set(tmp_path / "a", frame), None)
    check_headline(sec)
    assert sec.headline == "9 tuned, 0 without a safe kernel"
    assert "PREDICTED" in sec.verdict and sec.state == "info"
    band = frame["band_p90_pct"].iloc[0]  # M 16..48: the calibration's M <= 64 band
    assert any(f"{band:g} % at M <=64" in note for note in sec.notes)
    row = sec.table.iloc[0]
    index = build_index({n: read_tuned(p) for n, p in tuned_tables_of(f4gemm_dir).items()})
    picks = frame[frame["picked"]]
    hits = sum(lookup(index, manifest, r.m, r.n, r.k).outcome == "hit" for r in picks.itertuples())
    assert (row["shapes"], row["tuned"], row["aiter has a row"]) == (9, 9, hits)
    assert row["aiter lacks, tuned"] == 9 - hits


def test_compare_names_a_changed_pick(tuned, tmp_path):
    from f4pipe.compare import compare_sets

    _, frame = tuned
    other = frame.copy()
    first = other.index[other["picked"]][0]
    shape = other.loc[first, ["m", "n", "k"]]
    alt = other[
        (other[["m", "n", "k"]] == shape.values).all(axis=1)
        & other["safe"]
        & (other["kernel"] != other.loc[first, "kernel"])
    ].index[0]
    other.loc[first, "picked"], other.loc[alt, "picked"] = False, True
    c = compare_sets(_result_set(tmp_path / "a", frame), _result_set(tmp_path / "b", other))
    assert c.tuned_picks == 1 and not c.differs  # predicted: not a verdict
    (line,) = [x for x in c.summary_lines() if x.startswith("  changed: ")]
    assert f"{shape['m']}x{shape['n']}x{shape['k']}" in line
    # the changes card: counted in its headline, named in its summary
    from f4pipe.compare.baseline import comparison_record
    from f4pipe.report.changes import changes_section

    baseline = {"aiter_id": "old", "archive": "old.tar.gz", "label": "old"}
    sec = changes_section(comparison_record(c, baseline))
    assert sec.headline.endswith("1 tuned picks changed") and sec.state == "ok"
    assert line in next(iter(sec.code.values()))


def test_emulation_refutes_a_pick(f4gemm_dir, tmp_path):
    """256x256 split 3 at K=2048 (one 256-block per part) reads past a buffer on the emulator,
    split 2 misses aiter's errRatio limit: the pick falls back to the fastest split that runs
    within it, and the refuted candidates say why."""
    shapes = tmp_path / "pinned.csv"
    shapes.write_text(
        "name,M,N,K,kernel\np,32,256,2048,f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256\n"
    )
    out, table = tmp_path / "t.csv", tmp_path / "tune.parquet"
    assert main(["tune", "--shapes", str(shapes), "-o", str(out), "--table", str(table),
                 "--co-dir", str(f4gemm_dir)]) == 0  # fmt: skip
    frame = pd.read_parquet(table).set_index("log2_k_split")
    # one run per edge class: M = 32 is a single partial tile row of 256x256, run as 16 rows
    assert frame.loc[3, "reason"].startswith("emulated at 16x256x2048: buffer_load")
    assert frame.loc[2, "reason"].startswith("emulated at 16x256x2048: errRatio")
    assert frame.loc[2, "us_pred"] < frame.loc[1, "us_pred"]  # faster, but refuted
    (row,) = pd.read_csv(out).itertuples()
    assert row.splitK == frame.index[frame["picked"]][0] and row.errRatio <= 0.05
    assert frame.loc[row.splitK, "safe"]


def test_a_gfx_keyed_release_gets_its_own_header(tuned, manifest, tmp_path):
    """A 2026 release's table has `gfx` first: the rows carry gfx950 and the 2026 lookup (keyed
    on gfx) hits them."""
    from f4pipe.aiter.lookup import AITER_2026
    from f4pipe.aiter.tuned import write_tuned
    from f4pipe.pipeline.tunedcsv import table_rows

    _, frame = tuned
    header = ("gfx", *A4W4_COLUMNS)
    path = tmp_path / "gfx.csv"
    write_tuned(path, header, table_rows(frame, frame["list"].iloc[0], manifest))
    table = pd.read_csv(path)
    assert tuple(table.columns) == header and set(table["gfx"]) == {"gfx950"}
    index = build_index({path.name: read_tuned(path)})
    assert index.rules is AITER_2026
    for r in frame[frame["picked"]].itertuples():
        assert lookup(index, manifest, r.m_low, r.n, r.k).kernel == r.kernel


def test_measured_times_join_their_own_candidate_only(tuned):
    """A GPU's bench rows fill us_measured of exactly their kernel, shape and split; rows the
    emulator predicted, or of a rebuilt variant, fill nothing."""
    from f4pipe.pipeline.tune import measured_us

    _, frame = tuned
    one = frame[frame["picked"]].iloc[0]
    key = {c: one[c] for c in ("kernel", "m", "n", "k", "log2_k_split")}
    bench = pd.DataFrame(
        [
            {**key, "variant": "original", "status": "measured", "us": 10.0},
            {**key, "variant": "original", "status": "measured", "us": 12.0},
            {**key, "variant": "rebuilt", "status": "measured", "us": 1.0},
            {**key, "variant": "original", "status": "predicted", "us": 2.0},
        ]
    )
    got = measured_us(frame, bench)
    assert got[one.name] == 11.0 and got.notna().sum() == 1
    assert measured_us(frame, None).isna().all()
