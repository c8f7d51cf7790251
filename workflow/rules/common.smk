# Workflow-side helpers: config validation, the artifact-set paths, and input functions.
import mimetypes
import re
import shlex
import sys
from pathlib import Path

import yaml

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from f4pipe.core.errors import ConfigError
from f4pipe.edits.spec import check_edit_files, parse_edit_specs
from f4pipe.pipeline.joberrors import report as failed_job_report
from f4pipe.pipeline.workflowconfig import load as load_config
from f4pipe.core.fsio import json_text
from f4pipe.pipeline.facts import (
    AITER_ID,
    TIMES_LAUNCHES,
    local_source_files,
    read_fact,
    fact_key,
    source_key,
)
from f4pipe.core.layout import (
    AITER_ID_PATTERN,
    ARCHS_DIR,
    ARCHIVES_DIR,
    BASE_VARIANTS,
    CHANGES_JSON,
    EDIT_NAME_PATTERN,
    EDIT_VARIANT_PREFIX,
    EDITS_DIR,
    EVERY_KERNEL,
    F4GEMM_DIR,
    FACTS_DIR,
    GEMM_STAGES,
    REPORT_DIR,
    ROUNDTRIP_DIR,
    STORE_DIR,
    TOOLCHAIN_JSON,
    TUNED_DIR,
    VARIANTS_DIR,
    aiter_dir,
    aiter_id_fact_file,
    device_fact_file,
    edit_name_of,
    config_fact_file,
    table_file,
    toolchain_fact_file,
)
from f4pipe.aiter.manifest import read_manifest
from f4pipe.host.matrices import get_matrix, kernels_that_may_run
from f4pipe.report.plots import (
    HEATMAP_PNG,
    PARQUET_MEDIA_TYPE,
    SPLITK_PNG,
    THROUGHPUT_PNG,
)

# `snakemake --report` names each reported file's type from its extension (no warning per table)
mimetypes.add_type(*PARQUET_MEDIA_TYPE)

# config/config.yaml, then --configfile / --config on top (`aiter` replaced whole), checked with
# one line per mistake (f4pipe.pipeline.workflowconfig; the edits here: f4pipe.edits.spec); exit
# 2 as every f4pipe command does.
SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
try:
    LOADED = load_config(
        config, workflow.overwrite_configfiles, yaml.safe_load(SCHEMA.read_text())
    )
    EDIT_SPECS = check_edit_files(parse_edit_specs(LOADED.get("edits", [])))
except ConfigError as exc:
    sys.stderr.write(f"f4pipe: error: {exc}\n")
    sys.exit(2)
config.clear()
config.update(LOADED)
validate(
    config, schema="../schemas/config.schema.yaml"
)  # Snakemake's: the schema's defaults

