"""Fetch aiter's f4gemm code objects from a pinned source into `resources/aiter/<aiter-id>/`.

Sources (a dict, as in config/config.yaml):
  {"kind": "pypi", "package": "amd-aiter", "version": "0.1.7.post2.dev18", "sha256": optional}
  {"kind": "git", "url": "...", "rev": "branch | tag | full 40-hex commit"}
  {"kind": "local", "path": "...", "sha256": optional}

What lands in `resources/aiter/<aiter-id>/`: `f4gemm/` with the manifest CSV and exactly the .co
files it lists (other files of the source directory, e.g. aiter's codegen.py or an unlisted .co,
are not copied but named in the provenance under "skipped"; a listed .co that is missing is a
ManifestError), `configs/` with every a4w4 tuned GEMM table of the source (aiter's
`aiter/configs/**/*a4w4*tuned*gemm*.csv`, model_configs included, at their paths below
`aiter/configs/`: the tables the tuned-table audit reads), and `provenance.json` (source,
directories used, sha256 + size per file and per table, f4pipe version, time). The directory
appears whole or not at all (fsio.atomic_dir).

aiter ids name the bytes: `pypi-<package>-<version>`, `git-<12 hex of the commit>`, and
`local-<12 hex of the content digest>`, the content digest being the sha256 over the sorted
"name<TAB>sha256" lines of the copied files, tables named `configs/<path>` (recorded for every
kind as `content_sha256`).

Pinning: once `<aiter-id>/provenance.json` exists, a fetch re-hashes the copies and returns without
touching the network (`fetched=False`). Bytes that differ from the record are a ChecksumError,
never a silent refetch: a modified copy, a pypi `sha256` pin that disagrees with the recorded
wheel, a cached wheel that no longer matches the digest taken when it was downloaded. A local
directory's id is its content, so changed bytes give a *new* id (the old one stays valid); to pin
a local directory, put its `content_sha256` in the source as `sha256`, and a change becomes a
ChecksumError naming the changed files. A git commit pins its tree by construction; only a branch
or tag needs the network on a re-run (to learn which commit it names now).

A fetch made before tables were fetched (its provenance has no "tables") is completed once: the
tables of the same wheel or commit are added and the record rewritten; nothing else changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from f4pipe import __version__
from f4pipe.errors import ChecksumError, CodeObjectError, ConfigError, FetchError, ManifestError
from f4pipe.fsio import atomic_dir, sha256_file, write_bytes, write_json, write_text
from f4pipe.manifest import MANIFEST_NAME, find_f4gemm_dir, read_manifest
from f4pipe.tables import (
    CONFIGS_PATH,
    TABLES_DIR,
    configs_dir_beside,
    copy_tables,
    find_tables,
    is_tuned_table,
)
from f4pipe.toolchain import cache_root

DEFAULT_PACKAGE = "amd-aiter"
DEFAULT_VERSION = "0.1.7.post2.dev18"
WHEEL_F4GEMM_PREFIX = "aiter_meta/hsa/gfx950/f4gemm/"
WHEEL_HSA_PREFIX = "aiter_meta/hsa/"
GIT_F4GEMM_PATH = "hsa/gfx950/f4gemm"
PROVENANCE_NAME = "provenance.json"
PROVENANCE_SCHEMA = 1
TREE_MARKER_NAME = ".f4pipe-wheel-tree.json"
SUBPROCESS_TIMEOUT_S = 900  # a 40 MB wheel over a slow link; git fetch of one commit

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]*$")
_PACKAGE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


# ---------------------------------------------------------------------------------------------
# Source configuration


@dataclass(frozen=True)
class PypiSource:
    package: str = DEFAULT_PACKAGE
    version: str = DEFAULT_VERSION
    sha256: str | None = None  # of the wheel file


@dataclass(frozen=True)
class GitSource:
    url: str
    rev: str


@dataclass(frozen=True)
class LocalSource:
    path: Path
    sha256: str | None = None  # content digest (provenance "content_sha256")


AiterSource = PypiSource | GitSource | LocalSource

_KEYS = {
    "pypi": ({"kind"}, {"package", "version", "sha256"}),
    "git": ({"kind", "url", "rev"}, set()),
    "local": ({"kind", "path"}, {"sha256"}),
}


def parse_source(source: Mapping[str, Any] | AiterSource) -> AiterSource:
    """Validate a source dict at the boundary; every mistake is a ConfigError naming the key."""
    if isinstance(source, PypiSource | GitSource | LocalSource):
        return source
    if not isinstance(source, Mapping):
        raise ConfigError(f"aiter source must be a mapping with a 'kind', got {source!r}")
    kind = source.get("kind")
    if kind not in _KEYS:
        raise ConfigError(f"aiter source kind {kind!r} is not one of {sorted(_KEYS)}")
    required, optional = _KEYS[kind]
    missing = sorted(required - source.keys())
    unknown = sorted(source.keys() - required - optional)
    if missing or unknown:
        raise ConfigError(
            f"aiter source {dict(source)!r}: missing key(s) {missing}, unknown key(s) {unknown}; "
            f"a {kind} source takes {sorted(required | optional)}"
        )
    values = {k: v for k, v in source.items() if k != "kind" and v is not None}
    for key, value in values.items():
        if not isinstance(value, str | os.PathLike) or not str(value).strip():
            raise ConfigError(
                f"aiter {kind} source: {key} must be a non-empty string, got {value!r}"
            )
    if "sha256" in values:
        values["sha256"] = str(values["sha256"]).lower()
        if not _HEX64.match(values["sha256"]):
            raise ConfigError(
                f"aiter {kind} source: sha256 {source['sha256']!r} is not 64 hex digits"
            )
    if kind == "pypi":
        return _pypi_source(values)
    if kind == "git":
        return _git_source(values)
    return LocalSource(path=Path(values["path"]), sha256=values.get("sha256"))


def _pypi_source(values: dict[str, Any]) -> PypiSource:
    src = PypiSource(**values)
    if not _PACKAGE_RE.match(src.package):
        raise ConfigError(f"pypi package {src.package!r} is not a distribution name")
    if not _VERSION_RE.match(src.version):
        raise ConfigError(
            f"pypi version {src.version!r} is not an exact version; pin one, e.g. {DEFAULT_VERSION}"
        )
    return src


def _git_source(values: dict[str, Any]) -> GitSource:
    url, rev = str(values["url"]), str(values["rev"])
    if url.startswith("-"):
        raise ConfigError(f"git url {url!r} must not start with '-'")
    if rev.startswith("-") or ":" in rev or any(c.isspace() for c in rev):
        raise ConfigError(
            f"git rev {rev!r} must be a branch, tag or commit (no leading '-', ':' or spaces)"
        )
    if re.fullmatch(r"[0-9a-fA-F]{7,39}", rev):
        raise ConfigError(
            f"git rev {rev!r} looks like an abbreviated commit; git can fetch a commit only by "
            "its full 40-hex sha (or give a branch or tag)"
        )
    return GitSource(url=url, rev=rev.lower() if _HEX40.match(rev.lower()) else rev)


def _normalized_package(package: str) -> str:
    return re.sub(r"[-_.]+", "-", package).lower()


def _pypi_id(src: PypiSource) -> str:
    return f"pypi-{_normalized_package(src.package)}-{re.sub(r'[^A-Za-z0-9._-]', '_', src.version)}"


def aiter_id_for(source: Mapping[str, Any] | AiterSource) -> str:
    """The aiter id a fetch of `source` produces.

    pypi: from the config alone. git: a full commit sha needs nothing; a branch or tag is
    resolved (a shallow, blob-less fetch). local: the directory's content digest is computed.
    """
    src = parse_source(source)
    if isinstance(src, PypiSource):
        return _pypi_id(src)
    if isinstance(src, GitSource):
        if _HEX40.match(src.rev):
            return f"git-{src.rev[:12]}"
        with tempfile.TemporaryDirectory(prefix="f4pipe-git-") as tmp:
            return f"git-{_git_fetch_commit(src, Path(tmp))[:12]}"
    _, files, tables = _local_files(src)
    return f"local-{_content_digest(files, tables)[:12]}"


# ---------------------------------------------------------------------------------------------
# Results, provenance, verification


@dataclass(frozen=True)
class FetchResult:
    aiter_id: str
    f4gemm_dir: Path  # resources/aiter/<aiter_id>/f4gemm
    provenance: Path  # resources/aiter/<aiter_id>/provenance.json
    fetched: bool  # False when an existing, verified copy was reused


def _content_digest(
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


def _result(aiter_dir: Path, fetched: bool) -> FetchResult:
    return FetchResult(
        aiter_id=aiter_dir.name,
        f4gemm_dir=aiter_dir / "f4gemm",
        provenance=aiter_dir / PROVENANCE_NAME,
        fetched=fetched,
    )


def read_provenance(aiter_dir: Path) -> dict[str, Any]:
    """The provenance record of a fetched aiter directory; FetchError if absent or unreadable."""
    path = aiter_dir / PROVENANCE_NAME
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FetchError(
            f"{aiter_dir} exists but has no {PROVENANCE_NAME}: it was not written by `f4pipe "
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
    f4gemm = aiter_dir / "f4gemm"
    redo = f"restore it, or delete {aiter_dir} and run `f4pipe fetch` again"
    for name, info in sorted(record["files"].items()):
        path = f4gemm / name
        if not path.is_file():
            raise ChecksumError(
                f"{path} is missing; {PROVENANCE_NAME} recorded sha256 {info['sha256']}: {redo}"
            )
        actual = sha256_file(path)
        if actual != info["sha256"]:
            raise ChecksumError(
                f"{path} changed after it was fetched: expected sha256 {info['sha256']} "
                f"(recorded in {PROVENANCE_NAME}), actual {actual}; {redo}"
            )
    extra = sorted(p.name for p in f4gemm.iterdir() if p.name not in record["files"])
    if extra:
        raise ChecksumError(
            f"{f4gemm} holds file(s) not recorded in {PROVENANCE_NAME}: {extra}; remove them "
            "(derived files belong under results/)"
        )
    for rel, info in sorted(record.get("tables", {}).items()):
        path = aiter_dir / TABLES_DIR / rel
        actual = sha256_file(path) if path.is_file() else None
        if actual != info["sha256"]:
            raise ChecksumError(
                f"{path} is missing or changed after it was fetched: expected sha256 "
                f"{info['sha256']} (recorded in {PROVENANCE_NAME}), actual {actual}; {redo}"
            )
    return record


def _listed_names(src_dir: Path, where: str) -> tuple[Path, list[str]]:
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
    directory, names = _listed_names(src_dir, where)
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
        aiter_dir / PROVENANCE_NAME,
        {
            "schema": PROVENANCE_SCHEMA,
            "aiter_id": aiter_id,
            "source": source,
            "content_sha256": _content_digest(files, tables),
            "files": files,
            "skipped": skipped,
            "manifest_header": _manifest_header(aiter_dir / "f4gemm" / MANIFEST_NAME),
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


def _complete_tables(target: Path, configs_dir: Path | None, where: str) -> dict[str, Any]:
    """Add the tuned tables to a fetch recorded without them; the rewritten provenance."""
    record = read_provenance(target)
    tables = copy_tables(configs_dir, target / TABLES_DIR)
    record.update(
        tables=tables,
        content_sha256=_content_digest(record["files"], tables),
        manifest_header=_manifest_header(target / "f4gemm" / MANIFEST_NAME),
    )
    record["source"]["tables_dir"] = where
    write_json(target / PROVENANCE_NAME, record)
    return record


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Serialise fetches of one id (parallel Snakemake jobs, pytest-xdist workers)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _fetch_into(
    resources_dir: Path,
    aiter_id: str,
    src_dir: Path,
    source: dict[str, Any],
    where: str,
    configs_dir: Path | None,
) -> FetchResult:
    """Copy `src_dir` (an f4gemm directory) and the tuned tables of `configs_dir` (the
    source's aiter/configs, None when it has none) into resources/aiter/<aiter_id> atomically."""
    target = Path(resources_dir) / "aiter" / aiter_id
    with atomic_dir(target) as tmp:
        files, skipped = _copy_f4gemm(src_dir, tmp / "f4gemm", where)
        tables = copy_tables(configs_dir, tmp / TABLES_DIR)
        _write_provenance(tmp, aiter_id, source, files, skipped, tables)
    return _result(target, fetched=True)


# ---------------------------------------------------------------------------------------------
# Subprocesses: the one place their failures become f4pipe errors


def _run(
    cmd: list[str],
    *,
    action: str,
    hints: Mapping[str, str] | None = None,
    default_hint: str,
    cwd: Path | None = None,
    log: Path | None = None,
) -> str:
    """Run `cmd`; on failure raise FetchError naming `action`, with the first matching hint.

    `hints` maps a substring of the tool's output (stderr, or `log` when given: pip writes its
    connection errors only to its debug log) to what the user should do.
    """
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S
        )
    except FileNotFoundError as exc:
        raise FetchError(f"{action}: {cmd[0]} is not installed; install it and retry") from exc
    except subprocess.TimeoutExpired as exc:
        raise FetchError(
            f"{action}: timed out after {SUBPROCESS_TIMEOUT_S}s; check the network and retry"
        ) from exc
    if proc.returncode == 0:
        return proc.stdout
    output = proc.stderr + proc.stdout
    if log is not None and log.is_file():
        output += log.read_text(errors="replace")
    hint = next((h for key, h in (hints or {}).items() if key in output), default_hint)
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith(("error", "fatal"))] or lines
    detail = " | ".join(errors[-3:]) or f"exit {proc.returncode}"
    raise FetchError(f"{action} failed: {hint} ({detail})") from subprocess.CalledProcessError(
        proc.returncode, cmd, proc.stdout, proc.stderr
    )


