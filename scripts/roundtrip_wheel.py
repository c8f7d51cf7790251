"""Round-trip every code object in the pinned amd-aiter wheel and count the verdicts.

Not part of the pipeline: a measurement for the equivalence checker. Every `.co`
in the wheel (gfx942 and gfx950, about 2,500) goes through `f4pipe.pipeline.roundtrip`; each verdict
and its problems/explanations are written as one JSON line, then grouped by reason.

    nice -n 10 python scripts/roundtrip_wheel.py -o wheel-roundtrip.jsonl [--jobs 1] [--sample N]

The CPU is shared, so the default is one process; `--sample N` takes every k-th object.
Re-running skips the objects already in the output file.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

from f4pipe.codeobj.toolchain import find_toolchain
from f4pipe.core.errors import F4PipeError
from f4pipe.fetch import PypiSource, ensure_wheel
from f4pipe.pipeline.roundtrip import roundtrip


def wheel_path() -> Path:
    """The pinned wheel, downloaded into ~/.cache/f4pipe/wheels if it is not there yet."""
    return ensure_wheel(PypiSource())[0]


def one(args: tuple[str, str, str]) -> dict[str, object]:
    member, co_path, bin_dir = args
    tc = find_toolchain(bin_dir, provision=False)
    with tempfile.TemporaryDirectory(prefix="f4pipe-wheel-rt-") as out:
        try:
            eq = roundtrip(co_path, out, tc).equivalence
        except F4PipeError as exc:
            return {"member": member, "verdict": "error", "reasons": [str(exc)]}
    return {
        "member": member,
        "verdict": "equivalent" if eq.equivalent else "not equivalent",
        "reasons": [*eq.problems, *(f"explained: {e}" for e in eq.explained_layout)],
    }


def reason_class(reason: str) -> str:
    """A reason with the numbers and names that vary per object removed, for grouping."""
    return re.sub(r"0x[0-9a-f]+|\d+|\[[^\]]*\]|\([^)]*\)", "#", reason)[:160]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--sample", type=int, default=0, help="take every k-th object")
    ns = ap.parse_args()
    tc = find_toolchain()
    done = set()
    if ns.out.exists():
        done = {json.loads(line)["member"] for line in ns.out.read_text().splitlines() if line}
    with tempfile.TemporaryDirectory(prefix="f4pipe-wheel-") as tmp:
        with zipfile.ZipFile(wheel_path()) as z:
            members = sorted(n for n in z.namelist() if n.endswith(".co"))
            if ns.sample:
                members = members[:: ns.sample]
            todo = [m for m in members if m not in done]
            jobs = [(m, z.extract(m, tmp), str(tc.bin_dir)) for m in todo]
        print(f"{len(members)} code objects, {len(todo)} to do", flush=True)
        with multiprocessing.Pool(ns.jobs) as pool, ns.out.open("a") as fh:
            for k, row in enumerate(pool.imap_unordered(one, jobs), 1):
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                if k % 100 == 0:
                    print(f"{k}/{len(jobs)}", flush=True)
    rows = [json.loads(line) for line in ns.out.read_text().splitlines() if line]
    print(Counter(r["verdict"] for r in rows))
    classes = Counter((r["verdict"], reason_class(x)) for r in rows for x in r["reasons"])
    for (verdict, cls), n in classes.most_common():
        print(f"{n:5d} {verdict}: {cls}")


if __name__ == "__main__":
    main()