RESOURCES = Path(config["resources_dir"])
RESULTS_ROOT = Path(config["results_dir"])
# What takes work to learn (the aiter id: a branch resolved, a local tree hashed; whether the
# device times launches: hip-python asked) is found by the aiter_id and device checkpoints and
# read from their fact files (f4pipe.pipeline.facts), never while this file is parsed.
FACTS = RESULTS_ROOT / FACTS_DIR
AITER_ID_FACT = FACTS / aiter_id_fact_file(source_key(config["aiter"]))
DEVICE_FACT = FACTS / device_fact_file(config["device"])
# The LLVM `toolchain.bin_dir` gives, proved to know gfx950: a fact too, so that a directory
# that is no LLVM fails a job whose output is its own file; each set's toolchain.json is a
# copy of it, and every job that writes into a set comes after that copy.
TOOLCHAIN_FACT = FACTS / toolchain_fact_file(fact_key(config["toolchain"]["bin_dir"]))
# Everything else belongs to one aiter id: the wildcard {aiter_id} in every path below, whose
# value `all` takes from the aiter id fact (get_final_outputs).
AITER_ID_WILDCARD = "{aiter_id}"
AITER_DIR = aiter_dir(RESOURCES, AITER_ID_WILDCARD)
FETCHED_CO_DIR = AITER_DIR / F4GEMM_DIR  # the fetched code objects and their manifest
RESULTS = RESULTS_ROOT / AITER_ID_WILDCARD
LOGS_ROOT = Path("logs")
LOGS = LOGS_ROOT / AITER_ID_WILDCARD
FACT_LOGS = LOGS_ROOT / FACTS_DIR  # the fact jobs belong to no aiter id
ARCHIVES = RESULTS_ROOT / ARCHIVES_DIR
# The set's paths, spelt once (f4pipe.core.layout); the rules name nothing else under RESULTS.
TOOLCHAIN = RESULTS / TOOLCHAIN_JSON
REPORT = RESULTS / REPORT_DIR
CHANGES = RESULTS / CHANGES_JSON  # what changed since the newest other archived set
ROUNDTRIP = RESULTS / ROUNDTRIP_DIR
VARIANT_DIRS = RESULTS / VARIANTS_DIR
TUNED = (
    RESULTS / TUNED_DIR
)  # f4pipe tune's tables in aiter's format, one per shape list
ARCHS = RESULTS / ARCHS_DIR  # every architecture beside gfx950: kernels + round trip
# The config's names that only the fetched aiter confirms (architectures, edit kernels, tuned
# tables): a fact of the aiter id, an input of the jobs that use them and of config.json, so a
# mistaken name fails before any of them replaces an earlier set's file.
CHECKED_NAMES = {
    "architectures": config["architectures"],
    "edit_kernels": [spec.kernel for spec in EDIT_SPECS],
    "tables": config["audit_tuned"].get("tables", []),
}
CONFIG_FACT = FACTS / config_fact_file(AITER_ID_WILDCARD, fact_key(CHECKED_NAMES))
ORIGINAL, REBUILT = BASE_VARIANTS
EDIT_VARIANT = f"{EDIT_VARIANT_PREFIX}{{edit}}"  # variants/edit-<name>/
EDITS = {spec.name: spec for spec in EDIT_SPECS}
VARIANTS = [*BASE_VARIANTS] + [spec.variant for spec in EDITS.values()]


wildcard_constraints:
    aiter_id=AITER_ID_PATTERN,
    kernel=r"[A-Za-z0-9_]+",
    unit=rf"[A-Za-z0-9_]+|{EVERY_KERNEL}",
    variant="|".join(re.escape(v) for v in VARIANTS),
    stage="|".join(GEMM_STAGES),
    edit=EDIT_NAME_PATTERN,


def get_fetch_args(wildcards):
    """The aiter source as `f4pipe fetch` options."""
    src = config["aiter"]
    flags = {
        "package": "--package",
        "version": "--version",
        "sha256": "--sha256",
        "url": "--url",
        "rev": "--rev",
        "path": "--path",
    }
    args = [f"--source {shlex.quote(str(src['kind']))}"]
    args += [
        f"{flag} {shlex.quote(str(src[key]))}"
        for key, flag in flags.items()
        if key in src
    ]
    return " ".join(args)


def get_aiter_id():
    """The aiter id the configured source gives: the aiter_id checkpoint's fact."""
    return read_fact(checkpoints.aiter_id.get().output[0], AITER_ID)


def get_local_source_files(wildcards):
    """A local source's files (listed, not read): the aiter id is found again when one
    changes. A git branch is resolved once: `--forcerun aiter_id` follows it (f4pipe.pipeline.facts).
    """
    return local_source_files(config["aiter"])


def get_result_dir(wildcards):
    """This job's result set (a parameter: Snakemake formats only string parameters)."""
    return expand(str(RESULTS), aiter_id=wildcards.aiter_id)[0]


def get_fetched_dir(wildcards):
    """The fetched aiter of this job's aiter id (the fetch checkpoint's output)."""
    return checkpoints.fetch.get(aiter_id=wildcards.aiter_id).output[0]


