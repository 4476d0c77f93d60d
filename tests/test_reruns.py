"""Reruns touch exactly what a change touches, reproduce fresh runs bit for bit whatever the speed
settings, and resume only their own state (real runs).

A copy of the workflow (Snakefile, rules, scripts, config, library source) holds a copy of the
session's finished run of the test config (`tree`): a fresh run, made in an empty directory.
Dry runs check that nothing, or only the edited rule, would rerun.

Executed reruns: each case takes its own copy of `tree` (`chain`) through one change, as two
executed reruns (`--cores 2`): first to the changed state (an RL or BC hyperparameter, the RL
budget, the number of demonstrations, an edit of the RL code), then the one thing changed back.
(The three changes that concern the RL runs alone share a copy: each is made to the RL runs of
an arm of its own, and one rerun changes the three back.)
The second rerun starts from a finished run of another config or code, with its stale RL state
on disk, and ends at the test config, whose fresh run is `tree`: every compared output must
equal that run's bit for bit (dataset content hash, BC and RL weights, RL progress and
evaluation tables without their wall-clock columns, the final evaluations without their timings
and versions), the jobs the change does not concern must leave their files untouched, and every
rerun RL job must log that it discarded the other run's state, naming the parts of the run key
that differ, instead of resuming it. The first rerun is checked to change the results, so that
a comparison cannot pass by doing nothing. (That a preempted run resumes its own state to the
budget is tests/test_rl.py's SIGTERM case.)

The reruns run without MLflow tracking (``tracking.enabled: false``: a job's MLflow import and
store take about 3 of its 7 CPU-seconds here), the fresh run with it: the bit-for-bit
comparisons also show that tracking changes no result.

The second rerun also runs with other speed settings than the fresh run (:data:`SPEED`: envs
per collection shard, evaluation batch sizes, checkpoint spacing, BC threads), each checked to
have been used by every job that reran (a spy in the jobs records the envs each rollout steps
and the torch threads BC sets: :data:`SPY`): speed settings change speed, never results.
(They reach the jobs as Snakemake resources and threads, so changing them reruns nothing:
tests/test_rerun_matrix.py.) Across the cases, every job that takes a speed setting reruns under
them: the collection shards, BC, the RL runs of every arm, and the evaluations.

For speed (every job starts Python, torch and MLflow afresh): changing back makes the session's
fresh run the reference of every case; reruns name the compared outputs as targets, not the
report; the first rerun of a case skips the evaluations; and each case reruns the RL runs of one
or two arms (every arm in at least one case: the run key and its check are the same code for
all of them), while the jobs a case must leave alone are targets too. Snakemake itself starts in
a fork of a process that has imported it (conftest.run_call).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO, TEST_CONFIG, copy_run, snakemake, untracked

from demo2rl.arms import BUILTIN as ARMS
from demo2rl.arms import get as get_arm
from demo2rl.demos import dataset
from demo2rl.tracking.lineage import sidecar_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CONFIG = yaml.safe_load(TEST_CONFIG.read_text())
CONFIG.pop("variants", None)
UNTRACKED = untracked(CONFIG)
"""The config of the executed reruns: the test config without MLflow tracking, which the
session's fresh run has (tracking changes no result, and switching it reruns nothing), and
without its variants (named overrides whose jobs run beside the base's): the reruns here
concern the base's jobs, which a variant's jobs would only add to."""
EXP = CONFIG["experiment"]
TREE = ("Snakefile", "rules", "scripts", "config", "report", "envs", "src", "profiles")


@pytest.fixture(scope="module")
def tree(test_workflow, tmp_path_factory) -> Path:
    """A copy of the workflow and library, with a copy of the session's finished run of the
    test config in tree/work."""
    root = tmp_path_factory.mktemp("tree")
    copy_workflow(REPO, root)
    copy_run(test_workflow, root / "work")
    return root


def copy_workflow(src: Path, dest: Path) -> None:
    """The files of ``TREE`` (with their modification times: the scripts stay older than the
    outputs, as in the repository)."""
    for name in TREE:
        path = src / name
        if path.is_dir():
            shutil.copytree(path, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif path.exists():
            shutil.copy2(path, dest / name)


def run(
    root: Path,
    *args: str,
    config: Path | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
):
    """Snakemake of the copied workflow (its own library first on the path) in root/work, with
    ``env`` added to the environment (a ``PYTHONPATH`` in it goes after the library's)."""
    env = dict(env or {})
    path = os.pathsep.join(filter(None, [str(root / "src"), env.pop("PYTHONPATH", None)]))
    cmd = ["-s", str(root / "Snakefile"), "--configfile", str(config or TEST_CONFIG), *args]
    return snakemake(root / "work", *cmd, env=env | {"PYTHONPATH": path}, check=check)


def planned(root: Path, *args: str) -> dict[str, int]:
    """Rule -> number of jobs `snakemake -n` of the test config would run."""
    proc = run(root, "-n", *args)
    text = proc.stdout + proc.stderr
    if "Nothing to be done" in text:
        return {}
    table = text.split("Job stats:", 1)[1].split("total", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.MULTILINE)}


def changed(path: str, value) -> dict:
    """The test config, untracked (as every rerun here), with the key at ``path`` set."""
    config = copy.deepcopy(UNTRACKED)
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return config


def test_no_change_means_nothing_to_do(tree):
    assert planned(tree) == {}


def test_threads_resources_and_profile_change_nothing(tree, tmp_path):
    """Together, in one plan: none of them is a rerun trigger, and a trigger that one of them
    pulled would plan its jobs whatever the others say."""
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "config.yaml").write_text("latency-wait: 30\nprintshellcmds: false\n")
    threads = ("--set-threads", "train_bc=1", "--cores", "1")
    resources = ("--set-resources", "train_rl:mem_mb=1234", "train_bc:runtime=5")
    assert planned(tree, *threads, *resources, "--profile", str(profile)) == {}


