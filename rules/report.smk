# The comparison across policies and seeds, its figures, and what `snakemake --report` shows.
# The numbers (summarize) and each figure (plot_*) are separate rules, so an edit to plotting
# code redraws figures and recomputes nothing.
REPORT = f"{RESULTS}/report"
RACING = config["task"]["env_id"].rpartition(":")[2] == "Racing-v0"
SUMMARY_FIGURES = {
    "curves_png": f"{REPORT}/plots/learning_curves.png",
    "returns_png": f"{REPORT}/plots/final_returns.png",
}
RACING_FIGURES = {
    "track_png": f"{REPORT}/plots/track_lines.png",
    "lap_gif": f"{REPORT}/plots/best_lap.gif",
}
# what rule all builds
REPORT_TARGETS = [
    f"{REPORT}/summary.md",
    f"{REPORT}/summary.json",
    f"{RESULTS}/bc/loss.png",
    *SUMMARY_FIGURES.values(),
    *(RACING_FIGURES.values() if RACING else ()),
]


report: "../report/workflow.rst"


rule summarize:
    input:
        evaluations=expand(f"{RESULTS}/eval/{{policy}}.json", policy=EVAL_POLICIES),
        curves=[f"{run.dir(RESULTS)}/evaluations.csv" for run in RL_RUNS],
    output:
        summary_json=f"{REPORT}/summary.json",
        summary_md=f"{REPORT}/summary.md",
        policies=report(
            f"{REPORT}/policies.csv",
            caption="../report/policies.rst",
            category="Evaluation",
            labels={"table": "returns per policy"},
        ),
        improvement=report(
            f"{REPORT}/improvement.csv",
            caption="../report/improvement.rst",
            category="Evaluation",
            labels={"table": "probability of improvement"},
        ),
        runs=f"{REPORT}/runs.csv",
        episodes=f"{REPORT}/episodes.csv",
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
        tracking=TRACKING,
        bootstrap_reps=EVALUATE.bootstrap_reps,
        confidence=EVALUATE.confidence,
        seed=config["seed"],
        # the RL learning curves were evaluated on this many of the held-out tracks
        curve_tracks=EVALUATE.during_training,
        # the RL run of each of the curves, in their order
        curve_runs=[run.name for run in RL_RUNS],
        arm_looks=ARM_LOOKS,
        # summary.md links to the figures
        figures=SUMMARY_FIGURES,
        code=code("summarize"),
    script:
        "../scripts/summarize.py"


rule plot_summary:
    input:
        f"{REPORT}/summary.json",
    output:
        curves_png=report(
            SUMMARY_FIGURES["curves_png"],
            caption="../report/learning_curves.rst",
            category="Evaluation",
            labels={"figure": "learning curves"},
        ),
        returns_png=report(
            SUMMARY_FIGURES["returns_png"],
            caption="../report/final_returns.rst",
            category="Evaluation",
            labels={"figure": "final returns"},
        ),
    log:
        f"{RESULTS}/logs/plot_summary.log",
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        tracking=TRACKING,
        arm_looks=ARM_LOOKS,
        code=code("plot_summary"),
    script:
        "../scripts/plot_summary.py"


rule plot_racing:
    input:
        evaluations=expand(f"{RESULTS}/eval/{{policy}}.json", policy=EVAL_POLICIES),
    output:
        track_png=report(
            RACING_FIGURES["track_png"],
            caption="../report/track_lines.rst",
            category="Racing",
            labels={"figure": "track lines"},
        ),
        lap_gif=report(
            RACING_FIGURES["lap_gif"],
            caption="../report/best_lap.rst",
            category="Racing",
            labels={"figure": "best lap"},
        ),
    log:
        f"{RESULTS}/logs/plot_racing.log",
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        tracking=TRACKING,
        arm_looks=ARM_LOOKS,
        code=code("plot_racing", task=True),
    script:
        "../scripts/plot_racing.py"