# ---------------------------------------------------------------------------------------------
# PyPI: the wheel cache and extraction


def wheel_cache_dir(package: str, version: str, cache_dir: Path | None = None) -> Path:
    """Where the wheel of package==version is cached: <cache>/wheels/<package>/<version>/."""
    base = Path(cache_dir) if cache_dir is not None else cache_root() / "wheels"
    return base / _normalized_package(package) / version


def ensure_wheel(
    source: Mapping[str, Any] | PypiSource, *, cache_dir: Path | None = None
) -> tuple[Path, str]:
    """The wheel of a pypi source, from the cache or downloaded into it; (path, sha256).

    A cached wheel is checked against the sha256 taken when it was downloaded (its `.sha256`
    sidecar) and against the source's pin; a download is checked against the pin.
    """
    src = parse_source(source)
    if not isinstance(src, PypiSource):
        raise ConfigError(f"a wheel needs a pypi source, got {src!r}")
    where = wheel_cache_dir(src.package, src.version, cache_dir)
    with _locked(where / ".lock"):
        cached = sorted(where.glob("*.whl"))
        if cached:
            return cached[0], _check_cached_wheel(cached[0], src)
        return _download_wheel(src, where)


def _check_cached_wheel(wheel: Path, src: PypiSource) -> str:
    sidecar = wheel.with_name(wheel.name + ".sha256")
    actual = sha256_file(wheel)
    if not sidecar.is_file():
        raise ChecksumError(
            f"cached wheel {wheel} has no {sidecar.name} (it was not downloaded by f4pipe); "
            f"delete {wheel.parent} to download it again"
        )
    recorded = sidecar.read_text().strip()
    if recorded != actual:
        raise ChecksumError(
            f"cached wheel {wheel}: expected sha256 {recorded} (recorded at download), actual "
            f"{actual}; the cache was modified: delete {wheel.parent} to download it again"
        )
    _check_pin(wheel, actual, src)
    return actual


