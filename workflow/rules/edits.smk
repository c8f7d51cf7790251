# Hand-edited kernels (config `edits:`): each edit becomes the variant `edit-<name>`, a directory
# holding the assembled edit under its original's .co name plus a one-row manifest, so the GEMM
# stages (verify, splitk, bench) run it exactly as they run `original` and `rebuilt`.
# An edit that fails the static checks stops here, before anything is launched.


rule edit_variant:
    input:
        fetched=AITER_DIR,
        asm=get_edit_asm,
        toolchain=RESULTS / "toolchain.json",
    output:
        variant=directory(RESULTS / "variants" / "edit-{edit}"),
        diff=report(
            RESULTS / "edits" / "{edit}.diff.txt",
            caption="../report/edits.rst",
            category="Edits",
            labels={"edit": "{edit}"},
        ),
        json=RESULTS / "edits" / "{edit}.json",
    log:
        LOGS / "edits" / "{edit}.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        co_dir=FETCHED_CO_DIR,
        kernel=get_edit_kernel,
    shell:
        "f4pipe edit-variant --asm {input.asm:q} --co-dir {params.co_dir:q} "
        "--kernel {params.kernel} --name {wildcards.edit:q} "
        "--toolchain-json {input.toolchain:q} -o {output.variant:q} --diff {output.diff:q} "
        "--json {output.json:q} > {log:q} 2>&1"
