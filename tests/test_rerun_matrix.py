"""The rerun matrix: which jobs every config key and every library module reruns, checked against
Snakemake's own plan for each, one change at a time, on a finished run of the test config.

What a change should rerun, as a reader can see it:

* config keys: the keys the job specs' fields declare they read, per leaf key of
  config/schema.yaml (:func:`demo2rl.workflow.plan.readers`: rules whose params hold it;
  ``train_rl`` on a key of ``rl``: the runs of the arms that read it);
* library modules: the modules whose code each rule runs, from the modules it starts in (the
  Plan's ``code_roots``) through the imports their bytecode executes and their declarations
  about their fingerprint (:data:`demo2rl.provenance.DECLARATIONS`), found by
  tests/import_oracle.py, not by provenance's own walk; from them :data:`MODULES` derives the
  rules whose code runs each module, and so whose fingerprint must cover it
  (tests/test_fingerprint_coverage.py checks :func:`demo2rl.provenance.code_modules` against
  the same, without Snakemake).

From that the test derives the expected jobs: the readers' jobs (a selector ``rule[wildcard=value]``
names only those jobs), the jobs that did not exist before the change (a new seed, a new
experiment), and every job downstream of either in the changed workflow. Snakemake's plan is
``snakemake --detailed-summary``: per output its rule, inputs and whether an update is pending (the
same decision a dry run prints; one case checks that they agree). Every key of the schema and
every module of the library has a case, so ones added later are covered automatically: a key
that no spec declares read is expected to rerun nothing.

A module's case is planned by Snakemake for one module of each set of rules whose code runs it
(a statement appended to that module in a copy of the library): that plan shows how an edit's
changed fingerprints rerun their rules and what lies downstream. The other modules of the same
set share that plan, since an edit changes a rule's fingerprint exactly when the module is among
the modules the fingerprint hashes, and those are the modules the rule's code runs
(:func:`demo2rl.provenance.code_modules` against :func:`fingerprint_coverage`'s
tests/import_oracle.py, rule by rule: tests/test_fingerprint_coverage.py): about 20 plans
instead of one per module, each a Snakemake start of 1-2 CPU-seconds.

The matrix it finds is also the table in docs/reruns.md (between the ``rerun-matrix`` markers); a
difference fails the test with the diff. The test never writes the repository's files: ``make
reruns-doc`` runs it with :data:`DOC_OUT` set, and copies the page it writes there over the doc.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import import_oracle
import pytest
import warm_snakemake
import yaml
from conftest import REPO, TEST_CONFIG, checked, run_call, snakemake, snakemake_call
from snakemake.utils import validate
from warm_snakemake import Call, warm_pool

from demo2rl import names
from demo2rl.config import load as load_config
from demo2rl.specs import registry
from demo2rl.workflow import plan as plan_module
from demo2rl.workflow import variants
from demo2rl.workflow.plan import Plan

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("rerun-matrix")]
SCHEMA = REPO / "config" / "schema.yaml"
SRC = REPO / "src" / "demo2rl"
RULE_FILES = sorted((REPO / "rules").glob("*.smk"))
TESTS = REPO / "tests"
DOC = REPO / "docs" / "reruns.md"
DOC_OUT = os.environ.get("DEMO2RL_RERUN_DOC_OUT")
"""Where the test writes docs/reruns.md with the matrix it found, when set (``make reruns-doc``)."""

RULES = tuple(rule for rule in registry.RULES if rule != "export_minari")
"""The rules of a finished run (every rule that runs a stage but the export, which only its own
target builds)."""
SPECIAL_VALUES: dict[str, Any] = {
    "experiment": "test-racing-renamed",
    "task.env_id": "demo2rl.envs:Racing-v0",  # the same env, registered by importing the module
    "task.env_kwargs": {"max_steps": 151},
    "task.expert.entry_point": "user_expert:careful_pursuit",  # a user's module (tests/)
    "task.expert.kwargs": {"margin": 0.6},
    "task.expert.input": "info.state",  # Racing-v0's infos carry its state (camera or not)
    # a dataset to import instead of collecting: the finished run's first shard (it exists in
    # the run's directory, where the plan is made)
    "collect.source": "results/test-racing/demos/shard-0.h5",
    "policy.net_arch": [32, 32],
    "bc.device": "cuda",  # (auto is the CPU for the test config's MLP: the same run as cpu)
    "rl.device": "cuda",
    "rl.sac.ent_coef": 0.1,  # (auto is a string)
    "rl.sac.target_entropy": -3.0,
    "rl.sac.critic_net_arch": [16],
    "rl.sac.learning_rate": 0.0003,  # (the default is a schedule: lin_0.0006)
    # whole gradient steps per vector step: 0.25 x 8 envs, and 0.125 x 16
    "rl.sac.updates_per_step": 0.25,
    "rl.sac.n_envs": 16,
    "rl.seeds": [0, 1],
    "rl.arms": ["bc", "residual", "scratch"],  # an arm fewer: only what compares the arms reruns
    "rl.vec_env": "dummy",  # (native is what auto picks for Racing-v0: the same run)
    "task.max_episode_steps": 100,  # shorter than the test task's own 150-step episodes
    "task.timeout_s": 0.5,  # a fraction of a second: the limit is a resource (milliseconds)
    # a variant more (a grid of one): its own report, everything else the base's
    "variants.grid": {"evaluate.confidence": [0.9]},
    # (with n: 0, none drawn: nothing reruns)
    "variants.sample.ranges": {"evaluate.confidence": {"values": [0.9]}},
}
"""Changed values where the schema's type alone does not give a valid one."""


