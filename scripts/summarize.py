"""Rule summarize: the comparison across policies and RL seeds, its tables and numbers."""

from demo2rl.jobs import job
from demo2rl.stages import summarize as stage

out, p = snakemake.output, snakemake.params
with job(snakemake, stage="summarize", run_name="summarize") as run:
    stage.summarize(
        evaluations=list(snakemake.input.evaluations),
        curves=dict(zip(p.curve_runs, snakemake.input.curves, strict=True)),
        progress=dict(zip(p.curve_runs, snakemake.input.progress, strict=True)),
        budgets=p.budgets,
        summary_json=out.summary_json,
        summary_md=out.summary_md,
        tables={k: out[k] for k in ("policies", "improvement", "runs", "episodes")},
        plot_links={
            "Learning curves": p.figures["curves_png"],
            "Final returns": p.figures["returns_png"],
        },
        bootstrap_reps=p.bootstrap_reps,
        confidence=p.confidence,
        seed=p.seed,
        curve_tracks=p.curve_tracks,
        variant=p.variant,
        run=run,
    )
