"""The workflow on a real SLURM cluster, through profiles/slurm and snakemake-executor-plugin-slurm.

A session fixture starts a single-node cluster on this machine (tests/slurm/start.sh: slurmctld,
slurmd, slurmdbd with MariaDB, munge, one fake GPU) and stops it at the end (tests/slurm/stop.sh).
The cluster enforces jobs' memory (cgroups where this machine has them) and time limits.
It needs root and apt (or SLURM already installed), as on CI; elsewhere these tests are skipped,
with the reason in pytest's summary. DEMO2RL_SLURM_TESTS=0 skips them too. Under CI=true none of
this skips: a cluster that cannot start, and the DEMO2RL_SLURM_TESTS=0 opt-out too, fails the
tests (conftest.unavailable), so that CI never passes without having run them.
DEMO2RL_SLURM_KEEP=1 leaves the cluster running afterwards.

Two runs go to the cluster at once, and serve every test here:

The test config through `snakemake --profile profiles/slurm`. Its dataset and clone must equal
the local run's (conftest's session run of the same config) bit for bit. The profile is used as
it is, except for what a user edits or a test needs:
- default-resources: the test cluster's partition and account instead of the placeholders;
- set-resources: the profile's, plus `train_bc:gpu=1`, so that the BC job asks SLURM for the
  (fake) GPU while bc.device stays `auto`, which trains on the CPU here (no CUDA): the rule
  requests `gpu` only for `device: cuda`, which would fail in torch on this machine;
  `--set-threads train_bc=2`, so that its CPU request is not SLURM's default of one; and a time
  limit of one minute for the scratch arm's RL job;
- a larger RL budget, so that the RL jobs run long enough to be stopped mid-run: while the
  workflow runs, the warm-started run's job is requeued (`scontrol requeue`, what a preemption
  with PreemptMode=REQUEUE does), and the scratch run's job runs past its time limit: once it
  has a checkpoint, the test stops its trainer (SIGSTOP: a job too slow for its limit, whatever
  the machine's speed) until SLURM ends the job for its time limit, then lets it go on (SIGCONT)
  to receive SLURM's SIGTERM. Both save a checkpoint and stop; the requeued job starts again by
  itself; the timed-out one (state TIMEOUT, exit status 75) is resubmitted by Snakemake (the
  profile's retries, with memory scaled by attempt). Both resume. (A plain `scancel` would leave
  the job "CANCELLED by 0" in sacct, a state that plugin 2.8 does not recognise: Snakemake would
  wait for it forever.)

A one-shard collection of a task that needs more memory than the profile's first attempt gives
its rule (tests/user_tasks.py:MemoryHungry-v0): the job's step is killed for memory
(OUT_OF_MEMORY) and the retry, with the profile's doubled memory, finishes.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import h5py
import mlflow
import pandas as pd
import pytest
import torch
import yaml
from conftest import (
    BIN,
    REPO,
    TEST_CONFIG,
    checkpointed_step,
    copy_run,
    unavailable,
    untracked,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("slurm")]

TESTS = Path(__file__).resolve().parent
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
# every RL job asks for four hours; the test cuts the scratch arm's first job to one minute (the
# shortest SLURM has) once it holds the job at a checkpoint (PastTimeLimit), so that neither a
# slow start nor a slow retry can meet a time limit the test did not mean
RL_RUNTIME = 240
TIME_LIMIT = 1
"""Minutes: the time limit the test gives the held scratch job."""
# how long a stopped trainer may wait for its time limit (slurmctld checks every 30 s) before
# the test lets it go on regardless (and the TIMEOUT test fails): bounds, never expectations
TIME_LIMIT_WAIT = 600
RUN_TIMEOUT = 1800
REQUEUE_WAIT = 600
"""How long a requeued job may take to start again (a bound on a hang, not a speed)."""


def profile_mem_mb(rule: str, attempt: int) -> int:
    """The memory (MB) the profile's set-resources give ``rule`` at ``attempt``."""
    return eval(str(PROFILE["set-resources"][rule]["mem_mb"]), {"attempt": attempt})