def edit(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))
    return text


def test_comment_only_script_edit_reruns_every_rule_of_the_script(tree):
    """Documented behaviour: Snakemake's `code` trigger reruns a script rule whose script is
    newer than its outputs (it goes by the script's modification time, not its text), so any
    edit of scripts/run_stage.py, every rule's script, a comment too, reruns them all."""
    script = tree / "scripts" / "run_stage.py"
    stat = script.stat()
    original = edit(script, "from demo2rl", "# a comment\nfrom demo2rl")
    try:
        jobs = planned(tree)
    finally:  # the script as it was, its time too: the tree stays up to date for other cases
        script.write_text(original)
        os.utime(script, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    every = {"collect_shard", "merge_demos", "train_bc", "plot_bc", "train_rl", "evaluate"}
    assert every | {"summarize", "plot_summary", "plot_racing"} <= set(jobs)
    assert jobs["plot_bc"] == 1


def test_dataset_hash_does_not_depend_on_the_number_of_shards(tree, test_workflow):
    jobs_config = changed("collect.n_shards", 1)
    jobs_config["collect"]["n_envs"] = 7
    path = tree / "one-shard.yaml"
    path.write_text(yaml.safe_dump(jobs_config))
    work = tree / "one-shard"
    work.mkdir()
    env = {"PYTHONPATH": str(tree / "src")}
    snakemake(
        work,
        "-s",
        str(tree / "Snakefile"),
        "--configfile",
        str(path),
        "--cores",
        "2",
        f"results/{EXP}/demos/demos.h5",
        env=env,
    )
    one = dataset.read(work / "results" / EXP / "demos" / "demos.h5")
    ref = dataset.read(test_workflow / "results" / EXP / "demos" / "demos.h5")
    assert one.attrs["content_hash"] == ref.attrs["content_hash"]
    assert (
        len(one.attrs["shards"]) == 1 and len(ref.attrs["shards"]) == CONFIG["collect"]["n_shards"]
    )
    assert os.path.getsize(work / "results" / EXP / "demos" / "demos.h5") > 0


# --------------------------------------------------------------------------------------------
# executed reruns, compared bit for bit with the fresh run of the test config in `tree`

SEEDS = CONFIG["rl"]["seeds"]
VOLATILE = {"seconds", "versions", "code_revision", "learning_curves_cpu"}
"""Entries of evaluation files, checkpoint metadata and the summary that equal runs need not
share (the summary's curves by CPU seconds)."""
RUN_SECONDS = {"wall_seconds", "cpu_seconds", "cpu_to_scratch_final", "cpu_to_expert"}
RUN_SECONDS |= {"cpu_vs_scratch", "cpu_to_expert_vs_scratch"}
"""An arm's entries in the summary that measure its runs' time, not their training."""
WALL_CLOCK = {"time/fps", "time/time_elapsed", "time/cpu_s"}
"""Columns of the SB3 progress table that measure time, not training."""
EXPERT = ["eval/expert.json", "logs/evaluate/expert.log"]
UPSTREAM = ["demos/*.h5", "logs/collect_shard/*", "logs/merge_demos.log"]
RL_ONLY = [*UPSTREAM, *EXPERT, "bc/*", "logs/train_bc.log", "eval/bc.json", "logs/evaluate/bc.log"]
"""What a change that concerns the RL runs alone leaves untouched (glob patterns)."""
SPEED = (
    "--set-resources",
    "collect_shard:envs=3",
    "train_bc:eval_envs=3",
    "train_rl:eval_envs=3",
    "train_rl:checkpoint_every=3000",
    "evaluate:envs=3",
    "--set-threads",
    "train_bc=2",
)
"""Speed settings other than the test config's (each a Snakemake resource or thread count)."""
assert CONFIG["collect"]["n_envs"] != 3 and CONFIG["evaluate"]["n_envs"] != 3
assert CONFIG["rl"]["checkpoint_every"] != 3000
SPEED_ENVS, BC_THREADS = 3, 2
"""What :data:`SPEED` sets every rollout's envs to (collection, BC's and RL's held-out checks,
the evaluations) and BC's threads to."""

SPY = """\
# Loaded by every Python process of the rerun (it is sitecustomize on their PYTHONPATH): in the
# jobs of the rules below, records the envs of each rollout and the torch threads BC sets. A
# rule's job runs scripts/run_stage.py (as .snakemake/scripts/tmp<random>.run_stage.py);
# its rule is the snakemake object's, which run_rule is handed.
import json, os, sys

_log = os.environ.get("DEMO2RL_TEST_SPY_LOG")
_script = os.path.basename(sys.argv[0]) if sys.argv else ""
_rule = ""
SPIED = ("collect_shard", "train_bc", "train_rl", "evaluate")


def _record(**what):
    with open(_log, "a") as out:
        out.write(json.dumps({"rule": _rule, "pid": os.getpid(), **what}) + "\\n")


if _log and _script.endswith(".run_stage.py"):
    from demo2rl.demos import rollout
    from demo2rl.workflow import runner

    _run_rule = runner.run_rule

    def _spied_run_rule(smk):
        global _rule
        _rule = smk.rule
        if _rule == "train_bc":
            import torch

            _set_num_threads = torch.set_num_threads

            def _spied_set_num_threads(n):
                _record(torch_threads=n)
                _set_num_threads(n)

            torch.set_num_threads = _spied_set_num_threads
        return _run_rule(smk)

    runner.run_rule = _spied_run_rule
    _run_episodes = rollout.run_episodes

    def _spied_run_episodes(*args, n_envs, **kwargs):
        if _rule in SPIED:
            _record(n_envs=n_envs)
        return _run_episodes(*args, n_envs=n_envs, **kwargs)

    rollout.run_episodes = _spied_run_episodes
"""
"""The spy of the speed settings."""
SPIED_LOGS = {
    "collect_shard": "logs/collect_shard/*.log",
    "train_bc": "logs/train_bc.log",
    "train_rl": "logs/train_rl/*.log",
    "evaluate": "logs/evaluate/*.log",
}
"""The logs of the jobs of each spied rule: a job reran if its log did."""
DISCARDED = re.compile(r"discarding the state in \S+: its run key differs in: (.+); training from")


def rl_runs(arms: Sequence[str]) -> list[str]:
    return [f"rl/{arm}/seed-{seed}" for arm in arms for seed in SEEDS]


def policies(arms: Sequence[str]) -> list[str]:
    return [f"{run_dir}/policy.pt" for run_dir in rl_runs(arms)]


def compared(arms: Sequence[str]) -> list[str]:
    """The outputs a case compares with the fresh run: the dataset, the clone, the RL runs of
    ``arms`` and the final evaluations of these, of the clone and of the expert."""
    return [
        "demos/demos.h5",
        "bc/policy.pt",
        *(
            f"{run_dir}/{name}"
            for run_dir in rl_runs(arms)
            for name in ("policy.pt", "progress.csv", "evaluations.csv")
        ),
        "eval/expert.json",
        "eval/bc.json",
        *(f"eval/rl-{arm}-seed{seed}.json" for arm in arms for seed in SEEDS),
    ]


RERUN_ARMS = {
    "rl_learning_rate": ["bc"],
    "doubled_rl_budget": ["scratch"],
    "bc_learning_rate": ["kickstart"],
    "more_episodes": ["bc", "scratch", "sac"],
    "rl_code_edit": ["residual", "rlpd"],
}
"""The arms whose RL runs each case reruns and compares (one or two: each RL job costs seconds
of start-up); together, every arm."""


def test_the_cases_rerun_every_arm():
    assert sorted({arm for arms in RERUN_ARMS.values() for arm in arms}) == sorted(ARMS)


@pytest.fixture
def chain(tree, tmp_path) -> Path:
    """This case's own copy of `tree`: the code, and the finished run with its outputs' times
    and Snakemake's records."""
    copy_workflow(tree, tmp_path)
    copy_run(tree / "work", tmp_path / "work")
    return tmp_path


def results_of(root: Path) -> Path:
    return root / "work" / "results" / EXP


def rerun(
    root: Path,
    config: dict,
    targets: list[str],
    untouched: Sequence[str] = (),
    *args: str,
    env: dict[str, str] | None = None,
) -> None:
    """Run `config` for `targets` in root/work with 2 cores (and Snakemake's ``args``, ``env``);
    the files of `untouched` (glob patterns under the results) must keep their names, bytes and
    modification times."""
    path = root / "rerun.yaml"
    path.write_text(yaml.safe_dump(config))
    results = results_of(root)
    before = stamps(results, untouched)
    outputs = (f"results/{EXP}/{target}" for target in targets)
    run(root, "--cores", "2", *outputs, *args, config=path, env=env)
    after = stamps(results, untouched)
    touched = sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )
    assert not touched, f"rewritten by a rerun that does not concern them: {touched}"


