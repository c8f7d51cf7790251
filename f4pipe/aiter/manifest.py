"""The f4gemm manifest CSV: which kernels exist, their tiles, and which .co holds each.

aiter's CSV header case differs by version (the wheel has `tile_m`, aiter HEAD `tile_M`), the
wheel's file has no trailing newline, and rows are kept in file order because the tile
heuristic breaks ties by that order.
"""

from __future__ import annotations

import csv
import difflib
import functools
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
#: gfx1250's manifest (aiter hsa/gfx1250/f4gemm/, from 2026-06) has its own name and columns.
GFX1250_MANIFEST_NAME = "f4gemm.csv"
MANIFEST_NAMES = (MANIFEST_NAME, GFX1250_MANIFEST_NAME)
COLUMNS = ("tile_m", "tile_n", "splitk", "bpreshuffle", "knl_name", "co_name")
#: gfx1250's column set: no splitK or bpreshuffle column; the kernel's input format, A layout,
#: cluster shape, whether it applies scales, and its output type instead.
GFX1250_COLUMNS = (
    "tile_m",
    "tile_n",
    "intype",
    "a_preshuffle",
    "cluster_x",
    "cluster_y",
    "scale",
    "outtype",
    "knl_name",
    "co_name",
)
#: The gfx1250 columns with no gfx950 counterpart, kept per entry as they are written.
GFX1250_EXTRA = ("intype", "a_preshuffle", "cluster_x", "cluster_y", "scale", "outtype")


@dataclass(frozen=True)
class KernelEntry:
    """One manifest row."""

    tile_m: int
    tile_n: int
    splitk: bool
    bpreshuffle: bool
    symbol: str  # the mangled kernel symbol (knl_name)
    co_name: str  # the code object's file name
    #: gfx1250's own columns (GFX1250_EXTRA) as (column, value); empty for gfx950's set.
    extra: tuple[tuple[str, str], ...] = ()

    @functools.cached_property
    def name(self) -> str:
        """The .co stem: f4pipe's short, file-system-safe kernel name (kept: the tuner and
        aiter's lookup ask it hundreds of thousands of times)."""
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
        close = self.closest_names(wanted)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise ManifestError(
            f"no kernel named {wanted!r} in {self.csv_path}{hint} "
            f"(it lists {len(self.entries)}: {names}{', ...' if len(self.entries) > 5 else ''})"
        )

    def closest_names(self, wanted: str, count: int = 3) -> list[str]:
        """The names `get` takes that are closest to `wanted` (difflib), each naming one kernel:
        a full name, or an ending after an underscore that only one kernel has (`32x128`)."""
        endings: dict[str, list[str]] = {}
        for e in self.entries:
            parts = e.name.split("_")
            for i in range(len(parts)):
                endings.setdefault("_".join(parts[i:]), []).append(e.name)
        scored = []
        for name, owners in endings.items():
            ratio = difflib.SequenceMatcher(None, wanted, name).ratio()
            if len(owners) == 1 and ratio >= 0.6:  # difflib.get_close_matches' cutoff
                same = next(
                    (i for i, (a, b) in enumerate(zip(wanted, name, strict=False)) if a != b),
                    min(len(wanted), len(name)),
                )  # ties: the longer common start
                scored.append((-ratio, -same, name))
        return [name for *_, name in sorted(scored)[:count]]

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


def _column_set(normalized: list[str], header: list[str], path: Path) -> tuple[str, ...]:
    """gfx950's column set, or gfx1250's when the header has gfx1250's own columns."""
    columns = GFX1250_COLUMNS if "intype" in normalized else COLUMNS
    missing = [c for c in columns if c not in normalized]
    if missing:
        raise ManifestError(
            f"{path}: header {header} lacks column(s) {missing}; expected {','.join(COLUMNS)} "
            f"(gfx950) or {','.join(GFX1250_COLUMNS)} (gfx1250), any case"
        )
    return columns


