# The comparison across policies and seeds, its figures, and what `snakemake --report` shows.
# The numbers (summarize) and each figure (plot_*) are separate rules, so an edit to plotting
# code redraws figures and recomputes nothing.
REPORT = "{root}/report"
"""A variant's report directory, with the root wildcard (a variant's results)."""


report: "../report/workflow.rst"


rule summarize:
    input:
        unpack(from_variant(PLAN.summary_inputs)),
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
        **PLAN.params("summarize"),
    script:
        "../scripts/run_stage.py"


rule plot_summary:
    input:
        summary_json=f"{REPORT}/summary.json",
    output:
        curves_png=report(
            f"{REPORT}/{names.SUMMARY_FIGURES['curves_png']}",
            caption="../report/learning_curves.rst",
            category="Evaluation",
            labels=variant_labels(figure="learning curves"),
        ),
        returns_png=report(
            f"{REPORT}/{names.SUMMARY_FIGURES['returns_png']}",
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
        **PLAN.params("plot_summary"),
    script:
        "../scripts/run_stage.py"


rule plot_racing:
    input:
        evaluations=from_variant(lambda v: PLAN.summary_inputs(v)["evaluations"]),
    output:
        track_png=report(
            f"{REPORT}/{names.RACING_FIGURES['track_png']}",
            caption="../report/track_lines.rst",
            category="Racing",
            labels=variant_labels(figure="track lines"),
        ),
        lap_gif=report(
            f"{REPORT}/{names.RACING_FIGURES['lap_gif']}",
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
        **PLAN.params("plot_racing"),
    script:
        "../scripts/run_stage.py"


# the comparison across variants (when the config declares any): numbers, then the figure
rule compare_variants:
    input:
        **PLAN.comparison_inputs(),
    output:
        variants_json=f"{PLAN.report}/variants.json",
        variants_md=f"{PLAN.report}/variants.md",
    log:
        f"{PLAN.results}/logs/compare_variants.log",
    benchmark:
        f"{PLAN.results}/benchmarks/compare_variants.tsv"
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        **PLAN.params("compare_variants"),
    script:
        "../scripts/run_stage.py"


rule plot_variants:
    input:
        variants_json=f"{PLAN.report}/variants.json",
    output:
        variants_png=report(
            PLAN.variants_figure,
            caption="../report/variants.rst",
            category="Variants",
            labels={"figure": "IQM per arm and variant"},
        ),
    log:
        f"{PLAN.results}/logs/plot_variants.log",
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        **PLAN.params("plot_variants"),
    script:
        "../scripts/run_stage.py"
