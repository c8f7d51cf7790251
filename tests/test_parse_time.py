"""Nothing works while the Snakefile is parsed (f4pipe.pipeline.facts): a dry run neither imports
hip-python nor touches the network, whatever the configuration asks for; the aiter id and the
device's meaning are found by the aiter_id and device jobs the dry run plans."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
#: A `hip` package that leaves a mark and fails on import, first on PYTHONPATH.
FAILING_HIP = """\
from pathlib import Path
Path(__file__).with_name("imported").touch()
raise RuntimeError("hip-python was imported while the Snakefile was parsed")
"""
#: Proxies that refuse every connection (port 9, discard), a git that may use only file://.
NO_NETWORK = {
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "GIT_ALLOW_PROTOCOL": "file",
    "PIP_NO_INDEX": "1",
}


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the default configuration: the pinned wheel, device auto
        {  # a branch of an unreachable repository, a job per kernel (bench's jobs need the
            # device fact), hip asked for by name
            "aiter": {"kind": "git", "url": "https://aiter.invalid/aiter.git", "rev": "main"},
            "jobs_per": "kernel",
            "device": "hip",
        },
    ],
    ids=["default", "git-branch"],
)
def test_a_dry_run_needs_no_device_and_no_network(tmp_path: Path, changes: dict) -> None:
    fake = tmp_path / "fake-site"
    (fake / "hip").mkdir(parents=True)
    (fake / "hip" / "__init__.py").write_text(FAILING_HIP)
    config = {**yaml.safe_load((REPO / "config" / "config.yaml").read_text()), **changes}
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    path = os.pathsep.join(p for p in (str(fake), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        **NO_NETWORK,
        "PYTHONPATH": path,
        "F4PIPE_CACHE": str(tmp_path / "empty-cache"),
    }
    cmd = [
        sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work),
        "--configfile", str(work / "config.yaml"), "--cores", "1", "-n", "all",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (fake / "hip" / "imported").exists(), "hip-python imported at parse time"
    out = proc.stdout + proc.stderr
    assert "checkpoint aiter_id:" in out and "checkpoint device:" in out
    assert not (tmp_path / "empty-cache").exists()  # nothing provisioned, nothing downloaded