def _check_pin(wheel: Path, actual: str, src: PypiSource) -> None:
    if src.sha256 is not None and src.sha256 != actual:
        raise ChecksumError(
            f"{wheel.name} ({src.package}=={src.version}): expected sha256 {src.sha256} (the "
            f"source's pin), actual {actual}; if PyPI really serves new bytes for this version, "
            "find out why before changing the pin"
        )


def _download_wheel(src: PypiSource, where: Path) -> tuple[Path, str]:
    spec = f"{src.package}=={src.version}"
    where.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=where) as tmp:
        log = Path(tmp) / "pip.log"
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--pre"]
        options = ["--only-binary=:all:", "--disable-pip-version-check", "--log", str(log)]
        _run(
            [*pip, *options, spec, "-d", str(Path(tmp) / "dl")],
            action=f"downloading {spec} from PyPI",
            hints={
                "connection error": "could not reach the package index (network failure?); "
                "check the connection or proxy settings and retry",
                "No module named pip": f"{sys.executable} has no pip; install pip into it",
                "from versions: none": f"the index offers no release of {src.package} (wrong "
                "package name, or the index is unreachable)",
                "No matching distribution": f"{src.package} has no wheel for version "
                f"{src.version}; pick one of the versions pip lists",
            },
            default_hint="see pip's message",
            log=log,
        )
        wheels = sorted((Path(tmp) / "dl").glob("*.whl"))
        if len(wheels) != 1:
            raise FetchError(
                f"pip download {spec} produced {[w.name for w in wheels]}, not one wheel"
            )
        actual = sha256_file(wheels[0])
        _check_pin(wheels[0], actual, src)
        wheel = where / wheels[0].name
        os.replace(wheels[0], wheel)
    write_text(wheel.with_name(wheel.name + ".sha256"), actual + "\n")
    return wheel, actual


