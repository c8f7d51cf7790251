"""On a device that times launches, `tune` measures what the cycle model cannot decide:
predicted to prune, measured to decide.

A shape's inseparable candidates are its safe ones predicted within the row's error band (the
model's out-of-sample p90 for the row's M range) of the predicted best, and at least the
MIN_MEASURED fastest predicted: the model cannot order them, a measurement can. Each is timed
with the bench protocol (cold by default: operand copies rotated, as aiter's tuner times) and
the shape's pick becomes the measured fastest among them (tune.choose). On an MI355X the
tuned CSV then carries the measured time. f4pipe's HIP shim runs the same path with the
host's clock around emulated launches: the rows say "shim-timed", and the CSV keeps the
predicted time (a shim time is never a GPU's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from f4pipe.aiter.manifest import Manifest
from f4pipe.core.device import measures_throughput
from f4pipe.core.errors import DeviceError, ShapeError
from f4pipe.host.gemm import GemmRequest, run_gemm
from f4pipe.pipeline.progress import track

if TYPE_CHECKING:
    from f4pipe.core.device import Device
    from f4pipe.host.benchprotocol import Protocol

#: At least this many of a shape's fastest predicted safe candidates are measured.
MIN_MEASURED = 3
#: How a shape's pick was decided (TUNE's `decided_by`).
BY_PREDICTION, BY_MEASUREMENT, BY_SHIM = "predicted", "measured", "shim-timed"


def inseparable(frame: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """Per candidate: whether its shape's measurement must include it (safe, predicted, and
    within the band of the shape's predicted best or among its MIN_MEASURED fastest)."""
    safe = frame["safe"] & frame["us_pred"].notna()
    us = frame["us_pred"].where(safe)
    groups = [frame[c] for c in keys]
    best = us.groupby(groups).transform("min")
    within = us <= best * (1.0 + frame["band_p90_pct"] / 100.0)
    fastest = us.groupby(groups).rank(method="first") <= MIN_MEASURED
    return (safe & (within | fastest)).to_numpy()


def measure(
    frame: pd.DataFrame,
    manifest: Manifest,
    device: Device,
    protocol: Protocol,
    keys: list[str],
) -> pd.DataFrame:
    """`frame` with each inseparable candidate timed on `device`: `us_measured` (the median
    launch), `measured_on` (the device) and the shapes' `decided_by`. A candidate that fails
    to run keeps its prediction and is not measured."""
    frame = frame.copy()
    chosen = np.flatnonzero(inseparable(frame, keys))
    decided = BY_MEASUREMENT if measures_throughput(device) else BY_SHIM
    runs = track([frame.index[i] for i in chosen], f"tune: timing candidates on {device.device_id}")
    for i in runs:
        r = frame.loc[i]
        entry = manifest.get(str(r["kernel"]))
        request = GemmRequest(
            int(r["m"]), int(r["n"]), int(r["k"]), int(r["log2_k_split"]),
            verify=False, protocol=protocol,
        )  # fmt: skip
        try:
            result = run_gemm(device, entry, manifest.co_path(entry), request)
        except (DeviceError, ShapeError) as exc:
            frame.loc[i, "reason"] = f"not timed on {device.device_id}: {exc}"
            continue
        frame.loc[i, ["us_measured", "measured_on"]] = float(result.us), device.device_id
    timed = frame["measured_on"] != ""
    shape_timed = (timed & frame["safe"]).groupby([frame[c] for c in keys]).transform("any")
    frame["decided_by"] = np.where(shape_timed, decided, BY_PREDICTION)
    return frame


def decision_time(frame: pd.DataFrame) -> pd.Series:
    """The time each candidate competes with: where its shape was timed, the measured time
    (candidates not timed drop out: the model put them behind), else the predicted one."""
    if "decided_by" not in frame:
        return frame["us_pred"]
    timed_shape = frame["decided_by"] != BY_PREDICTION
    measured = frame["us_measured"].where(frame["measured_on"] != "")
    return frame["us_pred"].where(~timed_shape, measured)
