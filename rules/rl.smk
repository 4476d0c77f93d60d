rule train_rl:
    input:
        unpack(job_inputs(lambda wc: ("rl", wc.init, wc.seed))),
    output:
        policy=f"{RL_DIR}/policy.pt",
        progress=f"{RL_DIR}/progress.csv",
        evaluations=f"{RL_DIR}/evaluations.csv",
    log:
        f"{{root}}/logs/train_rl/{names.RL_LOG}.log",
    benchmark:
        f"{{root}}/benchmarks/train_rl/{names.RL_LOG}.tsv"
    conda:
        "../envs/train.yaml"
    # worker processes of rl.vec_env: subproc (speed only)
    threads: 1
    resources:
        mem_mb=4000,
        runtime=240,
        gpu=from_variant(lambda v: v.gpus("rl")),
        # speed and robustness only: envs stepped together in the held-out evaluations, env
        # steps between resumable checkpoints, the time limit on each env call (task.timeout_s)
        eval_envs=from_variant(lambda v: v.evaluate.n_envs),
        checkpoint_every=from_variant(lambda v: v.config["rl"]["checkpoint_every"]),
        timeout_ms=from_variant(lambda v: v.timeout_ms),
    params:
        tracking=TRACKING,
        task=from_variant(lambda v: v.env),
        policy=from_variant(lambda v: v.config["policy"]),
        rl=rl_params,
        eval_episodes=from_variant(lambda v: v.evaluate.during_training),
        seed=from_variant(lambda v: v.config["seed"]),
        clip_obs=from_variant(lambda v: v.config["bc"]["clip_obs"]),
        # resumable state lives beside the outputs, not as one: Snakemake must not delete it;
        # it records the run's key, and a run resumes only its own state
        state_dir=lambda wc: f"{names.RLRun(wc.init, int(wc.seed)).dir(wc.root)}/state",
        code=code("train_rl", task=True),
    script:
        "../scripts/train_rl.py"
