rule train_bc:
    input:
        demos=f"{RESULTS}/demos/demos.h5",
    output:
        policy=f"{RESULTS}/bc/policy.pt",
        metrics=f"{RESULTS}/bc/metrics.json",
    log:
        f"{RESULTS}/logs/train_bc.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_bc.tsv"
    conda:
        "../envs/train.yaml"
    # torch threads (and HDF5 loader workers when streaming); small MLPs train fastest on one
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=gpus(config["bc"]["device"]),
        # envs stepped together when clone and expert drive the held-out episodes: speed only
        eval_envs=EVALUATE.n_envs,
        # the time limit on each env or expert call (task.timeout_s): robustness only
        timeout_ms=TIMEOUT_MS,
    params:
        tracking=TRACKING,
        task=TASK,
        policy=config["policy"],
        bc=config["bc"],
        eval_episodes=EVALUATE.during_training,
        seed=config["seed"],
        code=code("train_bc", task=True),
    script:
        "../scripts/train_bc.py"


rule plot_bc:
    input:
        f"{RESULTS}/bc/metrics.json",
    output:
        report(
            f"{RESULTS}/bc/loss.png",
            caption="../report/bc_loss.rst",
            category="Behaviour cloning",
        ),
    log:
        f"{RESULTS}/logs/plot_bc.log",
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        tracking=TRACKING,
        code=code("plot_bc"),
    script:
        "../scripts/plot_bc.py"
