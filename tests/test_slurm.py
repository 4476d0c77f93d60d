"""The workflow on a real SLURM cluster, through profiles/slurm and snakemake-executor-plugin-slurm.

A session fixture starts a single-node cluster on this machine (tests/slurm/start.sh: slurmctld,
slurmd, slurmdbd with MariaDB, munge, one fake GPU) and stops it at the end (tests/slurm/stop.sh).
It needs root and apt (or SLURM already installed), as on CI; elsewhere these tests are skipped,
with the reason in pytest's summary. DEMO2RL_SLURM_TESTS=0 skips them too. Under CI=true none of
this skips: a cluster that cannot start, and the DEMO2RL_SLURM_TESTS=0 opt-out too, fails the
tests (conftest.unavailable), so that CI never passes without having run them.
DEMO2RL_SLURM_KEEP=1 leaves the cluster running afterwards.

One run of the test config through `snakemake --profile profiles/slurm` serves every test here.
The profile is used as it is, except for what a user edits or a test needs:
- default-resources: the test cluster's partition and account instead of the placeholders;
- set-resources: the profile's, plus `train_bc:gpu=1`, so that the BC job asks SLURM for the
  (fake) GPU while bc.device stays `auto`, which trains on the CPU here (no CUDA): the rule
  requests `gpu` only for `device: cuda`, which would fail in torch on this machine; and
  `--set-threads train_bc=2`, so that its CPU request is not SLURM's default of one;
- a larger RL budget, so that the RL jobs run long enough to be preempted mid-run: while the
  workflow runs, the warm-started run's job is requeued (`scontrol requeue`, what a preemption
  with PreemptMode=REQUEUE does) and the scratch run's job gets SIGTERM (`scancel --signal=TERM`,
  what `sbatch --signal=TERM@...` does before a time limit). Both save a checkpoint and stop; the
  requeued job starts again by itself, the signalled one exits with status 75, its SLURM job
  fails and Snakemake resubmits it (the profile's retries, with memory scaled by attempt); both
  resume. (A plain `scancel` would leave the job "CANCELLED by 0" in sacct, a state that plugin
  2.8 does not recognise: Snakemake would wait for it forever.)
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from conftest import BIN, REPO, TEST_CONFIG, unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SLURM_DIR = REPO / "tests" / "slurm"
PROFILE_DIR = REPO / "profiles" / "slurm"
PROFILE = yaml.safe_load((PROFILE_DIR / "config.yaml").read_text())
PARTITION = os.environ.get("DEMO2RL_SLURM_PARTITION", "debug")
ACCOUNT = os.environ.get("DEMO2RL_SLURM_ACCOUNT", "demo2rl")
CONFIG = yaml.safe_load(TEST_CONFIG.read_text())
EXP = CONFIG["experiment"]
# the RL budget of this run: long enough to preempt the jobs mid-run (a multiple of one rollout,
# n_steps * n_envs, so that the last progress row lands on it exactly)
RL_STEPS = 24 * CONFIG["rl"]["ppo"]["n_steps"] * CONFIG["rl"]["n_envs"]
RL_OVERRIDE = {"total_timesteps": RL_STEPS, "checkpoint_every": 2048, "eval_every": 16384}
# preempt a run once its checkpoint shows at least this many steps
PREEMPT_AFTER = 2048
RUN_TIMEOUT = 900


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[dict[str, str]]:
    """A running single-node SLURM cluster: started here, and stopped at the end unless it was
    already up (or DEMO2RL_SLURM_KEEP=1). Where it cannot start, or DEMO2RL_SLURM_TESTS=0, the
    tests are skipped, and fail under CI=true (conftest.unavailable)."""
    if os.environ.get("DEMO2RL_SLURM_TESTS") == "0":
        unavailable("SLURM tests: DEMO2RL_SLURM_TESTS=0 opts out of them")
    if os.geteuid() != 0:
        unavailable(
            "SLURM tests: starting the test cluster (tests/slurm/start.sh) needs root "
            "and apt, as on CI"
        )
    start = time.perf_counter()
    proc = subprocess.run(
        ["bash", str(SLURM_DIR / "start.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode == 77:
        reason = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "exit 77"
        unavailable(f"SLURM tests: the test cluster cannot start here: {reason}")
    started_here = "started " in proc.stderr
    if proc.returncode != 0:
        _stop_cluster()
        pytest.fail(f"tests/slurm/start.sh failed ({proc.returncode}):\n{proc.stderr}")
    print(f"SLURM test cluster up in {time.perf_counter() - start:.0f} s")
    try:
        yield {"partition": PARTITION, "account": ACCOUNT}
    finally:
        if started_here and os.environ.get("DEMO2RL_SLURM_KEEP") != "1":
            _stop_cluster()


def _stop_cluster() -> None:
    subprocess.run(
        ["bash", str(SLURM_DIR / "stop.sh")], capture_output=True, timeout=300, check=False
    )


# --------------------------------------------------------------------------------------------
# the run


@dataclasses.dataclass
class SlurmRun:
    workdir: Path
    returncode: int
    output: str
    seconds: float
    preempted: dict[str, dict[str, int]]  # arm -> SLURM job id and checkpoint step seen before
    jobs: list[dict[str, str]]  # sacct rows of this run's jobs, every record (-D)

    def results(self) -> Path:
        return self.workdir / "results" / EXP

    def jobs_of(self, rule: str, wildcards: str = "") -> list[dict[str, str]]:
        comment = f"rule_{rule}" + (f"_wildcards_{wildcards}" if wildcards else "")
        return [j for j in self.jobs if j["Comment"] == comment]


def profile_resources(extra_set: list[str]) -> list[str]:
    """The profile's default-resources and set-resources as command-line arguments (an option on
    the command line replaces the profile's key as a whole), with the test cluster's partition
    and account and the test's extra per-rule resources."""
    defaults = PROFILE["default-resources"] | {
        "slurm_partition": PARTITION,
        "slurm_account": ACCOUNT,
    }
    per_rule = [
        f"{rule}:{key}={value}"
        for rule, values in PROFILE["set-resources"].items()
        for key, value in values.items()
    ]
    return [
        "--default-resources",
        *(f"{k}={v}" for k, v in defaults.items()),
        "--set-resources",
        *per_rule,
        *extra_set,
    ]