def _safe_members(zf: zipfile.ZipFile, prefix: str) -> list[zipfile.ZipInfo]:
    """The file members under `prefix`; a path escaping the destination is an error."""
    members = []
    for info in zf.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        rel = info.filename[len(prefix) :]
        if rel.startswith("/") or ".." in rel.split("/"):
            raise FetchError(f"{zf.filename}: member {info.filename!r} escapes its directory")
        members.append(info)
    return members


def _extract(wheel: Path, prefix: str, dest: Path) -> dict[str, int]:
    """Extract members under `prefix` into `dest` (prefix stripped); {relative path: size}."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = _safe_members(zf, prefix)
            if not members:
                raise FetchError(f"{wheel.name} has no files under {prefix!r}")
            sizes = {}
            for info in members:
                rel = info.filename[len(prefix) :]
                out = dest / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as fin, open(out, "wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
                sizes[rel] = info.file_size
            return sizes
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise FetchError(f"{wheel} is not a readable wheel ({exc}); delete it and retry") from exc


def _extract_tables(wheel: Path, dest: Path) -> Path:
    """Extract the wheel's tuned tables (members under aiter/configs/) into `dest`; `dest`."""
    prefix = f"{CONFIGS_PATH}/"
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in _safe_members(zf, prefix):
                rel = info.filename[len(prefix) :]
                if is_tuned_table(rel):
                    out = dest / rel
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as fin, open(out, "wb") as fout:
                        shutil.copyfileobj(fin, fout, 1 << 20)
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise FetchError(f"{wheel} is not a readable wheel ({exc}); delete it and retry") from exc
    return dest


