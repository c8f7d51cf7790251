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
