# Final evaluation: every policy on the same held-out tracks (evaluation seeds, disjoint from the
# demonstration and training seeds), one job per policy.
EVAL_POLICIES = names.policy_names(INITS, RL_SEEDS)
# the checkpoint of each learned policy (the expert is code and config only)
CHECKPOINTS = {names.BC: f"{RESULTS}/bc/policy.pt"} | {
    run.name: f"{run.dir(RESULTS)}/policy.pt" for run in RL_RUNS
}


rule evaluate:
    input:
        # a learned policy's checkpoint, and the dataset it must record as its own
        unpack(
            lambda wc: (
                {
                    "checkpoint": CHECKPOINTS[wc.policy],
                    "demos": f"{RESULTS}/demos/demos.h5",
                }
                if wc.policy != names.EXPERT
                else {}
            )
        ),
    output:
        f"{RESULTS}/eval/{{policy}}.json",
    log:
        f"{RESULTS}/logs/evaluate/{{policy}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate/{{policy}}.tsv"
    wildcard_constraints:
        policy=names.policy_pattern(INITS),
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
        # envs stepped together: speed only
        envs=EVALUATE.n_envs,
        # the time limit on each env or expert call (task.timeout_s): robustness only
        timeout_ms=TIMEOUT_MS,
    params:
        tracking=TRACKING,
        # the expert is the task's; a learned policy's network comes from its checkpoint
        task=lambda wc: TASK if wc.policy == names.EXPERT else ENV,
        episodes=EVALUATE.episodes,
        seed=config["seed"],
        code=code("evaluate", task=True),
    script:
        "../scripts/evaluate.py"
