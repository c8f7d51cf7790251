"""Config values reach the shell quoted: a directory name with a space, `$`, a backtick and
`$(...)` is a name, never a command (workflow/rules: `{x:q}` for paths, shlex.quote for the
option strings the input functions build)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from f4pipe.aiter.manifest import MANIFEST_NAME, manifest_text, read_manifest
from f4pipe.core.layout import FACTS_DIR, table_file

REPO = Path(__file__).resolve().parents[1]
KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
HOSTILE = "a b$HOME `touch pwned-tick` $(touch pwned-sub)"


def test_hostile_paths_in_the_config_are_names_not_commands(f4gemm_dir: Path, tmp_path: Path):
    work = tmp_path / "work"
    odd = work / HOSTILE
    kernels = odd / "aiter" / "hsa" / "gfx950" / "f4gemm"
    kernels.mkdir(parents=True)
    manifest = read_manifest(f4gemm_dir)
    entry = manifest.get(KERNEL)
    shutil.copy(manifest.co_path(entry), kernels / entry.co_name)
    (kernels / MANIFEST_NAME).write_text(manifest_text([entry]))
    config = yaml.safe_load((REPO / ".test" / "config-pipeline.yaml").read_text())
    config.update(
        aiter={"kind": "local", "path": f"{HOSTILE}/aiter/hsa"},
        resources_dir=f"{HOSTILE}/resources",
        results_dir=f"{HOSTILE}/results",
        edits=[],
    )
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    cmd = [
        sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work),
        "--configfile", str(work / "config.yaml"), "--cores", "1",
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def snakemake(*args: str) -> None:
        proc = subprocess.run(
            [*cmd, *args], capture_output=True, text=True, timeout=600, env=env, cwd=work
        )
        assert proc.returncode == 0, proc.stderr[-3000:]

    # the aiter id is a fact a job finds (f4pipe.pipeline.facts): that job first, then the kernels
    # table of the id it found
    snakemake("all", "--until", "aiter_id")
    (fact,) = (odd / "results" / FACTS_DIR).glob("aiter-id-*.json")
    aiter_id = json.loads(fact.read_text())["aiter_id"]
    snakemake(f"{HOSTILE}/results/{aiter_id}/{table_file('kernels')}")
    assert not [p for p in tmp_path.rglob("pwned*")], "a config value ran as a command"
    (table,) = (odd / "results").glob("*/kernels.parquet")
    assert table.stat().st_size > 0
