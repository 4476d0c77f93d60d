rule train_bc:
    input:
        unpack(job_inputs("clone")),
    output:
        policy=f"{{root}}/{names.CLONE}",
        metrics=f"{{root}}/{names.CLONE_METRICS}",
    log:
        "{root}/logs/train_bc.log",
    benchmark:
        "{root}/benchmarks/train_bc.tsv"
    conda:
        "../envs/train.yaml"
    # torch threads (and HDF5 loader workers when streaming); small MLPs train fastest on one
    threads: 1
    resources:
        **PLAN.resources("train_bc"),
        mem_mb=8000,
        runtime=60,
        gpu=from_variant(lambda v: v.gpus("bc")),
    params:
        **PLAN.params("train_bc"),
    script:
        "../scripts/run_stage.py"


rule plot_bc:
    input:
        metrics=f"{{root}}/{names.CLONE_METRICS}",
    output:
        out=report(
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
        **PLAN.params("plot_bc"),
    script:
        "../scripts/run_stage.py"
