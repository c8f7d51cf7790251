# The report of one artifact set, the effective configuration it records, and its archive.


rule effective_config:
    input:
        # after the toolchain is proved and the config's names checked: a mistaken config
        # leaves the earlier set's config.json as it was
        TOOLCHAIN,
        CONFIG_FACT,
    output:
        RESULTS / "config.json",
    log:
        LOGS / "effective_config.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        text=json_text(config, indent=2),
    shell:
        # a shell job, not `run:`: Snakemake runs a `run:` block in a new process that parses
        # the whole workflow again (seconds); written beside, then renamed: never half-written
        "printf '%s\\n' {params.text:q} > {output:q}.part && mv {output:q}.part {output:q} "
        "2> {log:q}"


# What changed since the newest archived set of another aiter id (f4pipe.compare.baseline):
# the report's first card. The archives are read, not declared as inputs: they are other runs'
# outputs, and this set's own archive comes after its report. So the record (and the report and
# archive holding it) is reproducible given the same archives; it names the baseline it used.
rule changes:
    input:
        get_report_inputs,
    output:
        CHANGES,
    log:
        LOGS / "changes.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        result_dir=get_result_dir,
        archives=str(ARCHIVES),
    shell:
        "f4pipe changes {params.result_dir:q} --archives {params.archives:q} -o {output:q} "
        "> {log:q} 2>&1"


rule report:
    input:
        get_report_inputs,
        config=RESULTS / "config.json",
        changes=CHANGES,
        fetched=AITER_DIR,
    output:
        html=report(
            REPORT / "index.html",
            caption="../report/report.rst",
            category="Report",
            labels={"kind": "page", "name": "index.html"},
        ),
        summary=REPORT / "summary.md",
        # the page's plots, for `snakemake --report` (the page shows them beside it; the
        # report always writes them: f4pipe.report.write_absent_plots)
        throughput=report(
            REPORT / THROUGHPUT_PNG,
            caption="../report/throughput_plot.rst",
            category="GEMM stages",
            labels={"kind": "plot", "name": "throughput"},
        ),
        splitk=report(
            REPORT / SPLITK_PNG,
            caption="../report/splitk_plot.rst",
            category="GEMM stages",
            labels={"kind": "plot", "name": "splitK error"},
        ),
        heatmap=report(
            REPORT / HEATMAP_PNG,
            caption="../report/safety_heatmap.rst",
            category="Shape-edge safety",
            labels={"kind": "plot", "name": "heatmap"},
        ),
    log:
        LOGS / "report.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        result_dir=get_result_dir,
        report_dir=str(REPORT),
    shell:
        "f4pipe report {params.result_dir:q} --config {input.config:q} "
        "--changes {input.changes:q} --aiter-provenance {input.fetched:q}/provenance.json "
        "-o {params.report_dir:q} > {log:q} 2>&1"


rule archive:
    input:
        get_report_inputs,
        report=REPORT / "index.html",
        fetched=AITER_DIR,
    output:
        directory(ARCHIVES / AITER_ID_WILDCARD),
    log:
        LOGS / "archive.log",
    conda:
        "../envs/f4pipe.yaml"
    params:
        result_dir=get_result_dir,
    shell:
        "f4pipe archive {params.result_dir:q} --aiter-provenance {input.fetched:q}/provenance.json "
        "-o {output:q} > {log:q} 2>&1"
