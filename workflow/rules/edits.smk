# Hand-edited kernels (config `edits:`): each edit becomes the variant `edit-<name>`, a directory
# holding the assembled edit under its original's .co name plus a one-row manifest, so the GEMM
# stages (verify, splitk, bench) run it exactly as they run `original` and `rebuilt`.
# An edit that fails the static checks stops here, before anything is launched.


rule edit_variant:
    input:
        fetched=AITER_DIR,
        asm=get_edit_asm,
        toolchain=TOOLCHAIN,
        checked=CONFIG_FACT,
    output:
        variant=directory(VARIANT_DIRS / EDIT_VARIANT),
        diff=report(
            RESULTS / EDITS_DIR / "{edit}.diff.txt",
            caption="../report/edits.rst",
            category="Edits",
            labels={"edit": "{edit}"},
        ),
        json=RESULTS / EDITS_DIR / "{edit}.json",
    log:
        LOGS / EDITS_DIR / "{edit}.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        co_dir=str(FETCHED_CO_DIR),
        kernel=get_edit_kernel,
    shell:
        "f4pipe edit-variant --asm {input.asm:q} --co-dir {params.co_dir:q} "
        "--kernel {params.kernel} --name {wildcards.edit:q} "
        "--toolchain-json {input.toolchain:q} -o {output.variant:q} --diff {output.diff:q} "
        "--json {output.json:q} > {log:q} 2>&1"
