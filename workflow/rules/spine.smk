# Fetch, toolchain, manifest and the co2asm round trip.


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
        "f4pipe fetch {params.source} --resources {params.resources:q} > {log:q} 2>&1"


rule toolchain:
    output:
        TOOLCHAIN,
    log:
        LOGS / "toolchain.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        toolchain=get_toolchain_args,
    shell:
        "f4pipe toolchain {params.toolchain} -o {output:q} > {log:q} 2>&1"


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
        co_dir=FETCHED_CO_DIR,
        aiter_id=AITER_ID,
    shell:
        "f4pipe kernels --co-dir {params.co_dir:q} --toolchain-json {input.toolchain:q} "
        "--aiter-id {params.aiter_id:q} -o {output:q} > {log:q} 2>&1"


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
        out_dir=ROUNDTRIP,
        aiter_id=AITER_ID,
    shell:
        "f4pipe roundtrip {input.co:q} --out {params.out_dir:q} --row {output.row:q} --record "
        "--aiter-id {params.aiter_id:q} --toolchain-json {input.toolchain:q} > {log:q} 2>&1"


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
        co_dir=FETCHED_CO_DIR,
        rebuilt_dir=ROUNDTRIP,
    shell:
        "f4pipe rebuilt-dir --co-dir {params.co_dir:q} --rebuilt {params.rebuilt_dir:q} "
        "-o {output:q} > {log:q} 2>&1"
