"""The workflow's stages as plain functions: library calls in order, plus what each logs.

The job glue (:mod:`demo2rl.workflow.runner`) hands each one its rule's job spec (a plot: its
named files) and calls it; the same functions run without Snakemake (tests, notebooks). ``run``
is the job's tracking run. One module per rule, named after it, importing only what that rule
runs: a rule's code fingerprint covers exactly its own code (see tests/test_rerun_matrix.py).
"""
