"""One reproducible tarball per artifact set, so the next aiter or ROCm release has a baseline.

`<aiter_id>__<toolchain_id>__<device_id>.tar.gz` holds the result-set directory under a top
directory of the same name, plus `provenance.json` (what produced the set) and `SHA256SUMS`
(`sha256sum -c` format, every other member). The same files give the same tarball bytes: members
in sorted order, mtime 0, uid/gid 0 with no owner names, fixed modes, gzip header mtime 0 and no
file name, and a provenance.json that records no time of its own. `check_archive` re-hashes every
member and names what changed, went missing or was added.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from f4pipe import __version__
from f4pipe.codeobj.toolchain import portable
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import atomic_path, read_input_bytes, read_json_file
from f4pipe.core.layout import TABLES, TOOLCHAIN_JSON, arch_table_file, table_file
from f4pipe.pipeline.resultset import ResultSet, find_aiter_provenance

SUMS_NAME = "SHA256SUMS"
PROVENANCE_NAME = "provenance.json"
ARCHIVE_FORMAT = 1
SUFFIX = ".tar.gz"
GZIP_LEVEL = 9
#: A result set is a few MB; an archive (compressed or not) beyond this is not one of ours.
MAX_ARCHIVE_BYTES = 1 << 30
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def safe_component(text: str) -> str:
    """A key as a file-name component: anything outside [A-Za-z0-9._+-] becomes '_'."""
    return _UNSAFE.sub("_", text) or "_"


def archive_name(aiter_id: str, toolchain_id: str, device_id: str) -> str:
    return "__".join(safe_component(k) for k in (aiter_id, toolchain_id, device_id))


def set_provenance(rs: ResultSet, aiter_provenance: Path | None) -> dict[str, Any]:
    """What produced the set, deterministically (no timestamps of the archiving itself)."""
    listed = [(table_file(name), rs.table(name)) for name in TABLES]
    listed += [
        (arch_table_file(arch, name), df)
        for arch, arch_tables in rs.arch_tables.items()
        for name, df in arch_tables.items()
    ]
    tables = {}
    for file_name, df in listed:
        if df is not None:
            tables[file_name] = {"rows": len(df)}
            if "status" in df:
                tables[file_name]["status"] = {
                    str(k): int(v) for k, v in sorted(df["status"].value_counts().items())
                }
    aiter = read_json_file(aiter_provenance, "provenance.json") if aiter_provenance else None
    return {
        "archive_format": ARCHIVE_FORMAT,
        "aiter_id": rs.aiter_id,
        "toolchain_id": rs.toolchain_id,
        "device_id": rs.device_id,
        "f4pipe_versions": rs.f4pipe_versions,
        "archived_by": f"f4pipe {__version__}",
        "toolchain": portable(rs.toolchain),
        "aiter_fetch": portable(aiter),
        "tables": tables,
    }


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def sums_text(members: dict[str, bytes]) -> str:
    return "".join(
        f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in members.items()
    )


def tarball_bytes(top: str, members: dict[str, bytes]) -> bytes:
    """A .tar.gz of `members` (relative name -> bytes) under `top/`, byte-for-byte reproducible."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            data = members[name]
            tar.addfile(_tarinfo(f"{top}/{name}", len(data)), io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(
        filename="", mode="wb", fileobj=out, mtime=0, compresslevel=GZIP_LEVEL
    ) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def create_archive(
    result_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    aiter_provenance: str | os.PathLike[str] | None = None,
) -> Path:
    """Archive one result set into `out_dir`; returns the tarball's path."""
    rs = ResultSet.load(result_dir)
    prov_path = Path(aiter_provenance) if aiter_provenance else None
    if prov_path is None:
        prov_path = find_aiter_provenance(rs.directory.resolve(), rs.aiter_id)
    members = {rel.as_posix(): (rs.directory / rel).read_bytes() for rel in rs.files()}
    if TOOLCHAIN_JSON in members:  # its tool paths, written machine-independently
        record = json.loads(members[TOOLCHAIN_JSON])
        text = json.dumps(portable(record), indent=2, sort_keys=True) + "\n"
        members[TOOLCHAIN_JSON] = text.encode()
    for reserved in (SUMS_NAME, PROVENANCE_NAME):
        if reserved in members:
            raise InputError(
                f"{rs.directory / reserved}: the archive writes its own {reserved}; "
                "rename or remove that file from the result set"
            )
    prov = set_provenance(rs, prov_path)
    members[PROVENANCE_NAME] = (json.dumps(prov, indent=2, sort_keys=True) + "\n").encode()
    members = dict(sorted(members.items()))
    members[SUMS_NAME] = sums_text(members).encode()
    top = archive_name(rs.aiter_id, rs.toolchain_id, rs.device_id)
    target = Path(out_dir) / f"{top}{SUFFIX}"
    data = tarball_bytes(top, members)
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)
    return target


