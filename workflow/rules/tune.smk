# Tuning without a GPU: a tuned a4w4 table in aiter's format for every shape of the config's
# shape lists (f4pipe.pipeline.tune), the picks held against the safety sweep's and the splitK
# stage's verdicts, times predicted by the cycle model (on a device that times launches, the
# candidates it cannot separate are timed with bench's protocol and the measured fastest
# picked); aiter's own asm rows are tuned too, to measure how often the pick is aiter's
# recorded kernel or within the model's error of it.


rule tune:
    input:
        unpack(get_tune_evidence),
        fetched=AITER_DIR,
        toolchain=TOOLCHAIN,
        shapes=get_tune_shapes(),
    output:
        table=RESULTS / table_file("tune"),
        tuned=get_tune_outputs(),
    log:
        LOGS / "tune.log",
    benchmark:
        LOGS / "tune.benchmark.tsv"
    conda:
        "../envs/f4pipe.yaml"
    resources:
        gpu=is_gpu_device(),
    params:
        device=config["device"],
        iters=config["bench"].get("iters", 1),
        protocol=get_bench_protocol_args(),
        co_dir=str(FETCHED_CO_DIR),
        out_dir=str(TUNED),
        evidence=get_tune_evidence_args,
        shapes=lambda wildcards, input: " ".join(
            f"--shapes {shlex.quote(str(p))}" for p in input.shapes
        ),
        store=get_store_args,
    shell:
        "f4pipe tune {params.shapes} --co-dir {params.co_dir:q} --aiter-id {wildcards.aiter_id:q} "
        "{params.evidence} {params.store} --toolchain-json {input.toolchain:q} --aiter-rows "
        "--device {params.device:q} --iters {params.iters:q} {params.protocol} "
        "--out-dir {params.out_dir:q} --table {output.table:q} > {log:q} 2>&1"