# the memory-hungry collection: its task holds this much, more than collect_shard's first
# attempt gets from the profile, and, with Python and Snakemake (under 1 GB), less than the second
OOM_EXP = "slurm-oom"
HUNGRY_MB = profile_mem_mb("collect_shard", 1) * 5 // 4
OOM_TARGET = f"results/{OOM_EXP}/demos/shard-0.h5"


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
# the runs


@dataclasses.dataclass
class SlurmRun:
    experiment: str
    workdir: Path
    returncode: int
    output: str
    seconds: float
    preempted: dict[str, dict[str, int | str]]  # arm -> SLURM job id, checkpoint step seen, ...
    jobs: list[dict[str, str]]  # sacct rows of this run's jobs, every record (-D)

    def results(self) -> Path:
        return self.workdir / "results" / self.experiment

    def jobs_of(self, rule: str, wildcards: str = "") -> list[dict[str, str]]:
        """This run's jobs of ``rule`` for its base config with these other wildcards."""
        comment = job_comment(rule, self.experiment, wildcards)
        return [j for j in self.jobs if j["Comment"] == comment]

    def slurm_log(self, jobid: str) -> str:
        """SLURM's log of a job (kept for failed jobs)."""
        return next(self.workdir.glob(f".snakemake/slurm_logs/**/{jobid}.log")).read_text()


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


def common_args(workdir: Path, targets: list[str]) -> list[str]:
    return [
        str(BIN / "snakemake"),
        *targets,  # first: options that take several values would take them too
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        "--profile",
        str(PROFILE_DIR),
        # the profile's 20 s suits a real cluster; a tiny test workflow wants answers sooner
        # (the plugin checks again after 1 s, then 10 s more each time no job has finished)
        "--slurm-init-seconds-before-status-checks",
        "1",
    ]


def snakemake_args(workdir: Path, *extra: str) -> list[str]:
    targets = [f"results/{EXP}/rl/{init}/seed-0/policy.pt" for init in ("bc", "scratch")]
    return [
        *common_args(workdir, targets),
        # the test config, then the RL budget on top (nested `--config rl=...` values would
        # reach the config as strings: Snakemake parses them with YAML's BaseLoader)
        "--configfile",
        str(TEST_CONFIG),
        str(overlay_config(workdir)),
        *profile_resources(["train_bc:gpu=1", f"train_rl:runtime={RL_RUNTIME}"]),
        "--set-threads",
        "train_bc=2",
        *extra,
    ]


def overlay_config(workdir: Path) -> Path:
    path = workdir / "rl-budget.yaml"
    path.write_text(yaml.safe_dump({"rl": RL_OVERRIDE}))
    return path


def oom_args(workdir: Path, *extra: str) -> list[str]:
    """One collection shard (OOM_TARGET) of the memory-hungry task, with the profile's
    resources."""
    spec = {
        "experiment": OOM_EXP,
        "seed": 7,
        "task": {
            "env_id": "user_tasks:MemoryHungry-v0",
            "env_kwargs": {"alloc_mb": HUNGRY_MB},
            "expert": {"entry_point": "user_tasks:zero_expert", "kwargs": {}},
        },
        "collect": {"n_episodes": 2, "n_shards": 1, "n_envs": 1},
    }
    path = workdir / "oom.yaml"
    path.write_text(yaml.safe_dump(untracked(spec)))
    args = [*common_args(workdir, [OOM_TARGET]), "--configfile", str(path)]
    return [*args, *profile_resources([]), *extra]


def tracking_uri(workdir: Path) -> str:
    """Not the default store: proves MLFLOW_TRACKING_URI reaches the SLURM jobs."""
    return f"sqlite:///{workdir / 'tracking' / 'mlflow.db'}"


def run_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEMO2RL_"))}
    env.pop("SLURM_CONF", None)  # the cluster's slurm.conf is where SLURM looks by default
    # tests/ on the path: user_tasks, the memory-hungry task (sbatch --export=ALL passes it on)
    path = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return env | {"MLFLOW_TRACKING_URI": tracking_uri(workdir), "PYTHONPATH": path}


def slurm(*args: str) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, check=True).stdout


