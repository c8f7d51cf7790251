"""PyPI: the wheel cache (downloaded once, re-hashed on use) and extraction of the f4gemm
directory, the tuned tables or one file from a wheel."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from f4pipe.aiter.tables import (
    CONFIGS_PATH,
    is_tuned_table,
)
from f4pipe.core.cache import cache_root
from f4pipe.core.errors import ChecksumError, ConfigError, FetchError
from f4pipe.core.fsio import atomic_dir, sha256_file, write_bytes, write_json, write_text
from f4pipe.core.layout import TUNED_CSV_MEMBER
from f4pipe.fetch.process import run_fetch_tool
from f4pipe.fetch.record import locked
from f4pipe.fetch.sources import PypiSource, normalized_package, parse_source

WHEEL_HSA_PREFIX = "aiter_meta/hsa/"
WHEEL_F4GEMM_PREFIX = "aiter_meta/hsa/gfx950/f4gemm/"
TREE_MARKER_NAME = ".f4pipe-wheel-tree.json"


# ---------------------------------------------------------------------------------------------
# PyPI: the wheel cache and extraction


def wheel_cache_dir(package: str, version: str, cache_dir: Path | None = None) -> Path:
    """Where the wheel of package==version is cached: <cache>/wheels/<package>/<version>/."""
    base = Path(cache_dir) if cache_dir is not None else cache_root() / "wheels"
    return base / normalized_package(package) / version


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
    with locked(where / ".lock"):
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
        run_fetch_tool(
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


def extract_prefix(wheel: Path, prefix: str, dest: Path) -> dict[str, int]:
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


def extract_tables(wheel: Path, dest: Path) -> Path:
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
    with locked(dest.with_name(f".{dest.name}.lock")):
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
            sizes = extract_prefix(wheel, prefix, tmp)
            write_json(
                tmp / TREE_MARKER_NAME,
                {"wheel": wheel.name, "wheel_sha256": wheel_sha, "prefix": prefix, "files": sizes},
            )
    return dest


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
