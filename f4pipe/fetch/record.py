"""What a fetch leaves behind and how it is checked: the FetchResult, provenance.json, the
re-hash of a fetched directory against it, and the one atomic, locked copy into place."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from f4pipe import __version__
from f4pipe.errors import ChecksumError, CodeObjectError, FetchError, ManifestError
from f4pipe.fsio import atomic_dir, sha256_file, write_json
from f4pipe.layout import F4GEMM_DIR, PROVENANCE_JSON, aiter_dir
from f4pipe.manifest import MANIFEST_NAME, read_manifest
from f4pipe.tables import (
    TABLES_DIR,
    copy_tables,
)

PROVENANCE_SCHEMA = 1


# ---------------------------------------------------------------------------------------------
# Results, provenance, verification


@dataclass(frozen=True)
class FetchResult:
    aiter_id: str
    f4gemm_dir: Path  # resources/aiter/<aiter_id>/f4gemm
    provenance: Path  # resources/aiter/<aiter_id>/provenance.json
    fetched: bool  # False when an existing, verified copy was reused


def content_digest(
    files: Mapping[str, Mapping[str, Any]], tables: Mapping[str, Mapping[str, Any]] | None = None
) -> str:
    """sha256 over sorted `name\\tsha256\\n` lines: names the bytes, not where they came from.
    Tables count as `configs/<path>`, so a directory without tables keeps its digest."""
    named = {**files, **{f"{TABLES_DIR}/{rel}": v for rel, v in (tables or {}).items()}}
    lines = "".join(f"{name}\t{named[name]['sha256']}\n" for name in sorted(named))
    return hashlib.sha256(lines.encode()).hexdigest()


def tuned_tables(aiter_dir: Path) -> dict[str, Path]:
    """The tuned tables of a fetched aiter directory: {path below aiter/configs: file}.

    Empty when the source had none (a local f4gemm directory without its repository). A pypi
    or git fetch recorded before tables were fetched is completed first (see the module
    docstring), so a pipeline whose fetch predates this still audits its tables."""
    record = read_provenance(aiter_dir)
    source = _recorded_source(record)
    if "tables" not in record and source is not None:
        from f4pipe.fetch import fetch_aiter  # the package's entry point, which imports this

        fetch_aiter(source, Path(aiter_dir).parent.parent)
        record = read_provenance(aiter_dir)
    return {rel: aiter_dir / TABLES_DIR / rel for rel in sorted(record.get("tables", {}))}


def _recorded_source(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pinned source a provenance record was fetched from (None for a local directory,
    whose id names its content: a fetch with tables has another id)."""
    src = record.get("source", {})
    if src.get("kind") == "pypi":
        return {
            "kind": "pypi",
            "package": src["package"],
            "version": src["version"],
            "sha256": src["wheel_sha256"],
        }
    if src.get("kind") == "git":
        return {"kind": "git", "url": src["url"], "rev": src["commit"]}
    return None


def fetch_result(aiter_dir: Path, fetched: bool) -> FetchResult:
    return FetchResult(
        aiter_id=aiter_dir.name,
        f4gemm_dir=aiter_dir / F4GEMM_DIR,
        provenance=aiter_dir / PROVENANCE_JSON,
        fetched=fetched,
    )


