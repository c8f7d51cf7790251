"""An aiter directory: where its code objects and tuned tables are, what it is called, and what
was recorded about it. Every module that needs one of these facts asks here.

There are two kinds of aiter directory:

- a *fetched* aiter, `resources/aiter/<aiter-id>/{f4gemm/, configs/, provenance.json}`, which
  only f4pipe.fetch writes (AiterDir). Its id, files and tables are the ones its provenance
  records, and `verify` re-hashes them.
- any other f4gemm directory: an aiter checkout, an installed wheel, a copy. Its id is its
  content, `local-<12 hex>`, the id `f4pipe fetch --source local` would give it. Its tables are
  the a4w4 tuned tables of the tree it sits in (configs_beside).

Reading never writes, fetches or touches the network. A pypi or git fetch recorded before f4pipe
fetched tuned tables (its provenance has no "tables") is reported as such, with the command that
completes it (`f4pipe fetch`). The reader never completes it on its own.

This module sits below f4pipe.fetch and f4pipe.cli.locate and above f4pipe.aiter.manifest and
f4pipe.aiter.tables: fetch writes what is read here, and locate chooses which directory a hand-typed
command uses.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from f4pipe.aiter.manifest import MANIFEST_NAME, find_f4gemm_dir, read_manifest
from f4pipe.aiter.tables import CONFIGS_PATH, find_tables
from f4pipe.arch.gfx950 import ARCH
from f4pipe.core.errors import ChecksumError, FetchError, ManifestError
from f4pipe.core.fsio import sha256_file
from f4pipe.core.layout import (
    AITER_RESOURCES_DIR,
    F4GEMM_DIR,
    PROVENANCE_JSON,
    TUNED_TABLES_DIR,
    aiter_dir,
)

PROVENANCE_SCHEMA = 1
#: The prefix of a content id: a directory named by its bytes, not by where it came from.
LOCAL_ID_PREFIX = "local-"
#: Sources whose fetch can add tables to a record made without them (a local id names its
#: content, tables included, so a local fetch with tables has another id).
COMPLETABLE_KINDS = ("pypi", "git")

FileRecord = dict[str, dict[str, Any]]  # name -> {"sha256", "size"}


@dataclass(frozen=True)
class AiterDir:
    """A fetched aiter, `<resources>/aiter/<aiter-id>/`."""

    path: Path

    @classmethod
    def at(cls, resources_dir: str | os.PathLike[str], aiter_id: str) -> AiterDir:
        return cls(aiter_dir(resources_dir, aiter_id))

    @classmethod
    def holding(cls, f4gemm_dir: str | os.PathLike[str]) -> AiterDir | None:
        """The fetched aiter whose f4gemm/ `f4gemm_dir` is, or None when it is not a fetch."""
        candidate = cls(Path(f4gemm_dir).resolve().parent)
        return candidate if candidate.is_fetched() else None

    @property
    def f4gemm(self) -> Path:
        return self.path / F4GEMM_DIR

    @property
    def configs(self) -> Path:
        return self.path / TUNED_TABLES_DIR

    @property
    def provenance_json(self) -> Path:
        return self.path / PROVENANCE_JSON

    def is_fetched(self) -> bool:
        return self.provenance_json.is_file()

    def provenance(self) -> dict[str, Any]:
        """The provenance record; FetchError if absent or unreadable."""
        path = self.provenance_json
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FetchError(
                f"{self.path} exists but has no {PROVENANCE_JSON}: it was not written by `f4pipe "
                "fetch`; move it away and fetch again"
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FetchError(
                f"{path} is unreadable ({exc}); delete {self.path} and fetch again"
            ) from exc
        if not isinstance(record, dict) or record.get("schema") != PROVENANCE_SCHEMA:
            raise FetchError(
                f"{path} is not an f4pipe provenance record of schema {PROVENANCE_SCHEMA}; "
                f"delete {self.path} and fetch again"
            )
        return record

    def aiter_id(self) -> str:
        return str(self.provenance()["aiter_id"])

    def tuned_tables(self) -> dict[str, Path]:
        """The tuned tables fetched with the code objects: {path below aiter/configs: file}.

        Empty when the source had none. A pypi or git fetch recorded before tables were fetched
        is a FetchError naming `f4pipe fetch`, which completes it: an empty answer would read as
        "this aiter has no tables"."""
        record = self.provenance()
        if "tables" not in record and record.get("source", {}).get("kind") in COMPLETABLE_KINDS:
            raise FetchError(
                f"{self.provenance_json} was written before f4pipe fetched aiter's tuned tables; "
                "run `f4pipe fetch` with its source again (or `snakemake all`), which adds them "
                "without touching the code objects"
            )
        return {rel: self.configs / rel for rel in sorted(record.get("tables", {}))}

    def verify(self) -> dict[str, Any]:
        """Re-hash every recorded file; ChecksumError on any difference. Returns the provenance.

        A copy that changed after fetching is never refetched silently: whoever changed it must
        decide whether to restore it or to discard the fetch.
        """
        record = self.provenance()
        _verify_files(self.f4gemm, record["files"], self.path)
        for arch, info in sorted(record.get(OTHER_ARCHITECTURES, {}).items()):
            _verify_files(self.arch_f4gemm(arch), info["files"], self.path)
        redo = f"restore it, or delete {self.path} and run `f4pipe fetch` again"
        for rel, info in sorted(record.get("tables", {}).items()):
            path = self.configs / rel
            actual = sha256_file(path) if path.is_file() else None
            if actual != info["sha256"]:
                raise ChecksumError(
                    f"{path} is missing or changed after it was fetched: expected sha256 "
                    f"{info['sha256']} (recorded in {PROVENANCE_JSON}), actual {actual}; {redo}"
                )
        return record

    def arch_f4gemm(self, arch: str) -> Path:
        """An architecture's f4gemm directory: gfx950's is f4gemm/, another's <arch>/f4gemm/."""
        return self.f4gemm if arch == ARCH else self.path / arch / F4GEMM_DIR

    def architectures(self) -> list[str]:
        """gfx950 and every other architecture the fetch took (provenance `architectures`)."""
        return [ARCH, *sorted(self.provenance().get(OTHER_ARCHITECTURES, {}))]


