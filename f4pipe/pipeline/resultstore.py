"""Reuse of emulated verdicts by content: the result store.

aiter's f4gemm code objects rarely change between releases (byte-identical from v0.1.5.post3
to 2026-08), yet every update is a new result set (aiter id) that would re-emulate everything.
The store keeps the rows a run produced under a key that is exactly what the run read:

- the kernel: its manifest row (tiles, splitK, bpreshuffle, symbol, .co name) and what the
  device executes of it: on the emulator the loaded, decoded program (so the rebuilt variant,
  whose bytes differ from aiter's only where the emulator does not read, takes the original's
  rows: re-emulating it would compute the same bits), elsewhere the code object's sha256;
- the run's parameters: for a GEMM stage the whole GemmRequest (shape, split, seeds, operand
  distribution, alpha, edge policy), for the safety sweep the workgroup orders, for the tuned-
  table audit the emulated shape and the orders (only the emulation is stored there: the row
  around it is the table's);
- for a round trip (f4pipe.pipeline.roundtrip, no device) the code object's sha256 and file name in
  place of the first two: co2asm, LLVM and the equivalence check read nothing else;
- the device identity (`device_id`), the toolchain identity (`toolchain_id`);
- f4pipe itself: its version and a digest of its own source files, so a development checkout
  never reuses what other code computed.

A later run with the same key takes the stored rows instead of running, replaces only what
names the result set it belongs to (its aiter id and variant), and marks them:
`reused_from` is the aiter id whose run produced the row (with `/<variant>` when that run was
another variant's), `reuse_key` the store key. Rows that
ran here have `reused_from` null. Only verdicts are stored: a skipped or errored row (no
device, a device error) is not, and bench rows never are (a throughput number is a measurement
of one moment on one machine, not a function of the inputs).

Why not Snakemake's between-workflow cache (`cache: True`, `--cache`): its key is a hash of the
job's rule, params and the provenance chain of upstream jobs, not of the bytes a job reads. The
fetch rule's params (the source's path, URL or version) are in every chain, so two aiter ids
with identical code objects never share an entry; and wildcards are not hashed at all, so per-
kernel jobs that read one fetched directory would share a single entry across kernels.

Layout: <root>/<stage>/<key[:2]>/<key>.json, one file per key holding the key's inputs and the
rows, written atomically (concurrent jobs of one workflow or several may write the same key:
the last rename wins and both wrote the same rows). A stage whose run also writes files (the
round trip: the assembly, the rebuilt object, the verdict's text) keeps them beside the entry in
<key>.files/, written before the entry that names them, so an entry is never read without its
files; a run taken from the store puts them back where the run would have written them. The
pipeline's store is <results_dir>/store (config `reuse`); commands typed by hand use one only
with --store.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any

from f4pipe.aiter.manifest import KernelEntry
from f4pipe.core.cache import f4pipe_identity
from f4pipe.core.fsio import sha256_file, write_bytes, write_text
from f4pipe.core.layout import EMULATOR_DEVICE_ID

#: Bump when the entry layout changes; part of every key.
STORE_FORMAT = 1
#: Row fields that name the result set a row belongs to, not the run: replaced on reuse.
REUSED_FROM = "reused_from"
REUSE_KEY = "reuse_key"
Row = dict[str, Any]


def kernel_identity(
    entry: KernelEntry, co_path: Path, device_id: str, store: ResultStore | None = None
) -> dict[str, Any]:
    """What identifies a kernel to a run: its manifest row and, read every time (a code object
    reassembled in place must not keep its old digest), what the device executes of it. On
    the emulator that is the loaded and decoded program (f4pipe.codeobj.program.executed_digest),
    so the rebuilt variant, which differs from aiter's bytes only where the emulator does not
    read, takes the original's rows; anywhere else (a GPU runs the bytes) the code object's
    sha256. With `store`, the decoded program's digest is kept there too (see
    `_executed_digest`)."""
    co_sha256 = sha256_file(co_path)
    if device_id == EMULATOR_DEVICE_ID:
        digest = _executed_digest(co_sha256, str(co_path), entry.symbol, store)
        if digest is not None:
            return {**asdict(entry), "emulated_program": digest}
    return {**asdict(entry), "co_sha256": co_sha256}


#: The store's stage name for executed-program digests (kernel_identity).
PROGRAM_STAGE = "program"


@cache
def _executed_digest(
    co_sha256: str, co_path: str, symbol: str, store: ResultStore | None
) -> str | None:
    """executed_digest of the bytes at `co_path`, which hash to `co_sha256`: a stage asks once
    per run, and a kernel's runs in one process decode it once (new bytes, a new entry). The
    digest is a function of those bytes, the symbol and f4pipe, so with a store it is kept
    there under them: a job whose runs all come from the store (an update with unchanged code
    objects) decodes no kernel, and does not even import the emulator."""
    if store is None:
        return _decoded_digest(co_path, symbol)
    inputs = {"co_sha256": co_sha256, "symbol": symbol, "f4pipe": f4pipe_identity()}
    key = store.key(PROGRAM_STAGE, inputs)
    stored = store.get(PROGRAM_STAGE, key, inputs)
    if stored:
        return stored[0]["emulated_program"]
    digest = _decoded_digest(co_path, symbol)
    if digest is not None:
        store.put(PROGRAM_STAGE, key, inputs, [{"emulated_program": digest}])
    return digest


def _decoded_digest(co_path: str, symbol: str) -> str | None:
    from f4pipe.codeobj.program import executed_digest

    return executed_digest(co_path, symbol)


def plain(value: Any) -> Any:
    """`value` as JSON-able data for a key (dataclasses field by field, tuples as lists)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"not a key input: {value!r}")