def stamps(results: Path, patterns: Sequence[str]) -> dict[str, tuple[int, bytes]]:
    found = {}
    for pattern in patterns:
        paths = [p for p in results.glob(pattern) if p.is_file()]
        assert paths, f"no file matches {pattern}"
        found |= {
            str(p.relative_to(results)): (p.stat().st_mtime_ns, p.read_bytes()) for p in paths
        }
    return found


def comparable(path: Path):
    """What equal runs must agree on in a result file, bit for bit."""
    if path.suffix == ".h5":
        return dataset.read_attrs(path)["content_hash"]
    if path.suffix == ".pt":
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["meta"] = {k: v for k, v in checkpoint["meta"].items() if k not in VOLATILE}
        return checkpoint
    if path.suffix == ".csv":
        table = pd.read_csv(path)
        # by name: SB3 adds progress columns in the order of a set of strings (hash-seeded)
        return table.drop(columns=[c for c in table.columns if c in WALL_CLOCK]).sort_index(axis=1)
    content = {k: v for k, v in json.loads(path.read_text()).items() if k not in VOLATILE}
    if "arms" in content:  # the summary: each arm's costs are the machine's, not the run's
        content["arms"] = {
            arm: {k: v for k, v in row.items() if k not in RUN_SECONDS}
            for arm, row in content["arms"].items()
        }
    return content