def snakemake_args(workdir: Path, *extra: str) -> list[str]:
    targets = [f"results/{EXP}/rl/{init}/seed-0/policy.pt" for init in ("bc", "scratch")]
    return [
        str(BIN / "snakemake"),
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        "--profile",
        str(PROFILE_DIR),
        # the test config, then the RL budget on top (nested `--config rl=...` values would
        # reach the config as strings: Snakemake parses them with YAML's BaseLoader)
        "--configfile",
        str(TEST_CONFIG),
        str(overlay_config(workdir)),
        *profile_resources(["train_bc:gpu=1"]),
        "--set-threads",
        "train_bc=2",
        # the profile's 20 s suits a real cluster; a tiny test workflow wants answers sooner
        "--slurm-init-seconds-before-status-checks",
        "5",
        *extra,
        *targets,
    ]


def overlay_config(workdir: Path) -> Path:
    path = workdir / "rl-budget.yaml"
    path.write_text(yaml.safe_dump({"rl": RL_OVERRIDE}))
    return path


def tracking_uri(workdir: Path) -> str:
    """Not the default store: proves MLFLOW_TRACKING_URI reaches the SLURM jobs."""
    return f"sqlite:///{workdir / 'tracking' / 'mlflow.db'}"


def run_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEMO2RL_"))}
    env.pop("SLURM_CONF", None)  # the cluster's slurm.conf is where SLURM looks by default
    return env | {"MLFLOW_TRACKING_URI": tracking_uri(workdir)}


def slurm(*args: str) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, check=True).stdout


def running_job(workdir: Path, comment: str) -> str | None:
    """The SLURM id of this run's running job with this comment (rule and wildcards)."""
    for line in slurm("squeue", "-h", "-o", "%i|%k|%T|%Z").splitlines():
        jobid, job_comment, state, job_workdir = line.split("|")
        if job_comment == comment and state == "RUNNING" and Path(job_workdir) == workdir:
            return jobid
    return None


