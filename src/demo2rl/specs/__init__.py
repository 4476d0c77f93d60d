"""The job specs: everything each heavy job is given, one frozen dataclass per rule, each in the
module of its rule's name (``demo2rl.specs.train_rl.RLJob``).

A field's role says whether it can change the job's result, its source where the job takes it
from, and what it reads, as data, the config keys the workflow takes it from
(:mod:`demo2rl.spec_fields`): the Plan computes each spec's result fields as its rule's params
and its speed fields as the rule's resources, from the job's config variant
(:class:`demo2rl.workflow.plan.Variant`, or the plan for the comparison across variants); the
script builds the spec back from the ``snakemake`` object (:func:`demo2rl.spec_fields.build`,
through :func:`demo2rl.workflow.runner.run_rule`) and hands it to the stage.
:data:`demo2rl.specs.registry.RULES` names each rule's spec.

A stage imports its own spec's module only, so that editing one spec reruns its rule alone (this
package's ``__init__`` imports nothing).
"""
