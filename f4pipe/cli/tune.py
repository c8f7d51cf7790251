"""`f4pipe tune --shapes LIST.csv -o TUNED.csv`: a tuned a4w4 table in aiter's format for every
shape of the lists, picked by the cycle model among the kernels safe there
(f4pipe.pipeline.tune). Beside the CSV: `<stem>.provenance.json` (what its numbers are) and
`<stem>.shapes.csv` (every shape: its status, pick and aiter's own answer). Exit 0 when
written (a shape with no safe asm kernel is listed, not an error); 2 on a bad shape list."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from f4pipe.cli import EXIT_OK, command_help
from f4pipe.cli.args import (
    add_artifact_keys,
    add_co_dir,
    add_device,
    add_protocol,
    add_store,
    protocol_from,
)
from f4pipe.host.benchprotocol import BENCH_ITERS

if TYPE_CHECKING:
    import pandas as pd

    from f4pipe.core.device import Device
    from f4pipe.perf.predict import Predictor


def run_tune(args: argparse.Namespace) -> int:
    from f4pipe.aiter.aiterdir import tuned_tables_of
    from f4pipe.aiter.lookup import build_index
    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.aiter.tuned import read_tuned, tuned_header
    from f4pipe.cli.locate import artifact_keys, locate_co_dir
    from f4pipe.core.errors import InputError
    from f4pipe.perf.predict import Predictor
    from f4pipe.pipeline import tune, tunedcsv
    from f4pipe.pipeline.resultstore import open_store

    if (args.output is None) == (args.out_dir is None):
        raise InputError("give -o TUNED.csv (one table for every list) or --out-dir DIR")
    if args.out_dir is not None:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    located = locate_co_dir(args.co_dir)
    manifest = read_manifest(located.co_dir)
    lists = tune.read_lists(args.shapes, manifest)
    tables = tuned_tables_of(located.co_dir)
    frames = {name: read_tuned(path) for name, path in tables.items()}
    if args.aiter_rows and frames:
        lists.append(tune.aiter_rows_list(frames, manifest))
    keys = artifact_keys(
        located,
        "emulator",
        aiter_id=args.aiter_id,
        toolchain_id=args.toolchain_id,
        toolchain_json=args.toolchain_json,
    )
    evidence = tune.Evidence.from_tables(
        _table(args.safety, "safety"), _table(args.splitk, "splitk")
    )
    predictor = Predictor(manifest)
    device = _timing_device(args.device)
    frame = tune.tune_lists(
        lists,
        manifest,
        keys,
        predictor,
        index=build_index(frames) if frames else None,
        evidence=evidence,
        store=open_store(args.store),
        bench=_table(args.bench, "bench"),
        device=device,
        protocol=protocol_from(args) if device is not None else None,
    )
    main_table = next(iter(tables.values()), None)
    header = tuned_header(main_table)
    source = f"{main_table}" if main_table else "the 0.1.7 wheel's columns (no table fetched)"
    written = []
    if args.output is not None:  # one table for every list
        merged = tune.ShapeList(
            args.output.stem,
            args.output,
            tuple(s for lst in lists if lst.name != tune.AITER_ROWS for s in lst.specs),
        )
        frame_one = frame[frame["list"] != tune.AITER_ROWS].assign(list=merged.name)
        written.append(
            tunedcsv.write_outputs(
                frame_one, merged, args.output, manifest, predictor, keys, header, source
            )
        )
    else:
        for lst in lists:
            if lst.name == tune.AITER_ROWS:  # the model's check, not a table to hand to aiter
                continue
            path = args.out_dir / f"{lst.name}.csv"
            written.append(
                tunedcsv.write_outputs(frame, lst, path, manifest, predictor, keys, header, source)
            )
    if args.table:
        tunedcsv.write_tune_table(args.table, frame)
    for s in tune.summarize(frame):
        print(f"f4pipe tune: {tune.summary_line(s)}")
    for line in written:
        print(f"f4pipe tune: {line}")
    print(f"f4pipe tune: {_decided_line(frame, predictor)}")
    for r in (
        frame[frame["status"] != tune.STATUS_TUNED].drop_duplicates(tune.SHAPE_KEY).itertuples()
    ):
        print(
            f"  {r.list}:{r.line} {r.name} M={r.m} N={r.n} K={r.k}: {r.status.upper()}"
            + (f" ({r.reason})" if r.status == tune.STATUS_REFUSED else "")
        )
    return EXIT_OK


def _timing_device(kind: str) -> Device | None:
    """The device whose launches `tune` times, or None where none can (the emulator: every
    pick stays predicted)."""
    from f4pipe.core.errors import HipVersionError, NoDeviceError
    from f4pipe.devices.opendevice import open_device

    if kind == "emulator":
        return None
    try:
        device = open_device(kind, lazy=True)
    except HipVersionError:
        raise  # a HIP runtime the installed hip-python does not match: fix it (exit 2)
    except NoDeviceError:
        if kind == "hip":
            raise
        return None
    return device if device.can_time else None


def _decided_line(frame: pd.DataFrame, predictor: Predictor) -> str:
    """How the picks were made, in one line: predicted, or measured where a device timed the
    candidates the model cannot separate."""
    from f4pipe.pipeline.tunemeasure import BY_MEASUREMENT, BY_PREDICTION, BY_SHIM

    picks = frame[frame["picked"]].drop_duplicates(["m", "n", "k"])
    counts = picks["decided_by"].value_counts()
    model = f"{predictor.model_id}, calibration {predictor.calibration_id}"
    if counts.get(BY_MEASUREMENT, 0) == 0 and counts.get(BY_SHIM, 0) == 0:
        return f"us, tflops and bw are PREDICTED by the cycle model ({model}; not measured)"
    parts = [f"{counts.get(BY_PREDICTION, 0)} pick(s) PREDICTED ({model})"]
    if counts.get(BY_MEASUREMENT, 0):
        parts.append(f"{counts[BY_MEASUREMENT]} MEASURED on the GPU (their us is measured)")
    if counts.get(BY_SHIM, 0):
        parts.append(
            f"{counts[BY_SHIM]} decided by the HIP shim's host clock (shim-timed: the path "
            "ran; the written us stays predicted)"
        )
    return "; ".join(parts)


def _table(path: Path | None, name: str) -> pd.DataFrame | None:
    """A pipeline table read with its schema (columns added since its release as nulls)."""
    from f4pipe.core.schemas import ADDED_COLUMNS, TABLE_SCHEMAS, read_table

    if path is None:
        return None
    return read_table(path, TABLE_SCHEMAS[name], ADDED_COLUMNS.get(name, ())).to_pandas()


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tune",
        help=command_help("tune"),
        description="For every (M, N, K) of the shape lists (M ranges cut to the M values "
        "aiter's lookup distinguishes), weigh every asm kernel and split the launcher accepts, "
        "keep the safe ones and pick the predicted fastest (on a GPU: the measured fastest of "
        "the candidates the model cannot separate); write aiter's a4w4 tuned-table format with "
        "a provenance file beside it. Times are PREDICTED (cycle model) unless measured.",
    )
    add_co_dir(p)
    add_artifact_keys(p)
    add_store(p)
    add_device(
        p,
        auto="hip when a gfx950 GPU answers (the candidates the model cannot separate are "
        "timed there, the measured fastest picked), else none (every pick predicted)",
    )
    p.add_argument(
        "--iters",
        type=int,
        default=BENCH_ITERS,
        help=f"on a GPU: timed launches per candidate (default {BENCH_ITERS})",
    )
    add_protocol(p)
    p.add_argument(
        "--shapes",
        type=Path,
        action="append",
        required=True,
        help="a shape list (name,M,N,K[,kernel]; M a value or range), repeatable",
    )
    p.add_argument("-o", "--output", type=Path, help="the tuned CSV (every list in one table)")
    p.add_argument("--out-dir", type=Path, help="one tuned CSV per list: DIR/<list>.csv")
    p.add_argument("--table", type=Path, help="write the TUNE table (every candidate) here")
    p.add_argument("--safety", type=Path, help="safety.parquet: the edge sweep's verdicts")
    p.add_argument("--splitk", type=Path, help="splitk.parquet: the splitK stage's verdicts")
    p.add_argument("--bench", type=Path, help="bench.parquet: times a GPU measured (us_measured)")
    p.add_argument(
        "--aiter-rows",
        action="store_true",
        help="also tune aiter's own asm rows at their shapes (checks the model)",
    )
    p.set_defaults(func=run_tune)
