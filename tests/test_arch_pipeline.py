"""The main job on a git source that ships f4gemm for two architectures: gfx950's code objects
go through every stage, gfx1250's are listed and round-tripped, and the report, the archive and
the config's `architectures` say which ran where.

The source is a local git repository in aiter's layout (tests/gfx1250_objects.py): one real
gfx950 kernel, one gfx1250 kernel the test builds with the provisioned LLVM, gfx942's
header-only manifest. The GEMM stages and the sweeps are off: what is under test is which
architectures the DAG takes, not the emulator."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from gfx1250_objects import GFX1250_MANIFEST, KERNEL, build, git, two_architecture_repo
from workflow_run import KERNELS, TEST_CONFIG, snakemake

from f4pipe.fetch.sources import git_id

STAGES_OFF = {
    "verify": {"activate": False, "matrix": "smoke"},
    "splitk": {"activate": False, "matrix": "smoke-splitk"},
    "bench": {"activate": False, "matrix": "smoke", "iters": 1},
    "safety": {"activate": False},
    "audit_tuned": {"activate": False},
}


@pytest.fixture(scope="module")
def two_arch_run(toolchain, f4gemm_dir, tmp_path_factory) -> tuple[Path, str]:
    """A working directory whose config names the two-architecture repository, and its id."""
    work = tmp_path_factory.mktemp("archs")
    tiny = build(toolchain, KERNEL, work / "f4_tiny.co")
    repo = two_architecture_repo(work / "aiter-src", f4gemm_dir, KERNELS[0], tiny)
    config = yaml.safe_load(TEST_CONFIG.read_text())
    config.pop("edits")
    config |= STAGES_OFF
    config["aiter"] = {"kind": "git", "url": repo.as_uri(), "rev": "main"}
    write_config(work, config)
    return work, git_id_of(repo)


def git_id_of(repo: Path) -> str:
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return git_id(commit)


def write_config(work: Path, config: dict) -> None:
    (work / "config.yaml").write_text(yaml.safe_dump(config))


def set_architectures(work: Path, value: object) -> None:
    config = yaml.safe_load((work / "config.yaml").read_text())
    config["architectures"] = value
    write_config(work, config)


def test_main_job_round_trips_every_architecture_and_reports_both(two_arch_run) -> None:
    work, aiter_id = two_arch_run
    results = work / "results" / aiter_id

    set_architectures(work, [])  # gfx950 alone: nothing of gfx1250 is made
    done = snakemake(work, "all")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (results / "architectures" / "gfx1250").exists()
    assert (results / "architectures").is_dir()
    assert "gfx1250" not in (results / "report" / "index.html").read_text()

    set_architectures(work, "all")  # the default: every architecture the source holds
    done = snakemake(work, "all")
    assert done.returncode == 0, done.stdout + done.stderr
    kernels = pd.read_parquet(results / "architectures" / "gfx1250" / "kernels.parquet")
    assert kernels[["kernel", "arch"]].values.tolist() == [["f4_tiny", "gfx1250"]]
    roundtrip = pd.read_parquet(results / "architectures" / "gfx1250" / "roundtrip.parquet")
    assert roundtrip["equivalent"].tolist() == [True]
    assert roundtrip["text_bytes_unexplained"].tolist() == [0]
    assert (results / "architectures" / "gfx1250" / "roundtrip" / "f4_tiny.s").is_file()
    # gfx950's tables hold gfx950's kernel only, as before
    assert pd.read_parquet(results / "roundtrip.parquet")["kernel"].tolist() == [KERNELS[0]]

    html = (results / "report" / "index.html").read_text()
    assert "gfx950: 1 of 1 code objects equivalent" in html
    assert "gfx1250: 1 of 1 code objects equivalent" in html
    assert "gfx1250: round trip only;" in html and "are gfx950 only" in html
    (archive,) = (work / "results" / "archives" / aiter_id).glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {Path(n).relative_to(Path(n).parts[0]).as_posix() for n in tar.getnames()}
    assert {f"architectures/gfx1250/{t}.parquet" for t in ("kernels", "roundtrip")} <= names


def test_an_architecture_the_source_lacks_is_one_line_and_exit_2(two_arch_run) -> None:
    work, aiter_id = two_arch_run
    set_architectures(work, ["gfx1250", "gfx1300"])
    failed = snakemake(work, "all")
    assert failed.returncode == 2, failed.stdout + failed.stderr
    assert failed.stderr.strip().splitlines()[-1] == (
        "f4pipe: job config_check failed: f4pipe config-check: error: architectures: the "
        f"fetched aiter resources/aiter/{aiter_id} holds no gfx1300 f4gemm directory (it holds "
        "gfx950, gfx1250); leave gfx1300 out of the config's `architectures` (or "
        "--architectures)"
    )
    assert "Traceback" not in failed.stderr


def test_an_update_of_gfx1250_alone_is_named_kernel_by_kernel(two_arch_run, toolchain) -> None:
    """Two revisions that differ only in hsa/gfx1250/f4gemm (f4_tiny rebuilt with another
    constant and a cluster of 2x4, f4_tiny2 added): compare and the second report's first card
    name both, and compare exits 1."""
    work, aiter_id = two_arch_run
    set_architectures(work, "all")
    assert snakemake(work, "all").returncode == 0
    repo = work / "aiter-src"
    gfx1250 = repo / "hsa" / "gfx1250" / "f4gemm"
    build(toolchain, KERNEL.replace("0x3f800000", "0x40000000"), gfx1250 / "f4_tiny.co")
    build(toolchain, KERNEL.replace("f4_tiny", "f4_tiny2"), gfx1250 / "f4_tiny2.co")
    (gfx1250 / "f4gemm.csv").write_text(
        GFX1250_MANIFEST.replace(",4,4,", ",2,4,")
        + "128,256,mxfp4,0,1,1,1,bf16,f4_tiny2,f4_tiny2.co\n"
    )
    for name in ("f4_tiny.s", "f4_tiny.o", "f4_tiny2.s", "f4_tiny2.o"):
        (gfx1250 / name).unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "gfx1250 rebuilt")
    config = yaml.safe_load((work / "config.yaml").read_text())
    config["aiter"]["rev"] = git(repo, "rev-parse", "HEAD")
    write_config(work, config)
    done = snakemake(work, "all")
    assert done.returncode == 0, done.stdout + done.stderr
    new_id = git_id_of(repo)

    a, b = (str(work / "results" / i) for i in (aiter_id, new_id))
    compared = subprocess.run(
        ["f4pipe", "compare", a, b], capture_output=True, text=True, cwd=work, check=False
    )
    assert compared.returncode == 1, compared.stdout + compared.stderr
    out = compared.stdout
    assert "gfx1250 code objects changed: 2" in out
    assert "  changed: gfx1250 f4_tiny (" in out and "  added: gfx1250 f4_tiny2 (" in out
    assert "  added: gfx1250 f4_tiny2\n" in out
    assert "  gfx1250 f4_tiny cluster: 4x4 -> 2x4" in out
    assert "code objects changed: 0" in out  # gfx950's: the same bytes
    as_json = subprocess.run(
        ["f4pipe", "compare", a, b, "--json", "-o", str(work / "cmp")],
        capture_output=True, text=True, cwd=work, check=False,
    )  # fmt: skip
    data = json.loads(as_json.stdout)
    assert data["differs"]
    assert data["architecture_cards"] == {"gfx1250": "1 kernels added, 1 changed"}
    counts = {k: v for k, v in data["verdict_changes"].items() if k.startswith("gfx1250")}
    assert counts == {
        "gfx1250 kernels": 1, "gfx1250 manifest": 1, "gfx1250 code objects": 2,
        "gfx1250 roundtrip": 1,  # f4_tiny2's round trip: only B has one
    }  # fmt: skip
    assert "gfx1250 code objects" in (work / "cmp" / "index.html").read_text()
    html = (work / "results" / new_id / "report" / "index.html").read_text()
    assert "gfx1250: 1 kernels added, 1 changed" in html
