"""aiter's tuned-table lookup (f4pipe.aiter.lookup) against rules read from aiter's own code, on
hand-written tables whose answers are derived by hand, and on the pinned wheel's table."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from f4pipe.aiter.lookup import (
    AITER_2026,
    WHEEL_0_1_7,
    build_index,
    catchment,
    key_findings,
    lookup,
    padded_m,
    rules_for,
)
from f4pipe.aiter.manifest import MANIFEST_NAME
from f4pipe.aiter.tables import CONFIGS_PATH
from f4pipe.aiter.traffic import ShapeSpec, groups, read_shapes
from f4pipe.aiter.tuned import read_tuned
from f4pipe.cli import main
from f4pipe.core.schemas import COVERAGE, read_table
from f4pipe.fetch import GitSource, fetch_aiter

PREFIX = "f4gemm_bf16_per1x32Fp4_"
N, K = 7168, 4608
CK = "a4w4_blockscale_256x64x128x128_ck_example"
SHAPES_DIR = Path(__file__).resolve().parent.parent / "config" / "shapes"


def sym(manifest, tile: str) -> str:
    return manifest.get(PREFIX + tile).symbol


def table(tmp_path: Path, rows: list[tuple], name: str = "t.csv", gfx: bool = False):
    """A tuned table as aiter writes it, read back the way f4pipe reads every table."""
    cols = ["cu_num", "M", "N", "K", "kernelId", "splitK", "us", "kernelName"]
    df = pd.DataFrame(rows, columns=(["gfx"] if gfx else []) + cols)
    path = tmp_path / name
    df.to_csv(path, index=False)
    return read_tuned(path)


@pytest.fixture
def hand(tmp_path, manifest):
    """Rows at M = 1, 16, 64 (asm), 512 (asm, splitK 2), 3000 (CK); one for a cu_num-80 part
    and one for a cu_num no part has."""
    rows = [
        (256, 1, N, K, 0, 0, 5.0, sym(manifest, "BpreShuffle_32x128")),
        (256, 16, N, K, 0, 0, 6.0, sym(manifest, "BpreShuffle_64x128")),
        (256, 64, N, K, 0, 0, 7.0, sym(manifest, "BpreShuffle_96x128")),
        (256, 512, N, K, 0, 2, 9.0, sym(manifest, "BpreShuffle_256x256")),
        (256, 3000, N, K, 0, 0, 30.0, CK),
        (80, 1, N, K, 0, 0, 5.0, sym(manifest, "BpreShuffle_32x256")),
        (100, 1, N, K, 0, 0, 5.0, sym(manifest, "BpreShuffle_32x256")),
    ]
    return build_index({"t.csv": table(tmp_path, rows)})


# getPaddedM (csrc/py_itfs_cu/gemm_common.cu): every bucket boundary of gl=0 and gl=1
@pytest.mark.parametrize(
    ("m", "n", "gl", "want"),
    [
        (1, N, 0, 16),
        (16, N, 0, 16),
        (17, N, 0, 32),
        (255, N, 0, 256),
        (256, N, 0, 256),
        (257, N, 0, 288),
        (1024, N, 0, 1024),
        (1025, N, 0, 1088),
        (4096, N, 0, 4096),
        (4097, N, 0, 4224),
        (8193, N, 0, 8320),
        (1, N, 1, 1),
        (2, N, 1, 2),
        (3, N, 1, 4),
        (129, N, 1, 256),
        (4097, N, 1, 8192),
        (8192, N, 1, 8192),
        (8193, 4097, 1, 8192),
        (8193, 4096, 1, 16384),
        (60000, 7168, 1, 8192),
        (60000, 2048, 1, 65536),
        (77, N, None, 77),
    ],
)
def test_padded_m_follows_aiters_get_padded_m(m, n, gl, want):
    assert padded_m(m, n, gl) == want


@pytest.mark.parametrize(
    ("m", "outcome", "how", "pm", "kernel"),
    [
        (1, "hit", "exact", 1, "BpreShuffle_32x128"),
        (2, "hit", "padded (gl=0)", 16, "BpreShuffle_64x128"),  # 2 -> 16 before 2 -> 2
        (15, "hit", "padded (gl=0)", 16, "BpreShuffle_64x128"),
        (16, "hit", "exact", 16, "BpreShuffle_64x128"),
        (17, "miss", "heuristic", None, ""),  # 32 at gl=0 and at gl=1: no row
        (33, "hit", "padded (gl=1)", 64, "BpreShuffle_96x128"),  # 48 missing, then 64
        (49, "hit", "padded (gl=0)", 64, "BpreShuffle_96x128"),
        (64, "hit", "exact", 64, "BpreShuffle_96x128"),
        (65, "miss", "heuristic", None, ""),
        (300, "hit", "padded (gl=1)", 512, "BpreShuffle_256x256"),  # 320 missing, then 512
        (3000, "hit", "exact", 3000, CK),
        (2999, "miss", "heuristic", None, ""),  # 3008, then 4096: no row
    ],
)
def test_hits_and_misses_on_a_hand_table(hand, manifest, m, outcome, how, pm, kernel):
    r = lookup(hand, manifest, m, N, K)
    assert (r.outcome, r.how, r.padded_m) == (outcome, how, pm)
    if outcome == "hit":
        assert r.kernel == (kernel if kernel == CK else PREFIX + kernel)


def test_a_hit_carries_the_rows_split_and_a_ck_row_is_not_judged(hand, manifest):
    r = lookup(hand, manifest, 512, N, K)
    assert (r.log2_k_split, r.row.line, r.safe) == (2, 5, True)
    assert lookup(hand, manifest, 3000, N, K).safe is None


def test_the_key_is_the_devices_cu_count(hand, manifest):
    assert lookup(hand, manifest, 1, N, K, cu_num=80).kernel == PREFIX + "BpreShuffle_32x256"
    r = lookup(hand, manifest, 1, N, K, cu_num=128)
    assert r.outcome == "miss"  # no row for 128 CUs: the heuristic, with 128 CUs


@pytest.mark.parametrize(
    ("gfx", "words"), [("gfx942", "not supported on gfx942"), ("gfx90a", "no f4gemm code objects")]
)
def test_other_archs_never_reach_the_table(hand, manifest, gfx, words):
    r = lookup(hand, manifest, 1, N, K, gfx=gfx)
    assert r.outcome == "error" and words in r.how


def test_the_wheels_heuristic_takes_min_round_kernels_whose_tile_n_divides_n(hand, manifest):
    """M=300, N=7168 on 256 CUs (0.1.7: non-splitK, N % tile_N == 0): 96x128 needs
    ceil(300/96) x 56 = 224 workgroups (1 round), 64x128 280 (2 rounds), 32x256 280."""
    r = lookup(hand, manifest, 300, N, K, cu_num=255)  # no rows for 255 CUs
    names = {c.removeprefix(PREFIX) for c in r.candidates}
    assert (r.outcome, r.kernel) == ("miss", "")
    assert {"BpreShuffle_96x128", "BpreShuffle_64x256", "BpreShuffle_32x1024"} <= names
    assert not names & {"BpreShuffle_64x128", "BpreShuffle_32x128", "BpreShuffle_32x256"}
    assert not names & {"BpreShuffle_256x256", "BpreShuffle_128x384"}  # splitK; 7168 % 384
    assert r.safe is True


def test_the_wheels_heuristic_fails_where_no_tile_n_divides_n(hand, manifest):
    """DeepSeek's fused qkv_a projection, N = 1536 + 512 + 64 = 2112 = 16.5 x 128."""
    r = lookup(hand, manifest, 2, 2112, 7168)
    assert r.outcome == "error" and "cannot get heuristic kernel" in r.how