def job_comment(rule: str, experiment: str = EXP, wildcards: str = "") -> str:
    """The comment the SLURM plugin gives a job: its rule and its wildcards' values joined by
    ``_`` (the first, ``root``, the base config's results directory, with ``/`` as ``_``)."""
    root = f"results/{experiment}".replace("/", "_")
    return f"rule_{rule}_wildcards_{root}" + (f"_{wildcards}" if wildcards else "")


def running_job(workdir: Path, comment: str) -> str | None:
    """The SLURM id of this run's running job with this comment (rule and wildcards)."""
    for line in slurm("squeue", "-h", "-o", "%i|%k|%T|%Z").splitlines():
        jobid, job_comment, state, job_workdir = line.split("|")
        if job_comment == comment and state == "RUNNING" and Path(job_workdir) == workdir:
            return jobid
    return None


def job_state(jobid: str) -> str:
    """The job's state in squeue ("" once it has left the queue)."""
    proc = subprocess.run(["squeue", "-h", "-j", jobid, "-o", "%T"], capture_output=True, text=True)
    return proc.stdout.strip()


class Requeued:
    """Requeues an RL job once its run has a checkpoint of PREEMPT_AFTER steps, as a preemption
    with PreemptMode=REQUEUE does, and sees it start again."""

    def __init__(self, workdir: Path, init: str) -> None:
        self.workdir, self.init = workdir, init
        self.jobid: str | None = None
        self.seen: dict[str, int | str] = {}
        self.requeued_at = 0.0

    def poll(self) -> dict[str, int | str] | None:
        """One look; returns what it saw once the job runs again."""
        if self.jobid is None:
            state_dir = self.workdir / "results" / EXP / "rl" / self.init / "seed-0" / "state"
            step = checkpointed_step(state_dir)
            jobid = running_job(self.workdir, job_comment("train_rl", wildcards=f"{self.init}_0"))
            if step >= PREEMPT_AFTER and jobid is not None:
                slurm("scontrol", "requeue", jobid)
                self.jobid, self.requeued_at = jobid, time.monotonic()
                self.seen = {"jobid": int(jobid), "step": step}
            return None
        # SLURM holds a requeued batch job back for about two minutes before it may start
        # again; once it is pending, lift that hold (as an admin may): no minutes to spare here
        state = slurm("squeue", "-h", "-j", self.jobid, "-o", "%T|%r").strip()
        if state == "PENDING|BeginTime":
            update = ["scontrol", "update", f"jobid={self.jobid}", "StartTime=now"]
            subprocess.run(update, check=False, capture_output=True)
        elif state and not state.startswith(("PENDING", "COMPLETING", "REQUEUE")):
            return self.seen  # running again
        if time.monotonic() - self.requeued_at > REQUEUE_WAIT:
            raise AssertionError(
                f"requeued job {self.jobid} did not start again within {REQUEUE_WAIT} s"
            )
        return None


def trainer_pids(jobid: str) -> list[int]:
    """The job's RL trainer: the process that runs the rule's script (Snakemake runs it as
    .snakemake/scripts/tmp*.run_stage.py), not the Snakemake process around it."""
    pids = []
    for line in slurm("scontrol", "listpids", jobid).splitlines()[1:]:
        pid = int(line.split()[0])
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        # python .../tmpXXXX.run_stage.py (not the shell that Snakemake starts it with)
        if len(argv) > 1 and argv[1].endswith(b".run_stage.py") and b"python" in argv[0]:
            pids.append(pid)
    return pids


def tracking_store(workdir: Path) -> Path:
    return Path(tracking_uri(workdir).removeprefix("sqlite:///"))


def wait_stopped(pids: list[int]) -> None:
    """Until each of ``pids`` has stopped (state T in /proc/<pid>/stat) or is gone: SIGSTOP is
    delivered asynchronously, and a process still running may yet take a lock."""
    deadline = time.monotonic() + 60  # a bound on a hang, not a speed
    while time.monotonic() < deadline:
        states = []
        for pid in pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            states.append(stat.rpartition(")")[2].split()[0])  # after "(comm)": the state
        if all(state in ("T", "t", "Z", "X") for state in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"processes {pids} did not stop within 60 s of SIGSTOP")