def checkpoint_step(state_dir: Path) -> int:
    try:
        return json.loads((state_dir / "state.json").read_text())["timesteps"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def requeue(jobid: str) -> None:
    slurm("scontrol", "requeue", jobid)
    # SLURM holds a requeued batch job back for about two minutes before it may start again;
    # once it is pending, lift that hold (as an admin may): the test has no minutes to spare
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        state = slurm("squeue", "-h", "-j", jobid, "-o", "%T|%r").strip()
        if state == "PENDING|BeginTime":
            subprocess.run(["scontrol", "update", f"jobid={jobid}", "StartTime=now"], check=False)
        elif state and not state.startswith(("PENDING", "COMPLETING", "REQUEUE")):
            return  # running again
        time.sleep(0.25)
    raise AssertionError(f"requeued job {jobid} did not start again within 90 s")


def stop_snakemake(proc: subprocess.Popen, workdir: Path) -> None:
    """Like Ctrl-C (Snakemake cancels its SLURM jobs on SIGINT, but waits for them on SIGTERM),
    then whatever is left: the process, and this run's jobs."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for line in slurm("squeue", "-h", "-o", "%i|%Z").splitlines():
        jobid, job_workdir = line.split("|")
        if Path(job_workdir) == workdir:
            subprocess.run(["scancel", jobid], check=False)


def sacct_rows(workdir: Path) -> list[dict[str, str]]:
    fields = "JobID,JobName,Comment,State,ExitCode,ReqTRES,AllocTRES,Timelimit,ReqCPUS,ReqMem"
    fields += ",Account,Partition,WorkDir,Start"
    out = slurm(
        "sacct", "-X", "-D", "-P", "-n", "-S", "now-1days", "-E", "now", "-o", fields
    ).splitlines()
    names = fields.split(",")
    rows = [dict(zip(names, line.split("|"), strict=True)) for line in out]
    return [r for r in rows if r["WorkDir"] and Path(r["WorkDir"]) == workdir]


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, tmp_path_factory: pytest.TempPathFactory) -> SlurmRun:
    """The test config on the cluster; both RL jobs preempted mid-run (see the module doc)."""
    workdir = tmp_path_factory.mktemp("slurm")
    log_path = workdir / "snakemake.log"
    # what to do to which RL run, once its checkpoint has PREEMPT_AFTER steps
    actions = {"bc": requeue, "scratch": lambda jobid: slurm("scancel", "--signal=TERM", jobid)}
    preempted: dict[str, dict[str, int]] = {}
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            snakemake_args(workdir),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=run_env(workdir),
        )
        try:
            while proc.poll() is None:
                if time.perf_counter() - start > RUN_TIMEOUT:
                    stop_snakemake(proc, workdir)
                    tail = log_path.read_text()[-6000:]
                    raise TimeoutError(f"snakemake on SLURM ran over {RUN_TIMEOUT} s:\n{tail}")
                for init, act in actions.items():
                    if init in preempted:
                        continue
                    state_dir = workdir / "results" / EXP / "rl" / init / "seed-0" / "state"
                    step = checkpoint_step(state_dir)
                    if step < PREEMPT_AFTER:
                        continue
                    jobid = running_job(workdir, f"rule_train_rl_wildcards_{init}_0")
                    if jobid is not None:
                        act(jobid)
                        preempted[init] = {"jobid": int(jobid), "step": step}
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                stop_snakemake(proc, workdir)
    seconds = time.perf_counter() - start
    output = log_path.read_text()
    print(f"snakemake on SLURM: {seconds:.0f} s, exit {proc.returncode}")
    return SlurmRun(workdir, proc.returncode, output, seconds, preempted, sacct_rows(workdir))


# --------------------------------------------------------------------------------------------
# the tests


def test_workflow_runs_on_slurm(slurm_run: SlurmRun):
    assert slurm_run.returncode == 0, slurm_run.output[-6000:]
    results = slurm_run.results()
    for path in ["demos/demos.h5", "bc/policy.pt", "bc/metrics.json"]:
        assert (results / path).is_file(), path
    for init in ("bc", "scratch"):
        run = results / "rl" / init / "seed-0"
        for name in ("policy.pt", "progress.csv", "evaluations.csv"):
            assert (run / name).is_file(), f"{init}: {name}"
    # every job of the run went through SLURM, on the test cluster's partition and account
    rules = {j["Comment"].split("_wildcards_")[0] for j in slurm_run.jobs}
    assert rules == {"rule_collect_shard", "rule_merge_demos", "rule_train_bc", "rule_train_rl"}
    assert {j["Partition"] for j in slurm_run.jobs} == {PARTITION}
    assert {j["Account"] for j in slurm_run.jobs} == {ACCOUNT}
    # nothing left to do afterwards (a dry run with the same arguments)
    dry = subprocess.run(
        snakemake_args(slurm_run.workdir, "-n"),
        capture_output=True,
        text=True,
        env=run_env(slurm_run.workdir),
        timeout=300,
    )
    assert dry.returncode == 0, dry.stderr
    assert "Nothing to be done" in dry.stdout + dry.stderr


def job_infos(output: str) -> list[dict[str, str]]:
    """The job descriptions Snakemake printed ("rule NAME:" and its indented "key: value"
    lines), in order."""
    infos: list[dict[str, str]] = []
    for line in output.splitlines():
        if line.startswith(("rule ", "localrule ")) and line.endswith(":"):
            infos.append({"rule": line.split()[1].rstrip(":")})
        elif infos and line.startswith("    ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            infos[-1].setdefault(key, value)
    return infos


def snakemake_resources(slurm_run: SlurmRun, rule: str, wildcards: str = "") -> dict[str, str]:
    """threads and resources of the (first) job of a rule, as Snakemake computed them."""
    for info in job_infos(slurm_run.output):
        if info["rule"] == rule and info.get("wildcards", "") == wildcards:
            resources = dict(item.split("=", 1) for item in info["resources"].split(", "))
            return resources | {"threads": info.get("threads", "1")}
    raise AssertionError(f"no job of rule {rule} {wildcards} in Snakemake's output")


def profile_mem_mb(rule: str, attempt: int) -> int:
    return eval(str(PROFILE["set-resources"][rule]["mem_mb"]), {"attempt": attempt})


def slurm_time(minutes: str) -> str:
    hours, mins = divmod(int(minutes), 60)
    return f"{hours:02d}:{mins:02d}:00"


def assert_sbatch_matches(job: dict[str, str], resources: dict[str, str]) -> dict[str, str]:
    """sacct's record of a job shows what Snakemake asked for: threads as --cpus-per-task,
    mem_mb as --mem, runtime (minutes) as -t, gpu as --gpus. Returns sacct's ReqTRES."""
    requested = dict(item.split("=", 1) for item in job["ReqTRES"].split(","))
    assert requested["cpu"] == job["ReqCPUS"] == resources["threads"]
    assert requested["mem"] == job["ReqMem"] == f"{resources['mem_mb']}M"
    assert job["Timelimit"] == slurm_time(resources["runtime"])
    assert requested.get("gres/gpu", "0") == resources.get("gpu", "0")
    return requested


def test_bc_job_asked_for_the_gpu_cpus_memory_and_time(slurm_run: SlurmRun):
    (bc,) = slurm_run.jobs_of("train_bc")
    assert bc["State"] == "COMPLETED"
    resources = snakemake_resources(slurm_run, "train_bc")
    # what this run set: --set-resources train_bc:gpu=1, --set-threads train_bc=2, and the
    # profile's memory for a first attempt; the runtime is the rule's
    assert resources["gpu"] == "1" and resources["threads"] == "2"
    assert int(resources["mem_mb"]) == profile_mem_mb("train_bc", attempt=1)
    requested = assert_sbatch_matches(bc, resources)
    assert requested["gres/gpu"] == "1" and requested["cpu"] == "2"
    assert "gres/gpu=1" in bc["AllocTRES"]  # SLURM gave it the (fake) GPU


def test_collection_shards_ran_as_small_jobs(slurm_run: SlurmRun):
    for shard in range(CONFIG["collect"]["n_shards"]):
        (job,) = slurm_run.jobs_of("collect_shard", str(shard))
        assert job["State"] == "COMPLETED"
        resources = snakemake_resources(slurm_run, "collect_shard", f"shard={shard}")
        assert int(resources["mem_mb"]) == profile_mem_mb("collect_shard", attempt=1)
        requested = assert_sbatch_matches(job, resources)
        assert "gres/gpu" not in requested


def test_jobs_log_to_the_parent_run_of_the_tracking_uri(slurm_run: SlurmRun):
    """MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_ID and DEMO2RL_PARENT_RUN_ID, exported by the
    onstart hook in the Snakemake process, reach every SLURM job (sbatch --export=ALL)."""
    mlflow.set_tracking_uri(tracking_uri(slurm_run.workdir))
    runs = mlflow.search_runs(experiment_names=[EXP], output_format="list")
    (parent,) = [r for r in runs if r.data.tags.get("demo2rl.stage") == "workflow"]
    assert parent.info.status == "FINISHED"
    children = [r for r in runs if r is not parent]
    shards = {f"collect-shard{k}" for k in range(CONFIG["collect"]["n_shards"])}
    jobs = {*shards, "merge-demos", "bc", "rl-bc-seed0", "rl-scratch-seed0"}
    for run in children:
        assert run.data.tags.get("mlflow.parentRunId") == parent.info.run_id, run.info.run_name
    # one finished run per job; the RL jobs' first, preempted attempts left failed runs
    finished = [r.info.run_name for r in children if r.info.status == "FINISHED"]
    assert sorted(finished) == sorted(jobs)
    assert {r.info.run_name for r in children} == jobs
    # nothing went to the default store under results/
    assert not (slurm_run.workdir / "results" / "mlflow.db").exists()


def resumed_run(slurm_run: SlurmRun, init: str) -> tuple[dict, pd.DataFrame, list[int]]:
    run = slurm_run.results() / "rl" / init / "seed-0"
    state = json.loads((run / "state" / "state.json").read_text())
    progress = pd.read_csv(run / "progress.csv")
    starts = sorted(int(p.stem.split("-")[1]) for p in (run / "state").glob("progress-*.csv"))
    return state, progress, starts


def test_requeued_rl_job_resumes_from_its_checkpoint(slurm_run: SlurmRun):
    assert "bc" in slurm_run.preempted, "the warm-started RL run finished before it was requeued"
    seen = slurm_run.preempted["bc"]
    records = slurm_run.jobs_of("train_rl", "bc_0")
    # one SLURM job, run twice: requeued, then completed
    assert {j["JobID"] for j in records} == {str(seen["jobid"])}
    assert [j["State"] for j in records] == ["REQUEUED", "COMPLETED"]
    state, progress, starts = resumed_run(slurm_run, "bc")
    assert state["resumed"] >= 1
    assert state["timesteps"] == RL_STEPS
    # the second start continued from a checkpoint at least as recent as the one seen before
    assert len(starts) >= 2 and starts[0] == 0 and starts[1] >= seen["step"]
    assert progress["time/total_timesteps"].iloc[-1] == RL_STEPS
    assert progress["time/total_timesteps"].is_monotonic_increasing


def test_signalled_rl_job_is_resubmitted_with_more_memory_and_resumes(slurm_run: SlurmRun):
    assert "scratch" in slurm_run.preempted, "the scratch RL run finished before it was signalled"
    seen = slurm_run.preempted["scratch"]
    records = slurm_run.jobs_of("train_rl", "scratch_0")
    assert [j["State"] for j in records] == ["FAILED", "COMPLETED"], records
    assert records[0]["JobID"] == str(seen["jobid"])
    # the profile's retries: the second attempt asks for twice the memory
    assert [j["ReqMem"] for j in records] == [
        f"{profile_mem_mb('train_rl', attempt)}M" for attempt in (1, 2)
    ]
    state, progress, starts = resumed_run(slurm_run, "scratch")
    assert state["resumed"] >= 1
    assert len(starts) >= 2 and starts[0] == 0 and starts[1] >= seen["step"]
    assert progress["time/total_timesteps"].iloc[-1] == RL_STEPS
    # the first job's SLURM log (kept, as it failed) shows the checkpoint on SIGTERM
    slurm_log = next(slurm_run.workdir.glob(f".snakemake/slurm_logs/**/{seen['jobid']}.log"))
    assert "SIGTERM: checkpoint at step" in slurm_log.read_text()
