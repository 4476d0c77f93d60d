rule collect_shard:
    output:
        "{root}/demos/shard-{shard}.h5",
    log:
        "{root}/logs/collect_shard/{shard}.log",
    benchmark:
        "{root}/benchmarks/collect_shard/{shard}.tsv"
    conda:
        "../envs/collect.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
        # envs stepped as one batch: speed only (every episode's seed is fixed by its index)
        envs=from_variant(lambda v: v.collect.n_envs),
        # HDF5 compression of image observations: size and speed only (the hash covers the data)
        codec=from_variant(lambda v: v.collect.codec),
        # the time limit on each env or expert call (task.timeout_s): robustness only
        timeout_ms=from_variant(lambda v: v.timeout_ms),
    params:
        tracking=TRACKING,
        task=from_variant(lambda v: v.task),
        collect=from_variant(lambda v: v.collect.pick("n_episodes", "n_shards")),
        seed=from_variant(lambda v: v.config["seed"]),
        code=code("collect_shard", task=True),
    script:
        "../scripts/collect_shard.py"


rule merge_demos:
    input:
        lambda wc: expand(
            f"{wc.root}/demos/shard-{{shard}}.h5",
            shard=range(job_variant(wc).collect.n_shards),
        ),
    output:
        "{root}/demos/demos.h5",
    log:
        "{root}/logs/merge_demos.log",
    benchmark:
        "{root}/benchmarks/merge_demos.tsv"
    conda:
        "../envs/collect.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
        # HDF5 compression of image observations: size and speed only (the hash covers the data)
        codec=from_variant(lambda v: v.collect.codec),
    params:
        tracking=TRACKING,
        collect=from_variant(lambda v: v.collect.pick("n_episodes", "valid_fraction")),
        code=code("merge_demos"),
    script:
        "../scripts/merge_demos.py"