def holds_lock_on(pids: list[int], path: Path) -> bool:
    """Whether one of ``pids`` holds a lock (SQLite's fcntl locks) on the file ``path``."""
    try:
        inode = path.stat().st_ino
    except FileNotFoundError:
        return False
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()  # "1: POSIX ADVISORY WRITE <pid> <maj>:<min>:<inode> <start> <end>"
        if len(fields) < 8 or fields[1] == "->":  # "->": waiting for the lock, not holding it
            continue
        if int(fields[4]) in pids and int(fields[5].rsplit(":", 1)[1]) == inode:
            return True
    return False


class PastTimeLimit:
    """Holds an RL job past its time limit: once the run has a checkpoint of PREEMPT_AFTER
    steps, its trainer is stopped (SIGSTOP), so that this attempt cannot finish in time however
    fast the machine, and the job's time limit is cut to TIME_LIMIT (as an admin may, with
    scontrol); when SLURM ends the job for its time limit (it leaves RUNNING), the trainer goes
    on (SIGCONT) and receives SLURM's SIGTERM, as a trainer still running would."""

    def __init__(self, workdir: Path, init: str) -> None:
        self.workdir, self.init = workdir, init
        self.jobid: str | None = None
        self.pids: list[int] = []
        self.seen: dict[str, int | str] = {}
        self.stopped_at = 0.0

    def poll(self) -> dict[str, int | str] | None:
        """One look; returns what it saw once the job has been let go."""
        if self.jobid is None:
            state_dir = self.workdir / "results" / EXP / "rl" / self.init / "seed-0" / "state"
            step = checkpointed_step(state_dir)
            if step < PREEMPT_AFTER:
                return None
            jobid = running_job(self.workdir, job_comment("train_rl", wildcards=f"{self.init}_0"))
            pids = trainer_pids(jobid) if jobid is not None else []
            if not pids:
                return None
            self.signal(pids, signal.SIGSTOP)
            wait_stopped(pids)  # (a lock taken between the signal and the stop counts too)
            if holds_lock_on(pids, tracking_store(self.workdir)):
                # stopped inside a tracking call: every other job's tracking would wait for it
                self.signal(pids, signal.SIGCONT)
                return None
            slurm("scontrol", "update", f"JobId={jobid}", f"TimeLimit={TIME_LIMIT}")
            self.jobid, self.pids, self.stopped_at = jobid, pids, time.monotonic()
            self.seen = {"jobid": int(jobid), "step": step}
            return None
        waited = time.monotonic() - self.stopped_at
        state = job_state(self.jobid)
        if state == "RUNNING" and waited < TIME_LIMIT_WAIT:
            return None
        self.signal(self.pids, signal.SIGCONT)
        self.seen |= {"state_when_let_go": state, "stopped_s": round(waited)}
        return self.seen

    def release(self) -> None:
        """Let the trainer go whatever happened (the run is being stopped)."""
        if self.pids:
            self.signal(self.pids, signal.SIGCONT)

    @staticmethod
    def signal(pids: list[int], sig: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


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


SACCT_FIELDS = "JobID,JobName,Comment,State,ExitCode,ReqTRES,AllocTRES,Timelimit,ReqCPUS,ReqMem"
SACCT_FIELDS += ",Account,Partition,WorkDir,Start"


def sacct(*args: str) -> list[dict[str, str]]:
    out = slurm("sacct", "-D", "-P", "-n", "-o", SACCT_FIELDS, *args).splitlines()
    names = SACCT_FIELDS.split(",")
    return [dict(zip(names, line.split("|"), strict=True)) for line in out]


def sacct_rows(workdir: Path) -> list[dict[str, str]]:
    rows = sacct("-X", "-S", "now-1days", "-E", "now")
    return [r for r in rows if r["WorkDir"] and Path(r["WorkDir"]) == workdir]


def job_steps(jobid: str) -> dict[str, dict[str, str]]:
    """sacct's records of a job's steps by step name (batch, 0, ...), its last run's."""
    return {r["JobID"].split(".", 1)[1]: r for r in sacct("-j", jobid) if "." in r["JobID"]}


@dataclasses.dataclass
class Launched:
    experiment: str
    workdir: Path
    proc: subprocess.Popen
    log_path: Path
    start: float

    def finish(self, preempted: dict[str, dict[str, int | str]]) -> SlurmRun:
        seconds = time.perf_counter() - self.start
        output = self.log_path.read_text()
        print(
            f"snakemake on SLURM ({self.experiment}): {seconds:.0f} s, exit {self.proc.returncode}"
        )
        jobs = sacct_rows(self.workdir)
        return SlurmRun(
            self.experiment, self.workdir, self.proc.returncode, output, seconds, preempted, jobs
        )


def launch(experiment: str, workdir: Path, args: list[str]) -> Launched:
    log_path = workdir / "snakemake.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=run_env(workdir),
        )
    return Launched(experiment, workdir, proc, log_path, time.perf_counter())