def get_f4gemm_dir(wildcards):
    """The fetched code objects and their manifest (the fetch checkpoint's f4gemm/)."""
    return str(Path(get_fetched_dir(wildcards)) / F4GEMM_DIR)


def get_config_check_args(wildcards):
    """CHECKED_NAMES as `f4pipe config-check` options."""
    args = [f"--architectures {shlex.quote(get_architectures_arg(wildcards))}"]
    args += [f"--edit-kernel {shlex.quote(k)}" for k in CHECKED_NAMES["edit_kernels"]]
    args += [f"--table {shlex.quote(str(t))}" for t in CHECKED_NAMES["tables"]]
    return " ".join(args)


def get_toolchain_args(wildcards):
    bin_dir = config["toolchain"]["bin_dir"]
    return f"--toolchain-bin {shlex.quote(bin_dir)}" if bin_dir else ""


def get_manifest(wildcards):
    """The fetched manifest: known only after the fetch checkpoint."""
    return read_manifest(get_f4gemm_dir(wildcards), check_files=False)


def get_kernels(wildcards):
    """Kernel names (.co stems) listed by the fetched manifest."""
    return [e.name for e in get_manifest(wildcards)]


def get_original_object(wildcards):
    return Path(get_f4gemm_dir(wildcards)) / f"{wildcards.kernel}.co"


def get_roundtrip_rows(wildcards):
    return [ROUNDTRIP / f"{k}.parquet" for k in get_kernels(wildcards)]


def get_rebuilt_objects(wildcards):
    """The round trip's rebuilt objects: its one job's directory, or every kernel's job's .co."""
    if PER_VARIANT_JOBS:
        return [ROUNDTRIP]
    return [ROUNDTRIP / f"{k}.co" for k in get_kernels(wildcards)]


def is_edit_variant(variant):
    return edit_name_of(variant) in EDITS


def get_variant_dir(wildcards):
    """The code object directory (with manifest) a variant's stages run on."""
    if wildcards.variant == ORIGINAL:
        return get_f4gemm_dir(wildcards)
    return str(RESULTS / VARIANTS_DIR / wildcards.variant)


def get_variant_kernels(wildcards, variant):
    """Kernels (.co stems) a variant holds: all of them, or an edit's one kernel."""
    if not is_edit_variant(variant):
        return get_kernels(wildcards)
    return [get_manifest(wildcards).get(EDITS[edit_name_of(variant)].kernel).name]


def get_edit_asm(wildcards):
    return str(EDITS[wildcards.edit].asm)


def get_edit_kernel(wildcards):
    return EDITS[wildcards.edit].kernel


def get_edit_outputs():
    """Every edit's variant directory and diff report."""
    return [RESULTS / VARIANTS_DIR / spec.variant for spec in EDITS.values()] + [
        RESULTS / EDITS_DIR / f"{name}.diff.txt" for name in EDITS
    ]


def is_gpu_device():
    """Hardware rules declare a GPU so executors run them one at a time on GPU nodes."""
    return 0 if config["device"] == "emulator" else 1


def is_bench_timed():
    """bench has work per kernel only where launches are timed (a gfx950 GPU; `hip` always
    tries, so a missing GPU is reported per run): the device checkpoint's fact. Elsewhere one
    job per variant writes the skipped rows, whatever `jobs_per` says, instead of a process
    per kernel that says so.
    """
    return read_fact(checkpoints.device.get().output[0], TIMES_LAUNCHES)


#: config `jobs_per`: one job per stage and variant (True) or one per kernel
PER_VARIANT_JOBS = config["jobs_per"] == "variant"


