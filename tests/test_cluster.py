"""The workflow on a cluster executor: snakemake-executor-plugin-cluster-generic, with a local
submit script (tests/cluster/submit.sh) that runs every job as a detached process of its own,
in a minimal environment, the way a batch system would.

It runs the smallest configuration that still has a job of every rule (one kernel, one hand
edit, verify, bench without a timing device, the safety sweep, the tuned-table audit, report and
archive) and proves that each job declares what it needs: its inputs and outputs (the jobs run
concurrently, ordered only by their declared dependencies), its threads and resources (the
submit command reads them from the job, and formatting fails for a job that lacks one), and
nothing from the submitting process (its environment is not passed on).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from workflow_run import KERNELS, make_local_aiter, snakemake, use_config, write_nop_edit

SUBMIT = Path(__file__).parent / "cluster" / "submit.sh"


def workflow_rules(workdir: Path) -> set[str]:
    """Every rule of the workflow but the target rule `all` (run by Snakemake itself)."""
    proc = snakemake(workdir, "--list-rules")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.strip() for line in proc.stdout.splitlines() if line.strip()} - {"all"}


@pytest.mark.slow  # a Snakemake process per job: about a minute of CPU
def test_every_job_runs_as_its_own_cluster_job(f4gemm_dir: Path, tmp_path: Path, toolchain):
    # .test/config-pipeline.yaml on one kernel (its aiter/hsa and edits/nop.s are made here),
    # splitK off: the same rule as verify, and none of KERNELS splits K; a job per kernel, as
    # the slurm profile sets it
    # tune on one small shape list, so its rule runs as a cluster job too
    (tmp_path / "tiny.csv").write_text("name,M,N,K\ntiny,32,256,512\n")
    config = use_config(
        tmp_path,
        splitk={"activate": False, "matrix": "smoke-splitk"},
        jobs_per="kernel",
        tune={"activate": True, "shapes": ["tiny.csv"]},
    )
    (nop,) = config["edits"]
    write_nop_edit(f4gemm_dir, tmp_path / nop["asm"], toolchain)
    assert (
        make_local_aiter(f4gemm_dir, tmp_path / "aiter", KERNELS[:1])
        == tmp_path / config["aiter"]["path"]
    )
    ledger = tmp_path / "ledger.txt"
    submit = (
        f"{SUBMIT} {ledger} {{rule}} threads={{threads}} mem_mb={{resources.mem_mb}} "
        "runtime={resources.runtime}"
    )
    proc = snakemake(
        tmp_path,
        "all",
        "--executor",
        "cluster-generic",
        "--cluster-generic-submit-cmd",
        submit,
        "--jobs",
        "4",
        "--default-resources",
        "mem_mb=2000",
        "runtime=30",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    jobs = [line.split() for line in ledger.read_text().splitlines()]
    assert {job[0] for job in jobs} == workflow_rules(tmp_path)
    for job in jobs:
        assert job[1:] == ["threads=1", "mem_mb=2000", "runtime=30"], job
    job_ids = re.findall(r"with external jobid 'local-(\d+)'", proc.stdout + proc.stderr)
    assert len(set(job_ids)) == len(jobs)
    (results,) = (p for p in (tmp_path / "results").iterdir() if p.name.startswith("local-"))
    assert (results / "verify" / "original" / f"{KERNELS[0]}.parquet").is_file()
    verify = pd.read_parquet(results / "verify.parquet")
    assert set(verify.variant) == {"original", "rebuilt", "edit-nop"}
    assert (verify.status == "passed").all()
    assert (results / "report" / "index.html").is_file()
