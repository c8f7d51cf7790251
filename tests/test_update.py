"""The update flow of docs/aiter-update.md end to end, on a git history this test builds.

A file:// repository laid out as aiter's (hsa/gfx950/f4gemm, aiter/configs) gets two commits made
from the cached wheel's files. The second is an update as aiter ships them:
- one kernel changed (disassembled, one instruction edited, reassembled with f4pipe assemble),
- splitK flipped in the manifest for another kernel, the manifest header respelled (tile_M),
- the tuned table gains aiter's newer `gfx` first column and a row for another arch, and one row
  is retuned onto a kernel that is unsafe at its shape.
The real Snakefile runs on each commit (emulator, small matrices, no edge sweep); `f4pipe compare`
of the first run's archive with the second run's results must name every one of those changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from aiter_host import in_e8m0_shuffle
from cards import cards_of
from conftest import DEFAULT_SOURCE
from workflow_run import REPO, snakemake

from f4pipe.aiter.hostfacts import FP4_UTILS
from f4pipe.aiter.manifest import MANIFEST_NAME, read_manifest
from f4pipe.aiter.shaperules import is_safe
from f4pipe.aiter.tables import CONFIGS_PATH
from f4pipe.aiter.tuned import read_tuned
from f4pipe.codeobj.assemble import assemble
from f4pipe.codeobj.co2asm import co2asm
from f4pipe.core.layout import CHANGES_JSON
from f4pipe.fetch import GIT_F4GEMM_PATH, extract_wheel_file
from f4pipe.report.render import short_kernel

PREFIX = "f4gemm_bf16_per1x32Fp4_BpreShuffle_"
EDITED = f"{PREFIX}256x128"  # one instruction edited: it then computes wrong D
FLIPPED = f"{PREFIX}256x256"  # splitK 1 -> 0 in the manifest
KERNELS = (EDITED, FLIPPED)
EDIT_FROM = "v_cvt_pk_bf16_f32 v16, v8, v9\n"
EDIT_TO = "v_cvt_pk_bf16_f32 v16, v9, v8\n"
RETUNED = (128, 800, 5120)  # safe on 256x128, a write-write race on 256x256 (N % 256 != 0)
TABLE = "a4w4_blockscale_tuned_gemm.csv"


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def f4pipe(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command line as a user types it, in the workflow's directory."""
    cmd = [sys.executable, "-m", "f4pipe", *args]
    env = {k: v for k, v in os.environ.items() if k != "AITER_ASM_DIR"}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=900)


def tuned_rows(wheel_table: Path, manifest) -> pd.DataFrame:
    """Two safe asm rows per kernel from the wheel's table, one CK row, and the RETUNED shape
    on EDITED (where it is safe)."""
    df = read_tuned(wheel_table).drop(columns=["line"])
    picked = []
    for name in KERNELS:
        entry = manifest.get(name)
        mine = df[df["kernelName"] == entry.symbol]
        safe = [i for i, r in mine.iterrows() if is_safe(entry, r["M"], r["N"], r["K"])]
        picked += safe[:2]
    picked.append(df[~df["kernelName"].str.startswith("_ZN")].index[0])
    rows = df.loc[picked].copy()
    retuned = rows.iloc[[0]].copy()
    retuned[["M", "N", "K", "splitK"]] = [*RETUNED, 0]
    retuned["kernelName"] = manifest.get(EDITED).symbol
    assert is_safe(manifest.get(EDITED), *RETUNED)
    return pd.concat([rows, retuned], ignore_index=True)


