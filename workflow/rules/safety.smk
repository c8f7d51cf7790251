# Shape-edge safety: the edge sweep on the emulator (one job, or one per kernel: config
# `jobs_per`) of the original code objects and of each edit's kernel, and the audit of aiter's a4w4 tuned GEMM tables (fetched with the code objects,
# any source kind) against the rules it proves.


rule safety:
    input:
        co_dir=get_variant_dir,
        toolchain=TOOLCHAIN,
    output:
        RESULTS / "safety" / "{variant}" / "{unit}.parquet",
    log:
        LOGS / "safety" / "{variant}" / "{unit}.log",
    benchmark:
        LOGS / "safety" / "{variant}" / "{unit}.benchmark.tsv"
    conda:
        "../envs/f4pipe.yaml"
    threads: get_unit_threads
    params:
        kernel=get_unit_kernel_args,
        store=get_store_args,
    shell:
        "f4pipe safety --co-dir {input.co_dir:q} {params.kernel} --variant {wildcards.variant:q} "
        "--aiter-id {wildcards.aiter_id:q} "
        "{params.store} --workers {threads:q} --toolchain-json {input.toolchain:q} --record "
        "-o {output:q} > {log:q} 2>&1"


rule safety_table:
    input:
        get_safety_rows,
    output:
        report(
            RESULTS / table_file("safety"),
            caption="../report/safety.rst",
            category="Shape-edge safety",
            labels={"kind": "table", "name": "safety"},
        ),
    log:
        LOGS / "safety_table.log",
    conda:
        "../envs/f4pipe.yaml"
    shell:
        "f4pipe gather safety {input:q} -o {output:q} > {log:q} 2>&1"


rule audit_tuned:
    input:
        fetched=AITER_DIR,
        toolchain=TOOLCHAIN,
        checked=CONFIG_FACT,
    output:
        report(
            RESULTS / table_file("audit"),
            caption="../report/audit.rst",
            category="Shape-edge safety",
            labels={"kind": "table", "name": "audit of aiter's tuned table"},
        ),
    log:
        LOGS / "audit_tuned.log",
    benchmark:
        LOGS / "audit_tuned.benchmark.tsv"
    conda:
        "../envs/f4pipe.yaml"
    params:
        co_dir=str(FETCHED_CO_DIR),
        tables=get_audit_table_args,
        store=get_store_args,
    shell:
        "f4pipe audit-tuned {params.tables} --co-dir {params.co_dir:q} "
        "--aiter-id {wildcards.aiter_id:q} {params.store} --toolchain-json {input.toolchain:q} "
        "--record -o {output:q} > {log:q} 2>&1"