def assert_same(a, b, where: str) -> None:
    """Exact equality of nested values: tensors bit for bit, tables exact and NaN-aware."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), f"{where} differs"
    elif isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=where)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: {list(a)} != {list(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}: {key}")
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"  # NaN equals NaN


def assert_changed(results: Path, reference: Path, checkpoints: list[str]) -> None:
    """The first rerun of a case changed these weights: the case compares something."""
    for rel in checkpoints:
        a, b = (torch.load(p / rel, weights_only=True)["state_dict"] for p in (results, reference))
        assert any(not torch.equal(a[k], b[k]) for k in a), f"{rel}: the change changed nothing"


def log_times(results: Path, pattern: str) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in results.glob(pattern)}


def rl_log(results: Path, run_dir: str) -> Path:
    _, init, seed = run_dir.split("/")
    return results / "logs" / "train_rl" / f"{init}-seed{seed.removeprefix('seed-')}.log"


def discarded_parts(log: str) -> set[str] | None:
    """The parts of the run key that a job's log says differ from those of the state it found."""
    found = DISCARDED.findall(log)
    assert len(found) <= 1, found
    return set(found[0].split(", ")) if found else None


def change_back(
    root: Path, tree: Path, arms: Sequence[str], untouched: list[str], discarded: dict[str, set]
) -> None:
    """Rerun the test config for the outputs :func:`compared` names and compare them with its
    fresh run in `tree`; the RL runs of each arm in `discarded` must have rerun, discarding the
    state they found for the key parts given."""
    results = results_of(root)
    logs = {d: rl_log(results, d) for d in rl_runs(arms) if d.split("/")[1] in discarded}
    before = {run_dir: log.stat().st_mtime_ns for run_dir, log in logs.items()}
    spy_dir, spy_log = root / "spy", root / "spy.jsonl"
    spy_dir.mkdir()
    (spy_dir / "sitecustomize.py").write_text(SPY)
    logs_before = {rule: log_times(results, pattern) for rule, pattern in SPIED_LOGS.items()}
    env = {"PYTHONPATH": str(spy_dir), "DEMO2RL_TEST_SPY_LOG": str(spy_log)}
    rerun(root, UNTRACKED, compared(arms), untouched, *SPEED, env=env)
    for run_dir, log in logs.items():
        assert log.stat().st_mtime_ns != before[run_dir], f"{run_dir} did not rerun"
        text = log.read_text()
        assert discarded_parts(text) == discarded[run_dir.split("/")[1]], text
        assert "resuming from step" not in text, text
        # untracked: the session run's record of the producing MLflow run went with its output
        assert not sidecar_path(results / run_dir / "policy.pt").exists(), run_dir
        # the other checkpoint spacing was used: fewer checkpoints than in the fresh run
        fresh = rl_log(results_of(tree), run_dir).read_text()
        assert text.count("checkpoint at step") < fresh.count("checkpoint at step"), run_dir
    # every job that reran (its log rewritten) used the other speed settings: each rollout
    # stepped SPEED_ENVS envs, and BC trained on BC_THREADS torch threads
    reran = {
        rule
        for rule, pattern in SPIED_LOGS.items()
        if log_times(results, pattern) != logs_before[rule]
    }
    assert {"train_rl", "evaluate"} <= reran, reran
    records = [json.loads(line) for line in spy_log.read_text().splitlines()]
    envs = {(r["rule"], r["n_envs"]) for r in records if "n_envs" in r}
    assert envs == {(rule, SPEED_ENVS) for rule in reran}, f"(rule, envs stepped): {envs}"
    bc_threads = [r["torch_threads"] for r in records if "torch_threads" in r]
    assert (BC_THREADS in bc_threads) == ("train_bc" in reran), records
    for rel in compared(arms):
        assert_same(comparable(results / rel), comparable(results_of(tree) / rel), rel)


