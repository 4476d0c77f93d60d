"""Rule compare_variants: every config variant against the base, per policy group."""

from demo2rl.jobs import job
from demo2rl.stages import compare_variants as stage

inp, p = snakemake.input, snakemake.params
variants = list(p.overrides)  # the base first
progress: dict[str, dict[str, str]] = {v: {} for v in variants}
for (variant, policy), path in zip(p.progress_runs, inp.progress, strict=True):
    progress[variant][policy] = path
with job(snakemake, stage="compare", run_name="compare-variants") as run:
    stage.compare_variants(
        summaries=dict(zip(variants, inp.summaries, strict=True)),
        episodes=dict(zip(variants, inp.episodes, strict=True)),
        progress=progress,
        overrides=p.overrides,
        variants_json=snakemake.output.variants_json,
        variants_md=snakemake.output.variants_md,
        figure=p.figure,
        bootstrap_reps=p.bootstrap_reps,
        confidence=p.confidence,
        seed=p.seed,
        run=run,
    )
