# DAgger rounds (bc.dagger.rounds): round r's shards are driven by round r-1's clone (round 0:
# the plain clone) mixed with the expert, and labelled by the expert; the aggregate (round
# r-1's, or the dataset, and the round's shards) trains round r's clone. A round's jobs never
# read bc.dagger.rounds: raising it adds rounds and keeps the earlier ones.


rule dagger_shard:
    input:
        unpack(job_inputs("dagger_shard")),
    output:
        out=f"{{root}}/{names.DAGGER_SHARD}",
    log:
        "{root}/logs/dagger_shard/round-{round}-{shard}.log",
    benchmark:
        "{root}/benchmarks/dagger_shard/round-{round}-{shard}.tsv"
    conda:
        "../envs/train.yaml"
    threads: 1
    resources:
        **PLAN.resources("dagger_shard"),
        mem_mb=2000,
        runtime=30,
    params:
        **PLAN.params("dagger_shard"),
    script:
        "../scripts/run_stage.py"


rule aggregate_dagger:
    input:
        unpack(job_inputs("aggregate")),
    output:
        out=f"{{root}}/{names.DAGGER_AGGREGATE}",
    log:
        "{root}/logs/aggregate_dagger/round-{round}.log",
    benchmark:
        "{root}/benchmarks/aggregate_dagger/round-{round}.tsv"
    conda:
        "../envs/collect.yaml"
    threads: 1
    resources:
        **PLAN.resources("aggregate_dagger"),
        mem_mb=4000,
        runtime=15,
    params:
        **PLAN.params("aggregate_dagger"),
    script:
        "../scripts/run_stage.py"


rule train_dagger:
    input:
        unpack(job_inputs("round")),
    output:
        policy=f"{{root}}/{names.ROUND_CLONE}",
        metrics=f"{{root}}/{names.ROUND_METRICS}",
    log:
        "{root}/logs/train_dagger/round-{round}.log",
    benchmark:
        "{root}/benchmarks/train_dagger/round-{round}.tsv"
    conda:
        "../envs/train.yaml"
    threads: 1
    resources:
        **PLAN.resources("train_dagger"),
        mem_mb=8000,
        runtime=60,
        gpu=from_variant(lambda v: v.gpus("bc")),
    params:
        **PLAN.params("train_dagger"),
    script:
        "../scripts/run_stage.py"
