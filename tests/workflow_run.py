"""Running the real Snakefile in a scratch directory: the helpers the workflow tests share
(tests/test_pipeline.py, test_cluster.py, test_update.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from f4pipe.aiter.manifest import MANIFEST_NAME, manifest_text, read_manifest

REPO = Path(__file__).resolve().parents[1]
KERNELS = ("f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128", "f4gemm_bf16_per1x32Fp4_BpreShuffle_64x128")


def make_local_aiter(f4gemm_dir: Path, dest: Path, names: tuple[str, ...]) -> Path:
    """An aiter-like tree (<dest>/hsa/gfx950/f4gemm) holding only `names`."""
    manifest = read_manifest(f4gemm_dir)
    target = dest / "hsa" / "gfx950" / "f4gemm"
    target.mkdir(parents=True)
    entries = [manifest.get(n) for n in names]
    for e in entries:
        shutil.copy(manifest.co_path(e), target / e.co_name)
    (target / MANIFEST_NAME).write_text(manifest_text(entries))
    return dest / "hsa"


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
        "--configfile", str(workdir / "config.yaml"), "--cores", "2", *args,
    ]  # fmt: skip
    # The rules call `f4pipe`: put this interpreter's scripts directory first on PATH.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)


def write_nop_edit(f4gemm_dir: Path, dest: Path, toolchain) -> Path:
    """A semantics-keeping hand edit: an s_nop right after the kernel's entry label."""
    from f4pipe.codeobj.co2asm import co2asm

    kernel = read_manifest(f4gemm_dir).get(KERNELS[0])
    asm = co2asm(f4gemm_dir / kernel.co_name, toolchain)
    edited = asm.replace(f"{kernel.symbol}:\n", f"{kernel.symbol}:\n\ts_nop 0\n", 1)
    assert edited != asm
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(edited)
    return dest


#: The test's configuration: a file under .test/ (the snakemake-workflows convention).
TEST_CONFIG = REPO / ".test" / "config-pipeline.yaml"


def use_config(workdir: Path, **changes: object) -> dict:
    """.test/config-pipeline.yaml as workdir/config.yaml, with `changes` (top-level keys) made
    as a user edits a config; the config written."""
    config = {**yaml.safe_load(TEST_CONFIG.read_text()), **changes}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    return config