def get_stage_rows(wildcards):
    """The per-job rows of a GEMM stage: `<stage>/<variant>/<unit>.parquet`, one unit per
    variant (config `jobs_per: variant`, and bench with no device that times) or one per
    kernel the stage's matrix may run (`jobs_per: kernel`; the splitk matrix runs only the
    splitK kernels)."""
    stage = wildcards.stage
    if PER_VARIANT_JOBS or (stage == "bench" and not is_bench_timed()):
        return [RESULTS / stage / v / f"{EVERY_KERNEL}.parquet" for v in VARIANTS]
    cases = get_matrix(get_stage_matrix(wildcards))
    may_run = set(kernels_that_may_run(cases, get_manifest(wildcards)))
    return [
        RESULTS / stage / variant / f"{k}.parquet"
        for variant in VARIANTS
        for k in get_variant_kernels(wildcards, variant)
        if k in may_run
    ]


def get_unit_kernel_args(wildcards):
    """`--kernel K` for a per-kernel job or an edit variant (its one kernel), else nothing."""
    if wildcards.unit != EVERY_KERNEL:
        return f"--kernel {wildcards.unit}"
    if is_edit_variant(wildcards.variant):
        # the edit's kernel as the edit names it (symbol, .co name or stem)
        return f"--kernel {shlex.quote(EDITS[edit_name_of(wildcards.variant)].kernel)}"
    return ""


def get_unit_threads(wildcards):
    """A per-variant job gets every core of the run (`--cores`; its runs go to that many
    emulator workers); a per-kernel job, and bench's untimed rows under `jobs_per: kernel`
    (cluster executors, where --cores need not be given), one."""
    if PER_VARIANT_JOBS and wildcards.unit == EVERY_KERNEL:
        return get_all_cores(wildcards)
    return 1


def get_stage_threads(wildcards):
    """A job over every kernel of a stage: every core of the run, or one under
    `jobs_per: kernel` (cluster executors, where --cores need not be given)."""
    return get_all_cores(wildcards) if PER_VARIANT_JOBS else 1


def get_all_cores(wildcards):
    """A job that spreads over every core of the run (`--cores`), read when the job is
    scheduled, never while the Snakefile is parsed. `snakemake --report` gives no --cores and
    runs nothing: there the count does not matter, so one."""
    try:
        return workflow.cores
    except WorkflowError:
        return 1


def get_stage_matrix(wildcards):
    return config[wildcards.stage]["matrix"]


def get_stage_iters(wildcards):
    return config[wildcards.stage].get("iters", 1)


#: The bench protocol's config keys and their options (f4pipe.host.benchstats; defaults there).
BENCH_PROTOCOL_OPTIONS = {
    "repeats": "--repeats",
    "warmup": "--warmup",
    "warmup_ms": "--warmup-ms",
    "rotate_mib": "--rotate-mib",
}


def get_stage_protocol_args(wildcards):
    """bench: the timing protocol's options the config sets (`cold: false` is --hot)."""
    if wildcards.stage != "bench":
        return ""
    return get_bench_protocol_args()


def get_bench_protocol_args():
    """The bench protocol's options the config sets, for bench and for tune's timing of the
    candidates the model cannot separate (on a device that times launches)."""
    bench = config["bench"]
    args = [
        f"{flag} {shlex.quote(str(bench[key]))}"
        for key, flag in BENCH_PROTOCOL_OPTIONS.items()
        if key in bench
    ]
    if bench.get("cold", True) is False:
        args.append("--hot")
    return " ".join(args)


def get_store_args(wildcards):
    """`--store DIR`: round trips, verify, splitk, safety and the audit's emulations are reused
    by content across result sets (f4pipe.pipeline.resultstore); bench never (its numbers are
    measurements).
    """
    reuse = config.get("reuse", {"activate": True})
    if not reuse["activate"] or getattr(wildcards, "stage", None) == "bench":
        return ""
    store = reuse.get("store") or str(Path(config["results_dir"]) / STORE_DIR)
    return f"--store {shlex.quote(store)}"