@pytest.fixture(scope="module")
def slurm_runs(slurm_cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, SlurmRun]:
    """The test config ("main": both RL jobs preempted mid-run, see the module doc) and the
    memory-hungry collection ("oom"), on the cluster at the same time."""
    main_dir, oom_dir = tmp_path_factory.mktemp("slurm"), tmp_path_factory.mktemp("slurm-oom")
    runs = {
        "main": launch(EXP, main_dir, snakemake_args(main_dir)),
        "oom": launch(OOM_EXP, oom_dir, oom_args(oom_dir)),
    }
    past_limit = PastTimeLimit(main_dir, "scratch")
    watches = {"bc": Requeued(main_dir, "bc"), "scratch": past_limit}
    preempted: dict[str, dict[str, int | str]] = {}
    start = time.perf_counter()
    try:
        while any(run.proc.poll() is None for run in runs.values()):
            if time.perf_counter() - start > RUN_TIMEOUT:
                tails = "\n".join(run.log_path.read_text()[-4000:] for run in runs.values())
                raise TimeoutError(f"snakemake on SLURM ran over {RUN_TIMEOUT} s:\n{tails}")
            # both RL jobs watched at once: neither may run on unseen
            for init, watch in watches.items():
                if init not in preempted and (seen := watch.poll()) is not None:
                    preempted[init] = seen
            time.sleep(0.2)
    finally:
        past_limit.release()
        for run in runs.values():
            if run.proc.poll() is None:
                stop_snakemake(run.proc, run.workdir)
    return {"main": runs["main"].finish(preempted), "oom": runs["oom"].finish({})}


@pytest.fixture(scope="module")
def slurm_run(slurm_runs: dict[str, SlurmRun]) -> SlurmRun:
    return slurm_runs["main"]


@pytest.fixture(scope="module")
def oom_run(slurm_runs: dict[str, SlurmRun]) -> SlurmRun:
    return slurm_runs["oom"]


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
    base_root = f"root=results/{slurm_run.experiment}"  # (a base config's job)
    for info in job_infos(slurm_run.output):
        found = [w for w in info.get("wildcards", "").split(", ") if w and w != base_root]
        if info["rule"] == rule and ", ".join(found) == wildcards:
            resources = dict(item.split("=", 1) for item in info["resources"].split(", "))
            return resources | {"threads": info.get("threads", "1")}
    raise AssertionError(f"no job of rule {rule} {wildcards} in Snakemake's output")


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


def assert_each_step_once(progress: pd.DataFrame) -> None:
    """A resumed run's progress has every logged step once, in order, up to the budget."""
    steps = progress["time/total_timesteps"]
    assert steps.is_monotonic_increasing and steps.is_unique, steps.tolist()
    assert steps.iloc[-1] == RL_STEPS


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
    assert_each_step_once(progress)


