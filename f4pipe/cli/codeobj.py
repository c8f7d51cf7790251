"""Spine sub-commands: toolchain, co2asm, assemble, roundtrip, kernels, architectures,
rebuilt-dir, gather."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from f4pipe.cli import EXIT_FAILED, EXIT_OK, command_help
from f4pipe.cli.args import (
    add_aiter_id,
    add_co_dir,
    add_fit_resources,
    add_json_flag,
    add_record,
    add_store,
    add_toolchain_args,
    add_workers,
    toolchain_from_args,
)
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import atomic_dir, check_writable, json_text, write_text
from f4pipe.core.layout import ARCH_PATTERN, NO_DEVICE, TABLES

if TYPE_CHECKING:
    from f4pipe.core.schemas import ArtifactKeys


#: How `f4pipe toolchain` says where its LLVM came from (Toolchain.found_by).
HOW_FOUND = {
    "config": "from the config's toolchain.bin_dir",
    "rocm": "from ROCm",
    "path": "found on PATH",
    "system": "found under /usr/lib",
    "provisioned": "provisioned by f4pipe from Debian",
}


def _keys(args: argparse.Namespace, toolchain_id: str) -> ArtifactKeys:
    from f4pipe.core.schemas import ArtifactKeys

    return ArtifactKeys(aiter_id=args.aiter_id, toolchain_id=toolchain_id, device_id=NO_DEVICE)


def cmd_toolchain(args: argparse.Namespace) -> int:
    from f4pipe.codeobj.toolchain import find_toolchain, write_toolchain_json

    tc = find_toolchain(args.toolchain_bin, provision=not args.no_provision)
    if args.output:
        write_toolchain_json(tc, Path(args.output))
    how = HOW_FOUND.get(tc.found_by, tc.found_by)
    print(f"{tc.toolchain_id} ({tc.vendor}, {how}) in {tc.bin_dir}")
    return EXIT_OK


def cmd_co2asm(args: argparse.Namespace) -> int:
    from f4pipe.codeobj.co2asm import check_reassembles, co2asm

    src = Path(args.code_object)
    to_stdout = args.output == "-"
    out = src.with_suffix(".s") if args.output is None else Path(args.output)
    if not to_stdout:
        check_writable(out)
    tc = toolchain_from_args(args)
    asm = co2asm(src, tc, pc_comments=args.pc_comments)
    if not args.no_verify:
        check_reassembles(asm, src, tc)
    if to_stdout:
        sys.stdout.write(asm)
        return EXIT_OK
    write_text(out, asm)
    print(f"wrote {out}")
    return EXIT_OK


def cmd_assemble(args: argparse.Namespace) -> int:
    from f4pipe.codeobj.assemble import assemble

    tc = toolchain_from_args(args)
    if args.fit_resources:
        from f4pipe.edits.resources import fit_and_assemble

        print(fit_and_assemble(args.assembly, args.output, tc).render())
        print(f"wrote {args.output}")
        return EXIT_OK
    out = assemble(args.assembly, args.output, tc)
    print(f"wrote {out}")
    return EXIT_OK


def cmd_roundtrip(args: argparse.Namespace) -> int:
    """One code object, or with --co-dir every one its manifest lists (the pipeline's job)."""
    from f4pipe.core.schemas import ROUNDTRIP, write_rows
    from f4pipe.pipeline.resultstore import open_store, reuse_line
    from f4pipe.pipeline.roundtrip import roundtrip_dir, roundtrip_row

    if (args.code_object is None) == (args.co_dir is None):
        raise InputError("roundtrip: name one code object, or --co-dir (with --out) for all")
    if args.co_dir is not None and not args.out:
        raise InputError("roundtrip --co-dir: --out DIR is needed (the .s, .co and diffs)")
    tc = toolchain_from_args(args)
    keys = _keys(args, tc.toolchain_id)
    store = open_store(args.store)
    if args.co_dir is not None:
        rows = roundtrip_dir(args.co_dir, args.out, tc, keys, store, args.workers)
    else:
        out_dir = Path(args.out) if args.out else Path(args.code_object).parent / "rebuilt"
        rows = [roundtrip_row(args.code_object, out_dir, tc, keys, store)]
    if args.row:
        write_rows(args.row, rows, ROUNDTRIP)
    if args.json:
        print(json_text(rows[0] if args.co_dir is None else rows))
    elif args.co_dir is None:
        _print_roundtrip(rows[0], Path(args.code_object), out_dir)
    else:
        for row in rows:
            print(f"{row['co_name']}: {_verdict(row)}")
    if store is not None:
        print(reuse_line("roundtrip", rows, store, "round trip(s)"), file=sys.stderr)
    equivalent = all(row["equivalent"] for row in rows)
    return EXIT_OK if equivalent or args.record else EXIT_FAILED


def _verdict(row: dict) -> str:
    return "EQUIVALENT" if row["equivalent"] else "NOT EQUIVALENT"


def _print_roundtrip(row: dict, co_path: Path, out_dir: Path) -> None:
    """One round trip in words: the verdict's text (its diff file below the lines naming the
    files), the timing check, the files."""
    from f4pipe.pipeline.roundtrip import diff_header, output_paths

    asm, rebuilt, diff = output_paths(co_path, out_dir)
    header = diff_header(co_path, rebuilt, row["toolchain_id"])
    print(f"{row['co_name']}: {_verdict(row)}")
    print(diff.read_text().removeprefix(header), end="")
    if row["hazards"] is None:
        print(f"timing (static): {row['hazard_detail']}")
    else:
        first = f"; first: {row['hazard_detail']}" if row["hazards"] else ""
        print(f"timing (static, all paths): {row['hazards']} finding(s){first}")
    print(f"assembly: {asm}\nrebuilt:  {rebuilt}\ndiff:     {diff}")


def cmd_kernels(args: argparse.Namespace) -> int:
    """kernels.parquet: the manifest joined with what each code object's header says."""
    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.codeobj.toolchain import read_toolchain_id
    from f4pipe.core.schemas import KERNELS, write_rows
    from f4pipe.pipeline.archs import kernel_rows

    manifest = read_manifest(args.co_dir)
    rows = kernel_rows(manifest, _keys(args, read_toolchain_id(args.toolchain_json)))
    write_rows(args.output, rows, KERNELS)
    print(f"{len(rows)} kernels from {manifest.csv_path} -> {args.output}")
    return EXIT_OK


def cmd_architectures(args: argparse.Namespace) -> int:
    """Every other architecture's f4gemm a fetched aiter holds: kernels and round trip."""
    from f4pipe.aiter.aiterdir import AiterDir
    from f4pipe.pipeline.archs import chosen_architectures, roundtrip_architectures
    from f4pipe.pipeline.resultstore import open_store

    aiter = AiterDir(Path(args.aiter_dir))
    aiter.provenance()  # a directory that is no fetched aiter is named here
    archs = chosen_architectures(aiter, parse_architectures(args.architectures))
    tc = toolchain_from_args(args)
    done = roundtrip_architectures(
        aiter, archs, args.output, tc, _keys(args, tc.toolchain_id), open_store(args.store),
        args.workers,
    )  # fmt: skip
    if not done:
        print(f"{aiter.path}: no architecture beside gfx950 to round-trip")
    for arch, rows in done.items():
        equivalent = sum(row["equivalent"] for row in rows)
        print(
            f"{arch}: {equivalent} of {len(rows)} code objects equivalent -> {args.output}/{arch}"
        )
    all_equivalent = all(row["equivalent"] for rows in done.values() for row in rows)
    return EXIT_OK if all_equivalent or args.record else EXIT_FAILED


def parse_architectures(text: str) -> list[str] | None:
    """--architectures: `all` (None: every one the fetch took), `none`, or a comma list."""
    if text == "all":
        return None
    names = [] if text == "none" else [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in names if not re.fullmatch(ARCH_PATTERN, a)]
    if bad:
        raise InputError(
            f"--architectures: {', '.join(bad)} is not an architecture (gfx...); give all, "
            "none or a comma list such as gfx1250"
        )
    return names


def cmd_gather(args: argparse.Namespace) -> int:
    """Concatenate per-job Parquet tables of one schema into one table."""
    import pyarrow as pa

    from f4pipe.core.schemas import TABLE_SCHEMAS, read_table, write_table

    schema = TABLE_SCHEMAS[args.table]
    tables = [read_table(p, schema) for p in args.rows]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    write_table(args.output, table)
    print(f"{table.num_rows} {args.table} rows from {len(tables)} file(s) -> {args.output}")
    return EXIT_OK


def cmd_rebuilt_dir(args: argparse.Namespace) -> int:
    """Rebuilt objects plus their own manifest, so later stages treat them like aiter's."""
    from f4pipe.aiter.manifest import MANIFEST_NAME, manifest_text, read_manifest

    manifest = read_manifest(args.co_dir)
    rebuilt = Path(args.rebuilt)
    with atomic_dir(args.output) as out:
        for e in manifest:
            src = rebuilt / e.co_name
            if not src.is_file():
                raise InputError(f"no rebuilt object {src}; run the roundtrip stage first")
            shutil.copy2(src, out / e.co_name)
        (out / MANIFEST_NAME).write_text(manifest_text(manifest.entries))
    print(f"{len(manifest)} rebuilt kernels -> {args.output}")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("toolchain", help=command_help("toolchain"))
    add_toolchain_args(p)
    p.add_argument("--no-provision", action="store_true", help="only search, never download")
    p.add_argument("-o", "--output", help="write toolchain.json here")
    p.set_defaults(func=cmd_toolchain)

    p = subparsers.add_parser("co2asm", help=command_help("co2asm"))
    p.add_argument("code_object", help="an AMDGPU code object (.co / .hsaco), v3+")
    p.add_argument("-o", "--output", help="output .s, - for stdout (default: beside the input)")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="do not assemble the output to check it (default: a line LLVM rejects is an error "
        "naming it, exit 2, and nothing is written)",
    )
    p.add_argument(
        "--pc-comments",
        action="store_true",
        help="end each instruction with `// pc 0x...`, its address in the code object, so a "
        "finding reported against the .co (`pc 0x3364 (label_01D8+0x4)`) can be found in the .s",
    )
    add_toolchain_args(p)
    p.set_defaults(func=cmd_co2asm)

    p = subparsers.add_parser("assemble", help=command_help("assemble"))
    p.add_argument("assembly", help=".s with an .amdgcn_target directive (as co2asm writes)")
    p.add_argument("-o", "--output", required=True, help="output code object")
    add_fit_resources(p)
    add_toolchain_args(p)
    p.set_defaults(func=cmd_assemble)

    p = subparsers.add_parser(
        "roundtrip",
        help=command_help("roundtrip"),
        description="Disassemble, reassemble and compare a code object. Exit 0 iff every check "
        "holds and no .text byte is unexplained; 1 if not equivalent; 2 on an error.",
    )
    p.add_argument("code_object", nargs="?", help="a code object (or --co-dir)")
    add_co_dir(p, what="round-trip every code object the manifest lists (instead of one)")
    p.add_argument(
        "--out",
        help="directory for the .s, rebuilt .co and diff (default for one object: ./rebuilt "
        "beside it; needed with --co-dir)",
    )
    add_json_flag(p, "the result (instead of the summary; with --co-dir a list)")
    p.add_argument(
        "--row", help="also write the result as a roundtrip Parquet file (a row per object)"
    )
    p.add_argument("--aiter-id", default="unknown", help="artifact key recorded in --row/--json")
    add_record(p, "the verdict")
    add_store(p)
    add_workers(p)
    add_toolchain_args(p)
    p.set_defaults(func=cmd_roundtrip)

    p = subparsers.add_parser("kernels", help=command_help("kernels"))
    add_co_dir(p, required=True)
    p.add_argument("--toolchain-json", required=True, help="the toolchain.json to record")
    add_aiter_id(p, required=True)
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_kernels)

    p = subparsers.add_parser(
        "architectures",
        help=command_help("architectures"),
        description="List and round-trip the f4gemm code objects of every architecture beside "
        "gfx950 that a fetched aiter holds (aiter's gfx1250), into -o DIR/<arch>/: "
        "kernels.parquet, roundtrip.parquet and roundtrip/. Exit 0 iff all are equivalent.",
    )
    p.add_argument("--aiter-dir", required=True, help="a fetched aiter: resources/aiter/<id>")
    p.add_argument(
        "--architectures",
        default="all",
        help="all (default: every one the fetch took), none, or a comma list such as gfx1250",
    )
    p.add_argument("-o", "--output", required=True, help="the result set's architectures/")
    p.add_argument("--aiter-id", default="unknown", help="artifact key recorded in the tables")
    add_record(p, "the verdict")
    add_store(p)
    add_workers(p)
    add_toolchain_args(p)
    p.set_defaults(func=cmd_architectures)

    p = subparsers.add_parser("gather", help=command_help("gather"))
    p.add_argument("table", choices=TABLES, help="which table the rows belong to")
    p.add_argument("rows", nargs="*", help="Parquet files to concatenate, in order")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_gather)

    p = subparsers.add_parser("rebuilt-dir", help=command_help("rebuilt-dir"))
    add_co_dir(p, required=True, what="the original code objects (for their manifest)")
    p.add_argument("--rebuilt", required=True, help="directory holding the rebuilt .co files")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_rebuilt_dir)
