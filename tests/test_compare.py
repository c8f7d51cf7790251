"""Compare two real result sets: the wheel's kernels vs a local copy with one kernel edited and
reassembled (one instruction changed)."""

from __future__ import annotations

import json
import shutil
import tarfile

from resultsets import EDIT_FROM, EDIT_TO, EDITED, SPLITK_KERNEL

from f4pipe.cli import main as cli_main
from f4pipe.compare import compare_sets, open_result_set
from f4pipe.compare.asmfacts import (
    descriptor_directives,
    fact_changes,
    header_facts,
    instruction_diff,
    metadata,
)
from f4pipe.core.layout import table_file
from f4pipe.core.schemas import SPLITK, write_rows
from f4pipe.pipeline.archive import create_archive, tarball_bytes
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.report.render import short_kernel


def test_edited_kernel_is_found(result_sets):
    a, b = ResultSet.load(result_sets["A"]), ResultSet.load(result_sets["B"])
    c = compare_sets(a, b)
    assert c.differs
    (change,) = c.code_objects  # only the edited kernel's bytes changed
    assert change.kernel == EDITED and change.change == "changed"
    ka, kb = (rs.table("kernels").set_index("kernel").loc[EDITED, "sha256"] for rs in (a, b))
    assert (change.sha_a, change.sha_b) == (ka, kb) and ka != kb
    assert change.insns_a == change.insns_b  # one instruction replaced, none added
    assert change.asm_lines_changed == 2  # one line out, one line in
    assert f"-\t{EDIT_FROM.strip()}" in change.asm_diff
    assert f"+\t{EDIT_TO.strip()}" in change.asm_diff
    assert change.descriptor == []  # the edit left the kernel descriptor alone
    # both sets still round-trip: no verdict changed
    assert len(c.roundtrip) == 0
    # the edited kernel now fails on the emulator, original and rebuilt alike
    verify = c.gemm["verify"]
    assert set(verify["kernel"]) == {short_kernel(EDITED)}
    assert set(verify["variant"]) == {"original", "rebuilt"}
    assert set(verify["status"]) == {"passed -> failed"}
    assert len(c.gemm["splitk"]) == 0  # the splitK kernel was not touched
    assert c.throughput is None  # no set measured throughput
    assert short_kernel(SPLITK_KERNEL) not in set(verify["kernel"])


def test_a_set_equals_its_archive(result_sets, tmp_path):
    tarball = create_archive(result_sets["A"], tmp_path)
    with open_result_set(result_sets["A"]) as a, open_result_set(tarball) as archived:
        c = compare_sets(a, archived)
        assert not c.differs and c.code_objects == []
        assert c.summary_lines()[2] == "code objects changed: 0"