def test_the_2026_heuristic_takes_any_tile_but_128x512_off_its_multiple(tmp_path, manifest):
    rows = [("gfx950", 256, 1, N, K, 0, 0, 5.0, sym(manifest, "BpreShuffle_32x128"))]
    index = build_index({"t.csv": table(tmp_path, rows, gfx=True)})
    assert index.rules is AITER_2026
    r = lookup(index, manifest, 2, 2112, 7168)
    bpre = {e.name for e in manifest if e.bpreshuffle}
    assert set(r.candidates) == bpre - {PREFIX + "BpreShuffle_128x512"}  # all one round
    assert lookup(index, manifest, 2, 2048, 7168).candidates.count(PREFIX + "BpreShuffle_128x512")


def test_gfx_keyed_rows_serve_only_their_arch(tmp_path, manifest):
    rows = [("gfx942", 256, 1, N, K, 0, 0, 5.0, sym(manifest, "BpreShuffle_32x128"))]
    index = build_index({"t.csv": table(tmp_path, rows, gfx=True)})
    assert lookup(index, manifest, 1, N, K).outcome == "miss"


def test_an_unknown_asm_kernel_makes_aiter_raise(tmp_path, manifest):
    rows = [(256, 1, N, K, 0, 0, 5.0, "_ZN5aiter12f4gemm_goneE")]
    r = lookup(build_index({"t.csv": table(tmp_path, rows)}), manifest, 1, N, K)
    assert r.outcome == "error" and "not find kernel" in r.how


