# f4pipe: fetch aiter's gfx950 MXFP4 GEMM code objects, round-trip them through LLVM, verify and
# benchmark originals and rebuilds, report and archive. All logic lives in the f4pipe package.
from snakemake.utils import min_version

min_version("9.0")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/codeobj.smk"
include: "workflow/rules/gemm.smk"
include: "workflow/rules/safety.smk"
include: "workflow/rules/tune.smk"
include: "workflow/rules/edits.smk"
include: "workflow/rules/report.smk"


onerror:
    # each failed job's own one-line error on the console, and exit 2 for bad input
    sys.exit(failed_job_report(log))


rule all:
    default_target: True
    input:
        AITER_ID_FACT,
        DEVICE_FACT,
        get_final_outputs,