# --------------------------------------------------------------------------------------------
# the declarations


def schema_leaves(node: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, dict]]:
    """(dotted key, schema) of every leaf key of the config schema."""
    for name, sub in node.get("properties", {}).items():
        if "properties" in sub:
            yield from schema_leaves(sub, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", sub


def library_modules() -> list[str]:
    """Every module under src/demo2rl, dotted."""
    names = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def fingerprint_coverage(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """Library module -> the rules whose code runs it, for ``config``'s task: from the modules
    each rule starts in (the Plan's ``code_roots``, what its ``code`` param hashes), the modules
    their bytecode imports (tests/import_oracle.py, not provenance's own walk: the case of a
    module that the fingerprint misses expects reruns that Snakemake's plan lacks)."""
    plan = Plan(config)
    run = {rule: import_oracle.modules_run(*plan.code_roots(rule, plan.base)) for rule in RULES}
    return {m: [r for r in RULES if m in run[r]] for m in library_modules()}


MODULES = fingerprint_coverage(load_config(TEST_CONFIG))
"""Library module -> the rules whose code runs it (so whose code fingerprint must cover it), with
the test config's task (every module of the library; ``[]`` for one that no rule's fingerprint
is to cover, such as the tracking modules, which declare themselves ``RESULT_NEUTRAL``)."""


SCHEMA_DOC = yaml.safe_load(SCHEMA.read_text())
KEYS = dict(schema_leaves(SCHEMA_DOC))


def reads(rule: str, **wildcards: str) -> set[str]:
    """The config keys a job of ``rule`` with ``wildcards`` reads, as declared (the arms
    registered now)."""
    return {
        key
        for key, found in plan_module.readers(KEYS).items()
        if any(
            r == rule and all(wildcards.get(k) == v for k, v in want.items()) for r, want in found
        )
    }


READERS = plan_module.readers(KEYS)
"""Per key, the (rule, wildcards) of the jobs that read it (the built-in arms)."""


def test_every_module_has_a_case_and_every_reader_is_a_rule():
    assert sorted(MODULES) == sorted(library_modules()), "a case for every module of the library"
    assert MODULES["demo2rl.stages.train_rl"] == ["train_rl"]
    for key, found in READERS.items():
        for rule, _ in found:
            assert rule in RULES, f"{key}: unknown rule {rule!r}"


# --------------------------------------------------------------------------------------------
# Snakemake's plan


def plan_call(workdir: Path, config: Path, env: Mapping[str, str]) -> Call:
    """The call of ``snakemake --detailed-summary`` for the plan of ``config`` in ``workdir``."""
    return snakemake_call(
        workdir, "--configfile", str(config), "--detailed-summary", "--nolock", env=dict(env)
    )


def parse_plan(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    """output -> {rule, pending} from the output of ``--detailed-summary``."""
    rows = {}
    for line in checked(proc).stdout.splitlines():
        cols = line.split("\t")
        if len(cols) < 8 or cols[0] == "output_file":
            continue
        rows[cols[0]] = {"rule": cols[2], "pending": cols[-1].strip() == "update pending"}
    assert rows, f"no plan parsed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return rows


def jobs_call(workdir: Path, config: Path, env: Mapping[str, str]) -> Call:
    """The call of a forced dry run, which prints every job of the workflow as ``config``
    defines it."""
    return snakemake_call(
        workdir, "--configfile", str(config), "-n", "--forceall", "--nolock", env=dict(env)
    )


def parse_jobs(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    """output -> {rule, wildcards, inputs} of every job of a forced dry run."""
    out = dry_run_jobs(checked(proc).stdout + proc.stderr)
    assert out, f"no jobs parsed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return out


def plan(workdir: Path, config: Path, env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """output -> {rule, pending}: Snakemake's plan for ``config`` in ``workdir``."""
    return parse_plan(run_call(plan_call(workdir, config, env), check=False))


def dry_run_jobs(text: str) -> dict[str, dict[str, Any]]:
    """output -> {rule, wildcards, inputs} of each job a dry run printed (not rule all)."""
    out: dict[str, dict[str, Any]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", text):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        outputs = re.search(r"^\s+output: (.*)$", block, re.MULTILINE)
        if not (rule and outputs):
            continue
        found = re.search(r"^\s+wildcards: (.*)$", block, re.MULTILINE)
        inputs = re.search(r"^\s+input: (.*)$", block, re.MULTILINE)
        job = {
            "rule": rule[1],
            "wildcards": dict(p.split("=", 1) for p in found[1].split(", ")) if found else {},
            "inputs": [p.strip() for p in inputs[1].split(", ")] if inputs else [],
        }
        for path in outputs[1].split(", "):
            out[path.strip()] = job
    return out


def expected(
    dag: Mapping[str, dict],
    readers: Iterable[str | tuple[str, dict[str, str]]],
    base: set[str],
    keep: Iterable[str] = (),
) -> set[str]:
    """Outputs the declaration says must be remade: the readers' jobs (a reader: a rule, every
    job of it, or (rule, wildcards), the jobs it selects; but not those writing to the
    results directories ``keep``, the variants that set the key themselves), new jobs, and all
    that lies downstream of them in ``dag`` (the changed workflow's jobs)."""
    selectors = [(s, {}) if isinstance(s, str) else s for s in readers]
    keep = set(keep)
    todo = [
        out
        for out, job in dag.items()
        if out not in base
        or (
            job["wildcards"].get("root") not in keep
            and any(
                job["rule"] == rule and all(job["wildcards"].get(k) == v for k, v in want.items())
                for rule, want in selectors
            )
        )
    ]
    consumers: dict[str, list[str]] = {}
    for out, job in dag.items():
        for inp in job["inputs"]:
            consumers.setdefault(inp, []).append(out)
    done: set[str] = set()
    while todo:
        out = todo.pop()
        if out not in done:
            done.add(out)
            todo += consumers.get(out, [])
    return done


def rules_of(dag: Mapping[str, dict], outputs: set[str], base: set[str]) -> str:
    """A short text of the jobs behind ``outputs``: rule (and which of its jobs, if not all)."""
    if not outputs:
        return "nothing"
    per_rule: dict[str, set[str]] = {}
    totals: dict[str, set[str]] = {}
    for out, job in dag.items():
        wildcards = dict(job["wildcards"])
        root = wildcards.pop("root", None)
        variant = names.variant_of(root) if root else names.BASE_VARIANT
        if variant != names.BASE_VARIANT:
            wildcards = {"variant": variant, **wildcards}
        name = " ".join(f"{k}={v}" for k, v in wildcards.items())
        name = name or (names.BASE_VARIANT if root else job["rule"])
        name = name if out in base else "added"
        totals.setdefault(job["rule"], set()).add(name)
        if out in outputs:
            per_rule.setdefault(job["rule"], set()).add(name)
    parts = []
    for rule in RULES:
        if rule not in per_rule:
            continue
        jobs = per_rule[rule]
        parts.append(rule if jobs == totals[rule] else f"{rule} ({', '.join(sorted(jobs))})")
    return ", ".join(parts)


# --------------------------------------------------------------------------------------------
# the cases


def effective_config() -> dict[str, Any]:
    """The test config with the schema's defaults filled in, as the workflow sees it."""
    config = yaml.safe_load(TEST_CONFIG.read_text())
    validate(config, str(SCHEMA))
    return config


def variant_keys(config: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """``variants.<name>.<key>`` -> (variant, config key) for every key a named variant of
    ``config`` sets."""
    named = {k: v for k, v in config["variants"].items() if k not in variants.SHORTHANDS}
    return {
        f"variants.{name}.{key}": (name, key)
        for name, overrides in named.items()
        for key in variants.flatten(overrides, KEYS)
    }


def overriding(config: Mapping[str, Any], key: str) -> list[str]:
    """The results directories of the named variants of ``config`` that set ``key``."""
    results = f"results/{config['experiment']}"
    return [
        names.variant_root(results, name) for name, k in variant_keys(config).values() if k == key
    ]


SPECIAL_CONFIGS: dict[str, Any] = {
    # a sample of one (ranges to draw from): a variant more, whose own job is its report
    "variants.sample.n": lambda c: with_value(
        with_value(c, "variants.sample.n", 1),
        "variants.sample.ranges",
        {"evaluate.confidence": {"values": [0.9]}},
    ),
}
"""Changed configs where a key's new value needs another key changed with it."""


def changed_value(key: str, value: Any, spec: Mapping[str, Any]) -> Any:
    """A valid value of ``key`` different from ``value``."""
    if key in SPECIAL_VALUES:
        return SPECIAL_VALUES[key]
    if "enum" in spec:
        options = spec["enum"]
        return options[(options.index(value) + 1) % len(options)]
    if isinstance(value, bool):
        return not value
    if value is None:
        return 0.05
    if isinstance(value, int):
        return value - 1 if "maximum" in spec and value + 1 > spec["maximum"] else value + 1
    if isinstance(value, float):
        return value * 0.9 if value else 0.1
    if isinstance(value, str) and "pattern" in spec:
        for candidate in ("cpu", "auto"):
            if candidate != value and re.fullmatch(spec["pattern"], candidate):
                return candidate
    raise AssertionError(f"no changed value for {key}={value!r}: add one to SPECIAL_VALUES")


def with_value(config: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(config)
    *parents, last = key.split(".")
    node = out
    for part in parents:
        node = node[part]
    assert node[last] != value
    node[last] = value
    return out


@pytest.fixture(scope="module")
def matrix(test_workflow: Path, tmp_path_factory) -> dict[str, dict[str, str]]:
    """Run every case; returns {"keys": {key: Case}, "modules": {module: Case}, "planned":
    {module whose edit Snakemake planned: its Case}}.

    The plans are Snakemake's own (its command line), asked for in forks of a process that has
    imported Snakemake once (tests/warm_snakemake.py): a fresh process per plan would spend
    two thirds of the case importing it."""
    root = tmp_path_factory.mktemp("matrix")
    env = {"PYTHONPATH": str(TESTS)}
    base_config = root / "base.yaml"
    base_config.write_text(yaml.safe_dump(effective_config()))

    cases = []  # (kind, name, config path, env, readers, results directories not to rerun)
    config = effective_config()
    for key, spec in KEYS.items():
        if "const" in spec:  # one valid value (the config's format version): nothing to change
            continue
        value = config
        for part in key.split("."):
            value = value[part]
        path = root / f"key-{key}.yaml"
        if key in SPECIAL_CONFIGS:
            changed = SPECIAL_CONFIGS[key](config)
        else:
            changed = with_value(config, key, changed_value(key, value, spec))
        path.write_text(yaml.safe_dump(changed))
        cases.append(("keys", key, path, env, READERS[key], overriding(config, key)))
    # a variant's own value: its readers in its own results directory only
    results = f"results/{config['experiment']}"
    for case_key, (name, key) in variant_keys(config).items():
        value = config["variants"][name]
        for part in key.split("."):
            value = value[part]
        path = root / f"key-{case_key}.yaml"
        new = changed_value(key, value, KEYS[key])
        path.write_text(yaml.safe_dump(with_value(config, case_key, new)))
        own = {"root": names.variant_root(results, name)}
        selectors = [(r, w | own) for r, w in READERS[key]]
        cases.append(("keys", case_key, path, env, selectors, []))
    planned_by = {
        m: next(n for n in MODULES if MODULES[n] == rules) for m, rules in MODULES.items()
    }
    for module in dict.fromkeys(planned_by.values()):  # one module of each coverage
        src = root / f"src-{module}"
        shutil.copytree(SRC.parent, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg*"))
        pkg = SRC.joinpath(*module.split(".")[1:])
        target = (pkg / "__init__.py") if pkg.is_dir() else pkg.with_suffix(".py")
        target = src / target.relative_to(SRC.parent)
        with open(target, "a") as fh:  # a statement: changes the syntax tree, so the fingerprint
            fh.write("\n_rerun_matrix_probe = 1\n")
        case_env = {"PYTHONPATH": f"{src}{os.pathsep}{TESTS}"}
        cases.append(("modules", module, base_config, case_env, MODULES[module], []))

    with warm_pool() as pool:
        base_jobs_out, base_plan_out, *plan_outs = warm_snakemake.run_all(
            pool,
            [
                jobs_call(test_workflow, base_config, env),
                plan_call(test_workflow, base_config, env),
                *(plan_call(test_workflow, path, case_env) for _, _, path, case_env, *_ in cases),
            ],
        )
        base_dag, base_rows = parse_jobs(base_jobs_out), parse_plan(base_plan_out)
        plans = [parse_plan(proc) for proc in plan_outs]
        assert not any(r["pending"] for r in base_rows.values()), "the run is not up to date"
        base = set(base_rows)
        assert base == set(base_dag)
        # a case with the same jobs as before has the finished run's DAG; else its own
        new_jobs = [i for i, rows in enumerate(plans) if set(rows) != base]
        dags = dict.fromkeys(range(len(cases)), base_dag)
        procs = warm_snakemake.run_all(
            pool, [jobs_call(test_workflow, cases[i][2], cases[i][3]) for i in new_jobs]
        )
        dags |= {i: parse_jobs(proc) for i, proc in zip(new_jobs, procs, strict=True)}

    found: dict[str, dict[str, Case]] = {"keys": {}, "modules": {}, "planned": {}}
    pending: dict[str, set[str]] = {}  # a planned module's pending outputs
    for i, (kind, name, _, _, readers, keep) in enumerate(cases):
        dag = dags[i]
        want = expected(dag, readers, base, keep)
        got = {out for out, row in plans[i].items() if row["pending"]}
        described = rules_of(dag, want, base), rules_of(dag, got, base)
        found[kind][name] = Case(*described, sorted(want - got), sorted(got - want))
        if kind == "modules":
            pending[name] = got
            found["planned"][name] = found[kind][name]
    # the other modules: the plan of the planned module with the same coverage
    for module, planned in planned_by.items():
        if module != planned:
            want, got = expected(base_dag, MODULES[module], base), pending[planned]
            described = rules_of(base_dag, want, base), rules_of(base_dag, got, base)
            found["modules"][module] = Case(*described, sorted(want - got), sorted(got - want))
    found["modules"] = {m: found["modules"][m] for m in MODULES}  # the modules' order
    return found


@dataclasses.dataclass
class Case:
    """What a change should rerun (declared) and what Snakemake plans (planned)."""

    declared: str
    planned: str
    missing: list[str]
    """Outputs the declaration expects to be remade that Snakemake would not remake."""
    extra: list[str]
    """Outputs Snakemake would remake that the declaration does not expect."""

    def __str__(self) -> str:
        lines = [f"  declared: {self.declared}", f"  planned:  {self.planned}"]
        lines += [f"  not planned: {p}" for p in self.missing[:5]]
        lines += [f"  not declared: {p}" for p in self.extra[:5]]
        return "\n".join(lines)


def test_every_config_key_reruns_what_it_declares(matrix):
    wrong = {k: c for k, c in matrix["keys"].items() if c.missing or c.extra}
    assert not wrong, "\n".join(f"{k}:\n{c}" for k, c in wrong.items())


def test_every_module_reruns_what_it_declares(matrix):
    wrong = {k: c for k, c in matrix["modules"].items() if c.missing or c.extra}
    assert not wrong, "\n".join(f"{k}:\n{c}" for k, c in wrong.items())


def test_the_modules_sharing_a_plan_are_those_an_edit_treats_alike(matrix):
    """Each planned module's edit reruns in Snakemake's plan exactly the rules whose code runs
    it (:data:`MODULES`, the grouping of the other modules' cases) and their downstream jobs;
    one plan serves many modules."""
    wrong = {m: c for m, c in matrix["planned"].items() if c.missing or c.extra}
    assert not wrong, "\n".join(f"{m}:\n{c}" for m, c in wrong.items())
    assert len(matrix["planned"]) < len(matrix["modules"]) / 2, "a plan per module"


def test_speed_only_settings_and_tracking_rerun_nothing(matrix):
    for key in (
        "collect.n_envs",
        "evaluate.n_envs",
        "rl.checkpoint_every",
        "task.timeout_s",
        "tracking.enabled",
        "tracking.fail_on_error",
    ):
        assert matrix["keys"][key].planned == "nothing", key


def test_spelling_out_what_auto_picks_reruns_nothing(test_workflow: Path, tmp_path: Path):
    """``rl.vec_env: auto`` is resolved before it becomes a param: naming the kind it picks
    (native, for Racing-v0) is the same run."""
    config = effective_config()
    assert config["rl"]["vec_env"] == "auto"
    path = tmp_path / "native.yaml"
    path.write_text(yaml.safe_dump(with_value(config, "rl.vec_env", "native")))
    rows = plan(test_workflow, path, {"PYTHONPATH": str(TESTS)})
    assert rows and not [out for out, row in rows.items() if row["pending"]]


def test_reruns_doc_shows_the_matrix(matrix):
    """docs/reruns.md shows the matrix this run found (between the ``rerun-matrix`` markers);
    a stale table fails with the difference: `make reruns-doc` regenerates the page."""
    table = markdown_table(matrix)
    start, end = "<!-- rerun-matrix:start -->\n", "<!-- rerun-matrix:end -->"
    text = DOC.read_text()
    assert text.count(start) == 1 and text.count(end) == 1, f"{DOC}: no rerun-matrix markers"
    head, rest = text.split(start)
    shown, tail = rest.split(end)
    if DOC_OUT:
        Path(DOC_OUT).write_text(head + start + table + end + tail)
    diff = difflib.unified_diff(
        shown.splitlines(), table.splitlines(), "docs/reruns.md", "found", lineterm=""
    )
    stale = "\n".join(diff)
    assert shown == table, f"stale rerun matrix (`make reruns-doc` regenerates it):\n{stale}"


def markdown_table(matrix: Mapping[str, Mapping[str, Case]]) -> str:
    """The matrix as docs/reruns.md shows it: per config key, the jobs declared to read it (the
    specs' fields) and what Snakemake reruns; per library module, what it reruns."""
    lines = [
        "| config key | read by (the job specs) | reruns (Snakemake's plan) |",
        "|---|---|---|",
    ]
    lines += [f"| `{k}` | {read_by(k)} | {c.planned} |" for k, c in matrix["keys"].items()]
    lines += ["", "| library module | reruns |", "|---|---|"]
    lines += [f"| `{m}` | {c.planned} |" for m, c in matrix["modules"].items()]
    return "\n".join(lines) + "\n"


def read_by(key: str) -> str:
    """The jobs declared to read ``key`` (a named variant's key: its base key's), by rule, with
    the wildcard values that select them: ``train_rl (arm=rlpd, arm=sac)``; ``nothing`` for
    none."""
    base_key = key if key in READERS else key.split(".", 2)[2]  # variants.<name>.<key>
    by_rule: dict[tuple[str, str], list[str]] = {}
    for rule, want in READERS[base_key]:
        for name, value in want.items() or [("", "")]:
            by_rule.setdefault((rule, name), []).append(value)
    parts = [
        f"{rule} ({', '.join(f'{name}={v}' for v in values)})" if name else rule
        for (rule, name), values in by_rule.items()
    ]
    return ", ".join(parts) or "nothing"


def test_the_plan_is_what_a_dry_run_would_run(test_workflow: Path, tmp_path: Path):
    """The plan this test reads (``--detailed-summary``) and a dry run agree on the jobs."""
    key = "rl.warm_start.critic_warmup_steps"
    config = effective_config()
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump(with_value(config, key, 0)))
    env = {"PYTHONPATH": str(TESTS)}
    pending = {out for out, row in plan(test_workflow, path, env).items() if row["pending"]}
    proc = snakemake(test_workflow, "--configfile", str(path), "-n", "--nolock", env=env)
    planned = set(dry_run_jobs(proc.stdout + proc.stderr))
    assert pending == planned
    assert any("rl/bc/seed-0" in p for p in planned) and not any("scratch" in p for p in planned)
