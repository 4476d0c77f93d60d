rule train_bc:
    input:
        demos=f"{RESULTS}/demos/demos.h5",
    output:
        policy=f"{RESULTS}/bc/policy.pt",
        metrics=f"{RESULTS}/bc/metrics.json",
        loss_plot=report(
            f"{RESULTS}/bc/loss.png",
            caption="../report/bc_loss.rst",
            category="Behaviour cloning",
        ),
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
    params:
        tracking=tracking.settings(config),
        task=config["task"],
        policy=config["policy"],
        bc=config["bc"],
        evaluate=config["evaluate"],
        seed=config["seed"],
        code=code("demo2rl.stages.bc"),
    script:
        "../scripts/train_bc.py"
