rule collect_shard:
    output:
        f"{RESULTS}/demos/shard-{{shard}}.h5",
    params:
        task=config["task"],
        collect=config["collect"],
        seed=config["seed"],
        code=code("demo2rl.collect"),
    log:
        f"{RESULTS}/logs/collect_shard/{{shard}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/collect_shard/{{shard}}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    conda:
        "../envs/collect.yaml"
    script:
        "../scripts/collect_shard.py"


rule merge_demos:
    input:
        expand(f"{RESULTS}/demos/shard-{{shard}}.h5", shard=SHARDS),
    output:
        f"{RESULTS}/demos/demos.h5",
    params:
        collect=config["collect"],
        code=code("demo2rl.dataset"),
    log:
        f"{RESULTS}/logs/merge_demos.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge_demos.tsv"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    conda:
        "../envs/collect.yaml"
    script:
        "../scripts/merge_demos.py"
