"""Which kernels aiter's tuner raced per tuned row (f4pipe.perf.history), from aiter's git
history: the committed record covers the pinned wheel's table, and the reader of that history
works on a real git repository."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

from f4pipe.aiter.manifest import read_manifest
from f4pipe.perf import fit
from f4pipe.perf.history import load_history, row_key

SCRIPT = Path(__file__).parents[1] / "scripts" / "aiter_tuning_history.py"
EARLY = "f4gemm_bf16_per1x32Fp4_BpreShuffle_192x256"


def _script():
    spec = importlib.util.spec_from_file_location("aiter_tuning_history", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_wheel_row_knows_the_kernels_its_tuner_raced(f4gemm_dir):
    manifest = read_manifest(f4gemm_dir)
    rows = fit.measured_rows(f4gemm_dir, manifest)
    rows = rows[rows["source"] == "aiter"]
    history = load_history()
    shuffled = {e.name for e in manifest if e.bpreshuffle}
    plain = {e.name for e in manifest if not e.bpreshuffle}
    raced = [history.raced(r.m, r.n, r.k, r.kernel, r.us) for r in rows.itertuples()]
    assert all(r is not None for r in raced)
    assert all(r.kernel in s for r, s in zip(rows.itertuples(), raced, strict=True))
    assert len(shuffled) == 34 and not any(s & plain for s in raced)  # the tuner's filter
    early = [s for s in raced if not shuffled <= s]
    assert len(early) == 30  # timed in July/August 2025, before aiter added 30 more tiles
    assert all(len(s) == 5 for s in early)


def test_a_row_timed_before_the_small_tiles_never_raced_them():
    history = load_history()
    shape = (8, 18432, 16384, EARLY, 59.6071)
    raced = history.raced(*shape)
    assert EARLY in raced
    assert "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128" not in raced
    assert history.recorded_on(*shape) == "2025-08-24"
    assert history.raced(8, 18432, 16384, EARLY, 59.6) is None  # another time: another row


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def _new_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "aiter"
    repo.mkdir()
    _git(repo, "init", "-q")
    return repo


def _commit(repo: Path, table: str, kernels: list[str], date: str, tile: str = "tile_m") -> None:
    """A commit of aiter: its tuned table, and code objects `kernels` (a name ending in
    "_plain" listed with bpreshuffle 0) in a manifest that also lists one absent kernel; `tile`
    spells the manifest's tile columns (tile_m until 2025-11-22, tile_M since)."""
    f4gemm = repo / "hsa" / "gfx950" / "f4gemm"
    f4gemm.mkdir(parents=True, exist_ok=True)
    n = tile.replace("m", "n").replace("M", "N")
    lines = [f"{tile},{n},splitK,bpreshuffle,knl_name,co_name"]
    for i, k in enumerate([*kernels, "absent"]):
        shuffled = 0 if k.endswith("_plain") else 1
        lines.append(f"{32 * (i + 1)},128,0,{shuffled},_ZN5aiter{len(k)}{k}E,{k}.co")
        if k != "absent":
            (f4gemm / f"{k}.co").write_bytes(b"\x7fELF")
    (f4gemm / "f4gemm_bf16_per1x32Fp4.csv").write_text("\n".join(lines) + "\n")
    (repo / "aiter" / "configs").mkdir(parents=True, exist_ok=True)
    (repo / "aiter" / "configs" / fit.MAIN_TABLE).write_text(table)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", date, f"--date={date}T12:00:00")


def test_the_history_reader_finds_each_row_first_commit_on_real_git(tmp_path):
    script = _script()
    repo = _new_repo(tmp_path)
    head = "cu_num,M,N,K,kernelId,splitK,us,kernelName\n"
    row_a = "256,8,1024,2048,0,0,10.5,_ZN5aiter3BigE\n"
    row_b = "256,8,4096,2048,0,0,7.25,_ZN5aiter5SmallE\n"
    _commit(repo, head + row_a, ["big", "big_plain"], "2025-08-01")
    _commit(repo, head + row_a + row_b, ["big", "big_plain", "small"], "2025-09-01")
    symbols = {"_ZN5aiter3BigE": "big", "_ZN5aiter5SmallE": "small"}
    first = script.first_commits(repo, symbols)
    commits = [c for c, _ in script.table_commits(repo)]
    assert first == {
        row_key(8, 1024, 2048, "big", 10.5): commits[0],
        row_key(8, 4096, 2048, "small", 7.25): commits[1],
    }
    # the tuner races the pre-shuffled kernels whose code object is there
    assert script.kernels_at(repo, commits[0]) == ["big"]
    assert script.kernels_at(repo, commits[1]) == ["big", "small"]


def test_the_tuner_s_kernels_are_read_from_either_spelling_of_the_manifest(tmp_path):
    script = _script()
    repo = _new_repo(tmp_path)
    head = "cu_num,M,N,K,kernelId,splitK,us,kernelName\n"
    _commit(repo, head, ["big", "big_plain"], "2025-10-01")
    row = "256,8,1024,2048,0,0,10.5,_ZN5aiter3BigE\n"
    _commit(repo, head + row, ["big", "big_plain", "small", "tiny"], "2025-12-01", tile="tile_M")
    commits = [c for c, _ in script.table_commits(repo)]
    assert script.kernels_at(repo, commits[0]) == ["big"]
    assert script.kernels_at(repo, commits[1]) == ["big", "small", "tiny"]


def test_held_back_rows_are_real_timings_the_calibration_has_not_seen(f4gemm_dir):
    """f4pipe/perf/heldback_rows.csv (scripts/aiter_heldback_rows.py): aiter's later timings of
    the wheel's code objects. None may be a calibration row, and its flags must say what the
    calibration and the tuning history say."""
    import pandas as pd

    manifest = read_manifest(f4gemm_dir)
    rows = fit.measured_rows(f4gemm_dir, manifest)
    aiter = rows[rows["source"] == "aiter"]
    calibrated = {row_key(r.m, r.n, r.k, r.kernel, r.us) for r in aiter.itertuples()}
    shapes = {(r.m, r.n, r.k) for r in aiter.itertuples()}
    held = pd.read_csv(fit.HELDBACK_PATH)
    assert len(held) > 900 and set(held["kernel"]) <= {e.name for e in manifest}
    assert not any(
        row_key(r.m, r.n, r.k, r.kernel, r.us) in calibrated
        for r in held.itertuples()
        if r.splitK == 0
    )
    assert list(held["shape_in_calibration"]) == [
        (r.m, r.n, r.k) in shapes for r in held.itertuples()
    ]
    # the tuner had every pre-shuffled kernel only from 2025-08-29 (aiter 1851a9984e) on
    assert not held[held["date"] < "2025-08-29"]["every_kernel_raced"].any()
    assert held[held["date"] > "2025-10-01"]["every_kernel_raced"].all()