#: provenance.json's key for the f4gemm directories of architectures other than gfx950: arch ->
#: {"f4gemm_dir": where it came from, "files": sha256 + size per name}. Absent when the source
#: has none, so a gfx950-only fetch writes what it always wrote.
OTHER_ARCHITECTURES = "architectures"


def _verify_files(directory: Path, files: Mapping[str, Any], aiter_path: Path) -> None:
    """Re-hash the recorded files of one f4gemm directory; refuse unrecorded ones."""
    redo = f"restore it, or delete {aiter_path} and run `f4pipe fetch` again"
    for name, info in sorted(files.items()):
        path = directory / name
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
    extra = sorted(p.name for p in directory.iterdir() if p.name not in files)
    if extra:
        raise ChecksumError(
            f"{directory} holds file(s) not recorded in {PROVENANCE_JSON}: {extra}; remove "
            "them (derived files belong under results/)"
        )


def fetched_under(resources_dir: str | os.PathLike[str]) -> list[AiterDir]:
    """Every fetched aiter below `<resources_dir>/aiter/` (directories with a provenance)."""
    root = Path(resources_dir) / AITER_RESOURCES_DIR
    if not root.is_dir():
        return []
    found = (AiterDir(p) for p in sorted(root.iterdir()))
    return [d for d in found if d.is_fetched()]


# ---------------------------------------------------------------------------------------------
# Any f4gemm directory: its tables and its content id


def configs_beside(f4gemm_dir: str | os.PathLike[str]) -> Path | None:
    """The tuned tables' directory of the tree an f4gemm directory sits in, or None.

    A fetched aiter or a copy of one (`<dir>/f4gemm` beside `<dir>/configs`), an aiter checkout
    (`<root>/hsa/gfx950/f4gemm` beside `<root>/aiter/configs`) or an installed wheel
    (`<site>/aiter_meta/hsa/gfx950/f4gemm` beside `<site>/aiter/configs`)."""
    resolved = Path(f4gemm_dir).resolve()
    beside = AiterDir(resolved.parent)
    if beside.configs.is_dir() or beside.is_fetched():
        return beside.configs
    for ancestor in resolved.parents[:4]:
        if (ancestor / CONFIGS_PATH).is_dir():
            return ancestor / CONFIGS_PATH
    return None


