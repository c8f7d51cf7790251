# The facts of the source and the machine, fetch, toolchain, manifest and the co2asm round trip.


# The first job: a wrong pin or an unreadable source stops the run before any other job writes.
checkpoint aiter_id:
    input:
        get_local_source_files,
    output:
        AITER_ID_FACT,
    log:
        FACT_LOGS / "aiter_id.log",
    priority: 100
    conda:
        "../envs/f4pipe.yaml"
    params:
        source=get_fetch_args,
    shell:
        "f4pipe aiter-id {params.source} -o {output:q} > {log:q} 2>&1"


checkpoint device:
    output:
        DEVICE_FACT,
    log:
        FACT_LOGS / "device.log",
    conda:
        "../envs/f4pipe.yaml"
    resources:
        gpu=is_gpu_device(),
    params:
        device=config["device"],
    shell:
        "f4pipe device --device {params.device:q} -o {output:q} > {log:q} 2>&1"


checkpoint fetch:
    output:
        directory(AITER_DIR),
    log:
        LOGS / "fetch.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        source=get_fetch_args,
        resources=RESOURCES,
    shell:
        "f4pipe fetch {params.source} --resources {params.resources:q} "
        "--expect-id {wildcards.aiter_id:q} > {log:q} 2>&1"


# The configured LLVM, proved to know gfx950, as a fact of its own (f4pipe.pipeline.facts): a
# `toolchain.bin_dir` that is no such LLVM fails here, and Snakemake's removal of a failed job's
# outputs costs no result set anything. Each set's toolchain.json is then a copy of the fact.
rule toolchain:
    output:
        TOOLCHAIN_FACT,
    log:
        FACT_LOGS / "toolchain.log",
    priority: 100
    conda:
        "../envs/f4pipe.yaml"
    params:
        toolchain=get_toolchain_args,
    shell:
        "f4pipe toolchain {params.toolchain} -o {output:q} > {log:q} 2>&1"


rule toolchain_json:
    input:
        TOOLCHAIN_FACT,
    output:
        TOOLCHAIN,
    log:
        LOGS / "toolchain.log",
    conda:
        "../envs/f4pipe.yaml"
    shell:
        # copied beside, then renamed: never half-written (a plain copy: no f4pipe start-up)
        "(cp {input:q} {output:q}.part && mv {output:q}.part {output:q}) 2> {log:q}"


rule config_check:
    input:
        fetched=AITER_DIR,
    output:
        CONFIG_FACT,
    log:
        LOGS / "config_check.log",
    priority: 100
    conda:
        "../envs/f4pipe.yaml"
    params:
        names=get_config_check_args,
    shell:
        "f4pipe config-check --aiter-dir {input.fetched:q} {params.names} -o {output:q} "
        "> {log:q} 2>&1"


rule kernels:
    input:
        fetched=AITER_DIR,
        toolchain=TOOLCHAIN,
    output:
        RESULTS / table_file("kernels"),
    log:
        LOGS / "kernels.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        co_dir=str(FETCHED_CO_DIR),
    shell:
        "f4pipe kernels --co-dir {params.co_dir:q} --toolchain-json {input.toolchain:q} "
        "--aiter-id {wildcards.aiter_id:q} -o {output:q} > {log:q} 2>&1"


if PER_VARIANT_JOBS:

    rule roundtrip:
        input:
            co_dir=get_f4gemm_dir,
            toolchain=TOOLCHAIN,
        output:
            out_dir=directory(ROUNDTRIP),
            table=report(
                RESULTS / table_file("roundtrip"),
                caption="../report/roundtrip.rst",
                category="Round trip",
            ),
        log:
            LOGS / "roundtrip.log",
        benchmark:
            LOGS / "roundtrip.benchmark.tsv"
        conda:
            "../envs/f4pipe.yaml"
        threads: get_all_cores
        params:
            store=get_store_args,
        shell:
            "f4pipe roundtrip --co-dir {input.co_dir:q} --out {output.out_dir:q} "
            "--row {output.table:q} --record --aiter-id {wildcards.aiter_id:q} {params.store} "
            "--workers {threads:q} --toolchain-json {input.toolchain:q} > {log:q} 2>&1"

else:

    rule roundtrip:
        input:
            co=get_original_object,
            toolchain=TOOLCHAIN,
        output:
            asm=ROUNDTRIP / "{kernel}.s",
            rebuilt=ROUNDTRIP / "{kernel}.co",
            diff=ROUNDTRIP / "{kernel}.diff.txt",
            row=ROUNDTRIP / "{kernel}.parquet",
        log:
            LOGS / ROUNDTRIP_DIR / "{kernel}.log",
        benchmark:
            LOGS / ROUNDTRIP_DIR / "{kernel}.benchmark.tsv"
        conda:
            "../envs/f4pipe.yaml"
        params:
            out_dir=str(ROUNDTRIP),
            store=get_store_args,
        shell:
            "f4pipe roundtrip {input.co:q} --out {params.out_dir:q} --row {output.row:q} "
            "--record --aiter-id {wildcards.aiter_id:q} {params.store} "
            "--toolchain-json {input.toolchain:q} > {log:q} 2>&1"

    rule roundtrip_table:
        input:
            get_roundtrip_rows,
        output:
            report(
                RESULTS / table_file("roundtrip"),
                caption="../report/roundtrip.rst",
                category="Round trip",
            ),
        log:
            LOGS / "roundtrip_table.log",
        conda:
            "../envs/f4pipe.yaml"
        shell:
            "f4pipe gather roundtrip {input:q} -o {output:q} > {log:q} 2>&1"


rule architectures:
    input:
        fetched=AITER_DIR,
        toolchain=TOOLCHAIN,
        checked=CONFIG_FACT,
    output:
        directory(ARCHS),
    log:
        LOGS / "architectures.log",
    conda:
        "../envs/f4pipe.yaml"
    threads: get_stage_threads
    params:
        architectures=get_architectures_arg,
        store=get_store_args,
    shell:
        "f4pipe architectures --aiter-dir {input.fetched:q} "
        "--architectures {params.architectures:q} -o {output:q} --record "
        "--aiter-id {wildcards.aiter_id:q} {params.store} --workers {threads:q} "
        "--toolchain-json {input.toolchain:q} > {log:q} 2>&1"


rule rebuilt_variant:
    input:
        fetched=AITER_DIR,
        rebuilt=get_rebuilt_objects,
    output:
        directory(VARIANT_DIRS / REBUILT),
    log:
        LOGS / "rebuilt_variant.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        co_dir=str(FETCHED_CO_DIR),
        rebuilt_dir=str(ROUNDTRIP),
    shell:
        "f4pipe rebuilt-dir --co-dir {params.co_dir:q} --rebuilt {params.rebuilt_dir:q} "
        "-o {output:q} > {log:q} 2>&1"
