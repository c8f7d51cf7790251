"""One result set, read: the tables and files of a results/<aiter_id>/ directory, each table
checked against its schema. The report, the archive and compare all read a set through this."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from f4pipe.aiter.aiterdir import AiterDir
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import read_json_file
from f4pipe.core.layout import (
    ARCH_PATTERN,
    ARCH_TABLES,
    ARCHS_DIR,
    DEFAULT_RESOURCES_DIR,
    GEMM_STAGES,
    NO_DEVICE,
    TABLES,
    TOOLCHAIN_JSON,
    table_file,
)
from f4pipe.core.schemas import ADDED_COLUMNS, TABLE_SCHEMAS, read_table

#: The columns that name one GEMM run in a stage table.
RUN_KEY = ["variant", "kernel", "m", "n", "k", "log2_k_split"]


@dataclass
class ResultSet:
    """The tables and files of one results/<aiter_id>/ directory; a missing table is None."""

    directory: Path
    tables: dict[str, pd.DataFrame | None]
    toolchain: dict[str, Any] | None
    #: Each other architecture's tables (`architectures/<arch>/{kernels,roundtrip}.parquet`),
    #: by architecture in name order; empty for a gfx950-only set.
    arch_tables: dict[str, dict[str, pd.DataFrame | None]] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> ResultSet:
        directory = Path(directory)
        if not directory.is_dir():
            raise InputError(f"{directory}: not a result-set directory (results/<aiter_id>/)")
        tables = _read_tables(directory, TABLES)
        if tables["kernels"] is None and tables["roundtrip"] is None:
            raise InputError(
                f"{directory}: has neither kernels.parquet nor roundtrip.parquet; "
                "point at a results/<aiter_id>/ directory the pipeline wrote"
            )
        tc_path = directory / TOOLCHAIN_JSON
        toolchain = read_json_file(tc_path, "toolchain.json") if tc_path.is_file() else None
        if toolchain is not None and not isinstance(toolchain, dict):
            raise InputError(f"{tc_path}: not a toolchain.json (a JSON object)")
        return cls(directory, tables, toolchain, _read_arch_tables(directory))

    def table(self, name: str) -> pd.DataFrame | None:
        return self.tables[name]

    def _distinct(self, column: str, names: Iterable[str]) -> list[str]:
        """The values of `column` in the named tables, every architecture's included."""
        values: set[str] = set()
        for tables in (self.tables, *self.arch_tables.values()):
            for name in names:
                df = tables.get(name)
                if df is not None and len(df):
                    values.update(df[column].astype(str))
        return sorted(values)

    def _single(self, column: str, names: Sequence[str], fallback: str | None) -> str:
        values = self._distinct(column, names)
        if len(values) > 1:
            raise InputError(
                f"{self.directory}: rows of several {column}s {values}; an artifact set has one"
            )
        if values:
            return values[0]
        if fallback is None:
            raise InputError(f"{self.directory}: no row names its {column}")
        return fallback

    @property
    def aiter_id(self) -> str:
        return self._single("aiter_id", list(TABLES), self.directory.name)

    @property
    def toolchain_id(self) -> str:
        fallback = self.toolchain.get("toolchain_id") if self.toolchain else None
        return self._single("toolchain_id", ["kernels", "roundtrip"], fallback)

    @property
    def device_id(self) -> str:
        """The device the GEMM stages ran on; several (unusual) are joined with '+'."""
        devices = [d for d in self._distinct("device_id", GEMM_STAGES) if d != NO_DEVICE]
        return "+".join(devices) if devices else NO_DEVICE

    @property
    def f4pipe_versions(self) -> list[str]:
        return self._distinct("f4pipe_version", list(TABLES))

    def files(self) -> list[Path]:
        """Every regular file of the set (relative, sorted), hidden files excluded."""
        out = []
        for path in sorted(self.directory.rglob("*")):
            rel = path.relative_to(self.directory)
            if any(part.startswith(".") for part in rel.parts) or not path.is_file():
                continue
            out.append(rel)
        return out


def _read_tables(directory: Path, names: Sequence[str]) -> dict[str, pd.DataFrame | None]:
    """The named tables of a directory, each checked against its schema; a missing one is None."""
    tables: dict[str, pd.DataFrame | None] = {}
    for name in names:
        path = directory / table_file(name)
        tables[name] = (
            read_table(path, TABLE_SCHEMAS[name], ADDED_COLUMNS.get(name, ())).to_pandas()
            if path.is_file()
            else None
        )
    return tables


def _read_arch_tables(directory: Path) -> dict[str, dict[str, pd.DataFrame | None]]:
    """The tables of every `architectures/<arch>/` directory that holds one."""
    found: dict[str, dict[str, pd.DataFrame | None]] = {}
    root = directory / ARCHS_DIR
    for sub in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if re.fullmatch(ARCH_PATTERN, sub.name):
            tables = _read_tables(sub, ARCH_TABLES)
            if any(df is not None for df in tables.values()):
                found[sub.name] = tables
    return found


def find_aiter_provenance(result_dir: Path, aiter_id: str) -> Path | None:
    """resources/aiter/<aiter_id>/provenance.json of the workflow that wrote results/<aiter_id>."""
    for root in (result_dir.parent.parent, Path.cwd()):
        fetched = AiterDir.at(root / DEFAULT_RESOURCES_DIR, aiter_id)
        if fetched.is_fetched():
            return fetched.provenance_json
    return None
