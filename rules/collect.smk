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
        tracking=TRACKING,
    script:
        "../scripts/collect_shard.py"


rule merge_demos:
    input:
        shards=from_variant(PLAN.shards),
    output:
        out="{root}/demos/demos.h5",
    log:
        "{root}/logs/merge_demos.log",
    benchmark:
        "{root}/benchmarks/merge_demos.tsv"
    conda:
        "../envs/collect.yaml"
    threads: 1
    resources:
        **PLAN.resources("merge_demos"),
        mem_mb=4000,
        runtime=15,
    params:
        **PLAN.params("merge_demos"),
        tracking=TRACKING,
    script:
        "../scripts/merge_demos.py"
