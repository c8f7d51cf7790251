"""The facts the workflow needs from the aiter source and the machine, found by jobs.

The DAG depends on two things that take work to learn: the aiter id (a git branch or tag names
a commit only the network knows; a local directory's id is the digest of its bytes) and, with
`device: auto`, whether a gfx950 GPU answers (hip-python probes the device). Working them out
while Snakemake parses the Snakefile would pay that work on every parse, and on a cluster in
every job, and would make a dry run need the network and a working hip-python. Instead a job
finds each fact once and writes it as a small JSON file under `<results_dir>/facts/`
(f4pipe.core.layout FACTS_DIR) that the workflow's checkpoints read:

- the aiter id fact (`f4pipe aiter-id`): found again when the configured source changes, and
  for a local directory when one of its files does (the job's inputs are the directory's files,
  listed, not read); a git branch or tag is resolved once and kept, so a run follows it to a
  newer commit only when asked (`snakemake --forcerun aiter_id all`): only the network could
  tell, and a run should not need it to learn that nothing changed;
- the device fact (`f4pipe device`): what the configured kind means here, in particular whether
  the device times launches (bench's jobs depend on it); kept until deleted;
- the toolchain fact (`f4pipe toolchain`): the LLVM the configured `toolchain.bin_dir` gives,
  proved to know gfx950; kept until deleted (`--forcerun toolchain` finds it again). A result
  set's toolchain.json is a copy of it, made after it: a directory that is no LLVM fails this
  job, whose output is no result set's file, so the earlier set keeps its toolchain.json;
- the config check (`f4pipe config-check`): the config's names only the fetched aiter can
  confirm (architectures, each edit's kernel, the tuned tables to audit), before the jobs that
  use them (and the set's config.json) run, for the same reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from f4pipe.core.fsio import read_json_file, write_json

#: The key of the aiter id fact.
AITER_ID = "aiter_id"
#: The key of the device fact: whether the configured device times launches (a gfx950 GPU).
TIMES_LAUNCHES = "times_launches"


def source_key(source: Mapping[str, Any]) -> str:
    """A short digest of the configured aiter source: the name of its fact file, so a
    changed configuration has a fact of its own."""
    text = json.dumps({k: str(v) for k, v in source.items()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fact_key(value: Any) -> str:
    """A short digest of what the config says (`toolchain.bin_dir`; the names the config check
    confirms): the name of its fact file, so a mistaken value fails in a job whose output is
    its own file, never an earlier result set's."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def local_source_files(source: Mapping[str, Any]) -> list[Path]:
    """The files a local source's aiter id is made from, listed, not read: its f4gemm
    directory's, the other architectures' beside it in aiter's layout, and the tuned tables
    (none for another kind of source)."""
    from f4pipe.aiter.aiterdir import arch_dirs_beside, tuned_tables_of
    from f4pipe.aiter.manifest import find_f4gemm_dir
    from f4pipe.fetch.sources import LocalSource, parse_source

    src = parse_source(source)
    if not isinstance(src, LocalSource):
        return []
    directory = find_f4gemm_dir(src.path)
    dirs = [directory, *arch_dirs_beside(directory).values()]
    files = sorted(path for d in dirs for path in d.iterdir() if path.is_file())
    return files + list(tuned_tables_of(directory).values())


def aiter_id_fact(source: Mapping[str, Any]) -> dict[str, Any]:
    """The aiter id a fetch of `source` gives (resolving a branch, hashing a local tree). A
    pinned wheel's pin is checked here too (the wheel is downloaded into the cache once): the
    fetch job's output keeps its path when only the pin changes, and Snakemake clears a job's
    output before it runs, so a wrong pin found by the fetch would cost the tree an earlier good
    run fetched. Found here, in a job of its own source's fact, it costs nothing."""
    from f4pipe.fetch import aiter_id_for, check_local_pin
    from f4pipe.fetch.sources import PypiSource, parse_source
    from f4pipe.fetch.wheel import ensure_wheel

    if isinstance(parse_source(source), PypiSource) and source.get("sha256"):
        ensure_wheel(source)  # raises ChecksumError on a pin the wheel does not match
    check_local_pin(source)  # a local source's pin, for the same reason
    return {AITER_ID: aiter_id_for(source), "source": {k: str(v) for k, v in source.items()}}


def device_fact(kind: str) -> dict[str, Any]:
    """What `--device kind` means on this machine: `auto` asks hip-python whether a gfx950
    GPU answers (a HIP runtime that hip-python does not match counts as one, so the stages
    report that error instead of a silent skip); `hip` always times, the emulator never."""
    if kind == "auto":
        from f4pipe.devices.opendevice import throughput_device_present

        times = throughput_device_present()
    else:
        times = kind == "hip"
    return {"device": kind, TIMES_LAUNCHES: times}


def write_fact(path: str | Path, fact: Mapping[str, Any]) -> None:
    write_json(path, dict(fact))


def read_fact(path: str | Path, key: str) -> Any:
    """One value of a fact file a job wrote (an InputError naming the file if it lacks it)."""
    from f4pipe.core.errors import InputError

    fact = read_json_file(path, "fact file")
    if not isinstance(fact, dict) or key not in fact:
        raise InputError(f"{path}: has no {key!r}; delete it and run the workflow again")
    return fact[key]
