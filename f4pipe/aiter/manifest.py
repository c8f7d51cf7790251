"""The f4gemm manifest CSV: which kernels exist, their tiles, and which .co holds each.

aiter's CSV header case differs by version (the wheel has `tile_m`, aiter HEAD `tile_M`), the
wheel's file has no trailing newline, and rows are kept in file order because the tile
heuristic breaks ties by that order.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from f4pipe.core.errors import InputError, ManifestError
from f4pipe.core.fsio import read_input_text
from f4pipe.core.layout import F4GEMM_DIR

#: aiter's manifest is ~3 kB; a bound keeps a hostile path (/dev/zero, a huge file) out.
MAX_MANIFEST_BYTES = 16 << 20

MANIFEST_NAME = "f4gemm_bf16_per1x32Fp4.csv"
COLUMNS = ("tile_m", "tile_n", "splitk", "bpreshuffle", "knl_name", "co_name")


@dataclass(frozen=True)
class KernelEntry:
    """One manifest row."""

    tile_m: int
    tile_n: int
    splitk: bool
    bpreshuffle: bool
    symbol: str  # the mangled kernel symbol (knl_name)
    co_name: str  # the code object's file name

    @property
    def name(self) -> str:
        """The .co stem: f4pipe's short, file-system-safe kernel name."""
        return Path(self.co_name).stem

    def matches(self, wanted: str) -> bool:
        """True if `wanted` names this kernel by symbol, .co file name or stem."""
        return wanted in (self.symbol, self.co_name, self.name)


@dataclass(frozen=True)
class Manifest:
    directory: Path
    csv_path: Path
    entries: tuple[KernelEntry, ...]

    def __iter__(self) -> Iterator[KernelEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, wanted: str) -> KernelEntry:
        """The entry `wanted` names: its symbol, .co name or stem, or the end of its stem after
        an underscore, as the report prints it (`BpreShuffle_256x256`) or as its tile alone
        (`32x128`) where only one kernel ends so. Raises ManifestError, listing the matches
        when several kernels end so (`256x256`: BpreShuffle and noBpreShuffle)."""
        for entry in self.entries:
            if entry.matches(wanted):
                return entry
        ending = [e for e in self.entries if wanted and e.name.endswith(f"_{wanted}")]
        if len(ending) == 1:
            return ending[0]
        if ending:
            raise ManifestError(
                f"kernel {wanted!r} is ambiguous in {self.csv_path}: "
                f"{', '.join(e.name for e in ending)}; name one of them"
            )
        names = ", ".join(e.name for e in self.entries[:5])
        raise ManifestError(
            f"no kernel named {wanted!r} in {self.csv_path} "
            f"(it lists {len(self.entries)}: {names}{', ...' if len(self.entries) > 5 else ''})"
        )

    def same_b_layout(self, entry: KernelEntry) -> list[KernelEntry]:
        """The kernels that read B as `entry` does (pre-shuffled or not): only they can stand
        in for it on the same operands, and only they were raced against it by aiter's tuner
        (which races the pre-shuffled ones)."""
        return [e for e in self.entries if e.bpreshuffle == entry.bpreshuffle]

    def co_path(self, entry: KernelEntry) -> Path:
        return self.directory / entry.co_name


def _parse_bool(value: str, column: str, line: int, path: Path) -> bool:
    if value.strip() in ("0", "1"):
        return value.strip() == "1"
    raise ManifestError(f"{path}:{line}: column {column} must be 0 or 1, got {value!r}")


def _parse_tile(value: str, column: str, line: int, path: Path) -> int:
    try:
        tile = int(value)
    except ValueError:
        raise ManifestError(
            f"{path}:{line}: column {column} must be an integer, got {value!r}"
        ) from None
    if tile <= 0 or tile % 16:
        raise ManifestError(f"{path}:{line}: {column}={tile} is not a positive multiple of 16")
    return tile


def parse_manifest_text(text: str, path: Path) -> list[KernelEntry]:
    """Parse manifest CSV text; header names are matched case-insensitively."""
    try:
        return _parse_rows(csv.reader(io.StringIO(text)), path)
    except csv.Error as exc:  # a field over csv's limit, a NUL byte, an unclosed quote
        raise ManifestError(f"{path}: not a readable CSV: {exc}") from None


