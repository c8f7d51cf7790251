#!/usr/bin/env bash
# A local stand-in for a batch system's submit command (sbatch, qsub), for
# snakemake-executor-plugin-cluster-generic: `submit.sh LEDGER RULE THREADS RESOURCES... JOBSCRIPT`.
# It appends what the job declared (rule, threads, resources) to LEDGER, then runs the job script
# as a detached process of its own (new session, stdin closed) with a minimal environment: HOME,
# PATH and f4pipe's cache location, nothing else of the submitting process. It prints the job id
# (the process id); Snakemake learns the job's end from the job script's own marker files.
set -euo pipefail
ledger="$1"
shift
jobscript="${!#}"
printf '%s\n' "${*:1:$#-1}" >>"$ledger"
env -i HOME="$HOME" PATH="$PATH" ${F4PIPE_CACHE:+F4PIPE_CACHE="$F4PIPE_CACHE"} \
    setsid bash "$jobscript" >"$jobscript.out" 2>&1 </dev/null &
echo "local-$!"
