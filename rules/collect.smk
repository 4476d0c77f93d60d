rule collect_shard:
    output:
        out=f"{{root}}/{names.SHARD}",
    log:
        "{root}/logs/collect_shard/{shard}.log",
    benchmark:
        "{root}/benchmarks/collect_shard/{shard}.tsv"
    conda:
        "../envs/collect.yaml"
    threads: 1
    resources:
        **PLAN.resources("collect_shard"),
        mem_mb=2000,
        runtime=30,
    params:
        **PLAN.params("collect_shard"),
    script:
        "../scripts/run_stage.py"


rule merge_demos:
    input:
        unpack(job_inputs("demos")),
    output:
        out=f"{{root}}/{names.DEMOS}",
    log:
        "{root}/logs/merge_demos.log",
    benchmark:
        "{root}/benchmarks/merge_demos.tsv"
    wildcard_constraints:
        root=PLAN.roots(imported=False),
    conda:
        "../envs/collect.yaml"
    threads: 1
    resources:
        **PLAN.resources("merge_demos"),
        mem_mb=4000,
        runtime=15,
    params:
        **PLAN.params("merge_demos"),
    script:
        "../scripts/run_stage.py"


rule import_demos:
    input:
        files=from_variant(PLAN.import_files),
    output:
        out=f"{{root}}/{names.DEMOS}",
    log:
        "{root}/logs/import_demos.log",
    benchmark:
        "{root}/benchmarks/import_demos.tsv"
    wildcard_constraints:
        root=PLAN.roots(imported=True),
    conda:
        "../envs/collect.yaml"
    threads: 1
    resources:
        **PLAN.resources("import_demos"),
        mem_mb=4000,
        runtime=30,
    params:
        **PLAN.params("import_demos"),
    script:
        "../scripts/run_stage.py"


# `make export` (`snakemake export`): every variant's dataset as a Minari dataset, under
# <its results>/demos/minari (a Minari store: MINARI_DATASETS_PATH=that directory, then
# minari.load_dataset("demo2rl/<experiment>-v0")); docs/dataset.md#minari
rule export:
    input:
        PLAN.export_targets(),


rule export_minari:
    input:
        demos=from_variant(lambda v: PLAN.output(v, ("demos",))),
    output:
        out=directory(f"{{root}}/{names.MINARI_DIR}"),
    log:
        "{root}/logs/export_minari.log",
    conda:
        "../envs/collect.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        **PLAN.params("export_minari"),
    script:
        "../scripts/run_stage.py"
