"""The workflow's plan: built once from the validated config, everything the rules ask.

:class:`Plan` resolves every variant (schema defaults filled, checked, its task probed, the
``auto`` and ``all`` values turned into what runs: what every job reads, and what the MLflow
parent run records; Snakemake's ``config`` stays as the user wrote it), and answers, per
variant and job (:mod:`demo2rl.workflow.graph`), where the job's output lies (its owner's
results: a job shared between variants runs once), what it reads, and what the invocation
builds in the end. It needs no Snakemake: rules/common.smk builds one and the rules
call into it; tests build one from a config.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import types
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from demo2rl import arms, config, names, provenance, spec_fields, tasks
from demo2rl.demos import sources
from demo2rl.envs import capabilities
from demo2rl.learning import vec_env_choice
from demo2rl.specs import registry
from demo2rl.workflow import graph, probe, variants

_fingerprint = functools.cache(provenance.code_fingerprint)


def _at(cfg: Mapping[str, Any], key: str) -> Any:
    """The value of the dotted ``key`` in ``cfg``."""
    for part in key.split("."):
        cfg = cfg[part]
    return cfg


def readers(leaves: Iterable[str]) -> dict[str, list[tuple[str, dict[str, str]]]]:
    """Per config key (``leaves``: the schema's leaf keys), the jobs whose params read it, as
    (rule, wildcards) selectors (a job matches where its wildcards include them), from what the
    job specs' fields read (:class:`demo2rl.spec_fields.Reads`): a section read whole is every
    key under it; the ``rl`` section read per arm is each key by the arms that read it
    (:meth:`demo2rl.arms.Arm.reads_rl`; by every job where all arms do), so that no
    declaration names an arm. What a change of a key reruns (docs/reruns.md, the rerun tests),
    besides the jobs downstream."""
    leaves = list(leaves)
    out: dict[str, list[tuple[str, dict[str, str]]]] = {key: [] for key in leaves}

    def add(key: str, rule: str, want: dict[str, str]) -> None:
        if (rule, want) not in out[key]:
            out[key].append((rule, want))

    for rule, spec in registry.SPECS.items():
        for field in spec_fields.fields_from(spec, "params", only="result"):
            reads = spec_fields.reads(field)
            for name, want in reads.selected():
                left_out = [f"{name}.{key}" for key in reads.omit]
                for key in leaves:
                    if _under(key, name) and not any(_under(key, o) for o in left_out):
                        for arm_want in _arm_selectors(key) if reads.per_arm else [{}]:
                            add(key, rule, want | arm_want)
    for rule in sorted(r for r, plot in registry.PLOTS.items() if plot.shows_arms):
        add("rl.arms", rule, {})
    return out


def _last_part(key: str) -> str:
    return key.rpartition(".")[2]


def _under(key: str, name: str) -> bool:
    return key == name or key.startswith(f"{name}.")


def _arm_selectors(key: str) -> list[dict[str, str]]:
    """The jobs of a key of ``rl`` that a run reads per arm: every run's where every arm reads
    it, else each arm's that does."""
    section = key.split(".")[1]
    by = [a.name for a in arms.REGISTRY.values() if a.reads_rl(section)]
    return [{}] if len(by) == len(arms.REGISTRY) else [{"arm": a} for a in by]


class PlanError(ValueError):
    """A config the workflow cannot run, said as the error a user reads (``Invalid config: ``
    follows in front)."""


@functools.cache
def _probed(task_json: str) -> probe.Probe:
    """The task probe (one env batch, one reset, a few steps, one expert call), once per distinct
    task, encoder and arm choice among the variants."""
    return probe.probe_task(json.loads(task_json))


def resolve(
    name: str, cfg: dict[str, Any], gpus: int | None = None
) -> tuple[dict[str, Any], sources.Source | None]:
    """A variant's config as its jobs read it: checked, its task probed (a bad key, a space the
    workflow cannot use or an expert that does not fit fails here, before any job, naming the
    variant), the `auto` and `all` values resolved as they run, keys sorted; and the dataset
    ``collect.source`` names, resolved once (None: the expert's demonstrations)."""
    cfg = config.without_expert(cfg)
    source = None
    try:
        if cfg["collect"]["source"] != config.EXPERT_SOURCE:
            source = sources.resolve(cfg["collect"]["source"])
        if cfg["task"]["env_id"] == sources.FROM_DATASET:  # the imported dataset's env
            env_id, env_kwargs = sources.env_of(source)
            cfg["task"]["env_id"] = env_id
            cfg["task"]["env_kwargs"] = env_kwargs | cfg["task"]["env_kwargs"]
        config.check(cfg)
        probe_input = {
            "task": cfg["task"],
            "policy": {"cnn": cfg["policy"]["cnn"]},
            "rl": {k: cfg["rl"][k] for k in ("arms", "vec_env")},
        }
        found = _probed(json.dumps(probe_input, sort_keys=True))
        if source is not None:  # a dataset to import: its spaces are the task's
            sources.check_spaces(source, found.observation_space, found.action_space)
    except config.ConfigError as err:
        where = "" if name == names.BASE_VARIANT else f"variant {name!r}: "
        raise PlanError(f"{where}{err}") from None
    # `rl.arms: all`: every arm that applies to the task (the probe says which, and logs why an
    # arm is left out); an explicit list is checked by the probe and kept as it is
    cfg["rl"]["arms"] = list(found.arms)
    # `auto` as it runs (native or dummy), so that spelling out the same choice reruns nothing
    cfg["rl"]["vec_env"] = vec_env_choice.resolve_vec_env(
        cfg["rl"]["vec_env"], cfg["task"]["env_id"], cfg["task"]["frame_stack"]
    )
    # `auto` devices as they run (one policy for BC and RL, config.device): CUDA for a CNN
    # policy where the invocation has GPUs (the job then requests the `gpu` resource)
    for section in ("bc", "rl"):
        cfg[section]["device"] = config.device(cfg[section]["device"], found.images, gpus)
    # params compare as text: sort the config's keys, so that their order in a file never counts
    return config.canonical(cfg), source


def variant_configs(
    base: Mapping[str, Any],
    leaves: Mapping[str, Mapping[str, Any]],
    schema: Path = config.SCHEMA,
    gpus: int | None = None,
) -> dict[str, tuple[dict[str, Any], sources.Source | None]]:
    """The base config (schema-validated already) and every variant's, each validated by the
    schema and resolved (:func:`resolve`: with its dataset to import), the base first."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    plain = {k: v for k, v in base.items() if k != "variants"}
    configs = {names.BASE_VARIANT: resolve(names.BASE_VARIANT, copy.deepcopy(plain), gpus)}
    try:
        declared = variants.declared(base["variants"])
        for name, overrides in declared.items():
            variants.check_overrides(name, overrides, leaves)
    except config.ConfigError as err:
        raise PlanError(str(err)) from None
    for name, overrides in declared.items():
        merged = variants.merge(plain, overrides)
        try:
            validate(merged, str(schema))
        except WorkflowError as err:
            raise PlanError(f"variant {name!r}: {err}") from None
        configs[name] = resolve(name, merged, gpus)
    return configs


class Variant:
    """One variant of the invocation as the rules read it: its config's sections and the
    values derived from them (the base config is the variant `base`)."""

    def __init__(
        self, name: str, cfg: dict[str, Any], source: sources.Source | None, results: str
    ) -> None:
        self.name = name
        self.config = cfg
        self.root = names.variant_root(results, name)
        self.rounds = list(range(1, cfg["bc"]["dagger"]["rounds"] + 1))
        """The DAgger rounds (none without DAgger)."""
        self.expert = cfg["task"]["expert"] is not None
        """Whether the task has an expert to call (else the dataset's episodes are the
        summary's reference)."""
        self.source = source
        """The dataset ``collect.source`` names, as :func:`resolve` found it (None: collected)."""
        self.imported = source is not None
        """Whether the demonstrations are imported rather than collected."""
        self.arms: list[str] = cfg["rl"]["arms"]
        self.runs = names.rl_runs(self.arms, cfg["rl"]["seeds"])
        policies = names.policy_names(self.arms, cfg["rl"]["seeds"], len(self.rounds))
        self.policies = policies if self.expert else [p for p in policies if p != names.EXPERT]
        """The evaluated policies (the expert's only where there is one)."""
        self.budgets = {arm: arms.get(arm).budget(cfg["rl"]) for arm in self.arms}
        """Env steps per run of each arm (its algorithm's budget)."""
        self.arm_looks = {arm.name: [arm.label, arm.color] for arm in map(arms.get, self.arms)}
        """How tables and figures show each arm: a param of the rules that show them (code
        fingerprints leave labels and colours out, so that editing one retrains nothing)."""
        self.timeout_ms = max(1, round(1000 * cfg["task"]["timeout_s"]))
        """`task.timeout_s` in integer milliseconds, the resource the rules take (Snakemake
        would round a float resource to whole seconds)."""
        self.task_code = tuple(
            tasks.entry_point_modules(
                cfg["task"]["env_id"], (cfg["task"]["expert"] or {}).get("entry_point")
            )
        )
        """The modules of the task's env and expert (a user's own code, too)."""
        shown = capabilities.of(cfg["task"]["env_id"])  # (task_code imported the env's module)
        own = shown.sb3_vec_env if cfg["rl"]["vec_env"] == "native" else None
        self.vec_env_code = (own.partition(":")[0],) if own and ":" in own else ()
        """The module of the task's own VecEnv, where its RL runs step it (``rl.vec_env``
        native)."""
        self.replayed = shown.replayed
        """Whether its report replays held-out episodes (:mod:`demo2rl.envs.capabilities`)."""
        self.metric_labels = {name: metric.label for name, metric in shown.metrics.items()}
        """Its task's per-episode metrics and their labels: a param of the rule summarize (code
        fingerprints leave labels out, so that editing one retabulates and reruns nothing
        else)."""
        self.report = f"{self.root}/report"
        """Its report directory."""
        self.run_names = [run.name for run in self.runs]
        self.summary_figures = {k: f"{self.report}/{p}" for k, p in names.SUMMARY_FIGURES.items()}
        self.minari_dataset_id = names.minari_dataset_id(cfg["experiment"], name)
        """The id its dataset is exported under."""

    # what the job specs derive from the config (their fields' ``derive``)

    @staticmethod
    def state_dir(wildcards: Any) -> str:
        """An RL run's resumable state, in its run directory."""
        return f"{names.RLRun(wildcards.arm, int(wildcards.seed)).dir(wildcards.root)}/state"

    @property
    def import_source(self) -> dict[str, str]:
        """The dataset ``collect.source`` names: its kind, and its file or directory."""
        if self.source is None:
            raise ValueError(f"variant {self.name!r} collects its dataset: it imports none")
        return self.source.param()

    def gpus(self, section: str) -> int:
        """The standard `gpu` resource of a job that trains on ``section``'s device (``bc``,
        ``rl``): 1 when it is a CUDA device."""
        return 1 if str(self.config[section]["device"]).startswith("cuda") else 0


class Plan:
    """The invocation: every variant (the base first), which variant's job each job is, and the
    paths the rules read and write.

    :param cfg: the config as Snakemake holds it (validated by the schema, defaults filled).
    :param schema: the config schema (the keys a variant may override).
    :param gpus: the ``gpu`` resource the invocation declares, if any (where ``auto`` devices
        may pick CUDA: :func:`demo2rl.config.device`).
    """

    def __init__(
        self, cfg: Mapping[str, Any], schema: Path = config.SCHEMA, gpus: int | None = None
    ) -> None:
        leaves = variants.schema_leaves(yaml.safe_load(Path(schema).read_text()))
        self.results = f"results/{cfg['experiment']}"
        """The experiment's results directory (the base variant's)."""
        self.variants = {
            name: Variant(name, resolved, source, self.results)
            for name, (resolved, source) in variant_configs(cfg, leaves, schema, gpus).items()
        }
        """Every variant, by name, the base first."""
        self.base = self.variants[names.BASE_VARIANT]
        self.declared = cfg["variants"]
        """The ``variants`` section as the config declares it."""
        self._by_root = {v.root: v for v in self.variants.values()}
        self.sharing = variants.Sharing(
            {name: v.config for name, v in self.variants.items()}, self.result_params
        )
        self.arms = sorted({arm for v in self.variants.values() for arm in v.arms})
        """Every arm some variant runs."""
        self.report = f"{self.results}/report"
        """The comparison across variants (with more than one)."""
        self.tracking = config.TrackingConfig.of(cfg["tracking"])
        """How the jobs and the MLflow hooks treat tracking (every rule's param ``tracking``: a
        dataclass, which Snakemake leaves out of its params rerun trigger; it cannot change a
        result)."""

    def config(self) -> dict[str, Any]:
        """The base config as its jobs read it, with the variants as declared (what the MLflow
        parent run records)."""
        return config.canonical({**self.base.config, "variants": self.declared})

    @property
    def overrides(self) -> dict[str, dict[str, Any]]:
        """Every variant's overrides as declared, in order (the base first, with none)."""
        return {names.BASE_VARIANT: {}} | variants.declared(config.canonical(self.declared))

    @property
    def progress_runs(self) -> list[list[str]]:
        """Every variant's RL runs, as [variant, run], in order."""
        return [[n, run.name] for n, v in self.variants.items() for run in v.runs]

    @property
    def variants_figure(self) -> str:
        """The figure of the comparison across variants."""
        return f"{self.report}/plots/variants.png"

    def at(self, root: str) -> Variant:
        """The variant whose results directory is ``root`` (a job's ``root`` wildcard)."""
        return self._by_root[root]

    def owner_root(self, variant: Variant, job: graph.Job) -> str:
        """Where ``variant``'s job ``job`` writes: the results of the first variant with the same
        job (:class:`demo2rl.workflow.variants.Sharing`), so that a job is never run twice."""
        return self.variants[self.sharing.owner(variant.name, *job)].root

    def output(self, variant: Variant, job: graph.Job, file: str | None = None) -> str:
        """The main output of ``variant``'s job ``job`` (or its output ``file``, one of its
        kind's :attr:`~demo2rl.workflow.graph.JobKind.files`), where its owner writes it."""
        return graph.kind(job).output_of(self.owner_root(variant, job), job[1:], file)

    def inputs(self, variant: Variant, job: graph.Job) -> dict[str, str | list[str]]:
        """The outputs ``variant``'s job ``job`` reads, by the rule's input name."""
        needed = graph.kind(job).inputs(variant.config, job[1:])
        return {
            name: (
                [self.output(variant, j) for j in upstream]
                if isinstance(upstream, list)
                else self.output(variant, upstream)
            )
            for name, upstream in needed.items()
        }

    def summary_inputs(self, variant: Variant) -> dict[str, list[str]]:
        """What ``variant``'s summary reads: every policy's evaluation, each RL run's learning
        curve and progress table (wherever their owners wrote them), each DAgger round's clone
        metrics (its expert calls), and without an expert the dataset (its episodes are the
        reference)."""
        runs = [("rl", run.arm, str(run.seed)) for run in variant.runs]
        return {
            "evaluations": [self.output(variant, ("evaluation", p)) for p in variant.policies],
            "curves": [self.output(variant, run, "curve") for run in runs],
            "progress": [self.output(variant, run, "progress") for run in runs],
            "rounds": [self.output(variant, ("round", str(r)), "metrics") for r in variant.rounds],
            "reference": [] if variant.expert else [self.output(variant, ("demos",))],
        }

    def comparison_inputs(self) -> dict[str, list[str]]:
        """What the comparison across variants reads: each variant's summary and episode table,
        and every RL run's progress table (:attr:`specs.CompareJob.progress_runs` order)."""
        reports = [v.report for v in self.variants.values()]
        return {
            "summaries": [f"{r}/summary.json" for r in reports],
            "episodes": [f"{r}/episodes.csv" for r in reports],
            "progress": [
                p for v in self.variants.values() for p in self.summary_inputs(v)["progress"]
            ],
        }

    def subject(self, wildcards: Any) -> Variant | Plan:
        """What a job's spec fields derive from: the variant whose results its ``root`` wildcard
        is, or for a job across the variants (no ``root``), the plan."""
        root = getattr(wildcards, "root", None)
        return self if root is None else self.at(root)

    def params(self, rule: str) -> dict[str, Any]:
        """The params of ``rule``: its spec's result fields (and params-passed paths), each as an
        input function of the job's wildcards; for a plot that shows arms, their ``arm_looks``
        (:attr:`~demo2rl.specs.registry.Plot.shows_arms`); ``code``, the fingerprint of the code
        the rule runs (editing that code reruns it); and :attr:`tracking`."""
        spec = registry.SPECS.get(rule)
        fields = spec_fields.fields_from(spec, "params") if spec else []
        out = {field.name: self._per_job(field) for field in fields}
        if rule in registry.PLOTS and registry.PLOTS[rule].shows_arms:
            out["arm_looks"] = lambda wc: self.subject(wc).arm_looks
        out["code"] = lambda wc: _fingerprint(*self.code_roots(rule, self.subject(wc)))
        return out | {"tracking": self.tracking}

    def resources(self, rule: str) -> dict[str, Any]:
        """The resources of ``rule`` that its spec's speed fields are (they rerun nothing)."""
        fields = spec_fields.fields_from(registry.SPECS[rule], "resources")
        return {field.name: self._per_job(field) for field in fields}

    def _per_job(self, field: Any) -> Any:
        return lambda wildcards: self.value(field, self.subject(wildcards), wildcards)

    @staticmethod
    def value(field: Any, subject: Variant | Plan, wildcards: Any) -> Any:
        """What a job of ``subject`` with ``wildcards`` is given for a spec field, by what the
        field reads (:class:`demo2rl.spec_fields.Reads`)."""
        reads = spec_fields.reads(field)
        if reads.derive:
            derived = getattr(subject, reads.derive)
            return derived(wildcards) if callable(derived) else derived
        cfg = subject.config if isinstance(subject, Variant) else subject.base.config
        if reads.per_arm:
            return arms.get(wildcards.arm).rl_slice(cfg["rl"])
        keys = [
            key
            for key, want in reads.selected()
            if all(getattr(wildcards, k, None) == v for k, v in want.items())
        ]
        if len(reads.keys) > 1:  # (in the config's order: its keys sorted)
            return {_last_part(k): _at(cfg, k) for k in sorted(keys, key=_last_part)}
        if not keys:  # (one key, which this job's wildcards do not select)
            return None
        value = _at(cfg, keys[0])
        return {k: v for k, v in value.items() if k not in reads.omit} if reads.omit else value

    def result_params(
        self, variant: str, rule: str, wildcards: Mapping[str, str]
    ) -> dict[str, Any]:
        """What can change the result of ``variant``'s job of heavy rule ``rule`` with
        ``wildcards`` (its ``root`` aside): its params' result fields and the modules whose code
        it runs (:attr:`variants.Sharing` keys on them)."""
        v = self.variants[variant]
        wc = types.SimpleNamespace(root=v.root, **wildcards)
        fields = spec_fields.fields_from(registry.SPECS[rule], "params", only="result")
        return {f.name: self.value(f, v, wc) for f in fields} | {"code": self.code_roots(rule, v)}

    @staticmethod
    def code_roots(rule: str, subject: Variant | Plan) -> tuple[str, ...]:
        """The modules whose code ``rule`` runs, for a job of ``subject``: its stage; for a rule
        that runs the task (:func:`~demo2rl.specs.registry.runs_task_code`) the modules of the
        variant's env and expert, and for one that steps its own VecEnv
        (:func:`~demo2rl.specs.registry.runs_vec_env_code`) that one's; the fingerprint follows
        their imports."""
        roots = (registry.stage_module(rule),)
        if registry.runs_task_code(rule):
            roots += subject.task_code
        if registry.runs_vec_env_code(rule):
            roots += subject.vec_env_code
        return roots

    @property
    def arm_looks(self) -> dict[str, list[str]]:
        """Every arm's label and colour, over the variants."""
        return {arm: look for v in self.variants.values() for arm, look in v.arm_looks.items()}

    def report_targets(self, variant: Variant) -> list[str]:
        """What ``variant``'s report is (the clone's loss plot is its clone's)."""
        racing = names.RACING_FIGURES.values() if variant.replayed else ()
        return [
            f"{variant.report}/summary.md",
            f"{variant.report}/summary.json",
            f"{self.owner_root(variant, ('clone',))}/bc/loss.png",
            *variant.summary_figures.values(),
            *(f"{variant.report}/{path}" for path in racing),
        ]

    def final_targets(self) -> list[str]:
        """What the invocation builds: every variant's dataset, clone, RL runs and report, and
        with more than one variant their comparison; where a variant shares a job with an
        earlier one, that job's files."""
        targets: list[str] = []
        for v in self.variants.values():
            targets += [self.output(v, ("demos",)), self.output(v, ("clone",))]
            targets += [self.output(v, ("round", str(r))) for r in v.rounds]
            targets += [self.output(v, ("rl", run.arm, str(run.seed))) for run in v.runs]
        for v in self.variants.values():
            targets += self.report_targets(v)
        if len(self.variants) > 1:
            targets += [f"{self.report}/variants.md", f"{self.report}/variants.json"]
            targets += [self.variants_figure]
        return targets

    @staticmethod
    def import_files(variant: Variant) -> list[str]:
        """What ``variant``'s import reads, file by file: the dataset ``collect.source`` names
        (its file, or every file of a Minari dataset's directory), so that a change to any of
        them reruns the import (a directory's own time does not change with its files')."""
        return [] if variant.source is None else [str(p) for p in sources.files(variant.source)]

    def roots(self, imported: bool) -> str:
        """A ``root`` wildcard constraint: the results directories of the variants whose
        demonstrations are imported (``imported``) or collected, so that exactly one of the
        rules that write a dataset (merge_demos, import_demos) matches each (none: a pattern
        that matches nothing)."""
        roots = [re.escape(v.root) for v in self.variants.values() if v.imported == imported]
        return "|".join(roots) or "(?!)"

    def export_targets(self) -> list[str]:
        """Every variant's dataset exported as a Minari dataset (the ``export`` target)."""
        return [
            f"{self.owner_root(v, ('demos',))}/{names.MINARI_DIR}" for v in self.variants.values()
        ]
