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
        # envs stepped as one batch: speed only (every episode's seed is fixed by its index)
        envs=COLLECT.n_envs,
        # HDF5 compression of image observations: size and speed only (the hash covers the data)
        codec=COLLECT.codec,
        # the time limit on each env or expert call (task.timeout_s): robustness only
        timeout_ms=TIMEOUT_MS,
    params:
        tracking=TRACKING,
        task=TASK,
        collect=COLLECT.pick("n_episodes", "n_shards"),
        seed=config["seed"],
        code=code("collect_shard", task=True),
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
        # HDF5 compression of image observations: size and speed only (the hash covers the data)
        codec=COLLECT.codec,
    params:
        tracking=TRACKING,
        collect=COLLECT.pick("n_episodes", "valid_fraction"),
        code=code("merge_demos"),
    script:
        "../scripts/merge_demos.py"
