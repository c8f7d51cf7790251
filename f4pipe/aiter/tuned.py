"""aiter's tuned GEMM CSV (`a4w4_blockscale_tuned_gemm.csv` and the per-model tables): its
columns, read with canonical names and each row's CSV line, so the audit, aiter's lookup and the
cycle model's calibration read one frame the same way."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd

from f4pipe.core.errors import InputError
from f4pipe.core.fsio import read_input_text

TUNED_COLUMNS = ("cu_num", "M", "N", "K", "splitK", "kernelName")


#: aiter's own measurements of a row (its tuner, on hardware), kept beside f4pipe's verdict.
RECORDED_COLUMNS = {"us": "aiter_us", "tflops": "aiter_tflops", "errRatio": "aiter_err_ratio"}


GFX_COLUMN = "gfx"


TUNED_INT_COLUMNS = ("cu_num", "M", "N", "K", "splitK")


#: aiter's tuned table is ~100 kB.
MAX_TUNED_CSV_BYTES = 64 << 20


ASM_PREFIX = "_ZN"


_CANONICAL = {c.lower(): c for c in (*TUNED_COLUMNS, *RECORDED_COLUMNS, GFX_COLUMN)}


def read_tuned(csv_path: Path) -> pd.DataFrame:
    """The tuned table with canonical column names and its 1-based CSV line per row; missing
    columns are an error."""
    text = read_input_text(csv_path, "tuned CSV", MAX_TUNED_CSV_BYTES)
    try:
        df = pd.read_csv(io.StringIO(text), skipinitialspace=True)
    except (ValueError, csv.Error) as exc:
        raise InputError(f"{csv_path}: cannot read the tuned CSV: {exc}") from None
    df = df.rename(columns=lambda c: _CANONICAL.get(str(c).strip().lower(), str(c).strip()))
    missing = [c for c in TUNED_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(
            f"{csv_path}: columns {missing} missing (expected aiter's tuned GEMM CSV with "
            f"{', '.join(TUNED_COLUMNS)})"
        )
    for col in TUNED_INT_COLUMNS:
        values = pd.to_numeric(df[col], errors="coerce")
        bad = df.index[values.isna() | (values != values.round())]
        if len(bad):
            raise InputError(
                f"{csv_path}:{bad[0] + 2}: column {col} is {df[col][bad[0]]!r}, not an integer"
            )
    df = df.copy()
    df["line"] = range(2, len(df) + 2)
    return df


# --- writing a tuned table aiter loads unchanged (f4pipe tune) --------------------------------

#: The a4w4 table's columns as the 0.1.7 wheel's tuner writes them (aiter/configs/
#: a4w4_blockscale_tuned_gemm.csv's header); 2026 revisions put `gfx` first. A written table
#: copies the fetched release's own header (tuned_header), this only when none was fetched.
A4W4_COLUMNS = (
    "cu_num",
    "M",
    "N",
    "K",
    "kernelId",
    "splitK",
    "us",
    "kernelName",
    "tflops",
    "bw",
    "errRatio",
)
#: aiter's dispatch (gemm_op_a4w4.py gemm_a4w4, both versions) reads kernelName and splitK of an
#: asm row, never kernelId: that is the tuner's index of the candidate in its own run. f4pipe
#: ran no such run, so it writes -1, the value aiter's own rows use for kernels outside the
#: tuner's CK list.
NO_KERNEL_ID = -1
#: Bytes per element of A, B and D in aiter's a4w4 tuner (`calculate(bpes=(1/2, 1/2, 2))`):
#: its `bw` column is (M*K/2 + N*K/2 + 2*M*N) / us, in GB/s.
A4W4_BYTES_PER_ELEMENT = (0.5, 0.5, 2.0)
#: What aiter's validator (csrc/ck_gemm_a4w4_blockscale/validate_tuned_csv.py) checks, kept
#: here for sources that do not ship it: names an asm or CK kernel, errRatio at most the
#: tuner's threshold, tflops within 5 % of 2MNK/us.
KERNEL_NAME_PATTERNS = ("f4gemm_bf16_per1x32Fp4", "a4w4_blockscale")
ERR_RATIO_LIMIT = 0.05
TFLOPS_TOLERANCE = 0.05


def tuned_header(csv_path: Path | None) -> tuple[str, ...]:
    """The column names of a release's main tuned table (its own spelling and order), or the
    wheel's when there is none."""
    if csv_path is None:
        return A4W4_COLUMNS
    text = read_input_text(csv_path, "tuned CSV", MAX_TUNED_CSV_BYTES)
    header = next(csv.reader(io.StringIO(text)), [])
    columns = tuple(c.strip() for c in header)
    missing = [c for c in TUNED_COLUMNS if c.lower() not in {x.lower() for x in columns}]
    if missing:
        raise InputError(f"{csv_path}:1: the header lacks {missing}: not an a4w4 tuned table")
    return columns


def a4w4_tflops(m: int, n: int, k: int, us: float) -> float:
    """aiter's tuner's tflops: 2MNK / us, rounded as it rounds."""
    return round(2 * m * n * k / (us * 1e6), 2)


def a4w4_bw(m: int, n: int, k: int, us: float) -> float:
    """aiter's tuner's bw (GB/s), rounded as it rounds."""
    a, b, d = A4W4_BYTES_PER_ELEMENT
    return round((m * k * a + n * k * b + m * n * d) / (us * 1e-6) / 1e9, 2)


def write_tuned(path: Path, columns: tuple[str, ...], rows: list[dict[str, object]]) -> None:
    """A tuned table in `columns` (a release's header): each row gives every column by its
    lower-case name; a column f4pipe has no value for stays empty."""
    from f4pipe.core.fsio import write_text

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c.lower()) is None else row[c.lower()] for c in columns])
    write_text(path, out.getvalue())


def validation_problems(csv_path: Path) -> list[str]:
    """What aiter's validate_tuned_csv.py would flag in a table (its errors and warnings
    alike: f4pipe's own tables must pass clean), for sources that do not ship it."""
    df = pd.read_csv(csv_path)
    problems = [f"column {c} missing" for c in A4W4_COLUMNS if c not in df.columns]
    if problems:
        return problems
    key = [c for c in ("gfx", "cu_num", "M", "N", "K") if c in df.columns]
    for col in ("cu_num", "M", "N", "K", "kernelId", "us", "kernelName"):
        if df[col].isna().any():
            problems.append(f"column {col} has {int(df[col].isna().sum())} null value(s)")
    dups = int(df.duplicated(subset=key, keep=False).sum())
    if dups:
        problems.append(f"{dups} rows share a ({', '.join(key)}) key")
    for col in ("M", "N", "K"):
        if (df[col] <= 0).any():
            problems.append(f"column {col} has non-positive values")
    if (df["us"] <= 0).any():
        problems.append("rows with us <= 0")
    if (df["errRatio"] > ERR_RATIO_LIMIT).any():
        problems.append(f"rows with errRatio > {ERR_RATIO_LIMIT}")
    expected = 2.0 * df["M"] * df["N"] * df["K"] / (df["us"] * 1e6)
    if ((df["tflops"] - expected).abs() / expected > TFLOPS_TOLERANCE).any():
        problems.append("rows whose tflops differ by more than 5 % from 2MNK/us")
    named = df["kernelName"].astype(str).str.contains("|".join(KERNEL_NAME_PATTERNS))
    if not named.all():
        problems.append(f"{int((~named).sum())} rows with an unrecognised kernel name")
    if df["cu_num"].nunique() > 1:
        problems.append(f"several cu_num values: {sorted(df['cu_num'].unique().tolist())}")
    return problems
