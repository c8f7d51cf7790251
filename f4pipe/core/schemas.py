"""Parquet schemas of every f4pipe result table, and the one way to write them.

Every row carries the artifact-set keys (aiter id, toolchain id, device id, f4pipe version) so
tables from different sets can be concatenated and compared. Schemas are explicit pyarrow
schemas: a column with the wrong type is an error at write time, not a surprise at read time.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from f4pipe import __version__
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import atomic_path


@dataclass(frozen=True)
class ArtifactKeys:
    """What produced a result: the aiter release, the toolchain, the device, f4pipe itself."""

    aiter_id: str
    toolchain_id: str
    device_id: str
    f4pipe_version: str = __version__

    def as_row(self) -> dict[str, str]:
        return {
            "aiter_id": self.aiter_id,
            "toolchain_id": self.toolchain_id,
            "device_id": self.device_id,
            "f4pipe_version": self.f4pipe_version,
        }


KEY_FIELDS: list[pa.Field] = [
    pa.field("aiter_id", pa.string(), nullable=False),
    pa.field("toolchain_id", pa.string(), nullable=False),
    pa.field("device_id", pa.string(), nullable=False),
    pa.field("f4pipe_version", pa.string(), nullable=False),
]


def with_keys(*fields: pa.Field) -> pa.Schema:
    return pa.schema([*KEY_FIELDS, *fields])


#: The manifest columns of a kernel beside gfx950's, as kernels.parquet keeps them.
KERNEL_EXTRA_COLUMNS = ("intype", "a_preshuffle", "cluster", "scale", "outtype")
KERNELS = with_keys(
    pa.field("kernel", pa.string(), nullable=False),  # .co stem, the pipeline's wildcard
    pa.field("tile_m", pa.int32(), nullable=False),
    pa.field("tile_n", pa.int32(), nullable=False),
    pa.field("splitk", pa.bool_(), nullable=False),
    pa.field("bpreshuffle", pa.bool_(), nullable=False),
    pa.field("symbol", pa.string(), nullable=False),
    pa.field("co_name", pa.string(), nullable=False),
    pa.field("sha256", pa.string(), nullable=False),
    pa.field("size", pa.int64(), nullable=False),
    pa.field("arch", pa.string(), nullable=False),
    pa.field("code_object_version", pa.int32(), nullable=False),
    # gfx1250's own manifest columns (f4pipe.aiter.manifest GFX1250_EXTRA; cluster as XxY), so
    # compare sees a change of any of them; null for gfx950's kernels
    *(pa.field(name, pa.string()) for name in KERNEL_EXTRA_COLUMNS),
)

#: Where a row came from (f4pipe.pipeline.resultstore): `reused_from` is the aiter id whose run
#: produced a row taken from the result store, `<aiter id>/<variant>` when that run was another
#: variant's (null: it ran here), `reuse_key` the store key (null: no store was used).
_REUSE_FIELDS: list[pa.Field] = [
    pa.field("reused_from", pa.string()),
    pa.field("reuse_key", pa.string()),
]

ROUNDTRIP = with_keys(
    pa.field("kernel", pa.string(), nullable=False),
    pa.field("co_name", pa.string(), nullable=False),
    pa.field("equivalent", pa.bool_(), nullable=False),
    pa.field("header_ok", pa.bool_(), nullable=False),
    pa.field("descriptor_ok", pa.bool_(), nullable=False),
    pa.field("text_disasm_ok", pa.bool_(), nullable=False),
    pa.field("notes_ok", pa.bool_(), nullable=False),
    pa.field("symbols_ok", pa.bool_(), nullable=False),
    pa.field("sections_ok", pa.bool_(), nullable=False),
    pa.field("text_bytes_differing", pa.int64(), nullable=False),
    pa.field("text_bytes_explained", pa.int64(), nullable=False),
    pa.field("text_bytes_unexplained", pa.int64(), nullable=False),
    pa.field("num_instructions", pa.int64(), nullable=False),
    pa.field("original_size", pa.int64(), nullable=False),
    pa.field("rebuilt_size", pa.int64(), nullable=False),
    pa.field("original_sha256", pa.string(), nullable=False),
    pa.field("rebuilt_sha256", pa.string(), nullable=False),
    pa.field("co2asm_seconds", pa.float64(), nullable=False),
    pa.field("assemble_seconds", pa.float64(), nullable=False),
    pa.field("check_seconds", pa.float64(), nullable=False),
    pa.field("detail", pa.string(), nullable=False),
    # static timing findings of the rebuilt object (null: not gfx950 or not decodable)
    pa.field("hazards", pa.int64()),
    pa.field("hazard_detail", pa.string()),
    *_REUSE_FIELDS,
)


def table_from_rows(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """Build a table, failing loudly on a missing or extra column."""
    names = set(schema.names)
    for i, row in enumerate(rows):
        missing, extra = names - row.keys(), row.keys() - names
        if missing or extra:
            raise InputError(
                f"row {i} does not match schema: missing {sorted(missing)}, extra {sorted(extra)}"
            )
    if not rows:
        return pa.Table.from_batches([], schema=schema)  # empty_table() imports pandas
    try:
        return _table_from_json_lines(rows, schema)
    except (TypeError, ValueError, pa.ArrowInvalid):
        pass  # a value JSON cannot carry as is: Arrow's own conversion decides below
    columns = {name: [row[name] for row in rows] for name in schema.names}
    return pa.Table.from_pydict(columns, schema=schema)


def _table_from_json_lines(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """The rows through Arrow's JSON reader with `schema` explicit: the same table as
    pa.Table.from_pydict, without pyarrow importing pandas to convert Python objects (0.3 s
    CPU in every pipeline job that writes a table). Floats come back bit for bit (NaN and
    Infinity included); a null in a non-null column is refused by the reader."""
    import pyarrow.json as pj

    text = "".join(json.dumps(dict(row), allow_nan=True, default=_scalar) + "\n" for row in rows)
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
    read = pj.ReadOptions(block_size=max(1 << 20, 2 * len(text)))
    table = pj.read_json(io.BytesIO(text.encode()), read_options=read, parse_options=options)
    if table.num_rows != len(rows) or table.schema.names != schema.names:
        raise ValueError("JSON rows did not map one to one onto the schema")
    return pa.Table.from_arrays(table.columns, schema=schema)  # the reader drops "not null"


def _scalar(value: Any) -> Any:
    """numpy scalars (np.int64, np.bool_, ...) as the Python values they hold."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a table value")


