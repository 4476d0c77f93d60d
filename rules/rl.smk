rule train_rl:
    input:
        unpack(job_inputs("rl")),
    output:
        policy=f"{{root}}/{names.RL_CHECKPOINT}",
        progress=f"{{root}}/{names.RL_PROGRESS}",
        evaluations=f"{{root}}/{names.RL_CURVE}",
    log:
        f"{{root}}/logs/train_rl/{names.RL_LOG}.log",
    benchmark:
        f"{{root}}/benchmarks/train_rl/{names.RL_LOG}.tsv"
    conda:
        "../envs/train.yaml"
    # worker processes of rl.vec_env: subproc (speed only)
    threads: 1
    resources:
        **PLAN.resources("train_rl"),
        mem_mb=4000,
        runtime=240,
        gpu=from_variant(lambda v: v.gpus("rl")),
    params:
        **PLAN.params("train_rl"),
    script:
        "../scripts/run_stage.py"
