rule train_rl:
    input:
        unpack(rl_inputs),
    output:
        policy=f"{RESULTS}/rl/{{init}}/seed-{{seed}}/policy.pt",
        progress=f"{RESULTS}/rl/{{init}}/seed-{{seed}}/progress.csv",
        evaluations=f"{RESULTS}/rl/{{init}}/seed-{{seed}}/evaluations.csv",
    log:
        f"{RESULTS}/logs/train_rl/{{init}}-seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_rl/{{init}}-seed{{seed}}.tsv"
    conda:
        "../envs/train.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=240,
        gpu=gpus(config["rl"]["device"]),
    params:
        tracking=tracking.settings(config),
        task=config["task"],
        policy=config["policy"],
        rl=rl_params,
        evaluate=config["evaluate"],
        seed=config["seed"],
        clip_obs=config["bc"]["clip_obs"],
        # resumable state lives beside the outputs, not as one: Snakemake must not delete it
        state_dir=lambda wc: f"{RESULTS}/rl/{wc.init}/seed-{wc.seed}/state",
        code=code("demo2rl.stages.rl"),
    script:
        "../scripts/train_rl.py"
