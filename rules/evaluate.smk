# Final evaluation: every policy on the same held-out tracks (evaluation seeds, disjoint from the
# demonstration and training seeds), one job per policy.
EVAL_POLICIES = [
    "expert",
    "bc",
    *(f"rl-{init}-seed{seed}" for init in INITS for seed in RL_SEEDS),
]
# the checkpoint of each learned policy (the expert is code and config only)
CHECKPOINTS = {"bc": f"{RESULTS}/bc/policy.pt"} | {
    f"rl-{init}-seed{seed}": f"{RESULTS}/rl/{init}/seed-{seed}/policy.pt"
    for init in INITS
    for seed in RL_SEEDS
}


rule evaluate:
    input:
        unpack(
            lambda wc: (
                {"checkpoint": CHECKPOINTS[wc.policy]} if wc.policy != "expert" else {}
            )
        ),
    output:
        f"{RESULTS}/eval/{{policy}}.json",
    log:
        f"{RESULTS}/logs/evaluate/{{policy}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate/{{policy}}.tsv"
    wildcard_constraints:
        policy=r"expert|bc|rl-(" + "|".join(INITS) + r")-seed\d+",
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        tracking=tracking.settings(config),
        task=config["task"],
        # the network config of learned policies; the expert's evaluation does not depend on it
        policy=lambda wc: config["policy"] if wc.policy != "expert" else None,
        # not the seed list: adding RL seeds must not rerun the other evaluations
        evaluate={k: config["evaluate"][k] for k in ("episodes", "n_envs")},
        seed=config["seed"],
        code=code("demo2rl.stages.evaluate"),
    script:
        "../scripts/evaluate.py"
