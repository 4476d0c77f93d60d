# Final evaluation: every policy on the same held-out tracks (evaluation seeds, disjoint from the
# demonstration and training seeds), one job per policy.


rule evaluate:
    input:
        unpack(job_inputs(lambda wc: ("evaluation", wc.policy))),
    output:
        "{root}/eval/{policy}.json",
    log:
        "{root}/logs/evaluate/{policy}.log",
    benchmark:
        "{root}/benchmarks/evaluate/{policy}.tsv"
    wildcard_constraints:
        policy=names.policy_pattern(ALL_INITS),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
        # envs stepped together: speed only
        envs=from_variant(lambda v: v.evaluate.n_envs),
        # the time limit on each env or expert call (task.timeout_s): robustness only
        timeout_ms=from_variant(lambda v: v.timeout_ms),
    params:
        tracking=TRACKING,
        # the expert is the task's; a learned policy's network comes from its checkpoint
        task=lambda wc: (
            job_variant(wc).task if wc.policy == names.EXPERT else job_variant(wc).env
        ),
        episodes=from_variant(lambda v: v.evaluate.episodes),
        seed=from_variant(lambda v: v.config["seed"]),
        code=code("evaluate", task=True),
    script:
        "../scripts/evaluate.py"
