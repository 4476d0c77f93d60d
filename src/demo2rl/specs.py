"""The job specs: everything each heavy job is given, one frozen dataclass per rule.

A field's role says whether it can change the job's result, and its source where the workflow
takes it from (:mod:`demo2rl.spec_fields`): the Plan turns each spec's result fields into its rule's
params and its speed fields into the rule's resources; the script builds the spec back from the
``snakemake`` object (:func:`demo2rl.spec_fields.build`) and hands it to the stage. A getter reads
the job's subject: its config variant (:class:`demo2rl.workflow.plan.Variant`), or the plan for
the comparison across variants.

:data:`SPECS` names each rule's spec; a rule whose stage takes more than plotting inputs has one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from demo2rl import arms, groups, names
from demo2rl.config import BCConfig, PolicyConfig, RLConfig, TaskConfig
from demo2rl.spec_fields import path, result, speed

UNFINGERPRINTED_IMPORTS = {
    "demo2rl.arms": "RLJob's check that an arm gets the clone it uses: it fails a job or lets it "
    "run, and changes nothing the job computes",
    "demo2rl.groups": "a getter's, run when the workflow plans: the rl slice it computes is the "
    "job's param, which Snakemake compares itself",
    "demo2rl.names": "the jobs' MLflow run names and the getters' paths (where files are, not "
    "what they hold); the stages that name files import it themselves",
}


def _task(value: Mapping[str, Any], raw: Mapping[str, Any]) -> TaskConfig:
    """The job's task: its param (the config's task less ``timeout_s``) with the time limit on
    the task's code from the ``timeout_ms`` resource (robustness only, so it reruns nothing)."""
    return dataclasses.replace(TaskConfig.of(value), timeout_s=raw["timeout_ms"] / 1000)


def _int(value: Any, raw: Mapping[str, Any]) -> int:
    return int(value)


_SEED = result(lambda v, wc: v.config["seed"])
_TIMEOUT = speed(lambda v, wc: v.timeout_ms)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectJob:
    """One shard of expert episodes (rule collect_shard).

    :param shard: the shard's index (its episodes are a contiguous range of indices).
    :param task: the env and its expert.
    :param collect: ``collect.n_episodes`` and ``collect.n_shards``.
    :param seed: the workflow's base seed (each episode's seed derives from it and its index).
    :param out: the shard's HDF5 file.
    :param envs: envs stepped as one batch (every episode's seed is fixed by its index).
    :param codec: HDF5 compression of image observations (size and speed; the hash covers the
        data).
    :param timeout_ms: the time limit on each env or expert call.
    """

    STAGE: ClassVar[str] = "collect"
    TASK_CODE: ClassVar[bool] = True
    shard: int = result(source="wildcards", of=_int)
    task: TaskConfig = result(lambda v, wc: v.task, of=_task)
    collect: Mapping[str, int] = result(lambda v, wc: v.collect.pick("n_episodes", "n_shards"))
    seed: int = _SEED
    out: str = path(source="output")
    envs: int = speed(lambda v, wc: v.collect.n_envs)
    codec: str = speed(lambda v, wc: v.collect.codec)
    timeout_ms: int = _TIMEOUT

    def run_name(self) -> str:
        return f"collect-shard{self.shard}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MergeJob:
    """The shards merged into the dataset with its split, statistics and content hash (rule
    merge_demos).

    :param collect: ``collect.n_episodes`` and ``collect.valid_fraction``.
    :param shards: the shards, in order.
    :param out: the merged dataset.
    :param codec: HDF5 compression of image observations.
    """

    STAGE: ClassVar[str] = "merge"
    TASK_CODE: ClassVar[bool] = False
    collect: Mapping[str, Any] = result(
        lambda v, wc: v.collect.pick("n_episodes", "valid_fraction")
    )
    shards: list[str] = path()
    out: str = path(source="output")
    codec: str = speed(lambda v, wc: v.collect.codec)

    def run_name(self) -> str:
        return "merge-demos"