def extract_wheel_tree(
    source: Mapping[str, Any] | PypiSource,
    dest: Path,
    prefix: str = WHEEL_HSA_PREFIX,
    *,
    cache_dir: Path | None = None,
) -> Path:
    """Extract every wheel member under `prefix` into `dest` (prefix stripped), e.g. aiter's
    whole `hsa/` tree (~2,500 code objects) for co2asm's corpus tests.

    A re-run with the same wheel and prefix whose files are all present with their sizes returns
    at once; a dest that was not made by this function is never overwritten.
    """
    src = parse_source(source)
    if not isinstance(src, PypiSource):
        raise ConfigError(f"extract_wheel_tree needs a pypi source, got {src!r}")
    if not prefix.endswith("/"):
        prefix += "/"
    dest = Path(dest)
    wheel, wheel_sha = ensure_wheel(src, cache_dir=cache_dir)
    with _locked(dest.with_name(f".{dest.name}.lock")):
        marker = dest / TREE_MARKER_NAME
        if dest.exists():
            if not marker.is_file():
                raise FetchError(f"{dest} exists and was not made by extract_wheel_tree; remove it")
            record = json.loads(marker.read_text())
            if (
                record.get("wheel_sha256") == wheel_sha
                and record.get("prefix") == prefix
                and all(
                    (dest / rel).is_file() and (dest / rel).stat().st_size == size
                    for rel, size in record["files"].items()
                )
            ):
                return dest
        with atomic_dir(dest) as tmp:
            sizes = _extract(wheel, prefix, tmp)
            write_json(
                tmp / TREE_MARKER_NAME,
                {"wheel": wheel.name, "wheel_sha256": wheel_sha, "prefix": prefix, "files": sizes},
            )
    return dest


#: aiter's tuned MXFP4 GEMM table inside the wheel (which asm kernel runs which shape).
TUNED_CSV_MEMBER = "aiter/configs/a4w4_blockscale_tuned_gemm.csv"