def get_safety_rows(wildcards):
    """The shape-edge sweep's rows: the original code objects' (one job, or one per kernel)
    and each edit's, whose variant holds its one kernel (the rebuilt objects are not swept:
    their bytes are proved equivalent to the originals')."""
    swept = [ORIGINAL, *(spec.variant for spec in EDITS.values())]
    if PER_VARIANT_JOBS:
        return [RESULTS / "safety" / v / f"{EVERY_KERNEL}.parquet" for v in swept]
    return [
        RESULTS / "safety" / v / f"{k}.parquet"
        for v in swept
        for k in get_variant_kernels(wildcards, v)
    ]


def is_audit_active():
    """The tuned tables are fetched with the code objects: the audit runs for every source."""
    return config["audit_tuned"]["activate"]


def is_tune_active():
    """The tuned tables for the config's shape lists (on by default)."""
    return config.get("tune", {}).get("activate", True)


def get_tune_shapes():
    """The shape lists the tune stage reads (config `tune.shapes`, default config/shapes/)."""
    return [str(p) for p in config.get("tune", {}).get("shapes", DEFAULT_TUNE_SHAPES)]


#: The model shape lists f4pipe ships: tuned by default.
DEFAULT_TUNE_SHAPES = ["config/shapes/deepseek-v3.csv", "config/shapes/kimi-k3.csv"]


def get_tune_outputs():
    """tuned/<list>.csv of every shape list (the list's file stem)."""
    return [TUNED / f"{Path(p).stem}.csv" for p in get_tune_shapes()]


def get_tune_evidence(wildcards):
    """The tables whose verdicts the tune stage holds its picks against, where they run."""
    inputs = {}
    if config["safety"]["activate"]:
        inputs["safety"] = RESULTS / table_file("safety")
    if config["splitk"]["activate"]:
        inputs["splitk"] = RESULTS / table_file("splitk")
    if config["bench"]["activate"]:
        inputs["bench"] = RESULTS / table_file("bench")
    return inputs


def get_tune_evidence_args(wildcards, input):
    """`--safety` / `--splitk` / `--bench` for the evidence tables the job was given."""
    args = [
        f"--{name} {shlex.quote(str(input[name]))}"
        for name in ("safety", "splitk", "bench")
        if name in input.keys()
    ]
    return " ".join(args)


def get_audit_table_args(wildcards):
    """`--table` options for the tables the config names (none means every fetched table),
    and `--predict` when the config asks for the cycle model's re-tune columns."""
    tables = config["audit_tuned"].get("tables", [])
    args = [f"--table {shlex.quote(str(t))}" for t in tables]
    if config["audit_tuned"].get("predict", False):
        args.append("--predict")  # the cycle model's re-tune columns
    return " ".join(args)


def get_architectures_arg(wildcards):
    """config `architectures` as `f4pipe architectures --architectures`: all, none or a list."""
    chosen = config["architectures"]
    if chosen == "all":
        return "all"
    return ",".join(chosen) or "none"


def get_report_inputs(wildcards):
    """Every table and edit the report and the archive are made from (patterns of the
    {aiter_id} wildcard)."""
    outputs = [
        RESULTS / TOOLCHAIN_JSON,
        RESULTS / table_file("kernels"),
        RESULTS / table_file("roundtrip"),
        VARIANT_DIRS / REBUILT,
        ARCHS,
    ]
    outputs += [
        RESULTS / table_file(stage)
        for stage in GEMM_STAGES
        if config[stage]["activate"]
    ]
    if config["safety"]["activate"]:
        outputs.append(RESULTS / table_file("safety"))
    if is_audit_active():
        outputs.append(RESULTS / table_file("audit"))
    if is_tune_active():
        outputs.append(RESULTS / table_file("tune"))
        outputs += get_tune_outputs()
    outputs += get_edit_outputs()
    return outputs


def get_final_outputs(wildcards):
    """The result set of the configured source's aiter id (known once its fact is there)."""
    patterns = [
        *get_report_inputs(wildcards),
        REPORT / "index.html",
        ARCHIVES / AITER_ID_WILDCARD,
    ]
    return expand([str(p) for p in patterns], aiter_id=get_aiter_id())