def test_exact_copies_are_dropped_but_a_duplicate_key_breaks_the_table(tmp_path, manifest):
    row = (256, 1, N, K, 0, 0, 5.0, sym(manifest, "BpreShuffle_32x128"))
    copies = build_index({"t.csv": table(tmp_path, [row, row])})
    assert copies.error == "" and lookup(copies, manifest, 1, N, K).outcome == "hit"
    other = (*row[:6], 4.0, sym(manifest, "BpreShuffle_64x128"))
    clash = build_index({"t.csv": table(tmp_path, [row, other])})
    assert "index must be unique" in clash.error
    assert lookup(clash, manifest, 1, N, K).outcome == "error"
    assert [f.kind for f in key_findings(clash)] == ["duplicate", "duplicate"]


def test_the_wheels_merge_keeps_the_fastest_row_across_cu_num(tmp_path, manifest):
    """0.1.7 dedups merged tables on (M, N, K): a faster 80-CU row from model_configs/
    deletes the main table's 256-CU row, so an MI355X misses that shape."""
    main_rows = [(256, 1, N, K, 0, 0, 5.0, sym(manifest, "BpreShuffle_32x128"))]
    model_rows = [(80, 1, N, K, 0, 0, 4.0, sym(manifest, "BpreShuffle_64x128"))]
    tables = {
        "a4w4_blockscale_tuned_gemm.csv": table(tmp_path, main_rows, "a.csv"),
        "model_configs/m_a4w4_blockscale_tuned_gemm.csv": table(tmp_path, model_rows, "b.csv"),
    }
    index = build_index(tables)
    assert index.rules is WHEEL_0_1_7 and index.error == ""
    assert [r.cu_num for r in index.dropped] == [256]
    assert lookup(index, manifest, 1, N, K).outcome == "miss"
    assert lookup(index, manifest, 1, N, K, cu_num=80).outcome == "hit"
    dup = next(f for f in key_findings(index) if f.kind == "duplicate")
    assert dup.row.cu_num == 256 and "kept: model_configs/" in dup.detail


def test_the_2026_merge_refuses_a_duplicate_key(tmp_path, manifest):
    row = ("gfx950", 256, 1, N, K, 0, 0, 5.0, sym(manifest, "BpreShuffle_32x128"))
    faster = (*row[:7], 4.0, sym(manifest, "BpreShuffle_64x128"))
    other_cu = ("gfx950", 128, 1, N, K, 0, 0, 4.0, sym(manifest, "BpreShuffle_64x128"))
    tables = {
        "a4w4_blockscale_tuned_gemm.csv": table(tmp_path, [row], "a.csv", gfx=True),
        "model_configs/m.csv": table(tmp_path, [other_cu], "b.csv", gfx=True),
    }
    assert build_index(tables).error == ""  # another cu_num is another key in 2026
    tables["model_configs/m.csv"] = table(tmp_path, [faster], "b.csv", gfx=True)
    index = build_index(tables)
    assert "raises RuntimeError" in index.error
    assert lookup(index, manifest, 1, N, K).outcome == "error"


