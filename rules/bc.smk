rule train_bc:
    input:
        unpack(job_inputs(lambda wc: ("clone",))),
    output:
        policy="{root}/bc/policy.pt",
        metrics="{root}/bc/metrics.json",
    log:
        "{root}/logs/train_bc.log",
    benchmark:
        "{root}/benchmarks/train_bc.tsv"
    conda:
        "../envs/train.yaml"
    # torch threads (and HDF5 loader workers when streaming); small MLPs train fastest on one
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=from_variant(lambda v: v.gpus("bc")),
        # envs stepped together when clone and expert drive the held-out episodes: speed only
        eval_envs=from_variant(lambda v: v.evaluate.n_envs),
        # the time limit on each env or expert call (task.timeout_s): robustness only
        timeout_ms=from_variant(lambda v: v.timeout_ms),
    params:
        tracking=TRACKING,
        task=from_variant(lambda v: v.task),
        policy=from_variant(lambda v: v.config["policy"]),
        bc=from_variant(lambda v: v.config["bc"]),
        eval_episodes=from_variant(lambda v: v.evaluate.during_training),
        seed=from_variant(lambda v: v.config["seed"]),
        code=code("train_bc", task=True),
    script:
        "../scripts/train_bc.py"


rule plot_bc:
    input:
        "{root}/bc/metrics.json",
    output:
        report(
            "{root}/bc/loss.png",
            caption="../report/bc_loss.rst",
            category="Behaviour cloning",
        ),
    log:
        "{root}/logs/plot_bc.log",
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
