"""The job glue: every rule that runs a stage runs scripts/run_stage.py, one call of
:func:`run_rule`, which hands the rule's stage its job spec (a heavy rule's, built from the
``snakemake`` object) or its named files (a plot's), with logging to the rule's log file and the
job's MLflow run (:func:`job`).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from demo2rl import names, provenance, spec_fields, tracking
from demo2rl.config import TrackingConfig
from demo2rl.specs import registry

RESULT_NEUTRAL = True
"""The job glue (logging, the job's run) cannot change a result: no code fingerprint
covers this module."""

log = logging.getLogger("demo2rl")


def setup_logging(path: str | None) -> None:
    """INFO and up to the rule's log file; warnings and errors to stderr too."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = []
    if path:
        handlers.append(logging.FileHandler(path, mode="w"))
        handlers[-1].setLevel(logging.INFO)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING if path else logging.INFO)
    handlers.append(console)
    for handler in handlers:
        handler.setFormatter(fmt)
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True)
    logging.captureWarnings(True)


def stage(rule: str) -> Callable[..., Any]:
    """The stage of ``rule``, imported at job time (the Plan reads the specs only; a stage
    imports what its job needs, torch included): a heavy rule's ``stage(spec, run)``, a plot's
    ``stage(**files, run)``."""
    if rule not in registry.RULES:
        raise KeyError(f"{rule!r} runs no stage (the rules that do: {', '.join(registry.RULES)})")
    return getattr(importlib.import_module(registry.stage_module(rule)), rule)


def run_rule(smk: Any) -> Any:
    """Run the rule's stage (:func:`stage`) inside :func:`job`: every rule's script. A heavy
    rule's stage gets its job spec (:data:`demo2rl.specs.registry.SPECS`, built from the
    ``snakemake`` object), a plot's its named input and output files (:func:`draw`). A stage's
    exception with an ``exit_code`` (an RL run stopped by SIGTERM, its checkpoint saved) ends
    the job with that status."""
    if smk.rule in registry.PLOTS:
        return draw(smk)
    spec_type = registry.SPECS[smk.rule]
    try:
        spec = spec_fields.build(spec_type, smk)
    except BaseException:  # (a bad value of the rule's, a check of the spec's): into its log
        setup_logging(smk.log[0] if len(smk.log) else None)
        log.exception("rule %s: its %s could not be built", smk.rule, spec_type.__name__)
        raise
    run_stage = stage(smk.rule)
    try:
        with job(smk, stage=spec_type.STAGE, run_name=spec.run_name()) as run:
            return run_stage(spec, run)
    except Exception as stop:
        code = getattr(stop, "exit_code", None)
        if code is None:
            raise
        print(f"{stop}; rerun the workflow to resume", file=sys.stderr)
        sys.exit(code)


def draw(smk: Any) -> None:
    """A plotting rule's stage on its named input and output files (a list of files stays a
    list), in the job's run named after the rule (plot_bc: ``plot-bc``)."""
    files = [*smk.input.items(), *smk.output.items()]
    named = {k: v if isinstance(v, str) else list(v) for k, v in files}
    with job(smk, stage="plot", run_name=smk.rule.replace("_", "-")) as run:
        stage(smk.rule)(**named, run=run)


@contextlib.contextmanager
def job(smk: Any, *, stage: str, run_name: str) -> Iterator[tracking.Run | tracking.Untracked]:
    """Run a rule's work with logging and a tracked MLflow child run.

    The run's params are the rule's ``params`` (its config slice) except ``tracking``, which says
    whether and how the job tracks; its tags name the stage, the rule, the wildcards, the variant
    (``demo2rl.variant``: ``base`` or the variant whose results the job writes; a variant's run
    is also named ``<run_name>-<variant>``) and the runs that produced the inputs. With
    ``tracking.enabled`` off the job gets an :class:`~demo2rl.tracking.Untracked` run and never
    imports MLflow. An exception is logged to
    the rule's log before it propagates.
    """
    setup_logging(smk.log[0] if len(smk.log) else None)
    wildcards = dict(smk.wildcards.items())
    # the config variant the job runs for: the one whose results it writes (a job across the
    # variants, comparing them, has none); a variant's runs are named after it too
    variant = names.variant_of(wildcards["root"]) if "root" in wildcards else None
    if variant not in (None, names.BASE_VARIANT):
        run_name = f"{run_name}-{variant}"
    settings = TrackingConfig.of(smk.params.tracking)
    params = {k: v for k, v in smk.params.items() if k != "tracking"}
    log.info("rule %s %s, threads=%s", smk.rule, wildcards, smk.threads)
    log.info("versions %s, code %s", provenance.versions(), provenance.code_revision())
    start = time.perf_counter()
    if settings.enabled:
        run_context = tracking.child_run(
            run_name,
            stage=stage,
            rule=smk.rule,
            wildcards=wildcards,
            params=params,
            inputs=list(smk.input),
            outputs=list(smk.output),
            settings=settings,
        )
    else:
        log.info("tracking off (tracking.enabled: false): no MLflow run")
        run_context = tracking.untracked_run(list(smk.output))
    try:
        with run_context as run:
            if variant is not None:
                run.set_tags({"demo2rl.variant": variant})
            yield run
            run.log_metrics({"job_seconds": time.perf_counter() - start})
    except BaseException:
        log.exception("rule %s failed", smk.rule)
        raise
    log.info("done in %.1f s", time.perf_counter() - start)