def test_rules_follow_the_tables_schema(tmp_path, manifest):
    row = (256, 1, N, K, 0, 0, 5.0, sym(manifest, "BpreShuffle_32x128"))
    assert rules_for({"t": table(tmp_path, [row])}) is WHEEL_0_1_7
    assert rules_for({"t": table(tmp_path, [("gfx950", *row)], gfx=True)}) is AITER_2026


def test_catchment_counts_the_m_values_each_row_serves(hand):
    """Row 16: M 2-16 (gl=0); row 64: M 33-48 (gl=1) and 49-64; row 512: M 257-288 pad to
    288 (no row), then 512, as do 289-512; 1 and 3000 only themselves."""
    counts = {key[-3]: c for key, c in catchment(hand).items() if key[0] == 256}
    assert counts == {1: 1, 16: 15, 64: 32, 512: 256, 3000: 1}


def test_key_findings_name_rows_no_part_can_use(hand):
    found = {(f.kind, f.row.cu_num, f.row.m) for f in key_findings(hand)}
    assert ("no-part", 100, 1) in found
    assert ("unsupported-arch", 80, 1) in found
    assert ("exact-only", 256, 3000) in found
    assert not any(kind == "exact-only" and m in (1, 16, 64, 512) for kind, _, m in found)
    for f in key_findings(hand):
        assert f.reproducer.startswith(f"f4pipe audit-tuned --shape {f.row.m},{f.row.n},")


def test_groups_split_an_m_range_where_the_answer_changes(hand, manifest):
    spec = ShapeSpec("x", 1, 70, N, K, 0)
    found = groups(hand, manifest, spec, cu_num=256, gfx="gfx950")
    got = [(g.m_lo, g.m_hi, g.resolution.outcome) for g in found]
    assert got == [
        (1, 1, "hit"),
        (2, 16, "hit"),
        (17, 32, "miss"),
        (33, 64, "hit"),
        (65, 70, "miss"),
    ]


def test_groups_agree_with_one_lookup_per_m(manifest, f4gemm_dir):
    """The vectorised grouping never merges M values the lookup tells apart (real table)."""
    index = build_index(
        {"a": read_tuned(f4gemm_dir.parent / "configs" / "a4w4_blockscale_tuned_gemm.csv")}
    )
    for n, k in ((7168, 2304), (2112, 7168), (16384, 16384)):
        spec = ShapeSpec("", 1, 600, n, k, 0)
        for g in groups(index, manifest, spec, cu_num=256, gfx="gfx950"):
            for m in (g.m_lo, (g.m_lo + g.m_hi) // 2, g.m_hi):
                r = lookup(index, manifest, m, n, k)
                assert (r.row, r.candidates, r.safe, r.outcome) == (
                    g.resolution.row,
                    g.resolution.candidates,
                    g.resolution.safe,
                    g.resolution.outcome,
                )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name,M,N\nx,1,2\n", "columns ['K'] missing"),
        ("M,N,K\n5-1,7168,4608\n", "runs backwards"),
        ("M,N,K\n0,7168,4608\n", "must be >= 1"),
        ("M,N,K\n1,x,4608\n", "N is 'x'"),
        ("M,N,K\n", "no shapes"),
    ],
)
def test_a_bad_shape_list_is_one_clear_error(tmp_path, text, words, capsys, f4gemm_dir):
    path = tmp_path / "s.csv"
    path.write_text(text)
    assert main(["audit-tuned", "--co-dir", str(f4gemm_dir), "--shapes", str(path)]) == 2
    assert words in capsys.readouterr().err


def test_the_shipped_shape_lists_read(manifest):
    for path in sorted(SHAPES_DIR.glob("*.csv")):
        specs = read_shapes(path)
        assert specs and all(s.name for s in specs)