def write_rows(
    path: str | os.PathLike[str], rows: Sequence[Mapping[str, Any]], schema: pa.Schema
) -> None:
    write_table(path, table_from_rows(rows, schema))


def write_table(path: str | os.PathLike[str], table: pa.Table) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_table(
    path: str | os.PathLike[str], schema: pa.Schema | None = None, added: Sequence[str] = ()
) -> pa.Table:
    """A Parquet table checked against `schema`; columns named in `added` (ADDED_COLUMNS) may
    be missing from an older file and are then filled with nulls. A corrupt or unreadable
    file is an InputError naming it."""
    try:
        # one file: ParquetFile, not read_table, whose dataset layer costs 0.4 s CPU to import
        with pq.ParquetFile(path) as parquet:
            table = parquet.read()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable Parquet table: {exc}") from None
    if schema is not None and added:
        for name in added:
            if name not in table.column_names and schema.get_field_index(name) >= 0:
                field = schema.field(name)
                table = table.append_column(field, pa.nulls(len(table), field.type))
        if set(table.column_names) == set(schema.names):
            table = table.select(schema.names)
    if schema is not None and not table.schema.equals(schema, check_metadata=False):
        raise InputError(
            f"{path}: schema differs from f4pipe's:\n{table.schema}\nexpected:\n{schema}"
        )
    return table


