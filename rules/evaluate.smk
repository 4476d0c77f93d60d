# Final evaluation: every policy on the same held-out tracks (evaluation seeds, disjoint from the
# demonstration and training seeds), one job per policy.


rule evaluate:
    input:
        unpack(job_inputs("evaluation")),
    output:
        out=f"{{root}}/{names.EVALUATION}",
    log:
        "{root}/logs/evaluate/{policy}.log",
    benchmark:
        "{root}/benchmarks/evaluate/{policy}.tsv"
    wildcard_constraints:
        policy=names.policy_pattern(PLAN.arms),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        **PLAN.resources("evaluate"),
        mem_mb=2000,
        runtime=30,
    params:
        **PLAN.params("evaluate"),
    script:
        "../scripts/run_stage.py"
