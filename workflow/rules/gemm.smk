# The GEMM stages (verify, splitk, bench) for each variant, one job per kernel; bench without a
# device that can time runs once per variant (its rows only say why they are skipped).


rule gemm_stage_kernel:
    input:
        co_dir=get_variant_dir,
        toolchain=RESULTS / "toolchain.json",
    output:
        RESULTS / "{stage}" / "{variant}" / "{kernel}.parquet",
    log:
        LOGS / "{stage}" / "{variant}" / "{kernel}.log",
    benchmark:
        LOGS / "{stage}" / "{variant}" / "{kernel}.benchmark.tsv"
    conda:
        "../envs/f4pipe.yaml"
    resources:
        gpu=is_gpu_device(),
    params:
        matrix=get_stage_matrix,
        iters=get_stage_iters,
        device=config["device"],
        aiter_id=AITER_ID,
        store=get_store_args,
    shell:
        "f4pipe {wildcards.stage} --co-dir {input.co_dir} --kernel {wildcards.kernel} "
        "--variant {wildcards.variant} --matrix {params.matrix} --iters {params.iters} "
        "--device {params.device} --aiter-id {params.aiter_id} {params.store} "
        "--toolchain-json {input.toolchain} --record -o {output} > {log} 2>&1"


rule bench_untimed:
    input:
        co_dir=get_variant_dir,
        toolchain=RESULTS / "toolchain.json",
    output:
        RESULTS / "bench" / "{variant}.untimed.parquet",
    log:
        LOGS / "bench" / "{variant}.untimed.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        matrix=config["bench"]["matrix"],
        iters=config["bench"].get("iters", 1),
        device=config["device"],
        aiter_id=AITER_ID,
    shell:
        "f4pipe bench --co-dir {input.co_dir} --variant {wildcards.variant} "
        "--matrix {params.matrix} --iters {params.iters} --device {params.device} "
        "--aiter-id {params.aiter_id} --toolchain-json {input.toolchain} --record "
        "-o {output} > {log} 2>&1"


rule gemm_stage_table:
    input:
        get_stage_rows,
    output:
        report(
            RESULTS / "{stage}.parquet",
            caption="../report/gemm_stage.rst",
            category="GEMM stages",
        ),
    log:
        LOGS / "{stage}_table.log",
    conda:
        "../envs/f4pipe.yaml"
    shell:
        "f4pipe gather {wildcards.stage} {input} -o {output} > {log} 2>&1"
