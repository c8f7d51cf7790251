"""What a fetch leaves behind: the FetchResult, provenance.json, and the one atomic, locked copy
into place. Reading and re-hashing a fetched directory is f4pipe.aiter.aiterdir's."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from f4pipe import __version__
from f4pipe.aiter.aiterdir import (
    OTHER_ARCHITECTURES,
    PROVENANCE_SCHEMA,
    AiterDir,
    content_digest,
    listed_names,
)
from f4pipe.aiter.manifest import MANIFEST_NAME
from f4pipe.aiter.tables import copy_tables
from f4pipe.core.errors import CodeObjectError
from f4pipe.core.fsio import atomic_dir, sha256_file, write_json
from f4pipe.core.layout import F4GEMM_DIR, PROVENANCE_JSON, TUNED_TABLES_DIR, aiter_dir


@dataclass(frozen=True)
class FetchResult:
    aiter_id: str
    f4gemm_dir: Path  # resources/aiter/<aiter_id>/f4gemm
    provenance: Path  # resources/aiter/<aiter_id>/provenance.json
    fetched: bool  # False when an existing, verified copy was reused

    @property
    def aiter(self) -> AiterDir:
        """The fetched directory, to read its provenance and tables."""
        return AiterDir(self.f4gemm_dir.parent)


def fetch_result(aiter_dir: Path, fetched: bool) -> FetchResult:
    fetched_dir = AiterDir(aiter_dir)
    return FetchResult(
        aiter_id=aiter_dir.name,
        f4gemm_dir=fetched_dir.f4gemm,
        provenance=fetched_dir.provenance_json,
        fetched=fetched,
    )


def _copy_f4gemm(
    src_dir: Path, dest: Path, where: str
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Copy the manifest and the .co files it lists; hash the copies (what we keep is hashed).

    Returns (files, skipped): sha256 + size per copied name; names present but not copied.
    """
    directory, names = listed_names(src_dir, where)
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}
    for name in names:
        target = dest / name
        shutil.copyfile(directory / name, target)
        if name.endswith(".co"):
            with open(target, "rb") as fh:
                magic = fh.read(4)
            if magic != b"\x7fELF":
                raise CodeObjectError(
                    f"{where}: {name} is not an ELF code object (starts with "
                    f"{magic!r}; a git-lfs pointer or a truncated download?)"
                )
        files[name] = {"sha256": sha256_file(target), "size": target.stat().st_size}
    skipped = sorted(p.name for p in directory.iterdir() if p.name not in files)
    return files, skipped


def _copy_others(others: dict[str, tuple[Path, str]], tmp: Path) -> dict[str, Any]:
    """Copy each other architecture's f4gemm directory; arch -> where it came from and its files."""
    out: dict[str, Any] = {}
    for arch, (src, where) in sorted(others.items()):
        files, _ = _copy_f4gemm(src, tmp / arch / F4GEMM_DIR, where)
        out[arch] = {"f4gemm_dir": where, "files": files}
    return out


def _write_provenance(
    aiter_dir: Path,
    aiter_id: str,
    source: dict[str, Any],
    files: dict,
    skipped: list[str],
    tables: dict[str, dict[str, Any]],
    arch_record: dict[str, Any],
) -> None:
    """provenance.json; `architectures` only when the fetch took other architectures, so a
    gfx950-only fetch writes the record it always wrote."""
    others = {OTHER_ARCHITECTURES: arch_record} if arch_record else {}
    write_json(
        aiter_dir / PROVENANCE_JSON,
        {
            "schema": PROVENANCE_SCHEMA,
            "aiter_id": aiter_id,
            "source": source,
            "content_sha256": content_digest(
                files, tables, {arch: info["files"] for arch, info in arch_record.items()}
            ),
            "files": files,
            "skipped": skipped,
            "manifest_header": _manifest_header(aiter_dir / F4GEMM_DIR / MANIFEST_NAME),
            "tables": tables,
            **others,
            "f4pipe_version": __version__,
            "fetched_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )


def _manifest_header(csv_path: Path) -> str:
    """The manifest's header line as aiter spells it (tile_m or tile_M, ...): compare shows a
    change, since a loader keyed on one spelling breaks on the other."""
    with open(csv_path, encoding="utf-8", errors="replace") as fh:
        return fh.readline().strip()


def complete_tables(target: Path, configs_dir: Path | None, where: str) -> dict[str, Any]:
    """Add the tuned tables to a fetch recorded without them; the rewritten provenance."""
    record = AiterDir(target).provenance()
    tables = copy_tables(configs_dir, target / TUNED_TABLES_DIR)
    record.update(
        tables=tables,
        content_sha256=content_digest(
            record["files"],
            tables,
            {arch: info["files"] for arch, info in record.get(OTHER_ARCHITECTURES, {}).items()},
        ),
        manifest_header=_manifest_header(target / F4GEMM_DIR / MANIFEST_NAME),
    )
    record["source"]["tables_dir"] = where
    write_json(target / PROVENANCE_JSON, record)
    return record


def complete_source(target: Path, key: str, value: Any) -> dict[str, Any]:
    """Add one item to the source of a fetch recorded without it (the host facts of a wheel
    fetched before f4pipe read them); the rewritten provenance. No file changes."""
    record = AiterDir(target).provenance()
    record["source"][key] = value
    write_json(target / PROVENANCE_JSON, record)
    return record


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Serialise fetches of one id (parallel Snakemake jobs, pytest-xdist workers)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def fetch_into(
    resources_dir: Path,
    aiter_id: str,
    src_dir: Path,
    source: dict[str, Any],
    where: str,
    configs_dir: Path | None,
    others: dict[str, tuple[Path, str]] | None = None,
) -> FetchResult:
    """Copy `src_dir` (an f4gemm directory) and the tuned tables of `configs_dir` (the
    source's aiter/configs, None when it has none) into resources/aiter/<aiter_id> atomically;
    `others` (arch -> its f4gemm directory and where it is in the source) go to <arch>/f4gemm/,
    each file hashed as gfx950's are, and are listed in provenance under `architectures`."""
    target = aiter_dir(resources_dir, aiter_id)
    with atomic_dir(target) as tmp:
        files, skipped = _copy_f4gemm(src_dir, tmp / F4GEMM_DIR, where)
        tables = copy_tables(configs_dir, tmp / TUNED_TABLES_DIR)
        arch_record = _copy_others(others, tmp) if others else {}
        _write_provenance(tmp, aiter_id, source, files, skipped, tables, arch_record)
    return fetch_result(target, fetched=True)
