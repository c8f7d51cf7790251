"""Which of aiter's files are a4w4 tuned GEMM tables, how they are found and copied.

aiter keeps its tuned tables under `aiter/configs/` in the repository and in the wheel alike:
`a4w4_blockscale_tuned_gemm.csv` and per-model tables under `model_configs/` (dsv3, kimik3, ...).
f4pipe fetches every one of them with the code objects (f4pipe.fetch) into `<aiter-id>/configs/`,
keeping their paths below `aiter/configs`, and audits each (f4pipe.pipeline.audit); which tables
belong with an f4gemm directory is f4pipe.aiter.aiterdir's."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from f4pipe.core.fsio import sha256_file

#: Where aiter keeps its tuned tables: in the repository and in the wheel alike.
CONFIGS_PATH = "aiter/configs"


def is_tuned_table(rel_path: str) -> bool:
    """Whether a file under aiter/configs is an a4w4 tuned GEMM table (not an untuned shape
    list, not a MoE table): the one naming rule for every source kind."""
    name = rel_path.rsplit("/", 1)[-1].lower()
    return (
        name.endswith(".csv")
        and "a4w4" in name
        and "gemm" in name
        and "tuned" in name
        and "untuned" not in name
    )


def find_tables(configs_dir: Path | None) -> dict[str, Path]:
    """The tuned tables below `configs_dir` (aiter/configs of a source): {relative path: file}."""
    if configs_dir is None or not configs_dir.is_dir():
        return {}
    return {
        p.relative_to(configs_dir).as_posix(): p
        for p in sorted(configs_dir.rglob("*.csv"))
        if p.is_file() and is_tuned_table(p.relative_to(configs_dir).as_posix())
    }


def copy_tables(configs_dir: Path | None, dest: Path) -> dict[str, dict[str, Any]]:
    """Copy the tuned tables of `configs_dir` into `dest` (paths kept); sha256 + size each."""
    tables: dict[str, dict[str, Any]] = {}
    for rel, path in find_tables(configs_dir).items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        tables[rel] = {"sha256": sha256_file(target), "size": target.stat().st_size}
    return tables
