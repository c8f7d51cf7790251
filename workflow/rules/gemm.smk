# The GEMM stages (verify, splitk, bench) for each variant: one job per variant whose runs go to
# the job's threads, or one per kernel (config `jobs_per`); bench without a device that can time
# runs once per variant (its rows only say why they are skipped).


rule gemm_stage:
    input:
        co_dir=get_variant_dir,
        toolchain=TOOLCHAIN,
    output:
        RESULTS / "{stage}" / "{variant}" / "{unit}.parquet",
    log:
        LOGS / "{stage}" / "{variant}" / "{unit}.log",
    benchmark:
        LOGS / "{stage}" / "{variant}" / "{unit}.benchmark.tsv"
    conda:
        "../envs/f4pipe.yaml"
    threads: get_unit_threads
    resources:
        gpu=is_gpu_device(),
    params:
        kernel=get_unit_kernel_args,
        matrix=get_stage_matrix,
        iters=get_stage_iters,
        protocol=get_stage_protocol_args,
        device=config["device"],
        store=get_store_args,
    shell:
        "f4pipe {wildcards.stage:q} --co-dir {input.co_dir:q} {params.kernel} "
        "--variant {wildcards.variant:q} --matrix {params.matrix:q} --iters {params.iters:q} "
        "{params.protocol} "
        "--device {params.device:q} --aiter-id {wildcards.aiter_id:q} {params.store} "
        "--workers {threads:q} --toolchain-json {input.toolchain:q} --record -o {output:q} "
        "> {log:q} 2>&1"


rule gemm_stage_table:
    input:
        get_stage_rows,
    output:
        report(
            RESULTS / "{stage}.parquet",
            caption="../report/gemm_stage.rst",
            category="GEMM stages",
            labels={"kind": "table", "name": "{stage}"},
        ),
    log:
        LOGS / "{stage}_table.log",
    conda:
        "../envs/f4pipe.yaml"
    shell:
        "f4pipe gather {wildcards.stage:q} {input:q} -o {output:q} > {log:q} 2>&1"