def extract_wheel_file(
    source: Mapping[str, Any] | PypiSource,
    dest: Path,
    member: str = TUNED_CSV_MEMBER,
    *,
    cache_dir: Path | None = None,
) -> Path:
    """Copy one member of the pinned wheel (default aiter's tuned GEMM CSV) to `dest`,
    atomically; the wheel comes from the cache (checked against its pin) or is downloaded."""
    src = parse_source(source)
    if not isinstance(src, PypiSource):
        raise ConfigError(f"extract_wheel_file needs a pypi source, got {src!r}")
    wheel, _ = ensure_wheel(src, cache_dir=cache_dir)
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                data = zf.read(member)
            except KeyError:
                raise FetchError(f"{wheel.name} has no member {member!r}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise FetchError(f"{wheel} is not a readable wheel ({exc}); delete it and retry") from exc
    write_bytes(dest, data)
    return Path(dest)


# ---------------------------------------------------------------------------------------------
# The three sources


def fetch_aiter(
    source: Mapping[str, Any] | AiterSource, resources_dir: Path, *, cache_dir: Path | None = None
) -> FetchResult:
    """Fetch the f4gemm directory of `source` into `resources_dir/aiter/<aiter-id>/`.

    Returns at once (no network, `fetched=False`) when that directory exists and verifies.
    `cache_dir` overrides the wheel cache (default <cache_root>/wheels).
    """
    src = parse_source(source)
    resources_dir = Path(resources_dir)
    if isinstance(src, PypiSource):
        return _fetch_pypi(src, resources_dir, cache_dir)
    if isinstance(src, GitSource):
        return _fetch_git(src, resources_dir)
    return _fetch_local(src, resources_dir)


def _aiter_dir(resources_dir: Path, aiter_id: str) -> Path:
    return resources_dir / "aiter" / aiter_id


def _lock_for(resources_dir: Path, aiter_id: str) -> Path:
    return resources_dir / "aiter" / f".{aiter_id}.lock"


def _fetch_pypi(src: PypiSource, resources_dir: Path, cache_dir: Path | None) -> FetchResult:
    aiter_id = _pypi_id(src)
    target = _aiter_dir(resources_dir, aiter_id)
    with _locked(_lock_for(resources_dir, aiter_id)):
        if target.exists():
            record = verify_aiter_dir(target)
            recorded = record["source"].get("wheel_sha256")
            if src.sha256 is not None and src.sha256 != recorded:
                raise ChecksumError(
                    f"{src.package}=={src.version}: expected wheel sha256 {src.sha256} (the "
                    f"source's pin), but {target / PROVENANCE_NAME} records {recorded} for "
                    f"{record['source'].get('wheel')}; fix the pin, or if the release really "
                    f"changed, delete {target} and the cached wheel and fetch again"
                )
            if "tables" not in record:
                wheel, _ = ensure_wheel(src, cache_dir=cache_dir)
                with tempfile.TemporaryDirectory(prefix="f4pipe-wheel-") as tmp:
                    configs = _extract_tables(wheel, Path(tmp))
                    _complete_tables(target, configs, f"{wheel.name}:{CONFIGS_PATH}")
            return _result(target, fetched=False)
        wheel, wheel_sha = ensure_wheel(src, cache_dir=cache_dir)
        with tempfile.TemporaryDirectory(prefix="f4pipe-wheel-") as tmp:
            _extract(wheel, WHEEL_F4GEMM_PREFIX, Path(tmp) / "f4gemm")
            configs = _extract_tables(wheel, Path(tmp) / "configs")
            provenance = {
                "kind": "pypi",
                "package": src.package,
                "version": src.version,
                "wheel": wheel.name,
                "wheel_sha256": wheel_sha,
                "wheel_size": wheel.stat().st_size,
                "f4gemm_dir": f"{wheel.name}:{WHEEL_F4GEMM_PREFIX}",
                "tables_dir": f"{wheel.name}:{CONFIGS_PATH}",
            }
            where = provenance["f4gemm_dir"]
            return _fetch_into(
                resources_dir, aiter_id, Path(tmp) / "f4gemm", provenance, where, configs
            )


def _git_fetch_commit(src: GitSource, repo: Path) -> str:
    """Shallow, blob-less fetch of `src.rev` into a new repository; the commit sha.

    Blobs come later, only for the f4gemm directory and the tuned tables (sparse checkout); a
    server without
    partial-clone support (a plain file:// repository) sends them all, which is merely slower.
    """
    _run(["git", "init", "-q", str(repo)], action="git init", default_hint="check git works")
    _run(
        ["git", "fetch", "-q", "--depth", "1", "--filter=blob:none", src.url, src.rev],
        cwd=repo,
        action=f"git fetch {src.url} {src.rev}",
        hints={
            "couldn't find remote ref": f"{src.url} has no branch or tag {src.rev!r}",
            "not our ref": f"{src.url} has no commit {src.rev} (or refuses to serve commits "
            "that no branch names: give a branch or tag)",
            "unadvertised object": f"{src.url} has no commit {src.rev} (or refuses to serve "
            "commits that no branch names: give a branch or tag)",
            "does not appear to be a git repository": f"{src.url} is not a git repository",
            "unable to access": f"cannot reach {src.url} (network failure?)",
            "Could not resolve host": f"cannot reach {src.url} (network failure?)",
        },
        default_hint=f"check the url {src.url!r} and rev {src.rev!r}",
    )
    commit = _run(
        ["git", "rev-parse", "--verify", "FETCH_HEAD^{commit}"],
        cwd=repo,
        action=f"resolving {src.rev} of {src.url}",
        default_hint=f"{src.rev!r} does not name a commit",
    ).strip()
    if _HEX40.match(src.rev) and commit != src.rev:
        raise FetchError(f"git fetch {src.url} {src.rev} returned commit {commit}")
    return commit


def _git_checkout_f4gemm(src: GitSource, repo: Path, commit: str) -> Path:
    """Check out only GIT_F4GEMM_PATH and the a4w4 tables under CONFIGS_PATH of `commit`; the
    f4gemm directory in the work tree (the tables are at repo/CONFIGS_PATH)."""
    listed = _run(
        ["git", "ls-tree", "--name-only", commit, "--", f"{GIT_F4GEMM_PATH}/{MANIFEST_NAME}"],
        cwd=repo,
        action=f"listing {GIT_F4GEMM_PATH} at {commit}",
        default_hint="the fetched repository is damaged; retry",
    )
    if not listed.strip():
        raise ManifestError(
            f"commit {commit} of {src.url} has no {GIT_F4GEMM_PATH}/{MANIFEST_NAME}; "
            "is this aiter, and does that commit have the f4gemm kernels?"
        )
    git_steps = [
        [
            "git",
            "sparse-checkout",
            "set",
            "--no-cone",
            f"/{GIT_F4GEMM_PATH}/",
            f"/{CONFIGS_PATH}/**/*a4w4*",
        ],
        ["git", "-c", "advice.detachedHead=false", "checkout", "-q", commit],
    ]
    for cmd in git_steps:
        _run(
            cmd,
            cwd=repo,
            action=f"checking out {GIT_F4GEMM_PATH} of {commit} from {src.url}",
            default_hint="retry; if it persists, fetch into an empty resources directory",
        )
    return repo / GIT_F4GEMM_PATH


def _fetch_git(src: GitSource, resources_dir: Path) -> FetchResult:
    if _HEX40.match(src.rev):  # a commit pins its tree: no network when already fetched
        aiter_id = f"git-{src.rev[:12]}"
        target = _aiter_dir(resources_dir, aiter_id)
        with _locked(_lock_for(resources_dir, aiter_id)):
            if target.exists() and "tables" in read_provenance(target):
                return _reuse_git(target, src.rev)
    with tempfile.TemporaryDirectory(prefix="f4pipe-git-") as tmp:
        repo = Path(tmp) / "repo"
        commit = _git_fetch_commit(src, repo)
        aiter_id = f"git-{commit[:12]}"
        target = _aiter_dir(resources_dir, aiter_id)
        with _locked(_lock_for(resources_dir, aiter_id)):
            if target.exists() and "tables" in read_provenance(target):
                return _reuse_git(target, commit)
            f4gemm = _git_checkout_f4gemm(src, repo, commit)
            if target.exists():  # fetched before tables were: add them
                _reuse_git(target, commit)
                _complete_tables(target, repo / CONFIGS_PATH, CONFIGS_PATH)
                return _result(target, fetched=False)
            provenance = {
                "kind": "git",
                "url": src.url,
                "rev": src.rev,
                "commit": commit,
                "f4gemm_dir": GIT_F4GEMM_PATH,
                "tables_dir": CONFIGS_PATH,
            }
            where = f"{GIT_F4GEMM_PATH} of commit {commit} of {src.url}"
            return _fetch_into(
                resources_dir, aiter_id, f4gemm, provenance, where, repo / CONFIGS_PATH
            )


def _reuse_git(target: Path, commit: str) -> FetchResult:
    record = verify_aiter_dir(target)
    if record["source"].get("commit") != commit:
        raise ChecksumError(
            f"{target} records commit {record['source'].get('commit')}, not {commit} (a 12-hex "
            f"id collision?); move {target} away and fetch again"
        )
    return _result(target, fetched=False)


def local_configs_dir(f4gemm_dir: Path) -> Path | None:
    """The tables beside a local f4gemm directory: a fetched copy's (<id>/configs), else
    tables.configs_dir_beside's (an aiter checkout or an installed wheel)."""
    if (Path(f4gemm_dir).resolve().parent / PROVENANCE_NAME).is_file():
        return Path(f4gemm_dir).resolve().parent / TABLES_DIR
    return configs_dir_beside(f4gemm_dir)


def _local_files(
    src: LocalSource,
) -> tuple[Path, dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The f4gemm directory used for a local source, sha256 + size of what would be copied,
    and the same for its tuned tables.

    `path` may be the f4gemm directory or either meaning of AITER_ASM_DIR (find_f4gemm_dir);
    the directory used is recorded in the provenance.
    """
    directory = find_f4gemm_dir(src.path)
    directory, names = _listed_names(directory, str(directory))
    files = {}
    for name in names:
        path = directory / name
        files[name] = {"sha256": sha256_file(path), "size": path.stat().st_size}
    tables = {
        rel: {"sha256": sha256_file(path), "size": path.stat().st_size}
        for rel, path in find_tables(local_configs_dir(directory)).items()
    }
    return directory, files, tables


def _fetch_local(src: LocalSource, resources_dir: Path) -> FetchResult:
    directory, files, tables = _local_files(src)
    digest = _content_digest(files, tables)
    if src.sha256 is not None and src.sha256 != digest:
        named = {**files, **{f"{TABLES_DIR}/{rel}": v for rel, v in tables.items()}}
        raise ChecksumError(_local_pin_message(src, directory, digest, named, resources_dir))
    aiter_id = f"local-{digest[:12]}"
    target = _aiter_dir(resources_dir, aiter_id)
    with _locked(_lock_for(resources_dir, aiter_id)):
        if target.exists():
            verify_aiter_dir(target)
            return _result(target, fetched=False)
        configs = local_configs_dir(directory)
        provenance = {
            "kind": "local",
            "path": str(src.path),
            "f4gemm_dir": str(directory.resolve()),
            "tables_dir": str(configs) if configs is not None else "",
        }
        result = _fetch_into(
            resources_dir, aiter_id, directory, provenance, str(directory), configs
        )
        copied = read_provenance(target)["content_sha256"]
        if copied != digest:
            shutil.rmtree(target)
            raise FetchError(f"{directory} changed while it was being copied; fetch again")
        return result


def _local_pin_message(
    src: LocalSource, directory: Path, digest: str, files: dict, resources_dir: Path
) -> str:
    """Name the changed files when an earlier fetch of the pinned content is on disk."""
    assert src.sha256 is not None
    message = (
        f"local aiter directory {directory}: content sha256 {digest}, but the source pins "
        f"{src.sha256}"
    )
    pinned_dir = _aiter_dir(resources_dir, f"local-{src.sha256[:12]}")
    if (pinned_dir / PROVENANCE_NAME).is_file():
        record = read_provenance(pinned_dir)
        recorded = {
            **record["files"],
            **{f"{TABLES_DIR}/{rel}": v for rel, v in record.get("tables", {}).items()},
        }
        changed = [
            f"{name}: expected sha256 {recorded[name]['sha256'] if name in recorded else None}, "
            f"actual {files[name]['sha256'] if name in files else None}"
            for name in sorted(recorded.keys() | files.keys())
            if recorded.get(name, {}).get("sha256") != files.get(name, {}).get("sha256")
        ]
        message += f" (recorded in {pinned_dir / PROVENANCE_NAME}); changed: " + "; ".join(changed)
    return message + (
        "; restore the pinned files, or, if the change is intended, set the pin to the new "
        "content sha256 (or drop it)"
    )