def tuned_tables_of(f4gemm_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """The tuned tables that belong with an f4gemm directory: a fetched aiter's recorded ones,
    else the ones in the tree it sits in ({} when there are none)."""
    fetched = AiterDir.holding(f4gemm_dir)
    if fetched is not None:
        return fetched.tuned_tables()
    return find_tables(configs_beside(f4gemm_dir))


def listed_names(src_dir: Path, where: str) -> tuple[Path, list[str]]:
    """(the f4gemm directory, the manifest + the .co names it lists) of `src_dir`: the files an
    aiter directory's f4gemm/ holds and its content id names.

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
    return manifest.directory, [manifest.csv_path.name, *(e.co_name for e in manifest)]


def named_content(
    files: Mapping[str, Mapping[str, Any]],
    tables: Mapping[str, Any],
    others: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every file of an aiter's content by the name its digest gives it: the f4gemm directory's
    as they are, tables as `configs/<path>`, another architecture's (`others`: arch -> its
    files) as `<arch>/f4gemm/<name>`."""
    return {
        **files,
        **{f"{TUNED_TABLES_DIR}/{rel}": v for rel, v in tables.items()},
        **{
            f"{arch}/{F4GEMM_DIR}/{name}": v
            for arch, arch_files in (others or {}).items()
            for name, v in arch_files.items()
        },
    }


def content_digest(
    files: Mapping[str, Mapping[str, Any]],
    tables: Mapping[str, Any],
    others: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """sha256 over sorted `name\\tsha256\\n` lines of named_content: names the bytes, not where
    they came from; a directory without tables or other architectures keeps its digest."""
    named = named_content(files, tables, others)
    lines = "".join(f"{name}\t{named[name]['sha256']}\n" for name in sorted(named))
    return hashlib.sha256(lines.encode()).hexdigest()


def local_id(digest: str) -> str:
    """The aiter id of a content digest."""
    return f"{LOCAL_ID_PREFIX}{digest[:12]}"


def other_arch_dirs(hsa_dir: Path) -> dict[str, Path]:
    """arch -> its f4gemm directory, for every `<hsa_dir>/<arch>/f4gemm/` other than gfx950's
    that holds a code object (gfx942's header-only manifest holds none): what aiter's tree has
    beside gfx950's since gfx1250's f4gemm (2026-06)."""
    found = sorted(hsa_dir.glob(f"*/{F4GEMM_DIR}")) if hsa_dir.is_dir() else []
    return {d.parent.name: d for d in found if d.parent.name != ARCH and any(d.glob("*.co"))}


def arch_dirs_beside(f4gemm_dir: Path) -> dict[str, Path]:
    """The other architectures' f4gemm directories beside gfx950's in aiter's layout
    (`<hsa>/gfx950/f4gemm` and `<hsa>/<arch>/f4gemm`); none for an f4gemm directory elsewhere."""
    if f4gemm_dir.parent.name != ARCH:
        return {}
    return other_arch_dirs(f4gemm_dir.parent.parent)


@dataclass(frozen=True)
class LocalContent:
    """What a local source is: its gfx950 f4gemm directory, sha256 + size of the files it lists,
    the same for its tuned tables, and for each other architecture beside it in an aiter tree
    (`hsa/<arch>/f4gemm/`) its directory and files."""

    directory: Path
    files: FileRecord
    tables: FileRecord
    others: dict[str, tuple[Path, FileRecord]]

    def named(self) -> dict[str, Any]:
        """Every file by the name the digest gives it (named_content)."""
        others = {arch: files for arch, (_, files) in self.others.items()}
        return named_content(self.files, self.tables, others)

    def digest(self) -> str:
        others = {arch: files for arch, (_, files) in self.others.items()}
        return content_digest(self.files, self.tables, others)


def content_files(path: str | os.PathLike[str]) -> LocalContent:
    """The content of `path`: the f4gemm directory or either meaning of AITER_ASM_DIR
    (find_f4gemm_dir); in aiter's layout (`.../hsa/gfx950/f4gemm`) the other architectures'
    f4gemm directories beside it too."""
    found = find_f4gemm_dir(path)
    directory, names = listed_names(found, str(found))
    files = {name: _hashed(directory / name) for name in names}
    tables = {rel: _hashed(p) for rel, p in find_tables(configs_beside(directory)).items()}
    others = {}
    for arch, arch_dir in arch_dirs_beside(directory).items():
        arch_dir, arch_names = listed_names(arch_dir, str(arch_dir))
        others[arch] = (arch_dir, {name: _hashed(arch_dir / name) for name in arch_names})
    return LocalContent(directory, files, tables, others)


def _hashed(path: Path) -> dict[str, Any]:
    return {"sha256": sha256_file(path), "size": path.stat().st_size}


def content_id(path: str | os.PathLike[str]) -> str:
    """The id of an f4gemm directory's content, tables included (`local-<12 hex>`)."""
    return local_id(content_files(path).digest())


def aiter_id_of(f4gemm_dir: str | os.PathLike[str]) -> str:
    """A fetched aiter's recorded id, else the directory's content id."""
    fetched = AiterDir.holding(f4gemm_dir)
    return fetched.aiter_id() if fetched is not None else content_id(f4gemm_dir)