@dataclasses.dataclass(frozen=True, kw_only=True)
class BCJob:
    """The behaviour clone and its held-out comparison with the expert (rule train_bc).

    :param task: the env and its expert (the held-out comparison drives both).
    :param policy: the network config shared with the RL arms.
    :param bc: the ``bc`` section.
    :param seed: the workflow's base seed.
    :param eval_episodes: held-out episodes of the clone-vs-expert comparison.
    :param demos: the merged dataset.
    :param policy_out: the clone's checkpoint.
    :param metrics_out: the training history and the comparison.
    :param threads: torch threads (and loader workers when streaming).
    :param eval_envs: envs stepped together in the comparison.
    :param timeout_ms: the time limit on each env or expert call.
    """

    STAGE: ClassVar[str] = "bc"
    TASK_CODE: ClassVar[bool] = True
    task: TaskConfig = result(lambda v, wc: v.task, of=_task)
    policy: PolicyConfig = result(
        lambda v, wc: v.config["policy"], of=lambda x, raw: PolicyConfig.of(x)
    )
    bc: BCConfig = result(lambda v, wc: v.config["bc"], of=lambda x, raw: BCConfig.of(x))
    seed: int = _SEED
    eval_episodes: int = result(lambda v, wc: v.evaluate.during_training)
    demos: str = path()
    policy_out: str = path(source="output", key="policy")
    metrics_out: str = path(source="output", key="metrics")
    threads: int = speed(source="threads")
    eval_envs: int = speed(lambda v, wc: v.evaluate.n_envs)
    timeout_ms: int | None = speed(lambda v, wc: v.timeout_ms, default=None)

    def run_name(self) -> str:
        return names.BC


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLJob:
    """One RL run of an arm and seed (rule train_rl).

    Every field but the paths and the speed settings is part of the run's resume key
    (:func:`demo2rl.spec_fields.result_fields`).

    :param arm: the arm (:mod:`demo2rl.arms`), the rule's ``arm`` wildcard.
    :param run_seed: the run's seed among ``rl.seeds``.
    :param seed: the workflow's base seed (training and evaluation seed blocks derive from it).
    :param task: the env, without its expert (RL never calls it).
    :param policy: the network config shared with BC.
    :param rl: the ``rl`` section as this arm's runs read it (its own arm section only; not
        ``checkpoint_every``, a speed setting).
    :param clip_obs: ``bc.clip_obs``: the observation normalisation's clip, the same as BC's.
    :param eval_episodes: held-out episodes of each evaluation during training.
    :param demos: the merged dataset (its statistics normalise observations; some arms train on
        it).
    :param clone: the behaviour clone's checkpoint, for the arms that need it, else None.
    :param state_dir: the run's resumable state, beside the outputs (not one: Snakemake must not
        delete it; it records the run's key, and a run resumes only its own state).
    :param policy_out: the trained policy's checkpoint (the stage writes the outputs; None when
        the trainer runs on its own).
    :param progress_out: the per-rollout progress table.
    :param evaluations_out: the held-out evaluations during training (the learning curve).
    :param threads: worker processes of a subproc vec env.
    :param eval_envs: envs stepped together in the evaluations.
    :param checkpoint_every: env steps between resumable checkpoints.
    :param timeout_ms: the time limit on each env call.
    """

    STAGE: ClassVar[str] = "rl"
    TASK_CODE: ClassVar[bool] = True
    arm: str = result(source="wildcards")
    run_seed: int = result(source="wildcards", key="seed", of=_int)
    seed: int = _SEED
    task: TaskConfig = result(lambda v, wc: v.env, of=_task)
    policy: PolicyConfig = result(
        lambda v, wc: v.config["policy"], of=lambda x, raw: PolicyConfig.of(x)
    )
    rl: RLConfig = result(
        lambda v, wc: groups.arm_rl_config(v.config["rl"], wc.arm),
        of=lambda x, raw: RLConfig.of(x),
    )
    clip_obs: float = result(lambda v, wc: v.config["bc"]["clip_obs"])
    eval_episodes: int = result(lambda v, wc: v.evaluate.during_training)
    demos: str = path()
    clone: str | None = path(default=None, key="bc")
    state_dir: str = path(
        lambda v, wc: f"{names.RLRun(wc.arm, int(wc.seed)).dir(wc.root)}/state",
        source="params",
    )
    policy_out: str | None = path(default=None, source="output", key="policy")
    progress_out: str | None = path(default=None, source="output", key="progress")
    evaluations_out: str | None = path(default=None, source="output", key="evaluations")
    threads: int = speed(source="threads")
    eval_envs: int = speed(lambda v, wc: v.evaluate.n_envs)
    checkpoint_every: int = speed(lambda v, wc: v.config["rl"]["checkpoint_every"])
    timeout_ms: int | None = speed(lambda v, wc: v.timeout_ms, default=None)

    def __post_init__(self) -> None:
        arm = arms.get(self.arm)
        uses_clone = arm.uses_clone(self.rl.to_dict())
        if uses_clone != (self.clone is not None):
            given = "given" if self.clone is not None else "not given"
            raise ValueError(
                f"the {arm.name} arm's job: the clone is {given}, but the arm "
                f"{'needs' if uses_clone else 'does not use'} it with this config"
            )

    @property
    def run(self) -> names.RLRun:
        """The run's name and directory."""
        return names.RLRun(self.arm, self.run_seed)

    def run_name(self) -> str:
        return self.run.name


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluateJob:
    """One policy (the expert, the clone or an RL run) on the held-out tracks (rule evaluate).

    :param policy: the policy's name (``expert``, ``bc`` or ``rl-<arm>-seed<s>``).
    :param task: the env, with its expert for the expert's evaluation (a learned policy's
        network comes from its checkpoint).
    :param episodes: held-out episodes.
    :param seed: the workflow's base seed (the held-out tracks' seeds derive from it).
    :param checkpoint: a learned policy's checkpoint (None for the expert).
    :param demos: the dataset the policy was trained on (None for the expert).
    :param out: the evaluation record.
    :param envs: envs stepped together.
    :param timeout_ms: the time limit on each env or expert call.
    """

    STAGE: ClassVar[str] = "evaluate"
    TASK_CODE: ClassVar[bool] = True
    policy: str = result(source="wildcards")
    task: TaskConfig = result(
        lambda v, wc: v.task if wc.policy == names.EXPERT else v.env, of=_task
    )
    episodes: int = result(lambda v, wc: v.evaluate.episodes)
    seed: int = _SEED
    checkpoint: str | None = path(default=None)
    demos: str | None = path(default=None)
    out: str = path(source="output")
    envs: int = speed(lambda v, wc: v.evaluate.n_envs)
    timeout_ms: int = _TIMEOUT

    def run_name(self) -> str:
        return f"eval-{self.policy}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SummarizeJob:
    """A variant's comparison across policies and RL seeds (rule summarize).

    :param variant: the config variant's name (``base`` for the base config).
    :param bootstrap_reps: bootstrap resamples of each interval.
    :param confidence: the intervals' confidence level.
    :param seed: the workflow's base seed (the bootstrap's stream derives from it).
    :param curve_tracks: the held-out tracks the RL learning curves were evaluated on.
    :param curve_runs: the RL run of each of ``curves`` and ``progress``, in their order.
    :param budgets: env steps per run of each arm (its algorithm's budget).
    :param arm_looks: each arm's label and colour, as the tables show them.
    :param evaluations: every policy's evaluation record.
    :param curves: each RL run's held-out evaluations during training.
    :param progress: each RL run's progress table (its training seconds, wall and CPU).
    :param figures: the figures summary.md links to, by key of :data:`names.SUMMARY_FIGURES`.
    """

    STAGE: ClassVar[str] = "summarize"
    TASK_CODE: ClassVar[bool] = False
    variant: str = result(lambda v, wc: v.name)
    bootstrap_reps: int = result(lambda v, wc: v.evaluate.bootstrap_reps)
    confidence: float = result(lambda v, wc: v.evaluate.confidence)
    seed: int = _SEED
    curve_tracks: int = result(lambda v, wc: v.evaluate.during_training)
    curve_runs: list[str] = result(lambda v, wc: [run.name for run in v.runs])
    budgets: Mapping[str, int] = result(lambda v, wc: v.budgets)
    arm_looks: Mapping[str, list[str]] = result(lambda v, wc: v.arm_looks)
    evaluations: list[str] = path()
    curves: list[str] = path()
    progress: list[str] = path()
    figures: Mapping[str, str] = path(
        lambda v, wc: {k: f"{v.report}/{p}" for k, p in names.SUMMARY_FIGURES.items()},
        source="params",
    )
    summary_json: str = path(source="output")
    summary_md: str = path(source="output")
    policies: str = path(source="output")
    improvement: str = path(source="output")
    runs: str = path(source="output")
    episodes: str = path(source="output")

    def run_name(self) -> str:
        return "summarize"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompareJob:
    """Every config variant against the base, per policy group (rule compare_variants).

    :param overrides: each variant, the base first, with its overrides as declared.
    :param progress_runs: the ``[variant, policy]`` of each of ``progress``, in their order.
    :param bootstrap_reps: bootstrap resamples of each interval (the base's setting).
    :param confidence: the intervals' confidence level (the base's).
    :param seed: the workflow's base seed.
    :param arm_looks: each arm's label and colour.
    :param summaries: each variant's summary.json, in the order of ``overrides``.
    :param episodes: each variant's episodes.csv, in the same order.
    :param progress: each variant's RL runs' progress tables (their wall time).
    :param figure: the figure variants.md links to.
    """

    STAGE: ClassVar[str] = "compare"
    TASK_CODE: ClassVar[bool] = False
    overrides: Mapping[str, Mapping[str, Any]] = result(lambda plan, wc: plan.overrides())
    progress_runs: list[list[str]] = result(
        lambda plan, wc: [[n, run.name] for n, v in plan.variants.items() for run in v.runs]
    )
    bootstrap_reps: int = result(lambda plan, wc: plan.base.evaluate.bootstrap_reps)
    confidence: float = result(lambda plan, wc: plan.base.evaluate.confidence)
    seed: int = result(lambda plan, wc: plan.base.config["seed"])
    arm_looks: Mapping[str, list[str]] = result(lambda plan, wc: plan.arm_looks())
    summaries: list[str] = path()
    episodes: list[str] = path()
    progress: list[str] = path()
    figure: str = path(lambda plan, wc: f"{plan.report}/plots/variants.png", source="params")
    variants_json: str = path(source="output")
    variants_md: str = path(source="output")

    def run_name(self) -> str:
        return "compare-variants"


SPECS: dict[str, type] = {
    "collect_shard": CollectJob,
    "merge_demos": MergeJob,
    "train_bc": BCJob,
    "train_rl": RLJob,
    "evaluate": EvaluateJob,
    "summarize": SummarizeJob,
    "compare_variants": CompareJob,
}
"""Each heavy rule's spec, by rule name (the stage module of the same name runs it)."""
