"""Defaults for the commands people type: which aiter directory, and the artifact keys.

After `snakemake all` or `f4pipe fetch`, a command run from the working directory should need no
pipeline flags. The code objects are found in this order: `--co-dir`, `$AITER_ASM_DIR`, then the
aiter that `config/config.yaml` names if it has been fetched under `resources/` (when naming it
needs no network), then the most recently fetched aiter under `resources/aiter/`. What the
chosen directory is called and which tables go with it is f4pipe.aiter.aiterdir's. The toolchain id
comes from `results/<aiter-id>/toolchain.json` when the pipeline wrote one, else from the
toolchain f4pipe finds; naming a key never provisions one (an error names the options instead).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from f4pipe.aiter.aiterdir import AiterDir, aiter_id_of, fetched_under
from f4pipe.aiter.manifest import find_f4gemm_dir
from f4pipe.codeobj.toolchain import find_toolchain, read_toolchain_id
from f4pipe.core.errors import F4PipeError, ManifestError, ToolchainError
from f4pipe.core.layout import (
    AITER_RESOURCES_DIR,
    DEFAULT_RESOURCES_DIR,
    DEFAULT_RESULTS_DIR,
    TOOLCHAIN_JSON,
)
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.fetch.sources import offline_id

DEFAULT_RESOURCES = Path(DEFAULT_RESOURCES_DIR)
DEFAULT_CONFIG = Path("config/config.yaml")
DEFAULT_RESULTS = Path(DEFAULT_RESULTS_DIR)


@dataclass(frozen=True)
class Located:
    co_dir: Path  # the f4gemm directory
    how: str  # which rule found it, for the one line a command prints
    fetched: AiterDir | None  # when the code objects are a fetched copy


def _configured_dir(resources: Path, config: Path) -> AiterDir | None:
    """The config's source under `resources`, if fetched and its id needs no network."""
    try:
        aiter_id = offline_id(yaml.safe_load(config.read_text())["aiter"])
    except (OSError, KeyError, TypeError, yaml.YAMLError, F4PipeError):
        return None
    if aiter_id is None:
        return None
    found = AiterDir.at(resources, aiter_id)
    return found if found.is_fetched() else None


def fetched_aiter_dir(
    resources: Path = DEFAULT_RESOURCES, config: Path = DEFAULT_CONFIG
) -> AiterDir | None:
    """The fetched aiter a hand-typed command should use, or None when nothing was fetched."""
    configured = _configured_dir(resources, config)
    if configured is not None:
        return configured
    fetched = fetched_under(resources)
    if not fetched:
        return None
    return max(fetched, key=lambda d: (d.provenance().get("fetched_at", ""), d.path.name))


def locate_co_dir(co_dir: str | os.PathLike[str] | None = None) -> Located:
    """The f4gemm directory by the rules in the module docstring; ManifestError naming them."""
    if co_dir:
        found = find_f4gemm_dir(co_dir)
        return Located(found, f"--co-dir {co_dir}", AiterDir.holding(found))
    env = os.environ.get("AITER_ASM_DIR")
    if env:
        found = find_f4gemm_dir(env)
        return Located(found, f"$AITER_ASM_DIR={env}", AiterDir.holding(found))
    fetched = fetched_aiter_dir()
    if fetched is not None:
        return Located(fetched.f4gemm, f"fetched {fetched.path}", fetched)
    raise ManifestError(
        "no code object directory: pass --co-dir DIR, set AITER_ASM_DIR (aiter's "
        "hsa/gfx950/f4gemm directory, or either parent), or run `f4pipe fetch` (or `snakemake "
        f"all`) here so that {DEFAULT_RESOURCES / AITER_RESOURCES_DIR}/ holds a fetched aiter"
    )


def toolchain_json_for(aiter_id: str, results: Path = DEFAULT_RESULTS) -> Path | None:
    """results/<aiter-id>/toolchain.json when the pipeline wrote one."""
    path = results / aiter_id / TOOLCHAIN_JSON
    return path if path.is_file() else None


def artifact_keys(
    located: Located,
    device_id: str,
    *,
    aiter_id: str | None = None,
    toolchain_id: str | None = None,
    toolchain_json: str | os.PathLike[str] | None = None,
) -> ArtifactKeys:
    """The keys given, else the located aiter's id and the toolchain the pipeline recorded for
    it, else the toolchain f4pipe finds without provisioning one."""
    aiter_id = aiter_id or aiter_id_of(located.co_dir)
    if not toolchain_id:
        recorded = toolchain_json or toolchain_json_for(aiter_id)
        toolchain_id = read_toolchain_id(recorded) if recorded else _found_toolchain_id()
    return ArtifactKeys(aiter_id, str(toolchain_id), device_id)


def _found_toolchain_id() -> str:
    """The id of a toolchain already there. Provisioning one (a download) only to name a key
    would be the wrong side effect for a command that runs no LLVM tool."""
    try:
        return find_toolchain(provision=False).toolchain_id
    except ToolchainError:
        raise ToolchainError(
            "no LLVM toolchain here to name the rows' toolchain key by (naming a key never "
            "provisions one): pass --toolchain-id or --toolchain-json, or run `f4pipe "
            "toolchain` once to find or provision LLVM"
        ) from None