def _entry(cell: dict[str, str], line: int, path: Path) -> KernelEntry:
    """One row as an entry. A gfx1250 row has no splitK column (aiter ships no split-K kernel
    for it) and pre-shuffles B in every kernel (`ABpreShuffle` in each name, `a_preshuffle`
    saying whether A is too), so those two are False and True; its own columns ride along."""
    tile_m = _parse_tile(cell["tile_m"], "tile_m", line, path)
    tile_n = _parse_tile(cell["tile_n"], "tile_n", line, path)
    if "splitk" in cell:
        splitk = _parse_bool(cell["splitk"], "splitK", line, path)
        bpreshuffle = _parse_bool(cell["bpreshuffle"], "bpreshuffle", line, path)
        extra: tuple[tuple[str, str], ...] = ()
    else:
        for column in ("a_preshuffle", "scale"):
            _parse_bool(cell[column], column, line, path)
        splitk, bpreshuffle = False, True
        extra = tuple((c, cell[c]) for c in GFX1250_EXTRA)
    return KernelEntry(
        tile_m=tile_m,
        tile_n=tile_n,
        splitk=splitk,
        bpreshuffle=bpreshuffle,
        symbol=cell["knl_name"],
        co_name=cell["co_name"],
        extra=extra,
    )


def _parse_rows(reader: Iterator[list[str]], path: Path) -> list[KernelEntry]:
    try:
        header = next(reader)
    except StopIteration:
        raise ManifestError(
            f"{path}: empty manifest (expected header {','.join(COLUMNS)})"
        ) from None
    normalized = [h.strip().lower() for h in header]
    columns = _column_set(normalized, header, path)
    index = {c: normalized.index(c) for c in columns}
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
        entries.append(_entry(cell, line, path))
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
        if any((cand / name).is_file() for name in MANIFEST_NAMES):
            return cand
    if not base.exists():
        raise ManifestError(
            f"{base} does not exist; point --co-dir (or AITER_ASM_DIR) at aiter's f4gemm directory"
        )
    raise ManifestError(
        f"no {MANIFEST_NAME} in {base}, {base}/f4gemm or {base}/gfx950/f4gemm (nor gfx1250's "
        f"{GFX1250_MANIFEST_NAME}); "
        "point --co-dir (or AITER_ASM_DIR) at aiter's hsa/gfx950/f4gemm directory"
    )


def manifest_path(directory: Path) -> Path:
    """The manifest CSV of an f4gemm directory: gfx950's name first, then gfx1250's."""
    for name in MANIFEST_NAMES:
        if (directory / name).is_file():
            return directory / name
    return directory / MANIFEST_NAME


def read_manifest(path: str | os.PathLike[str], *, check_files: bool = True) -> Manifest:
    """Read the manifest of an f4gemm directory (see find_f4gemm_dir for what `path` may be).

    With check_files, every listed .co must exist: a missing one is named with the directory,
    as the seed driver does, rather than surfacing later as a bare load failure.
    """
    directory = find_f4gemm_dir(path)
    csv_path = manifest_path(directory)
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
    if entries and all(e.extra for e in entries):
        return _gfx1250_manifest_text(entries)
    lines = ["tile_M,tile_N,splitK,bpreshuffle,knl_name,co_name"]
    for e in entries:
        lines.append(
            f"{e.tile_m},{e.tile_n},{int(e.splitk)},{int(e.bpreshuffle)},{e.symbol},{e.co_name}"
        )
    return "\n".join(lines) + "\n"


def _gfx1250_manifest_text(entries: list[KernelEntry] | tuple[KernelEntry, ...]) -> str:
    """gfx1250's column set, in aiter's order."""
    lines = [",".join(GFX1250_COLUMNS)]
    for e in entries:
        extra = dict(e.extra)
        cells = [str(e.tile_m), str(e.tile_n), *(extra[c] for c in GFX1250_EXTRA)]
        lines.append(",".join([*cells, e.symbol, e.co_name]))
    return "\n".join(lines) + "\n"