@pytest.fixture(scope="module")
def history(f4gemm_dir: Path, toolchain, tmp_path_factory) -> tuple[str, str, str, int]:
    """(file:// url, first commit, second commit, asm rows of the first commit's table)."""
    work = tmp_path_factory.mktemp("aiter-history")
    repo = work / "aiter"
    git(work, "init", "-q", "-b", "main", str(repo))
    git(repo, "config", "user.email", "test@f4pipe")
    git(repo, "config", "user.name", "f4pipe test")
    wheel_table = extract_wheel_file(DEFAULT_SOURCE, work / TABLE)
    manifest = read_manifest(f4gemm_dir)
    kernels = repo / GIT_F4GEMM_PATH
    kernels.mkdir(parents=True)
    entries = [manifest.get(k) for k in KERNELS]
    names = {e.co_name for e in entries}
    for e in entries:
        (kernels / e.co_name).write_bytes(manifest.co_path(e).read_bytes())
    wheel_lines = manifest.csv_path.read_text().splitlines()  # the wheel's own spelling
    kept = [wheel_lines[0]] + [ln for ln in wheel_lines[1:] if ln.split(",")[-1] in names]
    (kernels / MANIFEST_NAME).write_text("\n".join(kept) + "\n")
    configs = repo / CONFIGS_PATH
    configs.mkdir(parents=True)
    rows = tuned_rows(wheel_table, manifest)
    rows.to_csv(configs / TABLE, index=False)
    fp4_utils = extract_wheel_file(DEFAULT_SOURCE, repo / FP4_UTILS, FP4_UTILS)  # host code
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "wheel's kernels")
    first = git(repo, "rev-parse", "HEAD")

    # the update: one kernel reassembled with one instruction changed
    co = kernels / f"{EDITED}.co"
    asm = co2asm(co, toolchain)
    assert EDIT_FROM in asm
    edited = work / f"{EDITED}.s"
    edited.write_text(asm.replace(EDIT_FROM, EDIT_TO, 1))
    assemble(edited, co, toolchain)
    # splitK flipped, header respelled as aiter's HEAD spells it
    text = (kernels / MANIFEST_NAME).read_text().splitlines()
    assert text[0].startswith("tile_m,tile_n,splitK")
    header = text[0].replace("tile_m,tile_n", "tile_M,tile_N")
    body = [ln.replace("256,256,1,1,", "256,256,0,1,") if FLIPPED in ln else ln for ln in text[1:]]
    (kernels / MANIFEST_NAME).write_text("\n".join([header, *body]) + "\n")
    # the tuned table: gfx column, a gfx942 row, the RETUNED row moved onto FLIPPED
    rows.insert(0, "gfx", "gfx950")
    last = rows.index[-1]
    rows.loc[last, "kernelName"] = manifest.get(FLIPPED).symbol
    other = rows.iloc[[0]].copy().assign(gfx="gfx942")
    pd.concat([rows, other], ignore_index=True).to_csv(configs / TABLE, index=False)
    # the host code: e8m0_shuffle zero-fills its padding
    fp4_utils.write_text(in_e8m0_shuffle(fp4_utils.read_text(), "torch.empty(", "torch.zeros("))
    git(repo, "commit", "-q", "-am", "retuned, splitK flipped, one kernel changed, zero-filled")
    asm_rows = int(rows["kernelName"].str.startswith("_ZN").sum())
    return repo.as_uri(), first, git(repo, "rev-parse", "HEAD"), asm_rows


def write_config(workdir: Path, url: str, rev: str) -> None:
    """.test/config-update.yaml pointed at one commit, as workdir/config.yaml."""
    config = yaml.safe_load((REPO / ".test" / "config-update.yaml").read_text())
    config["aiter"] = {"kind": "git", "url": url, "rev": rev}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture(scope="module")
def updated(history, tmp_path_factory) -> dict:
    """Both runs of the flow, and `f4pipe compare` of the first archive with the second set."""
    url, first, second, asm_rows = history
    workdir = tmp_path_factory.mktemp("update")
    runs = {}
    for rev in (first, second):
        write_config(workdir, url, rev)  # step 2: point the config at the release
        proc = snakemake(workdir, "all")  # step 3: run the pipeline
        assert proc.returncode == 0, proc.stderr[-4000:]
        runs[rev] = workdir / "results" / f"git-{rev[:12]}"
    (old,) = (workdir / "results" / "archives" / f"git-{first[:12]}").glob("*.tar.gz")
    out_dir = workdir / "results" / "compare" / "old__new"
    argv = ["compare", str(old), str(runs[second]), "-o", str(out_dir)]  # step 4
    proc = f4pipe(workdir, *argv)
    as_json = f4pipe(workdir, *argv[:3], "--json")
    return {
        "workdir": workdir,
        "old": runs[first],
        "new": runs[second],
        "proc": proc,
        "json": json.loads(as_json.stdout),
        "json_rc": as_json.returncode,
        "summary": (out_dir / "summary.md").read_text(),
        "asm_rows": asm_rows,
    }


@pytest.mark.slow
def test_git_source_gets_the_audit_with_findings(updated) -> None:
    old = pd.read_parquet(updated["old"] / "audit.parquet")
    n = updated["asm_rows"]
    assert set(old.csv) == {TABLE} and (old.status == "safe").all() and len(old) == n
    new = pd.read_parquet(updated["new"] / "audit.parquet")
    assert list(new.status).count("other-arch") == 1 and set(new.gfx) == {"gfx950", "gfx942"}
    (bad,) = new[new.status == "unsafe"].itertuples()
    assert (bad.m, bad.n, bad.k, bad.kernel) == (*RETUNED, FLIPPED)
    assert bad.emulated == "wrong" and bad.aiter_err_ratio == 0.0
    assert "write-write race across workgroups" in bad.finding
    assert "wrong in workgroup order in-order" in bad.finding
    assert "right in workgroup order reversed" in bad.finding
    html = (updated["new"] / "report" / "index.html").read_text()
    assert f"{TABLE}: {n} asm rows checked, 1 unsafe (emulated: 1 wrong), 1 rows for other" in html
    assert "aiter recorded: us " in html and "errRatio 0" in html