def test_bc_learning_rate_reruns_bc_and_the_warm_started_arm_only(chain, tree):
    """The clone changes, so does an arm that uses it (its key's input); the scratch arm, a
    target too, is left alone."""
    arms = [*RERUN_ARMS["bc_learning_rate"], "scratch"]
    scratch_arm = [
        *UPSTREAM,
        *EXPERT,
        "rl/scratch/**/*",
        "eval/rl-scratch-*.json",
        "logs/train_rl/scratch-*",
        "logs/evaluate/rl-scratch-*",
    ]
    rerun(chain, changed("bc.learning_rate", 5e-4), policies(arms), scratch_arm)
    clone_users = RERUN_ARMS["bc_learning_rate"]
    assert_changed(results_of(chain), results_of(tree), ["bc/policy.pt", *policies(clone_users)])
    change_back(chain, tree, arms, scratch_arm, {arm: {"inputs.clone"} for arm in clone_users})


def test_four_more_episodes_rerun_everything_downstream(chain, tree):
    """From a finished run on 4 episodes fewer: a new dataset, and all but the expert reruns."""
    arms = RERUN_ARMS["more_episodes"]
    fewer = changed("collect.n_episodes", CONFIG["collect"]["n_episodes"] - 4)
    rerun(chain, fewer, policies(arms), EXPERT)
    results, reference = results_of(chain), results_of(tree)
    assert comparable(results / "demos/demos.h5") != comparable(reference / "demos/demos.h5")
    assert_changed(results, reference, ["bc/policy.pt", *policies(arms)])
    parts = {
        arm: {"inputs.demos"}
        | ({"inputs.clone"} if get_arm(arm).uses_clone(CONFIG["rl"]) else set())
        for arm in arms
    }
    change_back(chain, tree, arms, EXPERT, parts)


