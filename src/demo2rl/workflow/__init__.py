"""The workflow as one object in the library, and what runs a job inside it.

:mod:`~demo2rl.workflow.plan` resolves the config (every variant validated, probed, its ``auto``
values decided) into the answers the rules ask for; :mod:`~demo2rl.workflow.graph` is the job graph
(what each kind of job reads and writes); :mod:`~demo2rl.workflow.variants` declares the variants
and decides which jobs they share; :mod:`~demo2rl.workflow.probe` tries the task once before any
job; :mod:`~demo2rl.workflow.runner` is what a rule's script calls to build its job spec and run the
stage inside the job's MLflow run. The job specs are :mod:`demo2rl.specs`, the stages
:mod:`demo2rl.stages`.
"""