# ---------------------------------------------------------------------------------------------
# Checking


@dataclass
class ArchiveCheck:
    """The verdict of `check_archive`: names of members that do not match SHA256SUMS."""

    path: Path
    top: str
    checked: int = 0
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # listed in SHA256SUMS, absent
    unlisted: list[str] = field(default_factory=list)  # present, not listed

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.unlisted)

    def summary(self) -> str:
        if self.ok:
            return f"{self.path.name}: OK, {self.checked} files match {SUMS_NAME}"
        lines = [f"{self.path.name}: FAILED"]
        lines += [f"  changed: {n}" for n in self.changed]
        lines += [f"  missing: {n}" for n in self.missing]
        lines += [f"  not in {SUMS_NAME}: {n}" for n in self.unlisted]
        return "\n".join(lines)


def parse_sums(text: str, source: str) -> dict[str, str]:
    sums = {}
    for i, line in enumerate(text.splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or not re.fullmatch(r"[0-9a-f]{64}", digest) or not name:
            raise InputError(f"{source}:{i}: not a '<sha256>  <name>' line: {line!r}")
        sums[name] = digest
    return sums


def gunzip_whole(path: Path, limit: int = MAX_ARCHIVE_BYTES) -> bytes:
    """The archive decompressed in full, so that a truncated stream, a bad CRC-32 or ISIZE, or
    trailing garbage is an error: tarfile stops at the tar end marker and never reads the gzip
    trailer, which is how a damaged archive could pass `--check`. Bounded against gzip bombs."""
    data = read_input_bytes(path, "f4pipe archive (.tar.gz)", limit)
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing: checks CRC-32 and ISIZE
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InputError(f"{path}: not a readable .tar.gz: damaged gzip stream ({exc})") from None
    if len(out) > limit:
        raise InputError(f"{path}: decompresses to more than {limit} bytes; not an f4pipe archive")
    if not d.eof:
        raise InputError(f"{path}: not a readable .tar.gz: truncated gzip stream (no trailer)")
    if d.unused_data:
        raise InputError(
            f"{path}: not a readable .tar.gz: {len(d.unused_data)} bytes of trailing data after "
            "the gzip stream"
        )
    return out


def read_members(path: Path) -> tuple[str, dict[str, bytes]]:
    """(top directory, relative name -> bytes) of an f4pipe archive; refuses anything else."""
    raw = gunzip_whole(path)
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            members: dict[str, bytes] = {}
            tops: set[str] = set()
            for info in tar:
                name = info.name
                if not info.isfile():
                    if info.isdir():
                        continue
                    raise InputError(f"{path}: member {name} is not a regular file")
                top, sep, rel = name.partition("/")
                parts = Path(name).parts
                if not sep or not rel or name.startswith("/") or ".." in parts or top in ("", "."):
                    raise InputError(
                        f"{path}: member {name} is outside <top>/; not an f4pipe archive"
                    )
                tops.add(top)
                fh = tar.extractfile(info)
                assert fh is not None
                members[rel] = fh.read()
    except (tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable .tar.gz ({exc})") from None
    if len(tops) != 1:
        raise InputError(f"{path}: expected one top directory, found {sorted(tops)}")
    return tops.pop(), members


def check_archive(path: str | os.PathLike[str]) -> ArchiveCheck:
    """Re-hash every member against SHA256SUMS."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such archive")
    top, members = read_members(path)
    if SUMS_NAME not in members:
        raise InputError(f"{path}: has no {top}/{SUMS_NAME}; not an f4pipe archive")
    sums = parse_sums(members.pop(SUMS_NAME).decode(errors="replace"), f"{path}:{SUMS_NAME}")
    result = ArchiveCheck(path=path, top=top)
    for name, digest in sums.items():
        if name not in members:
            result.missing.append(name)
        elif hashlib.sha256(members[name]).hexdigest() != digest:
            result.changed.append(name)
        else:
            result.checked += 1
    result.unlisted = sorted(set(members) - set(sums))
    return result


def extract_archive(path: str | os.PathLike[str], into: str | os.PathLike[str]) -> Path:
    """Unpack a checked archive below `into`; returns the result-set directory (<into>/<top>)."""
    path = Path(path)
    check = check_archive(path)
    if not check.ok:
        raise InputError(f"refusing to use a damaged archive:\n{check.summary()}")
    top, members = read_members(path)
    root = Path(into) / top
    for rel, data in members.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root
