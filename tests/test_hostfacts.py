"""The release's own host code, read from the fetched source: the scale padding its shuffles
write (recognised by the writer's shape, its padding read from the source), the dispatch rule
and the launcher's checks; the K-tail verdict under that padding first; compare naming a
change of one. The pinned wheel is the real one; the other sources are git repositories made
here from the wheel's own files, changed as a later aiter revision changes them."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from aiter_host import in_e8m0_shuffle

from f4pipe.aiter.hostfacts import (
    DISPATCH,
    FP4_UTILS,
    GEMM_OP,
    LAUNCHER,
    QUANT_SHUFFLE,
    SCALE_SHUFFLE,
    WHEEL_META,
    facts_from_record,
)
from f4pipe.aiter.manifest import MANIFEST_NAME, manifest_text, read_manifest
from f4pipe.aiter.shaperules import k_tail_answers
from f4pipe.compare.hostfacts import host_fact_changes
from f4pipe.fetch import GIT_F4GEMM_PATH, PypiSource, fetch_aiter
from f4pipe.fetch.hostcode import wheel_host_facts
from f4pipe.fetch.wheel import ensure_wheel

BPRESHUFFLE_256 = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"


@pytest.fixture(scope="module")
def wheel() -> Path:
    return ensure_wheel(PypiSource())[0]


@pytest.fixture(scope="module")
def wheel_files(wheel: Path) -> dict[str, str]:
    """The wheel's host files by their git-tree paths."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        return {
            path: zf.read(m).decode()
            for path in (FP4_UTILS, GEMM_OP, LAUNCHER)
            for m in (path, WHEEL_META + path)
            if m in names
        }


def test_the_pinned_wheel_pads_scales_uninitialised_and_a_k_tail_says_so_first(
    wheel, manifest
) -> None:
    facts = facts_from_record(wheel_host_facts(wheel))
    shuffle = facts[SCALE_SHUFFLE]
    assert (shuffle.value, shuffle.where()) == ("arbitrary", f"{FP4_UTILS}:72")
    assert shuffle.words == "uninitialised scale padding (this release's e8m0_shuffle)"
    assert facts[QUANT_SHUFFLE].value == "driver, unpadded stride"  # before aiter PR 2900
    assert facts[DISPATCH].value == (
        "by kernelName; a name the manifest lacks is an error of the launcher"
    )
    entry = manifest.get(BPRESHUFFLE_256)
    line = k_tail_answers(entry, 64, 256, 320, facts)
    assert line.startswith(
        "K=320 (K % 256 = 64): uninitialised scale padding (this release's e8m0_shuffle) "
        f"[{FP4_UTILS}:72]: wrong; E8M0 1.0 scale padding, scale rows strided by the unpadded "
        "width (this release's _dynamic_mxfp4_quant_kernel_asm_layout)"
    )
    assert "; by padding: scale padding driver, K padding none: wrong" in line
    # M == 1 is safe under the driver's padding, but not under uninitialised bytes
    assert "e8m0_shuffle) [aiter/utility/fp4_utils.py:72]: wrong" in k_tail_answers(
        entry, 1, 256, 320, facts
    )


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    return subprocess.run([*cmd, *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def test_a_zero_filling_source_an_unknown_one_and_compare_naming_the_change(
    tmp_path, f4gemm_dir, wheel_files, manifest
) -> None:
    repo = tmp_path / "aiter"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    gfx950 = repo / GIT_F4GEMM_PATH
    gfx950.mkdir(parents=True)
    entry = read_manifest(f4gemm_dir).get(BPRESHUFFLE_256)
    shutil.copyfile(f4gemm_dir / entry.co_name, gfx950 / entry.co_name)
    (gfx950 / MANIFEST_NAME).write_text(manifest_text([entry]))
    wheel_like = _commit(repo, wheel_files, "the wheel's host code")
    fp4 = wheel_files[FP4_UTILS]
    zero = in_e8m0_shuffle(fp4, "torch.empty(", "torch.zeros(")
    by_id = wheel_files[GEMM_OP].replace('ck_config["kernelName"]', 'ck_config["kernelId"]')
    zero_filling = _commit(repo, {FP4_UTILS: zero, GEMM_OP: by_id}, "zero-filled, by id")
    odd_rows = in_e8m0_shuffle(zero, "255", "127")  # another row padding: no known version
    unknown = _commit(repo, {FP4_UTILS: odd_rows}, "rows padded to 128")

    def fetched(commit: str) -> dict:
        source = {"kind": "git", "url": repo.as_uri(), "rev": commit}
        return fetch_aiter(source, tmp_path / "resources").aiter.provenance()

    a, b, c = (fetched(commit) for commit in (wheel_like, zero_filling, unknown))
    facts = facts_from_record(b["source"]["host_facts"])
    assert facts[SCALE_SHUFFLE].words == "zero padding (this release's e8m0_shuffle)"
    assert k_tail_answers(entry, 64, 256, 320, facts).startswith(
        f"K=320 (K % 256 = 64): zero padding (this release's e8m0_shuffle) [{FP4_UTILS}:72]: safe"
    )
    odd = facts_from_record(c["source"]["host_facts"])[SCALE_SHUFFLE]
    assert odd.value == "unknown"
    assert odd.words == f"unknown: e8m0_shuffle of {FP4_UTILS}:72 is no version f4pipe knows"
    assert k_tail_answers(entry, 64, 256, 320, {SCALE_SHUFFLE: odd}).startswith(
        f"K=320 (K % 256 = 64): {odd.words}: every padding's verdict"
    )

    changed = host_fact_changes(a, b).set_index("fact")
    assert list(changed.index) == [DISPATCH, SCALE_SHUFFLE]
    assert changed.loc[SCALE_SHUFFLE, "A"].startswith("uninitialised scale padding")
    assert changed.loc[SCALE_SHUFFLE, "B"].startswith("zero padding (this release's")
    assert changed.loc[DISPATCH, "B"].startswith("a tuned row picks its asm kernel by kernelId")
    assert host_fact_changes(a, a).empty