def read_provenance(aiter_dir: Path) -> dict[str, Any]:
    """The provenance record of a fetched aiter directory; FetchError if absent or unreadable."""
    path = aiter_dir / PROVENANCE_JSON
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FetchError(
            f"{aiter_dir} exists but has no {PROVENANCE_JSON}: it was not written by `f4pipe "
            "fetch`; move it away and fetch again"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FetchError(
            f"{path} is unreadable ({exc}); delete {aiter_dir} and fetch again"
        ) from exc
    if not isinstance(record, dict) or record.get("schema") != PROVENANCE_SCHEMA:
        raise FetchError(
            f"{path} is not an f4pipe provenance record of schema {PROVENANCE_SCHEMA}; "
            f"delete {aiter_dir} and fetch again"
        )
    return record


def verify_aiter_dir(aiter_dir: Path) -> dict[str, Any]:
    """Re-hash every recorded file; ChecksumError on any difference. Returns the provenance.

    A copy that changed after fetching is never refetched silently: whoever changed it must
    decide whether to restore it or to discard the fetch.
    """
    record = read_provenance(aiter_dir)
    f4gemm = aiter_dir / F4GEMM_DIR
    redo = f"restore it, or delete {aiter_dir} and run `f4pipe fetch` again"
    for name, info in sorted(record["files"].items()):
        path = f4gemm / name
        if not path.is_file():
            raise ChecksumError(
                f"{path} is missing; {PROVENANCE_JSON} recorded sha256 {info['sha256']}: {redo}"
            )
        actual = sha256_file(path)
        if actual != info["sha256"]:
            raise ChecksumError(
                f"{path} changed after it was fetched: expected sha256 {info['sha256']} "
                f"(recorded in {PROVENANCE_JSON}), actual {actual}; {redo}"
            )
    extra = sorted(p.name for p in f4gemm.iterdir() if p.name not in record["files"])
    if extra:
        raise ChecksumError(
            f"{f4gemm} holds file(s) not recorded in {PROVENANCE_JSON}: {extra}; remove them "
            "(derived files belong under results/)"
        )
    for rel, info in sorted(record.get("tables", {}).items()):
        path = aiter_dir / TABLES_DIR / rel
        actual = sha256_file(path) if path.is_file() else None
        if actual != info["sha256"]:
            raise ChecksumError(
                f"{path} is missing or changed after it was fetched: expected sha256 "
                f"{info['sha256']} (recorded in {PROVENANCE_JSON}), actual {actual}; {redo}"
            )
    return record


def listed_names(src_dir: Path, where: str) -> tuple[Path, list[str]]:
    """(the f4gemm directory, the manifest + the .co names it lists) of `src_dir`.

    A listed .co that is missing is a ManifestError naming `where` (the wheel, the commit or
    the local directory), not the temporary directory it was unpacked into.
    """
    try:
        manifest = read_manifest(src_dir, check_files=False)
    except ManifestError as exc:
        raise ManifestError(f"{where}: {exc}") from exc
    missing = [e.co_name for e in manifest if not manifest.co_path(e).is_file()]
    if missing:
        more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
        raise ManifestError(
            f"{where}: {MANIFEST_NAME} lists {len(missing)} code object(s) that are not there: "
            f"{', '.join(missing[:5])}{more}; use a source whose f4gemm directory is complete"
        )
    return manifest.directory, [MANIFEST_NAME, *(e.co_name for e in manifest)]


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


def _write_provenance(
    aiter_dir: Path,
    aiter_id: str,
    source: dict[str, Any],
    files: dict,
    skipped: list[str],
    tables: dict[str, dict[str, Any]],
) -> None:
    write_json(
        aiter_dir / PROVENANCE_JSON,
        {
            "schema": PROVENANCE_SCHEMA,
            "aiter_id": aiter_id,
            "source": source,
            "content_sha256": content_digest(files, tables),
            "files": files,
            "skipped": skipped,
            "manifest_header": _manifest_header(aiter_dir / F4GEMM_DIR / MANIFEST_NAME),
            "tables": tables,
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
    record = read_provenance(target)
    tables = copy_tables(configs_dir, target / TABLES_DIR)
    record.update(
        tables=tables,
        content_sha256=content_digest(record["files"], tables),
        manifest_header=_manifest_header(target / F4GEMM_DIR / MANIFEST_NAME),
    )
    record["source"]["tables_dir"] = where
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
) -> FetchResult:
    """Copy `src_dir` (an f4gemm directory) and the tuned tables of `configs_dir` (the
    source's aiter/configs, None when it has none) into resources/aiter/<aiter_id> atomically."""
    target = aiter_dir(resources_dir, aiter_id)
    with atomic_dir(target) as tmp:
        files, skipped = _copy_f4gemm(src_dir, tmp / F4GEMM_DIR, where)
        tables = copy_tables(configs_dir, tmp / TABLES_DIR)
        _write_provenance(tmp, aiter_id, source, files, skipped, tables)
    return fetch_result(target, fetched=True)
