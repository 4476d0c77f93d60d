# The comparison across policies and seeds, its figures, and what `snakemake --report` shows.
# The numbers (summarize) and each figure (plot_*) are separate rules, so an edit to plotting
# code redraws figures and recomputes nothing.
REPORT = "{root}/report"
"""A variant's report directory, with the root wildcard (a variant's results)."""
VARIANTS_REPORT = PLAN.report
"""Where the comparison across variants goes: the experiment's report directory."""


report: "../report/workflow.rst"


rule summarize:
    input:
        evaluations=lambda wc: [
            evaluation_path(job_variant(wc), p) for p in job_variant(wc).policies
        ],
        curves=lambda wc: [
            f"{rl_run_dir(job_variant(wc), run)}/evaluations.csv"
            for run in job_variant(wc).runs
        ],
        # the same runs' SB3 progress tables (their training seconds, wall and CPU)
        progress=lambda wc: [
            f"{rl_run_dir(job_variant(wc), run)}/progress.csv"
            for run in job_variant(wc).runs
        ],
    output:
        summary_json=f"{REPORT}/summary.json",
        summary_md=f"{REPORT}/summary.md",
        policies=report(
            f"{REPORT}/policies.csv",
            caption="../report/policies.rst",
            category="Evaluation",
            labels=variant_labels(table="returns per policy"),
        ),
        improvement=report(
            f"{REPORT}/improvement.csv",
            caption="../report/improvement.rst",
            category="Evaluation",
            labels=variant_labels(table="probability of improvement"),
        ),
        runs=f"{REPORT}/runs.csv",
        episodes=f"{REPORT}/episodes.csv",
    log:
        "{root}/logs/summarize.log",
    benchmark:
        "{root}/benchmarks/summarize.tsv"
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        tracking=TRACKING,
        variant=from_variant(lambda v: v.name),
        bootstrap_reps=from_variant(lambda v: v.evaluate.bootstrap_reps),
        confidence=from_variant(lambda v: v.evaluate.confidence),
        seed=from_variant(lambda v: v.config["seed"]),
        # the RL learning curves were evaluated on this many of the held-out tracks
        curve_tracks=from_variant(lambda v: v.evaluate.during_training),
        # the RL run of each of the curves and progress tables, in their order
        curve_runs=from_variant(lambda v: [run.name for run in v.runs]),
        # env steps per run of each arm (its algorithm's budget)
        budgets=from_variant(lambda v: v.budgets),
        arm_looks=from_variant(lambda v: v.arm_looks),
        # summary.md links to the figures
        figures=lambda wc: {
            k: f"{wc.root}/report/{p}" for k, p in SUMMARY_FIGURES.items()
        },
        code=code("summarize"),
    script:
        "../scripts/summarize.py"


rule plot_summary:
    input:
        f"{REPORT}/summary.json",
    output:
        curves_png=report(
            f"{REPORT}/{SUMMARY_FIGURES['curves_png']}",
            caption="../report/learning_curves.rst",
            category="Evaluation",
            labels=variant_labels(figure="learning curves"),
        ),
        returns_png=report(
            f"{REPORT}/{SUMMARY_FIGURES['returns_png']}",
            caption="../report/final_returns.rst",
            category="Evaluation",
            labels=variant_labels(figure="final returns"),
        ),
    log:
        "{root}/logs/plot_summary.log",
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        tracking=TRACKING,
        arm_looks=from_variant(lambda v: v.arm_looks),
        code=code("plot_summary"),
    script:
        "../scripts/plot_summary.py"


rule plot_racing:
    input:
        evaluations=lambda wc: [
            evaluation_path(job_variant(wc), p) for p in job_variant(wc).policies
        ],
    output:
        track_png=report(
            f"{REPORT}/{RACING_FIGURES['track_png']}",
            caption="../report/track_lines.rst",
            category="Racing",
            labels=variant_labels(figure="track lines"),
        ),
        lap_gif=report(
            f"{REPORT}/{RACING_FIGURES['lap_gif']}",
            caption="../report/best_lap.rst",
            category="Racing",
            labels=variant_labels(figure="best lap"),
        ),
    log:
        "{root}/logs/plot_racing.log",
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        tracking=TRACKING,
        arm_looks=from_variant(lambda v: v.arm_looks),
        code=code("plot_racing", task=True),
    script:
        "../scripts/plot_racing.py"


# the comparison across variants (when the config declares any): numbers, then the figure
rule compare_variants:
    input:
        summaries=[f"{v.root}/report/summary.json" for v in VARIANTS.values()],
        episodes=[f"{v.root}/report/episodes.csv" for v in VARIANTS.values()],
        # each variant's RL runs' SB3 progress tables (their wall time)
        progress=[
            f"{rl_run_dir(v, run)}/progress.csv"
            for v in VARIANTS.values()
            for run in v.runs
        ],
    output:
        variants_json=f"{VARIANTS_REPORT}/variants.json",
        variants_md=f"{VARIANTS_REPORT}/variants.md",
    log:
        f"{RESULTS}/logs/compare_variants.log",
    benchmark:
        f"{RESULTS}/benchmarks/compare_variants.tsv"
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        tracking=TRACKING,
        # the variants in order (the base first) with their overrides as declared
        overrides=PLAN.overrides(),
        # the (variant, policy) of each progress table, in their order
        progress_runs=[
            [name, run.name] for name, v in VARIANTS.items() for run in v.runs
        ],
        bootstrap_reps=PLAN.base.evaluate.bootstrap_reps,
        confidence=PLAN.base.evaluate.confidence,
        seed=config["seed"],
        arm_looks={
            arm: look for v in VARIANTS.values() for arm, look in v.arm_looks.items()
        },
        # variants.md links to the figure
        figure=f"{VARIANTS_REPORT}/plots/variants.png",
        code=code("compare_variants"),
    script:
        "../scripts/compare_variants.py"


rule plot_variants:
    input:
        variants_json=f"{VARIANTS_REPORT}/variants.json",
    output:
        variants_png=report(
            f"{VARIANTS_REPORT}/plots/variants.png",
            caption="../report/variants.rst",
            category="Variants",
            labels={"figure": "IQM per arm and variant"},
        ),
    log:
        f"{RESULTS}/logs/plot_variants.log",
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        tracking=TRACKING,
        arm_looks={
            arm: look for v in VARIANTS.values() for arm, look in v.arm_looks.items()
        },
        code=code("plot_variants"),
    script:
        "../scripts/plot_variants.py"