def test_cli_compare_archive_with_directory(result_sets, tmp_path, capsys):
    assert cli_main(["archive", str(result_sets["A"]), "-o", str(tmp_path / "archives")]) == 0
    (tarball,) = (tmp_path / "archives").iterdir()
    capsys.readouterr()
    out_dir = tmp_path / "cmp"
    argv = ["compare", str(tarball), str(result_sets["B"]), "-o", str(out_dir)]
    assert cli_main(argv) == 1  # a verdict input changed
    text = capsys.readouterr().out
    assert f"changed: {EDITED} (instructions " in text and "code objects changed: 1" in text
    assert "verify results changed: 2" in text
    page = (out_dir / "index.html").read_text()
    summary = (out_dir / "summary.md").read_text()
    assert short_kernel(EDITED) in page and "passed -&gt; failed" in page
    assert EDIT_TO.strip() in summary and "not measured in both sets" in summary
    # identical sets: exit 0 (--exit-code is still accepted)
    assert cli_main(["compare", str(tarball), str(result_sets["A"]), "--exit-code"]) == 0
    capsys.readouterr()
    assert cli_main(["compare", str(tarball), str(result_sets["B"]), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["differs"] is True and out["verdict_changes"]["code objects"] == 1
    assert out["verdict_changes"]["verify"] == 2 and out["verdict_changes"]["manifest"] == 0


def test_measured_throughput_deltas(result_sets, tmp_path):
    timed = result_sets["timed"]
    with open_result_set(timed) as a, open_result_set(timed) as b:
        c = compare_sets(a, b)
    assert c.throughput is not None and len(c.throughput) == 2
    assert list(c.throughput["ratio B/A (TFLOP/s)"]) == [1.0, 1.0]
    assert cli_main(["compare", str(timed), str(timed), "-o", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c" / "throughput_ratio.png").read_bytes().startswith(b"\x89PNG")


def test_a_slower_b_is_judged_against_the_noise_and_fails_compare(result_sets, tmp_path, capsys):
    """The timed set's measured rows given 100 launch times with 1 % noise (A), and the same
    times 30 % slower (B): reported as a regression, exit 1; A against itself is within
    noise, exit 0."""
    import numpy as np

    from f4pipe.core.schemas import BENCH, read_table

    noise = 1 + 0.01 * np.random.default_rng(7).standard_normal(100)

    def with_times(name: str, factor: float, gpu: str = "0123456789abcdef"):
        target = tmp_path / name
        shutil.copytree(result_sets["timed"], target)
        path = target / table_file("bench")
        rows = read_table(path, BENCH).to_pylist()
        for r in rows:
            if r["status"] == "measured":
                r["launch_us"] = [float(x) for x in 10.0 * factor * noise]
                r["us"] = float(np.median(r["launch_us"]))
                r["tflops"] = 2.0 * r["m"] * r["n"] * r["k"] / r["us"] / 1e6
                r["device_fingerprint"] = gpu
        write_rows(path, rows, BENCH)
        return target

    a, b = with_times("a", 1.0), with_times("b", 1.3)
    assert cli_main(["compare", str(a), str(a)]) == 0
    assert "0 slower, 0 faster, 0 not judged" in capsys.readouterr().out
    assert cli_main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "2 slower" in out and "+30.0 % SLOWER" in out
    # another GPU: listed, not judged, unless asked
    other = with_times("other", 1.3, gpu="fedcba9876543210")
    assert cli_main(["compare", str(a), str(other)]) == 0
    assert "2 not judged (2 from different machines" in capsys.readouterr().out
    assert cli_main(["compare", str(a), str(other), "--across-machines"]) == 1
    assert "SLOWER (threshold 3.0 %) ACROSS MACHINES" in capsys.readouterr().out
    assert cli_main(["compare", str(a), str(b), "--floor-pct", "40"]) == 0  # 30 % < 40 %
    capsys.readouterr()
    cli_main(["compare", str(a), str(b), "--json"])
    (run, *_) = json.loads(capsys.readouterr().out)["throughput"]
    assert run["tflops A lo"] < run["tflops A"] < run["tflops A hi"]  # its 95 % interval
    assert run["ratio lo"] < run["ratio B/A (TFLOP/s)"] < run["ratio hi"]


def test_tampered_archive_is_refused(result_sets, tmp_path, capsys):
    tarball = create_archive(result_sets["A"], tmp_path)
    top = tarball.name.removesuffix(".tar.gz")
    with tarfile.open(tarball, "r:gz") as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar}
    members["roundtrip.parquet"] += b"\0"
    tarball.write_bytes(tarball_bytes(top, members))
    assert cli_main(["compare", str(tarball), str(result_sets["B"])]) == 2
    err = capsys.readouterr().err
    assert "damaged archive" in err and "changed: roundtrip.parquet" in err


def test_an_archive_with_consistent_sums_but_no_json_provenance_is_exit_2(
    result_sets, tmp_path, capsys
):
    """The checksums agree (the file was rewritten before they were taken), but the member
    compare reads is not JSON: one error naming it, not an internal error."""
    from f4pipe.pipeline.archive import PROVENANCE_NAME, SUMS_NAME, sums_text

    tarball = create_archive(result_sets["A"], tmp_path)
    top = tarball.name.removesuffix(".tar.gz")
    with tarfile.open(tarball, "r:gz") as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar}
    members[PROVENANCE_NAME] = b"{not json"
    del members[SUMS_NAME]
    members[SUMS_NAME] = sums_text(members).encode()
    tarball.write_bytes(tarball_bytes(top, members))
    assert cli_main(["compare", str(tarball), str(result_sets["B"])]) == 2
    err = capsys.readouterr().err
    assert PROVENANCE_NAME in err and "not a JSON provenance record" in err


def test_descriptor_directives_parse_co2asm_blocks(result_sets):
    asm = (result_sets["A"] / "roundtrip" / f"{EDITED}.s").read_text()
    fields = descriptor_directives(asm)
    symbol = ResultSet.load(result_sets["A"]).table("kernels").set_index("kernel").loc[EDITED]
    assert fields[f"{symbol['symbol']}.amdhsa_kernarg_size"].isdigit()
    assert len(fields) > 20


def test_fact_changes_name_code_object_version_abi_metadata_and_args(result_sets):
    """The facts an update changed between aiter revisions (cov 5 -> 6, a new kernarg) are
    named, read back from a real co2asm .s."""
    new = (result_sets["A"] / "roundtrip" / f"{EDITED}.s").read_text()
    assert header_facts(new) == {
        "target": "amdgcn-amd-amdhsa--gfx950",
        "code_object_version": "6",
        "elf_abi_version": "4",
    }
    size = metadata(new)["amdhsa.kernels"][0][".kernarg_segment_size"]
    old = new.replace(".amdhsa_code_object_version 6", ".amdhsa_code_object_version 5", 1)
    old = old.replace(f".kernarg_segment_size: {size}", f".kernarg_segment_size: {size - 4}", 1)
    assert old != new
    facts = fact_changes(old, new)
    assert "code_object_version: 5 -> 6" in facts and "elf_abi_version: 3 -> 4" in facts
    assert any(f.endswith(f"kernarg_segment_size: {size - 4} -> {size}") for f in facts)
    assert len(facts) == 3
    assert instruction_diff(old, new).summary().startswith("+0 -0 ~0 instructions")


def test_two_sets_whose_stage_ran_no_case_compare(result_sets, tmp_path):
    """A stage table with no rows (none of a set's kernels can split K, so splitk ran nothing)
    in both sets is no change, not a failed merge of two empty string columns (pandas 3)."""
    copies = []
    for name in ("A", "A2"):
        copy = tmp_path / name / result_sets["A"].name
        shutil.copytree(result_sets["A"], copy)
        write_rows(copy / table_file("splitk"), [], SPLITK)
        copies.append(copy)
    a, b = (ResultSet.load(c) for c in copies)
    assert len(a.table("splitk")) == 0
    c = compare_sets(a, b)
    assert not c.differs and len(c.gemm["splitk"]) == 0


def _ktail_rows(keys: dict, verdicts: dict[tuple[str, str], str]) -> list[dict]:
    """Safety rows of one K-tail cell (32x128 at M=33 N=256 K=2176) under several paddings."""
    base = {
        **keys,
        "kernel": "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128",
        "tile_m": 32,
        "tile_n": 128,
        "bpreshuffle": True,
        "store_class": "guarded",
        "edge_class": "k%256",
        "m": 33,
        "n": 256,
        "k": 2176,
        "policy": "unsafe",
        "orders": "in-order",
        "order_dependent": False,
        "canary_damaged": 0,
        "races": 0,
        "race_detail": "",
        "detail": "",
        "static_d_bound": "",
        "static_n_guards": "",
        "static_n_bounded": True,
        "static_k_loop": "",
        "static_load_bound": "",
        "reproducer": "",
        "rule_safe": True,
        "agrees": True,
        **dict.fromkeys(("first_bad_row", "first_bad_col", "expected", "got")),
        **dict.fromkeys(("reused_from", "reuse_key")),
        "variant": "original",
    }
    return [
        {**base, "scale_pad": s, "k_pad": k, "verdict": v, "bad": 0 if v == "safe" else 7}
        for (s, k), v in verdicts.items()
    ]


def test_safety_cells_are_matched_by_their_padding(result_sets, tmp_path):
    """A K-tail shape runs under several paddings: compare matches each padding with itself
    (no change between equal tables, in any row order) and names the padding that changed."""
    from f4pipe.compare.changes import safety_changes
    from f4pipe.core.schemas import KEY_FIELDS, SAFETY

    verify = ResultSet.load(result_sets["A"]).table("verify")
    keys = {f.name: verify[f.name].iloc[0] for f in KEY_FIELDS}
    before = {("driver", "none"): "wrong", ("zeros", "none"): "safe", ("zeros", "zeros"): "safe"}
    after = {**before, ("zeros", "zeros"): "wrong"}
    sets = {}
    for name, verdicts in (("A", before), ("A2", dict(reversed(before.items()))), ("B", after)):
        copy = tmp_path / name / result_sets["A"].name
        shutil.copytree(result_sets["A"], copy)
        write_rows(copy / table_file("safety"), _ktail_rows(keys, verdicts), SAFETY)
        sets[name] = ResultSet.load(copy)
    assert len(safety_changes(sets["A"], sets["A2"])) == 0
    changed = safety_changes(sets["A"], sets["B"])
    assert changed[["padding", "verdict"]].values.tolist() == [["zeros+0K", "safe -> wrong"]]
