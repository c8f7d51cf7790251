"""Defaults for the commands people type: where the fetched aiter is, and the artifact keys.

After `snakemake all` or `f4pipe fetch`, a command run from the working directory should need no
pipeline flags. The code objects are found in this order: `--co-dir`, `$AITER_ASM_DIR`, then the
aiter that `config/config.yaml` names if it has been fetched under `resources/`, then the most
recently fetched aiter under `resources/aiter/`. The aiter id is the fetched directory's, else the
content id of a local directory (as `f4pipe fetch --source local` would name it); the toolchain id
comes from `results/<aiter-id>/toolchain.json` when the pipeline wrote one, else from the
toolchain f4pipe finds (or provisions).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from f4pipe.errors import F4PipeError, ManifestError
from f4pipe.fetch import (
    aiter_id_for,
    local_configs_dir,
    read_provenance,
    tuned_tables,
)
from f4pipe.layout import (
    AITER_RESOURCES_DIR,
    DEFAULT_RESOURCES_DIR,
    DEFAULT_RESULTS_DIR,
    F4GEMM_DIR,
    PROVENANCE_JSON,
    TOOLCHAIN_JSON,
    aiter_dir,
)
from f4pipe.manifest import find_f4gemm_dir
from f4pipe.schemas import ArtifactKeys
from f4pipe.tables import find_tables
from f4pipe.toolchain import find_toolchain, read_toolchain_id

DEFAULT_RESOURCES = Path(DEFAULT_RESOURCES_DIR)
DEFAULT_CONFIG = Path("config/config.yaml")
DEFAULT_RESULTS = Path(DEFAULT_RESULTS_DIR)


@dataclass(frozen=True)
class Located:
    co_dir: Path  # the f4gemm directory
    how: str  # which rule found it, for the one line a command prints
    aiter_dir: Path | None  # resources/aiter/<id> when the code objects are a fetched copy


def _fetched_dirs(resources: Path) -> list[Path]:
    root = resources / AITER_RESOURCES_DIR
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if (p / PROVENANCE_JSON).is_file()]


def _configured_dir(resources: Path, config: Path) -> Path | None:
    """resources/aiter/<id> of the config's source, if fetched and its id needs no network."""
    try:
        source = yaml.safe_load(config.read_text())["aiter"]
        if source.get("kind") == "git" and len(str(source.get("rev", ""))) != 40:
            return None  # a branch: naming its commit needs the network
        path = aiter_dir(resources, aiter_id_for(source))
    except (OSError, KeyError, TypeError, AttributeError, yaml.YAMLError, F4PipeError):
        return None
    return path if (path / PROVENANCE_JSON).is_file() else None


def fetched_aiter_dir(
    resources: Path = DEFAULT_RESOURCES, config: Path = DEFAULT_CONFIG
) -> Path | None:
    """The fetched aiter a hand-typed command should use, or None when nothing was fetched."""
    configured = _configured_dir(resources, config)
    if configured is not None:
        return configured
    fetched = _fetched_dirs(resources)
    if not fetched:
        return None
    return max(fetched, key=lambda p: (read_provenance(p).get("fetched_at", ""), p.name))


def locate_co_dir(co_dir: str | os.PathLike[str] | None = None) -> Located:
    """The f4gemm directory by the rules in the module docstring; ManifestError naming them."""
    if co_dir:
        found = find_f4gemm_dir(co_dir)
        return Located(found, f"--co-dir {co_dir}", _aiter_dir_of(found))
    env = os.environ.get("AITER_ASM_DIR")
    if env:
        found = find_f4gemm_dir(env)
        return Located(found, f"$AITER_ASM_DIR={env}", _aiter_dir_of(found))
    fetched = fetched_aiter_dir()
    if fetched is not None:
        return Located(fetched / F4GEMM_DIR, f"fetched {fetched}", fetched)
    raise ManifestError(
        "no code object directory: pass --co-dir DIR, set AITER_ASM_DIR (aiter's "
        "hsa/gfx950/f4gemm directory, or either parent), or run `f4pipe fetch` (or `snakemake "
        f"all`) here so that {DEFAULT_RESOURCES / AITER_RESOURCES_DIR}/ holds a fetched aiter"
    )


def _aiter_dir_of(f4gemm_dir: Path) -> Path | None:
    parent = Path(f4gemm_dir).resolve().parent
    return parent if (parent / PROVENANCE_JSON).is_file() else None


def aiter_id_of(located: Located) -> str:
    """The aiter id of the located code objects (a fetched copy's, else their content id)."""
    if located.aiter_dir is not None:
        return str(read_provenance(located.aiter_dir)["aiter_id"])
    return aiter_id_for({"kind": "local", "path": str(located.co_dir)})


def default_tables(located: Located) -> dict[str, Path]:
    """The tuned tables fetched with the located code objects, or, for code objects in an aiter
    checkout or installed wheel, the tables in its aiter/configs ({} when there are none)."""
    if located.aiter_dir is not None:
        return tuned_tables(located.aiter_dir)
    return find_tables(local_configs_dir(located.co_dir))


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
    it (or the one f4pipe finds, provisioning it if need be)."""
    aiter_id = aiter_id or aiter_id_of(located)
    if not toolchain_id:
        recorded = toolchain_json or toolchain_json_for(aiter_id)
        toolchain_id = read_toolchain_id(recorded) if recorded else find_toolchain().toolchain_id
    return ArtifactKeys(aiter_id, str(toolchain_id), device_id)