# --- GEMM stages (verify / splitk / bench): one row per (variant, kernel, shape, split) ---------
# status: "passed" | "failed" | "hazard" | "error" | "skipped" (verify, splitk); "measured" |
# "error" | "skipped" (bench). `reason` says why a row is skipped, errored or failed; metrics
# are null then. "hazard": right values, but only because the emulator's schedule hid a timing
# fault that hardware can expose (f4pipe.analysis.timing); `hazards` counts them, null = timing not
# checked (hardware, or checks off), `advisories` counts what the kernel relies on beyond the
# ISA's promises (reported, never a failure).

_GEMM_CASE_FIELDS: list[pa.Field] = [
    pa.field("variant", pa.string(), nullable=False),  # original / rebuilt / ...
    pa.field("kernel", pa.string(), nullable=False),  # .co stem
    pa.field("symbol", pa.string(), nullable=False),
    pa.field("m", pa.int64(), nullable=False),
    pa.field("n", pa.int64(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("log2_k_split", pa.int32(), nullable=False),
    pa.field("gdz", pa.int32(), nullable=False),
    pa.field("seed_a", pa.int64(), nullable=False),
    pa.field("seed_b", pa.int64(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
]

_ERROR_FIELDS: list[pa.Field] = [
    pa.field("alpha", pa.float64(), nullable=False),
    pa.field("passed", pa.bool_()),
    pa.field("bad", pa.int64()),
    pa.field("max_abs_err", pa.float64()),
    pa.field("max_rel_err", pa.float64()),
    pa.field("err_frac", pa.float64()),
    pa.field("max_abs_ref", pa.float64()),
    pa.field("atol", pa.float64()),
    pa.field("rtol", pa.float64()),
    pa.field("seconds", pa.float64()),  # wall time of the run (host + device)
    pa.field("hazards", pa.int64()),
    pa.field("advisories", pa.int64()),
]

VERIFY = with_keys(*_GEMM_CASE_FIELDS, *_ERROR_FIELDS, *_REUSE_FIELDS)

SPLITK = with_keys(
    *_GEMM_CASE_FIELDS,
    pa.field("k_num", pa.int32(), nullable=False),
    pa.field("k_per_tg", pa.int64(), nullable=False),
    *_ERROR_FIELDS,
    *_REUSE_FIELDS,
)

BENCH = with_keys(
    *_GEMM_CASE_FIELDS,
    pa.field("iters", pa.int32(), nullable=False),  # timed launches (repeats x launches)
    pa.field("warmup", pa.int32(), nullable=False),  # at least this many untimed launches
    pa.field("us", pa.float64()),  # the median launch (f4pipe.host.benchstats)
    pa.field("tflops", pa.float64()),
    # The cycle model's prediction (f4pipe.perf), on every device; never in us / tflops.
    pa.field("us_pred", pa.float64()),
    pa.field("tflops_pred", pa.float64()),
    pa.field("bound", pa.string()),
    pa.field("model_id", pa.string()),
    pa.field("calibration_id", pa.string()),
    # How the row was timed and the spread of its launches (f4pipe.host.benchstats): every launch's
    # microseconds, the minimum, quartiles, the 95 % interval of the median, Tukey outliers,
    # and the operand copies cold mode rotated through. Null where nothing was timed.
    pa.field("protocol", pa.string()),
    pa.field("launch_us", pa.list_(pa.float64())),
    pa.field("us_min", pa.float64()),
    pa.field("us_q1", pa.float64()),
    pa.field("us_q3", pa.float64()),
    pa.field("us_ci_low", pa.float64()),
    pa.field("us_ci_high", pa.float64()),
    pa.field("outliers", pa.int32()),
    pa.field("rotation_copies", pa.int32()),
    pa.field("rotation_bytes", pa.int64()),
    # Where and how the row was measured (f4pipe.devices.devinfo): the GPU's identity and software
    # stack, and AMD SMI readings around the run (null without amdsmi; clocks_note says why);
    # throttled: the engine clock fell by more than 10 % during the row.
    pa.field("gpu_name", pa.string()),
    pa.field("gcn_arch", pa.string()),
    pa.field("cu_count", pa.int32()),
    pa.field("device_fingerprint", pa.string()),
    pa.field("hip_runtime", pa.string()),
    pa.field("hip_driver", pa.string()),
    pa.field("rocm_version", pa.string()),
    pa.field("hip_python_version", pa.string()),
    pa.field("sclk_before_mhz", pa.float64()),
    pa.field("sclk_after_mhz", pa.float64()),
    pa.field("mclk_before_mhz", pa.float64()),
    pa.field("mclk_after_mhz", pa.float64()),
    pa.field("power_before_w", pa.float64()),
    pa.field("power_after_w", pa.float64()),
    pa.field("temp_before_c", pa.float64()),
    pa.field("temp_after_c", pa.float64()),
    pa.field("power_cap_w", pa.float64()),
    pa.field("throttled", pa.bool_()),
    pa.field("clocks_note", pa.string()),
)

# --- shape-edge safety (f4pipe.pipeline.edgesweep): one row per (kernel, edge shape, policy) ---
# verdict: safe | race | hazard | wrong | fault ("hazard": a timing fault, f4pipe.analysis.timing,
# named in `detail`); policy: "unsafe" (the seed layout, as aiter runs it) or "pad"
# (f4pipe.aiter.shaperules's remedy). rule_safe: what f4pipe.aiter.shaperules predicts; agrees: it
# matched. variant: "original", or an edit's `edit-<name>` (swept as the original is; null in a
# table written before edits were swept: the original).

SAFETY = with_keys(
    pa.field("variant", pa.string()),
    pa.field("kernel", pa.string(), nullable=False),
    pa.field("tile_m", pa.int32(), nullable=False),
    pa.field("tile_n", pa.int32(), nullable=False),
    pa.field("bpreshuffle", pa.bool_(), nullable=False),
    pa.field("store_class", pa.string(), nullable=False),
    pa.field("edge_class", pa.string(), nullable=False),
    pa.field("m", pa.int64(), nullable=False),
    pa.field("n", pa.int64(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("policy", pa.string(), nullable=False),
    pa.field("scale_pad", pa.string(), nullable=False),
    pa.field("k_pad", pa.string(), nullable=False),
    pa.field("orders", pa.string(), nullable=False),
    pa.field("verdict", pa.string(), nullable=False),
    pa.field("order_dependent", pa.bool_(), nullable=False),
    pa.field("bad", pa.int64(), nullable=False),
    pa.field("first_bad_row", pa.int64()),
    pa.field("first_bad_col", pa.int64()),
    pa.field("expected", pa.float64()),
    pa.field("got", pa.float64()),
    pa.field("canary_damaged", pa.int64(), nullable=False),
    pa.field("races", pa.int64(), nullable=False),
    pa.field("race_detail", pa.string(), nullable=False),
    pa.field("detail", pa.string(), nullable=False),
    pa.field("static_d_bound", pa.string(), nullable=False),
    pa.field("static_n_guards", pa.string(), nullable=False),
    pa.field("static_n_bounded", pa.bool_(), nullable=False),
    pa.field("static_k_loop", pa.string(), nullable=False),
    pa.field("static_load_bound", pa.string(), nullable=False),
    pa.field("reproducer", pa.string(), nullable=False),
    pa.field("rule_safe", pa.bool_(), nullable=False),
    pa.field("agrees", pa.bool_(), nullable=False),
    *_REUSE_FIELDS,
)

# --- tuned-config audit (f4pipe.pipeline.audit): one row per asm row of aiter's tuned CSV ----
# status: "safe" | "unsafe" (f4pipe.aiter.shaperules's rules) | "unknown-kernel" (not in the
# manifest).
# emulated: the verdict of the emulator run at the row's N with reduced M and K, or "" if not
# emulated.

AUDIT = with_keys(
    pa.field("csv", pa.string(), nullable=False),  # the table's path below aiter/configs
    pa.field("line", pa.int64(), nullable=False),  # 1-based line in the CSV (header = 1)
    pa.field("gfx", pa.string()),  # the row's `gfx` column ("" when the table has none)
    pa.field("cu_num", pa.int64(), nullable=False),
    pa.field("m", pa.int64(), nullable=False),
    pa.field("n", pa.int64(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("kernel", pa.string(), nullable=False),  # .co stem ("" when unknown)
    pa.field("symbol", pa.string(), nullable=False),
    pa.field("log2_k_split", pa.int32(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("edge_classes", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("emu_m", pa.int64()),
    pa.field("emu_n", pa.int64()),
    pa.field("emu_k", pa.int64()),
    pa.field("emulated", pa.string(), nullable=False),
    pa.field("emu_detail", pa.string(), nullable=False),
    pa.field("reproducer", pa.string(), nullable=False),
    pa.field("emu_orders", pa.string()),  # per workgroup order: right / wrong, raced dwords
    pa.field("finding", pa.string()),  # what f4pipe shows, beside aiter's record
    pa.field("aiter_us", pa.float64()),  # aiter's own recorded columns of the row
    pa.field("aiter_tflops", pa.float64()),
    pa.field("aiter_err_ratio", pa.float64()),
    *_REUSE_FIELDS,  # of the row's emulation (null: not emulated)
    # The cycle model (f4pipe.perf; audit-tuned --predict, else null): the recorded kernel's
    # predicted time, the predicted best kernel safe at the shape, and the predicted gain of
    # re-tuning to it; `suspect` when aiter's recorded time and the prediction disagree by more
    # than the model's p90 error; `best_raced`: whether aiter's tuner had that kernel when it
    # timed the row (aiter's git history, f4pipe.perf.history; null for a row it does not know).
    pa.field("us_pred", pa.float64()),
    pa.field("best_kernel_pred", pa.string()),
    pa.field("best_us_pred", pa.float64()),
    pa.field("gain_pct_pred", pa.float64()),
    pa.field("suspect", pa.string()),
    pa.field("best_raced", pa.bool_()),
    # aiter's lookup (f4pipe.aiter.lookup): how many M in 1..65536 reach the row (0: a merge
    # drops it or a duplicate key breaks the table), and the key findings about it
    # (comma-separated: duplicate, lost-in-merge, no-part, unsupported-arch, exact-only; "" none).
    pa.field("reached_by_m", pa.int64()),
    pa.field("lookup_finding", pa.string()),
)
# --- traffic coverage (f4pipe.aiter.traffic; `audit-tuned --shapes`): one row per group of M
# values of a shape that aiter serves alike. outcome: hit | miss | error; `candidates`
# (comma-separated .co names) is every kernel aiter's fallback may pick; safe is null for a CK
# kernel or when nothing runs. The *_pred columns are the cycle model's (--predict), null otherwise.
COVERAGE = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("m_lo", pa.int64(), nullable=False),
        pa.field("m_hi", pa.int64(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("k", pa.int64(), nullable=False),
        pa.field("cu_num", pa.int64(), nullable=False),
        pa.field("gfx", pa.string(), nullable=False),
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("how", pa.string(), nullable=False),
        pa.field("padded_m", pa.int64()),
        pa.field("table", pa.string(), nullable=False),
        pa.field("line", pa.int64()),
        pa.field("kernel", pa.string(), nullable=False),
        pa.field("candidates", pa.string(), nullable=False),
        pa.field("unsafe_candidates", pa.string(), nullable=False),  # the unsafe ones of them
        pa.field("log2_k_split", pa.int32(), nullable=False),
        pa.field("safe", pa.bool_()),
        pa.field("us_pred", pa.float64()),
        pa.field("best_kernel_pred", pa.string(), nullable=False),
        pa.field("best_us_pred", pa.float64()),
        pa.field("gain_pct_pred", pa.float64()),
    ]
)
# --- tuning (f4pipe.pipeline.tune; `f4pipe tune`): one row per candidate (kernel, split) of
# every shape of every shape list (`list`; "aiter-rows": aiter's own asm rows at their shapes).
# m is the tuned row's M, m_low the smallest M it serves (safety holds at both); reason: why the
# candidate is unsafe ("" safe); picked: the shape's pick; status: the shape's (tuned | no safe
# asm kernel | refused); aiter_*: what aiter's own tables run at the shape (f4pipe.aiter.lookup);
# us_pred is PREDICTED (the cycle model); us_measured a timed launch's median: the bench
# stage's on a GPU, or tune's own on measured_on (a GPU, or "hip-shim-emulator": the host's
# clock); decided_by how the shape's pick was made (predicted | measured | shim-timed:
# f4pipe.pipeline.tunemeasure); err_ratio (picks only) is aiter's tuner's measure on the
# emulated run at err_shape; band_p90_pct the model's p90 error for m's range.
TUNE = with_keys(
    pa.field("list", pa.string(), nullable=False),
    pa.field("name", pa.string(), nullable=False),
    pa.field("line", pa.int64(), nullable=False),
    pa.field("m", pa.int64(), nullable=False),
    pa.field("m_low", pa.int64(), nullable=False),
    pa.field("n", pa.int64(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("kernel", pa.string(), nullable=False),
    pa.field("log2_k_split", pa.int32(), nullable=False),
    pa.field("safe", pa.bool_(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("us_pred", pa.float64()),
    pa.field("tflops_pred", pa.float64()),
    pa.field("us_measured", pa.float64()),
    pa.field("measured_on", pa.string(), nullable=False),
    pa.field("decided_by", pa.string(), nullable=False),
    pa.field("picked", pa.bool_(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("aiter_outcome", pa.string(), nullable=False),
    pa.field("aiter_row", pa.string(), nullable=False),
    pa.field("aiter_kernel", pa.string(), nullable=False),
    pa.field("aiter_split", pa.int32()),
    pa.field("aiter_safe", pa.bool_()),
    pa.field("err_ratio", pa.float64()),
    pa.field("err_shape", pa.string(), nullable=False),
    pa.field("band_p90_pct", pa.float64()),
)
#: Columns added to a table after its first release: an older file lacking them reads with
#: nulls there, so an archived set stays comparable with a new one.
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "kernels": KERNEL_EXTRA_COLUMNS,
    "audit": (
        "gfx",
        "emu_orders",
        "finding",
        "aiter_us",
        "aiter_tflops",
        "aiter_err_ratio",
        "reused_from",
        "reuse_key",
        "us_pred",
        "best_kernel_pred",
        "best_us_pred",
        "gain_pct_pred",
        "suspect",
        "reached_by_m",
        "lookup_finding",
        "best_raced",
    ),
    # every bench column from the cycle model's on was added after the first release
    "bench": tuple(BENCH.names[BENCH.names.index("us_pred") :]),
    "roundtrip": ("hazards", "hazard_detail", "reused_from", "reuse_key"),
    "verify": ("hazards", "advisories", "reused_from", "reuse_key"),
    "splitk": ("hazards", "advisories", "reused_from", "reuse_key"),
    "safety": ("reused_from", "reuse_key", "variant"),
}

#: Every table by the name the pipeline and `f4pipe gather` use.
TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "kernels": KERNELS,
    "roundtrip": ROUNDTRIP,
    "verify": VERIFY,
    "splitk": SPLITK,
    "bench": BENCH,
    "safety": SAFETY,
    "audit": AUDIT,
    "tune": TUNE,
}