def test_rl_job_past_its_time_limit_is_resubmitted_with_more_memory_and_resumes(
    slurm_run: SlurmRun,
):
    """The scratch run's job, its time limit cut to one minute while its trainer is held at a
    checkpoint (see PastTimeLimit), is still training when the minute is up: SLURM ends it
    (TIMEOUT) with SIGTERM, the trainer checkpoints and exits 75, Snakemake resubmits it (the
    profile's retries, with the profile's doubled memory and the rule's four hours) and the new
    job resumes from the checkpoint and finishes."""
    assert "scratch" in slurm_run.preempted, "the scratch RL run finished before its time limit"
    seen = slurm_run.preempted["scratch"]
    # SLURM, not the test, ended the held job (the test only waits for it to leave RUNNING)
    assert seen["state_when_let_go"] != "RUNNING", f"no time limit after {seen['stopped_s']} s"
    records = slurm_run.jobs_of("train_rl", "scratch_0")
    assert [j["State"] for j in records] == ["TIMEOUT", "COMPLETED"], records
    assert records[0]["JobID"] == str(seen["jobid"])
    assert [j["Timelimit"] for j in records] == ["00:01:00", "04:00:00"]  # the cut, the rule's
    # the trainer caught SLURM's SIGTERM: its checkpoint, then exit status 75 (EX_TEMPFAIL), and
    # the Snakemake around it failed the job step (rather than SLURM killing it: status 0:9)
    step = job_steps(records[0]["JobID"])["0"]
    assert (step["State"], step["ExitCode"]) == ("FAILED", "1:0"), step
    slurm_log = slurm_run.slurm_log(records[0]["JobID"])
    assert "DUE TO TIME LIMIT" in slurm_log
    assert "SIGTERM: checkpoint at step" in slurm_log
    assert "returned non-zero exit status 75" in slurm_log
    # the profile's retries: the second attempt asks for twice the memory
    assert [j["ReqMem"] for j in records] == [
        f"{profile_mem_mb('train_rl', attempt)}M" for attempt in (1, 2)
    ]
    state, progress, starts = resumed_run(slurm_run, "scratch")
    assert state["resumed"] >= 1
    assert len(starts) >= 2 and starts[0] == 0 and starts[1] >= seen["step"]
    assert_each_step_once(progress)


def test_job_over_its_memory_is_killed_and_its_retry_with_more_memory_finishes(
    oom_run: SlurmRun,
):
    """A collection shard of a task that holds HUNGRY_MB: the first job, with the profile's
    memory for a first attempt, is killed for memory (its step OUT_OF_MEMORY where the cluster
    limits memory with cgroups, cancelled by jobacct_gather's OverMemoryKill elsewhere); the
    profile's retry asks for twice the memory and finishes."""
    assert oom_run.returncode == 0, oom_run.output[-6000:]
    assert (oom_run.workdir / OOM_TARGET).is_file()
    records = oom_run.jobs_of("collect_shard", "0")
    # the job fails as its step does (SLURM 22.05 records OUT_OF_MEMORY on the step killed; the
    # job, whose batch script then fails, is FAILED, or OUT_OF_MEMORY where the batch step was
    # the one over the limit), and its retry completes
    assert [j["State"] for j in records][1:] == ["COMPLETED"], records
    assert records[0]["State"] in ("FAILED", "OUT_OF_MEMORY"), records
    assert [j["ReqMem"] for j in records] == [
        f"{profile_mem_mb('collect_shard', attempt)}M" for attempt in (1, 2)
    ]
    assert profile_mem_mb("collect_shard", 1) < HUNGRY_MB < profile_mem_mb("collect_shard", 2)
    killed = job_steps(records[0]["JobID"])["0"]
    slurm_log = oom_run.slurm_log(records[0]["JobID"])
    if "task/cgroup" in slurm("scontrol", "show", "config"):
        assert killed["State"] == "OUT_OF_MEMORY", killed
        assert f"oom-kill event(s) in StepId={records[0]['JobID']}.0" in slurm_log, slurm_log
    else:
        assert f"StepId={records[0]['JobID']}.0 exceeded memory limit" in slurm_log, slurm_log