def _parse_rows(reader: Iterator[list[str]], path: Path) -> list[KernelEntry]:
    try:
        header = next(reader)
    except StopIteration:
        raise ManifestError(
            f"{path}: empty manifest (expected header {','.join(COLUMNS)})"
        ) from None
    normalized = [h.strip().lower() for h in header]
    missing = [c for c in COLUMNS if c not in normalized]
    if missing:
        raise ManifestError(
            f"{path}: header {header} lacks column(s) {missing}; expected {','.join(COLUMNS)} "
            "(any case)"
        )
    index = {c: normalized.index(c) for c in COLUMNS}
    entries: list[KernelEntry] = []
    for line, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise ManifestError(f"{path}:{line}: {len(row)} fields, header has {len(header)}")
        cell = {c: row[i].strip() for c, i in index.items()}
        co_name = cell["co_name"]
        if not co_name.endswith(".co") or "/" in co_name or os.sep in co_name:
            raise ManifestError(f"{path}:{line}: co_name {co_name!r} is not a plain .co file name")
        if not cell["knl_name"]:
            raise ManifestError(f"{path}:{line}: empty knl_name")
        entries.append(
            KernelEntry(
                tile_m=_parse_tile(cell["tile_m"], "tile_m", line, path),
                tile_n=_parse_tile(cell["tile_n"], "tile_n", line, path),
                splitk=_parse_bool(cell["splitk"], "splitK", line, path),
                bpreshuffle=_parse_bool(cell["bpreshuffle"], "bpreshuffle", line, path),
                symbol=cell["knl_name"],
                co_name=co_name,
            )
        )
    if not entries:
        raise ManifestError(f"{path}: manifest lists no kernels")
    seen: set[str] = set()
    for e in entries:
        if e.co_name in seen:
            raise ManifestError(f"{path}: {e.co_name} is listed twice")
        seen.add(e.co_name)
    return entries


def find_f4gemm_dir(path: str | os.PathLike[str]) -> Path:
    """Resolve a directory that holds the manifest.

    Accepts the f4gemm directory itself or either meaning of AITER_ASM_DIR: aiter's own
    (`<meta>/hsa/gfx950/`, to which it appends `f4gemm/`) and the seed driver's (`<aiter>/hsa`,
    to which it appends `gfx950/f4gemm`). The first candidate holding the manifest wins.
    """
    base = Path(path)
    candidates = [base, base / F4GEMM_DIR, base / "gfx950" / F4GEMM_DIR]
    for cand in candidates:
        if (cand / MANIFEST_NAME).is_file():
            return cand
    if not base.exists():
        raise ManifestError(
            f"{base} does not exist; point --co-dir (or AITER_ASM_DIR) at aiter's f4gemm directory"
        )
    raise ManifestError(
        f"no {MANIFEST_NAME} in {base}, {base}/f4gemm or {base}/gfx950/f4gemm; "
        "point --co-dir (or AITER_ASM_DIR) at aiter's hsa/gfx950/f4gemm directory"
    )


def read_manifest(path: str | os.PathLike[str], *, check_files: bool = True) -> Manifest:
    """Read the manifest of an f4gemm directory (see find_f4gemm_dir for what `path` may be).

    With check_files, every listed .co must exist: a missing one is named with the directory,
    as the seed driver does, rather than surfacing later as a bare load failure.
    """
    directory = find_f4gemm_dir(path)
    csv_path = directory / MANIFEST_NAME
    try:
        text = read_input_text(csv_path, "manifest CSV", MAX_MANIFEST_BYTES)
    except InputError as exc:
        raise ManifestError(str(exc)) from None
    entries = parse_manifest_text(text, csv_path)
    if check_files:
        for e in entries:
            if not (directory / e.co_name).is_file():
                raise ManifestError(
                    f"no such code object: {directory / e.co_name} -- the manifest lists this "
                    f"kernel but {directory} does not contain it; point --co-dir at a directory "
                    "holding it"
                )
    return Manifest(directory=directory, csv_path=csv_path, entries=tuple(entries))


def manifest_text(entries: list[KernelEntry] | tuple[KernelEntry, ...]) -> str:
    """Render entries as a manifest CSV (aiter HEAD's header case), e.g. for rebuilt objects."""
    lines = ["tile_M,tile_N,splitK,bpreshuffle,knl_name,co_name"]
    for e in entries:
        lines.append(
            f"{e.tile_m},{e.tile_n},{int(e.splitk)},{int(e.bpreshuffle)},{e.symbol},{e.co_name}"
        )
    return "\n".join(lines) + "\n"
