"""The result-set layout and the names the pipeline is built from, each defined once.

The workflow (workflow/rules/common.smk and the rules), the stages, the report, the archive,
compare and the command line all import these names from here instead of spelling them out;
the config schema's enums are checked against them by tests/test_layout.py. Standard library
only: the workflow imports it at DAG time and every `f4pipe` command line at start-up.

A result set is `results/<aiter-id>/`:

    toolchain.json   config.json   changes.json   <table>.parquet for each of TABLES
    roundtrip/<kernel>.{s,co,diff.txt}   variants/<variant>/   edits/<edit>.{diff.txt,json}
    report/{index.html,summary.md,*.png}
    architectures/<arch>/{kernels.parquet,roundtrip.parquet,roundtrip/}  (beside gfx950)

with `archives/`, `store/` and `facts/` beside the result sets, and a fetched aiter is
`resources/aiter/<aiter-id>/{f4gemm/, configs/, provenance.json}` (another architecture's code
objects in `<arch>/f4gemm/` beside them).
"""

from __future__ import annotations

import re
from pathlib import Path

# --- tables of a result set ------------------------------------------------------------------

#: The GEMM stages, each run per variant over a shape matrix (one table each).
GEMM_STAGES: tuple[str, ...] = ("verify", "splitk", "bench")
#: Every table of a result set, in report order; `<name>.parquet` in the result-set directory.
TABLES: tuple[str, ...] = ("kernels", "roundtrip", *GEMM_STAGES, "safety", "audit", "tune")


def table_file(name: str) -> str:
    """The file name of a table in a result-set directory."""
    if name not in TABLES:
        raise ValueError(f"unknown table {name!r}; one of {', '.join(TABLES)}")
    return f"{name}.parquet"


TOOLCHAIN_JSON = "toolchain.json"
REPORT_DIR = "report"
#: What changed since the newest archived set of another aiter id (`f4pipe changes`, read by
#: the report's first card).
CHANGES_JSON = "changes.json"
ROUNDTRIP_DIR = "roundtrip"
VARIANTS_DIR = "variants"  # variants/<variant>/: code objects + manifest the stages run on
EDITS_DIR = "edits"
#: `f4pipe tune`'s tables in aiter's format: tuned/<shape list>.csv, with .provenance.json and
#: .shapes.csv beside each.
TUNED_DIR = "tuned"
#: Beside the result sets in the results directory: archived sets, and the result store
#: (f4pipe.pipeline.resultstore; config `reuse.store` overrides where it lives).
ARCHIVES_DIR = "archives"
STORE_DIR = "store"
#: Beside them too: the facts the workflow's first jobs find about the aiter source and the
#: machine (f4pipe.pipeline.facts), one small JSON file each.
FACTS_DIR = "facts"


def aiter_id_fact_file(source_key: str) -> str:
    """The aiter id fact of one configured source (f4pipe.pipeline.facts.source_key)."""
    return f"aiter-id-{source_key}.json"


def device_fact_file(kind: str) -> str:
    """The device fact of one configured device kind."""
    return f"device-{kind}.json"


def toolchain_fact_file(bin_dir_key: str) -> str:
    """The toolchain found for one configured `toolchain.bin_dir` (f4pipe.pipeline.facts.
    fact_key): a result set's toolchain.json is a copy of it."""
    return f"toolchain-{bin_dir_key}.json"


def config_fact_file(aiter_id: str, names_key: str) -> str:
    """The config check of one aiter id: the config's names it confirmed (fact_key)."""
    return f"config-{aiter_id}-{names_key}.json"


#: device_id of rows that no device produced (kernels, roundtrip).
NO_DEVICE = "none"

# --- architectures ---------------------------------------------------------------------------

#: The architecture every stage serves (f4pipe.arch.gfx950.ARCH): its f4gemm/ and its tables
#: sit at the top of a fetched aiter and of a result set.
#: Each other architecture a fetch took (aiter's gfx1250 f4gemm) is listed and round-tripped
#: into `<result set>/architectures/<arch>/`: these tables and a roundtrip/ directory. The
#: stages beyond the round trip launch, time and choose gfx950's kernels only.
ARCHS_DIR = "architectures"
ARCH_TABLES: tuple[str, ...] = ("kernels", "roundtrip")
#: What an architecture's name looks like (a processor LLVM knows).
ARCH_PATTERN = r"gfx[0-9a-f]+"


def arch_table_file(arch: str, name: str) -> str:
    """A table of another architecture, relative to the result set."""
    if name not in ARCH_TABLES:
        raise ValueError(f"no {name!r} table per architecture; one of {', '.join(ARCH_TABLES)}")
    return f"{ARCHS_DIR}/{arch}/{table_file(name)}"