def test_slurm_dataset_and_clone_equal_the_local_runs(slurm_run: SlurmRun, test_workflow: Path):
    """The same config on the cluster and locally (conftest's session run, 2 cores; the SLURM
    run differs only in its RL budget): the same dataset (content hash) and the same clone,
    weight for weight, though BC ran there with 2 threads and a GPU request."""
    local = test_workflow / "results" / EXP
    hashes = []
    for results in (slurm_run.results(), local):
        with h5py.File(results / "demos" / "demos.h5", "r") as f:
            hashes.append(f.attrs["content_hash"])
    assert hashes[0] == hashes[1]
    clones = [
        torch.load(results / "bc" / "policy.pt", weights_only=False)
        for results in (slurm_run.results(), local)
    ]
    for clone in clones:  # the code's revision may differ (a commit in between): nothing else
        clone["meta"].pop("code_revision")
    assert clones[0]["meta"]["dataset_hash"] == hashes[0]
    assert_equal_trees(clones[0], clones[1])


def assert_equal_trees(a, b, path: str = "") -> None:
    """Equal nested dicts and lists, tensors bit for bit."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for key in a:
            assert_equal_trees(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), path
    else:
        assert a == b, path


# --------------------------------------------------------------------------------------------
# config variants on the cluster: a 2 x 2 grid beside the test config's own variant

GRID = {
    "rl.warm_start.critic_warmup_steps": [2048, 3072],
    "evaluate.confidence": [0.9, 0.8],
}
"""Two interval coverages by two warm-ups of the warm-start arm (one the test config's variant's):
4 variants, whose new jobs are one RL run (3072) and its evaluation, 4 summaries and the
comparison; the rest is the session run's (the base's and the named variant's)."""
assert CONFIG["variants"]["warmup-2048"]["rl"]["warm_start"]["critic_warmup_steps"] == 2048


@pytest.fixture(scope="module")
def grid_run(
    slurm_runs: dict[str, SlurmRun], test_workflow: Path, tmp_path_factory: pytest.TempPathFactory
) -> SlurmRun:
    """The grid on the cluster, on a copy of the session's local run (after the module's other
    runs: the cluster's two cores are theirs until then)."""
    workdir = copy_run(test_workflow, tmp_path_factory.mktemp("slurm-grid") / "run")
    spec = copy.deepcopy(CONFIG)
    spec["variants"]["grid"] = GRID
    path = workdir / "grid.yaml"
    path.write_text(yaml.safe_dump(untracked(spec)))
    targets = [f"results/{EXP}/report/{name}" for name in ("variants.json", "plots/variants.png")]
    args = [*common_args(workdir, targets), "--configfile", str(path), *profile_resources([])]
    launched = launch(EXP, workdir, args)
    try:
        launched.proc.wait(timeout=RUN_TIMEOUT)
    finally:
        if launched.proc.poll() is None:
            stop_snakemake(launched.proc, workdir)
    return launched.finish({})


def test_a_2x2_grid_of_variants_runs_as_slurm_jobs(grid_run: SlurmRun):
    assert grid_run.returncode == 0, grid_run.output[-6000:]
    report = json.loads((grid_run.results() / "report" / "variants.json").read_text())
    # named by the sorted keys' last parts, the first key's values varying slowest
    grid = [
        f"confidence-{coverage}_critic_warmup_steps-{steps}"
        for coverage in GRID["evaluate.confidence"]
        for steps in GRID["rl.warm_start.critic_warmup_steps"]
    ]
    assert [v["name"] for v in report["variants"]] == ["base", *CONFIG["variants"], *grid]
    # every job went through SLURM: each grid variant's summary, and the one new RL run (a
    # warm-up of 3072) and its evaluation as jobs of the first variant that has them; all else
    # (collection, BC, the other RL runs and evaluations) is the session run's
    comments = [j["Comment"] for j in grid_run.jobs]
    rules = {c.split("_wildcards_")[0].removeprefix("rule_") for c in comments}
    assert rules == {"train_rl", "evaluate", "summarize", "compare_variants", "plot_variants"}
    roots = [job_comment("summarize", f"{EXP}/variants/{name}") for name in grid]
    assert sorted(c for c in comments if c.startswith("rule_summarize")) == sorted(roots)
    first_3072 = f"{EXP}/variants/{grid[1]}"
    assert [c for c in comments if c.startswith("rule_train_rl")] == [
        job_comment("train_rl", first_3072, "bc_0")
    ]
    assert (grid_run.results() / "report" / "plots" / "variants.png").stat().st_size > 10_000
