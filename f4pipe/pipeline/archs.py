"""The kernels table of any f4gemm directory, and the round trip of the other architectures a
fetched aiter holds beside gfx950's.

aiter's git tree ships f4gemm for gfx1250 beside gfx950's since 2026-06 (`hsa/gfx1250/f4gemm/`,
fetched to `<aiter-id>/gfx1250/f4gemm/`). Those code objects are listed and proven equivalent like
gfx950's; the emulator, splitK, safety, timing and audit stages are gfx950's only. One job does
every such architecture (`architectures/<arch>/` of the result set), so the workflow need not know
which architectures a source holds before its fetch has run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from f4pipe.aiter.aiterdir import AiterDir
from f4pipe.aiter.manifest import Manifest, read_manifest
from f4pipe.arch.gfx950 import ARCH
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.codeobj.toolchain import Toolchain
from f4pipe.core.errors import ConfigError, InputError
from f4pipe.core.fsio import sha256_file
from f4pipe.core.layout import ROUNDTRIP_DIR, table_file
from f4pipe.core.schemas import KERNELS, ROUNDTRIP, ArtifactKeys, write_rows
from f4pipe.pipeline.resultstore import ResultStore, Row
from f4pipe.pipeline.roundtrip import roundtrip_dir


def kernel_rows(manifest: Manifest, keys: ArtifactKeys) -> list[Row]:
    """kernels.parquet's rows: the manifest joined with what each code object's header says."""
    rows = []
    for e in manifest:
        path = manifest.co_path(e)
        co = CodeObject.read(path)
        symbols = {k.name for k in co.kernel_symbols()}
        if e.symbol not in symbols:
            raise InputError(
                f"{path}: has no kernel {e.symbol} (the manifest's knl_name); "
                f"it has {sorted(symbols)}"
            )
        rows.append(
            {
                **keys.as_row(),
                "kernel": e.name,
                "tile_m": e.tile_m,
                "tile_n": e.tile_n,
                "splitk": e.splitk,
                "bpreshuffle": e.bpreshuffle,
                "symbol": e.symbol,
                "co_name": e.co_name,
                "sha256": sha256_file(path),
                "size": path.stat().st_size,
                "arch": co.arch,
                "code_object_version": co.code_object_version,
            }
        )
    return rows


def chosen_architectures(aiter: AiterDir, chosen: Sequence[str] | None) -> list[str]:
    """The architectures beside gfx950 to round-trip: every one the fetch took (None), or
    those named, each of which the fetch must hold (gfx950 is always run: not listed here)."""
    held = [arch for arch in aiter.architectures() if arch != ARCH]
    if chosen is None:
        return held
    missing = [arch for arch in chosen if arch != ARCH and arch not in held]
    if missing:
        raise ConfigError(
            f"the fetched aiter {aiter.path} holds no {', '.join(missing)} f4gemm directory (it "
            f"holds {', '.join(aiter.architectures())}); leave {', '.join(missing)} out of the "
            "config's `architectures` (or --architectures)"
        )
    return [arch for arch in held if arch in chosen]


def roundtrip_architectures(
    aiter: AiterDir,
    archs: Sequence[str],
    out_dir: str | Path,
    toolchain: Toolchain,
    keys: ArtifactKeys,
    store: ResultStore | None = None,
    workers: int = 1,
) -> dict[str, list[Row]]:
    """For each of `archs`: `<out_dir>/<arch>/kernels.parquet`, `roundtrip.parquet` and the
    round trip's files in `roundtrip/` (`out_dir`: the result set's `architectures/`); the
    roundtrip rows by architecture."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = {}
    for arch in archs:
        co_dir = aiter.arch_f4gemm(arch)
        target = out_dir / arch
        write_rows(
            target / table_file("kernels"), kernel_rows(read_manifest(co_dir), keys), KERNELS
        )
        rows = roundtrip_dir(co_dir, target / ROUNDTRIP_DIR, toolchain, keys, store, workers)
        write_rows(target / table_file("roundtrip"), rows, ROUNDTRIP)
        done[arch] = rows
    return done