@dataclass(frozen=True)
class ResultStore:
    """A directory of stored rows, keyed by content (see the module docstring)."""

    root: Path

    def key(self, stage: str, inputs: Mapping[str, Any]) -> str:
        text = json.dumps(
            {"format": STORE_FORMAT, "stage": stage, "inputs": plain(dict(inputs))},
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key[:2] / f"{key}.json"

    def files_dir(self, stage: str, key: str) -> Path:
        """Where the files stored with an entry live (stages whose runs write files)."""
        return self.root / stage / key[:2] / f"{key}.files"

    def get(self, stage: str, key: str, inputs: Mapping[str, Any]) -> list[Row] | None:
        """The stored rows, or None. An unreadable or mismatched entry, or one whose files are
        gone, is a miss (it is overwritten by the run that follows), with one warning line on
        stderr."""
        path = self.path(stage, key)
        if not path.is_file():
            return None
        try:
            entry = json.loads(path.read_text())
            if entry["inputs"] != plain(dict(inputs)) or not isinstance(entry["rows"], list):
                raise ValueError("its inputs are not this run's")
            missing = [
                name
                for name in entry.get("files", [])
                if not (self.files_dir(stage, key) / name).is_file()
            ]
            if missing:
                raise ValueError(f"its files {', '.join(missing)} are missing")
            return [dict(row) for row in entry["rows"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"f4pipe: result store entry {path} ignored: {exc}", file=sys.stderr)
            return None

    def put(
        self,
        stage: str,
        key: str,
        inputs: Mapping[str, Any],
        rows: list[Row],
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """Store `rows` (and `files`, by name, written first) under `key`."""
        files = files or {}
        for name, data in files.items():
            write_bytes(self.files_dir(stage, key) / name, data)
        entry = {"format": STORE_FORMAT, "stage": stage, "inputs": plain(dict(inputs))}
        if files:
            entry["files"] = sorted(files)
        # allow_nan: the rows' floats come back bit for bit (only f4pipe reads the store)
        text = json.dumps({**entry, "rows": rows}, sort_keys=True, indent=1, allow_nan=True)
        write_text(self.path(stage, key), text + "\n")


@dataclass(frozen=True)
class StoredFiles:
    """The files a run writes besides its rows, for a stage that stores them: `save` gives
    them by name after a run, `restore` puts stored ones (a directory of those names) where
    this run would have written them."""

    save: Callable[[], Mapping[str, bytes]]
    restore: Callable[[Path], None]


def reuse_or_run(
    store: ResultStore | None,
    stage: str,
    inputs: Mapping[str, Any],
    context: Mapping[str, Any],
    run: Callable[[], list[Row]],
    keep: Callable[[Row], bool] = lambda row: True,
    files: StoredFiles | None = None,
) -> list[Row]:
    """The rows of one run: stored ones with `context` put in and marked as reused (and the
    stored `files` put back), else `run()`'s (stored, with its `files`, when every row passes
    `keep`). Without a store: `run()`, unmarked."""
    if store is None:
        return [{**row, REUSED_FROM: None, REUSE_KEY: None} for row in run()]
    key = store.key(stage, inputs)
    stored = store.get(stage, key, inputs)
    if stored is not None:
        if files is not None:
            files.restore(store.files_dir(stage, key))
        return [
            {**row, **_context(row, context), REUSED_FROM: _origin(row, context), REUSE_KEY: key}
            for row in stored
        ]
    rows = [{**row, REUSED_FROM: None, REUSE_KEY: key} for row in run()]
    if rows and all(keep(row) for row in rows):
        store.put(stage, key, inputs, rows, files.save() if files is not None else None)
    return rows


def _origin(row: Row, context: Mapping[str, Any]) -> str:
    """Where a stored row ran: its aiter id, and its variant when that is another one (the
    rebuilt variant takes the original's emulated rows: `<aiter id>/original`)."""
    variant = row.get("variant")
    if variant is not None and variant != context.get("variant", variant):
        return f"{row['aiter_id']}/{variant}"
    return str(row["aiter_id"])


def _context(row: Row, context: Mapping[str, Any]) -> Row:
    return {name: value for name, value in context.items() if name in row}


def reuse_line(stage: str, rows: list[Row], store: ResultStore, what: str = "row(s)") -> str:
    """One log line: how many rows came from the store, and from which result sets."""
    reused = [row[REUSED_FROM] for row in rows if row.get(REUSED_FROM)]
    origins = f" (run in {', '.join(sorted(set(reused)))})" if reused else ""
    return (
        f"f4pipe {stage}: {len(reused)} of {len(rows)} {what} reused from the result store "
        f"{store.root}{origins}"
    )


def open_store(root: str | Path | None) -> ResultStore | None:
    """The store at `root` (created on first write), or None for no reuse."""
    return ResultStore(Path(root)) if root else None