def test_rl_only_changes_discard_the_stale_state(chain, tree):
    """Three changes that concern the RL runs alone, each made to the RL runs of its own arm in
    one copy of the run, then changed back in one rerun: the stale state of each arm's runs
    differs from the test config's by that arm's change alone, and each is discarded for it.

    - The RL learning rate (the case that went wrong: the rerun resumed the other run's state,
      and kept its weights).
    - The RL budget: from a finished run of half the budget to the test config's (a halved
      budget is the same change of the run key's job part: the state is discarded and the run
      trains anew).
    - An edit of the RL library (another seed for the runs), then its revert: each changes the
      results and reruns the RL runs alone, which discard the other code's state.

    (One copy and one change back for the three: a rerun's Snakemake start costs seconds.)"""
    lr_arms, budget_arms, code_arms = (
        RERUN_ARMS[case] for case in ("rl_learning_rate", "doubled_rl_budget", "rl_code_edit")
    )
    arms = [*lr_arms, *budget_arms, *code_arms]
    assert len(set(arms)) == len(arms), f"each change on arms of its own: {arms}"
    rerun(chain, changed("rl.ppo.learning_rate", 1e-3), policies(lr_arms), RL_ONLY)
    assert_changed(results_of(chain), results_of(tree), policies(lr_arms))
    half = changed("rl.total_timesteps", CONFIG["rl"]["total_timesteps"] // 2)
    rerun(chain, half, policies(budget_arms), RL_ONLY)
    assert_changed(results_of(chain), results_of(tree), policies(budget_arms))
    trainer = chain / "src" / "demo2rl" / "rl" / "trainer.py"
    line = "seed = seeds.rl_seed(job.seed, job.run_seed)\n"
    original = edit(trainer, line, line.replace("\n", " + 1\n"))
    try:
        rerun(chain, UNTRACKED, policies(code_arms), RL_ONLY)
    finally:
        trainer.write_text(original)
    assert_changed(results_of(chain), results_of(tree), policies(code_arms))
    parts = {arm: {"job"} for arm in (*lr_arms, *budget_arms)} | {
        arm: {"code"} for arm in code_arms
    }
    change_back(chain, tree, arms, RL_ONLY, parts)
