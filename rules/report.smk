# The comparison across policies and seeds, its plots, and what `snakemake --report` shows.
REPORT = f"{RESULTS}/report"
RACING = config["task"]["env_id"].rpartition(":")[2] == "Racing-v0"


# static per config: the racing task adds its track figure and animation
SUMMARY_OUTPUTS = {
    "summary_json": f"{REPORT}/summary.json",
    "summary_md": f"{REPORT}/summary.md",
    "policies": report(
        f"{REPORT}/policies.csv",
        caption="../report/policies.rst",
        category="Evaluation",
        labels={"table": "returns per policy"},
    ),
    "improvement": report(
        f"{REPORT}/improvement.csv",
        caption="../report/improvement.rst",
        category="Evaluation",
        labels={"table": "probability of improvement"},
    ),
    "runs": f"{REPORT}/runs.csv",
    "episodes": f"{REPORT}/episodes.csv",
    "curves_png": report(
        f"{REPORT}/plots/learning_curves.png",
        caption="../report/learning_curves.rst",
        category="Evaluation",
        labels={"figure": "learning curves"},
    ),
    "returns_png": report(
        f"{REPORT}/plots/final_returns.png",
        caption="../report/final_returns.rst",
        category="Evaluation",
        labels={"figure": "final returns"},
    ),
}
if RACING:
    SUMMARY_OUTPUTS["track_png"] = report(
        f"{REPORT}/plots/track_lines.png",
        caption="../report/track_lines.rst",
        category="Racing",
        labels={"figure": "track lines"},
    )
    SUMMARY_OUTPUTS["lap_gif"] = report(
        f"{REPORT}/plots/best_lap.gif",
        caption="../report/best_lap.rst",
        category="Racing",
        labels={"figure": "best lap"},
    )
# what rule all builds
REPORT_TARGETS = [SUMMARY_OUTPUTS["summary_md"], SUMMARY_OUTPUTS["summary_json"]]


report: "../report/workflow.rst"


rule summarize:
    input:
        evaluations=expand(f"{RESULTS}/eval/{{policy}}.json", policy=EVAL_POLICIES),
        curves=expand(
            f"{RESULTS}/rl/{{init}}/seed-{{seed}}/evaluations.csv",
            init=INITS,
            seed=RL_SEEDS,
        ),
    output:
        **SUMMARY_OUTPUTS,
    log:
        f"{RESULTS}/logs/summarize.log",
    benchmark:
        f"{RESULTS}/benchmarks/summarize.tsv"
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        tracking=tracking.settings(config),
        summary={k: config["evaluate"][k] for k in ("bootstrap_reps", "confidence")},
        seed=config["seed"],
        # the RL learning curves were evaluated on this many of the held-out tracks
        curve_tracks=config["evaluate"]["during_training"],
        code=code("demo2rl.stages.evaluate"),
    script:
        "../scripts/summarize.py"
