"""Rule summarize: the comparison across policies and RL seeds, its tables and plots."""

from demo2rl.jobs import job
from demo2rl.stages import evaluate as stage

out, p = snakemake.output, snakemake.params
with job(snakemake, stage="summarize", run_name="summarize") as run:
    stage.summarize(
        evaluations=list(snakemake.input.evaluations),
        curves=list(snakemake.input.curves),
        summary_json=out.summary_json,
        summary_md=out.summary_md,
        tables={k: out[k] for k in ("policies", "improvement", "runs", "episodes")},
        curves_png=out.curves_png,
        returns_png=out.returns_png,
        track_png=out.get("track_png"),
        lap_gif=out.get("lap_gif"),
        cfg=p.summary,
        seed=p.seed,
        curve_tracks=p.curve_tracks,
        run=run,
    )
