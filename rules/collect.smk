rule collect_shard:
    output:
        f"{RESULTS}/demos/shard-{{shard}}.h5",
    log:
        f"{RESULTS}/logs/collect_shard/{{shard}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/collect_shard/{{shard}}.tsv"
    conda:
        "../envs/collect.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        tracking=tracking.settings(config),
        task=config["task"],
        collect=config["collect"],
        seed=config["seed"],
        code=code("demo2rl.stages.collect"),
    script:
        "../scripts/collect_shard.py"


rule merge_demos:
    input:
        expand(f"{RESULTS}/demos/shard-{{shard}}.h5", shard=SHARDS),
    output:
        f"{RESULTS}/demos/demos.h5",
    log:
        f"{RESULTS}/logs/merge_demos.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge_demos.tsv"
    conda:
        "../envs/collect.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        tracking=tracking.settings(config),
        collect=config["collect"],
        code=code("demo2rl.stages.collect"),
    script:
        "../scripts/merge_demos.py"