def test_audit_shapes_on_the_wheel_names_what_runs_and_what_fails(f4gemm_dir, tmp_path, capsys):
    out = tmp_path / "coverage.parquet"
    code = main(
        [
            "audit-tuned",
            "--co-dir",
            str(f4gemm_dir),
            "--shapes",
            str(SHAPES_DIR / "deepseek-v3.csv"),
            "-o",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 1  # N=2112 has no kernel in the wheel's heuristic
    assert "looked up as aiter 0.1.7 (wheel) does on gfx950 with 256 CUs" in text
    assert "tp8.attn.fused_qkv_a_proj M=2-4 N=2112 K=7168: ERROR heuristic finds no kernel" in text
    assert "tp8.attn.fused_qkv_a_proj M=5-8 N=2112 K=7168: hit" in text
    rows = read_table(out, COVERAGE).to_pylist()
    spec_points = sum(s.m_hi - s.m_lo + 1 for s in read_shapes(SHAPES_DIR / "deepseek-v3.csv"))
    assert sum(r["m_hi"] - r["m_lo"] + 1 for r in rows) == spec_points
    assert {r["outcome"] for r in rows} == {"hit", "miss", "error"}


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_git_source_with_2026_tables_is_looked_up_by_gfx_and_its_merge_refused(
    f4gemm_dir, manifest, tmp_path, capsys
):
    """A local aiter repository at a 2026-style revision (gfx column, a model_configs table
    duplicating a main-table key), fetched as a git source."""
    repo = tmp_path / "aiter"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "config", "user.email", "test@f4pipe")
    git(repo, "config", "user.name", "f4pipe test")
    kernels = repo / "hsa" / "gfx950" / "f4gemm"
    kernels.mkdir(parents=True)
    entry = manifest.get(PREFIX + "BpreShuffle_32x128")
    (kernels / entry.co_name).write_bytes(manifest.co_path(entry).read_bytes())
    lines = manifest.csv_path.read_text().splitlines()
    (kernels / MANIFEST_NAME).write_text(
        "\n".join([lines[0], *[x for x in lines[1:] if entry.co_name in x]]) + "\n"
    )
    configs = repo / CONFIGS_PATH / "model_configs"
    configs.mkdir(parents=True)
    head = "gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName\n"
    (repo / CONFIGS_PATH / "a4w4_blockscale_tuned_gemm.csv").write_text(
        head + f"gfx950,256,1,{N},{K},0,0,5.0,{entry.symbol}\n"
    )
    (configs / "dsv3_a4w4_blockscale_tuned_gemm.csv").write_text(
        head + f"gfx950,256,1,{N},{K},0,0,4.0,{entry.symbol}\n"
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "2026 tables")
    fetched = fetch_aiter(GitSource(repo.as_uri(), "main"), tmp_path / "resources")
    code = main(["audit-tuned", "--co-dir", str(fetched.f4gemm_dir), "--shape", f"1,{N},{K}"])
    text = capsys.readouterr().out
    assert code == 1
    assert "looked up as aiter 2026 (gfx-keyed) does" in text
    assert "update_config_files raises RuntimeError" in text
    assert "key findings: 1 duplicate" in text


def test_audit_rows_carry_what_the_lookup_makes_of_them(f4gemm_dir, tmp_path, capsys):
    """The wheel's asm rows at M=4 and M=8 are reached only by their own M (M=3 pads to 16,
    M=5-7 to 16 as well); the report lists them per table."""
    from f4pipe.core.schemas import AUDIT
    from f4pipe.report.safety import Section, _lookup_counts, _lookup_view

    out = tmp_path / "audit.parquet"
    main(["audit-tuned", "--co-dir", str(f4gemm_dir), "--no-emulate", "-o", str(out)])
    capsys.readouterr()
    df = read_table(out, AUDIT).to_pandas()
    exact = df[df["lookup_finding"] == "exact-only"]
    assert len(exact) and set(exact["reached_by_m"]) == {1}
    assert {4, 8} <= set(exact["m"])
    assert (df["reached_by_m"] >= 1).all()
    assert _lookup_counts(df) == (
        f", key findings of aiter's lookup on its asm rows: {len(exact)} exact-only"
    )
    sec = Section("audit", "t", "", "")
    _lookup_view(sec, df)
    (lines,) = sec.code.values()
    assert len(lines) == len(exact) and "exact-only (reached by 1 M value(s))" in lines[0]
