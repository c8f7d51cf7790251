"""aiter sources as the config names them (pypi, git, local), checked, and the aiter id each
one gives when naming it needs no network. Light on purpose: `f4pipe aiter-id`, the workflow's
first job, imports it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from f4pipe.aiter.aiterdir import content_id
from f4pipe.core.errors import ConfigError

DEFAULT_PACKAGE = "amd-aiter"
DEFAULT_VERSION = "0.1.7.post2.dev18"

HEX40 = re.compile(r"^[0-9a-f]{40}$")
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
    return GitSource(url=url, rev=rev.lower() if HEX40.match(rev.lower()) else rev)


def normalized_package(package: str) -> str:
    return re.sub(r"[-_.]+", "-", package).lower()


def pypi_id(src: PypiSource) -> str:
    return f"pypi-{normalized_package(src.package)}-{re.sub(r'[^A-Za-z0-9._-]', '_', src.version)}"


def git_id(commit: str) -> str:
    return f"git-{commit[:12]}"


def offline_id(source: Mapping[str, Any] | AiterSource) -> str | None:
    """The aiter id a fetch of `source` produces, when naming it needs no network: None for a
    git branch or tag, whose commit only the server knows. A local source's id is its content
    (f4pipe.aiter.aiterdir.content_id), so the directory is hashed."""
    src = parse_source(source)
    if isinstance(src, PypiSource):
        return pypi_id(src)
    if isinstance(src, GitSource):
        return git_id(src.rev) if HEX40.match(src.rev) else None
    return content_id(src.path)