#: What a K tail (K % 256 != 0) reads, named once for the command line and the rules
#: (f4pipe.aiter.shaperules). The scale buffers' padding columns: "driver" E8M0 1.0 (0x7F, the
#: C++ driver), "zeros" (0x00 = 2^-127), "arbitrary" (uninitialised memory: aiter's
#: `torch.empty` pad, modelled as seeded random bytes).
SCALE_PADDINGS = ("driver", "zeros", "arbitrary")
#: The A and B rows' own K padding: "none" (row stride K: past K lies the next row) or
#: "zeros" (rows padded with zeros to round_up(K, 256), the row stride).
K_PADDINGS = ("none", "zeros")


# --- jobs ------------------------------------------------------------------------------------

#: How the per-kernel stages (verify, splitk, bench, safety) are cut into jobs (config
#: `jobs_per`): one job per variant that spreads its runs over the job's threads (least
#: start-up on one machine), or one job per kernel (fan-out for cluster executors).
JOBS_PER: tuple[str, ...] = ("variant", "kernel")
#: The unit of a per-variant job in the stage's path, `<stage>/<variant>/<unit>.parquet`: a
#: hyphen, so no .co stem ([A-Za-z0-9_]) can be the same name.
EVERY_KERNEL = "every-kernel"

# --- variants ----------------------------------------------------------------------------------

#: The variants every run has: aiter's objects and their round-tripped rebuilds.
BASE_VARIANTS: tuple[str, ...] = ("original", "rebuilt")
#: A configured edit `name` runs as the variant `edit-<name>`.
EDIT_VARIANT_PREFIX = "edit-"
#: Names an edit may have (the schema's `edits[].name` pattern and the workflow's wildcard).
EDIT_NAME_PATTERN = r"[A-Za-z0-9_]+(-[A-Za-z0-9_]+)*"
EDIT_NAME = re.compile(f"^{EDIT_NAME_PATTERN}$")


def edit_variant(name: str) -> str:
    """The variant a configured edit runs as."""
    return f"{EDIT_VARIANT_PREFIX}{name}"


def edit_name_of(variant: str) -> str | None:
    """The edit a variant runs, or None for a variant that is not an edit."""
    if variant.startswith(EDIT_VARIANT_PREFIX):
        return variant[len(EDIT_VARIANT_PREFIX) :]
    return None


# --- a fetched aiter -------------------------------------------------------------------------

#: The config's default resources_dir (and results_dir), relative to the working directory.
DEFAULT_RESOURCES_DIR = "resources"
DEFAULT_RESULTS_DIR = "results"
#: `resources/aiter/<aiter-id>/`: below the config's resources_dir.
AITER_RESOURCES_DIR = "aiter"


#: What an aiter id looks like (f4pipe.fetch: `pypi-<package>-<version>`, `git-<12 hex>`,
#: `local-<12 hex>`): the workflow's `{aiter_id}` wildcard, which must not match the
#: directories beside the result sets (archives, store, facts).
AITER_ID_PATTERN = r"(?:pypi|git|local)-[A-Za-z0-9._-]+"


def aiter_dir(resources_dir: str | Path, aiter_id: str) -> Path:
    """Where a fetched aiter lives: `<resources_dir>/aiter/<aiter-id>/`."""
    return Path(resources_dir) / AITER_RESOURCES_DIR / aiter_id


#: The directory of a fetched aiter that holds the code objects and their manifest CSV.
F4GEMM_DIR = "f4gemm"
#: The fetch record beside it.
PROVENANCE_JSON = "provenance.json"
#: The tuned tables beside it, at their paths below aiter's `aiter/configs`.
TUNED_TABLES_DIR = "configs"
#: aiter's a4w4 tuned table `f4pipe tuned-csv` copies by default (a path inside the source).
TUNED_CSV_MEMBER = "aiter/configs/a4w4_blockscale_tuned_gemm.csv"

# --- devices and seed facts ------------------------------------------------------------------

#: `device` in the config and `--device` on the command line.
DEVICE_KINDS: tuple[str, ...] = ("auto", "hip", "emulator")
#: The device_id of rows the gfx950 emulator produced (f4pipe.emu.EmulatorDevice).
EMULATOR_DEVICE_ID = "emulator"
#: The seed's splitK sweep shape (M, N, K): the `splitk` matrix and the report's reference
#: numbers (measured on an MI355X at this shape).
SEED_SPLITK_SHAPE: tuple[int, int, int] = (256, 1024, 4096)
#: The seed README's MI355X splitK errors at that shape: log2_k_split -> max abs err / max|ref|,
#: in percent (the only place they live).
SEED_SPLITK_ERR_PCT: dict[int, float] = {0: 0.28, 1: 0.51, 2: 0.62, 3: 0.81, 4: 1.15}
#: The seed driver's operand seeds for A and B (its values; f4pipe.host.operands' generator
#: differs).
SEED_A = 1234
SEED_B = 5678
#: The workgroup orders every shape-edge sweep runs (f4pipe.pipeline.edgesweep; one workgroup at a
#: time, so the order is the only freedom).
SWEEP_ORDERS: tuple[str, ...] = ("in-order", "reversed")