@pytest.mark.slow
def test_compare_names_every_change_of_the_update(updated) -> None:
    proc = updated["proc"]
    assert proc.returncode == 1, proc.stderr  # verdict inputs changed
    out = proc.stdout
    # the changed kernel: one instruction, same descriptor and metadata
    assert f"  changed: {EDITED} (instructions " in out
    assert "+0 -0 ~1 instructions" in out
    assert EDIT_TO.strip() in updated["summary"]
    # the manifest: splitK flipped, header respelled
    assert f"  {FLIPPED} splitk: yes -> no" in out
    assert "  (manifest CSV) header: tile_m,tile_n,splitK" in out and "tile_M,tile_N" in out
    # the source: commit and content digest
    assert "  source commit: " in out and "  content sha256: " in out
    # verdicts: the edited kernel fails now; splitK runs of the flipped kernel are gone
    short = short_kernel(EDITED)
    assert any(f"original {short} " in ln and "passed -> failed" in ln for ln in out.splitlines())
    assert "splitk results changed: 0" not in out
    # the tuned table: the retuned row newly unsafe, the gfx942 row added
    m, n, k = RETUNED
    assert f"changed NEWLY UNSAFE: {TABLE} {m}x{n}x{k}:" in out
    assert "other-arch" in out
    data = updated["json"]
    assert updated["json_rc"] == 1 and data["differs"] and data["newly_unsafe"] == 1
    counts = data["verdict_changes"]
    assert counts["code objects"] == 1 and counts["manifest"] == 2 and counts["audit"] == 2
    assert counts["verify"] >= 1 and counts["splitk"] >= 1 and counts["kernels"] == 0
    # the host code: e8m0_shuffle's padding, read from each commit's fp4_utils.py
    assert counts["host facts"] == 1
    assert "host facts changed (this release's host code): 1" in out
    assert (
        "  scale padding (e8m0_shuffle): uninitialised scale padding (this release's "
        "e8m0_shuffle) [aiter/utility/fp4_utils.py:72] -> zero padding (this release's "
        "e8m0_shuffle) [aiter/utility/fp4_utils.py:72]" in out
    )


@pytest.mark.slow
def test_the_new_sets_report_says_what_changed_since_the_old_archive(updated) -> None:
    """The main job's changes step, before the report: the second run compared its set with
    the first run's archive, the same comparison `f4pipe compare` made, and the report's first
    card says so; the first run had no archive of another aiter id to compare with."""
    assert json.loads((updated["old"] / CHANGES_JSON).read_text())["baseline"] is None
    record = json.loads((updated["new"] / CHANGES_JSON).read_text())
    data = updated["json"]
    assert record["baseline"]["aiter_id"] == updated["old"].name
    assert record["baseline"]["label"] == data["a"]
    for key in ("differs", "verdict_changes", "newly_unsafe", "regressions"):
        assert record[key] == data[key], key
    card = cards_of((updated["new"] / "report" / "index.html").read_text())[0]
    assert card["title"] == f"Changed since {updated['old'].name}" and card["state"] == "bad"
    total = sum(data["verdict_changes"].values())
    # the edited kernel and the one whose splitK flipped, named per architecture
    assert record["architectures"] == {"gfx950": "2 kernels changed"}
    assert card["headline"] == (
        f"gfx950: 2 kernels changed; {total} verdict inputs changed, 1 newly unsafe"
    )


@pytest.mark.slow
def test_standalone_commands_find_the_fetched_aiter(updated) -> None:
    """After the pipeline ran, audit-tuned and try need no flags (cwd = the workflow dir)."""
    workdir = updated["workdir"]
    proc = f4pipe(workdir, "audit-tuned", "--no-emulate")
    assert proc.returncode == 1, proc.stderr  # the second commit's retuned row
    assert f"{TABLE}:" in proc.stdout and "aiter recorded: us " in proc.stdout
    assert not list(workdir.glob("*.parquet"))  # no -o, no table written
    edit = workdir / "nop.s"
    asm = (updated["new"] / "roundtrip" / f"{FLIPPED}.s").read_text()
    symbol = read_manifest(updated["new"] / "variants" / "rebuilt").get(FLIPPED).symbol
    edit.write_text(asm.replace(f"{symbol}:\n", f"{symbol}:\n\ts_nop 0\n", 1))
    proc = f4pipe(workdir, "try", str(edit))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"-> {FLIPPED}" in proc.stdout


def test_audit_tuned_in_an_aiter_checkout(history, tmp_path: Path) -> None:
    """--co-dir in an aiter checkout: its aiter/configs tables are audited, no fetch needed."""
    url, _, _, asm_rows = history
    checkout = Path(url.removeprefix("file://"))
    proc = f4pipe(tmp_path, "audit-tuned", "--no-emulate", "--co-dir", str(checkout / "hsa"))
    assert proc.returncode == 1, proc.stderr  # the second commit is checked out
    assert f"1 table(s) ({TABLE})" in proc.stdout
    assert f"{asm_rows} asm row(s) checked, 1 unsafe by the rules" in proc.stdout
    assert "1 for other archs skipped" in proc.stdout
